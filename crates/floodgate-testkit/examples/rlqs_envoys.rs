//! Simulated Envoys against a running Floodgate's RLQS service, without an Envoy: each reports
//! once a second and decides locally from its assignment; Envoy 0 asks for 90 requests a second,
//! the others for 5. Prints each Envoy's admitted/asked once a second.
//!
//! ```sh
//! floodgate serve --config examples/rlqs/floodgate.yaml --grpc 127.0.0.1:8081 &
//! cargo run -p floodgate-testkit --features rlqs --example rlqs_envoys -- http://127.0.0.1:8081 rlqs-example 4 10
//! ```
//!
//! Arguments: the server's URL, the domain, how many Envoys (default 4), how many seconds (10).

use std::time::{Duration, Instant};

use floodgate_testkit::rlqs::{Filter, Settings, id};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args.first().cloned().unwrap_or_else(|| "http://127.0.0.1:8081".into());
    let domain = args.get(1).cloned().unwrap_or_else(|| "rlqs-example".into());
    let envoys: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(4);
    let seconds: u64 = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(10);
    let mut filters = Vec::with_capacity(envoys);
    for _ in 0..envoys {
        filters.push(Filter::connect(url.clone(), &domain, Settings::default()).await?);
    }
    let bucket = id(&[("name", "api"), ("method", "GET")]);
    let start = Instant::now();
    let tick = Duration::from_millis(10);
    let mut counts = vec![(0u64, 0u64); envoys];
    for step in 0..seconds * 100 {
        let at = tick * step as u32;
        if let Some(wait) = at.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        for (i, f) in filters.iter_mut().enumerate() {
            while let Ok(Some(Ok(response))) = tokio::time::timeout(Duration::ZERO, f.next()).await {
                f.apply(&response, at);
            }
            if step % 100 == 0 && step > 0 {
                f.report(at).await;
            }
            // Envoy 0: 90 a second (one a step, but for every tenth step); the others 5.
            let asks = if i == 0 { u64::from(step % 10 != 0) } else { u64::from(step % 20 == 0) };
            for _ in 0..asks {
                counts[i].1 += 1;
                if f.request(&bucket, at).await {
                    counts[i].0 += 1;
                }
            }
        }
        if step % 100 == 99 {
            let line: Vec<String> = counts.iter().map(|(a, d)| format!("{a}/{d}")).collect();
            println!("{:>3} s  admitted/asked per Envoy: {}", (step + 1) / 100, line.join("  "));
            counts.iter_mut().for_each(|c| *c = (0, 0));
        }
    }
    Ok(())
}
