//! The client's overhead per call against a raw hyper request, in one run: the same server (in
//! this process, memory store), the same `POST /v1/check` body, sequential calls on one kept-alive
//! connection each, alternating rounds so that both see the same machine.
//!
//! `cargo run --release -p floodgate-client --example overhead -- [calls per round] [rounds]`

use std::time::{Duration, Instant};

use bytes::Bytes;
use floodgate_app::{App, ServeOptions};
use floodgate_client::{Client, Request};
use floodgate_server::Server;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

const CONFIG: &str = "
store: { kind: memory }
rules:
  - name: per-user
    key: [user]
    algorithm: token_bucket
    rate: 1000000/s
    burst: 1000000
";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let calls: usize = args.next().map_or(20_000, |a| a.parse().expect("calls per round"));
    let rounds: usize = args.next().map_or(5, |a| a.parse().expect("rounds"));

    let config = floodgate_config::parse("overhead.yaml", CONFIG).expect("config");
    let app = App::new(config, ServeOptions::default()).expect("app");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = Server::new(app, listener, None).expect("server");
    let addr = server.http_addr();
    // The server runs on its own runtime thread, as a separate process would.
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(server.run(std::future::pending()))
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    let client = Client::builder(format!("http://{addr}")).deadline(Duration::from_secs(1)).build().unwrap();
    let request = Request::new().descriptor("user", "u1");
    let raw = HyperClient::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let uri: http::Uri = format!("http://{addr}/v1/check").parse().unwrap();
    let body = Bytes::from_static(br#"{"descriptors":{"user":"u1"}}"#);

    let (mut with_client, mut with_raw) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for _ in 0..calls {
            let started = Instant::now();
            let d = client.check(&request).await.unwrap();
            with_client.push(started.elapsed());
            assert!(d.allowed);
        }
        for _ in 0..calls {
            let started = Instant::now();
            let req = http::Request::post(uri.clone())
                .header("content-type", "application/json")
                .body(Full::new(body.clone()))
                .unwrap();
            let response = raw.request(req).await.unwrap();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            with_raw.push(started.elapsed());
            assert!(!bytes.is_empty());
        }
    }
    with_client.sort();
    with_raw.sort();
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
    println!("calls: {} each, {rounds} alternating rounds", with_client.len());
    for (name, v) in [("raw hyper", &with_raw), ("floodgate-client", &with_client)] {
        println!(
            "{name:>17}: mean {:>6.1} µs  p50 {:>6.1} µs  p99 {:>6.1} µs",
            mean(v).as_secs_f64() * 1e6,
            percentile(v, 0.50).as_secs_f64() * 1e6,
            percentile(v, 0.99).as_secs_f64() * 1e6
        );
    }
    let overhead = mean(&with_client).as_secs_f64() - mean(&with_raw).as_secs_f64();
    println!(
        "overhead per call: {:.1} µs mean ({:.2}× raw); p50 {:.2}×",
        overhead * 1e6,
        mean(&with_client).as_secs_f64() / mean(&with_raw).as_secs_f64(),
        percentile(&with_client, 0.5).as_secs_f64() / percentile(&with_raw, 0.5).as_secs_f64()
    );
}
