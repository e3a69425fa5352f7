//! Quota calendars per tenant: a quota's time zone and anchor read from descriptors, on a manual
//! clock.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{CalendarBy, Descriptors, EngineError, FromDescriptor, Policy, Rule, RuleError};
use floodgate_core::calendar::Period;
use floodgate_core::{Calendar, FixedWindow, Quota, Timestamp};

use super::{engine, nz, request};

/// An instant written in UTC, such as `"2024-03-31T01:00:00Z"`.
fn utc(text: &str) -> Timestamp {
    let t: jiff::Timestamp = text.parse().expect("an instant");
    Timestamp::from_micros(u64::try_from(t.as_microsecond()).expect("after the epoch"))
}

fn quota(limit: u64, period: Period) -> Quota {
    Quota::new(NonZeroU64::new(limit).expect("not zero"), Calendar::utc(period))
}

/// `limit` a day per tenant, in the zone the `tz` descriptor names.
fn daily_by_zone(limit: u64) -> Rule {
    Rule::new("daily", quota(limit, Period::Day))
        .key(["tenant"])
        .calendar_by(CalendarBy::new().time_zone(FromDescriptor::new("tz")))
}

fn tenant(name: &str, tz: &str) -> Descriptors {
    request(&[("tenant", name), ("tz", tz)])
}

#[tokio::test]
async fn two_tenants_in_different_zones_renew_at_their_own_midnight() {
    let (engine, clock) = engine([daily_by_zone(2)]);
    clock.set(utc("2024-05-17T12:00:00Z"));
    let berlin = tenant("b", "Europe/Berlin");
    let tokyo = tenant("t", "Asia/Tokyo");
    for t in [&berlin, &tokyo] {
        for _ in 0..2 {
            assert!(engine.check(t, 1).await.unwrap().allowed);
        }
    }
    let denied = engine.check(&berlin, 1).await.unwrap();
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(10 * 3600)), "Berlin's midnight is 22:00Z");
    let denied = engine.check(&tokyo, 1).await.unwrap();
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(3 * 3600)), "Tokyo's midnight is 15:00Z");

    clock.set(utc("2024-05-17T15:00:00Z"));
    assert!(engine.check(&tokyo, 1).await.unwrap().allowed, "a new day in Tokyo");
    assert!(!engine.check(&berlin, 1).await.unwrap().allowed, "still the same day in Berlin");
    clock.set(utc("2024-05-17T22:00:00Z"));
    assert!(engine.check(&berlin, 1).await.unwrap().allowed, "a new day in Berlin");

    let policy = engine.policy();
    let usage = policy.usage(engine.store(), "daily", &berlin).await.unwrap();
    assert_eq!(usage.period, Some((utc("2024-05-17T22:00:00Z"), utc("2024-05-18T22:00:00Z"))));
    assert_eq!((usage.used, usage.remaining), (1, 1));
    let usage = policy.usage(engine.store(), "daily", &tokyo).await.unwrap();
    assert_eq!(usage.period, Some((utc("2024-05-17T15:00:00Z"), utc("2024-05-18T15:00:00Z"))));
}

#[tokio::test]
async fn a_daylight_saving_day_is_23_hours_in_berlin_and_24_in_new_york() {
    let (engine, clock) = engine([daily_by_zone(5)]);
    // Berlin moved its clocks forward on 31 March 2024; New York already had, on 10 March.
    clock.set(utc("2024-03-31T10:00:00Z"));
    let berlin = engine.check(&tenant("b", "Europe/Berlin"), 1).await.unwrap();
    assert_eq!(berlin.limits[0].window, Duration::from_secs(23 * 3600));
    let new_york = engine.check(&tenant("n", "America/New_York"), 1).await.unwrap();
    assert_eq!(new_york.limits[0].window, Duration::from_secs(24 * 3600));
    let policy = engine.policy();
    let usage = policy.usage(engine.store(), "daily", &tenant("b", "europe/berlin")).await.unwrap();
    assert_eq!(usage.period, Some((utc("2024-03-30T23:00:00Z"), utc("2024-03-31T22:00:00Z"))));
    assert_eq!(usage.used, 1, "the zone's name matches without regard to case; the key is the tenant");
}

#[tokio::test]
async fn a_billing_day_by_descriptor_starts_each_tenants_month_and_defaults_to_the_first() {
    let monthly = Rule::new("monthly", quota(1, Period::Month { anchor_day: 1 }))
        .key(["tenant"])
        .calendar_by(CalendarBy::new().anchor(FromDescriptor::new("billing_day").default("1")));
    let (engine, clock) = engine([monthly]);
    clock.set(utc("2024-05-10T12:00:00Z"));
    let on_15th = request(&[("tenant", "a"), ("billing_day", "15")]);
    let on_1st = request(&[("tenant", "b")]);
    assert!(engine.check(&on_15th, 1).await.unwrap().allowed);
    assert!(engine.check(&on_1st, 1).await.unwrap().allowed);
    let policy = engine.policy();
    let usage = policy.usage(engine.store(), "monthly", &on_15th).await.unwrap();
    assert_eq!(usage.period, Some((utc("2024-04-15T00:00:00Z"), utc("2024-05-15T00:00:00Z"))));
    let usage = policy.usage(engine.store(), "monthly", &on_1st).await.unwrap();
    assert_eq!(usage.period, Some((utc("2024-05-01T00:00:00Z"), utc("2024-06-01T00:00:00Z"))));

    clock.set(utc("2024-05-15T00:00:00Z"));
    assert!(engine.check(&on_15th, 1).await.unwrap().allowed, "billed on the 15th: a new month");
    assert!(!engine.check(&on_1st, 1).await.unwrap().allowed, "billed on the 1st: the same month");
}

#[tokio::test]
async fn a_value_that_is_no_zone_or_anchor_is_an_error_naming_the_descriptor_and_the_value() {
    let rule = Rule::new("weekly", quota(10, Period::Week { starts_on: jiff::civil::Weekday::Monday }))
        .key(["tenant"])
        .calendar_by(
            CalendarBy::new()
                .time_zone(FromDescriptor::new("tz").default("UTC"))
                .anchor(FromDescriptor::new("week_starts").default("mon")),
        );
    let (engine, _) = engine([rule]);
    let cases = [
        (request(&[("tenant", "a"), ("tz", "Mars/Olympus")]), "\"tz\"", "\"Mars/Olympus\"", "IANA time zone"),
        (request(&[("tenant", "a"), ("tz", "")]), "\"tz\"", "\"\"", "IANA time zone"),
        (request(&[("tenant", "a"), ("tz", "../../etc/passwd")]), "\"tz\"", "etc/passwd", "IANA time zone"),
        (request(&[("tenant", "a"), ("tz", "Etc/Unknown")]), "\"tz\"", "\"Etc/Unknown\"", "IANA time zone"),
        (
            request(&[("tenant", "a"), ("week_starts", "someday")]),
            "\"week_starts\"",
            "\"someday\"",
            "weekday",
        ),
        (request(&[("tenant", "a"), ("week_starts", "15")]), "\"week_starts\"", "\"15\"", "weekday"),
    ];
    for (descriptors, descriptor, value, expected) in cases {
        match engine.check(&descriptors, 1).await {
            Err(e @ EngineError::Descriptor { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains("\"weekly\"")
                        && text.contains(descriptor)
                        && text.contains(value)
                        && text.contains(expected),
                    "{text}"
                );
            }
            other => panic!("{descriptors:?}: {other:?}"),
        }
    }
    assert_eq!(engine.store().stats().keys, 0, "nothing was counted");
    let sunday = request(&[("tenant", "a"), ("tz", "Pacific/Auckland"), ("week_starts", "Sunday")]);
    assert!(engine.check(&sunday, 1).await.unwrap().allowed);
}

#[tokio::test]
async fn a_missing_descriptor_without_a_default_is_an_error_and_mapped_values_refuse_others() {
    let rule =
        Rule::new("daily", quota(10, Period::Day)).key(["tenant"]).calendar_by(CalendarBy::new().time_zone(
            FromDescriptor::new("region").value("eu", "Europe/Berlin").value("us", "America/New_York"),
        ));
    let (engine, clock) = engine([rule]);
    match engine.check(&request(&[("tenant", "a")]), 1).await {
        Err(e @ EngineError::MissingDescriptor { .. }) => {
            assert!(e.to_string().contains("\"region\" is missing"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    match engine.check(&request(&[("tenant", "a"), ("region", "Europe/Berlin")]), 1).await {
        Err(e @ EngineError::Descriptor { .. }) => {
            assert!(e.to_string().contains("\"Europe/Berlin\", which is not one of the values"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A request not subject to the rule (no key) needs no calendar.
    assert!(engine.check(&request(&[]), 1).await.unwrap().limits.is_empty());
    clock.set(utc("2024-05-17T12:00:00Z"));
    let us = engine.check(&request(&[("tenant", "a"), ("region", "us")]), 10).await.unwrap();
    assert!(us.allowed);
    let denied = engine.check(&request(&[("tenant", "a"), ("region", "us")]), 1).await.unwrap();
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(16 * 3600)), "midnight in New York is 04:00Z");
}

#[tokio::test]
async fn a_refund_goes_back_to_the_period_of_its_own_calendar() {
    let (engine, clock) = engine([daily_by_zone(3)]);
    clock.set(utc("2024-05-17T21:30:00Z"));
    let berlin = tenant("b", "Europe/Berlin");
    let verdict = engine.check(&berlin, 3).await.unwrap();
    assert!(verdict.allowed);
    engine.refund(&berlin, &verdict).await.unwrap();
    let usage = engine.policy().usage(engine.store(), "daily", &berlin).await.unwrap();
    assert_eq!(usage.used, 0, "refunded to the Berlin day it was taken in");
}

#[test]
fn a_policy_refuses_settings_it_cannot_use() {
    let zone = |default: &str| CalendarBy::new().time_zone(FromDescriptor::new("tz").default(default));
    let daily = || Rule::new("q", quota(1, Period::Day));
    let refused = |rule: Rule| match Policy::new([rule]) {
        Err(RuleError::Calendar { reason, .. }) => reason,
        other => panic!("{other:?}"),
    };
    assert!(
        refused(daily().calendar_by(zone("Mars/Olympus"))).contains("unknown time zone \"Mars/Olympus\"")
    );
    let day_anchor = daily().calendar_by(CalendarBy::new().anchor(FromDescriptor::new("d")));
    assert!(refused(day_anchor).contains("anchor does not apply to period day"));
    let month = Rule::new("q", quota(1, Period::Month { anchor_day: 1 }));
    let bad_day = month.calendar_by(CalendarBy::new().anchor(FromDescriptor::new("d").value("x", "32")));
    assert!(refused(bad_day).contains("invalid anchor \"32\""));
    let window = FixedWindow::try_new(nz(1), Duration::from_secs(1)).unwrap();
    assert!(refused(Rule::new("w", window).calendar_by(zone("UTC"))).contains("for the quota algorithm"));
    let sharded = Rule::new("q", quota(4, Period::Day)).shards(2).calendar_by(zone("UTC"));
    assert!(refused(sharded).contains("shards"));
    assert!(Policy::new([daily().calendar_by(zone("Europe/Berlin"))]).is_ok());
}
