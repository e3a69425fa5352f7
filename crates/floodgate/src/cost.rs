//! Cost dimensions: what a rule counts (`requests`, `tokens`, …) and what a call costs in each.
//!
//! A rule counts one dimension ([`Rule::cost`](crate::Rule::cost), `requests` by default). A call
//! costs either one number — its `requests` — or [`Costs`]: a cost per dimension. Each rule then
//! takes the cost of its own dimension, so a requests-per-minute rule and a tokens-per-minute rule
//! apply to one call, decided together, all-or-nothing.
//!
//! ```
//! use floodgate::Costs;
//!
//! let costs = Costs::new().with("requests", 1).with("tokens", 1200);
//! assert_eq!(costs.get("tokens"), 1200);
//! assert_eq!(costs.get("images"), 0, "a dimension the call does not name costs nothing");
//! ```

use smallvec::SmallVec;

/// The dimension every rule counts unless it says otherwise, and what a plain `cost` is.
pub const REQUESTS: &str = "requests";

/// The longest dimension name.
pub const MAX_DIMENSION_LEN: usize = 64;

/// Whether `name` is a valid dimension name: 1 to [`MAX_DIMENSION_LEN`] characters, lowercase
/// ASCII letters, digits and `_`, starting with a letter (`requests`, `tokens`, `input_tokens`).
///
/// ```
/// assert!(floodgate::cost::valid_dimension("input_tokens"));
/// assert!(!floodgate::cost::valid_dimension("Tokens") && !floodgate::cost::valid_dimension("1x"));
/// ```
pub fn valid_dimension(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_DIMENSION_LEN
        && bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// What one call costs, per dimension. A dimension it does not name costs 0 — and a rule whose
/// dimension costs 0 does not apply to the call (see [`Hit::with_costs`](crate::Hit::with_costs)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Costs {
    entries: SmallVec<[(Box<str>, u64); 2]>,
}

impl Costs {
    /// No cost at all.
    pub fn new() -> Self {
        Costs::default()
    }

    /// With `cost` in `dimension` (replacing what it had).
    pub fn with(mut self, dimension: impl Into<Box<str>>, cost: u64) -> Self {
        self.set(dimension, cost);
        self
    }

    /// Sets `dimension`'s cost (replacing what it had).
    pub fn set(&mut self, dimension: impl Into<Box<str>>, cost: u64) {
        let dimension = dimension.into();
        match self.entries.iter_mut().find(|(d, _)| *d == dimension) {
            Some(entry) => entry.1 = cost,
            None => self.entries.push((dimension, cost)),
        }
    }

    /// The cost in `dimension`: 0 when not named.
    pub fn get(&self, dimension: &str) -> u64 {
        self.entries.iter().find(|(d, _)| &**d == dimension).map_or(0, |(_, c)| *c)
    }

    /// Whether `dimension` is named (with any cost, 0 included).
    pub fn names(&self, dimension: &str) -> bool {
        self.entries.iter().any(|(d, _)| &**d == dimension)
    }

    /// Every named dimension and its cost, in the order set.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.entries.iter().map(|(d, c)| (&**d, *c))
    }

    /// How many dimensions are named.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no dimension is named.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether every dimension costs 0 (or none is named).
    pub fn is_zero(&self) -> bool {
        self.entries.iter().all(|(_, c)| *c == 0)
    }
}

impl<D: Into<Box<str>>> FromIterator<(D, u64)> for Costs {
    fn from_iter<I: IntoIterator<Item = (D, u64)>>(iter: I) -> Self {
        let mut costs = Costs::new();
        for (d, c) in iter {
            costs.set(d, c);
        }
        costs
    }
}
