//! The memory store against `governor` (keyed, dashmap), side by side in one run.
//!
//! `cargo bench -p floodgate --bench memory_store`
//!
//! Single thread; 1, 10k and 1M keys visited in a fixed pseudo-random order (so large tables miss
//! the cache as they would in production); GCRA, token bucket and sliding window for Floodgate,
//! GCRA for governor (its only algorithm). Before the timings it prints the resident memory each
//! needs per key, measured as the growth of the process's RSS over a million keys.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use floodgate::store::{Applied, Mode, Op};
use floodgate::{Limit, MemoryConfig, MemoryStore, OnStoreError};
use floodgate_core::{Gcra, Rate, SlidingWindow, SystemClock, TokenBucket};
use governor::{Quota, RateLimiter};

/// Resident memory of this process, in bytes (Linux `/proc/self/statm`).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// The same names for both: `user-<n>`. Floodgate encodes them under the rule's scope.
fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user-{i}")).collect()
}

fn floodgate_keys(names: &[String]) -> (usize, Vec<Vec<u8>>) {
    let scope = b"8:per-user4:user".to_vec();
    let keys = names
        .iter()
        .map(|n| {
            let mut k = scope.clone();
            k.extend_from_slice(format!("{}:{n}", n.len()).as_bytes());
            k
        })
        .collect();
    (scope.len(), keys)
}

/// A fixed pseudo-random visiting order over `n` keys (xorshift), long enough to defeat caches.
fn order(n: usize) -> Vec<u32> {
    let len = n.clamp(1 << 16, 1 << 22);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as u32
        })
        .collect()
}

fn high_rate() -> Rate {
    // Fast enough that the benchmark exercises the allowed path, as most production traffic does.
    "1000000/s".parse().unwrap()
}

fn limits() -> Vec<(&'static str, Limit)> {
    let burst = std::num::NonZeroU64::new(1_000).unwrap();
    vec![
        ("gcra", Gcra::try_new(high_rate(), burst).unwrap().into()),
        ("token_bucket", TokenBucket::try_new(high_rate(), burst).unwrap().into()),
        (
            "sliding_window",
            SlidingWindow::try_new(std::num::NonZeroU64::new(u64::MAX / 4).unwrap(), Duration::from_secs(60))
                .unwrap()
                .into(),
        ),
    ]
}

fn governor_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1_000_000).unwrap()).allow_burst(NonZeroU32::new(1_000).unwrap())
}

fn bytes_per_key() {
    const N: usize = 1_000_000;
    let names = names(N);
    let (scope_len, keys) = floodgate_keys(&names);
    let key_bytes_fg: usize = keys.iter().map(Vec::len).sum::<usize>() / N;
    let key_bytes_gov: usize = names.iter().map(String::capacity).sum::<usize>() / N;

    let mut kept = Vec::new();
    for (name, limit) in limits() {
        let before = rss();
        let store = MemoryStore::with_config(MemoryConfig::default(), SystemClock::new());
        let mut out = Applied::default();
        for k in &keys {
            let op = Op {
                key: k,
                scope_len,
                limit: &limit,
                cost: 1,
                enforce: true,
                on_error: OnStoreError::FailOpen,
                prefetch: None,
                block_for: None,
            };
            store.apply_now(&[op], Mode::Check, &mut out).unwrap();
        }
        let used = (rss() - before) / N;
        println!(
            "bytes/key floodgate {name:<15} total {used:>4} B (incl. {key_bytes_fg} B key bytes, table included)"
        );
        kept.push(store); // freed memory would be reused by the next store and hide its growth
    }
    let before = rss();
    let limiter = RateLimiter::dashmap(governor_quota());
    for n in &names {
        let _ = limiter.check_key(n);
    }
    let used = (rss() - before) / N;
    println!(
        "bytes/key governor  gcra            total {used:>4} B (incl. {key_bytes_gov} B key bytes, table included)"
    );
}

fn bench(c: &mut Criterion, sizes: &[usize]) {
    for &n in sizes {
        let names = names(n);
        let (scope_len, keys) = floodgate_keys(&names);
        let order = order(n);
        let mut group = c.benchmark_group(format!("check/{n}-keys"));
        group.throughput(Throughput::Elements(1));

        for (name, limit) in limits() {
            group.bench_function(BenchmarkId::new("floodgate", name), |b| {
                // Filled here so that a filtered run only builds what it measures.
                let store = MemoryStore::with_config(MemoryConfig::default(), SystemClock::new());
                let mut out = Applied::default();
                for k in &keys {
                    let op = Op {
                        key: k,
                        scope_len,
                        limit: &limit,
                        cost: 1,
                        enforce: true,
                        on_error: OnStoreError::FailOpen,
                        prefetch: None,
                        block_for: None,
                    };
                    store.apply_now(&[op], Mode::Check, &mut out).unwrap();
                }
                let mut i = 0;
                b.iter(|| {
                    let k = &keys[order[i] as usize];
                    i = (i + 1) % order.len();
                    let op = Op {
                        key: k,
                        scope_len,
                        limit: &limit,
                        cost: 1,
                        enforce: true,
                        on_error: OnStoreError::FailOpen,
                        prefetch: None,
                        block_for: None,
                    };
                    store.apply_now(&[op], Mode::Check, &mut out).unwrap();
                    black_box(&out);
                })
            });
        }

        group.bench_function(BenchmarkId::new("governor", "gcra"), |b| {
            let limiter = RateLimiter::dashmap(governor_quota());
            for k in &names {
                let _ = limiter.check_key(k);
            }
            let mut i = 0;
            b.iter(|| {
                let k = &names[order[i] as usize];
                i = (i + 1) % order.len();
                let _ = black_box(limiter.check_key(k));
            })
        });

        group.bench_function(BenchmarkId::new("governor-foldhash", "gcra"), |b| {
            let limiter =
                RateLimiter::dashmap_with_hasher(governor_quota(), foldhash::fast::RandomState::default());
            for k in &names {
                let _ = limiter.check_key(k);
            }
            let mut i = 0;
            b.iter(|| {
                let k = &names[order[i] as usize];
                i = (i + 1) % order.len();
                let _ = black_box(limiter.check_key(k));
            })
        });
        group.finish();
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it, as a
    // quick smoke test of the benchmark code on small tables.
    let measuring = std::env::args().any(|a| a == "--bench");
    if measuring && std::env::var_os("FLOODGATE_BENCH_SKIP_MEMORY").is_none() {
        bytes_per_key();
    }
    let sizes: &[usize] = if measuring { &[1, 10_000, 1_000_000] } else { &[1, 100] };
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    bench(&mut c, sizes);
    c.final_summary();
}
