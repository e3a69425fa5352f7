//! A quota whose calendar comes from descriptors against the same quota in one fixed calendar,
//! side by side in one run: what reading the zone and anchor per request costs a decision.
//!
//! `cargo bench -p floodgate --bench calendars`
//!
//! Single thread, the engine's synchronous path on the memory store: 1000 tenants, each with its
//! own zone (one of eight) and billing day (one of four), visited in turn. The fixed peer sends
//! the same descriptors to a rule with one calendar.

use std::hint::black_box;
use std::num::NonZeroU64;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use floodgate::{CalendarBy, Descriptors, Engine, FromDescriptor, Policy, Rule};
use floodgate_core::calendar::Period;
use floodgate_core::{Calendar, Quota};

const ZONES: [&str; 8] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Tokyo",
    "Australia/Sydney",
    "America/Sao_Paulo",
    "Asia/Kolkata",
    "Africa/Lagos",
];
const DAYS: [&str; 4] = ["1", "8", "15", "28"];

fn tenants(n: usize) -> Vec<Descriptors> {
    (0..n)
        .map(|i| {
            Descriptors::new()
                .with("tenant", format!("tenant-{i}"))
                .with("tz", ZONES[i % ZONES.len()])
                .with("billing_day", DAYS[i / ZONES.len() % DAYS.len()])
        })
        .collect()
}

fn engine(by_descriptor: bool) -> Engine {
    let quota =
        Quota::new(NonZeroU64::new(u64::MAX / 2).unwrap(), Calendar::utc(Period::Month { anchor_day: 1 }));
    let mut rule = Rule::new("monthly", quota).key(["tenant"]);
    if by_descriptor {
        rule = rule.calendar_by(
            CalendarBy::new()
                .time_zone(FromDescriptor::new("tz").default("UTC"))
                .anchor(FromDescriptor::new("billing_day").default("1")),
        );
    }
    Engine::in_memory(Policy::new([rule]).unwrap())
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it, as a
    // quick smoke test.
    let measuring = std::env::args().any(|a| a == "--bench");
    let (warm_up, measurement) = if measuring {
        (Duration::from_secs(1), Duration::from_secs(5))
    } else {
        (Duration::from_millis(50), Duration::from_millis(200))
    };
    let mut c =
        Criterion::default().configure_from_args().warm_up_time(warm_up).measurement_time(measurement);
    let tenants = tenants(1000);
    let mut group = c.benchmark_group("quota-check/1000-tenants");
    group.throughput(Throughput::Elements(1));
    for (name, by_descriptor) in [("fixed-calendar", false), ("calendar-by-descriptor", true)] {
        let engine = engine(by_descriptor);
        let mut i = 0;
        group.bench_function(BenchmarkId::new("floodgate", name), |b| {
            b.iter(|| {
                i = (i + 1) % tenants.len();
                let verdict = engine.check_now(&tenants[i], 1).expect("the memory store answers at once");
                black_box(verdict.expect("a valid request").allowed)
            })
        });
    }
    group.finish();
    c.final_summary();
}
