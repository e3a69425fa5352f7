//! A simulated Envoy `rate_limit_quota` filter (feature `rlqs`), built on Envoy's own protos: what
//! the RLQS conformance tests and `floodgate-bench rlqs` drive a server with.
//!
//! Like the filter, a [`Filter`] keeps one stream to the server; the first request matched into a
//! bucket is decided by the no-assignment behaviour and reported at once (the subscription);
//! assignments become local token buckets (a `requests_per_time_unit` one as a bucket of that many
//! per unit; a blanket rule as it says); an assignment with the same strategy as the active one
//! extends it without resetting its tokens, another replaces it with a full bucket; an expired
//! assignment falls back to the expired-assignment behaviour (a fallback strategy, or the last
//! assignment reused) until its timeout, then the bucket is abandoned; an abandon action forgets
//! the bucket. [`Filter::report`] sends every bucket's usage since its last report.
//!
//! Time is the caller's: every call takes `now`, the time since some start, so that a test decides
//! exactly when reports and requests happen.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Kind;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::r#type::v3::RateLimitStrategy;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

/// A bucket id as the filter builds it: keys and values, kept sorted.
pub type Id = BTreeMap<String, String>;

/// A bucket id from pairs.
pub fn id(pairs: &[(&str, &str)]) -> Id {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// What the filter does before an assignment, and after one expires.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// `no_assignment_behavior`: `None` allows every request.
    pub no_assignment: Option<RateLimitStrategy>,
    /// `expired_assignment_behavior`: `None` abandons the bucket when its assignment expires.
    pub expired: Option<Expired>,
}

/// `expired_assignment_behavior`.
#[derive(Debug, Clone, PartialEq)]
pub struct Expired {
    /// `fallback_rate_limit`, or `None` for `reuse_last_assignment`.
    pub fallback: Option<RateLimitStrategy>,
    /// `expired_assignment_behavior_timeout`: after it, the bucket is abandoned.
    pub timeout: Duration,
}

/// Where a bucket stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No assignment yet.
    NoAssignment,
    /// An assignment in force.
    Active,
    /// The assignment expired: the expired-assignment behaviour applies.
    Expired,
}

#[derive(Debug)]
struct Bucket {
    allowed: u64,
    denied: u64,
    last_report: Duration,
    phase: Phase,
    /// The strategy deciding now, and its local bucket.
    limiter: Limiter,
    /// The active assignment's strategy, and when it expires (`None`: never).
    active: Option<(RateLimitStrategy, Option<Duration>)>,
    /// When the expired-assignment behaviour ends.
    expired_until: Option<Duration>,
}

/// A local limiter from a strategy: a token bucket refilled continuously, or a blanket rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Limiter {
    allow_all: bool,
    deny_all: bool,
    max: f64,
    per_second: f64,
    tokens: f64,
    at: Duration,
}

impl Limiter {
    /// The limiter of `strategy`, its bucket full at `now`.
    pub fn new(strategy: Option<&RateLimitStrategy>, now: Duration) -> Limiter {
        let mut l =
            Limiter { allow_all: false, deny_all: false, max: 0.0, per_second: 0.0, tokens: 0.0, at: now };
        match strategy.and_then(|s| s.strategy.as_ref()) {
            None => l.allow_all = true,
            Some(Strategy::BlanketRule(rule)) => {
                if *rule == BlanketRule::DenyAll as i32 {
                    l.deny_all = true;
                } else {
                    l.allow_all = true;
                }
            }
            Some(Strategy::TokenBucket(b)) => {
                let per_fill = f64::from(b.tokens_per_fill.as_ref().map_or(1, |v| v.value));
                let interval =
                    b.fill_interval.as_ref().map_or(1.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9);
                l.max = f64::from(b.max_tokens);
                l.per_second = per_fill / interval.max(1e-9);
            }
            Some(Strategy::RequestsPerTimeUnit(r)) => {
                let unit = match r.time_unit {
                    1 => 1.0,
                    2 => 60.0,
                    3 => 3600.0,
                    4 => 86_400.0,
                    5 => 30.0 * 86_400.0,
                    _ => 365.0 * 86_400.0,
                };
                l.max = r.requests_per_time_unit as f64;
                l.per_second = l.max / unit;
            }
        }
        l.tokens = l.max;
        l
    }

    /// Whether one request at `now` is allowed (taking a token if so).
    pub fn take(&mut self, now: Duration) -> bool {
        if self.allow_all {
            return true;
        }
        if self.deny_all {
            return false;
        }
        let elapsed = now.saturating_sub(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.max);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One simulated Envoy: a stream to the server, and its buckets.
#[derive(Debug)]
pub struct Filter {
    domain: String,
    settings: Settings,
    outbound: mpsc::Sender<RateLimitQuotaUsageReports>,
    inbound: Streaming<RateLimitQuotaResponse>,
    buckets: HashMap<Id, Bucket>,
    sent_domain: bool,
    /// Reports sent.
    pub reports_sent: u64,
    /// Responses taken in.
    pub responses: u64,
}

impl Filter {
    /// Opens a stream to the RLQS server at `url` (`http://host:port`), for `domain`.
    pub async fn connect(url: String, domain: &str, settings: Settings) -> Result<Filter, tonic::Status> {
        let channel = tonic::transport::Endpoint::from_shared(url)
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?
            .connect()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        Filter::open(RateLimitQuotaServiceClient::new(channel), domain, settings, None).await
    }

    /// Opens a stream on `client`, with `authorization` metadata when given.
    pub async fn open(
        mut client: RateLimitQuotaServiceClient<tonic::transport::Channel>,
        domain: &str,
        settings: Settings,
        authorization: Option<&str>,
    ) -> Result<Filter, tonic::Status> {
        let (outbound, rx) = mpsc::channel(64);
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(auth) = authorization {
            let value = auth.parse().map_err(|_| tonic::Status::invalid_argument("authorization"))?;
            request.metadata_mut().insert("authorization", value);
        }
        let inbound = client.stream_rate_limit_quotas(request).await?.into_inner();
        Ok(Filter {
            domain: domain.to_owned(),
            settings,
            outbound,
            inbound,
            buckets: HashMap::new(),
            sent_domain: false,
            reports_sent: 0,
            responses: 0,
        })
    }

    /// Decides one request matched into `bucket` at `now`. A bucket's first request subscribes it:
    /// it is reported at once.
    pub async fn request(&mut self, bucket: &Id, now: Duration) -> bool {
        self.expire(now);
        let new = !self.buckets.contains_key(bucket);
        let b = self.buckets.entry(bucket.clone()).or_insert_with(|| Bucket {
            allowed: 0,
            denied: 0,
            last_report: now,
            phase: Phase::NoAssignment,
            limiter: Limiter::new(self.settings.no_assignment.as_ref(), now),
            active: None,
            expired_until: None,
        });
        let allowed = b.limiter.take(now);
        if allowed {
            b.allowed += 1;
        } else {
            b.denied += 1;
        }
        if new {
            // The subscription: the first report, covering the smallest positive time.
            let usage = usage(bucket, b, Duration::from_micros(1));
            b.last_report = now;
            self.send(vec![usage]).await;
        }
        allowed
    }

    /// Reports every bucket's usage since its last report (nothing when it has no bucket).
    pub async fn report(&mut self, now: Duration) {
        self.expire(now);
        let mut usages = Vec::with_capacity(self.buckets.len());
        for (id, b) in &mut self.buckets {
            let elapsed = now.saturating_sub(b.last_report).max(Duration::from_micros(1));
            usages.push(usage(id, b, elapsed));
            b.last_report = now;
        }
        if !usages.is_empty() {
            self.send(usages).await;
        }
    }

    /// Sends `message` as it is (for tests of messages that break the protocol).
    pub async fn send_raw(&mut self, message: RateLimitQuotaUsageReports) {
        let _ = self.outbound.send(message).await;
    }

    async fn send(&mut self, usages: Vec<BucketQuotaUsage>) {
        let domain = if self.sent_domain { String::new() } else { self.domain.clone() };
        self.sent_domain = true;
        self.reports_sent += 1;
        let _ = self.outbound.send(RateLimitQuotaUsageReports { domain, bucket_quota_usages: usages }).await;
    }

    /// The next response from the server, as it comes (`None`: the server ended the stream).
    pub async fn next(&mut self) -> Option<Result<RateLimitQuotaResponse, tonic::Status>> {
        self.inbound.message().await.transpose()
    }

    /// Applies `response` at `now`, as the filter does.
    pub fn apply(&mut self, response: &RateLimitQuotaResponse, now: Duration) {
        self.responses += 1;
        for action in &response.bucket_action {
            let Some(id) = action
                .bucket_id
                .as_ref()
                .map(|b| b.bucket.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Id>())
            else {
                continue;
            };
            match &action.bucket_action {
                Some(Kind::AbandonAction(_)) => {
                    self.buckets.remove(&id);
                }
                Some(Kind::QuotaAssignmentAction(a)) => {
                    let Some(b) = self.buckets.get_mut(&id) else { continue };
                    let strategy = a.rate_limit_strategy.unwrap_or_default();
                    let expires = a.assignment_time_to_live.as_ref().map(|ttl| now + duration(ttl));
                    let same =
                        b.phase == Phase::Active && b.active.as_ref().is_some_and(|(s, _)| *s == strategy);
                    if !same {
                        b.limiter = Limiter::new(Some(&strategy), now);
                    }
                    b.active = Some((strategy, expires));
                    b.phase = Phase::Active;
                    b.expired_until = None;
                }
                None => {}
            }
        }
        self.expire(now);
    }

    /// Moves expired assignments to the expired-assignment behaviour, and abandons the buckets
    /// whose behaviour has run out.
    fn expire(&mut self, now: Duration) {
        let settings = &self.settings;
        self.buckets.retain(|_, b| {
            if b.phase == Phase::Active
                && let Some((strategy, Some(expires))) = &b.active
                && now >= *expires
            {
                let Some(expired) = &settings.expired else { return false };
                b.phase = Phase::Expired;
                b.expired_until = Some(*expires + expired.timeout);
                if let Some(fallback) = &expired.fallback {
                    b.limiter = Limiter::new(Some(fallback), now);
                } else {
                    // Reuse the last assignment: its bucket goes on as it was.
                    let _ = strategy;
                }
            }
            !(b.phase == Phase::Expired && b.expired_until.is_some_and(|until| now >= until))
        });
    }

    /// The phase of `bucket` (`None`: not tracked, or abandoned).
    pub fn phase(&self, bucket: &Id) -> Option<Phase> {
        self.buckets.get(bucket).map(|b| b.phase)
    }

    /// The active (or expired, reused) assignment's strategy of `bucket`.
    pub fn strategy(&self, bucket: &Id) -> Option<&RateLimitStrategy> {
        self.buckets.get(bucket).and_then(|b| b.active.as_ref()).map(|(s, _)| s)
    }

    /// How many buckets are tracked.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }
}

fn usage(id: &Id, b: &mut Bucket, elapsed: Duration) -> BucketQuotaUsage {
    let usage = BucketQuotaUsage {
        bucket_id: Some(BucketId { bucket: id.iter().map(|(k, v)| (k.clone(), v.clone())).collect() }),
        time_elapsed: Some(proto(elapsed)),
        num_requests_allowed: b.allowed,
        num_requests_denied: b.denied,
    };
    b.allowed = 0;
    b.denied = 0;
    usage
}

/// A duration as protobuf's.
pub fn proto(d: Duration) -> ProtoDuration {
    ProtoDuration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
}

fn duration(d: &ProtoDuration) -> Duration {
    Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32)
}
