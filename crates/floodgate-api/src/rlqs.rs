//! The Envoy RLQS front door: `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/
//! StreamRateLimitQuotas`, on the gRPC listener beside RLS (same TLS, auth and HTTP limits).
//!
//! One bidirectional stream per Envoy. Its first message names the domain (later ones may leave
//! it empty, or repeat it); every message reports one or more buckets, each by its `BucketId`
//! (order-insensitive), and a bucket's first report subscribes the stream to it. Floodgate answers
//! a subscription at once with an assignment, and pushes a new one whenever the bucket's share
//! moves beyond `rlqs.change_threshold`, or its TTL nears its end (the same strategy, which Envoy
//! takes as an extension). What the shares are, and how they are split by demand, is
//! `floodgate_app::rlqs`; this module turns messages into its reports and its actions into
//! messages.
//!
//! A message that breaks the protocol closes the stream with `INVALID_ARGUMENT` naming the field:
//! no domain in the first message, another domain later, no bucket, a bucket without an id or with
//! an empty key or value, the same bucket twice in one message, a `time_elapsed` missing, not
//! above zero or above an hour, or counts above a billion requests a second. A domain without
//! `rlqs` rules is `NOT_FOUND`; more than `MAX_BUCKETS_PER_STREAM` buckets on one stream is
//! `RESOURCE_EXHAUSTED`; a server shutting down is `UNAVAILABLE`. With `auth` clients, a stream
//! needs a token with the `check` scope (`UNAUTHENTICATED` / `PERMISSION_DENIED` otherwise).

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Kind, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId as ProtoBucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, RequestsPerTimeUnit, Strategy as ProtoStrategy,
};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, RateLimitUnit, TokenBucket};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt32Value};
use floodgate_app::App;
use floodgate_app::auth::Refusal;
use floodgate_app::metrics::GrpcCode;
use floodgate_app::rlqs::{
    Action, BucketId, Inbox, MAX_BUCKETS_PER_STREAM, QuotaError, Report, Strategy, StreamId, TimeUnit,
};
use floodgate_config::auth::Scope;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

/// The tonic service to add to a `tonic::transport::Server`.
pub type RateLimitQuotaServer = RateLimitQuotaServiceServer<Rlqs>;

/// The longest `time_elapsed` a report may cover.
pub const MAX_ELAPSED: Duration = Duration::from_secs(3600);

/// The most requests a second a report may count.
pub const MAX_RATE: f64 = 1e9;

pub(crate) fn service(app: App) -> RateLimitQuotaServer {
    RateLimitQuotaServiceServer::new(Rlqs { app })
}

/// The RLQS implementation over the app's quotas.
#[derive(Debug)]
pub struct Rlqs {
    app: App,
}

#[tonic::async_trait]
impl RateLimitQuotaService for Rlqs {
    type StreamRateLimitQuotasStream = ReceiverStream<Result<RateLimitQuotaResponse, Status>>;

    async fn stream_rate_limit_quotas(
        &self,
        request: tonic::Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<tonic::Response<Self::StreamRateLimitQuotasStream>, Status> {
        let authorization = request.metadata().get("authorization").map(|v| v.as_bytes().to_vec());
        {
            let running = self.app.control().load();
            if let Err(refusal) = running.authorize(authorization.as_deref(), Scope::Check) {
                return Err(refuse(&self.app, &refusal));
            }
        }
        let (out, rx) = mpsc::channel(16);
        tokio::spawn(serve_stream(self.app.clone(), request.into_inner(), authorization, out));
        Ok(tonic::Response::new(ReceiverStream::new(rx)))
    }
}

/// `UNAUTHENTICATED` or `PERMISSION_DENIED`, counted.
fn refuse(app: &App, refusal: &Refusal<'_>) -> Status {
    let requests = refusal.client().map(|c| &*c.requests);
    if refusal.unauthenticated() {
        app.metrics().grpc_request(requests, GrpcCode::Unauthenticated);
        Status::unauthenticated(refusal.detail())
    } else {
        app.metrics().grpc_request(requests, GrpcCode::PermissionDenied);
        Status::permission_denied(refusal.detail())
    }
}

/// One stream, until the Envoy ends it, breaks the protocol, its token stops being valid, or the
/// server shuts down. `authorization` is the stream's `authorization` metadata, checked again with
/// each message (a reload may have revoked it).
async fn serve_stream(
    app: App,
    mut inbound: Streaming<RateLimitQuotaUsageReports>,
    authorization: Option<Vec<u8>>,
    out: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
) {
    let mut session: Option<Session> = None;
    let mut reports: Vec<Report> = Vec::new();
    loop {
        let pushed = async {
            match session.as_mut() {
                Some(s) => s.inbox.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(message)) => {
                    if let Err(status) = take(&app, authorization.as_deref(), &mut session, &mut reports, message) {
                        tracing::debug!(code = ?status.code(), message = status.message(), "rlqs: stream closed");
                        let _ = out.send(Err(status)).await;
                        break;
                    }
                }
                // The Envoy ended its side, or the connection is gone.
                Ok(None) | Err(_) => break,
            },
            actions = pushed => match actions {
                Some(actions) => {
                    if out.send(Ok(response(actions))).await.is_err() {
                        break;
                    }
                }
                // The server closed the stream (shutdown): its last assignments were sent.
                None => break,
            },
            () = out.closed() => break,
        }
    }
    if let Some(session) = session {
        app.rlqs().close(session.id);
    }
}

struct Session {
    id: StreamId,
    domain: String,
    inbox: Inbox,
}

/// Takes in one message: checks the stream's token (still a client's, with the `check` scope),
/// opens the session on the first message, checks the protocol and the client's pinned
/// descriptors (each bucket id must name them, with their values), reports.
#[allow(clippy::result_large_err)] // a status ends the stream: built once, on the error path
fn take(
    app: &App,
    authorization: Option<&[u8]>,
    session: &mut Option<Session>,
    reports: &mut Vec<Report>,
    message: RateLimitQuotaUsageReports,
) -> Result<(), Status> {
    let running = app.control().load();
    let client = running.authorize(authorization, Scope::Check).map_err(|refusal| refuse(app, &refusal))?;
    let config = running.rlqs.as_ref();
    let session = match session {
        Some(s) => {
            if !message.domain.is_empty() && message.domain != s.domain {
                return Err(Status::invalid_argument(format!(
                    "domain {:?} differs from the stream's {:?}: a stream reports one domain (open another stream \
                     for another)",
                    message.domain, s.domain
                )));
            }
            s
        }
        None => {
            if message.domain.is_empty() {
                return Err(Status::invalid_argument(
                    "domain is empty: the first report of a stream names its domain",
                ));
            }
            let (outbox, inbox) = floodgate_app::rlqs::outbox();
            let id = app.rlqs().open(&message.domain, config, outbox).map_err(status_of)?;
            session.insert(Session { id, domain: message.domain.clone(), inbox })
        }
    };
    reports.clear();
    read_reports(&message, reports)?;
    if let Some(client) = client {
        for report in reports.iter() {
            client.check_entries(report.bucket.pairs()).map_err(|refusal| refuse(app, &refusal))?;
        }
    }
    app.rlqs().report(session.id, config, reports).map_err(status_of)
}

/// The reports of `message`, checked as the protocol says.
#[allow(clippy::result_large_err)]
fn read_reports(message: &RateLimitQuotaUsageReports, reports: &mut Vec<Report>) -> Result<(), Status> {
    let usages = &message.bucket_quota_usages;
    if usages.is_empty() {
        return Err(Status::invalid_argument(
            "bucket_quota_usages is empty: a report names at least one bucket",
        ));
    }
    if usages.len() > MAX_BUCKETS_PER_STREAM {
        return Err(Status::invalid_argument(format!(
            "bucket_quota_usages has {} buckets, more than the {MAX_BUCKETS_PER_STREAM} a stream may report",
            usages.len()
        )));
    }
    for (i, usage) in usages.iter().enumerate() {
        let field = |name: &str| format!("bucket_quota_usages[{i}].{name}");
        let Some(id) = &usage.bucket_id else {
            return Err(Status::invalid_argument(format!("{} is missing", field("bucket_id"))));
        };
        let bucket = bucket_id(id)
            .map_err(|why| Status::invalid_argument(format!("{}: {why}", field("bucket_id"))))?;
        let Some(elapsed) = &usage.time_elapsed else {
            return Err(Status::invalid_argument(format!("{} is missing", field("time_elapsed"))));
        };
        let elapsed = match (u64::try_from(elapsed.seconds), u32::try_from(elapsed.nanos)) {
            (Ok(s), Ok(n)) if n < 1_000_000_000 && (s > 0 || n > 0) => Duration::new(s, n),
            _ => {
                return Err(Status::invalid_argument(format!(
                    "{} is {}s {}ns: it must be more than 0",
                    field("time_elapsed"),
                    elapsed.seconds,
                    elapsed.nanos
                )));
            }
        };
        if elapsed > MAX_ELAPSED {
            return Err(Status::invalid_argument(format!(
                "{} is {elapsed:?}, more than the {MAX_ELAPSED:?} a report may cover",
                field("time_elapsed")
            )));
        }
        let count = usage.num_requests_allowed.checked_add(usage.num_requests_denied);
        if count.is_none_or(|c| c as f64 / elapsed.as_secs_f64() > MAX_RATE) {
            return Err(Status::invalid_argument(format!(
                "{} and num_requests_denied ({} and {} in {elapsed:?}) are more than {MAX_RATE:e} requests a second",
                field("num_requests_allowed"),
                usage.num_requests_allowed,
                usage.num_requests_denied
            )));
        }
        reports.push(Report {
            bucket,
            elapsed,
            allowed: usage.num_requests_allowed,
            denied: usage.num_requests_denied,
        });
    }
    let mut seen: HashMap<&BucketId, usize> = HashMap::with_capacity(reports.len());
    for (j, report) in reports.iter().enumerate() {
        if let Some(i) = seen.insert(&report.bucket, j) {
            return Err(Status::invalid_argument(format!(
                "bucket_quota_usages[{j}].bucket_id repeats the bucket of bucket_quota_usages[{i}] ({}): a message \
                 reports each bucket once",
                report.bucket
            )));
        }
    }
    Ok(())
}

/// A bucket id from its proto: at least one key, no empty key or value.
fn bucket_id(id: &ProtoBucketId) -> Result<BucketId, String> {
    if id.bucket.is_empty() {
        return Err("bucket is empty: an id has at least one key".to_owned());
    }
    if let Some((k, _)) = id.bucket.iter().find(|(k, v)| k.is_empty() || v.is_empty()) {
        return Err(if k.is_empty() {
            "bucket has an empty key".to_owned()
        } else {
            format!("bucket has an empty value for key {k:?}")
        });
    }
    Ok(BucketId::new(id.bucket.iter().map(|(k, v)| (k.as_str(), v.as_str()))))
}

fn status_of(error: QuotaError) -> Status {
    match error {
        QuotaError::ShuttingDown | QuotaError::Closed => Status::unavailable(error.to_string()),
        QuotaError::UnknownDomain(_) => Status::not_found(error.to_string()),
        QuotaError::TooManyBuckets(_) => Status::resource_exhausted(error.to_string()),
    }
}

/// One response with `actions`, in order.
fn response(actions: Vec<Action>) -> RateLimitQuotaResponse {
    let bucket_action = actions
        .into_iter()
        .map(|action| match action {
            Action::Assign { bucket, strategy, ttl } => BucketAction {
                bucket_id: Some(proto_bucket(&bucket)),
                bucket_action: Some(Kind::QuotaAssignmentAction(QuotaAssignmentAction {
                    assignment_time_to_live: Some(proto_duration(ttl)),
                    rate_limit_strategy: Some(proto_strategy(strategy)),
                })),
            },
            Action::Abandon { bucket } => BucketAction {
                bucket_id: Some(proto_bucket(&bucket)),
                bucket_action: Some(Kind::AbandonAction(AbandonAction {})),
            },
        })
        .collect();
    RateLimitQuotaResponse { bucket_action }
}

fn proto_bucket(bucket: &BucketId) -> ProtoBucketId {
    ProtoBucketId { bucket: bucket.pairs().map(|(k, v)| (k.to_owned(), v.to_owned())).collect() }
}

/// A strategy as Envoy's `RateLimitStrategy`.
pub fn proto_strategy(strategy: Strategy) -> RateLimitStrategy {
    let strategy = match strategy {
        Strategy::TokenBucket { max_tokens, tokens_per_fill, fill_interval } => {
            ProtoStrategy::TokenBucket(TokenBucket {
                max_tokens,
                tokens_per_fill: Some(UInt32Value { value: tokens_per_fill }),
                fill_interval: Some(proto_duration(fill_interval)),
            })
        }
        Strategy::PerTimeUnit { requests, unit } => ProtoStrategy::RequestsPerTimeUnit(RequestsPerTimeUnit {
            requests_per_time_unit: requests,
            time_unit: match unit {
                TimeUnit::Second => RateLimitUnit::Second,
                TimeUnit::Minute => RateLimitUnit::Minute,
                TimeUnit::Hour => RateLimitUnit::Hour,
                TimeUnit::Day => RateLimitUnit::Day,
            } as i32,
        }),
        Strategy::AllowAll => ProtoStrategy::BlanketRule(BlanketRule::AllowAll as i32),
        Strategy::DenyAll => ProtoStrategy::BlanketRule(BlanketRule::DenyAll as i32),
    };
    RateLimitStrategy { strategy: Some(strategy) }
}

fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}
