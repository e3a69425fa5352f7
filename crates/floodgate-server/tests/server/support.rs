//! Starting servers, HTTP and gRPC clients, temporary directories.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use floodgate::{MemoryConfig, Policy, Rule};
use floodgate_app::{App, ServeOptions};
use floodgate_config::{self as config, Config, Source, StoreConfig};
use floodgate_http::HeaderStyle;
use floodgate_server::Server;
use floodgate_testkit::wait;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server running in this process on port 0, HTTP and gRPC.
pub(crate) struct TestServer {
    pub(crate) http: SocketAddr,
    pub(crate) grpc: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

/// An HTTP answer.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub(crate) fn content_type(&self) -> &str {
        self.header("content-type").unwrap_or("")
    }
}

impl TestServer {
    pub(crate) async fn start(config: Config) -> TestServer {
        Self::with_options(config, ServeOptions::default()).await
    }

    pub(crate) async fn with_options(config: Config, options: ServeOptions) -> TestServer {
        let app = App::new(config, options).expect("app");
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Server::new(app, http, Some(grpc)).expect("server");
        let (http, grpc) = (server.http_addr(), server.grpc_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        TestServer {
            http,
            grpc,
            client: Client::builder(TokioExecutor::new()).build_http(),
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub(crate) async fn request(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Bytes>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(format!("http://{}{path}", self.http));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(body.into())).unwrap();
        let response =
            wait::finished("an HTTP answer", self.client.request(request)).await.expect("HTTP request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
    }

    pub(crate) async fn post(&self, path: &str, body: impl Into<Bytes>) -> Reply {
        self.request(Method::POST, path, body, &[("content-type", "application/json")]).await
    }

    pub(crate) async fn get(&self, path: &str) -> Reply {
        self.request(Method::GET, path, Bytes::new(), &[]).await
    }

    /// `POST /v1/check` with these descriptors.
    pub(crate) async fn check(&self, descriptors: &[(&str, &str)]) -> Reply {
        self.post("/v1/check", check_body(descriptors, 1)).await
    }

    pub(crate) async fn peek(&self, descriptors: &[(&str, &str)]) -> Reply {
        self.post("/v1/peek", check_body(descriptors, 1)).await
    }

    /// Stops gracefully and waits.
    pub(crate) async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

pub(crate) fn check_body(descriptors: &[(&str, &str)], cost: u64) -> String {
    let map: BTreeMap<&str, &str> = descriptors.iter().copied().collect();
    serde_json::json!({ "descriptors": map, "cost": cost }).to_string()
}

/// A configuration parsed from text.
pub(crate) fn parse(yaml: &str) -> Config {
    config::parse("test.yaml", yaml).unwrap_or_else(|e| panic!("test config: {e}"))
}

/// A configuration made directly from rules (native policy, memory store).
pub(crate) fn from_rules(rules: impl IntoIterator<Item = Rule>) -> Config {
    with_domains(rules, [])
}

/// The same, with Envoy domains.
pub(crate) fn with_domains(
    rules: impl IntoIterator<Item = Rule>,
    domains: impl IntoIterator<Item = (&'static str, Vec<Rule>)>,
) -> Config {
    let mut fingerprints = BTreeMap::new();
    let rules: Vec<Rule> = rules.into_iter().collect();
    for r in &rules {
        fingerprints.insert(r.name().to_owned(), 1);
    }
    let domains = domains
        .into_iter()
        .map(|(d, rules)| {
            for r in &rules {
                fingerprints.insert(format!("{d}/{}", r.name()), 1);
            }
            (d.to_owned(), Policy::in_namespace(d, rules).unwrap())
        })
        .collect();
    Config {
        store: StoreConfig::Memory(MemoryConfig::default()),
        survival: Default::default(),
        headers: HeaderStyle::Both,
        policy: Policy::new(rules).unwrap(),
        domains,
        fingerprints,
        detailed: Default::default(),
        gateway: None,
        auth: None,
        http: Default::default(),
        tls: None,
        admin: Default::default(),
        rlqs: None,
        source: Source {
            path: None,
            text: "# built in the test\n".into(),
            hash: "0000000000000001".into(),
            files: Vec::new(),
        },
    }
}

/// A per-minute sliding window.
pub(crate) fn per_minute(limit: u64) -> floodgate_core::SlidingWindow {
    floodgate_core::SlidingWindow::try_new(limit.try_into().unwrap(), Duration::from_secs(60)).unwrap()
}

/// A fresh directory under the system's temporary directory, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "floodgate-test-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `name` atomically: a temporary file in the same directory, then a rename over it.
    pub(crate) fn write_atomic(&self, name: &str, text: &str) -> PathBuf {
        let tmp = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        let path = self.0.join(name);
        std::fs::rename(&tmp, &path).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Retries `probe` every 50 ms until it returns true; false when it has not within the hang guard
/// ([`wait::HANG_GUARD`]), for the caller to fail the test saying what never happened.
pub(crate) async fn eventually<F, Fut>(mut probe: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let happened = async {
        while !probe().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(wait::HANG_GUARD, happened).await.is_ok()
}
