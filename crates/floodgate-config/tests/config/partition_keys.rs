//! `partition_keys:` (the secret) and a rule's `headers: { partition_key: true }`: read onto the
//! rules, the same secret naming a key alike in every load; every mistake refused with its line
//! and field.

use std::path::PathBuf;

use floodgate::PartitionKey;
use floodgate_config as config;

use super::{engine, request};

const SECRET: &str = "kN0v6t4Qm2cYp9wR1eZ8sB3hL5jX7aDf";

/// A secret file holding `content`, unique to this test process and `name`.
fn secret_file(name: &str, content: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("floodgate-pk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

fn yaml(partition_keys: &str, headers: &str) -> String {
    format!(
        "{partition_keys}rules:\n  - name: per-user\n    key: [user]\n    algorithm: fixed_window\n    \
         limit: 10\n    window: 1m\n{headers}"
    )
}

fn from_file(path: &std::path::Path) -> String {
    format!("partition_keys:\n  secret_file: {}\n", path.display())
}

const ADVERTISED: &str = "    headers: { partition_key: true }\n";

async fn pk(text: &str, user: &str) -> Option<PartitionKey> {
    let config = config::parse("pk.yaml", text).unwrap();
    let (engine, _) = engine(config.policy);
    engine.check(&request(&[("user", user)]), 1).await.unwrap().limits[0].partition
}

#[tokio::test]
async fn a_rule_with_partition_key_carries_one_made_with_the_configured_secret() {
    let text = yaml(&from_file(&secret_file("a", &format!("{SECRET}\n"))), ADVERTISED);
    let u1 = pk(&text, "u1").await.expect("advertised");
    assert_eq!(pk(&text, "u1").await, Some(u1), "another load of the same file: the same name");
    assert_ne!(pk(&text, "u2").await, Some(u1));
    let keys = floodgate::PartitionKeys::new(SECRET.as_bytes()).unwrap();
    assert_eq!(u1, keys.of(b"8:per-user4:user2:u1"), "the secret without its line ending");
    let other = yaml(&from_file(&secret_file("b", "another secret, also of 32 bytes or more")), ADVERTISED);
    assert_ne!(pk(&other, "u1").await, Some(u1), "another secret");
}

#[tokio::test]
async fn without_the_setting_or_with_it_false_a_rule_carries_none() {
    let section = from_file(&secret_file("c", SECRET));
    assert_eq!(pk(&yaml(&section, ""), "u1").await, None);
    assert_eq!(pk(&yaml(&section, "    headers: { partition_key: false }\n"), "u1").await, None);
    assert_eq!(pk(&yaml("", ""), "u1").await, None, "no section, no setting");
}

#[test]
fn the_secret_may_come_from_an_environment_variable() {
    // Cargo sets CARGO_MANIFEST_DIR for every test it runs; this crate's path is longer than 32 bytes.
    let text = yaml("partition_keys: { secret_env: CARGO_MANIFEST_DIR }\n", ADVERTISED);
    let config = config::parse("pk.yaml", &text).unwrap();
    let keys = config.policy.rules().next().unwrap().partition_keys().cloned();
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    assert_eq!(keys, Some(floodgate::PartitionKeys::new(dir.as_bytes()).unwrap()));
}

#[test]
fn the_setting_keeps_the_rules_counters_across_a_reload() {
    let section = from_file(&secret_file("d", SECRET));
    let with = config::parse("pk.yaml", &yaml(&section, ADVERTISED)).unwrap();
    let without = config::parse("pk.yaml", &yaml(&section, "")).unwrap();
    assert_eq!(with.fingerprints, without.fingerprints, "the rule's identity does not change");
}

#[track_caller]
fn refused(text: &str, line: usize, field: &str, says: &str) {
    let err = config::parse("pk.yaml", text).expect_err("refused");
    assert_eq!((err.line, err.field.as_deref()), (Some(line), Some(field)), "{}", err.message);
    assert!(err.message.contains(says), "{:?} does not say {says:?}", err.message);
}

#[test]
fn a_partition_key_without_a_secret_is_refused_where_it_is_asked_for() {
    refused(
        &yaml("", ADVERTISED),
        7,
        "rules[0].headers.partition_key",
        "add partition_keys: { secret_env: NAME }",
    );
}

#[test]
fn every_bad_secret_is_refused_with_its_line_and_field() {
    let short = secret_file("short", "  too short  \n");
    refused(
        &yaml(&from_file(&short), ADVERTISED),
        2,
        "partition_keys.secret_file",
        "holds a partition key secret of 9 bytes: use at least 32",
    );
    let missing = std::env::temp_dir().join("floodgate-pk-no-such-file");
    refused(
        &yaml(&from_file(&missing), ADVERTISED),
        2,
        "partition_keys.secret_file",
        "cannot read the partition key secret file",
    );
    refused(
        &yaml("partition_keys: { secret_env: FLOODGATE_TEST_NO_SUCH_VARIABLE }\n", ""),
        1,
        "partition_keys.secret_env",
        "\"FLOODGATE_TEST_NO_SUCH_VARIABLE\" (the partition key secret) is not set",
    );
    let both = format!("partition_keys:\n  secret_env: X\n  secret_file: {}\n", short.display());
    refused(&yaml(&both, ""), 3, "partition_keys.secret_file", "not both");
    refused(&yaml("partition_keys: {}\n", ""), 1, "partition_keys.secret_env", "give secret_env");
    refused(&yaml("partition_keys: { secret: abc }\n", ""), 1, "partition_keys.secret", "secret_env");
}

#[test]
fn a_rules_headers_take_partition_key_alone_and_not_a_style() {
    let section = from_file(&secret_file("e", SECRET));
    refused(&yaml(&section, "    headers: ietf\n"), 9, "rules[0].headers", "set once, at the top level");
    refused(
        &yaml(&section, "    headers: { partition_key: yes please }\n"),
        9,
        "rules[0].headers.partition_key",
        "expected true or false",
    );
    refused(&yaml(&section, "    headers: { pk: true }\n"), 9, "rules[0].headers.pk", "partition_key");
}
