//! The algorithm registry: every algorithm a rule may name, with its parameters — the one list
//! that the native configuration, `floodgate-bench` and the docs (`docs/configuration.md`,
//! checked by a test) all read. The names themselves are [`LimitKind`]'s.

use floodgate::LimitKind;

/// What a parameter's value is, as a rule writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole number from 1 (`limit: 100`; in a rule, also one that varies by a descriptor).
    Count,
    /// A whole number from 1: a bucket's burst.
    Burst,
    /// A [duration](crate::duration) above 0 (`window: 60s`).
    Duration,
    /// A rate, `N/unit` ([`pattern::rate`](crate::pattern::rate)).
    Rate,
    /// A quota's period: one of [`PERIODS`].
    Period,
    /// An IANA time zone name (in a rule, also one that comes from a descriptor).
    TimeZone,
    /// The day a quota's period starts: a day of the month (1 to 31) for `month`, a weekday for
    /// `week`, nothing for `day` (in a rule, also one that comes from a descriptor).
    Anchor,
}

/// A quota's periods, as a rule names them.
pub const PERIODS: [&str; 3] = ["day", "week", "month"];

/// The largest `burst` a bucket takes at every rate: one per day refills it in 2^62 µs (about
/// 146 000 years), the longest a bucket's arithmetic holds. A faster rate takes a larger one; a
/// limit alone ([`parse_limit`](crate::parse_limit), the playground) takes no larger, so that
/// whether a burst is taken does not depend on the rate.
pub const MAX_BURST_AT_ANY_RATE: u64 = 53_375_995;

/// One parameter of an algorithm, as written in a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parameter {
    /// The field name (`limit`, `window`, ...).
    pub name: &'static str,
    /// What its value is.
    pub kind: Kind,
    /// An example of the field, as an error message shows it (`window: 60s`).
    pub example: &'static str,
    /// `None` when the parameter is required; else what it is when left out.
    pub default: Option<&'static str>,
}

impl Parameter {
    /// Whether a rule must give it.
    pub fn required(&self) -> bool {
        self.default.is_none()
    }
}

/// An algorithm as configuration knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Algorithm {
    /// Which algorithm (and its name: [`LimitKind::name`]).
    pub kind: LimitKind,
    /// Its parameters, in the order the docs list them.
    pub parameters: &'static [Parameter],
    /// Whether it counts requests in a window of a given length (`limit` per `window`), as the
    /// boundary scenarios of `floodgate-bench` need.
    pub windowed: bool,
}

impl Algorithm {
    /// The name as written in configuration.
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// Whether `name` is one of its parameters.
    pub fn takes(&self, name: &str) -> bool {
        self.parameters.iter().any(|p| p.name == name)
    }

    /// The names of its parameters, in order.
    pub fn parameter_names(&self) -> impl Iterator<Item = &'static str> {
        self.parameters.iter().map(|p| p.name)
    }
}

const LIMIT: Parameter = Parameter { name: "limit", kind: Kind::Count, example: "limit: 100", default: None };
const WINDOW: Parameter =
    Parameter { name: "window", kind: Kind::Duration, example: "window: 60s", default: None };
const RATE: Parameter = Parameter { name: "rate", kind: Kind::Rate, example: "rate: 10/s", default: None };

/// Every algorithm, in [`LimitKind::ALL`] order.
pub const ALGORITHMS: [Algorithm; 8] = [
    Algorithm { kind: LimitKind::FixedWindow, parameters: &[LIMIT, WINDOW], windowed: true },
    Algorithm { kind: LimitKind::SlidingWindow, parameters: &[LIMIT, WINDOW], windowed: true },
    Algorithm { kind: LimitKind::SlidingLog, parameters: &[LIMIT, WINDOW], windowed: true },
    Algorithm {
        kind: LimitKind::TokenBucket,
        parameters: &[
            RATE,
            Parameter {
                name: "burst",
                kind: Kind::Burst,
                example: "burst: 20",
                default: Some("the rate's count"),
            },
        ],
        windowed: true,
    },
    Algorithm {
        kind: LimitKind::Gcra,
        parameters: &[
            RATE,
            Parameter { name: "burst", kind: Kind::Burst, example: "burst: 1", default: Some("1") },
        ],
        windowed: true,
    },
    Algorithm {
        kind: LimitKind::Concurrency,
        parameters: &[
            Parameter { name: "limit", kind: Kind::Count, example: "limit: 10", default: None },
            Parameter { name: "lease", kind: Kind::Duration, example: "lease: 30s", default: Some("30s") },
        ],
        windowed: false,
    },
    Algorithm {
        kind: LimitKind::Quota,
        parameters: &[
            Parameter { name: "limit", kind: Kind::Count, example: "limit: 10000", default: None },
            Parameter { name: "period", kind: Kind::Period, example: "period: month", default: None },
            Parameter {
                name: "time_zone",
                kind: Kind::TimeZone,
                example: "time_zone: Europe/Berlin",
                default: Some("UTC"),
            },
            Parameter {
                name: "anchor",
                kind: Kind::Anchor,
                example: "anchor: 15",
                default: Some("the 1st / Monday"),
            },
        ],
        windowed: false,
    },
    Algorithm {
        kind: LimitKind::Budget,
        parameters: &[
            Parameter { name: "limit", kind: Kind::Count, example: "limit: 50", default: None },
            Parameter { name: "ttl", kind: Kind::Duration, example: "ttl: 24h", default: None },
        ],
        windowed: false,
    },
];

/// The registry entry of `kind`.
pub fn algorithm(kind: LimitKind) -> &'static Algorithm {
    // ALGORITHMS is in LimitKind::ALL order (tested).
    &ALGORITHMS[LimitKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)]
}

/// The algorithm named `name`, as configuration writes it.
///
/// ```
/// let bucket = floodgate_config::algorithm::by_name("token_bucket").unwrap();
/// assert_eq!(bucket.parameter_names().collect::<Vec<_>>(), ["rate", "burst"]);
/// assert!(floodgate_config::algorithm::by_name("leaky_bucket").is_none());
/// ```
pub fn by_name(name: &str) -> Option<&'static Algorithm> {
    ALGORITHMS.iter().find(|a| a.name() == name)
}

/// The names of every algorithm, in order.
pub fn names() -> impl Iterator<Item = &'static str> {
    ALGORITHMS.iter().map(Algorithm::name)
}

/// Every parameter name of any algorithm, each once, in order of first appearance: the fields of a
/// rule that parameterise its algorithm.
pub fn all_parameters() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = Vec::new();
    for name in ALGORITHMS.iter().flat_map(Algorithm::parameter_names) {
        if !all.contains(&name) {
            all.push(name);
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_lists_every_kind_in_order() {
        let kinds: Vec<LimitKind> = ALGORITHMS.iter().map(|a| a.kind).collect();
        assert_eq!(kinds, LimitKind::ALL);
        for kind in LimitKind::ALL {
            assert_eq!(algorithm(kind).kind, kind);
            assert_eq!(by_name(kind.name()).map(|a| a.kind), Some(kind));
        }
    }

    #[test]
    fn every_algorithm_requires_something_and_examples_name_their_field() {
        for a in &ALGORITHMS {
            assert!(a.parameters.iter().any(Parameter::required), "{}", a.name());
            for p in a.parameters {
                assert!(p.example.starts_with(&format!("{}: ", p.name)), "{}: {p:?}", a.name());
            }
        }
        assert_eq!(
            all_parameters(),
            ["limit", "window", "rate", "burst", "lease", "period", "time_zone", "anchor", "ttl"]
        );
    }

    #[test]
    fn the_burst_every_rate_takes_is_the_largest_one_per_day_takes() {
        use floodgate_core::{Rate, TokenBucket};
        use std::num::NonZeroU64;
        let per_day: Rate = "1/d".parse().unwrap();
        let burst = |n| NonZeroU64::new(n).unwrap();
        assert!(TokenBucket::try_new(per_day, burst(MAX_BURST_AT_ANY_RATE)).is_ok());
        assert!(TokenBucket::try_new(per_day, burst(MAX_BURST_AT_ANY_RATE + 1)).is_err());
        // One per day is the slowest rate there is: every other takes it too.
        assert!(TokenBucket::try_new("1/ms".parse().unwrap(), burst(MAX_BURST_AT_ANY_RATE)).is_ok());
    }

    /// `docs/configuration.md`'s table of algorithms says what the registry says: the same
    /// algorithms, in order, with the same parameters.
    #[test]
    fn the_configuration_docs_list_the_registry() {
        let docs = include_str!("../../../docs/configuration.md");
        let table: Vec<(String, String)> = docs
            .lines()
            .skip_while(|l| !l.starts_with("### Algorithms and their parameters"))
            .filter(|l| l.starts_with("| `"))
            .map_while(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                Some((cells.get(1)?.trim_matches('`').to_owned(), (*cells.get(2)?).to_owned()))
            })
            .take(ALGORITHMS.len())
            .collect();
        let expected: Vec<(String, String)> = ALGORITHMS
            .iter()
            .map(|a| {
                let params: Vec<String> = a.parameter_names().map(|p| format!("`{p}`")).collect();
                (a.name().to_owned(), params.join(", "))
            })
            .collect();
        assert_eq!(table, expected);
    }
}
