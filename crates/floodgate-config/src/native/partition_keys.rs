//! `partition_keys:`: the secret that keys the partition keys (`pk`) of the rules that advertise
//! them (`headers: { partition_key: true }` on a rule).
//!
//! ```yaml
//! partition_keys:
//!   secret_env: FLOODGATE_PARTITION_KEY_SECRET   # or secret_file: /run/secrets/floodgate-pk
//! ```
//!
//! The secret is text (as `openssl rand -base64 32` writes it), read without surrounding
//! whitespace, of at least 32 bytes. Every instance that serves the same clients needs the same
//! secret: a partition key is the same for one key only under one secret.

use floodgate::PartitionKeys;

use crate::error::Invalid;
use crate::yaml::Item;

const FIELDS: &[&str] = &["secret_env", "secret_file"];

/// Reads the section: the partition keys of its secret.
pub(crate) fn compile(item: Item<'_>) -> Result<PartitionKeys, Invalid> {
    let fields =
        item.fields("partition_keys (e.g. { secret_env: FLOODGATE_PARTITION_KEY_SECRET })", Some(FIELDS))?;
    let (at, text, from) = match (fields.get("secret_env"), fields.get("secret_file")) {
        (Some(_), Some(_)) => {
            let key = fields.key_item("secret_file").unwrap_or_else(|| item.clone());
            return Err(key.error("give secret_env or secret_file, not both"));
        }
        (None, None) => {
            return Err(item.missing(
                "secret_env",
                "partition_keys needs a secret: give secret_env (a variable's name) or secret_file (a path)",
            ));
        }
        (Some(e), None) => {
            let var = e.str("an environment variable name")?;
            let value = std::env::var_os(var).ok_or_else(|| {
                e.error(format!("the environment variable {var:?} (the partition key secret) is not set"))
            })?;
            let value = value.into_string().map_err(|_| {
                e.error(format!("the environment variable {var:?} (the partition key secret) is not UTF-8"))
            })?;
            (e, value, format!("the environment variable {var:?}"))
        }
        (None, Some(f)) => {
            let path = f.str("a file path")?;
            let text = std::fs::read_to_string(path)
                .map_err(|e| f.error(format!("cannot read the partition key secret file {path:?}: {e}")))?;
            (f, text, format!("the file {path:?}"))
        }
    };
    let secret = text.trim();
    PartitionKeys::new(secret.as_bytes()).map_err(|e| {
        at.error(format!(
            "{from} holds a partition key secret of {} bytes: use at least {} random characters (e.g. the \
             output of openssl rand -base64 32)",
            e.len,
            PartitionKeys::MIN_SECRET_LEN
        ))
    })
}
