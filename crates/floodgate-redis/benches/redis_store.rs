//! Decisions per second and Redis CPU per decision (`INFO commandstats`, `usec_per_call`) through
//! the Redis store, per algorithm, beside the two scripts people typically copy (an HMGET/HSET token
//! bucket and an INCR+EXPIRE fixed window, in `bench/redis/`), on the same server in one run.
//!
//! Driven by `bench/redis/run`, which starts the server and also measures the `redis-benchmark`
//! ceiling of the same script and rate-limiter-flexible:
//!
//! ```sh
//! cargo bench -p floodgate-redis --bench redis_store -- --url redis://127.0.0.1:6379 \
//!     --decisions 200000 --concurrency 256 --keys 10000 [--dump-script PATH]
//! ```
//!
//! `--dump-script PATH` writes the driver script to PATH and the single-limit scripts beside it
//! (`one_bucket.lua`, `one_window.lua`).
#![allow(clippy::disallowed_methods, missing_docs)] // a benchmark reads the wall clock

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use floodgate::Limit;
use floodgate::store::{Applied, Mode, Op, Store};
use floodgate_core::calendar::Period;
use floodgate_core::{
    Calendar, Concurrency, FixedWindow, Gcra, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};
use floodgate_redis::{RedisConfig, RedisStore};
use floodgate_testkit::TestKey;
use redis::aio::MultiplexedConnection;

struct Args {
    url: String,
    decisions: usize,
    concurrency: usize,
    keys: usize,
    dump: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        url: "redis://127.0.0.1:6379".into(),
        decisions: 200_000,
        concurrency: 256,
        keys: 10_000,
        dump: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match flag.as_str() {
            "--url" => a.url = value(),
            "--decisions" => a.decisions = value().parse().expect("a number"),
            "--concurrency" => a.concurrency = value().parse().expect("a number"),
            "--keys" => a.keys = value().parse().expect("a number"),
            "--dump-script" => a.dump = Some(value()),
            _ => {} // `cargo bench` passes --bench
        }
    }
    a
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

/// The limits of each case, and their penalty box: generous, so that the write path (an admitted
/// decision) is measured — with a box, that of a key not in it, which reads its box first.
fn cases() -> Vec<(&'static str, Vec<Limit>, Option<Duration>)> {
    let minute = Duration::from_secs(60);
    let big = nz(1_000_000);
    let rate = Rate::try_new(big, minute).expect("a rate");
    let one = |name, limit: Limit| (name, vec![limit], None);
    vec![
        one("gcra", Gcra::try_new(rate, big).expect("valid").into()),
        one("token_bucket", TokenBucket::try_new(rate, big).expect("valid").into()),
        one("fixed_window", FixedWindow::try_new(big, minute).expect("valid").into()),
        one("sliding_window", SlidingWindow::try_new(big, minute).expect("valid").into()),
        one("quota", Quota::new(big, Calendar::utc(Period::Day)).into()),
        one("sliding_log (limit 1000)", SlidingLog::try_new(nz(1_000), minute).expect("valid").into()),
        one("concurrency (limit 1000)", Concurrency::try_new(nz(1_000), minute).expect("valid").into()),
        (
            "fixed_window with a penalty box (block_for 60 s)",
            vec![FixedWindow::try_new(big, minute).expect("valid").into()],
            Some(minute),
        ),
        (
            "3 limits in one call (sliding window + token bucket + fixed window)",
            vec![
                SlidingWindow::try_new(big, minute).expect("valid").into(),
                TokenBucket::try_new(rate, big).expect("valid").into(),
                FixedWindow::try_new(big, minute).expect("valid").into(),
            ],
            None,
        ),
    ]
}

async fn reset_stats(con: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(con).await.expect("CONFIG RESETSTAT");
}

/// `usec_per_call` of `command` since the last reset.
async fn usec_per_call(con: &mut MultiplexedConnection, command: &str) -> f64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(con).await.expect("INFO");
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').find_map(|kv| kv.strip_prefix("usec_per_call=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Runs `decisions` calls of `one(i)` with `concurrency` in flight; decisions per second.
async fn drive<F, Fut>(a: &Args, one: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency {
        let (next, one, total) = (Arc::clone(&next), one.clone(), a.decisions);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                one(i).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("a task");
    }
    a.decisions as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let mut a = args();
    // `cargo bench` passes `--bench` (and bench/redis/run a `--url`); `cargo test --all-targets`
    // runs this binary without either: a short smoke run on a redis-server of its own.
    let smoke = !std::env::args().any(|x| x == "--bench" || x == "--url" || x == "--dump-script");
    let _server = smoke.then(|| {
        let server = floodgate_testkit::redis::RedisServer::start();
        a = Args { url: server.url(), decisions: 2_000, concurrency: 8, keys: 100, dump: None };
        server
    });
    if let Some(path) = &a.dump {
        std::fs::write(path, floodgate_redis::script_source()).expect("write the script");
        // The single-limit scripts beside it, as `<name>.lua`.
        let dir = std::path::Path::new(path).parent().expect("a file path");
        for (name, source) in floodgate_redis::single_limit_script_sources() {
            std::fs::write(dir.join(format!("{name}.lua")), source).expect("write a script");
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    rt.block_on(run(a));
}

async fn run(a: Args) {
    let client = redis::Client::open(a.url.as_str()).expect("a URL");
    let mut admin = client.get_multiplexed_async_connection().await.expect("connect");
    let config = RedisConfig { deadline: Duration::from_secs(2), ..RedisConfig::node(a.url.clone()) };
    let store = RedisStore::connect(config).await.expect("connect the store");
    let keys: Arc<Vec<Vec<TestKey>>> = Arc::new(
        (0..3)
            .map(|r| (0..a.keys).map(|k| TestKey::new(&format!("bench-{r}"), &k.to_string())).collect())
            .collect(),
    );
    println!("| case | decisions/s through the store | Redis µs per decision (usec_per_call) |");
    println!("|---|---:|---:|");
    for (name, limits, block_for) in cases() {
        let limits = Arc::new(limits);
        // Warm up (creates the keys), then measure.
        for round in 0..2 {
            reset_stats(&mut admin).await;
            let (store, limits, keys, n) = (store.clone(), Arc::clone(&limits), Arc::clone(&keys), a.keys);
            let rate = drive(&a, move |i| {
                let (store, limits, keys) = (store.clone(), Arc::clone(&limits), Arc::clone(&keys));
                async move {
                    let ops: Vec<_> = limits
                        .iter()
                        .enumerate()
                        .map(|(r, l)| Op { block_for, ..keys[r][i % n].op(l, 1) })
                        .collect();
                    let mut out = Applied::default();
                    store.apply(&ops, Mode::Check, &mut out).await.expect("a decision");
                }
            })
            .await;
            if round == 1 {
                let cpu = usec_per_call(&mut admin, "evalsha").await;
                println!("| floodgate {name} | {rate:.0} | {cpu:.2} |");
            }
            let _: () = redis::cmd("FLUSHALL").query_async(&mut admin).await.expect("FLUSHALL");
        }
    }
    for (name, file, args) in [
        (
            "typical token bucket (HMGET/HSET + EXPIRE)",
            include_str!("../../../bench/redis/typical_token_bucket.lua"),
            ["1000000", "16666", "1"],
        ),
        (
            "typical fixed window (INCRBY + EXPIRE)",
            include_str!("../../../bench/redis/typical_fixed_window.lua"),
            ["1000000", "60", "1"],
        ),
    ] {
        let script = Arc::new(redis::Script::new(file));
        for round in 0..2 {
            reset_stats(&mut admin).await;
            let (con, script, n) = (admin.clone(), Arc::clone(&script), a.keys);
            let rate = drive(&a, move |i| {
                let (mut con, script) = (con.clone(), Arc::clone(&script));
                async move {
                    let _: Vec<i64> = script
                        .key(format!("typical:{}", i % n))
                        .arg(args[0])
                        .arg(args[1])
                        .arg(args[2])
                        .invoke_async(&mut con)
                        .await
                        .expect("a decision");
                }
            })
            .await;
            if round == 1 {
                let cpu = usec_per_call(&mut admin, "evalsha").await;
                println!("| {name} | {rate:.0} | {cpu:.2} |");
            }
            let _: () = redis::cmd("FLUSHALL").query_async(&mut admin).await.expect("FLUSHALL");
        }
    }
}
