//! The progress bar (indicatif, on stderr; hidden with `--quiet` or when stderr is not a
//! terminal) and the live counters it shows.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::Outcome;

/// Counters shared by workers (flushed in batches, not per request) and the progress bar.
#[derive(Debug, Default)]
pub struct Live {
    /// Allowed so far.
    pub allowed: AtomicU64,
    /// Denied so far.
    pub denied: AtomicU64,
    /// Errors so far.
    pub errors: AtomicU64,
}

/// A worker's unflushed counts.
#[derive(Debug, Default)]
pub struct Batch {
    allowed: u64,
    denied: u64,
    errors: u64,
}

impl Batch {
    /// Counts one outcome; flushes into `live` every 256.
    pub fn count(&mut self, outcome: Outcome, live: &Live) {
        match outcome {
            Outcome::Allowed => self.allowed += 1,
            Outcome::Denied => self.denied += 1,
            Outcome::Error(_) => self.errors += 1,
        }
        if self.allowed + self.denied + self.errors >= 256 {
            self.flush(live);
        }
    }

    /// Adds the counts into `live`.
    pub fn flush(&mut self, live: &Live) {
        live.allowed.fetch_add(self.allowed, Ordering::Relaxed);
        live.denied.fetch_add(self.denied, Ordering::Relaxed);
        live.errors.fetch_add(self.errors, Ordering::Relaxed);
        *self = Batch::default();
    }
}

impl Live {
    /// Decisions counted so far.
    pub fn sent(&self) -> u64 {
        self.allowed.load(Ordering::Relaxed)
            + self.denied.load(Ordering::Relaxed)
            + self.errors.load(Ordering::Relaxed)
    }

    fn message(&self) -> String {
        format!(
            "allowed {} · denied {} · errors {}",
            self.allowed.load(Ordering::Relaxed),
            self.denied.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed)
        )
    }
}

/// A progress bar over a length (milliseconds of a timed run, or events of a simulation).
#[derive(Debug, Clone)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `len` steps titled `title`; hidden when `quiet`.
    pub fn new(title: &str, len: u64, quiet: bool) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some(len),
            if quiet { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() },
        );
        let style =
            ProgressStyle::with_template("{prefix} [{elapsed_precise}] {wide_bar} {percent:>3}% {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(title.to_owned());
        Progress { bar }
    }

    /// Moves to `pos`.
    pub fn set(&self, pos: u64) {
        self.bar.set_position(pos);
    }

    /// Shows `msg` beside the bar.
    pub fn message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    /// Prints `line` above the bar (nothing when the bar is hidden).
    pub fn println(&self, line: &str) {
        self.bar.println(line);
    }

    /// Clears the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// Ticks every 100 ms with the elapsed milliseconds since `started` and `live`'s counts,
    /// until `stop` is set.
    pub fn tick_timed(
        &self,
        started: Instant,
        live: Arc<Live>,
        stop: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                this.set(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
                this.message(live.message());
            }
        })
    }
}
