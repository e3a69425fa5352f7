//! `https` upstreams: the upstream's certificate checked against its `tls.ca`; HTTP/2 by ALPN
//! where the route asks for it and the upstream offers it (many requests on one connection),
//! HTTP/1.1 where it does not; a certificate that does not chain to the bundle is a 502, and the
//! request is never sent.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use floodgate_testkit::tls::TestCerts;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::Gateway;

/// An upstream serving TLS with a certificate of `certs`, offering `alpn`; it answers each request
/// with the HTTP version it came in and counts the connections it accepted.
struct TlsUpstream {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    /// What it saw: each request's version, path and `host`.
    seen: Arc<Mutex<Vec<(http::Version, String, String)>>>,
    task: JoinHandle<()>,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsUpstream {
    async fn start(certs: &TestCerts, alpn: &[&[u8]]) -> TlsUpstream {
        Self::on("127.0.0.1", certs, alpn).await
    }

    async fn on(ip: &str, certs: &TestCerts, alpn: &[&[u8]]) -> TlsUpstream {
        let chain = CertificateDer::pem_file_iter(certs.server_cert())
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(certs.server_key()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (counted, saw) = (Arc::clone(&accepted), Arc::clone(&seen));
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                let (acceptor, saw) = (acceptor.clone(), Arc::clone(&saw));
                tokio::spawn(async move {
                    // A client that does not trust the certificate ends the handshake here.
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let host = request
                            .headers()
                            .get(http::header::HOST)
                            .map(|h| h.to_str().unwrap_or_default().to_owned())
                            .or_else(|| request.uri().authority().map(|a| a.to_string()))
                            .unwrap_or_default();
                        let version = request.version();
                        saw.lock().push((version, request.uri().path().to_owned(), host));
                        async move {
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("{version:?}")))))
                        }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TlsUpstream { addr, accepted, seen, task }
    }

    fn versions(&self) -> Vec<http::Version> {
        self.seen.lock().iter().map(|(v, ..)| *v).collect()
    }
}

fn config(url: &str, ca: &std::path::Path, http2: bool) -> String {
    format!(
        r#"
rules: []
gateway:
  routes:
    - name: api
      match: {{ path: "/{{*rest}}" }}
      upstream: {{ url: "{url}", http2: {http2}, tls: {{ ca: "{ca}" }} }}
"#,
        ca = ca.display()
    )
}

#[tokio::test]
async fn an_https_upstream_is_reached_over_tls_checked_against_its_ca() {
    let certs = TestCerts::generate();
    let upstream = TlsUpstream::start(&certs, &[b"h2", b"http/1.1"]).await;
    // By name: the certificate names `localhost`.
    let url = format!("https://localhost:{}", upstream.addr.port());
    let gateway = Gateway::start(&config(&url, &certs.ca(), false)).await;
    for path in ["/a", "/b", "/c"] {
        let reply = gateway.get(path, &[]).await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "HTTP/1.1"), "{path}");
    }
    let seen = upstream.seen.lock().clone();
    assert_eq!(seen.iter().map(|(_, p, _)| p.as_str()).collect::<Vec<_>>(), ["/a", "/b", "/c"]);
    // Without `http2`, ALPN offers HTTP/1.1 only, whatever the upstream offers.
    assert_eq!(upstream.versions(), [http::Version::HTTP_11; 3]);
    gateway.stop().await;
}

#[tokio::test]
async fn http2_over_tls_is_spoken_when_the_upstream_offers_it_many_requests_on_one_connection() {
    let certs = TestCerts::generate();
    let upstream = TlsUpstream::start(&certs, &[b"h2", b"http/1.1"]).await;
    // By address: the certificate's IP SAN is checked.
    let url = format!("https://127.0.0.1:{}", upstream.addr.port());
    let gateway = Arc::new(Gateway::start(&config(&url, &certs.ca(), true)).await);
    assert_eq!(gateway.get("/first", &[]).await.body, "HTTP/2.0");
    // Ten at once share the one connection's streams.
    let calls: Vec<_> = (0..10)
        .map(|i| {
            let gateway = Arc::clone(&gateway);
            tokio::spawn(async move { gateway.get(&format!("/{i}"), &[]).await })
        })
        .collect();
    for call in calls {
        let reply = call.await.unwrap();
        assert_eq!((reply.status, reply.body.as_str()), (200, "HTTP/2.0"));
    }
    assert_eq!(upstream.versions(), [http::Version::HTTP_2; 11]);
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 1, "one TLS connection carried every request");
    // HTTP/2 names the upstream in `:authority`.
    assert!(
        upstream
            .seen
            .lock()
            .iter()
            .all(|(_, _, host)| host == &format!("127.0.0.1:{}", upstream.addr.port()))
    );
}

#[tokio::test]
async fn http2_falls_back_to_http1_when_the_upstream_offers_only_http1() {
    let certs = TestCerts::generate();
    let upstream = TlsUpstream::start(&certs, &[b"http/1.1"]).await;
    let url = format!("https://localhost:{}", upstream.addr.port());
    let gateway = Gateway::start(&config(&url, &certs.ca(), true)).await;
    let reply = gateway.get("/x", &[]).await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "HTTP/1.1"));
    gateway.stop().await;
}

#[tokio::test]
async fn a_certificate_that_does_not_chain_to_the_ca_is_a_502_and_nothing_is_sent() {
    let (theirs, ours) = (TestCerts::generate(), TestCerts::generate());
    let upstream = TlsUpstream::start(&theirs, &[b"http/1.1"]).await;
    let url = format!("https://localhost:{}", upstream.addr.port());
    let gateway = Gateway::start(&config(&url, &ours.ca(), false)).await;
    let reply = gateway.get("/secret", &[]).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert!(reply.body.contains("could not be reached"), "{}", reply.body);
    assert!(upstream.seen.lock().is_empty(), "no request reached an upstream the gateway does not trust");
    assert!(upstream.accepted.load(Ordering::SeqCst) >= 1, "the handshake was tried");
    // An address the certificate does not carry (it names 127.0.0.1 and localhost) is refused the
    // same way, with the right CA.
    let elsewhere = TlsUpstream::on("127.0.0.2", &theirs, &[b"http/1.1"]).await;
    let misnamed =
        Gateway::start(&config(&format!("https://127.0.0.2:{}", elsewhere.addr.port()), &theirs.ca(), false))
            .await;
    assert_eq!(misnamed.get("/secret", &[]).await.status, 502);
    assert!(elsewhere.seen.lock().is_empty());
    gateway.stop().await;
    misnamed.stop().await;
}
