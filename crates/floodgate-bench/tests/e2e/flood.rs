//! `flood` on the memory store, briefly: 10 limited users spend their limit, then 1 s of known
//! users alone, then 1 s of a flood of new keys beside them and the newcomers joining, on a table
//! of 200 keys; over HTTP, and over Envoy RLS.
//!
//! It asserts only what holds whatever a full memory store does with new keys (one overflow
//! counter per rule, or many chosen by a keyed hash): the counts add up, the known users — whose
//! keys the table already holds — are never rejected, the limited users are never freed (a full
//! table evicts no live counter), the flood sent what it was asked to, and the table stays
//! bounded. (The flood waits for every known user's first decision, so no stall of
//! the machine can turn a known user into a newcomer.) How much the newcomers are hurt is what the scenario measures, and it
//! depends on that design; it is not asserted. No assertion depends on timing: an open loop sends
//! (or drops, as an error) every scheduled request, however slow the machine.

use serde_json::Value;

use super::{assert_common, bench, f, u};

/// What the table may hold beyond `max_keys`: the overflow counters (one per rule with a single
/// shared counter; with counters chosen by a keyed hash, at most one per overflowed key, and the
/// flood here sends 2 000 keys).
const OVERFLOW_ALLOWANCE: u64 = 4096;

/// A phase adds up: normal users' `allowed + denied + errors = sent = known + newcomers`, their
/// rejections are the known users' and the newcomers', and the flood's counts add up too.
fn assert_phase_adds_up(name: &str, p: &Value) {
    let by_kind = |errors: &Value| -> u64 {
        errors["by_kind"].as_object().unwrap().values().filter_map(Value::as_u64).sum()
    };
    let errors = u(&p["errors"], "total");
    assert_eq!(u(p, "allowed") + u(p, "denied") + errors, u(p, "sent"), "{name}: {p}");
    assert_eq!(by_kind(&p["errors"]), errors, "{name}: {p}");
    assert_eq!(u(p, "known_sent") + u(p, "newcomer_sent"), u(p, "sent"), "{name}: {p}");
    assert_eq!(
        u(p, "known_false_rejections") + u(p, "newcomer_false_rejections"),
        u(p, "false_rejections"),
        "{name}: {p}"
    );
    assert!(u(p, "false_rejections") <= u(p, "denied") + errors, "{name}: {p}");
    let flood_errors = u(&p["flood_errors"], "total");
    assert_eq!(by_kind(&p["flood_errors"]), flood_errors, "{name}: {p}");
    assert_eq!(
        u(p, "flood_allowed") + u(p, "flood_denied") + flood_errors,
        u(p, "flood_sent"),
        "{name}: {p}"
    );
}

/// The limited users' exhaustion and probes add up, and no probe was admitted: `phase`'s
/// `limited_*` fields, and the run's.
fn assert_limited_users_never_freed(v: &Value, users: u64, limit: u64, probes: u64) {
    assert_eq!(u(v, "limited_users"), users, "{v}");
    // Every limit was spent as asked: `limit` admitted, then one denied, in a table with room.
    assert_eq!(u(v, "limited_users_exhausted"), users, "{v}");
    for field in
        ["limited_users_denied_before_limit", "limited_users_admitted_past_limit", "limited_users_failed"]
    {
        assert_eq!(u(v, field), 0, "{field}: {v}");
    }
    assert_eq!(
        (u(v, "limited_exhaust_sent"), u(v, "limited_exhaust_allowed"), u(v, "limited_exhaust_denied")),
        (users * (limit + 1), users * limit, users)
    );
    // Every probe is counted: in its phase, or apart if the exhaustion ran so late that the rule's
    // own reset came within the run.
    let (before, during) = (&v["phases"]["before"], &v["phases"]["during"]);
    let in_phases = u(before, "limited_probes_sent") + u(during, "limited_probes_sent");
    assert_eq!(in_phases, u(v, "limited_probes_sent"), "{v}");
    assert_eq!(in_phases + u(v, "limited_probes_after_reset"), probes, "{v}");
    for (name, p) in [("before", before), ("during", during)] {
        assert_eq!(u(p, "limited_probes_admitted"), 0, "{name}: {p}");
        assert_eq!(u(p, "limited_users_freed"), 0, "{name}: {p}");
        let errors = u(&p["limited_probe_errors"], "total");
        assert_eq!(u(p, "limited_probes_denied") + errors, u(p, "limited_probes_sent"), "{name}: {p}");
    }
    assert_eq!((u(v, "limited_probes_admitted"), u(v, "limited_users_freed")), (0, 0), "{v}");
    assert_eq!(f(v, "limited_users_freed_share"), 0.0, "{v}");
    assert!(f(v, "limited_reset_at_ms") > 0.0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_keys_never_rejects_known_users_nor_frees_limited_ones_and_the_table_stays_bounded() {
    flood_on_memory("http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_envoy_rls_a_flood_of_new_keys_never_rejects_known_users_nor_frees_limited_ones() {
    flood_on_memory("grpc").await;
}

async fn flood_on_memory(transport: &str) {
    // 40 users (20 known, 20 newcomers) at 2 requests a second each, far under 100 a minute; 10
    // limited users probing twice a second: 40 probes.
    let v = bench(&[
        "flood",
        "--transport",
        transport,
        "--limited-users",
        "10",
        "--limited-probe-rate",
        "2",
        "--max-keys",
        "200",
        "--users",
        "40",
        "--normal-rate",
        "80",
        "--flood-rate",
        "2000",
        "--before",
        "1s",
        "--during",
        "1s",
    ])
    .await;
    assert_common(&v, "flood");
    assert_eq!((v["peer"].as_str(), v["transport"].as_str()), (Some("floodgate"), Some(transport)));
    assert!(v.get("peer_version").is_none(), "{v}");
    assert_eq!((v["store"].as_str(), u(&v, "max_keys")), (Some("memory"), 200));
    assert_eq!(v["store_section"], "kind: memory, max_keys: 200, on_full: aggregate");
    assert_eq!((u(&v, "known_users"), u(&v, "newcomers"), f(&v, "per_user_rate")), (20, 20, 2.0));

    let (before, during) = (&v["phases"]["before"], &v["phases"]["during"]);
    assert_phase_adds_up("before", before);
    assert_phase_adds_up("during", during);
    // Known users alone, then with the newcomers, who join one every 50 ms and send every 500 ms
    // (the first ten twice, the others once): every scheduled request is counted, in its phase.
    assert_eq!((u(before, "known_sent"), u(before, "newcomer_sent"), u(before, "flood_sent")), (40, 0, 0));
    assert_eq!(
        (u(during, "known_sent"), u(during, "newcomer_sent"), u(during, "flood_sent")),
        (40, 30, 2000)
    );
    assert_eq!(u(&v, "sent"), u(before, "sent") + u(during, "sent"));
    assert_eq!(u(&v, "flood_sent"), 2000);
    assert_eq!((f(before, "from_ms"), f(before, "to_ms"), f(during, "to_ms")), (0.0, 1000.0, 2000.0));

    // The known users' keys are in the table before the flood: it never rejects them.
    for (name, p) in [("before", before), ("during", during)] {
        assert_eq!(u(p, "known_false_rejections"), 0, "{name}: {p}");
        assert_eq!(u(p, "known_users_with_a_rejection"), 0, "{name}: {p}");
    }
    assert_eq!(f(&v, "known_false_rejection_rate"), 0.0, "{v}");
    assert!((0.0..=1.0).contains(&f(&v, "newcomer_false_rejection_rate")), "{v}");
    assert!(u(during, "newcomers_with_a_rejection") <= 20, "{during}");
    assert_limited_users_never_freed(&v, 10, 100, 40);

    // The table held the known users as the flood started (it waits for their first decisions),
    // kept them, and stayed bounded.
    assert_eq!(v["keys_from"], "floodgate_keys");
    let (at, after) = (u(&v, "keys_before_flood"), u(&v, "keys_after_flood"));
    let known = u(&v, "known_users_decided_before_flood");
    assert!(
        known <= 20 && (known + 10..=200).contains(&at),
        "{known} known users and 10 limited ones, {at} keys as the flood started"
    );
    assert_eq!(v["rss_from"], "bench_process");
    assert!(at <= after && after <= 200 + OVERFLOW_ALLOWANCE, "keys after the flood: {after}");
    assert!(u(&v, "rss_before_flood_bytes") > 0 && u(&v, "rss_after_flood_bytes") > 0, "{v}");
    // The store's own estimate of its memory stays within the configured bound: 200 keys and
    // the rule's 65 536 overflow counters, 120 bytes each.
    assert_eq!(u(&v, "memory_bound_bytes"), (200 + 65_536) * 120);
    let (bytes_at, bytes_after) = (u(&v, "store_bytes_before_flood"), u(&v, "store_bytes_after_flood"));
    assert!(0 < bytes_at && bytes_at <= bytes_after, "{bytes_at} then {bytes_after} bytes");
    assert!(bytes_after <= u(&v, "memory_bound_bytes"), "{bytes_after} bytes: {v}");
    assert_eq!(v["memory_within_bound"], true);
    assert!(u(&v, "overflow_counters_after_flood") <= 2000, "at most one counter per flood key: {v}");
    // Present or not (a server may not export the series), the overflow decisions read cleanly.
    let series: u64 = v["overflow_decisions"].as_object().unwrap().values().filter_map(Value::as_u64).sum();
    assert_eq!(series, u(&v, "overflow_decisions_total"));
    assert!(v.get("redis_bytes_per_key").is_none(), "{v}");
}
