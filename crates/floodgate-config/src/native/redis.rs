//! `store:` of kind `redis` or `redis_cluster`: what the file says about the connection, read into
//! [`RedisStoreConfig`]. A setting left out stays `None`: the store's own defaults
//! (`floodgate_redis::RedisConfig`, documented there) fill it in when `floodgate-app` opens the
//! store, so they are the only defaults.
//!
//! The TLS files are read and checked now ([`PemFile`], as the listeners' `tls:` files are), so
//! that a missing or wrong file is reported at its line; the store is built from the text read.

use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::descriptors::Vocabulary;
use super::positive_duration;
use super::tls::{PemFile, TlsFileError};
use crate::error::Invalid;
use crate::yaml::{Fields, Item};

/// A Redis store's connection settings, as the `store:` section gives them: each `None` is a
/// setting the file leaves out, for the Redis store's own default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    /// Where to connect: `url` (`kind: redis`) or `urls` (`kind: redis_cluster`).
    pub target: RedisTarget,
    /// `prefix`: prepended to every key.
    pub prefix: Option<String>,
    /// `deadline`: the longest a decision waits for the store.
    pub deadline: Option<Duration>,
    /// `connect_timeout`: the longest one connection attempt may take.
    pub connect_timeout: Option<Duration>,
    /// `max_in_flight`: the most store calls in flight at once.
    pub max_in_flight: Option<usize>,
    /// `hash_tag` (clusters): which part of a key picks its slot.
    pub hash_tag: Option<RedisHashTag>,
    /// `cross_slot` (clusters): how a check whose keys span slots orders its calls.
    pub cross_slot: Option<RedisCrossSlot>,
    /// `tls`: the PEM files of a `rediss://` connection, read at load.
    pub tls: Option<RedisTls>,
}

impl RedisStoreConfig {
    /// A single node at `url`, every other setting left to the store's defaults.
    pub fn node(url: impl Into<String>) -> Self {
        RedisStoreConfig::at(RedisTarget::Node(url.into()))
    }

    /// A cluster found from `seeds`, every other setting left to the store's defaults.
    pub fn cluster<I, S>(seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisStoreConfig::at(RedisTarget::Cluster(seeds.into_iter().map(Into::into).collect()))
    }

    fn at(target: RedisTarget) -> Self {
        RedisStoreConfig {
            target,
            prefix: None,
            deadline: None,
            connect_timeout: None,
            max_in_flight: None,
            hash_tag: None,
            cross_slot: None,
            tls: None,
        }
    }
}

/// Which Redis the store talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One node (`kind: redis`, `url:`).
    Node(String),
    /// A Redis Cluster, found from these seed nodes (`kind: redis_cluster`, `urls:`).
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// Its URLs: the node's, or the seeds.
    pub fn urls(&self) -> &[String] {
        match self {
            RedisTarget::Node(url) => std::slice::from_ref(url),
            RedisTarget::Cluster(seeds) => seeds,
        }
    }
}

/// `hash_tag`: which part of a key picks its cluster slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisHashTag {
    /// `key`: the whole key.
    Key,
    /// A descriptor's name (`tenant`): its value, for keys made with it.
    Descriptor(String),
}

/// `cross_slot`: how a check whose keys span cluster slots orders its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisCrossSlot {
    /// `denied_first`: the slots of keys that denied lately first, the others once they admit.
    DeniedFirst,
    /// `at_once`: every slot at once.
    AtOnce,
}

/// `tls: {ca, cert, key}`: the PEM files of a TLS connection, each optional; a certificate comes
/// with its key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedisTls {
    /// The CA bundle the server's certificate must chain to; `None`: the platform's roots.
    pub ca: Option<PemFile>,
    /// The client certificate chain presented for mutual TLS.
    pub cert: Option<PemFile>,
    /// The client certificate's private key.
    pub key: Option<PemFile>,
}

const TLS_FIELDS: &[&str] = &["ca", "cert", "key"];

/// The most calls in flight a store may be given (the semaphore's and the pipeline's size).
const MAX_IN_FLIGHT: usize = 1 << 20;

/// The settings a Redis node and a cluster share, for `target`.
pub(super) fn compile(
    fields: &Fields<'_>,
    target: RedisTarget,
    vocabulary: &Vocabulary,
) -> Result<RedisStoreConfig, Invalid> {
    let mut config = RedisStoreConfig::at(target);
    if let Some(p) = fields.get("prefix") {
        let text = p.str("a key prefix")?;
        if text.is_empty() {
            return Err(p.error("prefix is empty: keys need a prefix so they cannot collide with other data"));
        }
        config.prefix = Some(text.to_owned());
    }
    if let Some(d) = fields.get("deadline") {
        config.deadline = Some(positive_duration(d, "deadline")?);
    }
    if let Some(c) = fields.get("connect_timeout") {
        config.connect_timeout = Some(positive_duration(c, "connect_timeout")?);
    }
    if let Some(m) = fields.get("max_in_flight") {
        let n = m.u64_at_least("max_in_flight", 1)?;
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_IN_FLIGHT)
            .ok_or_else(|| m.error(format!("invalid max_in_flight {n}: at most {MAX_IN_FLIGHT}")))?;
        config.max_in_flight = Some(n);
    }
    if let Some(h) = fields.get("hash_tag") {
        config.hash_tag = Some(match h.str("key, or a descriptor name")? {
            "key" => RedisHashTag::Key,
            descriptor => {
                vocabulary.check(descriptor, h.clone())?;
                RedisHashTag::Descriptor(descriptor.to_owned())
            }
        });
    }
    if let Some(c) = fields.get("cross_slot") {
        config.cross_slot = Some(match c.str("denied_first or at_once")? {
            "denied_first" => RedisCrossSlot::DeniedFirst,
            "at_once" => RedisCrossSlot::AtOnce,
            other => {
                return Err(c.error(format!(
                    "invalid cross_slot {other:?}: expected denied_first (the default) or at_once"
                )));
            }
        });
    }
    config.tls = tls(fields, &config.target)?;
    Ok(config)
}

/// A Redis URL: `redis://`, `rediss://`, `redis+unix://` or `unix://`, with something after it.
pub(super) fn url(item: Item<'_>) -> Result<String, Invalid> {
    let url = item.str("a Redis URL")?;
    let schemes = ["redis://", "rediss://", "redis+unix://", "unix://"];
    if !schemes.iter().any(|s| url.starts_with(s)) || url.len() <= url.find("//").map_or(0, |i| i + 2) {
        return Err(item.error(format!(
            "invalid Redis URL {url:?}: expected redis://host:port, rediss://host:port or unix:///path/to/socket"
        )));
    }
    Ok(url.to_owned())
}

/// `tls: {ca, cert, key}`: PEM files, each optional, read and checked now so that a bad one is
/// reported at its line. Paths are relative to the working directory. Only for `rediss://` URLs.
fn tls(fields: &Fields<'_>, target: &RedisTarget) -> Result<Option<RedisTls>, Invalid> {
    let Some(item) = fields.get("tls") else { return Ok(None) };
    let at = fields.key_item("tls").unwrap_or(item.clone());
    if let Some(url) = target.urls().iter().find(|u| !u.starts_with("rediss://")) {
        return Err(at.error(format!(
            "tls applies only to TLS connections, and {url:?} is not one: use rediss:// URLs, or remove tls"
        )));
    }
    let settings = item.fields("the TLS settings (ca, cert, key: PEM file paths)", Some(TLS_FIELDS))?;
    let file = |name: &str| -> Result<Option<(Item<'_>, PemFile)>, Invalid> {
        let Some(f) = settings.get(name) else { return Ok(None) };
        let path = f.str("a PEM file path")?;
        if path.is_empty() {
            return Err(f.error(format!("{name} is empty: give the path of a PEM file")));
        }
        let pem = PemFile::read(path).map_err(|e| f.error(e.0))?;
        Ok(Some((f, pem)))
    };
    let ca = file("ca")?;
    let cert = file("cert")?;
    let key = file("key")?;
    match (&cert, &key) {
        (Some((c, _)), None) => {
            return Err(c.error("a client certificate needs its private key: add tls.key"));
        }
        (None, Some((k, _))) => {
            return Err(k.error("a client key needs its certificate: add tls.cert"));
        }
        _ => {}
    }
    // What each file holds, each error at its own field and naming the file's role.
    if let Some((at, ca)) = &ca {
        trust_roots(ca).map_err(|e| at.error(format!("the CA bundle {e}")))?;
    }
    if let (Some((cert_at, cert)), Some((key_at, key))) = (&cert, &key) {
        let chain =
            cert.certs("certificate").map_err(|e| cert_at.error(format!("the client certificate {e}")))?;
        let private = key.private_key().map_err(|e| key_at.error(format!("the client key {e}")))?;
        key_of(chain, private, cert).map_err(|e| key_at.error(format!("the client key {}", key.error(e))))?;
    }
    let pem = |file: Option<(Item<'_>, PemFile)>| file.map(|(_, pem)| pem);
    Ok(Some(RedisTls { ca: pem(ca), cert: pem(cert), key: pem(key) }))
}

/// Checks that every certificate of `ca` can be a root of trust.
fn trust_roots(ca: &PemFile) -> Result<(), TlsFileError> {
    let mut roots = rustls::RootCertStore::empty();
    for root in ca.certs("certificate")? {
        roots.add(root).map_err(|e| ca.error(format!("not a usable CA: {e}")))?;
    }
    Ok(())
}

/// Checks that `key` is the private key of `chain` (read from `cert`), as a TLS client presents
/// them; says why not.
fn key_of(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    cert: &PemFile,
) -> Result<(), String> {
    let provider = rustls::crypto::ring::default_provider();
    match rustls::sign::CertifiedKey::from_der(chain, key, &provider) {
        Ok(_) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => {
            Err(format!("not the key of the client certificate {}", cert.path().display()))
        }
        Err(e) => Err(format!("not a usable private key: {e}")),
    }
}
