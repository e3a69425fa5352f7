//! A request whose keys span cluster slots. Each slot applies its own keys all-or-nothing in one
//! script call; the request is admitted when every slot admits, and otherwise the slots that
//! consumed give back what they took. The order of the calls ([`CrossSlot`]) decides what a denied
//! request charges meanwhile; the give-back is made at most once and tried again until it lands.
//! The crate docs ("Redis Cluster") state the protocol's bounds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::Limit;
use floodgate::store::{Applied, Mode, Op, StoreError};
use floodgate_core::{Grant, Timestamp};
use futures_util::future::join_all;
use smallvec::SmallVec;
use tokio::sync::oneshot;

use super::{Answer, Group, Prepared, RedisStore, fill, micros};
use crate::CrossSlot;
use crate::key::{redis_key, tag};
use crate::script::{self, Reply, ScriptMode, ScriptOp};

/// How long a give-back whose first attempt failed is tried again: past a cluster failover (a
/// replica takes over within `cluster-node-timeout`, 15 s by default, and an election).
pub(super) const RETRIED_FOR: Duration = Duration::from_secs(30);

/// How long a give-back's note is kept in its slot: past every attempt, so that none lands twice.
const NOTE_KEEP: Duration = Duration::from_secs(60);

/// The most give-backs being tried again at once per store: past it, one that fails is lost
/// (counted) rather than held, so that a long outage piles up no tasks.
pub(super) const BACKLOG: usize = 4096;

/// What became of a store's cross-slot give-backs ([`RedisStore::give_backs`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GiveBacks {
    /// Give-backs started: one per slot that consumed for a request another slot denied or failed.
    pub started: u64,
    /// Of them, those whose first attempt failed and that were tried again.
    pub retried: u64,
    /// Of them, those that landed (on their first attempt or a later one).
    pub landed: u64,
    /// Of them, those that never landed (an error that is not transient, 30 s of attempts passed,
    /// or the backlog full): their cost stays charged until it replenishes by itself.
    pub lost: u64,
}

#[derive(Default)]
pub(super) struct Counts {
    started: AtomicU64,
    retried: AtomicU64,
    landed: AtomicU64,
    lost: AtomicU64,
    /// Numbers the notes of give-backs (with the store's seed).
    next: AtomicU64,
}

impl Counts {
    pub(super) fn read(&self) -> GiveBacks {
        GiveBacks {
            started: self.started.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            landed: self.landed.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }
}

/// One op given back: its Redis key, limit, grant and whether it was enforced.
struct Given {
    key: Vec<u8>,
    limit: Limit,
    grant: Grant,
    enforce: bool,
}

/// A slot's give-back, owned so that it outlives the request.
struct GiveBack {
    ops: SmallVec<[Given; 4]>,
    /// The note that makes it at most once, in the ops' slot.
    note: Vec<u8>,
}

impl GiveBack {
    fn invocation(
        &self,
        store: &RedisStore,
        estimate: Timestamp,
    ) -> Result<redis::ScriptInvocation<'static>, StoreError> {
        let ops = self.ops.iter().map(|g| ScriptOp {
            key: &g.key,
            limit: &g.limit,
            cost: g.grant.cost,
            enforce: g.enforce,
            grant: Some((g.grant.at, g.grant.lease)),
            // A give-back never reads or writes a penalty box: a key boxed since has forgotten
            // the count it would give back to.
            penalty: None,
        });
        let keep_ms = u64::try_from(NOTE_KEEP.as_millis()).unwrap_or(u64::MAX);
        let once = script::Once { key: &self.note, keep_ms };
        script::invocation(ScriptMode::UndoOnce, store.timing(None), estimate, ops, Some(once))
    }

    /// One attempt, within the store's deadline (waiting for a free slot included).
    async fn attempt(&self, store: &RedisStore, estimate: Timestamp) -> Result<Reply, StoreError> {
        let inv = self.invocation(store, estimate)?;
        let call = async {
            let _permit = store
                .shared
                .in_flight
                .acquire()
                .await
                .map_err(|_| super::config_error("store closed".into()))?;
            let sent = store.local.now();
            let reply =
                store.invoke(&inv).await.map_err(|e| crate::error::classify(e, store.shared.deadline))?;
            let reply = script::parse(reply, self.ops.len())?;
            if let Reply::Done { now, .. } | Reply::Made { now } | Reply::Retry { now } = &reply {
                store.observe(*now, sent);
            }
            Ok(reply)
        };
        store.within(call).await
    }
}

impl RedisStore {
    /// Applies `ops`, whose keys span the slots of `groups`.
    pub(super) async fn across_slots(
        &self,
        prepared: &[Prepared<'_>],
        ops: &[Op<'_>],
        groups: &[Group],
        mode: Mode,
        not_after: Option<Timestamp>,
        out: &mut Applied,
    ) -> Result<(), StoreError> {
        if mode == Mode::Check && self.shared.cross_slot == CrossSlot::DeniedFirst {
            let now = self.local.now().as_micros();
            let hot: SmallVec<[bool; 2]> = groups
                .iter()
                .map(|g| g.iter().any(|&i| ops[i].enforce && self.shared.hints.is_hot(&prepared[i].key, now)))
                .collect();
            if hot.contains(&true) {
                return self.denied_first(prepared, ops, groups, &hot, not_after, out).await;
            }
        }
        self.at_once(prepared, ops, groups, mode, not_after, out).await
    }

    /// Every slot at once, in one round trip.
    async fn at_once(
        &self,
        prepared: &[Prepared<'_>],
        ops: &[Op<'_>],
        groups: &[Group],
        mode: Mode,
        not_after: Option<Timestamp>,
        out: &mut Applied,
    ) -> Result<(), StoreError> {
        let script_mode = match mode {
            Mode::Check => ScriptMode::Check,
            Mode::Peek => ScriptMode::Peek,
            Mode::Report => ScriptMode::Report,
        };
        let results =
            join_all(groups.iter().map(|g| self.call(prepared, g, script_mode, None, not_after, None))).await;
        let consumed = mode == Mode::Check;
        let answers = self.answered(prepared, ops, groups, results, |_| consumed)?;
        if consumed {
            for (g, a) in groups.iter().zip(&answers) {
                self.learn(prepared, ops, g, a);
            }
        }
        let admitted: SmallVec<[bool; 2]> =
            groups.iter().zip(&answers).map(|(g, a)| a.admitted(ops, g)).collect();
        let pairs: SmallVec<[(&Group, &Answer); 2]> = groups.iter().zip(answers.iter()).collect();
        let all = admitted.iter().all(|a| *a);
        if mode == Mode::Report || all {
            fill(out, ops, mode, mode != Mode::Peek && all, &pairs);
            return Ok(());
        }
        if consumed {
            self.deny(prepared, ops, groups, &answers, &admitted, out).await;
            return Ok(());
        }
        // A peek denied elsewhere: the slots that would admit answered as if they had consumed;
        // they are asked again for the state as it stays.
        fill(out, ops, Mode::Peek, false, &pairs);
        let again = groups.iter().zip(&answers).zip(&admitted).filter(|(_, a)| **a).map(|((g, a), _)| {
            let allowed = allowed_in(g, a);
            async move {
                let r = self.call(prepared, &allowed, ScriptMode::PeekDenied, None, None, None).await;
                (allowed, r.ok())
            }
        });
        for (allowed, answer) in join_all(again).await {
            if let Some(answer) = answer {
                restate(out, &allowed, &answer);
            }
        }
        Ok(())
    }

    /// The slots of keys that denied lately first; the others, which meanwhile only say how they
    /// stand should the request be denied (consuming nothing), consume once the first admit.
    ///
    /// Meanwhile, an op of the other slots that denies by its own count denies the request: it
    /// goes into its penalty box then, as in a one-slot check, so that a cross-slot request boxes
    /// the limits a one-slot request would whichever slot denies it.
    async fn denied_first(
        &self,
        prepared: &[Prepared<'_>],
        ops: &[Op<'_>],
        groups: &[Group],
        hot: &[bool],
        not_after: Option<Timestamp>,
        out: &mut Applied,
    ) -> Result<(), StoreError> {
        let first = join_all(groups.iter().zip(hot).map(|(g, &h)| {
            if h {
                self.call(prepared, g, ScriptMode::Check, None, not_after, None)
            } else {
                // Guarded as a check: it may write penalty boxes.
                self.call(prepared, g, ScriptMode::CheckDenied, None, not_after, None)
            }
        }))
        .await;
        let first = self.answered(prepared, ops, groups, first, |k| hot[k])?;
        for (g, a) in groups.iter().zip(&first) {
            self.learn(prepared, ops, g, a);
        }
        let took: SmallVec<[bool; 2]> =
            groups.iter().zip(&first).zip(hot).map(|((g, a), &h)| h && a.admitted(ops, g)).collect();
        if took.iter().zip(hot).any(|(&t, &h)| h && !t) {
            // Denied where it was expected to be: nothing was taken elsewhere.
            self.deny(prepared, ops, groups, &first, &took, out).await;
            return Ok(());
        }

        let cold: SmallVec<[usize; 2]> = (0..groups.len()).filter(|&k| !hot[k]).collect();
        let second = join_all(
            cold.iter().map(|&k| self.call(prepared, &groups[k], ScriptMode::Check, None, not_after, None)),
        )
        .await;
        if second.iter().any(Result::is_err) {
            for ((g, a), &t) in groups.iter().zip(&first).zip(&took) {
                if t {
                    self.give_back(prepared, ops, g, a, &self.note_id());
                }
            }
        }
        let cold_groups: SmallVec<[Group; 2]> = cold.iter().map(|&k| groups[k].clone()).collect();
        let second = self.answered(prepared, ops, &cold_groups, second, |_| true)?;
        let mut answers: SmallVec<[Answer; 2]> = SmallVec::new();
        let mut second = second.into_iter();
        for (k, a) in first.into_iter().enumerate() {
            answers.push(if hot[k] { a } else { second.next().expect("one answer per cold slot") });
        }
        for &k in &cold {
            self.learn(prepared, ops, &groups[k], &answers[k]);
        }
        let admitted: SmallVec<[bool; 2]> =
            groups.iter().zip(&answers).map(|(g, a)| a.admitted(ops, g)).collect();
        if admitted.iter().all(|a| *a) {
            let pairs: SmallVec<[(&Group, &Answer); 2]> = groups.iter().zip(answers.iter()).collect();
            fill(out, ops, Mode::Check, true, &pairs);
            return Ok(());
        }
        self.deny(prepared, ops, groups, &answers, &admitted, out).await;
        Ok(())
    }

    /// The answer of every slot, or the first error: then the slots `consumed(k)` says consumed,
    /// and that admitted, give back in the background. A slot that failed — stale, timed out, in
    /// error — gives nothing back, since it may have taken nothing (when it did, that stays charged
    /// until it replenishes: an under-admission, never an over-admission).
    fn answered(
        &self,
        prepared: &[Prepared<'_>],
        ops: &[Op<'_>],
        groups: &[Group],
        results: Vec<Result<Answer, StoreError>>,
        consumed: impl Fn(usize) -> bool,
    ) -> Result<SmallVec<[Answer; 2]>, StoreError> {
        if !results.iter().any(Result::is_err) {
            return Ok(results.into_iter().filter_map(Result::ok).collect());
        }
        let id = self.note_id();
        let mut error = None;
        for (k, (g, r)) in groups.iter().zip(results).enumerate() {
            match r {
                Ok(a) if consumed(k) && a.admitted(ops, g) => {
                    self.give_back(prepared, ops, g, &a, &id);
                }
                Ok(_) => {}
                Err(e) => error = error.or(Some(e)),
            }
        }
        Err(error.unwrap_or(StoreError::Timeout(self.shared.deadline)))
    }

    /// Denied: nothing is granted. The slots that `took` give back, and their numbers are those of
    /// the state after the give-back (or of their first answer, when it has not landed yet).
    async fn deny(
        &self,
        prepared: &[Prepared<'_>],
        ops: &[Op<'_>],
        groups: &[Group],
        answers: &[Answer],
        took: &[bool],
        out: &mut Applied,
    ) {
        let pairs: SmallVec<[(&Group, &Answer); 2]> = groups.iter().zip(answers.iter()).collect();
        // A check, not admitted: nothing granted (and no peek's previous counts).
        fill(out, ops, Mode::Check, false, &pairs);
        if !took.contains(&true) {
            return;
        }
        let id = self.note_id();
        let back: SmallVec<[(Group, oneshot::Receiver<Option<Answer>>); 2]> = groups
            .iter()
            .zip(answers)
            .zip(took)
            .filter(|(_, t)| **t)
            .map(|((g, a), _)| (allowed_in(g, a), self.give_back(prepared, ops, g, a, &id)))
            .collect();
        for (allowed, landed) in back {
            if let Ok(Some(answer)) = landed.await {
                restate(out, &allowed, &answer);
            }
        }
    }

    /// What a cross-slot check found about each enforced key of `group`, for the order of the next
    /// requests' calls ([`CrossSlot::DeniedFirst`] only).
    fn learn(&self, prepared: &[Prepared<'_>], ops: &[Op<'_>], group: &[usize], answer: &Answer) {
        if self.shared.cross_slot != CrossSlot::DeniedFirst {
            return;
        }
        let now = self.local.now().as_micros();
        for (k, &i) in group.iter().enumerate() {
            if !ops[i].enforce {
                continue;
            }
            let row = answer.row(k);
            let key = &prepared[i].key;
            if row[0] == 1 {
                self.shared.hints.admitted(key);
            } else {
                self.shared.hints.denied(key, now, Some(Duration::from_micros(micros(row[3]))));
            }
        }
    }

    /// A name for the notes of one request's give-backs, unique to this store.
    fn note_id(&self) -> Vec<u8> {
        let n = self.shared.give_backs.next.fetch_add(1, Ordering::Relaxed);
        format!("x{:016x}{n:x}", self.shared.seed).into_bytes()
    }

    /// Gives back, in a task of its own (so that it outlives the request), what `group`'s check
    /// took by `answer`: made at most once by a note in the group's slot, and tried again while it
    /// fails for a transient reason, for up to [`RETRIED_FOR`]. The receiver gets the first
    /// attempt's answer (`None`: it failed, or landed before, with no numbers).
    fn give_back(
        &self,
        prepared: &[Prepared<'_>],
        ops: &[Op<'_>],
        group: &[usize],
        answer: &Answer,
        id: &[u8],
    ) -> oneshot::Receiver<Option<Answer>> {
        let (tx, rx) = oneshot::channel();
        let given: SmallVec<[Given; 4]> = group
            .iter()
            .enumerate()
            .filter(|(k, _)| answer.row(*k)[0] == 1)
            .map(|(k, &i)| {
                let grant = Grant { at: answer.now, cost: ops[i].cost, lease: micros(answer.row(k)[4]) };
                Given {
                    key: prepared[i].key.clone(),
                    limit: ops[i].limit.clone(),
                    grant,
                    enforce: ops[i].enforce,
                }
            })
            .collect();
        if given.is_empty() {
            let _ = tx.send(None);
            return rx;
        }
        let (t, _) = tag(prepared[group[0]].op.key, &self.shared.hash_tag);
        let mut note = Vec::new();
        redis_key(&mut note, &self.shared.prefix, &t, b'o', id);
        let job = GiveBack { ops: given, note };
        let counts = &self.shared.give_backs;
        counts.started.fetch_add(1, Ordering::Relaxed);
        let store = self.clone();
        tokio::spawn(async move {
            let counts = &store.shared.give_backs;
            let mut tx = Some(tx);
            let mut answer = |a: Option<Answer>| {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(a);
                }
            };
            let started = tokio::time::Instant::now();
            let mut estimate = store.estimate();
            let mut backoff = Duration::from_millis(10);
            let mut misses = 0;
            let mut backlog = None;
            loop {
                let error = match job.attempt(&store, estimate).await {
                    Ok(Reply::Done { now, rows }) => {
                        counts.landed.fetch_add(1, Ordering::Relaxed);
                        answer(Some(Answer { now, rows, made_before: false }));
                        return;
                    }
                    // Made by an attempt whose answer was lost; a give-back is never stale.
                    Ok(Reply::Made { .. } | Reply::Stale { .. }) => {
                        counts.landed.fetch_add(1, Ordering::Relaxed);
                        answer(None);
                        return;
                    }
                    // Redis's time is past the quota period the call was built for: again, for its.
                    Ok(Reply::Retry { now }) if misses < 3 => {
                        misses += 1;
                        estimate = now;
                        continue;
                    }
                    Ok(Reply::Retry { .. }) => StoreError::Backend {
                        message: "quota period bounds kept missing Redis's clock".into(),
                        transient: true,
                        source: None,
                    },
                    Err(e) => e,
                };
                answer(None);
                if !error.is_transient() || started.elapsed() >= RETRIED_FOR {
                    counts.lost.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if backlog.is_none() {
                    match store.shared.give_back_backlog.try_acquire() {
                        Ok(permit) => backlog = Some(permit),
                        Err(_) => {
                            counts.lost.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                    counts.retried.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        });
        rx
    }
}

/// The ops of `group` its `answer` allowed.
fn allowed_in(group: &[usize], answer: &Answer) -> Group {
    group.iter().enumerate().filter(|(k, _)| answer.row(*k)[0] == 1).map(|(_, &i)| i).collect()
}

/// The numbers of the ops `allowed` (a denied request's), restated from `answer`'s rows.
fn restate(out: &mut Applied, allowed: &[usize], answer: &Answer) {
    for (k, &i) in allowed.iter().enumerate() {
        let row = answer.row(k);
        let d = &mut out.results[i].decision;
        if d.allowed && row[0] == 1 {
            d.remaining = micros(row[1]);
            d.reset_after = Duration::from_micros(micros(row[2]));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use floodgate_core::FixedWindow;
    use floodgate_testkit::TestKey;
    use floodgate_testkit::redis::RedisServer;

    use super::*;
    use crate::RedisConfig;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_give_back_whose_first_attempt_times_out_is_tried_again_and_lands_once() {
        let server = RedisServer::start();
        let config = RedisConfig { deadline: Duration::from_millis(100), ..RedisConfig::node(server.url()) };
        let store = RedisStore::connect(config).await.expect("connect");
        let limit: Limit = FixedWindow::try_new(NonZeroU64::new(10).expect("10"), Duration::from_secs(3600))
            .expect("a window")
            .into();
        let key = TestKey::new("give-back", "k");
        let ops = [key.op(&limit, 1)];
        let prepared = store.prepare(&ops);
        let first = store.call(&prepared, &[0], ScriptMode::Check, None, None, None).await.expect("a check");
        store.call(&prepared, &[0], ScriptMode::Check, None, None, None).await.expect("a second check");

        // Redis holds every command for longer than the deadline: the first attempt times out —
        // and may still run when Redis resumes, before or beside the attempts after it.
        server.cli(&["CLIENT", "PAUSE", "600", "ALL"]);
        let first_attempt = store.give_back(&prepared, &ops, &[0], &first, b"t").await.expect("an answer");
        assert!(first_attempt.is_none(), "the first attempt cannot have landed: Redis is paused");
        let seen = floodgate_testkit::wait::until("the give-back landed", || {
            let gb = store.give_backs();
            std::future::ready((gb.landed + gb.lost == 1).then_some(gb))
        })
        .await;
        assert_eq!(seen, GiveBacks { started: 1, retried: 1, landed: 1, lost: 0 });

        // Given back once: the second check's unit stays (a peek answers as if it took its own).
        let peek = store.call(&prepared, &[0], ScriptMode::Peek, None, None, None).await.expect("a peek");
        assert_eq!(peek.row(0)[1], 8, "10, less the second check's unit, less the peek's");
    }
}
