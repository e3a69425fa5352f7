//! `descriptors:`: the descriptor names a configuration may use.

use crate::error::Invalid;
use crate::yaml::{Item, did_you_mean};

/// Descriptor names every front door knows (DESIGN.md §3), besides `header.<name>`.
pub const KNOWN_DESCRIPTORS: &[&str] =
    &["ip", "user", "tenant", "api_key", "plan", "route", "method", "session", "authenticated"];

/// The descriptor names a configuration may use: the known ones, `header.<name>`, and those
/// declared in the top-level `descriptors` list.
#[derive(Debug, Default)]
pub(crate) struct Vocabulary {
    declared: Vec<String>,
    /// Any name is allowed (RLQS bucket ids: their keys are the Envoy filter's to choose).
    open: bool,
}

impl Vocabulary {
    pub(crate) fn declared(item: Item<'_>) -> Result<Self, Invalid> {
        let mut declared: Vec<String> = Vec::new();
        for entry in item.elements("a list of descriptor names")? {
            let name = entry.text("a descriptor name")?;
            if name.trim().is_empty() || name.chars().any(char::is_control) {
                return Err(entry.error(format!("invalid descriptor name {}", entry.node.describe())));
            }
            if name == "global" {
                return Err(
                    entry.error("\"global\" is reserved: `key: [global]` means one key for all requests")
                );
            }
            if declared.iter().any(|d| *d == name) {
                return Err(entry.error(format!("descriptor {name:?} is declared twice")));
            }
            declared.push(name.into_owned());
        }
        Ok(Vocabulary { declared, open: false })
    }

    /// A vocabulary that takes any non-empty name: the keys of RLQS bucket ids.
    pub(crate) fn open() -> Self {
        Vocabulary { declared: Vec::new(), open: true }
    }

    /// Checks that `name` is a descriptor this configuration may use; `at` points at it.
    pub(crate) fn check(&self, name: &str, at: Item<'_>) -> Result<(), Invalid> {
        if self.open && !name.is_empty() {
            return Ok(());
        }
        if KNOWN_DESCRIPTORS.contains(&name) || self.declared.iter().any(|d| d == name) {
            return Ok(());
        }
        if let Some(header) = name.strip_prefix("header.") {
            return check_header_name(header, at);
        }
        let candidates = KNOWN_DESCRIPTORS.iter().copied().chain(self.declared.iter().map(String::as_str));
        Err(at.error(format!(
            "unknown descriptor {name:?}: expected one of {}, header.<name>, or a name declared in the \
             top-level \"descriptors\" list{}",
            KNOWN_DESCRIPTORS.join(", "),
            did_you_mean(name, candidates)
        )))
    }
}

/// Header descriptors are named in lower case, as HTTP/2 sends them and the extractors record them.
fn check_header_name(header: &str, at: Item<'_>) -> Result<(), Invalid> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if header.is_empty() || !header.chars().all(token) {
        return Err(at.error(format!("invalid header name {header:?} in \"header.{header}\"")));
    }
    if header.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(at.error(format!(
            "header descriptors are lower case: write \"header.{}\"",
            header.to_ascii_lowercase()
        )));
    }
    Ok(())
}
