//! A quota's `time_zone` and `anchor` from a descriptor (`{by: tz, default: UTC}`): read onto the
//! rule and applied per tenant, and every mistake refused where it is written.

use std::time::Duration;

use floodgate_config as config;
use floodgate_core::{Clock, Timestamp};

use super::{START, engine, request};

/// A monthly quota of 2 per tenant, with `time_zone` and `anchor` as given.
fn monthly(time_zone: &str, anchor: &str) -> String {
    format!(
        "descriptors: [tz, billing_day, region]\nrules:\n  - name: monthly\n    key: [tenant]\n    algorithm: quota\n    \
         limit: 2\n    period: month\n    time_zone: {time_zone}\n    anchor: {anchor}\n"
    )
}

#[track_caller]
fn refused(text: &str, line: usize, column: usize, field: &str, says: &str) {
    let err = config::parse("calendar.yaml", text).expect_err("an invalid calendar");
    assert_eq!((err.line, err.column), (Some(line), Some(column)), "{}", err.message);
    assert_eq!(err.field.as_deref(), Some(field), "{}", err.message);
    assert!(err.message.contains(says), "{:?} does not say {says:?}", err.message);
}

#[tokio::test]
async fn one_rule_serves_tenants_in_their_own_zones_and_billing_days() {
    let text = monthly("{by: tz, default: UTC}", "{by: billing_day, default: 1}");
    let config = config::parse("calendar.yaml", &text).expect("a valid configuration");
    let rule = config.policy.rules().next().unwrap();
    let source = rule.calendar_source().expect("a calendar from descriptors");
    assert_eq!(source.time_zone_source().map(|f| f.descriptor()), Some("tz"));
    assert_eq!(source.anchor_source().map(|f| f.descriptor()), Some("billing_day"));

    // START is 2025-01-01T00:00:00Z: a new month in UTC, still 31 December in New York.
    let (engine, clock) = engine(config.policy);
    let utc = request(&[("tenant", "a")]);
    let new_york = request(&[("tenant", "b"), ("tz", "America/New_York")]);
    let on_15th = request(&[("tenant", "c"), ("billing_day", "15"), ("tz", "Europe/Paris")]);
    for t in [&utc, &new_york, &on_15th] {
        assert!(engine.check(t, 2).await.unwrap().allowed);
        assert!(!engine.check(t, 1).await.unwrap().allowed);
    }
    clock.set(Timestamp::from_secs(1_735_707_600)); // 2025-01-01T05:00:00Z: midnight in New York.
    assert!(engine.check(&new_york, 1).await.unwrap().allowed, "a new month in New York");
    assert!(!engine.check(&utc, 1).await.unwrap().allowed, "UTC's month began at START");
    let verdict = engine.check(&on_15th, 1).await.unwrap();
    // Paris (UTC+1) renews on 15 January at 00:00, 2025-01-14T23:00:00Z.
    let renewal = Timestamp::from_secs(1_736_895_600);
    assert_eq!(verdict.retry_after(), Some(renewal.saturating_since(clock.now())));
    assert!(START < renewal);
}

#[tokio::test]
async fn mapped_values_name_the_zone_and_the_fingerprint_changes_with_them() {
    let text = monthly("{by: region, values: {eu: Europe/Berlin, us: America/New_York}}", "1");
    let config = config::parse("calendar.yaml", &text).expect("a valid configuration");
    let (engine, _) = engine(config.policy);
    let us = request(&[("tenant", "a"), ("region", "us")]);
    let verdict = engine.check(&us, 1).await.unwrap();
    assert_eq!(verdict.limits[0].window, Duration::from_secs(31 * 24 * 3600), "December in New York");
    let unlisted = request(&[("tenant", "a"), ("region", "apac")]);
    let err = engine.check(&unlisted, 1).await.unwrap_err().to_string();
    assert!(err.contains("\"region\"") && err.contains("\"apac\""), "{err}");

    let other = monthly("{by: region, values: {eu: Europe/Paris, us: America/New_York}}", "1");
    let fixed = monthly("UTC", "1");
    let print = |t: &str| config::parse("calendar.yaml", t).unwrap().fingerprints["monthly"];
    assert_ne!(print(&text), print(&other));
    assert_ne!(print(&text), print(&fixed));
}

#[test]
fn every_mistake_is_refused_where_it_is_written() {
    let rule = "rules[0].time_zone";
    refused(
        &monthly("{by: tz, default: Mars/Olympus}", "1"),
        8,
        34,
        &format!("{rule}.default"),
        "unknown time zone \"Mars/Olympus\"",
    );
    refused(
        &monthly("{by: tz, values: {a: Europe/Berlin, b: Nowhere}}", "1"),
        8,
        55,
        &format!("{rule}.values.b"),
        "unknown time zone \"Nowhere\"",
    );
    refused(&monthly("{by: tz, values: {}}", "1"), 8, 33, &format!("{rule}.values"), "values is empty");
    refused(&monthly("{by: timezone}", "1"), 8, 21, &format!("{rule}.by"), "unknown descriptor \"timezone\"");
    refused(&monthly("{default: UTC}", "1"), 8, 16, &format!("{rule}.by"), "missing field \"by\"");
    refused(
        &monthly("{by: tz, fallback: UTC}", "1"),
        8,
        25,
        &format!("{rule}.fallback"),
        "unknown field \"fallback\"",
    );
    let anchor = "rules[0].anchor";
    refused(
        &monthly("UTC", "{by: billing_day, default: 32}"),
        9,
        40,
        &format!("{anchor}.default"),
        "invalid anchor \"32\"",
    );
    refused(
        &monthly("UTC", "{by: billing_day, values: {x: monday}}"),
        9,
        43,
        &format!("{anchor}.values.x"),
        "a day of the month",
    );
    let daily = "descriptors: [d]\nrules:\n  - name: q\n    algorithm: quota\n    limit: 2\n    period: day\n    anchor: {by: d}\n";
    refused(daily, 7, 13, "rules[0].anchor", "anchor does not apply to period day");
    let sharded = format!("{}    shards: 2\n", monthly("{by: tz, default: UTC}", "1"));
    refused(&sharded, 10, 13, "rules[0].shards", "descriptor");
}
