//! TLS (`rediss://`): a store on a TLS node or cluster decides as on a plain one; a server whose
//! certificate does not chain to the configured CA, or a missing client certificate where the
//! server requires one, fails with a store error, in time; bad TLS settings are refused, by name,
//! before anything connects.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Descriptors, Engine, Policy, Rule, StoreError};
use floodgate_core::FixedWindow;
use floodgate_redis::{Pem, RedisConfig, RedisStore, TlsConfig, TlsError};
use floodgate_testkit::redis::{ClientAuth, RedisCluster, RedisServer};
use floodgate_testkit::tls::TestCerts;
use floodgate_testkit::wait;

fn pem(path: std::path::PathBuf) -> Pem {
    Pem::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The test CA alone: the server is verified, no client certificate is presented.
fn ca_only(certs: &TestCerts) -> TlsConfig {
    TlsConfig { ca: Some(pem(certs.ca())), ..TlsConfig::default() }
}

/// The test CA and the client certificate, for mutual TLS.
fn mutual(certs: &TestCerts) -> TlsConfig {
    TlsConfig {
        ca: Some(pem(certs.ca())),
        cert: Some(pem(certs.client_cert())),
        key: Some(pem(certs.client_key())),
    }
}

fn node_config(server: &RedisServer, tls: Option<TlsConfig>) -> RedisConfig {
    RedisConfig { tls, ..crate::node_config(server) }
}

/// Six requests of one user against a limit of 5 per minute: what each was answered.
async fn six_requests(store: RedisStore) -> Vec<bool> {
    let limit = FixedWindow::try_new(NonZeroU64::new(5).expect("not zero"), Duration::from_secs(60))
        .expect("a window");
    let rule = Rule::new("per-user", limit).key(["user"]);
    let engine = Engine::new(Policy::new([rule]).expect("a policy"), store);
    let user = Descriptors::new().with("user", format!("tls-{}", std::process::id()));
    let mut answers = Vec::new();
    for _ in 0..6 {
        answers.push(engine.check(&user, 1).await.expect("a decision").allowed);
    }
    answers
}

/// Connecting fails with a store error (no hang, no panic): what the handshake refused, or the
/// connect timeout's timeout.
async fn refused(config: RedisConfig) -> StoreError {
    let connect_timeout = config.connect_timeout;
    let connecting = RedisStore::connect(config);
    let error = wait::finished("connecting", connecting).await.expect_err("the connection must be refused");
    assert!(
        matches!(error, StoreError::Backend { .. }) || error == StoreError::Timeout(connect_timeout),
        "{error:?}"
    );
    error
}

#[tokio::test]
async fn a_tls_store_with_the_private_ca_decides_as_a_plain_one() {
    let certs = TestCerts::generate();
    let tls = RedisServer::start_tls(&certs, ClientAuth::Off);
    assert!(tls.url().starts_with("rediss://127.0.0.1:"), "{}", tls.url());
    let plain = RedisServer::start();

    let over_tls =
        six_requests(RedisStore::connect(node_config(&tls, Some(ca_only(&certs)))).await.expect("connect"))
            .await;
    let in_clear = six_requests(RedisStore::connect(node_config(&plain, None)).await.expect("connect")).await;
    assert_eq!(over_tls, [true, true, true, true, true, false]);
    assert_eq!(over_tls, in_clear);

    let store = RedisStore::connect(node_config(&tls, Some(ca_only(&certs)))).await.expect("connect");
    assert!(store.ready().await.is_ready(), "the readiness probe speaks TLS too");
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_a_store_error_not_a_hang() {
    let certs = TestCerts::generate();
    let server = RedisServer::start_tls(&certs, ClientAuth::Off);
    let other = TestCerts::generate();

    let error = refused(node_config(&server, Some(ca_only(&other)))).await;
    let message = error.to_string();
    assert!(matches!(error, StoreError::Backend { .. }), "{error:?}");
    assert!(message.contains("invalid peer certificate"), "{message}");
    assert!(!error.is_transient(), "it repeats until someone changes the certificates: {error}");

    // Without a CA, the platform's roots are used: they do not know the test CA either.
    let error = refused(node_config(&server, None)).await;
    assert!(error.to_string().contains("invalid peer certificate"), "{error}");
    assert!(!error.is_transient(), "{error}");

    // A plain client on a TLS port gets no answer it understands: an error, in time.
    let plain = RedisConfig {
        connect_timeout: Duration::from_secs(2),
        ..RedisConfig::node(format!("redis://127.0.0.1:{}", server.port()))
    };
    refused(plain).await;
}

#[tokio::test]
async fn mutual_tls_refuses_a_client_without_its_certificate_and_admits_one_with_it() {
    let certs = TestCerts::generate();
    let server = RedisServer::start_tls(&certs, ClientAuth::Required);

    let error = refused(node_config(&server, Some(ca_only(&certs)))).await;
    assert!(matches!(error, StoreError::Backend { .. }), "{error:?}");
    assert!(error.to_string().contains("CertificateRequired"), "{error}");
    assert!(!error.is_transient(), "{error}");

    // A certificate from another CA is refused too.
    let other = TestCerts::generate();
    let stranger = TlsConfig {
        cert: Some(pem(other.client_cert())),
        key: Some(pem(other.client_key())),
        ..ca_only(&certs)
    };
    refused(node_config(&server, Some(stranger))).await;

    let store = RedisStore::connect(node_config(&server, Some(mutual(&certs)))).await.expect("connect");
    assert_eq!(six_requests(store).await, [true, true, true, true, true, false]);
}

#[tokio::test]
async fn a_tls_cluster_with_mutual_tls_decides_as_a_plain_one() {
    let certs = TestCerts::generate();
    let cluster = RedisCluster::start_tls(&certs, ClientAuth::Required);
    assert!(cluster.urls().iter().all(|u| u.starts_with("rediss://")), "{:?}", cluster.urls());
    let config = RedisConfig {
        deadline: crate::SHARED_DEADLINE,
        connect_timeout: crate::CONNECT,
        tls: Some(mutual(&certs)),
        ..RedisConfig::cluster(cluster.urls())
    };
    let store = RedisStore::connect(config.clone()).await.expect("connect to the TLS cluster");
    assert!(store.is_cluster());
    assert_eq!(six_requests(store.clone()).await, [true, true, true, true, true, false]);
    assert!(store.ready().await.is_ready(), "every master answers PING over TLS");

    // Keys in every slot range: each master is reached over TLS.
    let limit = FixedWindow::try_new(NonZeroU64::new(1).expect("not zero"), Duration::from_secs(60))
        .expect("a window");
    let rule = Rule::new("per-user", limit).key(["user"]);
    let engine = Engine::new(Policy::new([rule]).expect("a policy"), store);
    for n in 0..30 {
        let user = Descriptors::new().with("user", format!("tls-spread-{}-{n}", std::process::id()));
        assert!(engine.check(&user, 1).await.expect("a decision").allowed);
        assert!(!engine.check(&user, 1).await.expect("a decision").allowed);
    }

    // Without the client certificate, the cluster refuses the store.
    let without = RedisConfig { tls: Some(ca_only(&certs)), ..config };
    refused(without).await;
}

fn build_error(config: RedisConfig) -> String {
    match RedisStore::connect_lazy(config) {
        Ok(_) => panic!("the configuration must be refused"),
        Err(e) => {
            assert!(!e.is_transient(), "{e}");
            e.to_string()
        }
    }
}

#[tokio::test]
async fn bad_tls_settings_are_refused_by_name_before_connecting() {
    let certs = TestCerts::generate();
    let url = "rediss://127.0.0.1:1";

    // TLS settings on a URL without TLS.
    let plain = RedisConfig { tls: Some(ca_only(&certs)), ..RedisConfig::node("redis://127.0.0.1:1") };
    let message = build_error(plain);
    assert!(message.contains("rediss://") && message.contains("redis://127.0.0.1:1"), "{message}");
    let mixed = RedisConfig {
        tls: Some(TlsConfig::default()),
        ..RedisConfig::cluster(["rediss://127.0.0.1:1", "redis://127.0.0.1:2"])
    };
    assert!(build_error(mixed).contains("redis://127.0.0.1:2"));

    // A certificate without its key, and a key without its certificate.
    let cert_only = TlsConfig { cert: Some(pem(certs.client_cert())), ..ca_only(&certs) };
    let message = build_error(RedisConfig { tls: Some(cert_only), ..RedisConfig::node(url) });
    assert!(message.contains("needs its key"), "{message}");
    let key_only = TlsConfig { key: Some(pem(certs.client_key())), ..TlsConfig::default() };
    let message = build_error(RedisConfig { tls: Some(key_only), ..RedisConfig::node(url) });
    assert!(message.contains("needs its certificate"), "{message}");

    // Files that do not hold what they should, named.
    let key_as_ca = TlsConfig { ca: Some(pem(certs.client_key())), ..TlsConfig::default() };
    let message = build_error(RedisConfig { tls: Some(key_as_ca), ..RedisConfig::node(url) });
    let key_path = certs.client_key().display().to_string();
    assert!(message.contains("the CA bundle") && message.contains(&key_path), "{message}");
    let garbage = Pem::new("the test's garbage", "-----BEGIN CERTIFICATE-----\nnot base64!\n");
    let message = build_error(RedisConfig {
        tls: Some(TlsConfig { ca: Some(garbage), ..TlsConfig::default() }),
        ..RedisConfig::node(url)
    });
    assert!(message.contains("the test's garbage") && message.contains("invalid PEM"), "{message}");
    let cert_as_key = TlsConfig { key: Some(pem(certs.client_cert())), ..mutual(&certs) };
    let message = build_error(RedisConfig { tls: Some(cert_as_key), ..RedisConfig::node(url) });
    assert!(message.contains("the client key") && message.contains("no private key"), "{message}");

    let strangers_key = TlsConfig { key: Some(pem(certs.server_key())), ..mutual(&certs) };
    let message = build_error(RedisConfig { tls: Some(strangers_key), ..RedisConfig::node(url) });
    let cert_path = certs.client_cert().display().to_string();
    assert!(
        message.contains("not the key of the client certificate") && message.contains(&cert_path),
        "{message}"
    );

    // A missing file, named with the reason.
    let missing = certs.dir().join("missing.pem");
    let error = Pem::read(&missing).expect_err("no such file");
    assert!(matches!(error, TlsError::Read { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&missing.display().to_string()) && message.contains("No such file"),
        "{message}"
    );
}
