//! A key's slot: its state behind a lock, and a word beside it in which a token bucket's or a GCRA's
//! state (one number) is kept while no lock holder needs it, so that single-limit requests on it
//! update it with one compare-and-swap instead of taking the lock.
//!
//! # The word
//!
//! Its top two bits say what it holds:
//!
//! - [`BEHIND_LOCK`]: the state is behind the lock; the low 32 bits are its expiry.
//! - [`BUCKET`] or [`GCRA`]: the state *is* the low 62 bits, the theoretical arrival time of a token
//!   bucket or a GCRA (the one authoritative copy; the state behind the lock is stale).
//! - [`TAKEN`]: the lock's holder took the state out of the word and puts it back before unlocking.
//!
//! Only the lock's holder changes a word that is not a TAT, and it always leaves a value that is not
//! [`TAKEN`] before it unlocks. A single-limit request for a token bucket or GCRA whose word holds a
//! TAT of that algorithm decides on it and, when it consumes, swaps the new TAT in with one
//! compare-and-swap from the value it decided on; finding anything else (the state behind the
//! lock, another algorithm's TAT, a taken word, or a TAT too large for 62 bits), it takes the lock.
//! A lock holder that finds a TAT takes it (an atomic swap for [`TAKEN`]) before reading it, so no
//! compare-and-swap can land while it holds the key: every update of a key is one atomic step on
//! its word or happens under its lock with the word taken, and each key stays linearizable, also
//! against multi-limit requests that lock it with others.

use std::sync::atomic::{AtomicU64, Ordering};

use floodgate_core::{
    Algorithm, Budget, Concurrency, Decision, FixedWindow, Gcra, Grant, LeaseState, LogState, Quota,
    QuotaState, SlidingLog, SlidingState, SlidingWindow, Timestamp, TokenBucket, WindowState,
};
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use crate::Limit;
use crate::store::{Mode, OpResult};

/// Per-key state: which algorithm's state the key holds. 32 bytes (a tag and the largest inline
/// state, a sliding window's or a quota's 24 bytes): `slot_sizes_stay_compact` holds it there.
#[derive(Debug, Default, Clone)]
pub(super) enum State {
    #[default]
    Empty,
    /// A token bucket's theoretical arrival time.
    Tat(u64),
    /// A GCRA's theoretical arrival time (the same arithmetic, kept apart so that changing a rule
    /// from one to the other starts it afresh).
    Gcra(u64),
    Window(WindowState),
    Quota(QuotaState),
    Budget(WindowState),
    Sliding(SlidingState),
    Log(Box<LogState>),
    Lease(Box<LeaseState>),
    /// A penalty box ([`Op::block_for`](crate::store::Op::block_for)): the key is refused until
    /// this time (µs since the epoch), its count forgotten. Once the time has passed it reads as
    /// no state at all, as another algorithm's state does.
    Blocked(u64),
    /// Removed by the sweeper: whoever finds it looks the key up again.
    Dead,
    /// Just inserted, not yet counted against `max_keys`: whoever finds it waits and looks again.
    Reserved,
}

impl State {
    /// The time the key is refused until, when it is in a penalty box at `now`.
    pub(super) fn blocked_at(&self, now: Timestamp) -> Option<u64> {
        match self {
            State::Blocked(until) if *until > now.as_micros() => Some(*until),
            _ => None,
        }
    }

    /// Whether a request finding this state must look its key up again.
    pub(super) fn is_gone(&self) -> bool {
        matches!(self, State::Dead | State::Reserved)
    }
}

const TAG: u64 = 0b11 << 62;
/// The state is behind the lock; the low 32 bits are its expiry.
const BEHIND_LOCK: u64 = 0;
/// The low 62 bits are a token bucket's TAT.
pub(super) const BUCKET: u64 = 0b01 << 62;
/// The low 62 bits are a GCRA's TAT.
pub(super) const GCRA: u64 = 0b10 << 62;
/// Taken out by the lock's holder.
const TAKEN: u64 = 0b11 << 62;
/// The largest TAT the word holds.
const VALUE: u64 = !TAG;

/// One key's slot.
#[derive(Debug, Default)]
#[repr(C)] // the word first, next to the key in the table entry: a lock-free update touches both
pub(super) struct Slot {
    word: AtomicU64,
    state: Mutex<State>,
}

impl Slot {
    /// A slot just inserted, to be counted against `max_keys` by its inserter.
    pub(super) fn reserved() -> Self {
        Slot { word: AtomicU64::new(BEHIND_LOCK), state: Mutex::new(State::Reserved) }
    }

    /// A slot holding `state` (loaded from disk), which expires at `expires_secs`.
    pub(super) fn restored(state: State, expires_secs: u32) -> Self {
        Slot { word: AtomicU64::new(BEHIND_LOCK | u64::from(expires_secs)), state: Mutex::new(state) }
    }

    /// Locks the key, taking its state out of the word if it is there.
    #[inline]
    pub(super) fn lock(&self) -> Held<'_> {
        let mut state = self.state.lock();
        let mut word = self.word.load(Ordering::Acquire);
        let in_word = word & TAG != BEHIND_LOCK;
        let expires_secs = if in_word {
            // A TAT (no one else takes it while we hold the lock): take it before reading it, so
            // that no compare-and-swap lands while we hold the key.
            word = self.word.swap(TAKEN, Ordering::Acquire);
            let tat = word & VALUE;
            *state = if word & TAG == GCRA { State::Gcra(tat) } else { State::Tat(tat) };
            secs_up(Timestamp::from_micros(tat))
        } else {
            word as u32
        };
        Held { state, word: &self.word, expires_secs, to_word: in_word }
    }

    /// When the key expires, in whole seconds since the epoch, read without the lock; `None` while
    /// a lock holder has its state out.
    pub(super) fn expires_secs(&self) -> Option<u32> {
        let word = self.word.load(Ordering::Acquire);
        match word & TAG {
            BEHIND_LOCK => Some(word as u32),
            TAKEN => None,
            _ => Some(secs_up(Timestamp::from_micros(word & VALUE))),
        }
    }

    /// Whether the key's state is in the word now.
    #[cfg(test)]
    pub(super) fn in_word(&self) -> bool {
        matches!(self.word.load(Ordering::Acquire) & TAG, BUCKET | GCRA)
    }

    /// A single-limit request for the token bucket or GCRA `a` (`tag` says which), decided and
    /// applied on the TAT in the word without the lock, its result pushed onto `results`; `false`
    /// when the word does not hold a TAT of that algorithm: then take the lock.
    #[inline]
    pub(super) fn apply_in_word<A: Algorithm<State = u64>>(
        &self,
        a: &A,
        tag: u64,
        mode: Mode,
        now: Timestamp,
        cost: u64,
        results: &mut SmallVec<[OpResult; 4]>,
    ) -> bool {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & TAG != tag {
                return false;
            }
            let mut tat = word & VALUE;
            let (decision, grant) = match mode {
                Mode::Report => {
                    let (decision, grant) = a.report(&mut tat, now, cost);
                    (decision, Some(grant))
                }
                Mode::Check | Mode::Peek => {
                    let decision = a.decide(&tat, now, cost);
                    if mode == Mode::Peek || !decision.allowed {
                        // Nothing to write: the decision is on the value just read.
                        results.push(OpResult { decision, grant: None, previous: None });
                        return true;
                    }
                    (decision, Some(a.consume(&mut tat, now, cost)))
                }
            };
            if tat > VALUE {
                return false;
            }
            match self.word.compare_exchange_weak(word, tag | tat, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    results.push(OpResult { decision, grant, previous: None });
                    return true;
                }
                Err(current) => word = current,
            }
        }
    }
}

/// A locked key. Unlocking puts the state back: a TAT into the word when it came from there or
/// [`Held::put_in_word`] asked for it (and it fits), anything else stays behind the lock with its expiry
/// in the word.
pub(super) struct Held<'a> {
    state: MutexGuard<'a, State>,
    word: &'a AtomicU64,
    expires_secs: u32,
    to_word: bool,
}

impl Held<'_> {
    /// Puts a token bucket's or GCRA's state into the word on unlocking, for the requests after
    /// this one to update without the lock.
    pub(super) fn put_in_word(&mut self) {
        self.to_word = true;
    }

    pub(super) fn state(&self) -> &State {
        &self.state
    }

    /// When the key expires, in whole seconds since the epoch, rounded up.
    pub(super) fn expires_secs(&self) -> u32 {
        self.expires_secs
    }

    /// Marks the key removed (see [`State::Dead`]).
    pub(super) fn kill(&mut self) {
        *self.state = State::Dead;
    }

    /// Counts the key in: a request finding it no longer waits.
    pub(super) fn open(&mut self) {
        *self.state = State::Empty;
    }

    /// [`Held::open`], starting from `state`, which expires at `expires_secs`.
    pub(super) fn open_as(&mut self, state: State, expires_secs: u32) {
        *self.state = state;
        self.expires_secs = expires_secs;
    }

    /// A copy of the state and its expiry; `None` when there is none to copy.
    pub(super) fn snapshot(&self) -> Option<(State, u32)> {
        match *self.state {
            State::Empty | State::Dead | State::Reserved => None,
            ref state => Some((state.clone(), self.expires_secs)),
        }
    }
}

impl Drop for Held<'_> {
    #[inline]
    fn drop(&mut self) {
        let word = match *self.state {
            State::Tat(tat) if self.to_word && tat <= VALUE => BUCKET | tat,
            State::Gcra(tat) if self.to_word && tat <= VALUE => GCRA | tat,
            _ => BEHIND_LOCK | u64::from(self.expires_secs),
        };
        self.word.store(word, Ordering::Release);
    }
}

impl std::fmt::Debug for Held<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("state", &*self.state).field("expires_secs", &self.expires_secs).finish()
    }
}

/// A key's state and expiry, locked or fresh (a key never seen, for a peek).
pub(super) trait Cell {
    fn parts(&mut self) -> (&mut State, &mut u32);
}

impl Cell for Held<'_> {
    #[inline]
    fn parts(&mut self) -> (&mut State, &mut u32) {
        (&mut self.state, &mut self.expires_secs)
    }
}

/// A state and expiry borrowed from a [`Held`] or a [`Fresh`].
impl Cell for (&mut State, &mut u32) {
    #[inline]
    fn parts(&mut self) -> (&mut State, &mut u32) {
        (&mut *self.0, &mut *self.1)
    }
}

/// The state of a key never seen.
#[derive(Debug, Default)]
pub(super) struct Fresh {
    state: State,
    expires_secs: u32,
}

impl Cell for Fresh {
    #[inline]
    fn parts(&mut self) -> (&mut State, &mut u32) {
        (&mut self.state, &mut self.expires_secs)
    }
}

/// Gives an algorithm its state inside [`State`], resetting a key that held another algorithm's
/// state (a rule whose algorithm changed on reload starts afresh).
pub(super) trait Stateful: Algorithm {
    fn state(s: &mut State) -> &mut Self::State;
    /// The state of a key never seen.
    fn fresh() -> Self::State;
}

macro_rules! stateful {
    ($algo:ty, $variant:ident, $fresh:expr) => {
        impl Stateful for $algo {
            #[inline]
            fn fresh() -> Self::State {
                Default::default()
            }

            #[inline]
            fn state(s: &mut State) -> &mut Self::State {
                if !matches!(s, State::$variant(_)) {
                    *s = State::$variant($fresh);
                }
                match s {
                    State::$variant(inner) => inner,
                    _ => unreachable!("just set"),
                }
            }
        }
    };
}

stateful!(FixedWindow, Window, WindowState::default());
stateful!(Quota, Quota, QuotaState::default());
stateful!(Budget, Budget, WindowState::default());
stateful!(SlidingWindow, Sliding, SlidingState::default());
stateful!(SlidingLog, Log, Box::default());
stateful!(TokenBucket, Tat, 0);
stateful!(Gcra, Gcra, 0);
stateful!(Concurrency, Lease, Box::default());

/// Decides on the key's state; a key in a penalty box (or past it) is decided on as a key never
/// seen, and stays as it is: only a change ends a box.
#[inline]
pub(super) fn decide<A: Stateful>(a: &A, s: &mut impl Cell, now: Timestamp, cost: u64) -> Decision {
    match s.parts().0 {
        State::Blocked(_) => a.decide(&A::fresh(), now, cost),
        state => a.decide(A::state(state), now, cost),
    }
}

#[inline]
pub(super) fn consume<A: Stateful>(a: &A, s: &mut impl Cell, now: Timestamp, cost: u64) -> Grant {
    let (state, expires_secs) = s.parts();
    let state = A::state(state);
    let grant = a.consume(state, now, cost);
    *expires_secs = secs_up(a.expires_at(state));
    grant
}

#[inline]
pub(super) fn report<A: Stateful>(a: &A, s: &mut impl Cell, now: Timestamp, cost: u64) -> (Decision, Grant) {
    let (state, expires_secs) = s.parts();
    let state = A::state(state);
    let out = a.report(state, now, cost);
    *expires_secs = secs_up(a.expires_at(state));
    out
}

#[inline]
pub(super) fn status<A: Stateful>(a: &A, s: &mut impl Cell, now: Timestamp) -> (u64, u64) {
    match s.parts().0 {
        State::Blocked(_) => a.status(&A::fresh(), now),
        state => a.status(A::state(state), now),
    }
}

#[inline]
pub(super) fn refund<A: Stateful>(a: &A, s: &mut impl Cell, now: Timestamp, grant: &Grant) {
    let (state, expires_secs) = s.parts();
    let state = A::state(state);
    a.refund(state, now, grant);
    *expires_secs = secs_up(a.expires_at(state));
}

/// For a quota: what the key counted in the calendar period before the one containing `now`
/// ([`Quota::previous`]); `None` for every other algorithm. A key in a penalty box, or holding
/// another algorithm's state, has no count kept: 0.
#[inline]
pub(super) fn previous(limit: &Limit, s: &mut impl Cell, now: Timestamp) -> Option<u64> {
    let Limit::Quota(q) = limit else { return None };
    Some(match s.parts().0 {
        State::Quota(state) => q.previous(state, now),
        _ => 0,
    })
}

/// Puts the key in a penalty box until `now + block_for`, forgetting its count: the decision of the
/// op that denied says to retry after exactly `block_for`.
pub(super) fn block(
    s: &mut impl Cell,
    now: Timestamp,
    block_for: std::time::Duration,
    decision: &mut Decision,
) {
    let (state, expires_secs) = s.parts();
    let until = now.saturating_add(block_for);
    *state = State::Blocked(until.as_micros());
    *expires_secs = secs_up(until);
    blocked(decision, block_for);
}

/// `decision` as a penalty box with `left` to go says it: denied, nothing remaining, retry after
/// `left`.
pub(super) fn blocked(decision: &mut Decision, left: std::time::Duration) {
    decision.allowed = false;
    decision.remaining = 0;
    decision.reset_after = left;
    decision.retry_after = Some(left);
}

#[inline]
fn secs_up(t: Timestamp) -> u32 {
    u32::try_from(t.as_micros().div_ceil(1_000_000)).unwrap_or(u32::MAX)
}
