//! TLS on the listeners (`tls:`, `gateway.tls:`): HTTPS with curl, gRPC with the tonic client,
//! mutual TLS with good, expired and wrong-CA client certificates, certificates reloaded when
//! their files change — certificates made here with rcgen.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit::wait;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, date_time_ymd,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{TempDir, TestServer, eventually, parse};

const RULES: &str = "\
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 100
    window: 1h
";

/// A CA and what it signed, as PEM files in `dir` named `<prefix>-…`.
struct Pki {
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    /// A CA of its own (`<name>-ca.pem`).
    fn new(dir: &TempDir, name: &str) -> Pki {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, format!("Floodgate test CA {name}"));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = ca.self_signed(&key).unwrap();
        dir.write_atomic(&format!("{name}-ca.pem"), &cert.pem());
        Pki { issuer: Issuer::new(ca, key) }
    }

    /// A certificate it signs: `<file>.pem` and `<file>.key`; `expired`: valid in 2020 only.
    fn sign(&self, dir: &TempDir, file: &str, server: bool, expired: bool) {
        let names = if server { vec!["127.0.0.1".to_owned(), "localhost".to_owned()] } else { Vec::new() };
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, file);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2020, 12, 31);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        // The key first: a reader that sees the new certificate sees its key too.
        dir.write_atomic(&format!("{file}.key"), &key.serialize_pem());
        dir.write_atomic(&format!("{file}.pem"), &cert.pem());
    }
}

/// CA `a` signing the server and the clients `good` and `expired`; CA `b` signing `stranger`.
fn pki(name: &str) -> (TempDir, Pki, Pki) {
    let dir = TempDir::new(name);
    let a = Pki::new(&dir, "a");
    a.sign(&dir, "server", true, false);
    a.sign(&dir, "good", false, false);
    a.sign(&dir, "expired", false, true);
    let b = Pki::new(&dir, "b");
    b.sign(&dir, "stranger", false, false);
    (dir, a, b)
}

fn tls_config(dir: &TempDir, mutual: bool) -> String {
    let p = |f: &str| dir.path().join(f).display().to_string();
    let client_ca = if mutual { format!(", client_ca: {}", p("a-ca.pem")) } else { String::new() };
    format!("tls: {{cert: {}, key: {}{client_ca}}}\n{RULES}", p("server.pem"), p("server.key"))
}

/// `curl` over HTTPS to `/v1/check`: its exit code (0: a 2xx answer) and the body.
fn curl(addr: std::net::SocketAddr, ca: &Path, client: Option<(&Path, &Path)>) -> (i32, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--fail", "--max-time", "5", "--cacert"]).arg(ca);
    if let Some((cert, key)) = client {
        cmd.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    cmd.args(["-d", r#"{"descriptors": {"user": "u1"}}"#])
        .arg(format!("https://localhost:{}/v1/check", addr.port()));
    let out = cmd.output().expect("curl runs (apt-get install curl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn https_with_curl_and_a_certificate_of_another_ca_is_refused_by_the_client() {
    let (dir, _a, _b) = pki("tls-curl");
    let server = TestServer::start(parse(&tls_config(&dir, false))).await;
    let http = server.http;
    let ca = dir.path().join("a-ca.pem");
    let (code, out) = tokio::task::spawn_blocking(move || curl(http, &ca, None)).await.unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("\"allowed\":true"), "{out}");
    // A client that trusts another CA refuses the server's certificate (curl: 60).
    let other = dir.path().join("b-ca.pem");
    let (code, out) = tokio::task::spawn_blocking(move || curl(http, &other, None)).await.unwrap();
    assert_eq!(code, 60, "{out}");
    // Plain HTTP on the TLS listener gets no HTTP answer.
    let mut plain = TcpStream::connect(http).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    plain.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 256];
    let n =
        wait::finished("the TLS listener's answer to plain HTTP", plain.read(&mut buf)).await.unwrap_or(0);
    assert!(!String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    server.stop().await;
}

#[tokio::test]
async fn mutual_tls_admits_a_good_client_certificate_only() {
    let (dir, _a, _b) = pki("tls-mutual");
    let server = TestServer::start(parse(&tls_config(&dir, true))).await;
    let http = server.http;
    let d = dir.path().to_path_buf();
    let results = tokio::task::spawn_blocking(move || {
        let ca = d.join("a-ca.pem");
        let with = |name: &str| {
            curl(http, &ca, Some((&d.join(format!("{name}.pem")), &d.join(format!("{name}.key")))))
        };
        [
            ("good", with("good")),
            ("none", curl(http, &ca, None)),
            ("expired", with("expired")),
            ("stranger", with("stranger")),
        ]
    })
    .await
    .unwrap();
    for (name, (code, out)) in results {
        if name == "good" {
            assert_eq!(code, 0, "{name}: {out}");
            assert!(out.contains("\"allowed\":true"), "{out}");
        } else {
            assert_ne!(code, 0, "{name}: a handshake without a valid client certificate fails: {out}");
            assert!(!out.contains("allowed"), "{name}: {out}");
        }
    }
    server.stop().await;
}

/// A tonic client over rustls, trusting `ca`, presenting `client` if any.
async fn grpc_tls(
    addr: std::net::SocketAddr,
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<RateLimitServiceClient<tonic::transport::Channel>, String> {
    grpc_tls_channel(addr, ca, client).await.map(RateLimitServiceClient::new)
}

/// A tonic channel over rustls, trusting `ca`, presenting `client` if any.
async fn grpc_tls_channel(
    addr: std::net::SocketAddr,
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<tonic::transport::Channel, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap()).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap();
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let connector = connector.clone();
            async move {
                let tcp = TcpStream::connect(addr).await?;
                let tls = connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        }))
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(channel)
}

async fn should_rate_limit(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
) -> Result<i32, String> {
    let request = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry { key: "user".into(), value: "u1".into() }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    };
    client.should_rate_limit(request).await.map(|r| r.into_inner().overall_code).map_err(|e| format!("{e:?}"))
}

#[tokio::test]
async fn grpc_over_mutual_tls_with_the_tonic_client() {
    let (dir, _a, _b) = pki("tls-grpc");
    let server = TestServer::start(parse(&tls_config(&dir, true))).await;
    let p = |f: &str| dir.path().join(f);
    let mut good =
        grpc_tls(server.grpc, &p("a-ca.pem"), Some((&p("good.pem"), &p("good.key")))).await.unwrap();
    assert_eq!(should_rate_limit(&mut good).await.unwrap(), 1, "OK over TLS, ALPN h2");
    for (name, client) in [
        ("none", None),
        ("expired", Some((p("expired.pem"), p("expired.key")))),
        ("stranger", Some((p("stranger.pem"), p("stranger.key")))),
    ] {
        let refused = match grpc_tls(
            server.grpc,
            &p("a-ca.pem"),
            client.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
        )
        .await
        {
            Err(_) => true,
            // TLS 1.3: the client may finish its side before the server refuses the certificate.
            Ok(mut c) => should_rate_limit(&mut c).await.is_err(),
        };
        assert!(refused, "{name}: refused");
    }
    server.stop().await;
}

/// RLQS streams share the gRPC listener's TLS: a stream over mutual TLS gets its assignment.
#[tokio::test]
async fn rlqs_streams_over_mutual_tls() {
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
    use floodgate_testkit::rlqs::{Filter, Settings, id};

    let (dir, _a, _b) = pki("tls-rlqs");
    let rlqs = "rlqs:\n  domains:\n    d:\n      - name: api\n        match: { name: api }\n        algorithm: fixed_window\n        limit: 10\n        window: 1s\n";
    let server = TestServer::start(parse(&format!("{}{rlqs}", tls_config(&dir, true)))).await;
    let p = |f: &str| dir.path().join(f);
    let channel =
        grpc_tls_channel(server.grpc, &p("a-ca.pem"), Some((&p("good.pem"), &p("good.key")))).await.unwrap();
    let mut filter = Filter::open(RateLimitQuotaServiceClient::new(channel), "d", Settings::default(), None)
        .await
        .unwrap();
    let bucket = id(&[("name", "api")]);
    filter.request(&bucket, std::time::Duration::ZERO).await;
    let response =
        wait::finished("an assignment over TLS", filter.next()).await.expect("open").expect("a response");
    assert_eq!(response.bucket_action.len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_certificate_replaced_on_disk_is_served_without_a_restart() {
    let (dir, _a, b) = pki("tls-reload");
    let server = TestServer::start(parse(&tls_config(&dir, false))).await;
    let http = server.http;
    let (ca_a, ca_b) = (dir.path().join("a-ca.pem"), dir.path().join("b-ca.pem"));
    let (code, out) = {
        let ca = ca_a.clone();
        tokio::task::spawn_blocking(move || curl(http, &ca, None)).await.unwrap()
    };
    assert_eq!(code, 0, "{out}");
    // The server's certificate and key replaced by ones CA b signed.
    b.sign(&dir, "server", true, false);
    let switched = eventually(|| {
        let ca = ca_b.clone();
        async move { tokio::task::spawn_blocking(move || curl(http, &ca, None).0 == 0).await.unwrap() }
    })
    .await;
    assert!(switched, "the new certificate is served within the poll interval");
    let (code, _) = tokio::task::spawn_blocking(move || curl(http, &ca_a, None)).await.unwrap();
    assert_eq!(code, 60, "the old CA no longer verifies the server");
    server.stop().await;
}

#[tokio::test]
async fn the_gateway_listener_serves_tls() {
    let (dir, _a, _b) = pki("tls-gateway");
    let p = |f: &str| dir.path().join(f).display().to_string();
    let yaml = format!(
        "gateway:\n  listen: 127.0.0.1:0\n  tls: {{cert: {}, key: {}}}\n  routes: []\n{RULES}",
        p("server.pem"),
        p("server.key")
    );
    let app = floodgate_app::App::new(parse(&yaml), floodgate_app::ServeOptions::default()).unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = floodgate_server::Server::new(app, http, None).unwrap().gateway(gateway).unwrap();
    let addr = server.gateway_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = rx.await;
    }));
    let ca = dir.path().join("a-ca.pem");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "5",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{ssl_verify_result}",
                "--cacert",
            ])
            .arg(&ca)
            .arg(format!("https://localhost:{}/anything", addr.port()))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // No route matches: the gateway's 404, over a verified TLS session.
    assert_eq!(text, "404 0", "{text} {}", String::from_utf8_lossy(&out.stderr));
    let _ = tx.send(());
    task.await.unwrap().unwrap();
}
