//! A YAML document as a tree whose every node knows its line and column, and a cursor over it that
//! knows its field path, so that every validation error can say where and what.
//!
//! serde-saphyr parses; [`Node`] captures each node through [`serde_saphyr::Spanned`]. Validation
//! then walks the tree by hand rather than through derived structs, so that messages can name the
//! field path (`rules[1].rate`), quote the offending value and list what would have been valid.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, MessageFormatter, Spanned};

use super::error::Invalid;

/// One YAML node and where it starts (1-based line and column; 0 when unknown).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub(crate) value: Value,
    pub(crate) line: usize,
    pub(crate) column: usize,
    /// Byte range of the node in the source text, when known (used to quote plain scalars exactly
    /// as written, e.g. `010` or `1.10`).
    span: Option<(usize, usize)>,
    /// The source spelling of a non-string scalar, filled in after parsing.
    raw: Option<String>,
}

/// The value of a [`Node`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in document order; keys may repeat (reported as an error by [`Item::fields`]).
    Map(Vec<(Node, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<Value>::deserialize(d)?;
        let at = spanned.referenced;
        let span = at.span();
        let span = match (span.byte_offset(), span.byte_len()) {
            (Some(offset), Some(len)) => usize::try_from(offset).ok().zip(usize::try_from(len).ok()),
            _ => None,
        };
        Ok(Node {
            value: spanned.value,
            line: usize::try_from(at.line()).unwrap_or(0),
            column: usize::try_from(at.column()).unwrap_or(0),
            span,
            raw: None,
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AnyValue;

        impl<'de> Visitor<'de> for AnyValue {
            type Value = Value;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_unit<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_none<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
                Value::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
                Ok(Value::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
                Ok(Value::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
                Ok(Value::Int(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
                Ok(Value::Int(v))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
                Ok(Value::Int(i128::try_from(v).unwrap_or(i128::MAX)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
                Ok(Value::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Value, E> {
                Ok(Value::Str(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Value, E> {
                Ok(Value::Str(v))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Value, E> {
                Ok(Value::Str(String::from_utf8_lossy(v).into_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Node>()? {
                    items.push(item);
                }
                Ok(Value::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Node>()? {
                    let value = map.next_value::<Node>()?;
                    entries.push((key, value));
                }
                Ok(Value::Map(entries))
            }
        }

        d.deserialize_any(AnyValue)
    }
}

/// The deepest nesting accepted. Deserializing recurses once per level; this keeps the stack used
/// well under the 2 MiB of a test or blocking-pool thread even in debug builds, while leaving room
/// for envoyproxy/ratelimit trees 14 descriptors deep (each level nests a list and a mapping).
const MAX_DEPTH: usize = 30;

/// Parses one YAML document into a located tree.
///
/// Strict YAML 1.2 booleans (`yes`/`no`/`on`/`off` stay strings), integers with leading zeros stay
/// strings, and repeated keys are passed through so that [`Item::fields`] can report them with the
/// field path. serde-saphyr's budget (nesting depth, alias expansion, sizes) guards against hostile
/// input.
pub(crate) fn parse_document(text: &str) -> Result<Node, Invalid> {
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            max_total_scalar_bytes: 16 << 20,
        },
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        duplicate_keys: DuplicateKeyPolicy::PassThrough,
        with_snippet: false,
    };
    match serde_saphyr::from_str_with_options::<Node>(text, options) {
        Ok(mut node) => {
            fill_raw(&mut node, text);
            Ok(node)
        }
        Err(error) => {
            let location = error.location();
            let inner = error.without_snippet();
            let message = serde_saphyr::DefaultMessageFormatter.format_message(inner);
            let mut message: String = message.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
            if message.contains("budget breached: Depth") || message.contains("recursion limit") {
                message = format!("nested more than {MAX_DEPTH} levels deep");
            } else if message.contains("budget breached") {
                message = format!("the document is too large or expands too much ({message})");
            }
            let (line, column) = match location {
                Some(l) if l.line() > 0 => {
                    (usize::try_from(l.line()).ok(), usize::try_from(l.column()).ok().filter(|c| *c > 0))
                }
                _ => (None, None),
            };
            Err(Invalid { line, column, field: None, message: format!("invalid YAML: {message}") })
        }
    }
}

/// Records the source spelling of every non-string scalar.
fn fill_raw(node: &mut Node, text: &str) {
    match &mut node.value {
        Value::Seq(items) => items.iter_mut().for_each(|n| fill_raw(n, text)),
        Value::Map(entries) => {
            for (k, v) in entries {
                fill_raw(k, text);
                fill_raw(v, text);
            }
        }
        Value::Bool(_) | Value::Int(_) | Value::Float(_) => {
            node.raw = node
                .span
                .and_then(|(offset, len)| text.get(offset..offset.checked_add(len)?))
                .filter(|s| !s.is_empty() && !s.contains(['\n', '\r']))
                .map(str::to_owned);
        }
        Value::Null | Value::Str(_) => {}
    }
}

impl Node {
    /// The node as written, for messages: strings quoted, other scalars as spelled, collections
    /// described.
    pub(crate) fn describe(&self) -> String {
        match &self.value {
            Value::Str(s) => format!("{s:?}"),
            Value::Null => "an empty value".to_owned(),
            Value::Seq(_) => "a list".to_owned(),
            Value::Map(_) => "a mapping".to_owned(),
            Value::Bool(_) | Value::Int(_) | Value::Float(_) => {
                self.scalar_text().unwrap_or_default().into_owned()
            }
        }
    }

    /// The text of a scalar: a string as is, a number or boolean as spelled in the source.
    fn scalar_text(&self) -> Option<Cow<'_, str>> {
        match &self.value {
            Value::Str(s) => Some(Cow::Borrowed(s)),
            Value::Bool(b) => {
                Some(self.raw.as_deref().map_or_else(|| Cow::Owned(b.to_string()), Cow::Borrowed))
            }
            Value::Int(i) => {
                Some(self.raw.as_deref().map_or_else(|| Cow::Owned(i.to_string()), Cow::Borrowed))
            }
            Value::Float(f) => {
                Some(self.raw.as_deref().map_or_else(|| Cow::Owned(f.to_string()), Cow::Borrowed))
            }
            Value::Null | Value::Seq(_) | Value::Map(_) => None,
        }
    }
}

/// A node and its field path (`rules[1].rate`): every error made from it is located and named.
#[derive(Debug, Clone)]
pub(crate) struct Item<'a> {
    pub(crate) node: &'a Node,
    path: String,
}

/// A mapping whose keys were checked against the allowed field names.
#[derive(Debug)]
pub(crate) struct Fields<'a> {
    /// The mapping itself.
    pub(crate) item: Item<'a>,
    /// `(name, key node, value node, value path)` in document order.
    entries: Vec<(Cow<'a, str>, &'a Node, &'a Node, String)>,
}

impl<'a> Item<'a> {
    /// The document root (empty path).
    pub(crate) fn root(node: &'a Node) -> Self {
        Item { node, path: String::new() }
    }

    /// A node at `path`.
    pub(crate) fn new(node: &'a Node, path: impl Into<String>) -> Self {
        Item { node, path: path.into() }
    }

    /// An error located at this node and naming its field.
    pub(crate) fn error(&self, message: impl Into<String>) -> Invalid {
        Invalid::at(self.node, &self.path, message)
    }

    /// An error at this node about a missing child field `name`.
    pub(crate) fn missing(&self, name: &str, message: impl Into<String>) -> Invalid {
        Invalid::at(self.node, &child_path(&self.path, name), message)
    }

    /// The elements of a list, each with its path (`parent[i]`).
    pub(crate) fn elements(&self, what: &str) -> Result<Vec<Item<'a>>, Invalid> {
        Ok(self.seq(what)?.iter().enumerate().map(|(i, n)| Item::new(n, index_path(&self.path, i))).collect())
    }

    /// Whether the node is a mapping.
    pub(crate) fn is_map(&self) -> bool {
        matches!(self.node.value, Value::Map(_))
    }

    /// Whether the node is empty (`~`, `null` or nothing at all).
    pub(crate) fn is_null(&self) -> bool {
        matches!(self.node.value, Value::Null)
    }

    /// The mapping's fields, each name one of `allowed` (`None`: any name), none repeated.
    /// `what` names the mapping in messages ("a rule", "the store").
    pub(crate) fn fields(&self, what: &str, allowed: Option<&[&str]>) -> Result<Fields<'a>, Invalid> {
        let Value::Map(map) = &self.node.value else {
            return Err(self.error(format!("expected {what} (a mapping), found {}", self.node.describe())));
        };
        let mut entries: Vec<(Cow<'a, str>, &'a Node, &'a Node, String)> = Vec::with_capacity(map.len());
        for (key, value) in map {
            let Some(name) = key.scalar_text() else {
                return Err(Invalid::at(
                    key,
                    &self.path,
                    format!("expected a name, found {}", key.describe()),
                ));
            };
            let name_str: &str = &name;
            let path = child_path(&self.path, name_str);
            if let Some((_, first, _, _)) = entries.iter().find(|(n, ..)| n == name_str) {
                return Err(Invalid::at(
                    key,
                    &path,
                    format!("{name_str:?} is given twice (first at line {})", first.line),
                ));
            }
            if let Some(allowed) = allowed
                && !allowed.contains(&name_str)
            {
                return Err(Invalid::at(
                    key,
                    &path,
                    format!(
                        "unknown field {name_str:?} in {what}: expected one of {}{}",
                        allowed.join(", "),
                        did_you_mean(name_str, allowed.iter().copied())
                    ),
                ));
            }
            entries.push((name, key, value, path));
        }
        Ok(Fields { item: self.clone(), entries })
    }

    /// The elements of a list.
    pub(crate) fn seq(&self, what: &str) -> Result<&'a [Node], Invalid> {
        match &self.node.value {
            Value::Seq(items) => Ok(items),
            _ => Err(self.error(format!("expected {what} (a list), found {}", self.node.describe()))),
        }
    }

    /// A string (not a number or boolean).
    pub(crate) fn str(&self, what: &str) -> Result<&'a str, Invalid> {
        match &self.node.value {
            Value::Str(s) => Ok(s),
            _ => Err(self.error(format!("expected {what} (a string), found {}", self.node.describe()))),
        }
    }

    /// A scalar as text: a string, or a number or boolean as spelled (`42`, `true`).
    pub(crate) fn text(&self, what: &str) -> Result<Cow<'a, str>, Invalid> {
        self.node
            .scalar_text()
            .ok_or_else(|| self.error(format!("expected {what} (a string), found {}", self.node.describe())))
    }

    /// A boolean (`true` or `false`).
    pub(crate) fn bool(&self) -> Result<bool, Invalid> {
        match &self.node.value {
            Value::Bool(b) => Ok(*b),
            _ => Err(self.error(format!("expected true or false, found {}", self.node.describe()))),
        }
    }

    /// A whole number ≥ `min` (and ≤ `u64::MAX`), however it is written: `100`, `100.0` or `1e2`
    /// (JSON, read as YAML by the playground, and JSON Schema's `integer` do not tell them apart).
    pub(crate) fn u64_at_least(&self, what: &str, min: u64) -> Result<u64, Invalid> {
        // 2^64, the first float past u64::MAX.
        const TWO_TO_THE_64: f64 = 18_446_744_073_709_551_616.0;
        let n = match &self.node.value {
            Value::Int(i) => *i,
            // Whole and below 2^64 in magnitude, so exactly an i128.
            Value::Float(f) if f.fract() == 0.0 && f.abs() < TWO_TO_THE_64 => *f as i128,
            _ => {
                return Err(
                    self.error(format!("invalid {what} {}: expected a whole number", self.node.describe()))
                );
            }
        };
        if n < i128::from(min) {
            return Err(
                self.error(format!("invalid {what} {}: must be at least {min}", self.node.describe()))
            );
        }
        u64::try_from(n)
            .map_err(|_| self.error(format!("invalid {what} {}: too large", self.node.describe())))
    }

    /// A number (whole or decimal).
    pub(crate) fn number(&self) -> Option<f64> {
        match &self.node.value {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }
}

impl<'a> Fields<'a> {
    /// The field `name`, if given.
    pub(crate) fn get(&self, name: &str) -> Option<Item<'a>> {
        self.entries
            .iter()
            .find(|(n, ..)| n == name)
            .map(|(_, _, value, path)| Item::new(value, path.clone()))
    }

    /// The key node of field `name`, if given (to point at a field that should not be there).
    pub(crate) fn key_item(&self, name: &str) -> Option<Item<'a>> {
        self.entries.iter().find(|(n, ..)| n == name).map(|(_, key, _, path)| Item::new(key, path.clone()))
    }

    /// The field `name`; its absence is an error at the mapping saying `hint`.
    pub(crate) fn require(&self, name: &str, hint: &str) -> Result<Item<'a>, Invalid> {
        self.get(name).ok_or_else(|| self.item.missing(name, format!("missing field {name:?}: {hint}")))
    }

    /// The field names given, in document order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.entries.iter().map(|(n, ..)| &**n)
    }

    /// `(name, key item, value item)` of every field, in document order; the key item points at
    /// the key and both carry the field's path.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, Item<'a>, Item<'a>)> + '_ {
        self.entries
            .iter()
            .map(|(n, key, value, path)| (&**n, Item::new(key, path.clone()), Item::new(value, path.clone())))
    }

    /// How many fields there are.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// `parent.name` (or `name` at the root).
pub(crate) fn child_path(parent: &str, name: &str) -> String {
    if parent.is_empty() { name.to_owned() } else { format!("{parent}.{name}") }
}

/// `parent[index]`.
pub(crate) fn index_path(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// `a, b, c or d`: the names a field takes, as an error message lists them.
pub(crate) fn alternatives<'c>(names: impl IntoIterator<Item = &'c str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// ` (did you mean "x"?)` when one of `candidates` is a likely typo of `given`, else nothing.
pub(crate) fn did_you_mean<'c>(given: &str, candidates: impl IntoIterator<Item = &'c str>) -> String {
    let given_lower = given.to_ascii_lowercase();
    let best = candidates
        .into_iter()
        .map(|c| (edit_distance(&given_lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d > 0 && *d <= (c.chars().count() / 3).max(1))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((_, c)) => format!(" (did you mean {c:?}?)"),
        None => String::new(),
    }
}

/// Edit distance counting a swap of two neighbours as one edit (optimal string alignment), for
/// suggestions (inputs are short names).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j]: distance between a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Node {
        parse_document(text).expect("valid YAML")
    }

    #[test]
    fn nodes_know_their_line_and_column() {
        let root = parse("a:\n  b: [1, x]\n");
        let fields = Item::root(&root).fields("the root", None).unwrap();
        let a = fields.get("a").unwrap();
        assert_eq!((a.node.line, a.node.column), (2, 3));
        let b = a.fields("a", Some(&["b"])).unwrap();
        let list = b.get("b").unwrap();
        assert_eq!(list.path, "a.b");
        let items = list.seq("b").unwrap();
        assert_eq!((items[1].line, items[1].column), (2, 10));
    }

    #[test]
    fn scalars_keep_their_spelling() {
        let root = parse("a: 1.10\nb: 010\nc: yes\nd: 1_000\n");
        let fields = Item::root(&root).fields("the root", None).unwrap();
        assert_eq!(fields.get("a").unwrap().text("a").unwrap(), "1.10");
        // Leading zeros and YAML 1.1 booleans stay strings.
        assert_eq!(fields.get("b").unwrap().node.value, Value::Str("010".into()));
        assert_eq!(fields.get("c").unwrap().node.value, Value::Str("yes".into()));
        assert_eq!(fields.get("d").unwrap().u64_at_least("d", 1).unwrap(), 1000);
    }

    #[test]
    fn repeated_and_unknown_fields_are_located() {
        let root = parse("a: 1\nb: 2\na: 3\n");
        let err = Item::root(&root).fields("the root", None).unwrap_err();
        assert_eq!((err.line, err.column, err.field.as_deref()), (Some(3), Some(1), Some("a")));
        assert!(err.message.contains("first at line 1"), "{}", err.message);

        let root = parse("rules:\n  - nmae: x\n");
        let fields = Item::root(&root).fields("the root", Some(&["rules"])).unwrap();
        let rule = Item::new(&fields.get("rules").unwrap().seq("rules").unwrap()[0], "rules[0]");
        let err = rule.fields("a rule", Some(&["name", "key"])).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("rules[0].nmae"));
        assert!(err.message.contains("did you mean \"name\""), "{}", err.message);
    }

    #[test]
    fn syntax_errors_are_located() {
        let err = parse_document("a: [1, 2\nb: 3\n").unwrap_err();
        assert_eq!(err.line, Some(2));
        assert!(err.message.starts_with("invalid YAML: "), "{}", err.message);
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = "[".repeat(100_000);
        assert!(parse_document(&deep).is_err());
        let deep_maps = "a: ".repeat(10_000);
        assert!(parse_document(&deep_maps).is_err());
        let err = parse_document(&"- ".repeat(1000)).unwrap_err();
        assert!(err.message.contains("nested more than 30 levels"), "{}", err.message);
        // As deep as allowed: parsed without exhausting a test thread's stack.
        let deepest = format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse_document(&deepest).is_ok());
    }

    #[test]
    fn suggestions_only_for_near_misses() {
        assert_eq!(did_you_mean("usr", ["user", "tenant"]), " (did you mean \"user\"?)");
        assert_eq!(did_you_mean("zzzzzz", ["user", "tenant"]), "");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("nmae", "name"), 1);
    }

    #[test]
    fn alternatives_are_listed_with_a_final_or() {
        assert_eq!(alternatives(["deny", "shadow", "tag"]), "deny, shadow or tag");
        assert_eq!((alternatives(["key"]), alternatives([])), ("key".to_owned(), String::new()));
    }
}
