//! `floodgate-replay`: access logs replayed against a policy before it goes live (DESIGN.md §13),
//! by the real engine on a clock the log's timestamps drive. `floodgate-bench replay` is its
//! command line.
//!
//! - [`log`] and [`source`]: the lines (combined, Envoy, JSON lines; gzip or not), streamed;
//!   malformed lines counted with their place.
//! - [`mapping`]: a record made into descriptors (`ip` past the trusted proxies, `route` by the
//!   `--routes` templates, `method`, fields).
//! - [`driver`]: the real engine on a clock the log's timestamps drive, one per policy.
//! - [`tally`] and [`report`]: what each rule would have denied, to whom and when; the JSON and
//!   the table.
//! - [`suggest`]: limits from the keys' peaks; [`plot`]: the SVG.
//!
//! ```
//! use floodgate_replay::{self as replay, Options};
//! # let dir = std::env::temp_dir().join(format!("replay-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! let log = dir.join("access.log");
//! let line = |s: u32| format!(
//!     "192.0.2.1 - - [02/Dec/2026:09:00:{s:02} +0000] \"GET /api/orders/7 HTTP/1.1\" 200 10 \"-\" \"curl/8\"\n"
//! );
//! std::fs::write(&log, (0..3).map(line).collect::<String>()).unwrap();
//! let policy = floodgate_config::parse(
//!     "p.yaml",
//!     "rules:\n  - name: per-ip\n    key: [ip]\n    algorithm: fixed_window\n    limit: 2\n    window: 1m\n",
//! )?;
//! let report = replay::replay(&Options::new(vec![log]), policy, None)?;
//! let replay::ReplayReport::One(r) = report else { unreachable!() };
//! assert_eq!((r.requests, r.denied, r.rules[0].denied), (3, 1, 1));
//! assert_eq!(r.rules[0].top_keys[0].key, "192.0.2.1");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Features: `clap` derives `clap::ValueEnum` for [`source::FormatName`] (`--format`'s values).

pub mod driver;
pub mod log;
pub mod mapping;
pub mod plot;
pub mod report;
pub mod source;
pub mod suggest;
pub mod tally;

use std::path::PathBuf;

use floodgate::{Descriptors, MemoryConfig};
use floodgate_config::{Config, StoreConfig};
use floodgate_tower::{ClientIp, InvalidProxy};

use self::driver::{Fate, Side};
use self::log::{Format, JsonFields};
use self::mapping::{BadRoute, FieldMap, Mapping, Routes};
use self::report::Span;
pub use self::report::{Comparison, PolicyReport, ReplayReport};
use self::source::SourceError;
use self::suggest::Peaks;

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A trusted proxy that is not a network or an address.
    #[error("--trusted-proxy: {0}")]
    TrustedProxy(#[source] InvalidProxy),
    /// A route template that does not parse.
    #[error(transparent)]
    Route(#[from] BadRoute),
    /// A log that cannot be read, or whose format cannot be told.
    #[error(transparent)]
    Source(#[from] SourceError),
}

impl Error {
    /// Whether the error is in what the caller asked (a proxy, a route, a format to give) rather
    /// than in reading a file: a command line's usage error.
    pub fn is_usage(&self) -> bool {
        !matches!(self, Error::Source(SourceError::Io { .. }))
    }
}

/// What to replay and how (the command line, without the policies).
#[derive(Debug, Clone)]
pub struct Options {
    /// The logs, in order.
    pub logs: Vec<PathBuf>,
    /// The format; detected per file when `None`.
    pub format: Option<Format>,
    /// JSON lines' field names.
    pub json_fields: JsonFields,
    /// `--routes` patterns.
    pub routes: Vec<String>,
    /// `--map` pairs.
    pub maps: Vec<FieldMap>,
    /// `--trusted-proxy`; the policy's gateway `trusted_proxies` when empty.
    pub trusted_proxies: Vec<String>,
    /// Suggest limits.
    pub suggest: bool,
    /// Keep every key's times (suggest, plot).
    pub collect_times: bool,
    /// Share of keys allowed to be refused (0–1).
    pub max_refused_keys: f64,
    /// Headroom (0–1 and above).
    pub headroom: f64,
    /// Top denied keys per rule.
    pub top: usize,
    /// Record every request's fate (A's) in [`Outcome::decisions`].
    pub record_decisions: bool,
}

impl Options {
    /// Defaults for `logs`: formats detected, no routes, no maps, no suggestion.
    pub fn new(logs: Vec<PathBuf>) -> Self {
        Options {
            logs,
            format: None,
            json_fields: JsonFields::default(),
            routes: Vec::new(),
            maps: Vec::new(),
            trusted_proxies: Vec::new(),
            suggest: false,
            collect_times: false,
            max_refused_keys: 0.001,
            headroom: 0.0,
            top: 10,
            record_decisions: false,
        }
    }
}

/// The memory store a policy's replay runs on: its own `store:` section when it is the memory
/// store (so that `max_keys` and the sweeper behave as in the server), the default otherwise (a
/// Redis store's algorithms are the same arithmetic, run as Lua).
fn memory_of(config: &Config) -> MemoryConfig {
    match &config.store {
        StoreConfig::Memory(m) => m.clone(),
        _ => MemoryConfig::default(),
    }
}

/// What a replay came to, beside the report: every request's fate on policy A (when
/// [`Options::record_decisions`]).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// `true` for allowed, in log order.
    pub decisions: Vec<bool>,
    /// Per policy, per rule: every key's peaks (with `--suggest` or `--plot`).
    pub peaks: Vec<Vec<Peaks>>,
}

/// Replays the logs of `options` against policy `a` (and `b`).
///
/// # Errors
/// A trusted proxy or a route that does not parse, a log that cannot be read or whose format
/// cannot be told.
pub fn replay(options: &Options, a: Config, b: Option<Config>) -> Result<ReplayReport, Error> {
    replay_with(options, a, b).map(|(r, _)| r)
}

/// [`replay`], with the [`Outcome`] beside the report.
///
/// # Errors
/// As [`replay`].
pub fn replay_with(
    options: &Options,
    a: Config,
    b: Option<Config>,
) -> Result<(ReplayReport, Outcome), Error> {
    let trusted: Vec<String> = if options.trusted_proxies.is_empty() {
        a.gateway.iter().flat_map(|g| g.trusted_proxies.iter().map(|n| n.to_string())).collect()
    } else {
        options.trusted_proxies.clone()
    };
    let client_ip = ClientIp::new().try_trust(&trusted).map_err(Error::TrustedProxy)?;
    let routes = Routes::parse(options.routes.iter().map(String::as_str))?;
    let collect = options.collect_times || options.suggest;
    let memory = memory_of(&a);
    let mut sides = vec![Side::new(a.policy, memory, collect)];
    if let Some(b) = b {
        let memory = memory_of(&b);
        sides.push(Side::new(b.policy, memory, collect));
    }
    if options.record_decisions {
        sides[0].decisions = Some(Vec::new());
    }
    let policies: Vec<_> = sides.iter().map(|s| s.policy()).collect();
    let refs: Vec<&floodgate::Policy> = policies.iter().map(|p| &**p).collect();
    let mut mapping = Mapping::new(client_ip, routes, options.maps.clone(), &refs);

    let mut descriptors = Descriptors::new();
    let mut seq = 0u64;
    let mut span: Option<Span> = None;
    // With --compare: requests one side held (delay) whose fate on both is not known yet.
    let mut open: std::collections::HashMap<u64, [Option<bool>; 2]> = Default::default();
    let (mut only_a, mut only_b) = (0u64, 0u64);
    let tally_pair = |fates: [Option<bool>; 2], only_a: &mut u64, only_b: &mut u64| match fates {
        [Some(true), Some(false)] => *only_a += 1,
        [Some(false), Some(true)] => *only_b += 1,
        _ => {}
    };
    let reading = source::read_all(&options.logs, options.format.as_ref(), &options.json_fields, |record| {
        let at = match &mut span {
            None => {
                span = Some(Span { first_us: record.time_us, last_us: record.time_us, out_of_order: 0 });
                record.time_us
            }
            Some(s) => {
                if record.time_us < s.last_us {
                    s.out_of_order += 1;
                }
                s.last_us = s.last_us.max(record.time_us);
                s.last_us
            }
        };
        mapping.descriptors(record, &mut descriptors);
        seq += 1;
        let mut fates = [None, None];
        for (i, side) in sides.iter_mut().enumerate() {
            fates[i] = match side.decide(seq, &descriptors, at, record.duration_us) {
                Fate::Allowed => Some(false),
                Fate::Refused => Some(true),
                Fate::Held => None,
            };
        }
        if sides.len() == 2 {
            if fates.iter().all(Option::is_some) {
                tally_pair(fates, &mut only_a, &mut only_b);
            } else {
                open.insert(seq, fates);
            }
            for (i, side) in sides.iter_mut().enumerate() {
                for (s, refused) in side.settled() {
                    if let Some(f) = open.get_mut(&s) {
                        f[i] = Some(refused);
                        if f.iter().all(Option::is_some) {
                            let f = *f;
                            open.remove(&s);
                            tally_pair(f, &mut only_a, &mut only_b);
                        }
                    }
                }
            }
        }
    })?;
    for (i, side) in sides.iter_mut().enumerate() {
        side.finish();
        for (s, refused) in side.settled().collect::<Vec<_>>() {
            if let Some(f) = open.get_mut(&s) {
                f[i] = Some(refused);
            }
        }
    }
    for f in open.into_values() {
        tally_pair(f, &mut only_a, &mut only_b);
    }

    let mut fields: Vec<&str> = Vec::new();
    for (_, format) in &reading.formats {
        match *format {
            "combined" => fields.extend(["remote_user", "header.referer", "header.user-agent"]),
            "envoy" => fields.extend(["header.user-agent", "header.x-request-id", "header.host"]),
            _ => fields.extend(options.json_fields.extra.keys().map(String::as_str)),
        }
    }
    let unmapped: Vec<String> = mapping.unmapped(&fields).map(str::to_owned).collect();
    let mut outcome = Outcome::default();
    let mut report_of = |side: &mut Side| {
        let mut report = PolicyReport::new(&reading, &side.tally, span, options.top);
        report.unmapped_descriptors = unmapped.clone();
        let policy = side.policy();
        let mut peaks = Vec::new();
        for (rule, tally) in policy.rules().zip(side.tally.rules.iter_mut()) {
            let Some(times) = &mut tally.times else { continue };
            times.values_mut().for_each(|t| t.sort_unstable());
            let at = span.map_or(0, |s| s.first_us);
            peaks.push(Peaks::new(rule.name(), rule.limit(), times.values().map(Vec::as_slice), at));
        }
        if options.suggest {
            report.suggest = Some(
                peaks.iter().flat_map(|p| p.suggest(options.max_refused_keys, options.headroom)).collect(),
            );
        }
        outcome.peaks.push(peaks);
        if let Some(d) = side.decisions.take()
            && outcome.decisions.is_empty()
        {
            outcome.decisions = d;
        }
        report
    };
    let a = report_of(&mut sides[0]);
    let report = match sides.get_mut(1).map(&mut report_of) {
        Some(b) => ReplayReport::Two(Comparison { a, b, only_a_denied: only_a, only_b_denied: only_b }),
        None => ReplayReport::One(a),
    };
    Ok((report, outcome))
}
