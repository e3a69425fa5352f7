//! What the audit log records about admin changes: for a configuration change, what triggered
//! it, who asked (`by`, for a change made through the admin API), what it changed (rules added,
//! removed, changed, by fingerprint), and whether it was applied; for a change of the gateway's
//! switches, what changed and who asked; for a key reset (`DELETE /admin/keys`), the key, who
//! asked, and what became of it.

use std::collections::BTreeMap;

use floodgate_config::ConfigError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What triggered an admin change (the audit record's `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// The configuration loaded at start.
    Startup,
    /// The file watcher saw the file (or its directory) change.
    Watch,
    /// `SIGHUP`.
    Sighup,
    /// `POST /admin/reload`: reload from the file.
    File,
    /// `POST /admin/config`: a YAML body.
    Admin,
    /// `POST /admin/rollback`.
    Rollback,
    /// `PUT`/`DELETE /admin/gateway/switches`: the gateway's operator switches (shedding,
    /// degradation), not the configuration.
    Switch,
    /// `DELETE /admin/keys`: one key's state forgotten, not the configuration.
    #[serde(rename = "key_reset")]
    KeyReset,
}

impl Trigger {
    /// The name the audit log and the logs give it: `startup`, `watch`, `sighup`, `file`,
    /// `admin`, `rollback`, `switch`, `key_reset`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Startup => "startup",
            Trigger::Watch => "watch",
            Trigger::Sighup => "sighup",
            Trigger::File => "file",
            Trigger::Admin => "admin",
            Trigger::Rollback => "rollback",
            Trigger::Switch => "switch",
            Trigger::KeyReset => "key_reset",
        }
    }
}

/// Whether a change was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = ChangeResult)]
pub enum Outcome {
    /// It is in force (a key reset: it was made).
    Applied,
    /// It was refused, or failed; nothing changed (the running configuration stayed).
    Rejected,
}

/// The key a `DELETE /admin/keys` addressed (the audit record's `key`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditedKey {
    /// The rule whose key it is.
    pub rule: String,
    /// The Envoy domain of the rule (`null`: the native policy).
    pub domain: Option<String>,
    /// The descriptors that made the key, as the query gave them.
    pub descriptors: BTreeMap<String, String>,
    /// Whether the key had state (the answer's `reset`); `null` when the reset failed.
    pub reset: Option<bool>,
}

/// A configuration error as JSON: the message, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorReport {
    /// The full message (`file:line:col: field: what`).
    pub message: String,
    /// The file, when there is one.
    pub file: Option<String>,
    /// 1-based line.
    pub line: Option<usize>,
    /// 1-based column.
    pub column: Option<usize>,
    /// The field path, e.g. `rules[1].rate`.
    pub field: Option<String>,
}

impl From<&ConfigError> for ErrorReport {
    fn from(e: &ConfigError) -> Self {
        ErrorReport {
            message: e.message.clone(),
            file: e.file.as_ref().map(|f| f.display().to_string()),
            line: e.line,
            column: e.column,
            field: e.field.clone(),
        }
    }
}

impl ErrorReport {
    /// A report of `message` alone, located nowhere.
    pub fn plain(message: impl Into<String>) -> Self {
        ErrorReport { message: message.into(), file: None, line: None, column: None, field: None }
    }
}

/// One audit record: a configuration change, applied or rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditRecord {
    /// The version it became (`null` when rejected).
    pub version: Option<u64>,
    /// When, RFC 3339 (UTC).
    pub time: String,
    /// What triggered it.
    pub source: Trigger,
    /// The file or directory it was read from, if any.
    pub path: Option<String>,
    /// The content hash (FNV-1a 64, hex) of the applied text (`null` when rejected).
    pub hash: Option<String>,
    /// Rules added, removed and changed (by fingerprint; Envoy rules as `domain/rule`).
    pub added: Vec<String>,
    /// See `added`.
    pub removed: Vec<String>,
    /// See `added`.
    pub changed: Vec<String>,
    /// Applied or rejected.
    pub result: Outcome,
    /// Why it was rejected.
    pub error: Option<ErrorReport>,
    /// For a rollback: the version whose configuration it restored.
    pub restored: Option<u64>,
    /// Who asked through the admin API — a configuration applied, reloaded or rolled back
    /// (`admin`, `file`, `rollback`: applied or rejected), a switch change, a key reset:
    /// `admin_token` (the server's admin token), `client:<name>` (an `auth` client with the `admin`
    /// scope) or `loopback` (a loopback peer of a server that requires no token). `null` for the
    /// changes no caller asked for: the start, the file watcher, `SIGHUP`.
    #[serde(default)]
    pub by: Option<String>,
    /// For a key reset: the key, and whether it had state.
    #[serde(default)]
    pub key: Option<AuditedKey>,
}

/// The rules added, removed and changed between two fingerprint sets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// New rules.
    pub added: Vec<String>,
    /// Rules gone.
    pub removed: Vec<String>,
    /// Rules whose definition changed.
    pub changed: Vec<String>,
}

impl Diff {
    /// `before` → `after`.
    pub fn between(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> Diff {
        let mut diff = Diff::default();
        for (rule, fp) in after {
            match before.get(rule) {
                None => diff.added.push(rule.clone()),
                Some(old) if old != fp => diff.changed.push(rule.clone()),
                Some(_) => {}
            }
        }
        diff.removed = before.keys().filter(|r| !after.contains_key(*r)).cloned().collect();
        diff
    }
}

/// What an applied change did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Applied {
    /// The version now in force.
    pub version: u64,
    /// Its content hash.
    pub hash: String,
    /// Whether anything changed: `false` when the content equals the running configuration
    /// (nothing applied, no new version).
    pub changed: bool,
    /// Rules added, removed and changed.
    #[serde(flatten)]
    pub diff: Diff,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn a_trigger_has_the_same_name_in_the_logs_and_the_audit_log() {
        for trigger in [
            Trigger::Startup,
            Trigger::Watch,
            Trigger::Sighup,
            Trigger::File,
            Trigger::Admin,
            Trigger::Rollback,
            Trigger::Switch,
            Trigger::KeyReset,
        ] {
            assert_eq!(serde_json::to_value(trigger).unwrap(), trigger.as_str());
        }
    }

    #[test]
    fn diff_names_added_removed_and_changed_rules() {
        let before = fp(&[("a", 1), ("b", 2), ("c", 3)]);
        let after = fp(&[("a", 1), ("b", 20), ("d", 4)]);
        let diff = Diff::between(&before, &after);
        assert_eq!(diff.added, ["d"]);
        assert_eq!(diff.removed, ["c"]);
        assert_eq!(diff.changed, ["b"]);
    }
}
