//! A small load generator for Floodgate's Envoy RLS gRPC (`ShouldRateLimit`): N concurrent
//! callers over a few HTTP/2 connections for a fixed time, latency recorded in an HDR histogram.
//!
//! ```sh
//! cargo run --release -p floodgate-server -- serve --config crates/floodgate-server/benches/bench.yaml &
//! cargo run --release -p floodgate-server --example rls_bench -- 127.0.0.1:8081 64 20
//! ```
//!
//! Arguments: the gRPC address (default `127.0.0.1:8081`), concurrent callers (default 64), seconds
//! (default 10). Each request carries one descriptor `[user, tenant]` for one of 10 000 users in
//! 100 tenants, in the native policy (the domain is `bench`, which no Envoy file defines).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;

/// HTTP/2 connections shared by the callers.
const CONNECTIONS: usize = 4;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8081".into());
    let callers: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let seconds: u64 = args.next().map_or(Ok(10), |a| a.parse())?;

    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.connect().await?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    #[allow(clippy::disallowed_methods)] // a load generator's own timing
    let started = Instant::now();
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let mut client = RateLimitServiceClient::new(channels[caller % CONNECTIONS].clone());
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut latencies =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
            let (mut ok, mut over, mut errors) = (0u64, 0u64, 0u64);
            let mut n = caller as u64;
            while !stop.load(Ordering::Relaxed) {
                n += callers as u64;
                let request = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![
                            Entry { key: "user".into(), value: format!("u{}", n % 10_000) },
                            Entry { key: "tenant".into(), value: format!("t{}", n % 100) },
                        ],
                        ..RateLimitDescriptor::default()
                    }],
                    hits_addend: 1,
                };
                #[allow(clippy::disallowed_methods)]
                let sent = Instant::now();
                match client.should_rate_limit(request).await {
                    Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => ok += 1,
                    Ok(_) => over += 1,
                    Err(_) => errors += 1,
                }
                let micros = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX).max(1);
                let _ = latencies.record(micros);
            }
            (latencies, ok, over, errors)
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);

    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let (mut ok, mut over, mut errors) = (0, 0, 0);
    for task in tasks {
        let (h, o, v, e) = task.await?;
        all.add(&h)?;
        ok += o;
        over += v;
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = ok + over + errors;
    println!(
        "ShouldRateLimit against {addr}: {callers} callers over {CONNECTIONS} HTTP/2 connections, {elapsed:.1} s"
    );
    println!(
        "requests {total} ({:.0}/s): OK {ok}, OVER_LIMIT {over}, errors {errors}",
        total as f64 / elapsed
    );
    for q in [0.5, 0.9, 0.99, 0.999] {
        println!("p{:<5} {:>8.3} ms", q * 100.0, all.value_at_quantile(q) as f64 / 1000.0);
    }
    println!("max    {:>8.3} ms", all.max() as f64 / 1000.0);
    Ok(())
}
