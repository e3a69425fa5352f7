//! A Redis store's settings from what the configuration says: [`redis_config`] turns the parsed
//! `store:` section into the store's own [`RedisConfig`], whose defaults fill in what the file
//! leaves out, so that they are the only defaults.

use floodgate::store::BreakerConfig;
use floodgate_config::redis::{RedisCrossSlot, RedisHashTag, RedisStoreConfig, RedisTarget, RedisTls};
use floodgate_config::tls::PemFile;
use floodgate_config::{StoreConfig, Survival};
use floodgate_redis::{CrossSlot, HashTag, Pem, RedisConfig, Target, TlsConfig};

/// The Redis store's settings for `config`: each setting the file gives, and [`RedisConfig`]'s
/// default for each it leaves out. The TLS files are the text read (and checked) at load, each
/// named by its path.
///
/// ```
/// use floodgate_config::StoreConfig;
/// use floodgate_redis::RedisConfig;
///
/// let config = floodgate_config::parse("f.yaml", "store: {kind: redis, url: 'redis://10.0.0.5:6379', prefix: fg}\n")?;
/// let StoreConfig::Redis(redis) = &config.store else { unreachable!() };
/// let expected = RedisConfig { prefix: "fg".into(), ..RedisConfig::node("redis://10.0.0.5:6379") };
/// assert_eq!(floodgate_app::store::redis_config(redis), expected);
/// # Ok::<(), floodgate_config::ConfigError>(())
/// ```
pub fn redis_config(config: &RedisStoreConfig) -> RedisConfig {
    let defaults = RedisConfig::default();
    RedisConfig {
        target: match &config.target {
            RedisTarget::Node(url) => Target::Node(url.clone()),
            RedisTarget::Cluster(seeds) => Target::Cluster(seeds.clone()),
        },
        prefix: config.prefix.clone().unwrap_or(defaults.prefix),
        deadline: config.deadline.unwrap_or(defaults.deadline),
        connect_timeout: config.connect_timeout.unwrap_or(defaults.connect_timeout),
        max_in_flight: config.max_in_flight.unwrap_or(defaults.max_in_flight),
        hash_tag: match &config.hash_tag {
            None => defaults.hash_tag,
            Some(RedisHashTag::Key) => HashTag::Key,
            Some(RedisHashTag::Descriptor(name)) => HashTag::Descriptor(name.clone()),
        },
        cross_slot: match config.cross_slot {
            None => defaults.cross_slot,
            Some(RedisCrossSlot::DeniedFirst) => CrossSlot::DeniedFirst,
            Some(RedisCrossSlot::AtOnce) => CrossSlot::AtOnce,
        },
        tls: config.tls.as_ref().map(tls_config),
    }
}

/// Whether `a` and `b` open the same store: equal sections, or Redis sections whose settings are
/// the same once the store's defaults fill in what each leaves out (a default written out is no
/// change).
pub fn same_store(a: &StoreConfig, b: &StoreConfig) -> bool {
    match (a, b) {
        (StoreConfig::Redis(a), StoreConfig::Redis(b)) => redis_config(a) == redis_config(b),
        (a, b) => a == b,
    }
}

fn tls_config(files: &RedisTls) -> TlsConfig {
    let pem =
        |file: &Option<PemFile>| file.as_ref().map(|f| Pem::new(f.path().display().to_string(), f.bytes()));
    TlsConfig { ca: pem(&files.ca), cert: pem(&files.cert), key: pem(&files.key) }
}

/// `survival` for a store with `redis`'s settings: a probe that has not answered within the
/// store's deadline no longer holds the breaker half-open.
pub(super) fn probed_within_deadline(survival: &Survival, redis: &RedisConfig) -> Survival {
    let breaker = BreakerConfig { probe_timeout: redis.deadline, ..survival.breaker.clone() };
    Survival { breaker, ..survival.clone() }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use floodgate_config::StoreConfig;

    use super::*;

    /// The Redis settings of a configuration's `store:` section, as the store is opened with them.
    fn opened(yaml: &str) -> (RedisConfig, Survival) {
        let config = floodgate_config::parse("redis.yaml", yaml).expect("a valid configuration");
        let StoreConfig::Redis(settings) = &config.store else { panic!("a Redis store: {:?}", config.store) };
        let redis = redis_config(settings);
        let survival = probed_within_deadline(&config.survival, &redis);
        (redis, survival)
    }

    #[test]
    fn what_the_file_leaves_out_takes_the_redis_stores_defaults() {
        let (node, _) = opened("store: {kind: redis, url: 'redis://127.0.0.1:6379'}\n");
        // The Redis store's own defaults are the configuration's: one prefix, one deadline.
        assert_eq!(node, RedisConfig::node("redis://127.0.0.1:6379"));
        assert_eq!((node.prefix.as_str(), node.deadline), ("floodgate", Duration::from_millis(50)));

        let (cluster, _) = opened(
            "store:\n  kind: redis_cluster\n  urls: ['redis://a:1', 'redis://b:2']\n  prefix: fg\n  deadline: 20ms\n",
        );
        let mut expected = RedisConfig::cluster(["redis://a:1", "redis://b:2"]);
        expected.prefix = "fg".into();
        expected.deadline = Duration::from_millis(20);
        assert_eq!(cluster, expected);
    }

    #[test]
    fn every_connection_setting_and_hash_tag_reaches_the_store() {
        let (c, _) = opened(
            "store:\n  kind: redis_cluster\n  urls: ['redis://a:1']\n  connect_timeout: 250ms\n  max_in_flight: 64\n  hash_tag: tenant\n",
        );
        assert_eq!((c.connect_timeout, c.max_in_flight), (Duration::from_millis(250), 64));
        assert_eq!(c.hash_tag, HashTag::Descriptor("tenant".into()));
        assert_eq!(c.cross_slot, CrossSlot::DeniedFirst, "the default");
        let (whole, _) = opened(
            "store: {kind: redis_cluster, urls: ['redis://a:1'], hash_tag: key, cross_slot: at_once}\n",
        );
        assert_eq!(whole.hash_tag, HashTag::Key);
        assert_eq!(whole.cross_slot, CrossSlot::AtOnce);
    }

    #[test]
    fn tls_files_reach_the_store_as_read_and_named_by_their_paths() {
        let certs = floodgate_testkit::tls::TestCerts::generate();
        let (ca, cert, key) = (certs.ca(), certs.client_cert(), certs.client_key());
        let (redis, _) = opened(&format!(
            "store:\n  kind: redis\n  url: rediss://127.0.0.1:6380\n  tls:\n    ca: {}\n    cert: {}\n    key: {}\n",
            ca.display(),
            cert.display(),
            key.display()
        ));
        let tls = redis.tls.expect("TLS settings");
        for (pem, path) in [(&tls.ca, &ca), (&tls.cert, &cert), (&tls.key, &key)] {
            let pem = pem.as_ref().expect("each file given");
            assert_eq!(pem.origin(), path.display().to_string());
            assert_eq!(pem.bytes(), std::fs::read(path).unwrap());
        }
        tls.check().expect("the files hold what they should");
        // `tls: {}`: the platform's roots, no client certificate; no `tls`: none at all.
        let (empty, _) = opened("store: {kind: redis, url: 'rediss://h:1', tls: {}}\n");
        assert_eq!(empty.tls, Some(TlsConfig::default()));
        let (plain, _) = opened("store: {kind: redis, url: 'rediss://h:1'}\n");
        assert_eq!(plain.tls, None);
    }

    #[test]
    fn probes_are_bounded_by_the_stores_deadline() {
        let (_, survival) = opened(
            "store:\n  kind: redis\n  url: redis://127.0.0.1:6379\n  deadline: 30ms\n  breaker: { min_calls: 40, open_for: 1500ms }\n",
        );
        assert_eq!(
            survival.breaker.probe_timeout,
            Duration::from_millis(30),
            "a probe gets the store's deadline"
        );
        assert_eq!(
            (survival.breaker.min_calls, survival.breaker.open_for),
            (40, Duration::from_millis(1500))
        );
        let (_, defaults) = opened("store: {kind: redis, url: redis://127.0.0.1:6379}\n");
        assert_eq!(defaults.breaker.probe_timeout, RedisConfig::default().deadline);
    }
}
