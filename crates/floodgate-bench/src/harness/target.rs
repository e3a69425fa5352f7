//! What a scenario drives: the HTTP check API, Envoy RLS gRPC, a rate-limited route of any
//! application, or an engine in this process.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use floodgate::{Descriptors, Engine};
use floodgate_app::store::AnyStore;
use floodgate_config::StoreConfig;
use floodgate_config::redis::RedisTarget;
use http_body_util::Full;
use tonic::transport::Channel;

use super::client::{self, Connections, Transport};
use crate::report::Outcome;

/// How a request is described: the descriptor that carries the key, constant descriptors, and for
/// gRPC the domain.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The descriptor name whose value is the key (default `user`).
    pub key_descriptor: String,
    /// Descriptors sent with every request (`--with NAME=VALUE`).
    pub with: Vec<(String, String)>,
    /// The Envoy domain (gRPC) or `domain` field (HTTP), when set.
    pub domain: Option<String>,
}

impl Default for Shape {
    fn default() -> Self {
        Shape { key_descriptor: "user".into(), with: Vec::new(), domain: None }
    }
}

/// A target the bench sends decisions to. Cheap to clone.
#[derive(Debug, Clone)]
pub enum Target {
    /// `POST {base}/v1/check` over HTTP/1.1 keep-alive connections.
    Http {
        /// `http://127.0.0.1:8080`, without a trailing slash.
        base: String,
        /// The pooled client, or connections of its own.
        client: Box<Transport>,
        /// Per-request timeout.
        timeout: Duration,
    },
    /// A rate-limited route of any application (a peer, an app behind `floodgate-tower`): the key
    /// in a header; 2xx allowed, 429 denied, anything else an error.
    Route {
        /// `http://127.0.0.1:3000/chat`.
        url: String,
        /// The method.
        method: http::Method,
        /// The header carrying the key.
        key_header: http::HeaderName,
        /// The pooled client, or connections of its own.
        client: Box<Transport>,
        /// Per-request timeout.
        timeout: Duration,
    },
    /// limitador-server's HTTP API, `POST {base}/check_and_report` (`{"namespace", "values",
    /// "delta"}`): 200 allowed, 429 denied. The peer of the check API.
    Limitador {
        /// `http://127.0.0.1:8080`, without a trailing slash.
        base: String,
        /// The limits' namespace.
        namespace: String,
        /// The pooled client, or connections of its own.
        client: Box<Transport>,
        /// Per-request timeout.
        timeout: Duration,
    },
    /// Envoy RLS v3 `ShouldRateLimit` over a few HTTP/2 connections.
    Grpc {
        /// `127.0.0.1:8081`.
        addr: String,
        /// One client per connection; requests pick one by key.
        clients: Arc<[RateLimitServiceClient<Channel>]>,
        /// Per-request timeout.
        timeout: Duration,
    },
    /// The engine in this process on the configuration's store (memory, or a Redis node or
    /// cluster: the library path, with no HTTP or gRPC in between), on the process clock.
    InProcess(Arc<Engine<AnyStore>>),
}

/// Why a target cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The address is not loopback and `--allow-remote` was not given.
    #[error("{0}: only loopback targets (127.0.0.1, ::1, localhost) unless --allow-remote is given")]
    NotLoopback(String),
    /// The address cannot be parsed.
    #[error("{0}: not an address; expected http://HOST:PORT (HTTP) or HOST:PORT (gRPC)")]
    BadAddress(String),
    /// The method or key header of a route target is not valid HTTP.
    #[error("{0}: not a valid HTTP method or header name")]
    BadRoute(String),
    /// The gRPC connection failed.
    #[error("cannot connect to {0}: {1}")]
    Connect(String, String),
    /// The configuration's store cannot be opened, or did not answer in time.
    #[error("{0}")]
    Store(String),
}

/// The gRPC connections a [`Target::Grpc`] opens.
const GRPC_CONNECTIONS: usize = 4;

impl Target {
    /// An HTTP target at `base` (`http://HOST:PORT`).
    pub fn http(base: &str, timeout: Duration, allow_remote: bool) -> Result<Target, TargetError> {
        let base = base.trim_end_matches('/').to_owned();
        let uri: http::Uri = base.parse().map_err(|_| TargetError::BadAddress(base.clone()))?;
        if uri.scheme_str() != Some("http") {
            return Err(TargetError::BadAddress(base));
        }
        let host = uri.host().ok_or_else(|| TargetError::BadAddress(base.clone()))?;
        check_loopback(host, &base, allow_remote)?;
        Ok(Target::Http { base, client: Box::new(Transport::Pooled(Box::new(client::pooled()))), timeout })
    }

    /// A route target at `url` (`http://HOST:PORT/PATH`), the key sent in `key_header`.
    pub fn route(
        url: &str,
        method: &str,
        key_header: &str,
        timeout: Duration,
        allow_remote: bool,
    ) -> Result<Target, TargetError> {
        let uri: http::Uri = url.parse().map_err(|_| TargetError::BadAddress(url.to_owned()))?;
        if uri.scheme_str() != Some("http") {
            return Err(TargetError::BadAddress(url.to_owned()));
        }
        let host = uri.host().ok_or_else(|| TargetError::BadAddress(url.to_owned()))?;
        check_loopback(host, url, allow_remote)?;
        let method = http::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| TargetError::BadRoute(method.to_owned()))?;
        let key_header = http::HeaderName::from_bytes(key_header.to_ascii_lowercase().as_bytes())
            .map_err(|_| TargetError::BadRoute(key_header.to_owned()))?;
        Ok(Target::Route {
            url: url.to_owned(),
            method,
            key_header,
            client: Box::new(Transport::Pooled(Box::new(client::pooled()))),
            timeout,
        })
    }

    /// limitador-server's HTTP API at `base` (`http://127.0.0.1:PORT`), limits in `namespace`.
    pub fn limitador(base: &str, namespace: &str, timeout: Duration) -> Result<Target, TargetError> {
        let base = base.trim_end_matches('/').to_owned();
        let uri: http::Uri = base.parse().map_err(|_| TargetError::BadAddress(base.clone()))?;
        let host = uri.host().ok_or_else(|| TargetError::BadAddress(base.clone()))?;
        check_loopback(host, &base, false)?;
        Ok(Target::Limitador {
            base,
            namespace: namespace.to_owned(),
            client: Box::new(Transport::Pooled(Box::new(client::pooled()))),
            timeout,
        })
    }

    /// A gRPC target at `addr` (`HOST:PORT`, an `http://` prefix is accepted).
    pub async fn grpc(addr: &str, timeout: Duration, allow_remote: bool) -> Result<Target, TargetError> {
        let addr = addr.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let uri: http::Uri =
            format!("http://{addr}").parse().map_err(|_| TargetError::BadAddress(addr.clone()))?;
        let host = uri.host().ok_or_else(|| TargetError::BadAddress(addr.clone()))?;
        check_loopback(host, &addr, allow_remote)?;
        let mut clients = Vec::new();
        for _ in 0..GRPC_CONNECTIONS {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .map_err(|e| TargetError::Connect(addr.clone(), e.to_string()))?
                .tcp_nodelay(true)
                .connect()
                .await
                .map_err(|e| TargetError::Connect(addr.clone(), e.to_string()))?;
            clients.push(RateLimitServiceClient::new(channel));
        }
        Ok(Target::Grpc { addr, clients: clients.into(), timeout })
    }

    /// The engine of a loaded configuration's native policy, on the configuration's store and the
    /// process clock. A Redis store must be loopback unless `allow_remote`, and must answer
    /// within `ready_within` (until it does, every decision would be a store failure).
    pub async fn in_process(
        config: floodgate_config::Config,
        allow_remote: bool,
        ready_within: Duration,
    ) -> Result<Target, TargetError> {
        match &config.store {
            StoreConfig::Memory(_) => {}
            StoreConfig::Redis(redis) => match &redis.target {
                RedisTarget::Node(url) => check_redis_loopback(url, allow_remote)?,
                RedisTarget::Cluster(urls) => {
                    for url in urls {
                        check_redis_loopback(url, allow_remote)?;
                    }
                }
            },
        }
        let store =
            AnyStore::open(&config.store, &config.survival).map_err(|e| TargetError::Store(e.to_string()))?;
        let ready = async {
            while !store.ready().await.is_ready() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        if tokio::time::timeout(ready_within, ready).await.is_err() {
            return Err(TargetError::Store(format!(
                "the {} store did not answer within {ready_within:?} (is it running?)",
                store.kind()
            )));
        }
        Ok(Target::InProcess(Arc::new(Engine::new(config.policy, store))))
    }

    /// This target over `n` connections opened now and kept while it lives (an HTTP target: the
    /// check API, a route, limitador-server); any other target as it is.
    pub async fn on_connections(&self, n: usize) -> std::io::Result<Target> {
        let open = |url: &str| {
            let url = url.to_owned();
            async move {
                let uri: http::Uri = url.parse().map_err(std::io::Error::other)?;
                let authority =
                    uri.authority().ok_or_else(|| std::io::Error::other(format!("{url}: no host")))?;
                let addr = tokio::net::lookup_host(authority.as_str())
                    .await?
                    .next()
                    .ok_or_else(|| std::io::Error::other(format!("{url}: no address")))?;
                Ok::<_, std::io::Error>(Box::new(Transport::Fixed(Connections::open(addr, n).await?)))
            }
        };
        Ok(match self {
            Target::Http { base, timeout, .. } => {
                Target::Http { base: base.clone(), client: open(base).await?, timeout: *timeout }
            }
            Target::Route { url, method, key_header, timeout, .. } => Target::Route {
                url: url.clone(),
                method: method.clone(),
                key_header: key_header.clone(),
                client: open(url).await?,
                timeout: *timeout,
            },
            Target::Limitador { base, namespace, timeout, .. } => Target::Limitador {
                base: base.clone(),
                namespace: namespace.clone(),
                client: open(base).await?,
                timeout: *timeout,
            },
            other => other.clone(),
        })
    }

    /// How reports name this target.
    pub fn describe(&self) -> String {
        match self {
            Target::Http { base, .. } => base.clone(),
            Target::Route { url, method, .. } => format!("{method} {url}"),
            Target::Limitador { base, .. } => format!("{base}/check_and_report"),
            Target::Grpc { addr, .. } => format!("grpc://{addr}"),
            Target::InProcess(engine) => format!("in-process ({} store)", engine.store().kind()),
        }
    }

    /// Asks for one decision for `key` at `cost`.
    pub async fn check(&self, shape: &Shape, key: &str, cost: u64) -> Outcome {
        match self {
            Target::Http { base, client, timeout } => {
                let body = http_body(shape, key, cost);
                let request = http::Request::post(format!("{base}/v1/check"))
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(body)));
                let Ok(request) = request else { return Outcome::Error("request") };
                match client.exchange(request, *timeout).await {
                    Err(no_answer) => Outcome::Error(no_answer.kind()),
                    Ok((_, body)) if let Some(kind) = store_failure(&body) => Outcome::Error(kind),
                    Ok((status, _)) => match status.as_u16() {
                        200 => Outcome::Allowed,
                        429 => Outcome::Denied,
                        400 => Outcome::Error("http_400"),
                        413 => Outcome::Error("http_413"),
                        422 => Outcome::Error("http_422"),
                        500..=599 => Outcome::Error("http_5xx"),
                        _ => Outcome::Error("http_other"),
                    },
                }
            }
            Target::Route { url, method, key_header, client, timeout } => {
                let body =
                    if method == http::Method::GET { Bytes::new() } else { Bytes::from_static(ROUTE_BODY) };
                let request = http::Request::builder()
                    .method(method.clone())
                    .uri(url.as_str())
                    .header(key_header, key)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(body));
                let Ok(request) = request else { return Outcome::Error("request") };
                match client.exchange(request, *timeout).await {
                    Err(no_answer) => Outcome::Error(no_answer.kind()),
                    Ok((status, _)) => route_outcome(status),
                }
            }
            Target::Limitador { base, namespace, client, timeout } => {
                let mut values = serde_json::Map::new();
                for (k, v) in &shape.with {
                    values.insert(k.clone(), v.clone().into());
                }
                values.insert(shape.key_descriptor.clone(), key.into());
                let body = serde_json::json!({"namespace": namespace, "values": values, "delta": cost});
                let request = http::Request::post(format!("{base}/check_and_report"))
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(body.to_string())));
                let Ok(request) = request else { return Outcome::Error("request") };
                match client.exchange(request, *timeout).await {
                    Err(no_answer) => Outcome::Error(no_answer.kind()),
                    Ok((status, _)) => route_outcome(status),
                }
            }
            Target::Grpc { clients, timeout, .. } => {
                let mut entries: Vec<Entry> =
                    shape.with.iter().map(|(k, v)| Entry { key: k.clone(), value: v.clone() }).collect();
                entries.push(Entry { key: shape.key_descriptor.clone(), value: key.to_owned() });
                let request = RateLimitRequest {
                    domain: shape.domain.clone().unwrap_or_else(|| "floodgate-bench".into()),
                    descriptors: vec![RateLimitDescriptor { entries, ..RateLimitDescriptor::default() }],
                    hits_addend: u32::try_from(cost).unwrap_or(u32::MAX),
                };
                let pick = key.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b)));
                let mut client = clients[pick % clients.len()].clone();
                match tokio::time::timeout(*timeout, client.should_rate_limit(request)).await {
                    Err(_) => Outcome::Error("timeout"),
                    Ok(Ok(r)) if r.get_ref().overall_code == Code::Ok as i32 => Outcome::Allowed,
                    Ok(Ok(r)) if r.get_ref().overall_code == Code::OverLimit as i32 => Outcome::Denied,
                    Ok(Ok(_)) => Outcome::Error("grpc_unknown_code"),
                    Ok(Err(status)) => Outcome::Error(match status.code() {
                        tonic::Code::Unavailable => "grpc_unavailable",
                        tonic::Code::DeadlineExceeded => "grpc_deadline",
                        tonic::Code::InvalidArgument => "grpc_invalid_argument",
                        tonic::Code::Internal => "grpc_internal",
                        _ => "grpc_other",
                    }),
                }
            }
            Target::InProcess(engine) => {
                let mut d = Descriptors::new();
                for (k, v) in &shape.with {
                    d.insert(k.clone(), v.clone());
                }
                d.insert(shape.key_descriptor.clone(), key);
                match engine.check(&d, cost).await {
                    Ok(v) if v.store_error.is_some() => {
                        Outcome::Error(if v.allowed { "store_fail_open" } else { "store_fail_closed" })
                    }
                    Ok(v) if v.allowed => Outcome::Allowed,
                    Ok(_) => Outcome::Denied,
                    Err(_) => Outcome::Error("engine"),
                }
            }
        }
    }
}

/// The body of a route target's POST (what a chat endpoint expects).
const ROUTE_BODY: &[u8] = br#"{"message":"floodgate-bench"}"#;

/// How a route target's status counts: any 2xx is the app's answer, so the limiter allowed it;
/// 429 is the limiter's denial; anything else is an error of the app or the bench's request.
fn route_outcome(status: http::StatusCode) -> Outcome {
    match status.as_u16() {
        200..=299 => Outcome::Allowed,
        429 => Outcome::Denied,
        400 => Outcome::Error("http_400"),
        401 | 403 => Outcome::Error("http_401_403"),
        404 => Outcome::Error("http_404"),
        405 => Outcome::Error("http_405"),
        413 => Outcome::Error("http_413"),
        500..=599 => Outcome::Error("http_5xx"),
        _ => Outcome::Error("http_other"),
    }
}

/// A verdict the store did not make: the server answered by a rule's `on_store_error`
/// (`fail_open` → `error_allowed`, `fail_closed` → `error_denied`, `local` → `local_allowed` or
/// `local_denied`). Counted as errors, not as
/// admissions or denials, so that `allowed` is what the limiter decided.
pub(crate) fn store_failure(body: &[u8]) -> Option<&'static str> {
    let has = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    if has(b"\"error_allowed\"") {
        Some("store_fail_open")
    } else if has(b"\"error_denied\"") {
        Some("store_fail_closed")
    } else if has(b"\"local_allowed\"") {
        Some("store_local_allowed")
    } else if has(b"\"local_denied\"") {
        Some("store_local_denied")
    } else {
        None
    }
}

/// The `/v1/check` body.
fn http_body(shape: &Shape, key: &str, cost: u64) -> String {
    let mut descriptors = serde_json::Map::new();
    for (k, v) in &shape.with {
        descriptors.insert(k.clone(), v.clone().into());
    }
    descriptors.insert(shape.key_descriptor.clone(), key.into());
    let mut body = serde_json::Map::new();
    body.insert("descriptors".into(), descriptors.into());
    body.insert("cost".into(), cost.into());
    if let Some(domain) = &shape.domain {
        body.insert("domain".into(), domain.clone().into());
    }
    serde_json::Value::Object(body).to_string()
}

/// Refuses a non-loopback Redis URL unless allowed.
pub(crate) fn check_redis_loopback(url: &str, allow_remote: bool) -> Result<(), TargetError> {
    let uri: http::Uri = url.parse().map_err(|_| TargetError::BadAddress(url.to_owned()))?;
    let host = uri.host().ok_or_else(|| TargetError::BadAddress(url.to_owned()))?;
    check_loopback(host, url, allow_remote)
}

/// Refuses non-loopback hosts unless allowed.
fn check_loopback(host: &str, shown: &str, allow_remote: bool) -> Result<(), TargetError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback || allow_remote { Ok(()) } else { Err(TargetError::NotLoopback(shown.to_owned())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_targets_unless_allowed() {
        assert!(check_loopback("127.0.0.1", "x", false).is_ok());
        assert!(check_loopback("[::1]", "x", false).is_ok());
        assert!(check_loopback("localhost", "x", false).is_ok());
        assert!(check_loopback("10.0.0.1", "x", false).is_err());
        assert!(check_loopback("example.com", "x", false).is_err());
        assert!(check_loopback("example.com", "x", true).is_ok());
    }

    #[test]
    fn only_a_loopback_redis_unless_allowed() {
        assert!(check_redis_loopback("redis://127.0.0.1:6379", false).is_ok());
        assert!(check_redis_loopback("redis://localhost", false).is_ok());
        assert!(matches!(
            check_redis_loopback("redis://10.0.0.5:6379", false),
            Err(TargetError::NotLoopback(_))
        ));
        assert!(check_redis_loopback("redis://10.0.0.5:6379", true).is_ok());
        assert!(matches!(check_redis_loopback("not a url", true), Err(TargetError::BadAddress(_))));
    }

    #[test]
    fn verdicts_made_by_a_store_failure_policy_are_errors() {
        let open = br#"{"allowed":true,"limits":[{"name":"a","outcome":"error_allowed"}]}"#;
        assert_eq!(store_failure(open), Some("store_fail_open"));
        assert_eq!(store_failure(br#"{"limits":[{"outcome":"error_denied"}]}"#), Some("store_fail_closed"));
        assert_eq!(store_failure(br#"{"allowed":true,"limits":[{"outcome":"allowed"}]}"#), None);
        let local = br#"{"allowed":true,"limits":[{"outcome":"local_allowed"}]}"#;
        assert_eq!(store_failure(local), Some("store_local_allowed"));
        assert_eq!(store_failure(br#"{"limits":[{"outcome":"local_denied"}]}"#), Some("store_local_denied"));
    }

    #[test]
    fn a_route_target_counts_2xx_as_allowed_429_as_denied_and_the_rest_as_errors() {
        let outcome = |code: u16| route_outcome(http::StatusCode::from_u16(code).unwrap());
        for code in [200, 201, 202, 204, 299] {
            assert_eq!(outcome(code), Outcome::Allowed, "{code}");
        }
        assert_eq!(outcome(429), Outcome::Denied);
        assert_eq!(outcome(400), Outcome::Error("http_400"));
        assert_eq!(outcome(403), Outcome::Error("http_401_403"));
        assert_eq!(outcome(404), Outcome::Error("http_404"));
        assert_eq!(outcome(503), Outcome::Error("http_5xx"));
        for code in [301, 304, 418, 428, 430] {
            assert_eq!(outcome(code), Outcome::Error("http_other"), "{code}");
        }
    }

    #[test]
    fn a_route_target_is_loopback_http_with_a_valid_method_and_header() {
        let t = Duration::from_secs(1);
        let route = Target::route("http://127.0.0.1:3000/chat", "post", "X-User-Id", t, false).unwrap();
        assert_eq!(route.describe(), "POST http://127.0.0.1:3000/chat");
        assert!(matches!(
            Target::route("http://10.1.2.3/chat", "POST", "x-user-id", t, false),
            Err(TargetError::NotLoopback(_))
        ));
        assert!(matches!(
            Target::route("https://127.0.0.1/chat", "POST", "x-user-id", t, false),
            Err(TargetError::BadAddress(_))
        ));
        assert!(matches!(
            Target::route("http://127.0.0.1/chat", "POST", "bad header", t, false),
            Err(TargetError::BadRoute(_))
        ));
    }

    #[test]
    fn the_http_body_is_the_check_api_json() {
        let shape = Shape {
            key_descriptor: "user".into(),
            with: vec![("route".into(), "POST /chat".into())],
            domain: None,
        };
        let v: serde_json::Value = serde_json::from_str(&http_body(&shape, "u\"1", 2)).unwrap();
        assert_eq!(v, serde_json::json!({"descriptors": {"route": "POST /chat", "user": "u\"1"}, "cost": 2}));
    }
}
