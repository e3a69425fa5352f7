//! `admin:`: where the admin API keeps what it changes (DESIGN.md §12).
//!
//! ```yaml
//! admin:
//!   state_dir: /var/lib/floodgate
//! ```
//!
//! With a state directory, the configuration versions (the texts rollback restores), the audit log
//! and the gateway's admin switches are written there, on disk before the admin call that changed
//! them is answered, and read back at start. `floodgate serve --state-dir DIR` says the same. The
//! directory is opened once, at start: a reload cannot change it.

use std::path::PathBuf;

use crate::error::Invalid;
use crate::yaml::Item;

/// The `admin` section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminConfig {
    /// Where the admin state is kept; `None`: in memory only (lost at restart).
    pub state_dir: Option<PathBuf>,
}

const FIELDS: &[&str] = &["state_dir"];

/// Validates the `admin` section.
pub(crate) fn compile(item: Item<'_>) -> Result<AdminConfig, Invalid> {
    let fields = item.fields("the admin API's settings", Some(FIELDS))?;
    let mut config = AdminConfig::default();
    if let Some(d) = fields.get("state_dir") {
        let text = d.str("a directory")?;
        if text.is_empty() {
            return Err(d.error("state_dir is empty: give a directory for the admin state"));
        }
        config.state_dir = Some(PathBuf::from(text));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse_document;

    fn compiled(text: &str) -> Result<AdminConfig, String> {
        let root = parse_document(text).expect("valid YAML");
        compile(Item::root(&root))
            .map_err(|e| format!("{}:{}: {}", e.line.unwrap_or(0), e.column.unwrap_or(0), e.message))
    }

    #[test]
    fn state_dir_is_read_as_given() {
        let config = compiled("state_dir: /var/lib/floodgate\n").unwrap();
        assert_eq!(config.state_dir, Some(PathBuf::from("/var/lib/floodgate")));
        assert_eq!(compiled("{}\n").unwrap(), AdminConfig::default());
    }

    #[test]
    fn an_empty_state_dir_or_an_unknown_field_is_refused_where_it_is() {
        let e = compiled("state_dir: \"\"\n").unwrap_err();
        assert!(e.contains("1:12") && e.contains("state_dir is empty"), "{e}");
        let e = compiled("state_dri: /x\n").unwrap_err();
        assert!(e.contains("state_dri"), "{e}");
    }
}
