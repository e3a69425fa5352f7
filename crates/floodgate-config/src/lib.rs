//! Floodgate's configuration: the native YAML and envoyproxy/ratelimit files, parsed and
//! validated on load with errors that say where and what. Nothing here opens a store or a socket:
//! `floodgate-app` opens the store a [`StoreConfig`] describes.
//!
//! - [`load`] reads a file or a directory, [`parse`] a text, [`builtin`] is the example policy
//!   `floodgate serve` runs without `--config` (`example.yaml` beside this file).
//! - One [algorithm registry](algorithm) (names and parameters) and one [duration grammar](duration):
//!   the server, `floodgate-bench` and the docs read them from here. The store settings are the
//!   stores' own: the memory store's [`MemoryConfig`], and for Redis
//!   what the file says ([`redis::RedisStoreConfig`]), each setting left out taking the Redis
//!   store's own default when `floodgate-app` opens it. With a Redis store, a rule whose limit its
//!   Lua scripts could not compute exactly ([`floodgate::Limit::exact_in_doubles`]) is refused at
//!   load, at the parameter out of range.
//! - The native format is DESIGN.md §3; `docs/configuration.md` is the full reference. A file
//!   whose top level has `domain` is an envoyproxy/ratelimit file (see the `envoy` module docs and
//!   `docs/configuration.md`, "Envoy configuration files").
//! - Every error names the file, line and column, the field path (0-based list indices, e.g.
//!   `rules[1].rate`) and quotes the offending value:
//!   `floodgate.yaml:12:11: rules[1].rate: invalid rate "ten/s": expected N/unit ...`.
//!
//! # How front doors map requests to descriptors
//!
//! - **HTTP** (`/v1/check`): the JSON `descriptors` object, name → value, is the
//!   [`floodgate::Descriptors`], checked against [`Config::policy`].
//! - **Envoy RLS** (`ShouldRateLimit`): the policy is `domains[request.domain]`, or
//!   [`Config::policy`] when no envoyproxy/ratelimit file defines that domain (with only Envoy
//!   files loaded the native policy is empty, so an unknown domain is not limited). **Each**
//!   descriptor of the request is a hit of its own, with the descriptors built by
//!   [`envoy_descriptors`](floodgate_http::envoy::envoy_descriptors) from its entries; all the
//!   hits of a request go to the store in one call, all-or-nothing, and each gets its own status
//!   (`hits_addend` is the cost, 0 meaning 1). The imported rules are compiled so that at most one
//!   rule applies to one Envoy descriptor, as in envoyproxy/ratelimit's tree walk. An `unlimited`
//!   entry (or a value carved out of a less specific limit) matches no rule, so its descriptor is
//!   `OK` with no `current_limit`.

pub mod algorithm;
mod doubles;
pub mod duration;
mod envoy;
mod error;
mod fingerprint;
mod native;
pub mod pattern;
mod yaml;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use floodgate::store::BreakerConfig;
use floodgate::{Limit, MemoryConfig, Policy};
use floodgate_http::HeaderStyle;

use self::error::{Invalid, file_error, name_path};
use self::redis::RedisTarget;
use self::yaml::{Item, Value, parse_document};

pub use self::native::{DEFAULT_LEASE, KNOWN_DESCRIPTORS};
pub use self::native::{admin, auth, gateway, http_server, redis, rlqs, tls};

/// Which store holds the counters. The memory store's settings are its own type, whose defaults are
/// the only defaults ([`MemoryConfig`]); a Redis store's are what the file says, the rest left to
/// the Redis store's own defaults ([`redis::RedisStoreConfig`]).
#[derive(Debug, Clone, PartialEq)]
pub enum StoreConfig {
    /// The embedded memory store (`kind: memory`, the default).
    Memory(MemoryConfig),
    /// A Redis node (`kind: redis`) or a Redis Cluster (`kind: redis_cluster`), by its
    /// [`RedisTarget`].
    Redis(redis::RedisStoreConfig),
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig::Memory(MemoryConfig::default())
    }
}

impl StoreConfig {
    /// The kind as configuration names it, and as the `store` label of metrics: `memory`, `redis`
    /// or `redis_cluster`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreConfig::Memory(_) => "memory",
            StoreConfig::Redis(redis) => match redis.target {
                RedisTarget::Node(_) => "redis",
                RedisTarget::Cluster(_) => "redis_cluster",
            },
        }
    }

    /// A short description for messages: `memory, max_keys 1000000`, `redis redis://…`.
    pub fn summary(&self) -> String {
        match self {
            StoreConfig::Memory(m) => match &m.persist {
                None => format!("memory, max_keys {}", m.max_keys),
                Some(p) => format!("memory, max_keys {}, persisted in {}", m.max_keys, p.path.display()),
            },
            StoreConfig::Redis(redis) => match &redis.target {
                RedisTarget::Node(url) => format!("redis {url}"),
                RedisTarget::Cluster(urls) => format!("redis_cluster {}", urls.join(",")),
            },
        }
    }
}

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Config {
    /// The store.
    pub store: StoreConfig,
    /// How a Redis store is survived when it fails.
    pub survival: Survival,
    /// Which rate-limit headers to send.
    pub headers: HeaderStyle,
    /// The native rules (namespace-less), used for HTTP checks and for gRPC domains that no
    /// envoyproxy/ratelimit file defines.
    pub policy: Policy,
    /// Policies per Envoy domain (from envoyproxy/ratelimit files), each in its own namespace.
    pub domains: BTreeMap<String, Policy>,
    /// A fingerprint per rule (`domain/rule` or `rule` → hash of its definition), for audit diffs.
    pub fingerprints: BTreeMap<String, u64>,
    /// The Envoy rules (`domain/rule`) whose decisions are also counted per value of their key
    /// (`detailed_metric`, `value_to_metric`).
    pub detailed: BTreeSet<String>,
    /// The gateway (`gateway:` section of the native file), if any: DESIGN.md §9.
    pub gateway: Option<gateway::GatewayConfig>,
    /// Where it came from.
    pub source: Source,
    /// Who may call the data plane (`auth:` section of the native file), if anyone is named:
    /// DESIGN.md §12. `None`: every caller may.
    pub auth: Option<auth::AuthConfig>,
    /// The HTTP listener's limits (`http:` section of the native file, else their defaults).
    pub http: http_server::HttpConfig,
    /// TLS on the HTTP and gRPC listeners (`tls:` section of the native file), if any.
    pub tls: Option<tls::TlsConfig>,
    /// The admin API's settings (`admin:` section of the native file, else their defaults).
    pub admin: admin::AdminConfig,
    /// Envoy's rate limit quota service (`rlqs:` section of the native file), if configured:
    /// DESIGN.md §17.
    pub rlqs: Option<rlqs::RlqsConfig>,
}

/// How a Redis store is survived when it fails (DESIGN §7; the `breaker`, `instances` and
/// `local_factor` settings of the store section): a circuit breaker around it, and the share of each
/// limit this instance decides alone for the rules that say `on_store_error: local`. The memory
/// store, in-process, needs neither.
#[derive(Debug, Clone, PartialEq)]
pub struct Survival {
    /// The circuit breaker. Its `probe_timeout` is not configured: the store's deadline bounds a
    /// probe, set when `floodgate-app` opens the store.
    pub breaker: BreakerConfig,
    /// How much more than its even share each instance may admit while the store fails (default 2).
    pub local_factor: f64,
    /// How many instances share the limits (default [`Instances::Discover`]).
    pub instances: Instances,
}

impl Default for Survival {
    fn default() -> Self {
        Survival { breaker: BreakerConfig::default(), local_factor: 2.0, instances: Instances::Discover }
    }
}

/// How many instances share the limits of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instances {
    /// This many.
    Fixed(u32),
    /// As many as announce themselves in the store (heartbeats with a TTL, on Redis's clock): the
    /// share follows the fleet as it scales. One until the first heartbeat is answered.
    Discover,
}

/// Where a configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The file or directory, or `None` for the built-in example or an admin-API body.
    pub path: Option<PathBuf>,
    /// The text(s) loaded, concatenated in load order (shown by the admin API).
    pub text: String,
    /// SHA-256-free content hash (FNV-1a 64 of `text`), hex.
    pub hash: String,
    /// Each file read and its text, in load order: one for a file, each `*.yaml` of a directory;
    /// none for a text parsed with [`parse`]. With [`path`](Source::path), what [`from_files`]
    /// needs to read the same configuration again without the files.
    pub files: Vec<(PathBuf, String)>,
}

/// A configuration that cannot be used: what, where (file, line, column), which field, and the
/// offending value quoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The full human message, e.g.
    /// `floodgate.yaml:12:12: rules[1].rate: invalid rate "ten/s": expected N/unit ...`.
    pub message: String,
    /// The file, when there is one.
    pub file: Option<PathBuf>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The field path, e.g. `rules[1].rate`.
    pub field: Option<String>,
}

/// The built-in example configuration (see [`builtin`]).
pub const EXAMPLE_YAML: &str = include_str!("example.yaml");

/// The largest configuration file read, 16 MiB.
const MAX_FILE_BYTES: u64 = 16 << 20;

/// Loads `path`: a native YAML file, an envoyproxy/ratelimit YAML file (recognised by a top-level
/// `domain`), or a directory of such files (each envoyproxy file its own domain; at most one native
/// file). Only `*.yaml` / `*.yml` files of a directory are read, in name order.
///
/// In a directory, hidden files (`.name`) and subdirectories are skipped (Kubernetes ConfigMap
/// volumes keep their data in `..data/` and link the files into the directory); the texts are
/// concatenated into [`Source::text`], each after a `# file: NAME` line. Two files defining the same
/// domain, or two native files, are an error naming both files.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let metadata = std::fs::metadata(path).map_err(|e| file_error(path, format!("cannot read: {e}")))?;
    if !metadata.is_dir() {
        let text = read(path)?;
        return from_files(path, vec![(path.to_path_buf(), text)]);
    }
    let listing = std::fs::read_dir(path).map_err(|e| file_error(path, format!("cannot list: {e}")))?;
    let mut files: Vec<PathBuf> = Vec::new();
    for entry in listing {
        let entry = entry.map_err(|e| file_error(path, format!("cannot list: {e}")))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let yaml = name
            .rsplit_once('.')
            .is_some_and(|(_, ext)| ext.eq_ignore_ascii_case("yaml") || ext.eq_ignore_ascii_case("yml"));
        if name.starts_with('.') || !yaml {
            continue;
        }
        // Follows symbolic links, as ConfigMap volumes use them.
        if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_file()) {
            files.push(entry.path());
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(file_error(path, "no configuration files (*.yaml, *.yml) in this directory"));
    }
    let mut texts = Vec::with_capacity(files.len());
    for file in files {
        let content = read(&file)?;
        texts.push((file, content));
    }
    from_files(path, texts)
}

/// The configuration that [`load`] reads from `path` when it holds `files` (each file and its
/// text, in load order; a file's own path when `path` is a file): what [`load`] does once the files
/// are read. [`Source::files`] holds them, so that a configuration can be read again as it was
/// loaded, e.g. from a copy kept on disk, whatever the files say now.
pub fn from_files(path: &Path, files: Vec<(PathBuf, String)>) -> Result<Config, ConfigError> {
    let single = matches!(files.as_slice(), [(file, _)] if file == path);
    let mut text = String::new();
    let mut documents = Vec::with_capacity(files.len());
    for (file, content) in &files {
        let document = document(content).map_err(|e| e.in_file(Some(file)))?;
        if single {
            text.push_str(content);
        } else {
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            text.push_str("# file: ");
            text.push_str(&name);
            text.push('\n');
            text.push_str(content);
            if !content.ends_with('\n') {
                text.push('\n');
            }
        }
        documents.push((file.clone(), document));
    }
    if documents.is_empty() {
        return Err(file_error(path, "no configuration files (*.yaml, *.yml) in this directory"));
    }
    let mut source = Source::new(Some(path.to_path_buf()), text);
    source.files = files;
    assemble(documents, source, Some(path))
}

/// Parses one configuration text (either format); `name` is used in error messages.
pub fn parse(name: &str, text: &str) -> Result<Config, ConfigError> {
    let file = name_path(name);
    let document = document(text).map_err(|e| e.in_file(file.as_deref()))?;
    let source = Source::new(None, text.to_owned());
    assemble(vec![(file.clone().unwrap_or_default(), document)], source, file.as_deref())
}

/// The built-in example policy used when `floodgate serve` runs without `--config`:
/// [`EXAMPLE_YAML`] on the memory store. Its first rule, `chat-per-user`, allows a user 10
/// `POST /chat` requests a minute: `{"descriptors": {"user": "u1", "route": "POST /chat"}}` gets ten
/// 200s, then 429s.
pub fn builtin() -> Config {
    match parse("built-in example", EXAMPLE_YAML) {
        Ok(config) => config,
        // Tested: the example is valid.
        Err(e) => panic!("the built-in example configuration is invalid: {e}"),
    }
}

impl Source {
    fn new(path: Option<PathBuf>, text: String) -> Self {
        let hash = fingerprint::hex(&text);
        Source { path, text, hash, files: Vec::new() }
    }
}

/// One parsed file.
#[derive(Debug)]
enum Document {
    Native(Box<native::Native>),
    Envoy(envoy::Domain),
}

/// Reads a configuration file, refusing anything too large to be one.
fn read(path: &Path) -> Result<String, ConfigError> {
    let metadata = std::fs::metadata(path).map_err(|e| file_error(path, format!("cannot read: {e}")))?;
    if metadata.len() > MAX_FILE_BYTES {
        return Err(file_error(
            path,
            format!(
                "the file is {} bytes, more than the {MAX_FILE_BYTES} a configuration may have",
                metadata.len()
            ),
        ));
    }
    std::fs::read_to_string(path).map_err(|e| file_error(path, format!("cannot read: {e}")))
}

/// Validates one text, in the format its top level says.
fn document(text: &str) -> Result<Document, Invalid> {
    let root = yaml::parse_document(text)?;
    let item = Item::root(&root);
    match &root.value {
        Value::Null => Err(Invalid::unlocated(
            "the configuration is empty: expected `rules:` (Floodgate) or `domain:` (envoyproxy/ratelimit)",
        )),
        Value::Map(entries) if entries.iter().any(|(k, _)| k.value == Value::Str("domain".into())) => {
            envoy::compile(item).map(Document::Envoy)
        }
        Value::Map(_) => native::compile(item).map(|n| Document::Native(Box::new(n))),
        _ => Err(item.error(format!(
            "expected a mapping with `rules:` (Floodgate) or `domain:` (envoyproxy/ratelimit), found {}",
            root.describe()
        ))),
    }
}

/// Builds the configuration from its files' documents; `at` names the whole source in errors.
fn assemble(
    documents: Vec<(PathBuf, Document)>,
    source: Source,
    at: Option<&Path>,
) -> Result<Config, ConfigError> {
    let mut native: Option<(PathBuf, native::Native)> = None;
    let mut domains: BTreeMap<String, Policy> = BTreeMap::new();
    // domain → the file defining it.
    let mut domain_files: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut fingerprints = BTreeMap::new();
    let mut detailed = BTreeSet::new();
    // The first Envoy rule a Redis store could not decide, and its file.
    let mut inexact = None;
    for (file, document) in documents {
        let file_ref = Some(file.as_path()).filter(|f| !f.as_os_str().is_empty());
        match document {
            Document::Native(n) => {
                if let Some((first, _)) = &native {
                    return Err(file_error(
                        &file,
                        format!(
                            "a second Floodgate (native) configuration; a directory may hold only one, and {} is \
                             the first",
                            first.display()
                        ),
                    ));
                }
                native = Some((file, *n));
            }
            Document::Envoy(domain) => {
                if let Some(first) = domain_files.get(&domain.name) {
                    let invalid = Invalid {
                        line: Some(domain.line).filter(|l| *l > 0),
                        column: Some(domain.column).filter(|c| *c > 0),
                        field: Some("domain".to_owned()),
                        message: format!(
                            "duplicate domain {:?}: {} defines it too",
                            domain.name,
                            first.display()
                        ),
                    };
                    return Err(invalid.in_file(file_ref));
                }
                for (rule, fingerprint) in &domain.fingerprints {
                    fingerprints.insert(format!("{}/{rule}", domain.name), *fingerprint);
                }
                detailed.extend(domain.detailed.iter().map(|rule| format!("{}/{rule}", domain.name)));
                if inexact.is_none() {
                    inexact = domain.inexact.map(|rule| (file.clone(), rule));
                }
                let policy = Policy::in_namespace(domain.name.clone(), domain.rules).map_err(|e| {
                    Invalid { field: Some("descriptors".into()), ..Invalid::unlocated(e.to_string()) }
                        .in_file(file_ref)
                })?;
                domain_files.insert(domain.name.clone(), file);
                domains.insert(domain.name, policy);
            }
        }
    }
    let mut gateway = None;
    let mut auth = None;
    let mut http = http_server::HttpConfig::default();
    let mut tls = None;
    let mut admin = admin::AdminConfig::default();
    let mut rlqs = None;
    let (store, survival, headers, policy) = match native {
        Some((file, n)) => {
            for (rule, fingerprint) in &n.fingerprints {
                fingerprints.insert(rule.clone(), *fingerprint);
            }
            let file_ref = Some(file.as_path()).filter(|f| !f.as_os_str().is_empty()).or(at);
            let policy = Policy::new(n.rules).map_err(|e| {
                Invalid { field: Some("rules".into()), ..Invalid::unlocated(e.to_string()) }.in_file(file_ref)
            })?;
            gateway = n.gateway.map(|g| *g);
            auth = n.auth.map(|a| *a);
            http = n.http;
            tls = n.tls.map(|t| *t);
            admin = n.admin;
            rlqs = n.rlqs.map(|r| *r);
            (n.store, n.survival, n.headers, policy)
        }
        None => (StoreConfig::default(), Survival::default(), HeaderStyle::default(), Policy::default()),
    };
    if let (StoreConfig::Redis(_), Some((file, rule))) = (&store, inexact) {
        let file_ref = Some(file.as_path()).filter(|f| !f.as_os_str().is_empty());
        return Err(rule.refused(store.kind()).in_file(file_ref));
    }
    Ok(Config {
        store,
        survival,
        headers,
        policy,
        domains,
        fingerprints,
        detailed,
        gateway,
        source,
        auth,
        http,
        tls,
        admin,
        rlqs,
    })
}

/// An algorithm with its parameters, exactly as a rule writes them, read from a YAML (or JSON)
/// mapping on its own: `{"algorithm": "token_bucket", "rate": "2/s", "burst": 8}`. The mapping may
/// also hold the fields named in `others`, which are left to the caller. Errors are located (line,
/// column, field) like a configuration file's; a limit that varies by a descriptor is refused.
///
/// ```
/// use floodgate_config::parse_limit;
///
/// let bucket = parse_limit(r#"{"algorithm": "token_bucket", "rate": "2/s", "burst": 8, "requests": []}"#, &["requests"])?;
/// assert_eq!(bucket.capacity(), 8);
/// let error = parse_limit("algorithm: sliding_window\nlimit: 5\nwindow: 5 parsecs\n", &[]).unwrap_err();
/// assert_eq!((error.line, error.field.as_deref()), (Some(3), Some("window")));
/// # Ok::<(), floodgate_config::ConfigError>(())
/// ```
pub fn parse_limit(text: &str, others: &[&str]) -> Result<Limit, ConfigError> {
    let root = parse_document(text).map_err(|e| e.in_file(None))?;
    crate::native::limit_alone(Item::root(&root), others).map_err(|e| e.in_file(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_example_is_valid_and_documented() {
        let config = builtin();
        let names: Vec<&str> = config.policy.rules().map(|r| r.name()).collect();
        assert_eq!(
            names,
            ["chat-per-user", "tenant-hourly", "api-burst", "monthly-quota", "throttler", "throttler-expiry"]
        );
        assert_eq!(config.store, StoreConfig::default());
        assert_eq!(config.source.path, None);
        assert_eq!(config.source.text, EXAMPLE_YAML);
        assert_eq!(config.fingerprints.len(), 6);
        assert!(config.domains.is_empty());
    }

    #[test]
    fn the_format_follows_the_top_level() {
        let envoy = parse("e.yaml", "domain: d\ndescriptors: []\n").unwrap();
        assert_eq!(envoy.domains.keys().collect::<Vec<_>>(), ["d"]);
        assert_eq!(envoy.domains["d"].namespace(), Some("d"));
        assert_eq!(envoy.policy.rules().count(), 0);
        let native = parse("n.yaml", "rules: []\n").unwrap();
        assert!(native.domains.is_empty());
    }

    #[test]
    fn source_hash_is_fnv1a_of_the_text() {
        let config = parse("", "rules: []\n").unwrap();
        assert_eq!(config.source.hash, fingerprint::hex("rules: []\n"));
        assert_eq!(config.source.hash.len(), 16);
        let err = parse("", "rules: [\n").unwrap_err();
        assert!(err.message.starts_with("line 1"), "{}", err.message);
        assert_eq!(err.file, None);
    }
}
