//! The algorithm registry: every algorithm a rule may name, with its parameters — the one list
//! that the native configuration, `floodgate-bench` and the docs (`docs/configuration.md`,
//! checked by a test) all read. The names themselves are [`LimitKind`]'s.

use floodgate::LimitKind;

/// One parameter of an algorithm, as written in a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parameter {
    /// The field name (`limit`, `window`, ...).
    pub name: &'static str,
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

const LIMIT: Parameter = Parameter { name: "limit", example: "limit: 100", default: None };
const WINDOW: Parameter = Parameter { name: "window", example: "window: 60s", default: None };
const RATE: Parameter = Parameter { name: "rate", example: "rate: 10/s", default: None };

/// Every algorithm, in [`LimitKind::ALL`] order.
pub const ALGORITHMS: [Algorithm; 8] = [
    Algorithm { kind: LimitKind::FixedWindow, parameters: &[LIMIT, WINDOW], windowed: true },
    Algorithm { kind: LimitKind::SlidingWindow, parameters: &[LIMIT, WINDOW], windowed: true },
    Algorithm { kind: LimitKind::SlidingLog, parameters: &[LIMIT, WINDOW], windowed: true },
    Algorithm {
        kind: LimitKind::TokenBucket,
        parameters: &[
            RATE,
            Parameter { name: "burst", example: "burst: 20", default: Some("the rate's count") },
        ],
        windowed: true,
    },
    Algorithm {
        kind: LimitKind::Gcra,
        parameters: &[RATE, Parameter { name: "burst", example: "burst: 1", default: Some("1") }],
        windowed: true,
    },
    Algorithm {
        kind: LimitKind::Concurrency,
        parameters: &[
            Parameter { name: "limit", example: "limit: 10", default: None },
            Parameter { name: "lease", example: "lease: 30s", default: Some("30s") },
        ],
        windowed: false,
    },
    Algorithm {
        kind: LimitKind::Quota,
        parameters: &[
            Parameter { name: "limit", example: "limit: 10000", default: None },
            Parameter { name: "period", example: "period: month", default: None },
            Parameter { name: "time_zone", example: "time_zone: Europe/Berlin", default: Some("UTC") },
            Parameter { name: "anchor", example: "anchor: 15", default: Some("the 1st / Monday") },
        ],
        windowed: false,
    },
    Algorithm {
        kind: LimitKind::Budget,
        parameters: &[
            Parameter { name: "limit", example: "limit: 50", default: None },
            Parameter { name: "ttl", example: "ttl: 24h", default: None },
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
