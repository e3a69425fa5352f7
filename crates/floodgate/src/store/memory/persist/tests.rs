//! Persistence: what a restart restores, from the log and from checkpoints; torn tails, corruption,
//! expiry, the directory's lock and a failing disk.

use std::num::NonZeroU64;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use floodgate_core::calendar::Period;
use floodgate_core::{
    Budget, Calendar, Concurrency, FixedWindow, Gcra, ManualClock, Quota, Rate, SlidingLog, SlidingWindow,
    TokenBucket,
};

use super::super::*;
use super::{Fsync, PersistConfig, PersistError};
use crate::OnStoreError;

const START: Timestamp = Timestamp::from_secs(1_700_000_000);

/// A fresh directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("floodgate-persist-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

fn config(dir: &TempDir, fsync: Fsync) -> MemoryConfig {
    MemoryConfig { persist: Some(PersistConfig { path: dir.0.clone(), fsync }), ..MemoryConfig::default() }
}

fn open(dir: &TempDir, clock: &ManualClock) -> (MemoryStore<ManualClock>, Recovered) {
    MemoryStore::open(config(dir, Fsync::Always), clock.clone()).expect("the store opens")
}

fn op<'a>(key: &'a [u8], limit: &'a Limit, cost: u64) -> Op<'a> {
    Op {
        key,
        scope_len: 0,
        limit,
        cost,
        enforce: true,
        on_error: OnStoreError::FailOpen,
        prefetch: None,
        block_for: None,
    }
}

/// One limit of every algorithm, with its key.
fn limits() -> Vec<(&'static [u8], Limit)> {
    let minute = Duration::from_secs(60);
    let rate = Rate::try_new(nz(10), minute).unwrap();
    vec![
        (b"fixed".as_slice(), FixedWindow::try_new(nz(10), minute).unwrap().into()),
        (b"sliding", SlidingWindow::try_new(nz(10), minute).unwrap().into()),
        (b"log", SlidingLog::try_new(nz(10), minute).unwrap().into()),
        (b"bucket", TokenBucket::try_new(rate, nz(10)).unwrap().into()),
        (b"gcra", Gcra::try_new(rate, nz(10)).unwrap().into()),
        (b"permits", Concurrency::try_new(nz(10), minute).unwrap().into()),
        (b"quota", Quota::new(nz(10), Calendar::utc(Period::Month { anchor_day: 1 })).into()),
        (b"budget", Budget::try_new(nz(10), Duration::from_secs(3600)).unwrap().into()),
    ]
}

async fn apply(store: &MemoryStore<ManualClock>, ops: &[Op<'_>], mode: Mode) -> Applied {
    let mut out = Applied::default();
    store.apply(ops, mode, &mut out).await.expect("the store applies");
    out
}

/// What a peek of every limit answers: the state as the algorithms read it.
async fn peeks(store: &MemoryStore<ManualClock>, limits: &[(&[u8], Limit)]) -> Vec<(u64, Duration, bool)> {
    let mut out = Vec::new();
    for (key, limit) in limits {
        let d = apply(store, &[op(key, limit, 1)], Mode::Peek).await.results[0].decision;
        out.push((d.remaining, d.reset_after, d.allowed));
    }
    out
}

/// Changes every algorithm's state by checks (single and multi-limit), reports and a refund.
async fn drive(store: &MemoryStore<ManualClock>, clock: &ManualClock, limits: &[(&[u8], Limit)]) {
    for (i, (key, limit)) in limits.iter().enumerate() {
        for cost in 1..=2 {
            apply(store, &[op(key, limit, cost)], Mode::Check).await;
            clock.advance(Duration::from_millis(700 + i as u64));
        }
    }
    // Two keys in one call, and a report.
    let (a, b) = (&limits[0], &limits[3]);
    apply(store, &[op(a.0, &a.1, 1), op(b.0, &b.1, 2)], Mode::Check).await;
    apply(store, &[op(limits[2].0, &limits[2].1, 3)], Mode::Report).await;
    // A permit taken and given back, another kept.
    let permits = &limits[5];
    let taken = apply(store, &[op(permits.0, &permits.1, 1)], Mode::Check).await.results[0].grant.unwrap();
    store.refund(permits.0, &permits.1, taken).await.unwrap();
}

async fn restores(checkpoint: Option<bool>) {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let limits = limits();
    let before = {
        let (store, recovered) = open(&dir, &clock);
        assert_eq!(recovered.keys, 0, "a new directory holds nothing");
        drive(&store, &clock, &limits).await;
        match checkpoint {
            // A checkpoint, then more changes: snapshot plus the log after it.
            Some(true) => {
                store.checkpoint().unwrap();
                drive(&store, &clock, &limits).await;
            }
            // Everything in the snapshot.
            Some(false) => store.checkpoint().unwrap(),
            // Everything in the log.
            None => {}
        }
        peeks(&store, &limits).await
    };
    assert!(before.iter().any(|(remaining, _, _)| *remaining < 10), "the limits were used: {before:?}");
    let (store, recovered) = open(&dir, &clock);
    assert_eq!(recovered.keys, limits.len(), "{recovered:?}");
    assert_eq!(recovered.truncated, None);
    assert_eq!(peeks(&store, &limits).await, before, "every algorithm's state is restored");
    assert_eq!(store.stats().keys, limits.len());
}

#[tokio::test]
async fn a_restart_restores_every_algorithm_from_the_log() {
    restores(None).await;
}

#[tokio::test]
async fn a_restart_restores_every_algorithm_from_a_checkpoint() {
    restores(Some(false)).await;
}

#[tokio::test]
async fn a_restart_restores_a_checkpoint_and_the_log_after_it() {
    restores(Some(true)).await;
}

#[tokio::test]
async fn a_reset_is_restored() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let limits = limits();
    {
        let (store, _) = open(&dir, &clock);
        drive(&store, &clock, &limits).await;
        assert!(store.reset(b"fixed").await.unwrap());
    }
    let (store, recovered) = open(&dir, &clock);
    assert_eq!(recovered.keys, limits.len() - 1);
    let d = apply(&store, &[op(b"fixed", &limits[0].1, 1)], Mode::Peek).await.results[0].decision;
    assert_eq!(d.remaining, 9, "the reset key starts afresh (a peek answers as if it took 1)");
}

#[tokio::test]
async fn reservation_records_and_their_settlements_are_restored() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let ttl = Duration::from_secs(60);
    let (settled, pending) = {
        let (store, _) = open(&dir, &clock);
        store.put_record(b"r1", b"body one", ttl, Duration::from_secs(120)).await.unwrap();
        store.put_record(b"r2", b"body two", ttl, Duration::from_secs(120)).await.unwrap();
        assert_eq!(store.settle_record(b"r1", b"done").await.unwrap(), Settle::Settled);
        (store.get_record(b"r1").await.unwrap().unwrap(), store.get_record(b"r2").await.unwrap().unwrap())
    };
    assert_eq!(settled.settled.as_deref(), Some(b"done".as_slice()));
    let (store, recovered) = open(&dir, &clock);
    assert_eq!(recovered.records, 2);
    assert_eq!(store.get_record(b"r1").await.unwrap(), Some(settled));
    assert_eq!(store.get_record(b"r2").await.unwrap(), Some(pending));
    assert_eq!(store.settle_record(b"r1", b"again").await.unwrap(), Settle::Already(b"done".to_vec()));
    assert_eq!(store.settle_record(b"r2", b"now").await.unwrap(), Settle::Settled);
    // Restored records expire on time.
    clock.advance(Duration::from_secs(200));
    assert_eq!(store.get_record(b"r2").await.unwrap(), None);
}

fn segment(dir: &TempDir) -> PathBuf {
    let mut segments = super::segments(&dir.0).unwrap();
    segments.pop().expect("a segment").1
}

#[tokio::test]
async fn a_torn_tail_is_cut_off_with_what_was_acknowledged_kept() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let limits = limits();
    let before = {
        let (store, _) = open(&dir, &clock);
        drive(&store, &clock, &limits).await;
        peeks(&store, &limits).await
    };
    let path = segment(&dir);
    let good = std::fs::metadata(&path).unwrap().len();
    // Half an entry: a header announcing 40 bytes, and 10 of them.
    let mut torn = std::fs::read(&path).unwrap();
    torn.extend_from_slice(&40u32.to_le_bytes());
    torn.extend_from_slice(&[7; 14]);
    std::fs::write(&path, &torn).unwrap();
    let (store, recovered) = open(&dir, &clock);
    assert_eq!(recovered.truncated, Some((path.clone(), good, 18)));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), good, "the tail is cut off the file");
    assert_eq!(peeks(&store, &limits).await, before);
    // The store goes on logging, and restarts again.
    drive(&store, &clock, &limits).await;
    let after = peeks(&store, &limits).await;
    drop(store);
    let (store, recovered) = open(&dir, &clock);
    assert_eq!(recovered.truncated, None);
    assert_eq!(peeks(&store, &limits).await, after);
}

#[tokio::test]
async fn corruption_before_the_tail_refuses_to_start_naming_file_and_offset() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let limits = limits();
    {
        let (store, _) = open(&dir, &clock);
        drive(&store, &clock, &limits).await;
    }
    let path = segment(&dir);
    let mut bytes = std::fs::read(&path).unwrap();
    // The second entry's payload: its first entry ends at 8 + 8 + its length.
    let first_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let second = 8 + 8 + first_len;
    bytes[second + 8 + 2] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let error = MemoryStore::open(config(&dir, Fsync::Always), clock.clone()).map(|_| ()).unwrap_err();
    match &error {
        PersistError::Corrupt { path: at, offset, .. } => {
            assert_eq!((at, *offset), (&path, second as u64));
        }
        other => panic!("expected corruption, got {other}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&path.display().to_string()) && message.contains(&format!("byte {second}")),
        "{message}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing was cut");
}

#[tokio::test]
async fn a_corrupt_snapshot_refuses_to_start() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    {
        let (store, _) = open(&dir, &clock);
        drive(&store, &clock, &limits()).await;
        store.checkpoint().unwrap();
    }
    let path = dir.0.join("snapshot");
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let error = MemoryStore::open(config(&dir, Fsync::Always), clock.clone()).map(|_| ()).unwrap_err();
    assert!(matches!(&error, PersistError::Corrupt { path: at, .. } if *at == path), "{error}");
}

#[tokio::test]
async fn expired_keys_are_not_restored_and_checkpoints_drop_them() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let second: Limit = FixedWindow::try_new(nz(5), Duration::from_secs(1)).unwrap().into();
    let day: Limit = FixedWindow::try_new(nz(5), Duration::from_secs(86_400)).unwrap().into();
    {
        let (store, _) = open(&dir, &clock);
        apply(&store, &[op(b"short", &second, 1)], Mode::Check).await;
        apply(&store, &[op(b"long", &day, 1)], Mode::Check).await;
    }
    clock.advance(Duration::from_secs(10));
    {
        let (store, recovered) = open(&dir, &clock);
        assert_eq!((recovered.keys, recovered.expired), (1, 1), "{recovered:?}");
        store.checkpoint().unwrap();
        assert_eq!(super::segments(&dir.0).unwrap(), vec![], "the checkpoint covers the log");
    }
    let snapshot = std::fs::read(dir.0.join("snapshot")).unwrap();
    assert!(!snapshot.windows(5).any(|w| w == b"short"), "the checkpoint holds no expired key");
    assert!(snapshot.windows(4).any(|w| w == b"long"));
    let (store, recovered) = open(&dir, &clock);
    assert_eq!((recovered.keys, recovered.expired), (1, 0));
    let d = apply(&store, &[op(b"long", &day, 1)], Mode::Peek).await.results[0].decision;
    assert_eq!(d.remaining, 3, "1 used, and 1 more for the peek");
}

#[tokio::test]
async fn one_process_per_directory() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let (_store, _) = open(&dir, &clock);
    let error = MemoryStore::open(config(&dir, Fsync::Always), clock.clone()).map(|_| ()).unwrap_err();
    assert!(matches!(error, PersistError::Locked { .. }), "{error}");
    assert!(error.to_string().contains("in use by another process"), "{error}");
}

#[tokio::test]
async fn a_failed_write_fails_the_call_and_every_later_one() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let (store, _) = open(&dir, &clock);
    // The segment the log writes next cannot be created: a directory holds its name.
    std::fs::create_dir(super::segment_path(&dir.0, 1)).unwrap();
    let limit: Limit = FixedWindow::try_new(nz(5), Duration::from_secs(60)).unwrap().into();
    let mut out = Applied::default();
    let error = store.apply(&[op(b"k", &limit, 1)], Mode::Check, &mut out).await.unwrap_err();
    assert!(matches!(&error, StoreError::Backend { message, .. } if message.contains("log")), "{error}");
    let again = store.apply(&[op(b"k", &limit, 1)], Mode::Check, &mut out).await.unwrap_err();
    assert_eq!(again, error);
    assert!(store.put_record(b"r", b"b", Duration::from_secs(1), Duration::from_secs(1)).await.is_err());
}

#[tokio::test]
async fn a_store_that_syncs_every_change_does_not_answer_at_once_and_takes_nothing_when_asked_to() {
    let clock = ManualClock::new(START);
    let limit: Limit = FixedWindow::try_new(nz(100), Duration::from_secs(3600)).unwrap().into();
    let always = TempDir::new();
    let (store, _) = open(&always, &clock);
    assert!(!store.answers_at_once());
    let mut out = Applied::default();
    assert_eq!(store.try_apply_now(&[op(b"k", &limit, 3)], Mode::Check, &mut out), None);
    let d = apply(&store, &[op(b"k", &limit, 1)], Mode::Peek).await.results[0].decision;
    assert_eq!(d.remaining, 99, "nothing taken by the call it did not answer");

    let every = TempDir::new();
    let (store, _) =
        MemoryStore::open(config(&every, Fsync::Every(Duration::from_millis(20))), clock.clone()).unwrap();
    assert!(store.answers_at_once());
    assert!(MemoryStore::with_config(MemoryConfig::default(), clock.clone()).answers_at_once());
}

#[tokio::test]
async fn with_an_interval_calls_are_answered_at_once_and_synced_within_it() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let limit: Limit = FixedWindow::try_new(nz(100), Duration::from_secs(3600)).unwrap().into();
    let every = Fsync::Every(Duration::from_millis(20));
    let (store, _) = MemoryStore::open(config(&dir, every), clock.clone()).unwrap();
    let mut out = Applied::default();
    let answered = store.try_apply_now(&[op(b"k", &limit, 3)], Mode::Check, &mut out);
    assert_eq!(answered, Some(Ok(())), "answered without waiting for the disk");
    std::thread::sleep(Duration::from_millis(300));
    // The files as a crash would leave them now, the store still running: copied elsewhere.
    let copy = TempDir::new();
    std::fs::create_dir_all(&copy.0).unwrap();
    for entry in std::fs::read_dir(&dir.0).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.0.join(entry.file_name())).unwrap();
    }
    let (restarted, recovered) = open(&copy, &clock);
    assert_eq!(recovered.keys, 1);
    let d = apply(&restarted, &[op(b"k", &limit, 1)], Mode::Peek).await.results[0].decision;
    assert_eq!(d.remaining, 96, "3 used, and 1 more for the peek");
    drop(store);
}

/// A change made at most once: the keys' new states and its note are one log entry, restored
/// together from the log and from a checkpoint, so a restarted store still knows it was made.
#[tokio::test]
async fn a_change_made_once_is_restored_with_its_note() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let limits = limits();
    let (fixed, permits) = (&limits[0], &limits[5]);
    let keep = Duration::from_secs(600);
    let once = |id: &'static [u8]| Once { id, keep };
    let before = {
        let (store, _) = open(&dir, &clock);
        let taken =
            apply(&store, &[op(fixed.0, &fixed.1, 4), op(permits.0, &permits.1, 2)], Mode::Check).await;
        let grants: Vec<Grant> = taken.results.iter().map(|r| r.grant.unwrap()).collect();
        let ops = [op(fixed.0, &fixed.1, 0), op(permits.0, &permits.1, 0)];
        assert!(store.adjust_once(&ops, Adjustment::GiveBack(&grants), once(b"r:back")).await.unwrap());
        assert!(!store.adjust_once(&ops, Adjustment::GiveBack(&grants), once(b"r:back")).await.unwrap());
        let more = [op(fixed.0, &fixed.1, 3)];
        assert!(store.adjust_once(&more, Adjustment::Report, once(b"r:more")).await.unwrap());
        peeks(&store, &limits).await
    };
    assert_eq!((before[0].0, before[5].0), (6, 9), "3 left counted on fixed, both permits back");
    for checkpoint in [false, true] {
        let (store, _) = open(&dir, &clock);
        assert_eq!(peeks(&store, &limits).await, before, "checkpoint {checkpoint}");
        let grant = Grant { at: START, cost: 4, lease: 0 };
        let ops = [op(fixed.0, &fixed.1, 0)];
        assert!(!store.adjust_once(&ops, Adjustment::GiveBack(&[grant]), once(b"r:back")).await.unwrap());
        assert!(!store.adjust_once(&ops, Adjustment::Report, once(b"r:more")).await.unwrap());
        assert_eq!(peeks(&store, &limits).await, before, "nothing made again");
        if !checkpoint {
            store.checkpoint().unwrap();
        }
    }
}

/// A change made once and torn off the log's tail is lost whole: neither its keys' states nor its
/// note survive, so a retry makes it.
#[tokio::test]
async fn a_change_made_once_torn_off_the_tail_is_lost_whole() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let (a, b): (Limit, Limit) = (
        FixedWindow::try_new(nz(10), Duration::from_secs(60)).unwrap().into(),
        FixedWindow::try_new(nz(10), Duration::from_secs(60)).unwrap().into(),
    );
    let ops = [op(b"a", &a, 2), op(b"b", &b, 3)];
    let keep = Duration::from_secs(600);
    let (path, good) = {
        let (store, _) = open(&dir, &clock);
        apply(&store, &ops, Mode::Check).await;
        let path = segment(&dir);
        let good = std::fs::metadata(&path).unwrap().len();
        assert!(store.adjust_once(&ops, Adjustment::Report, Once { id: b"x", keep }).await.unwrap());
        (path, good)
    };
    let whole = std::fs::metadata(&path).unwrap().len();
    // Cut inside the entry: one byte short of its end.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(whole - 1).unwrap();
    drop(file);
    let (store, recovered) = open(&dir, &clock);
    assert_eq!(recovered.truncated, Some((path.clone(), good, whole - 1 - good)));
    let used = |applied: Applied| applied.results.iter().map(|r| r.decision.remaining).collect::<Vec<_>>();
    let peek = [op(b"a", &a, 1), op(b"b", &b, 1)];
    assert_eq!(used(apply(&store, &peek, Mode::Peek).await), [7, 6], "the first check only");
    assert!(store.adjust_once(&ops, Adjustment::Report, Once { id: b"x", keep }).await.unwrap(), "made anew");
    assert_eq!(used(apply(&store, &peek, Mode::Peek).await), [5, 3]);
}

/// A multi-limit change is one entry too: torn off the tail, no limit keeps its part of it (a
/// crash mid-write never restores a tenant's tokens without the call's other limits).
#[tokio::test]
async fn a_multi_limit_change_torn_off_the_tail_is_lost_whole() {
    let dir = TempDir::new();
    let clock = ManualClock::new(START);
    let limit: Limit = FixedWindow::try_new(nz(10), Duration::from_secs(60)).unwrap().into();
    let ops = [op(b"tenant", &limit, 2), op(b"call", &limit, 3)];
    let path = {
        let (store, _) = open(&dir, &clock);
        apply(&store, &ops, Mode::Check).await;
        apply(&store, &ops, Mode::Check).await;
        segment(&dir)
    };
    let whole = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(whole - 1).unwrap();
    drop(file);
    let (store, recovered) = open(&dir, &clock);
    assert!(recovered.truncated.is_some(), "{recovered:?}");
    let peek = [op(b"tenant", &limit, 1), op(b"call", &limit, 1)];
    let left: Vec<u64> =
        apply(&store, &peek, Mode::Peek).await.results.iter().map(|r| r.decision.remaining).collect();
    assert_eq!(left, [7, 6], "the first call on both keys, the torn second on neither");
}
