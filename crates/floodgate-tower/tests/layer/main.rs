//! The layer's public behaviour, driven through axum routers with a manual clock.

mod client_ip;
mod concurrency;
mod delay;
mod limits;
mod route;
mod waiting;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use floodgate::core::{ManualClock, Timestamp};
use floodgate::{Engine, MemoryConfig, MemoryStore, Policy, Rule};
use http::{Request, Response};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// A whole minute (divisible by 60), so fixed windows start here.
pub(crate) const START: Timestamp = Timestamp::from_secs(1_699_999_980);

pub(crate) type TestStore = MemoryStore<ManualClock>;
pub(crate) type TestEngine = Engine<TestStore>;

/// An engine over a memory store on a manual clock stopped at [`START`].
pub(crate) fn engine(rules: impl IntoIterator<Item = Rule>) -> (Arc<TestEngine>, ManualClock) {
    let clock = ManualClock::new(START);
    let store = MemoryStore::with_config(MemoryConfig::default(), clock.clone());
    (Arc::new(Engine::new(Policy::new(rules).expect("valid policy"), store)), clock)
}

pub(crate) fn post(uri: &str) -> http::request::Builder {
    Request::post(uri)
}

/// Sends `request` to `app` (any clonable service) and returns the response.
pub(crate) async fn send<S>(app: &S, request: Request<Body>) -> Response<Body>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    app.clone().oneshot(request).await.expect("infallible")
}

pub(crate) async fn body_string(response: Response<Body>) -> String {
    let bytes = response.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8(bytes.to_vec()).expect("utf-8 body")
}

pub(crate) async fn body_json(response: Response<Body>) -> serde_json::Value {
    serde_json::from_str(&body_string(response).await).expect("json body")
}

/// A request arriving over TCP from `peer`.
pub(crate) fn from_peer(mut request: Request<Body>, peer: &str) -> Request<Body> {
    let addr: SocketAddr = peer.parse().expect("socket address");
    request.extensions_mut().insert(ConnectInfo(addr));
    request
}
