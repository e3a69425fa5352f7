//! A flood of a million distinct keys against a memory store capped at 10 000 keys (DESIGN.md
//! §12, docs/configuration.md "A full memory store"): newcomers after the flood are still
//! admitted, the keys limited before it stay limited, and memory stays within its bound.
//!
//! Its own test binary, one test, so that the resident memory it measures is its own.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Descriptors, Engine, MemoryConfig, MemoryStore, OnFull, Policy, Rule};
use floodgate_core::{FixedWindow, ManualClock, Timestamp};

const MAX_KEYS: usize = 10_000;
const FLOOD: usize = 1_000_000;
const LIMIT: u64 = 50;

/// The process's resident memory, in bytes.
fn resident() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kb * 1024
}

#[test]
fn a_million_distinct_keys_do_not_lock_out_newcomers_nor_free_the_limited() {
    let clock = ManualClock::new(Timestamp::from_secs(1_700_006_400));
    let config = MemoryConfig { max_keys: MAX_KEYS, on_full: OnFull::Aggregate, ..MemoryConfig::default() };
    let counters = config.overflow_counters;
    let store = MemoryStore::with_config(config, clock.clone());
    let per_user = FixedWindow::try_new(NonZeroU64::new(LIMIT).unwrap(), Duration::from_secs(3600)).unwrap();
    let engine = Engine::new(Policy::new([Rule::new("per-user", per_user).key(["user"])]).unwrap(), store);
    let check = |user: &str| {
        let descriptors = Descriptors::new().with("user", user);
        engine.check_now(&descriptors, 1).expect("the memory store decides at once").expect("a valid request")
    };
    let before = resident();

    // 100 users exhaust their hourly limit; 9 900 others fill the table.
    for u in 0..100 {
        for _ in 0..LIMIT {
            assert!(check(&format!("limited-{u}")).allowed);
        }
        assert!(!check(&format!("limited-{u}")).allowed);
    }
    for u in 0..MAX_KEYS - 100 {
        assert!(check(&format!("early-{u}")).allowed);
    }
    assert_eq!(engine.store().stats().keys, MAX_KEYS);

    // The flood: a million keys never seen before, one request each.
    let flood_admitted = (0..FLOOD).filter(|i| check(&format!("flood-{i}")).allowed).count();
    assert!(flood_admitted > FLOOD * 99 / 100, "{flood_admitted} of {FLOOD} flood requests admitted");

    // 1 000 newcomers, one request each.
    let admitted = (0..1000).filter(|i| check(&format!("newcomer-{i}")).allowed).count();
    assert!(admitted >= 990, "{admitted} of 1000 newcomers admitted after a flood of {FLOOD} keys");

    // Those limited before the flood are still limited, and the table still holds its keys.
    for u in 0..100 {
        assert!(!check(&format!("limited-{u}")).allowed, "limited-{u} was freed by the flood");
    }
    let stats = engine.store().stats();
    assert_eq!(stats.keys, MAX_KEYS, "no live key was evicted");
    assert!(stats.overflow_counters <= counters, "{} counters", stats.overflow_counters);
    let overflow = engine.store().overflow();
    assert_eq!(overflow.len(), 1);
    assert_eq!(
        overflow[0].decisions,
        (FLOOD + 1000) as u64,
        "every new key's request was an overflow decision"
    );

    // The documented bound (docs/configuration.md): 120 bytes per key and per counter, and the
    // store's own estimate within it.
    let bound = (MAX_KEYS + counters) * 120;
    assert!(stats.bytes_estimate <= bound, "estimate {} over the bound {bound}", stats.bytes_estimate);
    let grown = resident().saturating_sub(before);
    eprintln!(
        "{admitted}/1000 newcomers admitted; {} keys, {} counters, estimate {} B, resident +{grown} B, bound {bound} B",
        stats.keys, stats.overflow_counters, stats.bytes_estimate
    );
    assert!(grown <= bound * 2, "resident memory grew {grown} bytes for a bound of {bound}");

    // An hour later every counter has expired: the sweeper gives back all their memory.
    clock.advance(Duration::from_secs(3600));
    engine.store().sweep();
    let stats = engine.store().stats();
    assert_eq!((stats.keys, stats.overflow_counters), (0, 0));
}
