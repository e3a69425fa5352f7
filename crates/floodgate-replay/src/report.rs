//! The replay's report: the JSON of DESIGN.md §13 (field names stable, documented in
//! `docs/bench.md`), and the table printed on the terminal.

use std::fmt::Write as _;

use serde::Serialize;

use crate::source::{Malformed, Reading};
use crate::suggest::Suggestion;
use crate::tally::{RuleTally, Tally};

/// One policy's report.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyReport {
    /// Non-empty log lines read.
    pub lines: u64,
    /// Lines that could not be read.
    pub malformed: u64,
    /// Requests replayed (lines read, minus malformed).
    pub requests: u64,
    /// Requests the policy would have refused.
    pub denied: u64,
    /// Per rule, in policy order.
    pub rules: Vec<RuleReport>,
    /// With `--suggest`: per rule and algorithm, the suggested limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggest: Option<Vec<Suggestion>>,
    /// `denied / requests`.
    pub denied_share: f64,
    /// Requests an enforced `delay` rule held, then let through.
    pub delayed: u64,
    /// Requests the engine could not decide (a descriptor a rule cannot use), allowed.
    pub errors: u64,
    /// Distinct clients (`ip` descriptor).
    pub clients: u64,
    /// Clients refused at least once.
    pub clients_denied: u64,
    /// `clients_denied / clients`.
    pub clients_denied_share: f64,
    /// The second with the most requests.
    pub busiest_second: Option<Second>,
    /// The log's first second (RFC 3339, UTC) and its length in seconds.
    pub start: Option<String>,
    /// Seconds from the first to the last request.
    pub duration_s: u64,
    /// Lines decided later than a line after them (logged out of order): decided at the latest
    /// time seen.
    pub out_of_order: u64,
    /// The first malformed lines, with file, line number and reason.
    pub malformed_lines: Vec<Malformed>,
    /// Descriptors the policies' rules use that no log field gives (give them with `--map` or
    /// `--json-field`): rules keyed on them never applied.
    pub unmapped_descriptors: Vec<String>,
}

/// One rule's part of a report.
#[derive(Debug, Clone, Serialize)]
pub struct RuleReport {
    /// The rule's name.
    pub name: String,
    /// Requests it applied to.
    pub matched: u64,
    /// Requests its limit would have denied (enforced, shadowed or tagging).
    pub denied: u64,
    /// Distinct keys with a would-deny.
    pub keys_denied: u64,
    /// The keys with the most would-denies, most first.
    pub top_keys: Vec<TopKey>,
    /// `denied / matched`.
    pub denied_rate: f64,
    /// `deny`, `shadow`, `tag` or `delay`.
    pub action: String,
    /// The rule's algorithm.
    pub algorithm: String,
    /// Would-denies that refused the request, shadowed ones, tagging ones.
    pub enforced_denied: u64,
    /// Would-denies of a shadowed limit (action `shadow`, or outside its rollout).
    pub shadow_denied: u64,
    /// Would-denies of a `tag` limit.
    pub tagged: u64,
    /// Would-denies per bucket of `bucket_s` seconds from `start`.
    pub over_time: OverTime,
}

/// A denied key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopKey {
    /// The key (its descriptor values).
    pub key: String,
    /// Would-denies.
    pub denied: u64,
}

/// A count per time bucket.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OverTime {
    /// The bucket width in seconds.
    pub bucket_s: u64,
    /// One count per bucket from the log's first second.
    pub counts: Vec<u64>,
}

/// One second of the log.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// When (RFC 3339, UTC).
    pub at: String,
    /// Requests in it.
    pub requests: u64,
    /// Refused ones.
    pub denied: u64,
}

/// The whole report: one policy, or two compared.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
// Built once per run: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum ReplayReport {
    /// `--config` alone.
    One(PolicyReport),
    /// `--compare`.
    Two(Comparison),
}

/// Two policies over the same log.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// `--config`'s report.
    pub a: PolicyReport,
    /// `--compare`'s report.
    pub b: PolicyReport,
    /// Requests A refuses and B allows.
    pub only_a_denied: u64,
    /// Requests B refuses and A allows.
    pub only_b_denied: u64,
}

/// The bucket width for series over `seconds`: at most ~240 buckets, in round widths.
pub fn bucket_width(seconds: u64) -> u64 {
    const WIDTHS: [u64; 12] = [1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 86_400];
    WIDTHS.into_iter().find(|w| seconds.div_ceil(*w) <= 240).unwrap_or(86_400)
}

/// `series` (per second) summed into buckets of `width` seconds.
pub fn buckets(series: &[u32], width: u64, seconds: u64) -> Vec<u64> {
    let n = usize::try_from(seconds.div_ceil(width).max(1)).unwrap_or(1);
    let mut out = vec![0u64; n];
    for (s, c) in series.iter().enumerate() {
        let b = (s as u64 / width) as usize;
        if let Some(slot) = out.get_mut(b) {
            *slot += u64::from(*c);
        }
    }
    out
}

/// RFC 3339 (UTC, whole seconds) of `secs` since the epoch.
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

fn top_keys(rule: &RuleTally, n: usize) -> Vec<TopKey> {
    let mut keys: Vec<(&str, u64)> = rule.keys.iter().map(|(k, v)| (&**k, *v)).collect();
    keys.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    keys.into_iter().take(n).map(|(k, d)| TopKey { key: k.to_owned(), denied: d }).collect()
}

/// What a replay of one policy came to, with the log's first second `start_us` and its length.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    /// The first request's time, µs.
    pub first_us: i64,
    /// The last request's time (clock, never earlier than the first), µs.
    pub last_us: i64,
    /// Lines logged out of order.
    pub out_of_order: u64,
}

impl PolicyReport {
    /// The report of `tally` over the lines of `reading`.
    pub fn new(reading: &Reading, tally: &Tally, span: Option<Span>, top: usize) -> Self {
        let duration_s = span.map_or(0, |s| u64::try_from((s.last_us - s.first_us) / 1_000_000).unwrap_or(0));
        let seconds = duration_s + 1;
        let width = bucket_width(seconds);
        let rules = tally
            .rules
            .iter()
            .map(|r| RuleReport {
                name: r.name.clone(),
                matched: r.matched,
                denied: r.denied,
                keys_denied: r.keys.len() as u64,
                top_keys: top_keys(r, top),
                denied_rate: share(r.denied, r.matched),
                action: r.action.clone(),
                algorithm: r.algorithm.to_owned(),
                enforced_denied: r.enforced_denied,
                shadow_denied: r.shadow_denied,
                tagged: r.tagged,
                over_time: OverTime { bucket_s: width, counts: buckets(&r.per_second, width, seconds) },
            })
            .collect();
        let busiest_second = span.and_then(|s| {
            let (i, n) =
                tally.requests_per_second.iter().enumerate().max_by_key(|(i, n)| (**n, Reverse(*i)))?;
            let base = s.first_us.div_euclid(1_000_000);
            Some(Second {
                at: rfc3339(base + i as i64),
                requests: u64::from(*n),
                denied: u64::from(tally.denied_per_second.get(i).copied().unwrap_or(0)),
            })
        });
        let (clients, clients_denied) = tally.client_counts();
        PolicyReport {
            lines: reading.lines,
            malformed: reading.malformed,
            requests: tally.requests,
            denied: tally.denied,
            rules,
            suggest: None,
            denied_share: share(tally.denied, tally.requests),
            delayed: tally.delayed,
            errors: tally.errors,
            clients,
            clients_denied,
            clients_denied_share: share(clients_denied, clients),
            busiest_second,
            start: span.map(|s| rfc3339(s.first_us.div_euclid(1_000_000))),
            duration_s,
            out_of_order: span.map_or(0, |s| s.out_of_order),
            malformed_lines: reading.examples.clone(),
            unmapped_descriptors: Vec::new(),
        }
    }

    /// The table printed on the terminal.
    pub fn table(&self, title: &str) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "{title}");
        let _ = writeln!(
            t,
            "  {} lines, {} malformed, {} requests over {} s from {}",
            self.lines,
            self.malformed,
            self.requests,
            self.duration_s,
            self.start.as_deref().unwrap_or("-")
        );
        for m in self.malformed_lines.iter().take(5) {
            let _ = writeln!(t, "    malformed {}:{}: {}", m.file, m.line, m.reason);
        }
        for d in &self.unmapped_descriptors {
            let _ = writeln!(
                t,
                "  note: no log field gives descriptor {d:?}, so the rules using it never applied (--map {d}=FIELD)"
            );
        }
        let _ = writeln!(
            t,
            "  refused {} requests ({:.3} %) and {} of {} clients ({:.3} %); delayed {}; errors {}",
            self.denied,
            self.denied_share * 100.0,
            self.clients_denied,
            self.clients,
            self.clients_denied_share * 100.0,
            self.delayed,
            self.errors
        );
        if let Some(b) = &self.busiest_second {
            let _ = writeln!(t, "  busiest second {}: {} requests, {} refused", b.at, b.requests, b.denied);
        }
        let _ = writeln!(
            t,
            "  {:<24} {:<8} {:<15} {:>10} {:>10} {:>9} {:>9} {:>8}  top denied keys",
            "rule", "action", "algorithm", "matched", "would-deny", "rate %", "refused", "keys"
        );
        for r in &self.rules {
            let top: Vec<String> =
                r.top_keys.iter().take(3).map(|k| format!("{} ({})", k.key, k.denied)).collect();
            let _ = writeln!(
                t,
                "  {:<24} {:<8} {:<15} {:>10} {:>10} {:>9.3} {:>9} {:>8}  {}",
                r.name,
                r.action,
                r.algorithm,
                r.matched,
                r.denied,
                r.denied_rate * 100.0,
                r.enforced_denied,
                r.keys_denied,
                top.join(", ")
            );
        }
        if let Some(suggest) = &self.suggest {
            t.push_str(&crate::suggest::table(suggest));
        }
        t
    }
}

use std::cmp::Reverse;

impl ReplayReport {
    /// The table printed on the terminal.
    pub fn table(&self) -> String {
        match self {
            ReplayReport::One(r) => r.table("floodgate-bench replay"),
            ReplayReport::Two(c) => {
                let mut t = c.a.table("floodgate-bench replay — A (--config)");
                t.push('\n');
                t.push_str(&c.b.table("B (--compare)"));
                let _ = writeln!(
                    t,
                    "\nA refuses {} requests B allows; B refuses {} requests A allows",
                    c.only_a_denied, c.only_b_denied
                );
                t
            }
        }
    }

    /// The JSON (`--json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(971_211_336), "2000-10-10T20:55:36Z");
        assert_eq!(rfc3339(1_796_169_600), "2026-12-02T00:00:00Z");
    }

    #[test]
    fn series_are_summed_into_round_buckets() {
        assert_eq!(bucket_width(60), 1);
        assert_eq!(bucket_width(3600), 30);
        assert_eq!(bucket_width(86_400), 600);
        assert_eq!(buckets(&[1, 2, 3, 4, 5], 2, 5), [3, 7, 5]);
        assert_eq!(buckets(&[], 10, 25), [0, 0, 0]);
    }
}
