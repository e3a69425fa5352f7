//! The LLM gateway end to end: the real `floodgate` binary with an `llm:` route, in front of the
//! project's OpenAI-compatible upstream (`fake-openai`, examples/llm_gateway), driven over HTTP and
//! by the real `openai` SDKs (Python from PyPI, Node from npm). What is asserted is what happened:
//! the tokens each budget holds (`/v1/usage`), the requests the upstream saw, the 429s and their
//! waits — never durations; waits are for events.

mod admission;
mod anthropic;
mod anthropic_sdk;
mod dollars;
mod example;
mod fallback;
mod metering;
mod metrics;
mod redis;
mod sdk;
mod waiting;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use fake_openai::{FakeOpenAi, Settings};
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// `floodgate serve` with a gateway on ports the system chose; killed on drop.
pub(crate) struct Floodgate {
    child: Child,
    pub(crate) gateway: SocketAddr,
    pub(crate) http: SocketAddr,
    dir: PathBuf,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Drop for Floodgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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

    /// The `data:` payloads of a server-sent events body, in order.
    pub(crate) fn events(&self) -> Vec<String> {
        self.body
            .split("\n\n")
            .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_owned))
            .collect()
    }
}

/// The configuration of the tests' gateway: per tenant (from `x-tenant-id`) 1000 requests and
/// `tokens` tokens an hour, an `llm:` route for every `/v1/…` POST with the `llm` settings given.
pub(crate) fn config(upstream: &str, tokens: u64, llm: &str) -> String {
    config_on("", upstream, tokens, llm)
}

/// [`config`] on the store `store` (a `store:` line; empty: the memory store).
pub(crate) fn config_on(store: &str, upstream: &str, tokens: u64, llm: &str) -> String {
    format!(
        r#"
{store}
headers: [ietf, openai]
rules:
  - name: tenant-requests
    key: [tenant]
    algorithm: fixed_window
    limit: 1000
    window: 1h
  - name: tenant-tokens
    key: [tenant]
    algorithm: fixed_window
    limit: {tokens}
    window: 1h
    cost: tokens
gateway:
  identity:
    headers: {{ tenant: x-tenant-id }}
  routes:
    - name: llm
      match: {{ path: "/v1/{{*rest}}", methods: [POST] }}
      upstream: {upstream}
      llm: {llm}
"#
    )
}

impl Floodgate {
    /// Serves `yaml`.
    pub(crate) fn serve(yaml: &str) -> Floodgate {
        Floodgate::serve_env(yaml, &[])
    }

    /// Serves `yaml` with the environment variables `env`.
    pub(crate) fn serve_env(yaml: &str, env: &[(&str, &str)]) -> Floodgate {
        Floodgate::serve_with(yaml, env, &[])
    }

    /// Serves `yaml` with the environment variables `env` and the extra arguments `args` (such as
    /// `--manual-clock <ms>`).
    pub(crate) fn serve_with(yaml: &str, env: &[(&str, &str)], args: &[&str]) -> Floodgate {
        let dir = std::env::temp_dir().join(format!("floodgate-llm-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("floodgate.yaml");
        std::fs::write(&config, yaml).unwrap();
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--gateway", "127.0.0.1:0", "--config"])
            .arg(&config)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("FLOODGATE_ADMIN_TOKEN")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn floodgate");
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            // Read to the end: a closed pipe would fail the server's logging.
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let (mut gateway, mut http) = (None, None);
        let mut log = Vec::new();
        while gateway.is_none() || http.is_none() {
            let line =
                rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("no addresses: {log:?}"));
            let addr = |key: &str| -> Option<SocketAddr> {
                line.split(key).nth(1)?.split_whitespace().next()?.trim_matches('"').parse().ok()
            };
            gateway = gateway.or_else(|| addr("gateway="));
            http = http.or_else(|| addr(" http="));
            log.push(line);
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Floodgate {
            child,
            gateway: gateway.unwrap(),
            http: http.unwrap(),
            dir,
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// `POST path` through the gateway for `tenant`, with `headers` and a JSON `body`.
    pub(crate) async fn post(
        &self,
        path: &str,
        tenant: &str,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> Reply {
        let mut all = vec![("content-type", "application/json"), ("x-tenant-id", tenant)];
        all.extend_from_slice(headers);
        self.send(self.gateway, Method::POST, path, &all, body.to_string()).await
    }

    /// `POST path` with a body as it is.
    pub(crate) async fn post_raw(&self, path: &str, tenant: &str, body: &str) -> Reply {
        let headers = [("content-type", "application/json"), ("x-tenant-id", tenant)];
        self.send(self.gateway, Method::POST, path, &headers, body.to_owned()).await
    }

    /// The metrics page.
    pub(crate) async fn metrics(&self) -> String {
        self.send(self.http, Method::GET, "/metrics", &[], String::new()).await.body
    }

    /// The value of `series` (its full name with labels) on the metrics page now.
    pub(crate) async fn series(&self, series: &str) -> Option<f64> {
        series_in(&self.metrics().await, series)
    }

    /// What `rule` has used for `tenant` now (`/v1/usage`).
    pub(crate) async fn used(&self, rule: &str, tenant: &str) -> u64 {
        let reply = self
            .send(
                self.http,
                Method::GET,
                &format!("/v1/usage?rule={rule}&tenant={tenant}"),
                &[],
                String::new(),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()["used"].as_u64().unwrap()
    }

    /// Waits until `rule` has used `want` for `tenant` (a commit lands after the answer's end).
    pub(crate) async fn used_becomes(&self, rule: &str, tenant: &str, want: u64) {
        let mut used = 0;
        for _ in 0..400 {
            used = self.used(rule, tenant).await;
            if used == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{rule} for {tenant}: used {used}, expected {want}");
    }

    pub(crate) async fn send(
        &self,
        addr: SocketAddr,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: String,
    ) -> Reply {
        let response = self.request(addr, method, path, headers, body).await;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        Reply { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
    }

    /// The response, its body unread.
    pub(crate) async fn request(
        &self,
        addr: SocketAddr,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: String,
    ) -> http::Response<hyper::body::Incoming> {
        let mut request = Request::builder().method(method).uri(format!("http://{addr}{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.client.request(request))
            .await
            .expect("an answer within 30 s")
            .expect("a response")
    }
}

/// The value of `series` (its full name with labels) on the metrics page `page`.
pub(crate) fn series_in(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// A fake upstream generating `tokens` per completion.
pub(crate) async fn upstream(tokens: u64) -> FakeOpenAi {
    FakeOpenAi::start(Settings { tokens, ..Settings::default() }).await.unwrap()
}

/// What the fake upstream counts as the prompt of `body` on `path` (the gateway counts the same).
pub(crate) fn prompt_of(path: &str, body: &Value) -> u64 {
    let model = body["model"].as_str().unwrap();
    fake_openai::prompt_tokens(path, body, fake_openai::encoding_of(model))
}

/// A chat request of `model` saying `text`.
pub(crate) fn chat(model: &str, text: &str) -> Value {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}]})
}
