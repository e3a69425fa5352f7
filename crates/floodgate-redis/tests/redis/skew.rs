//! Instances whose clocks disagree by hours still agree on every decision: Redis's clock decides.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Descriptors, Engine, Policy, Rule};
use floodgate_core::calendar::Period;
use floodgate_core::{Calendar, Clock, Quota, SlidingLog, SystemClock, Timestamp};

/// The process clock moved by a fixed amount.
#[derive(Debug)]
struct Skewed {
    clock: SystemClock,
    ahead: bool,
    by: Duration,
}

impl Clock for Skewed {
    fn now(&self) -> Timestamp {
        let now = self.clock.now();
        if self.ahead { now.saturating_add(self.by) } else { now.saturating_sub(self.by) }
    }
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

#[tokio::test]
async fn instances_with_skewed_clocks_agree_on_every_decision() {
    let base = crate::node_store().await;
    // One instance 3 hours ahead, one 26 hours behind: their guesses of the quota's day differ.
    let ahead = base.with_local_clock(Skewed {
        clock: SystemClock::new(),
        ahead: true,
        by: Duration::from_secs(3 * 3600),
    });
    let behind = base.with_local_clock(Skewed {
        clock: SystemClock::new(),
        ahead: false,
        by: Duration::from_secs(26 * 3600),
    });
    let policy = || {
        Policy::new([
            Rule::new("daily", Quota::new(nz(10), Calendar::utc(Period::Day))).key(["user"]),
            Rule::new("hourly", SlidingLog::try_new(nz(20), Duration::from_secs(3600)).expect("a log"))
                .key(["user"]),
        ])
        .expect("a policy")
    };
    let engines = [Engine::new(policy(), ahead), Engine::new(policy(), behind)];
    let user = format!("skew-{}-{:?}", std::process::id(), SystemClock::new().now());
    let request = Descriptors::new().with("user", user);
    let real = SystemClock::new();
    let mut admitted = 0;
    for i in 0..16 {
        let verdict = engines[i % 2].check(&request, 1).await.expect("a valid request");
        assert_eq!(verdict.store_error, None);
        // The decision's time is Redis's, not the instance's skewed clock.
        let drift = verdict.at.as_micros().abs_diff(real.now().as_micros());
        assert!(drift < 2_000_000, "decision time {drift}µs away from the real time");
        let daily = &verdict.limits[0];
        assert_eq!(daily.decision.remaining, 10u64.saturating_sub(admitted + u64::from(verdict.allowed)));
        if verdict.allowed {
            admitted += 1;
        } else {
            // Denied until the next UTC midnight by Redis's clock, whichever instance asked.
            let day = 86_400_000_000;
            let midnight = (verdict.at.as_micros() / day + 1) * day;
            let retry = daily.decision.retry_after.expect("a denial");
            assert_eq!(verdict.at.as_micros() + u64::try_from(retry.as_micros()).expect("fits"), midnight);
        }
    }
    assert_eq!(admitted, 10, "one shared quota, whatever the instances' clocks say");
}
