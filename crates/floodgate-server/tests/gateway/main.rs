//! The gateway end to end: the server in process (and the real binary where a restart or `kill -9`
//! is the point), real upstream servers started by the tests, a real HTTP client.

mod binary;
mod degrade;
mod identity;
mod limits;
mod pool;
mod proxy;
mod resilience;
mod tls_upstreams;
mod upstreams;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use floodgate_app::{App, ServeOptions};
use floodgate_server::Server;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server with a gateway, in this process, on port 0.
pub(crate) struct Gateway {
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
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
}

impl Gateway {
    /// Starts a server whose configuration is `yaml` (with a `gateway:` section).
    pub(crate) async fn start(yaml: &str) -> Gateway {
        let config = floodgate_config::parse("gateway.yaml", yaml).unwrap_or_else(|e| panic!("{e}"));
        let app = App::new(config, ServeOptions::default()).expect("app");
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gateway = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Server::new(app, http, None).unwrap().gateway(gateway).expect("a gateway");
        let (addr, admin) = (server.gateway_addr().unwrap(), server.http_addr());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Gateway {
            addr,
            admin,
            client: Client::builder(TokioExecutor::new()).build(connector),
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// `method path` with `headers`, through the gateway.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        send(&self.client, self.addr, method, path, headers, body).await
    }

    pub(crate) async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(Method::GET, path, headers, "").await
    }

    /// A request to the server's HTTP listener (admin API, metrics).
    pub(crate) async fn admin(&self, method: Method, path: &str, body: &str) -> Reply {
        send(&self.client, self.admin, method, path, &[("content-type", "application/json")], body).await
    }

    pub(crate) async fn metrics(&self) -> String {
        self.admin(Method::GET, "/metrics", "").await.body
    }

    pub(crate) async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

pub(crate) async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut request = Request::builder().method(method).uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(20), client.request(request))
        .await
        .expect("an answer within 20 s")
        .expect("a response");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    Reply { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

/// A metric's value on a `/metrics` page: the line starting with `series` (name and labels).
pub(crate) fn metric(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}
