//! What a `soak` run collects and judges: every `--sample`, a sample of what the server process
//! holds and of each kind's answers over the interval (by answer time); after the warm-up, each
//! kind's p99 over whole windows of `--p99-window`; and each figure's drift from its first value
//! after the warm-up.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::traffic::{Answer, Kind, PerKind};
use crate::harness::process::Holdings;
use crate::report::math::{latency_histogram, percentiles};
use crate::report::{Errors, Outcome, Tally};

/// What the server holds at a sample, read by the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Figures {
    pub(super) holdings: Holdings,
    /// The store's keys: `floodgate_keys` (memory store) or `DBSIZE` (Redis).
    pub(super) keys: Option<u64>,
}

/// One sample: the process at its time, the answers of the interval ending then.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Sample {
    /// When it was taken (the end of its interval), s from the start of the load.
    pub(super) t_s: f64,
    pub(super) rss_bytes: Option<u64>,
    pub(super) fds: Option<u64>,
    pub(super) threads: Option<u64>,
    pub(super) keys: Option<u64>,
    /// Answers in the interval (`dropped` requests included), and of them errors and wrong ones.
    pub(super) answered: u64,
    pub(super) errors: u64,
    pub(super) wrong: u64,
    /// Each kind's p99 over the interval (`null` without answers).
    pub(super) p99_us: PerKind<Option<f64>>,
}

/// A window of whole intervals after the warm-up, over which each kind's p99 is judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Window {
    pub(super) from_s: f64,
    pub(super) to_s: f64,
    pub(super) answered: PerKind<u64>,
    pub(super) p99_us: PerKind<Option<f64>>,
}

/// How far one figure moved from its first value after the warm-up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Drift {
    /// `rss_bytes`, `fds`, or `<kind>_p99_us`.
    pub(super) figure: String,
    /// The goal: every later value within this fraction of the baseline, either way.
    pub(super) goal: f64,
    /// The first value after the warm-up, and when (a sample's time, or a window's start).
    pub(super) baseline: Option<f64>,
    pub(super) baseline_at_s: Option<f64>,
    /// The last value, and its drift (`end / baseline − 1`).
    pub(super) end: Option<f64>,
    pub(super) end_drift: Option<f64>,
    /// The drift of largest size among the later values, with its sign.
    pub(super) worst_drift: Option<f64>,
    /// Later values compared with the baseline.
    pub(super) compared: u64,
    /// Whether every one was within the goal (`null` with none to compare).
    pub(super) held: Option<bool>,
}

impl Drift {
    /// The drift of `values` (time, value; `None` where unread), from the first one.
    pub(super) fn of(
        figure: String,
        goal: f64,
        values: impl IntoIterator<Item = (f64, Option<f64>)>,
    ) -> Drift {
        let mut values = values.into_iter().filter_map(|(t, v)| Some((t, v?)));
        let baseline = values.find(|&(_, v)| v > 0.0);
        let mut drift = Drift {
            figure,
            goal,
            baseline: baseline.map(|b| b.1),
            baseline_at_s: baseline.map(|b| b.0),
            end: None,
            end_drift: None,
            worst_drift: None,
            compared: 0,
            held: None,
        };
        let Some((_, base)) = baseline else { return drift };
        for (_, value) in values {
            let d = value / base - 1.0;
            drift.compared += 1;
            drift.end = Some(value);
            drift.end_drift = Some(d);
            if drift.worst_drift.is_none_or(|w| d.abs() > w.abs()) {
                drift.worst_drift = Some(d);
            }
        }
        if drift.compared > 0 {
            drift.held = drift.worst_drift.map(|w| w.abs() <= goal);
        }
        drift
    }
}

/// A hot user's requests over the run.
#[derive(Debug, Clone, Copy, Default)]
struct HotUser {
    sent: u64,
    admitted: u64,
    errors: u64,
}

/// What the hot users came to, against their budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct HotUsers {
    pub(super) hot_users: u64,
    /// Each one's budget for the run.
    pub(super) hot_limit: u64,
    pub(super) hot_sent: u64,
    pub(super) hot_admitted: u64,
    /// Users admitted more than their budget, and the admissions past it (wrong).
    pub(super) hot_users_past_budget: u64,
    pub(super) hot_admitted_past_budget: u64,
    /// Users without errors admitted fewer than `min(sent, limit)` (wrong).
    pub(super) hot_users_short_of_budget: u64,
}

/// What a run collected.
#[derive(Debug)]
pub(super) struct Collected {
    pub(super) kinds: PerKind<Tally>,
    /// Wrong answers by reason.
    pub(super) wrong: Errors,
    pub(super) wrong_per_kind: PerKind<u64>,
    pub(super) hot: HotUsers,
    pub(super) samples: Vec<Sample>,
    pub(super) windows: Vec<Window>,
}

/// Collects the answers, interval by interval.
#[derive(Debug)]
pub(super) struct Collector {
    sample_us: u64,
    warmup_us: u64,
    duration_us: u64,
    window_intervals: usize,
    kinds: PerKind<Tally>,
    wrong: BTreeMap<&'static str, u64>,
    wrong_per_kind: PerKind<u64>,
    hot: Vec<HotUser>,
    // The open interval: answers from `start_us` to `end_us` (`u64::MAX`: the last one).
    start_us: u64,
    end_us: u64,
    latency: PerKind<Histogram<u64>>,
    answered: u64,
    errors: u64,
    wrong_now: u64,
    /// Answers past the open interval's end, recorded once it is closed.
    early: Vec<Answer>,
    // The open window.
    window: PerKind<Histogram<u64>>,
    window_from_us: Option<u64>,
    window_len: usize,
    samples: Vec<Sample>,
    windows: Vec<Window>,
}

impl Collector {
    /// Samples every `sample_us` while the load lasts (`duration_us`), and once after it; windows
    /// of `window_intervals` intervals from the first interval that starts after `warmup_us`.
    pub(super) fn new(
        sample_us: u64,
        warmup_us: u64,
        duration_us: u64,
        window_intervals: usize,
        hot_users: u32,
    ) -> Collector {
        let histograms = || PerKind::from_fn(|_| latency_histogram());
        Collector {
            sample_us,
            warmup_us,
            duration_us,
            window_intervals: window_intervals.max(1),
            kinds: PerKind::default(),
            wrong: BTreeMap::new(),
            wrong_per_kind: PerKind::default(),
            hot: vec![HotUser::default(); hot_users as usize],
            start_us: 0,
            end_us: if sample_us < duration_us { sample_us } else { u64::MAX },
            latency: histograms(),
            answered: 0,
            errors: 0,
            wrong_now: 0,
            early: Vec::new(),
            window: histograms(),
            window_from_us: None,
            window_len: 0,
            samples: Vec::new(),
            windows: Vec::new(),
        }
    }

    /// When the open interval ends (µs from the start), unless it is the last.
    pub(super) fn next_sample_us(&self) -> Option<u64> {
        (self.end_us != u64::MAX).then_some(self.end_us)
    }

    /// Counts one answer.
    pub(super) fn record(&mut self, a: Answer) {
        if a.answered_us >= self.end_us {
            self.early.push(a);
            return;
        }
        self.kinds[a.kind].record(a.outcome, a.latency_ns, a.answered_us / 1000);
        let latency = &mut self.latency[a.kind];
        let _ = latency.record(a.latency_ns.clamp(1, latency.high()));
        self.answered += 1;
        if matches!(a.outcome, Outcome::Error(_)) {
            self.errors += 1;
        }
        if let Some(reason) = a.wrong {
            *self.wrong.entry(reason).or_default() += 1;
            self.wrong_per_kind[a.kind] += 1;
            self.wrong_now += 1;
        }
        if let Some(user) = a.hot.and_then(|i| self.hot.get_mut(i as usize)) {
            user.sent += 1;
            user.admitted += u64::from(a.outcome == Outcome::Allowed);
            user.errors += u64::from(matches!(a.outcome, Outcome::Error(_)));
        }
    }

    /// Closes the open interval at `at_us` with the server's `figures`; returns its sample.
    pub(super) fn close(&mut self, at_us: u64, figures: Figures) -> &Sample {
        let p99 = |h: &Histogram<u64>| (!h.is_empty()).then(|| percentiles(h).p99_us);
        self.samples.push(Sample {
            t_s: at_us as f64 / 1e6,
            rss_bytes: figures.holdings.rss_bytes,
            fds: figures.holdings.fds,
            threads: figures.holdings.threads,
            keys: figures.keys,
            answered: self.answered,
            errors: self.errors,
            wrong: self.wrong_now,
            p99_us: PerKind::from_fn(|kind| p99(&self.latency[kind])),
        });
        if self.start_us >= self.warmup_us {
            for kind in Kind::ALL {
                let _ = self.window[kind].add(&self.latency[kind]);
            }
            self.window_from_us.get_or_insert(self.start_us);
            self.window_len += 1;
            if self.window_len == self.window_intervals {
                let from_us = self.window_from_us.take().unwrap_or(self.start_us);
                self.windows.push(Window {
                    from_s: from_us as f64 / 1e6,
                    to_s: at_us as f64 / 1e6,
                    answered: PerKind::from_fn(|kind| self.window[kind].len()),
                    p99_us: PerKind::from_fn(|kind| p99(&self.window[kind])),
                });
                for kind in Kind::ALL {
                    self.window[kind].reset();
                }
                self.window_len = 0;
            }
        }
        for kind in Kind::ALL {
            self.latency[kind].reset();
        }
        (self.answered, self.errors, self.wrong_now) = (0, 0, 0);
        self.start_us = at_us;
        let next = self.end_us.saturating_add(self.sample_us);
        self.end_us = if next < self.duration_us { next } else { u64::MAX };
        for a in std::mem::take(&mut self.early) {
            self.record(a);
        }
        self.samples.last().expect("a sample was just pushed")
    }

    /// Answers counted so far in the open interval, and whether some wait past its end.
    #[cfg(test)]
    fn open(&self) -> (u64, usize) {
        (self.answered, self.early.len())
    }

    /// The run's collection, the hot users judged against `hot_limit` (a partial window at the end
    /// is left out of the windows).
    pub(super) fn finish(mut self, hot_limit: u64) -> Collected {
        let (mut over, mut past, mut under) = (0, 0, 0);
        for user in &self.hot {
            if user.admitted > hot_limit {
                over += 1;
                past += user.admitted - hot_limit;
            } else if user.errors == 0 && user.admitted < user.sent.min(hot_limit) {
                under += 1;
            }
        }
        if past > 0 {
            *self.wrong.entry("hot_past_budget").or_default() += past;
        }
        if under > 0 {
            *self.wrong.entry("hot_short_of_budget").or_default() += under;
        }
        let hot = HotUsers {
            hot_users: self.hot.len() as u64,
            hot_limit,
            hot_sent: self.hot.iter().map(|u| u.sent).sum(),
            hot_admitted: self.hot.iter().map(|u| u.admitted).sum(),
            hot_users_past_budget: over,
            hot_admitted_past_budget: past,
            hot_users_short_of_budget: under,
        };
        let wrong = Errors {
            total: self.wrong.values().sum(),
            by_kind: self.wrong.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        };
        Collected {
            kinds: self.kinds,
            wrong,
            wrong_per_kind: self.wrong_per_kind,
            hot,
            samples: self.samples,
            windows: self.windows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(kind: Kind, outcome: Outcome, latency_ms: u64, answered_ms: u64) -> Answer {
        Answer {
            kind,
            outcome,
            wrong: None,
            latency_ns: latency_ms * 1_000_000,
            answered_us: answered_ms * 1000,
            hot: None,
        }
    }

    fn figures(rss: u64) -> Figures {
        Figures { holdings: Holdings { rss_bytes: Some(rss), fds: Some(10), threads: Some(4) }, keys: None }
    }

    #[test]
    fn answers_go_to_the_interval_they_were_answered_in_and_windows_start_after_the_warm_up() {
        // Samples every 1 s for 5 s, warm-up 1 s, windows of 2 intervals.
        let mut c = Collector::new(1_000_000, 1_000_000, 5_000_000, 2, 0);
        assert_eq!(c.next_sample_us(), Some(1_000_000));
        c.record(answer(Kind::Check, Outcome::Allowed, 1, 100));
        c.record(answer(Kind::Gateway, Outcome::Error("timeout"), 2000, 1_200));
        assert_eq!(c.open(), (1, 1), "the one answered after 1 s waits for the next interval");
        let first = c.close(1_000_000, figures(100)).clone();
        assert_eq!((first.t_s, first.answered, first.errors), (1.0, 1, 0));
        assert_eq!((first.p99_us.check.map(f64::round), first.p99_us.gateway), (Some(1000.0), None));
        for s in 2..=4u64 {
            c.record(answer(Kind::Check, Outcome::Denied, s, s * 1000 - 500));
            c.close(s * 1_000_000, figures(100 + s));
        }
        assert_eq!(c.next_sample_us(), None, "the last interval runs to the end of the drain");
        c.record(answer(Kind::Reserve, Outcome::Allowed, 1, 5_300));
        c.close(5_400_000, figures(110));
        let collected = c.finish(10);
        let answered: Vec<u64> = collected.samples.iter().map(|s| s.answered).collect();
        assert_eq!(answered, [1, 2, 1, 1, 1], "the timeout answered at 1.2 s is in the second interval");
        assert_eq!(collected.samples[1].errors, 1);
        let windows: Vec<(f64, f64)> = collected.windows.iter().map(|w| (w.from_s, w.to_s)).collect();
        assert_eq!(windows, [(1.0, 3.0), (3.0, 5.4)], "intervals from 1 s on, two at a time");
        assert_eq!(collected.windows[0].answered.gateway, 1);
        assert_eq!(collected.kinds.check.sent() + collected.kinds.gateway.sent(), 5);
        assert_eq!(collected.kinds.reserve.allowed, 1);
    }

    #[test]
    fn a_partial_window_at_the_end_is_left_out() {
        let mut c = Collector::new(1_000_000, 0, 3_000_000, 2, 0);
        for s in 1..=3u64 {
            c.record(answer(Kind::Check, Outcome::Allowed, 1, s * 1000 - 1));
            c.close(s * 1_000_000, figures(1));
        }
        assert_eq!(c.finish(1).windows.len(), 1);
    }

    #[test]
    fn hot_users_past_or_short_of_their_budget_are_wrong() {
        let mut c = Collector::new(1_000_000, 0, 1_000_000, 1, 3);
        let hot = |user: u32, outcome| Answer { hot: Some(user), ..answer(Kind::Check, outcome, 1, 10) };
        // Budget 3. User 0: 3 admitted, then 2 denied (exact). User 1: 4 admitted (one past).
        // User 2: 1 admitted, then 1 denied without an error (short of it).
        for outcome in
            [Outcome::Allowed, Outcome::Allowed, Outcome::Allowed, Outcome::Denied, Outcome::Denied]
        {
            c.record(hot(0, outcome));
        }
        for _ in 0..4 {
            c.record(hot(1, Outcome::Allowed));
        }
        c.record(hot(2, Outcome::Allowed));
        c.record(hot(2, Outcome::Denied));
        c.record(Answer { wrong: Some("cold_denied"), ..answer(Kind::Gateway, Outcome::Denied, 1, 20) });
        c.close(1_000_000, figures(1));
        let collected = c.finish(3);
        let h = &collected.hot;
        assert_eq!((h.hot_users, h.hot_sent, h.hot_admitted), (3, 11, 8));
        assert_eq!(
            (h.hot_users_past_budget, h.hot_admitted_past_budget, h.hot_users_short_of_budget),
            (1, 1, 1)
        );
        assert_eq!(collected.wrong.total, 3);
        assert_eq!(collected.wrong.by_kind["cold_denied"], 1);
        assert_eq!(collected.wrong_per_kind.gateway, 1);
        assert_eq!(collected.samples[0].wrong, 1, "the hot users are judged at the end, not in a sample");
    }

    #[test]
    fn a_drift_is_from_the_first_value_and_holds_within_its_goal_either_way() {
        let values =
            [(10.0, None), (20.0, Some(100.0)), (30.0, Some(104.0)), (40.0, Some(93.0)), (50.0, Some(101.0))];
        let d = Drift::of("rss_bytes".into(), 0.05, values);
        assert_eq!(
            (d.baseline, d.baseline_at_s, d.end, d.compared),
            (Some(100.0), Some(20.0), Some(101.0), 3)
        );
        assert!((d.worst_drift.unwrap() + 0.07).abs() < 1e-9 && (d.end_drift.unwrap() - 0.01).abs() < 1e-9);
        assert_eq!(d.held, Some(false), "7 % less is not flat");
        assert_eq!(Drift::of("fds".into(), 0.05, [(1.0, Some(40.0)), (2.0, Some(41.0))]).held, Some(true));
        let alone = Drift::of("fds".into(), 0.05, [(1.0, Some(40.0)), (2.0, None)]);
        assert_eq!((alone.baseline, alone.compared, alone.held), (Some(40.0), 0, None));
    }
}
