//! `action: delay`: what a front door that can hold a request (the gateway, the tower layer) does
//! with a denial — wait for capacity up to the rule's `max_wait`, in a first-come-first-served
//! queue by priority tier, then decide again.
//!
//! The engine enforces a delay rule like a deny rule: a verdict is allowed or denied, exactly, and a
//! denied request consumed nothing. [`next_wait`] says whether the front door should wait rather
//! than answer 429, and for how long: only when **every** limit that denied is a delay rule, and
//! the wait (the verdict's exact `retry_after`) still fits within the smallest `max_wait` of those
//! rules, counted from the request's first denial.
//!
//! # Queues
//!
//! Waiting requests queue per **delay key** ([`QueueKey`]: the delay rule that denied and the values
//! of its key descriptors — one queue per limit key) in [`DelayQueues`]. A request that must wait
//! takes a [`Ticket`]; while a key's queue has waiters, a newcomer for that key does not decide
//! ahead of them but queues behind (with an empty queue it decides at once). Only the queue's
//! **head** decides: it sleeps its verdict's `retry_after` (when capacity is due) and decides
//! again; when it passes (or gives up), the next waiter becomes the head, is woken, and decides at
//! once. Waiting is on events (the waiter's waker, woken when its turn comes) and the head's timer
//! (the front door's, [`Room::sleep`]) — nobody re-polls. A waiter whose `max_wait` runs out
//! leaves the queue with its 429. [`decide_in_turn`] is the whole loop, shared by the front doors.
//!
//! The next head is chosen by **weighted fair queueing** among the waiters' priority tiers (0 is
//! the highest; [`Fairness`]: a weight per tier, default 8, 4, 2, 1): each waiter gets a virtual
//! start time (the queue's virtual time, or its tier's previous finish if later) and finish time
//! (start + 1 / weight), and the least finish goes first (then the earliest ticket). With tiers 0
//! and 1 at weights 2:1 and both backlogged, two of every three released are tier 0; one tier alone
//! is first-come-first-served. **Aging**: every `aging` (default 1 s) a waiter has waited counts
//! its finish with the weight of the tier above, down to tier 0's — so a low tier is not starved
//! by a stream of fresh high-tier arrivals: it overtakes them once it has aged. The time of aging
//! is the queues' [`Clock`] (a [`ManualClock`](floodgate_core::ManualClock) in tests).
//!
//! Bounds: the order is kept **per process** — several Floodgate instances sharing a store each
//! order their own waiters, and between instances the first to decide when capacity frees wins.
//! A request waits in at most one queue (its first delay key with waiters, or the key of the delay
//! rule that denied it); a rule that groups addresses by prefix queues by the address itself. A
//! queue is removed when its last waiter leaves, and waiting requests stay bounded ([`Waiting`]):
//! past the bound a request that would wait is decided (and, if denied, answered) at once, so that
//! a flood cannot park unbounded work in memory.
//!
//! ```
//! use std::num::NonZeroU64;
//! use std::time::Duration;
//! use floodgate::{Action, Descriptors, Engine, MemoryStore, Policy, Rule};
//! use floodgate::delay::{makes_wait, next_wait};
//! use floodgate_core::{FixedWindow, ManualClock, Timestamp};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let rule = Rule::new("smooth", FixedWindow::try_new(NonZeroU64::new(1).unwrap(), Duration::from_secs(1))?)
//!     .action(Action::Delay { max_wait: Duration::from_secs(2) });
//! let clock = ManualClock::new(Timestamp::from_secs(100));
//! let engine = Engine::new(Policy::new([rule])?, MemoryStore::with_config(Default::default(), clock.clone()));
//! let any = Descriptors::new();
//! let allowed = engine.check(&any, 1).await?;
//! assert!(allowed.allowed && !makes_wait(&engine.policy(), &allowed));
//! let denied = engine.check(&any, 1).await?;
//! assert!(makes_wait(&engine.policy(), &denied));
//! // Denied by a delay rule: wait one second (the window's end), well within max_wait.
//! assert_eq!(next_wait(&engine.policy(), &denied, Duration::ZERO), Some(Duration::from_secs(1)));
//! // Having already waited 1.5 s, another second would pass max_wait: deny.
//! assert_eq!(next_wait(&engine.policy(), &denied, Duration::from_millis(1500)), None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use floodgate_core::{Clock, SystemClock, Timestamp};
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::{Action, Descriptors, Policy, Rule, Verdict};

/// How long to wait before deciding a denied request again, or `None` to deny it now.
///
/// `Some(wait)` only when `verdict` is denied, every denying limit is a rule of `policy` with
/// [`Action::Delay`], each has a `retry_after`, and `waited + wait` is within the smallest
/// `max_wait` of those rules. `waited` is how long the request has already waited.
pub fn next_wait(policy: &Policy, verdict: &Verdict, waited: Duration) -> Option<Duration> {
    if verdict.allowed {
        return None;
    }
    let mut budget = Duration::MAX;
    let mut wait = Duration::ZERO;
    for limit in verdict.limits.iter().filter(|l| l.outcome.denies()) {
        let rule = policy.rule(limit.index).filter(|r| r.name() == &*limit.rule)?;
        let Action::Delay { max_wait } = rule.action_kind() else { return None };
        budget = budget.min(max_wait);
        wait = wait.max(limit.decision.retry_after?);
    }
    (!wait.is_zero() && waited.saturating_add(wait) <= budget).then_some(wait)
}

/// Whether `verdict`, decided with nobody waiting ([`DelayQueues::is_empty`]), must go on in
/// [`decide_in_turn`] (as its `first`): it is denied, and a delay rule makes it wait. Otherwise it
/// is the request's answer as it is, and a front door need not enter the waiting room at all.
pub fn makes_wait(policy: &Policy, verdict: &Verdict) -> bool {
    !verdict.allowed && next_wait(policy, verdict, Duration::ZERO).is_some()
}

/// The smallest `max_wait` of the delay rules that denied `verdict`, or `None` when a limit that
/// denied is not a delay rule of `policy`.
fn budget(policy: &Policy, verdict: &Verdict) -> Option<Duration> {
    let mut budget = None::<Duration>;
    for limit in verdict.limits.iter().filter(|l| l.outcome.denies()) {
        let rule = policy.rule(limit.index).filter(|r| r.name() == &*limit.rule)?;
        let Action::Delay { max_wait } = rule.action_kind() else { return None };
        budget = Some(budget.map_or(max_wait, |b| b.min(max_wait)));
    }
    budget
}

/// The most priority tiers.
pub const MAX_TIERS: usize = 8;

/// The priority tiers of waiting requests: a weight per tier (tier 0 first, the highest) and how
/// long a waiter waits before it counts with the weight of the tier above (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Fairness {
    weights: SmallVec<[u32; MAX_TIERS]>,
    aging: Duration,
}

/// Why [`Fairness::new`] refused its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FairnessError {
    /// No tier, or more than [`MAX_TIERS`].
    #[error("{0} tier weights: give between 1 and 8 (one per tier, tier 0 first)")]
    Tiers(usize),
    /// A tier of weight 0.
    #[error("tier {tier} has weight 0: every tier needs a weight of at least 1")]
    ZeroWeight {
        /// The tier.
        tier: usize,
    },
    /// A tier weighs more than the one above it.
    #[error(
        "tier {tier} weighs {weight}, more than tier {above} ({above_weight}): a lower tier cannot weigh more"
    )]
    Increasing {
        /// The tier.
        tier: usize,
        /// Its weight.
        weight: u32,
        /// The tier above.
        above: usize,
        /// That tier's weight.
        above_weight: u32,
    },
    /// An aging of zero.
    #[error("aging is 0: give how long a waiter waits before it moves up a tier, e.g. 1s")]
    Aging,
}

impl Fairness {
    /// The default weights: tiers 0 to 3 at 8, 4, 2, 1.
    pub const DEFAULT_WEIGHTS: [u32; 4] = [8, 4, 2, 1];
    /// The default aging: 1 s per tier.
    pub const DEFAULT_AGING: Duration = Duration::from_secs(1);

    /// Tiers of `weights` (tier 0 first, each at least 1, none above the tier before), aging one
    /// tier every `aging`.
    pub fn new(weights: &[u32], aging: Duration) -> Result<Self, FairnessError> {
        if weights.is_empty() || weights.len() > MAX_TIERS {
            return Err(FairnessError::Tiers(weights.len()));
        }
        for (tier, &weight) in weights.iter().enumerate() {
            if weight == 0 {
                return Err(FairnessError::ZeroWeight { tier });
            }
            if tier > 0 && weight > weights[tier - 1] {
                let above = tier - 1;
                return Err(FairnessError::Increasing { tier, weight, above, above_weight: weights[above] });
            }
        }
        if aging.is_zero() {
            return Err(FairnessError::Aging);
        }
        Ok(Fairness { weights: weights.iter().copied().collect(), aging })
    }

    /// The weights, tier 0 first.
    pub fn weights(&self) -> &[u32] {
        &self.weights
    }

    /// How long a waiter waits before it counts with the weight of the tier above.
    pub fn aging(&self) -> Duration {
        self.aging
    }

    /// How many tiers (tiers are `0..tiers()`).
    pub fn tiers(&self) -> u8 {
        self.weights.len() as u8
    }

    /// The lowest tier (`tiers() - 1`).
    pub fn lowest(&self) -> u8 {
        self.tiers() - 1
    }

    /// The virtual time a request of `tier` takes.
    fn cost(&self, tier: u8) -> f64 {
        1.0 / f64::from(self.weights[usize::from(tier).min(self.weights.len() - 1)])
    }
}

impl Default for Fairness {
    fn default() -> Self {
        Fairness { weights: Self::DEFAULT_WEIGHTS.into_iter().collect(), aging: Self::DEFAULT_AGING }
    }
}

/// A delay queue's key: a delay rule (with its policy's namespace) and the values of its key
/// descriptors — the limit key its waiters wait for, compactly.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueKey(Box<[u8]>);

impl QueueKey {
    /// The queue of `rule` (of `policy`) for `descriptors`; `None` when a key descriptor of the
    /// rule is missing.
    pub fn of(policy: &Policy, rule: &Rule, descriptors: &Descriptors) -> Option<QueueKey> {
        let mut key: SmallVec<[u8; 128]> = SmallVec::new();
        let mut push = |field: &[u8]| {
            key.extend_from_slice(&(field.len() as u32).to_le_bytes());
            key.extend_from_slice(field);
        };
        push(policy.namespace().unwrap_or("").as_bytes());
        push(rule.name().as_bytes());
        for name in rule.key_descriptors() {
            push(descriptors.get(name)?.as_bytes());
        }
        Some(QueueKey(key.as_slice().into()))
    }
}

/// The queues a request of `descriptors` would wait in, with each one's `max_wait`: one per delay
/// rule of `policy` whose conditions hold and whose key descriptors are all there.
pub fn delay_keys(policy: &Policy, descriptors: &Descriptors) -> SmallVec<[(QueueKey, Duration); 2]> {
    let mut keys = SmallVec::new();
    for rule in policy.rules() {
        let Action::Delay { max_wait } = rule.action_kind() else { continue };
        if !rule.conditions().iter().all(|(name, c)| c.holds(descriptors.get(name))) {
            continue;
        }
        if let Some(key) = QueueKey::of(policy, rule, descriptors) {
            keys.push((key, max_wait));
        }
    }
    keys
}

/// The queue a request of `descriptors` denied by `verdict` waits in: that of the first delay rule
/// that denied it.
pub fn denied_key(policy: &Policy, verdict: &Verdict, descriptors: &Descriptors) -> Option<QueueKey> {
    verdict.limits.iter().filter(|l| l.outcome.denies()).find_map(|limit| {
        let rule = policy.rule(limit.index).filter(|r| r.name() == &*limit.rule)?;
        matches!(rule.action_kind(), Action::Delay { .. }).then(|| QueueKey::of(policy, rule, descriptors))?
    })
}

/// The waiting requests of one process, in a queue per [`QueueKey`] (see the module docs): cheap
/// to clone, shared by a front door's requests.
#[derive(Clone)]
pub struct DelayQueues {
    shared: Arc<Shared>,
}

struct Shared {
    fairness: Fairness,
    clock: Arc<dyn Clock>,
    queues: Mutex<HashMap<QueueKey, KeyQueue>>,
    /// How many queues exist (read without the lock: no queue, nobody to queue behind).
    live: AtomicUsize,
    next: AtomicU64,
}

/// One key's queue: the head (deciding, or sleeping until capacity is due) and those behind it.
struct KeyQueue {
    head: Option<u64>,
    waiters: Vec<Waiter>,
    /// The start of the last waiter to become head.
    virtual_time: f64,
    /// Each tier's last finish.
    finish: [f64; MAX_TIERS],
}

struct Waiter {
    id: u64,
    tier: u8,
    start: f64,
    since: Timestamp,
    /// Who to wake when it becomes the head.
    waker: Option<Waker>,
}

impl KeyQueue {
    /// The next head (see the module docs): the least finish, counted with the weight of the tier
    /// the waiter has aged to, then the earliest ticket. Its waker, to wake once the lock is let go.
    fn promote(&mut self, fairness: &Fairness, now: Timestamp) -> Option<Waker> {
        let aging = fairness.aging.as_micros().max(1);
        let finish = |w: &Waiter| {
            let steps = now.saturating_since(w.since).as_micros() / aging;
            let tier = u128::from(w.tier).saturating_sub(steps) as u8;
            w.start + fairness.cost(tier)
        };
        let next = self
            .waiters
            .iter()
            .enumerate()
            .min_by(|(_, a), (_, b)| finish(a).total_cmp(&finish(b)).then(a.id.cmp(&b.id)))
            .map(|(i, _)| i);
        let waiter = self.waiters.swap_remove(next?);
        self.virtual_time = self.virtual_time.max(waiter.start);
        self.head = Some(waiter.id);
        waiter.waker
    }
}

impl DelayQueues {
    /// Queues with `fairness`'s tiers, aging by `clock`.
    pub fn new(fairness: Fairness, clock: impl Clock) -> Self {
        DelayQueues {
            shared: Arc::new(Shared {
                fairness,
                clock: Arc::new(clock),
                queues: Mutex::new(HashMap::new()),
                live: AtomicUsize::new(0),
                next: AtomicU64::new(0),
            }),
        }
    }

    /// The tiers.
    pub fn fairness(&self) -> &Fairness {
        &self.shared.fairness
    }

    /// How many queues exist (a queue is removed when its last waiter leaves).
    pub fn queues(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }

    /// How many requests are in `key`'s queue, its head included.
    pub fn len(&self, key: &QueueKey) -> usize {
        self.shared.queues.lock().get(key).map_or(0, |q| q.waiters.len() + usize::from(q.head.is_some()))
    }

    /// Whether no queue exists.
    pub fn is_empty(&self) -> bool {
        self.queues() == 0
    }

    /// A place in `key`'s queue at `tier` (above the lowest: the lowest): the head at once when the
    /// queue is empty, behind the others otherwise. Leaving is dropping the ticket.
    pub fn join(&self, key: QueueKey, tier: u8) -> Ticket {
        self.enter(key, tier, false).expect("joining never requires waiters")
    }

    /// A place behind `key`'s waiters, or `None` when it has none (decide at once).
    pub fn join_if_busy(&self, key: &QueueKey, tier: u8) -> Option<Ticket> {
        if self.is_empty() {
            return None;
        }
        self.enter(key.clone(), tier, true)
    }

    fn enter(&self, key: QueueKey, tier: u8, only_behind: bool) -> Option<Ticket> {
        let shared = &self.shared;
        let tier = tier.min(shared.fairness.lowest());
        let id = shared.next.fetch_add(1, Ordering::Relaxed);
        let mut queues = shared.queues.lock();
        if only_behind && !queues.contains_key(&key) {
            return None;
        }
        let queue = queues.entry(key.clone()).or_insert_with(|| {
            shared.live.fetch_add(1, Ordering::AcqRel);
            KeyQueue { head: None, waiters: Vec::new(), virtual_time: 0.0, finish: [0.0; MAX_TIERS] }
        });
        if queue.head.is_none() && queue.waiters.is_empty() {
            queue.head = Some(id);
        } else {
            let start = queue.virtual_time.max(queue.finish[usize::from(tier)]);
            queue.finish[usize::from(tier)] = start + shared.fairness.cost(tier);
            let since = shared.clock.now();
            queue.waiters.push(Waiter { id, tier, start, since, waker: None });
        }
        drop(queues);
        Some(Ticket { shared: Arc::clone(shared), key, id })
    }
}

impl fmt::Debug for DelayQueues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayQueues")
            .field("fairness", &self.shared.fairness)
            .field("queues", &self.queues())
            .finish_non_exhaustive()
    }
}

impl Default for DelayQueues {
    /// The default tiers, aging by the system clock.
    fn default() -> Self {
        DelayQueues::new(Fairness::default(), SystemClock::new())
    }
}

/// A request's place in a delay queue (see [`DelayQueues::join`]); dropping it leaves the queue,
/// and when it was the head, the next waiter becomes the head and is woken.
pub struct Ticket {
    shared: Arc<Shared>,
    key: QueueKey,
    id: u64,
}

impl Ticket {
    /// Whether it is its queue's head: the one that decides.
    pub fn is_head(&self) -> bool {
        self.shared.queues.lock().get(&self.key).is_some_and(|q| q.head == Some(self.id))
    }

    /// Waits until it is the head (at once if it is): woken when the head before it leaves.
    pub fn turn(&self) -> Turn<'_> {
        Turn { ticket: self }
    }

    /// The queues' time.
    fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// Its queue.
    pub fn key(&self) -> &QueueKey {
        &self.key
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket").field("key", &self.key).field("id", &self.id).finish_non_exhaustive()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let shared = &self.shared;
        let mut queues = shared.queues.lock();
        let Some(queue) = queues.get_mut(&self.key) else { return };
        let mut woken = None;
        if queue.head == Some(self.id) {
            queue.head = None;
            woken = queue.promote(&shared.fairness, shared.clock.now());
        } else {
            queue.waiters.retain(|w| w.id != self.id);
        }
        if queue.head.is_none() && queue.waiters.is_empty() {
            queues.remove(&self.key);
            shared.live.fetch_sub(1, Ordering::AcqRel);
        }
        drop(queues);
        if let Some(waker) = woken {
            waker.wake();
        }
    }
}

/// A [`Ticket`]'s turn to come ([`Ticket::turn`]): ready when it is the head.
#[derive(Debug)]
pub struct Turn<'a> {
    ticket: &'a Ticket,
}

impl Future for Turn<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let ticket = self.ticket;
        let mut queues = ticket.shared.queues.lock();
        let Some(queue) = queues.get_mut(&ticket.key) else { return Poll::Ready(()) };
        if queue.head == Some(ticket.id) {
            return Poll::Ready(());
        }
        match queue.waiters.iter_mut().find(|w| w.id == ticket.id) {
            Some(waiter) => {
                // Under the lock the promotion takes too: no wake-up is lost in between.
                waiter.waker = Some(cx.waker().clone());
                Poll::Pending
            }
            None => Poll::Ready(()),
        }
    }
}

/// What [`decide_in_turn`] came to.
#[derive(Debug)]
pub struct InTurn<E> {
    /// The last decision: allowed, or denied (to answer 429), or the caller's error.
    pub result: Result<Verdict, E>,
    /// Whether the request waited (took a place among the waiting requests).
    pub waited: bool,
}

/// Where a front door's requests wait: the bound on waiting requests, the queues, and the front
/// door's timer (`sleep(d)`: a future ready `d` later, on a clock that moves with the queues').
#[derive(Debug, Clone, Copy)]
pub struct Room<'a, Z> {
    /// The bound.
    pub waiting: &'a Waiting,
    /// The queues.
    pub queues: &'a DelayQueues,
    /// The timer.
    pub sleep: Z,
}

/// Decides a request of `descriptors` under `policy` with `decide`, in turn (see the module docs):
/// behind the waiters of one of its delay keys if there are any (else at once, or from `first`,
/// a decision already made with no waiter ahead), and while a delay rule denies it, as the head of
/// its key's queue, deciding again when capacity is due — within `max_wait` (counted on the queues'
/// clock from its first wait), and only with a place among `room`'s waiting requests. `on_wait` is
/// called when the request takes one.
///
/// A waiter whose `max_wait` runs out before its turn leaves its queue with its last denial, a 429
/// — or, queued behind others before any decision of its own, with one last decision: denied
/// unless capacity happens to be free at that instant (the head about to take it).
pub async fn decide_in_turn<E, F, Fut, Z, Sleep>(
    room: Room<'_, Z>,
    policy: &Policy,
    descriptors: &Descriptors,
    tier: u8,
    first: Option<Verdict>,
    mut decide: F,
    mut on_wait: impl FnMut(),
) -> InTurn<E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Verdict, E>>,
    Z: Fn(Duration) -> Sleep,
    Sleep: Future<Output = ()>,
{
    let Room { waiting, queues, sleep } = room;
    let clock = &queues.shared.clock;
    let mut first = first;
    let mut slot = None;
    let mut ticket: Option<Ticket> = None;
    let mut started: Option<Timestamp> = None;
    let mut deadline: Option<Timestamp> = None;
    let mut due: Option<Duration> = None;
    let mut last: Option<Verdict> = None;
    // Refused a place among the waiting requests already: decided once, and answered.
    let mut refused = false;
    if first.is_none() && !queues.is_empty() {
        for (key, max_wait) in delay_keys(policy, descriptors) {
            let Some(behind) = queues.join_if_busy(&key, tier) else { continue };
            if let Some(place) = waiting.enter() {
                on_wait();
                slot = Some(place);
                let now = behind.now();
                started = Some(now);
                deadline = Some(now.saturating_add(max_wait));
                ticket = Some(behind);
            } else {
                refused = true;
            }
            break;
        }
    }
    loop {
        if let Some(t) = ticket.as_ref().filter(|t| !t.is_head()) {
            // Behind others: whatever capacity was due for this request, the head takes first.
            due = None;
            let left = deadline.map_or(Duration::MAX, |d| d.saturating_since(clock.now()));
            let mut turn = pin!(t.turn());
            let mut timer = pin!(sleep(left));
            let in_time = poll_fn(|cx| {
                if turn.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(true);
                }
                match left.is_zero() || timer.as_mut().poll(cx).is_ready() {
                    true => Poll::Ready(false),
                    false => Poll::Pending,
                }
            })
            .await;
            if !in_time {
                drop(ticket.take());
                let result = match last.take() {
                    Some(denied) => Ok(denied),
                    None => decide().await,
                };
                return InTurn { result, waited: true };
            }
        }
        if let Some(wait) = due.take() {
            sleep(wait).await;
        }
        let verdict = match first.take() {
            Some(verdict) => verdict,
            None => match decide().await {
                Ok(verdict) => verdict,
                Err(error) => return InTurn { result: Err(error), waited: slot.is_some() },
            },
        };
        let now = clock.now();
        let waited = started.map_or(Duration::ZERO, |s| now.saturating_since(s));
        let wait = if verdict.allowed { None } else { next_wait(policy, &verdict, waited) };
        let Some(wait) = wait else { return InTurn { result: Ok(verdict), waited: slot.is_some() } };
        if slot.is_none() {
            let place = if refused { None } else { waiting.enter() };
            let Some(place) = place else { return InTurn { result: Ok(verdict), waited: false } };
            on_wait();
            slot = Some(place);
        }
        let start = *started.get_or_insert(now);
        if let Some(budget) = budget(policy, &verdict) {
            let end = start.saturating_add(budget);
            deadline = Some(deadline.map_or(end, |d| d.min(end)));
        }
        if ticket.is_none() {
            ticket = denied_key(policy, &verdict, descriptors).map(|key| queues.join(key, tier));
        }
        due = Some(wait);
        last = Some(verdict);
    }
}

/// The bound on requests waiting for capacity, and how many waited: shared by the front door's
/// requests (cheap to clone).
#[derive(Debug, Clone)]
pub struct Waiting {
    inner: Arc<Counts>,
}

#[derive(Debug)]
struct Counts {
    max: usize,
    now: AtomicUsize,
    waited: AtomicU64,
    refused: AtomicU64,
}

impl Waiting {
    /// At most `max` requests wait at once.
    pub fn new(max: usize) -> Self {
        Waiting {
            inner: Arc::new(Counts {
                max,
                now: AtomicUsize::new(0),
                waited: AtomicU64::new(0),
                refused: AtomicU64::new(0),
            }),
        }
    }

    /// A place among the waiting requests, or `None` when `max` already wait (the request is then
    /// denied at once). The place is given back when the slot is dropped.
    pub fn enter(&self) -> Option<WaitSlot> {
        let counts = &self.inner;
        let mut now = counts.now.load(Ordering::Relaxed);
        loop {
            if now >= counts.max {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            match counts.now.compare_exchange_weak(now, now + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        counts.waited.fetch_add(1, Ordering::Relaxed);
        Some(WaitSlot { inner: Arc::clone(&self.inner) })
    }

    /// The most requests that wait at once.
    pub fn max(&self) -> usize {
        self.inner.max
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.inner.now.load(Ordering::Relaxed)
    }

    /// Waits begun so far (a request that waits twice counts twice).
    pub fn waited(&self) -> u64 {
        self.inner.waited.load(Ordering::Relaxed)
    }

    /// Requests that would have waited but found `max` already waiting, and were denied.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }
}

/// One waiting request's place (see [`Waiting::enter`]).
#[derive(Debug)]
pub struct WaitSlot {
    inner: Arc<Counts>,
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.inner.now.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::ManualClock;

    fn key(name: &str) -> QueueKey {
        QueueKey(name.as_bytes().into())
    }

    fn queues(weights: &[u32]) -> (DelayQueues, ManualClock) {
        let clock = ManualClock::new(Timestamp::from_secs(1000));
        (DelayQueues::new(Fairness::new(weights, Duration::from_secs(1)).unwrap(), clock.clone()), clock)
    }

    /// Releases the head of `tickets` (it passed) and answers which ticket is the head now.
    fn release_head(tickets: &mut Vec<(usize, Ticket)>) -> Option<usize> {
        let head = tickets.iter().position(|(_, t)| t.is_head()).expect("a queue has a head");
        tickets.remove(head);
        tickets.iter().find(|(_, t)| t.is_head()).map(|(n, _)| *n)
    }

    #[test]
    fn one_tier_is_first_come_first_served_and_newcomers_queue_behind() {
        let (queues, _) = queues(&[1]);
        // No waiters: a newcomer decides at once.
        assert!(queues.join_if_busy(&key("k"), 0).is_none());
        let mut tickets = vec![(0, queues.join(key("k"), 0))];
        assert!(tickets[0].1.is_head());
        tickets.push((1, queues.join(key("k"), 0)));
        tickets.push((2, queues.join(key("k"), 0)));
        // A newcomer while the queue has waiters takes its place behind them.
        tickets.push((3, queues.join_if_busy(&key("k"), 0).expect("waiters: queue behind them")));
        // Another key's queue is another queue.
        assert!(queues.join_if_busy(&key("other"), 0).is_none());
        assert_eq!(queues.len(&key("k")), 4);
        let mut order = Vec::new();
        while let Some(next) = release_head(&mut tickets) {
            order.push(next);
        }
        assert_eq!(order, [1, 2, 3]);
    }

    #[test]
    fn backlogged_tiers_are_released_by_weight() {
        let (queues, _) = queues(&[2, 1]);
        let head = queues.join(key("k"), 0);
        let mut tickets = Vec::new();
        for i in 0..12 {
            tickets.push((i % 2, queues.join(key("k"), (i % 2) as u8)));
        }
        tickets.insert(0, (9, head));
        let mut released = Vec::new();
        for _ in 0..9 {
            released.push(release_head(&mut tickets).unwrap());
        }
        // Two of every three are tier 0.
        assert_eq!(released.iter().filter(|t| **t == 0).count(), 6, "{released:?}");
        assert_eq!(released.iter().filter(|t| **t == 1).count(), 3, "{released:?}");
    }

    #[test]
    fn an_aged_low_tier_overtakes_fresh_high_tier_arrivals() {
        let (queues, clock) = queues(&[128, 64, 32, 16, 8, 4, 2, 1]);
        let mut tickets = vec![(0, queues.join(key("k"), 0)), (7, queues.join(key("k"), 7))];
        // A stream of fresh tier-0 requests, two per release (a growing backlog), releases a second
        // apart. Weights alone would let some 128 of them pass first; aging one tier a second, it
        // has tier 0's weight after 7 s at the latest, and its start is older than theirs.
        let mut released = 0;
        loop {
            tickets.push((0, queues.join(key("k"), 0)));
            tickets.push((0, queues.join(key("k"), 0)));
            clock.advance(Duration::from_secs(1));
            released += 1;
            if release_head(&mut tickets) == Some(7) {
                break;
            }
            assert!(released < 10, "the tier-7 waiter starves");
        }
        assert!(
            tickets.iter().filter(|(tier, _)| *tier == 0).count() >= 2,
            "fresh tier-0 waiters it overtook"
        );
        assert!(released <= 7, "{released}");
    }

    #[test]
    fn a_waiter_that_gives_up_leaves_and_the_next_goes() {
        let (queues, _) = queues(&[1]);
        let a = queues.join(key("k"), 0);
        let b = queues.join(key("k"), 0);
        let c = queues.join(key("k"), 0);
        // b's max_wait ran out: it leaves with its 429.
        drop(b);
        assert_eq!(queues.len(&key("k")), 2);
        drop(a);
        assert!(c.is_head());
    }

    #[test]
    fn queues_are_removed_when_empty() {
        let (queues, _) = queues(&[8, 4, 2, 1]);
        let a = queues.join(key("a"), 0);
        let b = queues.join(key("b"), 3);
        let a2 = queues.join(key("a"), 2);
        assert_eq!(queues.queues(), 2);
        drop(a);
        drop(b);
        assert_eq!(queues.queues(), 1);
        drop(a2);
        assert_eq!((queues.queues(), queues.len(&key("a"))), (0, 0));
        // A tier past the lowest waits as the lowest.
        let _t = queues.join(key("a"), 200);
    }

    #[tokio::test]
    async fn the_woken_head_returns_from_its_turn() {
        let (queues, _) = queues(&[1]);
        let a = queues.join(key("k"), 0);
        let b = queues.join(key("k"), 0);
        let waiter = tokio::spawn(async move {
            b.turn().await;
            b
        });
        tokio::task::yield_now().await;
        drop(a);
        let b = waiter.await.unwrap();
        assert!(b.is_head());
    }

    /// An engine of one delay rule (one request a `window`, `max_wait` 2 s) on a manual clock, whose
    /// one request of the window is taken; the queues on the same clock.
    async fn saturated(
        window: Duration,
    ) -> (crate::Engine<crate::MemoryStore<ManualClock>>, DelayQueues, ManualClock) {
        use std::num::NonZeroU64;
        let window = floodgate_core::FixedWindow::try_new(NonZeroU64::new(1).unwrap(), window);
        let rule =
            Rule::new("smooth", window.unwrap()).action(Action::Delay { max_wait: Duration::from_secs(2) });
        let clock = ManualClock::new(Timestamp::from_secs(100));
        let store = crate::MemoryStore::with_config(Default::default(), clock.clone());
        let engine = crate::Engine::new(Policy::new([rule]).unwrap(), store);
        assert!(engine.check(&Descriptors::new(), 1).await.unwrap().allowed);
        (engine, DelayQueues::new(Fairness::default(), clock.clone()), clock)
    }

    #[tokio::test]
    async fn a_newcomer_queues_behind_the_head_and_leaves_at_max_wait_with_a_429() {
        // The window outlasts max_wait: at max_wait there is still no room.
        let (engine, queues, clock) = saturated(Duration::from_secs(10)).await;
        let policy = engine.policy();
        let any = Descriptors::new();
        let (key, max_wait) = delay_keys(&policy, &any).pop().unwrap();
        assert_eq!(max_wait, Duration::from_secs(2));
        let head = queues.join(key.clone(), 0);
        let waiting = Waiting::new(8);
        // The timer: its time passes on the clock at once (the head never leaves).
        let sleep = |d: Duration| {
            clock.advance(d);
            std::future::ready(())
        };
        let room = Room { waiting: &waiting, queues: &queues, sleep };
        let decisions = AtomicUsize::new(0);
        let decide = || {
            decisions.fetch_add(1, Ordering::Relaxed);
            engine.check(&any, 1)
        };
        let InTurn { result, waited } = decide_in_turn(room, &policy, &any, 0, None, decide, || ()).await;
        // It did not decide ahead of the head; at max_wait it left with one last decision: denied.
        assert!(waited);
        assert!(!result.unwrap().allowed);
        assert_eq!(decisions.load(Ordering::Relaxed), 1);
        assert_eq!((queues.len(&key), waiting.waiting(), waiting.waited()), (1, 0, 1));
        drop(head);
        assert!(queues.is_empty());
    }

    #[tokio::test]
    async fn a_denied_request_waits_as_the_head_for_its_retry_after_then_passes() {
        let (engine, queues, clock) = saturated(Duration::from_secs(1)).await;
        let policy = engine.policy();
        let any = Descriptors::new();
        let waiting = Waiting::new(8);
        let slept = Mutex::new(Vec::new());
        let sleep = |d: Duration| {
            slept.lock().push(d);
            clock.advance(d);
            std::future::ready(())
        };
        let room = Room { waiting: &waiting, queues: &queues, sleep };
        let InTurn { result, waited } =
            decide_in_turn(room, &policy, &any, 3, None, || engine.check(&any, 1), || ()).await;
        assert!(waited && result.unwrap().allowed);
        // Exactly the window's end, once; its queue is gone with it.
        assert_eq!(*slept.lock(), [Duration::from_secs(1)]);
        assert!(queues.is_empty());
        assert_eq!(waiting.waiting(), 0);
    }

    #[test]
    fn fairness_refuses_what_it_cannot_order() {
        let aging = Duration::from_secs(1);
        assert_eq!(Fairness::new(&[], aging), Err(FairnessError::Tiers(0)));
        assert_eq!(Fairness::new(&[1; 9], aging), Err(FairnessError::Tiers(9)));
        assert_eq!(Fairness::new(&[2, 0], aging), Err(FairnessError::ZeroWeight { tier: 1 }));
        assert!(matches!(Fairness::new(&[1, 2], aging), Err(FairnessError::Increasing { tier: 1, .. })));
        assert_eq!(Fairness::new(&[1], Duration::ZERO), Err(FairnessError::Aging));
        assert_eq!(Fairness::default().tiers(), 4);
    }

    #[test]
    fn waiting_is_bounded_and_places_come_back() {
        let waiting = Waiting::new(2);
        let a = waiting.enter().unwrap();
        let _b = waiting.enter().unwrap();
        assert!(waiting.enter().is_none());
        assert_eq!((waiting.waiting(), waiting.waited(), waiting.refused()), (2, 2, 1));
        drop(a);
        assert!(waiting.enter().is_some());
        assert_eq!(waiting.waiting(), 1);
    }
}
