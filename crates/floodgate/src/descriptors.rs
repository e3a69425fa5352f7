//! [`Descriptors`]: what a request is, as dimension → value pairs.

use std::borrow::Cow;

/// A request's dimensions: `ip`, `user`, `tenant`, `api_key`, `plan`, `route` (a normalized template
/// such as `POST /order/:id`), `method`, `header.<name>`, or any name a caller chooses.
///
/// ```
/// use floodgate::Descriptors;
/// let d = Descriptors::new().with("user", "u1").with("tenant", "t1");
/// assert_eq!(d.get("user"), Some("u1"));
/// assert_eq!(d.get("plan"), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Descriptors {
    entries: Vec<(Cow<'static, str>, String)>,
}

impl Descriptors {
    /// No descriptors.
    pub fn new() -> Self {
        Descriptors::default()
    }

    /// No descriptors, with room for `n` without growing.
    pub fn with_capacity(n: usize) -> Self {
        Descriptors { entries: Vec::with_capacity(n) }
    }

    /// Adds or replaces `name`.
    pub fn with(mut self, name: impl Into<Cow<'static, str>>, value: impl Into<String>) -> Self {
        self.insert(name, value);
        self
    }

    /// Adds or replaces `name`.
    pub fn insert(&mut self, name: impl Into<Cow<'static, str>>, value: impl Into<String>) {
        let name = name.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((name, value)),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// All `(name, value)` pairs, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (n.as_ref(), v.as_str()))
    }

    /// How many descriptors there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<N: Into<Cow<'static, str>>, V: Into<String>> FromIterator<(N, V)> for Descriptors {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut d = Descriptors::new();
        for (n, v) in iter {
            d.insert(n, v);
        }
        d
    }
}
