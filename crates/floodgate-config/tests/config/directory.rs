//! Loading a directory: every `*.yaml`/`*.yml` file in name order, each Envoy file its own domain,
//! at most one native file.

use std::path::Path;

use floodgate::{Engine, MemoryConfig, MemoryStore};
use floodgate_config::{self as config, StoreConfig};
use floodgate_core::ManualClock;
use floodgate_http::envoy::envoy_descriptors;

use super::{START, fixture, hammer, request};

/// FNV-1a 64, written out here so the test checks the documented hash, not the implementation.
fn fnv1a_hex(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[test]
fn loads_every_yaml_file_in_name_order() {
    let dir = fixture("dir");
    let config = config::load(&dir).unwrap();
    let StoreConfig::Memory(memory) = &config.store else { panic!("the native file's store") };
    assert_eq!(memory.max_keys, 1000);
    assert_eq!(config.policy.rules().map(|r| r.name()).collect::<Vec<_>>(), ["per-user"]);
    assert_eq!(config.domains.keys().map(String::as_str).collect::<Vec<_>>(), ["edge", "mongo_cps"]);
    assert_eq!(
        config.fingerprints.keys().map(String::as_str).collect::<Vec<_>>(),
        ["edge/remote_address", "mongo_cps/database_users", "per-user"]
    );

    // The source: the files in name order, each after a `# file:` line; hidden and non-YAML
    // files are skipped.
    assert_eq!(config.source.path.as_deref(), Some(dir.as_path()));
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let expected = format!(
        "# file: 10-floodgate.yaml\n{}# file: 20-edge.yml\n{}# file: 30-mongo.yaml\n{}",
        read("10-floodgate.yaml"),
        read("20-edge.yml"),
        read("30-mongo.yaml")
    );
    assert_eq!(config.source.text, expected);
    assert_eq!(config.source.hash, fnv1a_hex(&expected));
}

#[test]
fn a_single_file_source_is_its_text() {
    let path = fixture("plans.yaml");
    let config = config::load(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(config.source.path.as_deref(), Some(path.as_path()));
    assert_eq!(config.source.text, text);
    assert_eq!(config.source.hash, fnv1a_hex(&text));
}

#[tokio::test]
async fn domains_keep_their_own_counters_on_one_store() {
    let config = config::load(&fixture("dir")).unwrap();
    let store = MemoryStore::with_config(MemoryConfig::default(), ManualClock::new(START));
    let mut domains = config.domains;
    let edge = Engine::new(domains.remove("edge").unwrap(), store.clone());
    let mongo = Engine::new(domains.remove("mongo_cps").unwrap(), store.clone());
    let native = Engine::new(config.policy, store);

    let client = envoy_descriptors([("remote_address", "192.0.2.1")]);
    let (allowed, _) = hammer(&edge, &client, 3).await;
    assert_eq!(allowed, 2);
    let users = envoy_descriptors([("database", "users")]);
    let (allowed, _) = hammer(&mongo, &users, 4).await;
    assert_eq!(allowed, 3);
    // The native policy does not know Envoy's keys; it limits users.
    assert!(native.check(&client, 1).await.unwrap().limits.is_empty());
    let (allowed, _) = hammer(&native, &request(&[("user", "u1")]), 6).await;
    assert_eq!(allowed, 5);
}

#[test]
fn duplicate_domain_names_both_files() {
    let dir = fixture("duplicate_domains");
    let err = config::load(&dir).unwrap_err();
    let second = dir.join("b.yaml");
    assert_eq!(err.file.as_deref(), Some(second.as_path()));
    assert_eq!((err.line, err.column, err.field.as_deref()), (Some(2), Some(9), Some("domain")));
    assert_eq!(
        err.message,
        format!(
            "{}:2:9: domain: duplicate domain \"edge\": {} defines it too",
            second.display(),
            dir.join("a.yaml").display()
        )
    );
}

#[test]
fn two_native_files_are_refused() {
    let dir = fixture("two_native");
    let err = config::load(&dir).unwrap_err();
    assert_eq!(err.file.as_deref(), Some(dir.join("b.yaml").as_path()));
    assert!(err.message.contains(&dir.join("a.yaml").display().to_string()), "{}", err.message);
}

#[test]
fn a_directory_without_configuration_is_refused() {
    let dir = fixture("empty_dir");
    let err = config::load(&dir).unwrap_err();
    assert_eq!(err.file.as_deref(), Some(dir.as_path()));
    assert!(err.message.contains("no configuration files"), "{}", err.message);
}

#[test]
fn an_error_in_one_file_names_that_file() {
    let dir = std::env::temp_dir().join(format!("floodgate-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.yaml"), "domain: a\n").unwrap();
    std::fs::write(
        dir.join("b.yaml"),
        "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
    )
    .unwrap();
    let err = config::load(&dir).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(err.file.as_deref(), Some(Path::new(&dir.join("b.yaml"))));
    assert_eq!((err.line, err.field.as_deref()), (Some(4), Some("descriptors[0].rate_limit.unit")));
}
