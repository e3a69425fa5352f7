//! `--suggest` on generated logs whose per-key peaks are known by construction: each key sends
//! bursts at one instant, far enough apart (over two windows) that no algorithm sees two bursts at
//! once, so every algorithm's peak for the key is its largest burst. The suggestion must be
//! exactly the known answer.

use floodgate_replay::{self as replay, Options};

use super::{T0, combined, temp};

const POLICY: &str =
    "rules:\n  - name: per-ip\n    key: [ip]\n    algorithm: sliding_window\n    limit: 20\n    window: 1m\n";

/// Key `k`'s largest burst: a spread of values with repeats.
fn peak_of(k: u64) -> u64 {
    1 + (k * 37) % 61
}

/// The log: for each of `keys` keys, a burst of its peak at minute 1 (second 10), and a burst of
/// half of it at minute 5 (second 30).
fn log(keys: u64) -> std::path::PathBuf {
    let mut text = String::new();
    for (minute, second, half) in [(1, 10, false), (5, 30, true)] {
        for k in 0..keys {
            let n = if half { peak_of(k) / 2 } else { peak_of(k) };
            let ip = format!("10.{}.{}.{}", k / 65536, k / 256 % 256, k % 256);
            for _ in 0..n {
                text.push_str(&combined(&ip, "-", T0 + minute * 60 + second, "GET /api/items", None));
            }
        }
    }
    let path = temp("suggest.log");
    std::fs::write(&path, text).expect("log");
    path
}

fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn suggest(keys: u64, share: f64, headroom: f64) -> Vec<floodgate_replay::suggest::Suggestion> {
    let path = log(keys);
    let mut options = Options::new(vec![path.clone()]);
    options.suggest = true;
    options.max_refused_keys = share;
    options.headroom = headroom;
    let config = floodgate_config::parse("policy.yaml", POLICY).expect("policy");
    let report = replay::replay(&options, config, None).expect("replay");
    let _ = std::fs::remove_file(&path);
    let replay::ReplayReport::One(report) = report else { panic!("one policy") };
    report.suggest.expect("suggestions")
}

#[test]
fn the_suggestion_is_the_known_answer_for_every_algorithm() {
    let keys = 1000;
    let mut peaks: Vec<u64> = (0..keys).map(peak_of).collect();
    peaks.sort_unstable();
    // 0.1 % of 1000 keys: one key may be refused, so the limit is the second-highest peak.
    let expected = peaks[peaks.len() - 2];
    let rows = suggest(keys, 0.001, 0.0);
    let algorithms: Vec<_> = rows.iter().map(|r| r.algorithm).collect();
    assert_eq!(algorithms, ["fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra"]);
    for r in &rows {
        assert_eq!(r.limit, expected, "{r:?}");
        assert_eq!(r.keys, keys);
        assert_eq!(r.peak_p50, nearest_rank(&peaks, 0.5), "{r:?}");
        assert_eq!(r.peak_p99, nearest_rank(&peaks, 0.99), "{r:?}");
        assert_eq!(r.peak_p999, nearest_rank(&peaks, 0.999), "{r:?}");
        assert_eq!(r.peak_max, 61, "{r:?}");
        assert_eq!(r.window_s, 60.0);
    }
    // The rule's own row says how many keys its limit of 20 refuses: those whose peak is above 20.
    let own = rows.iter().find(|r| r.current).expect("the rule's own algorithm");
    assert_eq!(own.algorithm, "sliding_window");
    assert_eq!(own.keys_over_current, Some(peaks.iter().filter(|p| **p > 20).count() as u64));
}

#[test]
fn a_larger_share_and_headroom_move_the_limit_exactly() {
    let keys = 1000;
    let mut peaks: Vec<u64> = (0..keys).map(peak_of).collect();
    peaks.sort_unstable();
    // 5 % may be refused: the 50 highest peaks are left out.
    let base = peaks[peaks.len() - 1 - 50];
    let rows = suggest(keys, 0.05, 0.25);
    for r in &rows {
        assert_eq!(r.limit, (base as f64 * 1.25).ceil() as u64, "{r:?} (base {base})");
    }
}
