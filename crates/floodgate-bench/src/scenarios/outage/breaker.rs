//! The servers' store breakers, watched on their `/metrics` through an `outage` run: when one
//! opened after the fault's start, and when all were closed again after its end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::phases::Span;
use crate::harness::client;
use crate::report::units::micros;

/// One look at the servers' breakers: when (µs from the start of the load), and whether any was
/// not closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BreakerSample {
    pub(super) at_us: u64,
    pub(super) any_open: bool,
}

/// Reads `floodgate_store_breaker_state` from each server's `/metrics` every 10 ms until `until`
/// or `stop`.
pub(super) async fn watch_breakers(
    urls: Vec<String>,
    started: Instant,
    until: Instant,
    stop: Arc<AtomicBool>,
) -> Vec<BreakerSample> {
    let pages = client::pooled();
    let uris: Vec<String> = urls.iter().map(|u| format!("{u}/metrics")).collect();
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let at_us = micros(started.elapsed());
        let mut any_open = false;
        for uri in &uris {
            let Ok((_, body)) = client::get_on(&pages, uri, Duration::from_millis(500)).await else {
                continue;
            };
            any_open |= breaker_open(&body);
        }
        samples.push(BreakerSample { at_us, any_open });
    }
    samples
}

/// Whether a `/metrics` text says the store's breaker is open or half-open.
fn breaker_open(metrics: &[u8]) -> bool {
    let text = String::from_utf8_lossy(metrics);
    text.lines()
        .filter(|l| l.starts_with("floodgate_store_breaker_state{"))
        .filter_map(|l| l.rsplit_once(' '))
        .any(|(_, v)| v.trim().parse::<f64>().is_ok_and(|v| v > 0.0))
}

/// When the breaker opened after the fault's start, and closed everywhere after its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct BreakerTiming {
    pub(super) opened_after_us: Option<u64>,
    pub(super) closed_after_us: Option<u64>,
}

pub(super) fn breaker_timing(samples: &[BreakerSample], span: Span) -> BreakerTiming {
    let Some(opened) = samples.iter().find(|s| s.at_us >= span.start_us && s.any_open) else {
        return BreakerTiming::default();
    };
    let closed = samples.iter().find(|s| s.at_us >= span.end_us.max(opened.at_us) && !s.any_open);
    BreakerTiming {
        opened_after_us: Some(opened.at_us - span.start_us),
        closed_after_us: closed.map(|s| s.at_us - span.end_us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_opens_after_the_fault_starts_and_closes_after_it_ends() {
        let sample = |at_ms: u64, any_open: bool| BreakerSample { at_us: at_ms * 1000, any_open };
        let span = Span { start_us: 2_000_000, end_us: 4_000_000 };
        let samples = [
            sample(1_990, false),
            sample(2_000, false),
            sample(2_030, true),
            sample(3_000, true),
            sample(4_000, true),
            sample(4_210, false),
        ];
        let timing = breaker_timing(&samples, span);
        assert_eq!(timing, BreakerTiming { opened_after_us: Some(30_000), closed_after_us: Some(210_000) });
        assert_eq!(breaker_timing(&samples[..2], span), BreakerTiming::default(), "never opened");
        let still_open = breaker_timing(&samples[..5], span);
        assert_eq!((still_open.opened_after_us, still_open.closed_after_us), (Some(30_000), None));
        let metrics =
            b"# TYPE floodgate_store_breaker_state gauge\nfloodgate_store_breaker_state{store=\"redis\"} 2\n";
        assert!(breaker_open(metrics));
        assert!(!breaker_open(b"floodgate_store_breaker_state{store=\"redis\"} 0\n"));
    }
}
