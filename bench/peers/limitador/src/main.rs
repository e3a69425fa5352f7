//! `limitador-peer`: the `limitador` crate driven the way `floodgate-bench` drives Floodgate, so
//! that `bench/run-all` can print both side by side. Prints one JSON report on stdout with
//! floodgate-bench's field names (`decisions_per_sec`, `allowed`, `denied`, `p50_us`, …,
//! `admitted`, `over_admission`).
//!
//! ```text
//! limitador-peer throughput --threads 2 --secs 5 --keys 10000 --limit 100 --window-s 1
//! limitador-peer throughput --redis redis://127.0.0.1:18379 --concurrency 64 --secs 5
//! limitador-peer instances --redis redis://127.0.0.1:18379 -m 3 --concurrency 16 --secs 2 --limit 100
//! limitador-peer instances --redis redis://127.0.0.1:18379 --cached -m 3 ...
//! ```
//!
//! - `throughput` without `--redis`: `RateLimiter` over its in-memory storage, `--threads` OS
//!   threads in a closed loop, keys `k<n>` visited uniformly, one limit (`--limit` per
//!   `--window-s`, limitador's fixed window) keyed by the `user` variable.
//! - `throughput --redis`: `AsyncRateLimiter` over `AsyncRedisStorage` (every decision a Redis
//!   round trip), `--concurrency` tasks.
//! - `instances`: `-m` limiters, each with its own Redis storage (its own connection, as separate
//!   processes would have), hammering one key; total admitted versus the limit. `--cached` uses
//!   `CachedRedisStorage` (counters cached locally and flushed in batches, limitador-server's
//!   `redis_cached` mode) instead of `AsyncRedisStorage`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use limitador::limit::{Context, Limit, Namespace};
use limitador::storage::redis::{AsyncRedisStorage, CachedRedisStorage};
use limitador::{AsyncRateLimiter, RateLimiter};
use serde_json::{Value, json};

const NAMESPACE: &str = "bench";

/// What each caller counts.
#[derive(Default)]
struct Tally {
    allowed: u64,
    denied: u64,
    errors: u64,
    latency: Option<Histogram<u64>>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            latency: Some(Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds")),
            ..Tally::default()
        }
    }

    fn record(&mut self, outcome: Result<bool, ()>, latency: Duration) {
        match outcome {
            Ok(true) => self.denied += 1,
            Ok(false) => self.allowed += 1,
            Err(()) => self.errors += 1,
        }
        if let Some(h) = &mut self.latency {
            let _ = h.record(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX).max(1));
        }
    }

    fn merge(&mut self, other: Tally) {
        self.allowed += other.allowed;
        self.denied += other.denied;
        self.errors += other.errors;
        if let (Some(a), Some(b)) = (&mut self.latency, &other.latency) {
            let _ = a.add(b);
        }
    }

    /// floodgate-bench's common report fields.
    fn report(&self, scenario: &str, target: &str, wall: Duration) -> serde_json::Map<String, Value> {
        let secs = wall.as_secs_f64();
        let h = self.latency.as_ref().expect("histogram");
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let mut m = serde_json::Map::new();
        m.insert("scenario".into(), scenario.into());
        m.insert("target".into(), target.into());
        m.insert("duration_s".into(), secs.into());
        m.insert("sent".into(), (self.allowed + self.denied + self.errors).into());
        m.insert("decisions_per_sec".into(), ((self.allowed + self.denied) as f64 / secs).into());
        m.insert("allowed".into(), self.allowed.into());
        m.insert("denied".into(), self.denied.into());
        m.insert("errors".into(), json!({"total": self.errors, "by_kind": {"limitador": self.errors}}));
        m.insert("p50_us".into(), us(0.5).into());
        m.insert("p90_us".into(), us(0.9).into());
        m.insert("p99_us".into(), us(0.99).into());
        m.insert("p999_us".into(), us(0.999).into());
        m.insert("max_us".into(), (h.max() as f64 / 1000.0).into());
        m
    }
}

/// `--name value` flags.
struct Flags(HashMap<String, String>);

impl Flags {
    fn parse(args: &[String]) -> Result<Flags, String> {
        let mut map = HashMap::new();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let name = flag.trim_start_matches('-').to_owned();
            if name == "cached" {
                map.insert(name, "true".into());
                continue;
            }
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            map.insert(name, value.clone());
        }
        Ok(Flags(map))
    }

    fn num(&self, name: &str, default: u64) -> Result<u64, String> {
        self.0.get(name).map_or(Ok(default), |v| v.parse().map_err(|_| format!("--{name}: not a number")))
    }

    fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    fn redis(&self) -> Result<Option<String>, String> {
        let Some(url) = self.0.get("redis") else { return Ok(None) };
        let loopback = ["redis://127.0.0.1:", "redis://localhost:", "redis://[::1]:"];
        if !loopback.iter().any(|p| url.starts_with(p)) {
            return Err(format!("{url}: loopback Redis only"));
        }
        Ok(Some(url.clone()))
    }
}

fn limit(limit: u64, window_s: u64) -> Limit {
    Limit::new(NAMESPACE, limit, window_s, [], ["user".try_into().expect("a CEL variable")])
}

fn context(key: &str) -> Context<'static> {
    HashMap::from([("user".to_owned(), key.to_owned())]).into()
}

/// A xorshift generator: the key sequence, without a dependency.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn memory_throughput(f: &Flags) -> Result<Value, String> {
    let (threads, secs, keys) =
        (f.num("threads", 2)?.max(1), f.num("secs", 5)?.clamp(1, 600), f.num("keys", 10_000)?);
    let limiter = Arc::new(RateLimiter::new(keys.max(1) * 2));
    limiter.add_limit(limit(f.num("limit", 100)?, f.num("window-s", 1)?));
    let namespace: Namespace = NAMESPACE.into();
    let run = |duration: Duration| {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (limiter, namespace, stop) = (Arc::clone(&limiter), namespace.clone(), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut tally = Tally::new();
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("k{}", next(&mut rng) % keys.max(1));
                        let sent = Instant::now();
                        // The context is built per decision, as a caller of the library must.
                        let ctx = context(&key);
                        let outcome = limiter.check_rate_limited_and_update(&namespace, &ctx, 1);
                        tally.record(outcome.map(|r| r.limited).map_err(|_| ()), sent.elapsed());
                        n += 1;
                        if n % 1024 == 0 && sent.duration_since(started) >= duration {
                            break;
                        }
                    }
                    tally
                })
            })
            .collect();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let mut total = Tally::new();
        for w in workers {
            total.merge(w.join().expect("a worker"));
        }
        (total, started.elapsed())
    };
    let _ = run(Duration::from_secs(1)); // warm-up
    let (tally, wall) = run(Duration::from_secs(secs));
    let mut report = tally.report("throughput", "limitador in-process (memory)", wall);
    report.insert("mode".into(), "closed".into());
    report.insert("concurrency".into(), threads.into());
    report.insert("keys".into(), keys.into());
    Ok(Value::Object(report))
}

async fn redis_limiter(url: &str, cached: bool) -> Result<AsyncRateLimiter, String> {
    let storage: Box<dyn limitador::storage::AsyncCounterStorage> = if cached {
        Box::new(CachedRedisStorage::new(url).await.map_err(|e| e.to_string())?)
    } else {
        Box::new(AsyncRedisStorage::new(url).await.map_err(|e| e.to_string())?)
    };
    Ok(AsyncRateLimiter::new_with_storage(storage))
}

/// `concurrency` tasks over `limiters` (round robin) for `secs`; `key` picks each key.
async fn redis_load(
    limiters: &[Arc<AsyncRateLimiter>],
    concurrency: u64,
    duration: Duration,
    key: impl Fn(&mut u64) -> String + Send + Sync + Copy + 'static,
) -> (Tally, Vec<u64>, Duration) {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for c in 0..concurrency {
        let index = (c as usize) % limiters.len();
        let limiter = Arc::clone(&limiters[index]);
        tasks.push(tokio::spawn(async move {
            let namespace: Namespace = NAMESPACE.into();
            let mut tally = Tally::new();
            let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (c + 1);
            loop {
                let sent = Instant::now();
                if sent >= deadline {
                    break;
                }
                let ctx = context(&key(&mut rng));
                let outcome = limiter.check_rate_limited_and_update(&namespace, &ctx, 1).await;
                tally.record(outcome.map(|r| r.limited).map_err(|_| ()), sent.elapsed());
            }
            (index, tally)
        }));
    }
    let (mut total, mut per) = (Tally::new(), vec![0; limiters.len()]);
    for t in tasks {
        if let Ok((index, tally)) = t.await {
            per[index] += tally.allowed;
            total.merge(tally);
        }
    }
    (total, per, started.elapsed())
}

async fn redis_throughput(f: &Flags, url: &str) -> Result<Value, String> {
    let (concurrency, secs, keys) =
        (f.num("concurrency", 64)?.max(1), f.num("secs", 5)?.clamp(1, 600), f.num("keys", 10_000)?.max(1));
    let limiter = redis_limiter(url, f.has("cached")).await?;
    limiter.add_limit(limit(f.num("limit", 100)?, f.num("window-s", 1)?));
    let limiters = [Arc::new(limiter)];
    let key = move |rng: &mut u64| format!("k{}", next(rng) % keys);
    let _ = redis_load(&limiters, concurrency, Duration::from_secs(1), key).await; // warm-up
    let (tally, _, wall) = redis_load(&limiters, concurrency, Duration::from_secs(secs), key).await;
    let storage = if f.has("cached") { "CachedRedisStorage" } else { "AsyncRedisStorage" };
    let mut report = tally.report("throughput", &format!("limitador {storage} {url}"), wall);
    report.insert("mode".into(), "closed".into());
    report.insert("concurrency".into(), concurrency.into());
    report.insert("keys".into(), keys.into());
    Ok(Value::Object(report))
}

async fn instances(f: &Flags, url: &str) -> Result<Value, String> {
    let (m, concurrency, secs) =
        (f.num("m", 3)?.clamp(1, 64), f.num("concurrency", 16)?.max(1), f.num("secs", 2)?.clamp(1, 600));
    let (max, window_s) = (f.num("limit", 100)?, f.num("window-s", 3600)?);
    let cached = f.has("cached");
    let mut limiters = Vec::new();
    for _ in 0..m {
        let limiter = redis_limiter(url, cached).await?;
        limiter.add_limit(limit(max, window_s));
        limiters.push(Arc::new(limiter));
    }
    let unique =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros();
    let key: &'static str = Box::leak(format!("instances-{}-{unique}", std::process::id()).into_boxed_str());
    let (tally, per, wall) =
        redis_load(&limiters, concurrency, Duration::from_secs(secs), move |_| key.to_owned()).await;
    let storage = if cached {
        "limitador CachedRedisStorage (shared Redis)"
    } else {
        "limitador AsyncRedisStorage (shared Redis)"
    };
    let mut report = tally.report("instances", &format!("{m} limitador instances"), wall);
    report.insert("instances".into(), m.into());
    report.insert("algorithm".into(), "fixed_window".into());
    report.insert("limit".into(), max.into());
    report.insert("window_ms".into(), (window_s as f64 * 1000.0).into());
    report.insert("admitted".into(), tally.allowed.into());
    report.insert("over_admission".into(), (tally.allowed as f64 / max as f64).into());
    report.insert("per_instance_admitted".into(), per.into());
    report.insert("passed_by_fail_open".into(), 0.into());
    report.insert("store".into(), storage.into());
    Ok(Value::Object(report))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match (args.first().map(String::as_str), Flags::parse(args.get(1..).unwrap_or_default())) {
        (_, Err(e)) => Err(e),
        (Some("throughput"), Ok(f)) => match f.redis() {
            Ok(None) => memory_throughput(&f),
            Ok(Some(url)) => redis_throughput(&f, &url).await,
            Err(e) => Err(e),
        },
        (Some("instances"), Ok(f)) => match f.redis() {
            Ok(Some(url)) => instances(&f, &url).await,
            Ok(None) => Err("instances needs --redis redis://127.0.0.1:PORT".into()),
            Err(e) => Err(e),
        },
        _ => Err("usage: limitador-peer <throughput|instances> [--redis URL] [flags]".into()),
    };
    match result {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("limitador-peer: {e}");
            std::process::ExitCode::from(64)
        }
    }
}
