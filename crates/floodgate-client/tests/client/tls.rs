//! HTTPS and mutual TLS against the server's TLS listener (`tls:`), with certificates made by the
//! test: a verified server, a server the CA bundle does not verify, a server that requires a client
//! certificate admitting one and refusing a client without one or with a stranger's — each refusal
//! explained — and TLS settings that cannot be used, refused by name when the client is built.

use std::time::Duration;

use floodgate_client::{Client, Error, FailMode, FailureReason, Pem, Request};
use floodgate_testkit::tls::TestCerts;
use floodgate_testkit::wait;

use super::{CONFIG, Running, user};

/// The server's configuration with a TLS listener; `mutual`: clients need a certificate its CA
/// signed.
fn tls_config(certs: &TestCerts, mutual: bool) -> String {
    let client_ca = if mutual { format!(", client_ca: {}", certs.ca().display()) } else { String::new() };
    format!(
        "tls: {{cert: {}, key: {}{client_ca}}}\n{CONFIG}",
        certs.server_cert().display(),
        certs.server_key().display()
    )
}

fn https(server: &Running, host: &str) -> String {
    format!("https://{host}:{}", server.addr.port())
}

/// A client of `url` trusting `ca`, failing closed; a deadline far longer than a handshake takes.
fn builder(url: &str, ca: &TestCerts) -> floodgate_client::ClientBuilder {
    Client::builder(url)
        .deadline(Duration::from_secs(10))
        .fail_mode(FailMode::Closed)
        .tls_ca(Pem::file(ca.ca()))
}

/// The TLS failure of a report: its message.
async fn tls_failure(floodgate: &Client) -> String {
    match wait::finished("a report over TLS", floodgate.report(&user("t"))).await {
        Err(Error::Unavailable { reason: FailureReason::Tls, message, .. }) => message,
        other => panic!("expected a TLS failure, got {other:?}"),
    }
}

#[tokio::test]
async fn checks_over_https_verify_the_server_against_the_ca_bundle() {
    let certs = TestCerts::generate();
    let mut server = Running::start(&tls_config(&certs, false)).await;
    for host in ["localhost", "127.0.0.1"] {
        let floodgate = builder(&https(&server, host), &certs).build().unwrap();
        let d = floodgate.check(&user(host)).await.unwrap();
        assert_eq!((d.status, d.failure), (200, None), "{host}");
        assert_eq!(d.limits[0].name, "per-user");
    }

    // A bundle of another CA does not verify the server: no verdict, said so, and the fail mode
    // decides a check.
    let stranger = TestCerts::generate();
    let floodgate = builder(&https(&server, "localhost"), &stranger).build().unwrap();
    let message = tls_failure(&floodgate).await;
    assert!(message.contains("not signed by a CA of the bundle"), "{message}");
    let d = floodgate.check(&user("t")).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.failure, Some((FailureReason::Tls, FailMode::Closed)));
    assert_eq!(floodgate.stats().tls, 2);

    // Plain HTTP to the TLS listener gets no verdict either.
    let plain =
        Client::builder(format!("http://{}", server.addr)).deadline(Duration::from_secs(10)).build().unwrap();
    assert!(plain.check(&user("t")).await.unwrap().failure.is_some());
    server.stop().await;
}

#[tokio::test]
async fn mutual_tls_admits_the_client_certificate_and_refuses_a_client_without_one_saying_why() {
    let certs = TestCerts::generate();
    let mut server = Running::start(&tls_config(&certs, true)).await;
    let url = https(&server, "localhost");

    let with_cert = builder(&url, &certs)
        .tls_client_cert(Pem::file(certs.client_cert()), Pem::file(certs.client_key()))
        .build()
        .unwrap();
    let d = with_cert.check(&user("m")).await.unwrap();
    assert_eq!((d.status, d.failure), (200, None));
    assert!(with_cert.report(&Request::new().descriptor("user", "m")).await.unwrap().allowed);

    let without = builder(&url, &certs).build().unwrap();
    let message = tls_failure(&without).await;
    assert!(message.contains("requires a client certificate"), "{message}");
    let d = without.check(&user("m")).await.unwrap();
    assert!(!d.allowed, "failed closed");
    assert_eq!(d.failure, Some((FailureReason::Tls, FailMode::Closed)));

    // A certificate of another CA is refused too.
    let stranger = TestCerts::generate();
    let foreign = builder(&url, &certs)
        .tls_client_cert(Pem::file(stranger.client_cert()), Pem::file(stranger.client_key()))
        .build()
        .unwrap();
    let message = tls_failure(&foreign).await;
    assert!(message.contains("refused the client certificate"), "{message}");
    server.stop().await;
}

#[tokio::test]
async fn tls_settings_that_cannot_be_used_are_refused_when_built_naming_the_setting() {
    let certs = TestCerts::generate();
    let other = TestCerts::generate();
    let refused = |builder: floodgate_client::ClientBuilder| match builder.build() {
        Err(Error::Config { field, reason }) => (field, reason),
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let url = "https://localhost:1";

    let (field, reason) = refused(Client::builder(url));
    assert_eq!(field, "tls_ca");
    assert!(reason.contains("needs the CA bundle"), "{reason}");

    let missing = certs.dir().join("missing.pem");
    let (field, reason) = refused(Client::builder(url).tls_ca(Pem::file(&missing)));
    assert_eq!(field, "tls_ca");
    assert!(reason.contains(&format!("cannot read {}", missing.display())), "{reason}");

    // A key where the bundle should be: no certificate in it.
    let (field, reason) = refused(Client::builder(url).tls_ca(Pem::file(certs.client_key())));
    assert_eq!(field, "tls_ca");
    assert!(reason.contains("no certificate"), "{reason}");

    let (field, reason) = refused(
        Client::builder(url)
            .tls_ca(Pem::file(certs.ca()))
            .tls_client_cert(Pem::file(certs.client_cert()), Pem::file(other.client_key())),
    );
    assert_eq!(field, "tls_client_key");
    assert!(reason.contains("is not the key of the client certificate"), "{reason}");

    let (field, reason) = refused(
        Client::builder(url)
            .tls_ca(Pem::file(certs.ca()))
            .tls_client_cert(Pem::file(certs.client_cert()), Pem::text("the mounted secret", "no key here")),
    );
    assert_eq!(field, "tls_client_key");
    assert!(reason.contains("the mounted secret: no private key"), "{reason}");

    let (field, reason) = refused(
        Client::builder(url)
            .tls_ca(Pem::file(certs.ca()))
            .tls_client_cert(Pem::file(certs.dir().join("none.pem")), Pem::file(certs.client_key())),
    );
    assert_eq!(field, "tls_client_cert");
    assert!(reason.contains("cannot read"), "{reason}");

    let (field, reason) = refused(Client::builder("http://localhost:1").tls_ca(Pem::file(certs.ca())));
    assert_eq!(field, "url");
    assert!(reason.contains("need an https:// URL"), "{reason}");
}
