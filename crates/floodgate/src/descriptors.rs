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
///
/// The values are kept one after another in one string, so that a request's descriptors cost two
/// allocations however many there are, and a front door can write a value in place
/// ([`Descriptors::insert_with`]) rather than allocate it first.
#[derive(Clone, Default)]
pub struct Descriptors {
    /// Each name, with where its value lies in `text`.
    entries: Vec<(Cow<'static, str>, (usize, usize))>,
    /// The values, one after another (a replaced value's bytes stay until the whole is dropped).
    text: String,
}

/// The room a value is given, when room for `n` descriptors is asked for.
const VALUE_ROOM: usize = 24;

impl Descriptors {
    /// No descriptors.
    pub fn new() -> Self {
        Descriptors::default()
    }

    /// No descriptors, with room for `n` without growing.
    pub fn with_capacity(n: usize) -> Self {
        Descriptors { entries: Vec::with_capacity(n), text: String::with_capacity(n * VALUE_ROOM) }
    }

    /// Adds or replaces `name`.
    pub fn with(mut self, name: impl Into<Cow<'static, str>>, value: impl AsRef<str>) -> Self {
        self.insert(name, value);
        self
    }

    /// Adds or replaces `name`.
    pub fn insert(&mut self, name: impl Into<Cow<'static, str>>, value: impl AsRef<str>) {
        self.insert_with(name, |v| v.push_str(value.as_ref()));
    }

    /// Adds or replaces `name`, whose value `write` writes.
    ///
    /// ```
    /// use floodgate::Descriptors;
    /// let mut d = Descriptors::new();
    /// d.insert_with("route", |value| {
    ///     value.push_str("GET");
    ///     value.push(' ');
    ///     value.push_str("/orders/{id}");
    /// });
    /// assert_eq!(d.get("route"), Some("GET /orders/{id}"));
    /// ```
    pub fn insert_with(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        write: impl FnOnce(&mut ValueWriter<'_>),
    ) {
        let name = name.into();
        let start = self.text.len();
        write(&mut ValueWriter(&mut self.text));
        let at = (start, self.text.len());
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = at,
            None => self.entries.push((name, at)),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, at)| self.value(*at))
    }

    /// All `(name, value)` pairs, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, at)| (n.as_ref(), self.value(*at)))
    }

    /// How many descriptors there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn value(&self, (start, end): (usize, usize)) -> &str {
        // Values are only ever appended ([`ValueWriter`]), so each range lies on the character
        // boundaries it was made on.
        &self.text[start..end]
    }
}

/// Where [`Descriptors::insert_with`] writes a value: it can only append.
#[derive(Debug)]
pub struct ValueWriter<'a>(&'a mut String);

impl ValueWriter<'_> {
    /// Appends `s`.
    pub fn push_str(&mut self, s: &str) {
        self.0.push_str(s);
    }

    /// Appends `c`.
    pub fn push(&mut self, c: char) {
        self.0.push(c);
    }
}

impl std::fmt::Write for ValueWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }

    fn write_char(&mut self, c: char) -> std::fmt::Result {
        self.push(c);
        Ok(())
    }
}

impl PartialEq for Descriptors {
    /// The same names with the same values, in the same order.
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Descriptors {}

impl std::fmt::Debug for Descriptors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<N: Into<Cow<'static, str>>, V: AsRef<str>> FromIterator<(N, V)> for Descriptors {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut d = Descriptors::new();
        for (n, v) in iter {
            d.insert(n, v);
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_value_is_read_as_the_new_one_in_the_place_of_the_old() {
        let mut d = Descriptors::with_capacity(1).with("user", "u1").with("tenant", "t1");
        d.insert("user", "a much longer user name than the first");
        d.insert_with("ip", |v| {
            use std::fmt::Write as _;
            write!(v, "{}.0.0.{}", 10, 1).unwrap();
        });
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            [("user", "a much longer user name than the first"), ("tenant", "t1"), ("ip", "10.0.0.1")]
        );
        assert_eq!(d.len(), 3);
        assert_eq!(d.get("plan"), None);
        // Equal by what they say, not by the bytes they hold.
        let fresh = Descriptors::new()
            .with("user", "a much longer user name than the first")
            .with("tenant", "t1")
            .with("ip", "10.0.0.1");
        assert_eq!(d, fresh);
        assert_ne!(d, fresh.with("ip", "10.0.0.2"));
        assert_eq!(
            format!("{d:?}"),
            r#"{"user": "a much longer user name than the first", "tenant": "t1", "ip": "10.0.0.1"}"#
        );
    }
}
