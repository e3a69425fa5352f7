//! The callers of a `reserve` run: each call's reserve, its settlement (retried on the next
//! instance until one answers) and its fate as the caller knows it; and the samplers that read
//! the tenant's usage through the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use crate::harness::client::{self, Client, NoAnswer};
use crate::harness::keys::Rng;
use crate::report::progress::{Batch, Live};
use crate::report::units::{millis, nanos};
use crate::report::{Outcome, Tally};

// === HTTP ===

/// `POST url` with the JSON `body`: the status and the whole answer, or why there is none (a
/// refused connection was never sent; any other failure may have been).
async fn post(client: &Client, url: &str, body: String, timeout: Duration) -> Result<(u16, Bytes), NoAnswer> {
    let request = http::Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|_| NoAnswer::Connect)?;
    client::exchange(client, request, timeout).await.map(|(status, body)| (status.as_u16(), body))
}

pub(super) async fn get(client: &Client, url: &str, timeout: Duration) -> Result<(u16, Bytes), NoAnswer> {
    client::get_on(client, url, timeout).await.map(|(status, body)| (status.as_u16(), body))
}

fn contains(body: &[u8], needle: &str) -> bool {
    body.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// `used` of `rule` for the descriptor `name=value`, read from `url` (`None` without a 200).
pub(super) async fn usage(client: &Client, url: &str, rule: &str, name: &str, value: &str) -> Option<u64> {
    let url = format!("{url}/v1/usage?rule={rule}&{name}={value}");
    match get(client, &url, Duration::from_secs(2)).await {
        Ok((200, body)) => serde_json::from_slice::<Value>(&body).ok()?["used"].as_u64(),
        _ => None,
    }
}

// === the calls ===

/// How a call ended, as its caller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// The reserve was denied (429 by the store's verdict): nothing charged.
    Denied,
    /// Committed: A charged.
    Committed,
    /// Released: nothing charged.
    Released,
    /// Never settled: E charged at expiry.
    Crashed,
    /// Settled after its expiry (409): E charged.
    Expired,
    /// The reserve's answer was lost: 0 or E.
    ReserveInDoubt,
    /// Every attempt of the commit failed: A or E.
    CommitInDoubt,
    /// Every attempt of the release failed: 0 or E.
    ReleaseInDoubt,
    /// An answer the contract does not allow here (a 404, a 409 that is not an expiry, a 200
    /// without an id): counted, and the check fails.
    Unexpected,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Call {
    pub(super) index: u64,
    pub(super) estimate: u64,
    pub(super) actual: u64,
    pub(super) fate: Fate,
}

impl Call {
    /// What the store must have charged this call: one value, or one of two for an in-doubt call.
    pub(super) fn charges(&self) -> (u64, Option<u64>) {
        match self.fate {
            Fate::Denied | Fate::Released | Fate::Unexpected => (0, None),
            Fate::Committed => (self.actual, None),
            Fate::Crashed | Fate::Expired => (self.estimate, None),
            Fate::ReserveInDoubt | Fate::ReleaseInDoubt => (0, Some(self.estimate)),
            Fate::CommitInDoubt => (self.actual, Some(self.estimate)),
        }
    }

    pub(super) fn in_doubt(&self) -> bool {
        self.charges().1.is_some()
    }
}

/// What the callers share.
pub(super) struct Shared {
    pub(super) client: Client,
    pub(super) urls: Vec<String>,
    pub(super) tenant: String,
    pub(super) run: String,
    pub(super) calls: u64,
    pub(super) max_estimate: u64,
    pub(super) cancel: f64,
    pub(super) crash: f64,
    pub(super) ttl_ms: u64,
    pub(super) work: Duration,
    pub(super) timeout: Duration,
    pub(super) limit: i64,
    pub(super) next: AtomicU64,
    pub(super) done: AtomicU64,
    /// The callers' accounting: granted estimates, less what settlements sent give back.
    pub(super) view: AtomicI64,
    pub(super) view_max: AtomicI64,
    pub(super) view_over: AtomicU64,
    /// Settlement attempts that got no answer (or a 5xx) and were sent again.
    pub(super) settle_retries: AtomicU64,
    /// Reserves sent again because their instance refused the connection (never sent).
    pub(super) refused: AtomicU64,
    /// How long a call keeps asking while instances are down: a kill's downtime and a restart.
    pub(super) patience: Duration,
}

impl Shared {
    fn add(&self, tokens: u64) {
        let now = self.view.fetch_add(tokens as i64, Ordering::SeqCst) + tokens as i64;
        self.view_max.fetch_max(now, Ordering::SeqCst);
        if now > self.limit {
            self.view_over.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn take(&self, tokens: u64) {
        self.view.fetch_sub(tokens as i64, Ordering::SeqCst);
    }
}

/// A reserve's answer.
enum Reserved {
    Granted(String),
    Denied,
    InDoubt,
    Unexpected,
}

/// A settlement's answer.
enum Settled {
    Done,
    Expired,
    InDoubt,
    Unexpected,
}

async fn reserve(shared: &Shared, rng: &mut Rng, index: u64, estimate: u64) -> (Reserved, Outcome, u64) {
    let body = json!({
        "descriptors": {"tenant": shared.tenant, "call": format!("{}-{index}", shared.run)},
        "costs": {"requests": 1, "tokens": estimate},
        "ttl": format!("{}ms", shared.ttl_ms),
    })
    .to_string();
    let n = shared.urls.len();
    let first = (rng.next_u64() % n as u64) as usize;
    let sent = Instant::now();
    // A refused connection was never sent: the next instance is asked (round after round while
    // instances restart, for as long as one may take to).
    for attempt in 0.. {
        if sent.elapsed() > shared.patience {
            break;
        }
        let url = format!("{}/v1/reserve", shared.urls[(first + attempt) % n]);
        let answer = post(&shared.client, &url, body.clone(), shared.timeout).await;
        let latency = nanos(sent.elapsed());
        return match answer {
            Ok((200, reply)) => match serde_json::from_slice::<Value>(&reply) {
                Ok(v) if v["reservation"].is_string() => (
                    Reserved::Granted(v["reservation"].as_str().unwrap_or_default().to_owned()),
                    Outcome::Allowed,
                    latency,
                ),
                _ => (Reserved::Unexpected, Outcome::Error("unexpected_200"), latency),
            },
            Ok((429, reply)) if !contains(&reply, "\"error_denied\"") => {
                (Reserved::Denied, Outcome::Denied, latency)
            }
            Ok((429, _)) => (Reserved::InDoubt, Outcome::Error("store_fail_closed"), latency),
            Ok((500..=599, _)) => (Reserved::InDoubt, Outcome::Error("http_5xx"), latency),
            Ok(_) => (Reserved::Unexpected, Outcome::Error("http_other"), latency),
            Err(NoAnswer::Connect) => {
                shared.refused.fetch_add(1, Ordering::Relaxed);
                if (attempt + 1) % n == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                continue;
            }
            Err(_) => (Reserved::InDoubt, Outcome::Error("lost"), latency),
        };
    }
    (Reserved::InDoubt, Outcome::Error("connect"), nanos(sent.elapsed()))
}

/// Sends the settlement `body` to `path`, first on instance `first`, then on the next ones until
/// one answers (rounds over the instances 100 ms apart, for as long as an instance may take to
/// restart).
async fn settle(shared: &Shared, first: usize, path: &str, body: String) -> Settled {
    let n = shared.urls.len();
    let sent = Instant::now();
    for attempt in 0.. {
        if attempt > 0 && attempt % n == 0 {
            if sent.elapsed() > shared.patience {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let url = format!("{}{path}", shared.urls[(first + attempt) % n]);
        match post(&shared.client, &url, body.clone(), shared.timeout).await {
            Ok((200, _)) => return Settled::Done,
            Ok((409, reply)) if contains(&reply, "expired") => return Settled::Expired,
            Ok((500..=599, _)) | Err(_) => {
                shared.settle_retries.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => return Settled::Unexpected,
        }
    }
    Settled::InDoubt
}

/// One caller: calls until `shared.calls` have been made.
pub(super) async fn caller(
    shared: Arc<Shared>,
    seed: u64,
    worker: u64,
    live: Arc<Live>,
    started: Instant,
) -> (Vec<Call>, Tally) {
    let mut rng = Rng::stream(seed, worker);
    let (mut calls, mut tally, mut batch) = (Vec::new(), Tally::default(), Batch::default());
    let n = shared.urls.len();
    loop {
        let index = shared.next.fetch_add(1, Ordering::Relaxed);
        if index >= shared.calls {
            break;
        }
        let estimate = 1 + rng.next_u64() % shared.max_estimate;
        let actual = rng.next_u64() % (estimate + 1);
        let roll = rng.unit();
        let at_ms = millis(started.elapsed());
        let (reserved, outcome, latency) = reserve(&shared, &mut rng, index, estimate).await;
        tally.record(outcome, latency, at_ms);
        batch.count(outcome, &live);
        let fate = match reserved {
            Reserved::Denied => Fate::Denied,
            Reserved::InDoubt => Fate::ReserveInDoubt,
            Reserved::Unexpected => Fate::Unexpected,
            Reserved::Granted(id) => {
                shared.add(estimate);
                let work = shared.work.as_micros() as u64;
                if work > 0 {
                    tokio::time::sleep(Duration::from_micros(rng.next_u64() % (work + 1))).await;
                }
                // Settled on another instance than the one that reserved, when there is one.
                let other = if n > 1 { (rng.next_u64() % n as u64) as usize } else { 0 };
                if roll < shared.crash {
                    Fate::Crashed
                } else if roll < shared.crash + shared.cancel {
                    shared.take(estimate);
                    match settle(&shared, other, "/v1/release", json!({"reservation": id}).to_string()).await
                    {
                        Settled::Done => Fate::Released,
                        Settled::Expired => {
                            shared.add(estimate);
                            Fate::Expired
                        }
                        Settled::InDoubt => Fate::ReleaseInDoubt,
                        Settled::Unexpected => Fate::Unexpected,
                    }
                } else {
                    shared.take(estimate - actual);
                    let body = json!({"reservation": id, "costs": {"tokens": actual}}).to_string();
                    match settle(&shared, other, "/v1/commit", body).await {
                        Settled::Done => Fate::Committed,
                        Settled::Expired => {
                            shared.add(estimate - actual);
                            Fate::Expired
                        }
                        Settled::InDoubt => Fate::CommitInDoubt,
                        Settled::Unexpected => Fate::Unexpected,
                    }
                }
            }
        };
        calls.push(Call { index, estimate, actual, fate });
        shared.done.fetch_add(1, Ordering::Relaxed);
    }
    batch.flush(&live);
    (calls, tally)
}

// === the samplers ===

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Samples {
    pub(super) count: u64,
    pub(super) max_used: u64,
    pub(super) over: u64,
}

/// Reads `used` of `rule` for the tenant every 10 ms, round the instances, until `stop`.
pub(super) async fn sample(
    client: Client,
    urls: Vec<String>,
    tenant: String,
    rule: &'static str,
    limit: u64,
    stop: Arc<AtomicBool>,
) -> Samples {
    let mut samples = Samples::default();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        if let Some(used) = usage(&client, &urls[i % urls.len()], rule, "tenant", &tenant).await {
            samples.count += 1;
            samples.max_used = samples.max_used.max(used);
            if used > limit {
                samples.over += 1;
            }
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fate_charges_what_the_contract_says() {
        let call = |fate| Call { index: 0, estimate: 100, actual: 30, fate };
        assert_eq!(call(Fate::Committed).charges(), (30, None));
        assert_eq!(call(Fate::Released).charges(), (0, None));
        assert_eq!(call(Fate::Crashed).charges(), (100, None));
        assert_eq!(call(Fate::Expired).charges(), (100, None));
        assert_eq!(call(Fate::Denied).charges(), (0, None));
        assert_eq!(call(Fate::ReserveInDoubt).charges(), (0, Some(100)));
        assert_eq!(call(Fate::CommitInDoubt).charges(), (30, Some(100)));
        assert_eq!(call(Fate::ReleaseInDoubt).charges(), (0, Some(100)));
        assert!(call(Fate::ReserveInDoubt).in_doubt() && !call(Fate::Crashed).in_doubt());
    }
}
