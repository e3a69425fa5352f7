//! How configuration errors are built and worded.
//!
//! Every message reads `FILE:LINE:COLUMN: FIELD: WHAT`, e.g.
//! `floodgate.yaml:12:11: rules[1].rate: invalid rate "ten/s": expected N/unit with unit one of ms,
//! s, m, h, d (e.g. "10/s")`. Parts that are unknown are left out (a missing file has no line).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::ConfigError;
use super::yaml::Node;

/// A problem found while validating one text, before the file name is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid {
    /// 1-based line.
    pub(crate) line: Option<usize>,
    /// 1-based column.
    pub(crate) column: Option<usize>,
    /// The field path (`rules[1].rate`).
    pub(crate) field: Option<String>,
    /// What is wrong, quoting the value.
    pub(crate) message: String,
}

impl Invalid {
    /// A problem at `node`, in field `path` (empty: no field).
    pub(crate) fn at(node: &Node, path: &str, message: impl Into<String>) -> Self {
        Invalid {
            line: Some(node.line).filter(|l| *l > 0),
            column: Some(node.column).filter(|c| *c > 0),
            field: Some(path.to_owned()).filter(|p| !p.is_empty()),
            message: message.into(),
        }
    }

    /// A problem with no position in a text (e.g. a file that cannot be read).
    pub(crate) fn unlocated(message: impl Into<String>) -> Self {
        Invalid { line: None, column: None, field: None, message: message.into() }
    }

    /// The full error, naming `file`.
    pub(crate) fn in_file(self, file: Option<&Path>) -> ConfigError {
        let mut message = String::new();
        if let Some(file) = file {
            let _ = write!(message, "{}", file.display());
            if let Some(line) = self.line {
                let _ = write!(message, ":{line}");
                if let Some(column) = self.column {
                    let _ = write!(message, ":{column}");
                }
            }
            message.push_str(": ");
        } else if let Some(line) = self.line {
            let _ = write!(message, "line {line}");
            if let Some(column) = self.column {
                let _ = write!(message, ", column {column}");
            }
            message.push_str(": ");
        }
        if let Some(field) = &self.field {
            message.push_str(field);
            message.push_str(": ");
        }
        message.push_str(&self.message);
        ConfigError {
            message,
            file: file.map(Path::to_path_buf),
            line: self.line,
            column: self.column,
            field: self.field,
        }
    }
}

/// An error about a whole file (it cannot be read, or conflicts with another file).
pub(crate) fn file_error(file: &Path, message: impl Into<String>) -> ConfigError {
    Invalid::unlocated(message).in_file(Some(file))
}

/// The file name used in messages for a text given by name.
pub(crate) fn name_path(name: &str) -> Option<PathBuf> {
    (!name.is_empty()).then(|| PathBuf::from(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_file_line_column_and_field() {
        let invalid = Invalid {
            line: Some(12),
            column: Some(11),
            field: Some("rules[1].rate".into()),
            message: "invalid rate \"ten/s\"".into(),
        };
        let err = invalid.in_file(Some(Path::new("floodgate.yaml")));
        assert_eq!(err.message, "floodgate.yaml:12:11: rules[1].rate: invalid rate \"ten/s\"");
        assert_eq!(err.to_string(), err.message);
        assert_eq!((err.line, err.column), (Some(12), Some(11)));
        assert_eq!(err.field.as_deref(), Some("rules[1].rate"));
        assert_eq!(err.file.as_deref(), Some(Path::new("floodgate.yaml")));
    }

    #[test]
    fn unknown_parts_are_left_out() {
        let err = Invalid::unlocated("cannot read it").in_file(Some(Path::new("x.yaml")));
        assert_eq!(err.message, "x.yaml: cannot read it");
        let err = Invalid { line: Some(3), column: None, field: None, message: "bad".into() }.in_file(None);
        assert_eq!(err.message, "line 3: bad");
    }
}
