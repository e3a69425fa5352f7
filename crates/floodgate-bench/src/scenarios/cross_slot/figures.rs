//! The arithmetic of `cross-slot`: which request of the plan is abusive and whose it is, and what
//! one order's counts come to (under-admission per 10,000, the tenant's room accounted for).

use serde::Serialize;

/// The requests of one order: `requests` in all, `abusive_bp` of every 10,000 abusive (basis
/// points), spread evenly over the run, over `abusers` and `users` in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) requests: u64,
    pub(super) abusive_bp: u64,
    pub(super) abusers: u64,
    pub(super) users: u64,
}

/// Who sends one request of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sender {
    /// Abuser number `n`: its own limit is spent, so it is denied.
    Abuser(u64),
    /// Normal user number `n`: its own limit has room.
    User(u64),
}

impl Plan {
    /// Abusive requests among the first `i`.
    fn abusive_before(&self, i: u64) -> u64 {
        u64::try_from(u128::from(i) * u128::from(self.abusive_bp) / 10_000).unwrap_or(u64::MAX)
    }

    /// Abusive requests in the plan.
    pub(super) fn abusive(&self) -> u64 {
        self.abusive_before(self.requests)
    }

    /// Normal requests in the plan: the tenant's room, exactly.
    pub(super) fn normal(&self) -> u64 {
        self.requests - self.abusive()
    }

    /// Who sends request `i` (`0..requests`): the `k`-th abusive request is abuser `k mod abusers`'s,
    /// the `k`-th normal one user `k mod users`'s.
    pub(super) fn sender(&self, i: u64) -> Sender {
        let before = self.abusive_before(i);
        if self.abusive_before(i + 1) > before {
            Sender::Abuser(before % self.abusers)
        } else {
            Sender::User((i - before) % self.users)
        }
    }
}

/// What one order's load came to: counted by the callers, and the tenant's room read from the
/// store once every give-back had landed or was lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// The tenant's room when the load started: the plan's normal requests.
    pub(super) room: u64,
    pub(super) normal_sent: u64,
    pub(super) normal_admitted: u64,
    /// Normal requests the store did not decide (an error, a deadline).
    pub(super) normal_errors: u64,
    pub(super) abusive_sent: u64,
    pub(super) abusive_admitted: u64,
    pub(super) abusive_errors: u64,
    /// The tenant's room left at the end.
    pub(super) tenant_remaining: u64,
}

/// The figures of one order's counts (JSON fields, docs/bench.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(super) struct Figures {
    /// Normal requests denied: each had room in both its limits, so each is an under-admission.
    pub(super) normal_refused: u64,
    /// `normal_refused` per 10,000 requests sent (normal and abusive).
    pub(super) under_admitted_per_10k_requests: f64,
    /// `normal_refused` per 10,000 normal requests sent.
    pub(super) under_admitted_per_10k_normal: f64,
    /// The tenant's room taken by the end: `room − tenant_remaining`.
    pub(super) tenant_taken: u64,
    /// Requests admitted, normal and abusive: each took one unit of the tenant's room.
    pub(super) tenant_admitted: u64,
    /// `tenant_taken − tenant_admitted`: units charged for requests that were not admitted and
    /// still held at the end (a give-back lost, a check Redis ran after its caller gave up). Below
    /// zero would mean admissions the tenant's limit did not count.
    pub(super) charged_not_admitted: i64,
    /// `charged_not_admitted == 0`: the tenant's remaining room is what the requests that were
    /// not admitted left (`normal_refused` when no request failed).
    pub(super) exact: bool,
    /// `tenant_admitted ≤ room`.
    pub(super) never_over_admitted: bool,
}

impl Counts {
    /// The figures these counts come to.
    pub(super) fn figures(&self) -> Figures {
        let normal_refused =
            self.normal_sent.saturating_sub(self.normal_admitted).saturating_sub(self.normal_errors);
        let sent = self.normal_sent + self.abusive_sent;
        let tenant_taken = self.room.saturating_sub(self.tenant_remaining);
        let tenant_admitted = self.normal_admitted + self.abusive_admitted;
        let charged_not_admitted = signed(tenant_taken) - signed(tenant_admitted);
        Figures {
            normal_refused,
            under_admitted_per_10k_requests: per_10k(normal_refused, sent),
            under_admitted_per_10k_normal: per_10k(normal_refused, self.normal_sent),
            tenant_taken,
            tenant_admitted,
            charged_not_admitted,
            exact: charged_not_admitted == 0,
            never_over_admitted: tenant_admitted <= self.room,
        }
    }
}

/// `part` per 10,000 of `whole` (0 when `whole` is 0).
pub(super) fn per_10k(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 10_000.0 / whole as f64 }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(requests: u64, abusive_bp: u64) -> Plan {
        Plan { requests, abusive_bp, abusers: 3, users: 5 }
    }

    #[test]
    fn the_plan_spreads_its_abusive_requests_evenly_and_counts_them_exactly() {
        for (requests, bp) in [(20_000, 5_000), (1_001, 5_000), (999, 3_333), (10, 0), (10, 10_000), (7, 1)] {
            let p = plan(requests, bp);
            let senders: Vec<Sender> = (0..requests).map(|i| p.sender(i)).collect();
            let abusive = senders.iter().filter(|s| matches!(s, Sender::Abuser(_))).count() as u64;
            assert_eq!(abusive, p.abusive(), "{requests} at {bp} bp");
            assert_eq!(p.normal() + p.abusive(), requests);
            assert_eq!(p.abusive(), requests * bp / 10_000);
        }
        // Half and half: they alternate, each kind over its senders in turn.
        let p = plan(8, 5_000);
        let senders: Vec<Sender> = (0..8).map(|i| p.sender(i)).collect();
        use Sender::{Abuser, User};
        assert_eq!(senders, [User(0), Abuser(0), User(1), Abuser(1), User(2), Abuser(2), User(3), Abuser(0)]);
    }

    #[test]
    fn every_refused_normal_request_is_an_under_admission_and_the_room_adds_up() {
        // 10,000 requests, 5,000 normal: 12 refused, 3 failed; no abusive request admitted.
        let counts = Counts {
            room: 5_000,
            normal_sent: 5_000,
            normal_admitted: 4_985,
            normal_errors: 3,
            abusive_sent: 5_000,
            abusive_admitted: 0,
            abusive_errors: 0,
            tenant_remaining: 15,
        };
        let f = counts.figures();
        assert_eq!(f.normal_refused, 12);
        assert_eq!(f.under_admitted_per_10k_requests, 12.0);
        assert_eq!(f.under_admitted_per_10k_normal, 24.0);
        assert_eq!((f.tenant_taken, f.tenant_admitted, f.charged_not_admitted), (4_985, 4_985, 0));
        assert!(f.exact && f.never_over_admitted);

        // Two units still held for requests that were not admitted: not exact, never over.
        let held = Counts { tenant_remaining: 13, ..counts }.figures();
        assert_eq!(held.charged_not_admitted, 2);
        assert!(!held.exact && held.never_over_admitted);

        // An abusive request admitted past its own limit is counted against the tenant's room.
        let over = Counts {
            normal_admitted: 5_000,
            normal_errors: 0,
            abusive_admitted: 1,
            tenant_remaining: 0,
            ..counts
        };
        let f = over.figures();
        assert_eq!((f.tenant_admitted, f.charged_not_admitted), (5_001, -1));
        assert!(!f.exact && !f.never_over_admitted);
    }

    #[test]
    fn nothing_sent_is_zero_per_10k() {
        assert_eq!(per_10k(0, 0), 0.0);
        assert_eq!(Counts::default().figures().under_admitted_per_10k_normal, 0.0);
    }
}
