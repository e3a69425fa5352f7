//! `GET /admin/stats` (a snapshot of the live view) and `GET /admin/stats/stream` (the same, as
//! server-sent events once a second, after the last five minutes of history): the dashboard's data,
//! for other tools too. Admin access rules apply.

use std::borrow::Cow;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use floodgate_http::openapi::with_keywords;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};
use http_body::Frame;
use serde::Serialize;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::json;
use super::responses::{AdminAccess, TAG_ADMIN};
use floodgate_app::App;
use floodgate_app::live::{self, Second, Snapshot};

/// Decisions per rule (last second, last minute), top offenders, store health, config version.
#[utoipa::path(
    get,
    path = "/admin/stats",
    tag = TAG_ADMIN,
    operation_id = "getStats",
    security((), ("adminToken" = [])),
    responses((status = 200, description = "The live view, now (updated once a second).", body = Snapshot), AdminAccess),
)]
pub(super) async fn snapshot(State(app): State<App>) -> Response {
    let running = app.control().current();
    let (config, store) = live::context(&running, app.control().store());
    json(StatusCode::OK, &app.live().snapshot(&config, &store))
}

/// The first event of a stream.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = StatsHistory)]
pub(super) struct History<'a> {
    /// The seconds kept (the last 300), oldest first.
    #[schema(value_type = Vec<Second>)]
    seconds: Vec<&'a Second>,
}

/// One event of the stream, as a server-sent event: its `event` name, and its `data`, JSON of the
/// schema that name says (`contentMediaType` and `contentSchema`, as OpenAPI describes an event).
#[derive(Debug)]
pub(super) struct StatsEvent;

impl PartialSchema for StatsEvent {
    fn schema() -> RefOr<Schema> {
        let event = |name: &str, data: &str, what: &str| {
            let json = [
                ("contentMediaType", json!("application/json")),
                ("contentSchema", json!({"$ref": format!("#/components/schemas/{data}")})),
            ];
            let data = with_keywords(ObjectBuilder::new().schema_type(Type::String), json)
                .description(Some(format!("A `{data}`, as JSON.")));
            ObjectBuilder::new()
                .description(Some(what.to_owned()))
                .property("event", ObjectBuilder::new().schema_type(Type::String).enum_values(Some([name])))
                .required("event")
                .property("data", data)
                .required("data")
        };
        OneOfBuilder::new()
            .description(Some(
                "One server-sent event: `history` once, first; then each second `second` and `stats`.",
            ))
            .item(event("history", &History::name(), "The last five minutes, once, first."))
            .item(event("second", &Second::name(), "That second, per rule."))
            .item(event("stats", &Snapshot::name(), "The live view, as `GET /admin/stats` answers it."))
            .into()
    }
}

impl ToSchema for StatsEvent {
    fn name() -> Cow<'static, str> {
        "StatsEvent".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((History::name().into_owned(), History::schema()));
        History::schemas(schemas);
        schemas.push((Snapshot::name().into_owned(), Snapshot::schema()));
        Snapshot::schemas(schemas);
    }
}

/// The live view as server-sent events: `history` (the last five minutes, once), then every second
/// `second` (that second, per rule) and `stats` (a snapshot, as `GET /admin/stats` answers).
#[utoipa::path(
    get,
    path = "/admin/stats/stream",
    tag = TAG_ADMIN,
    operation_id = "streamStats",
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "`text/event-stream`: `event: history` with `{\"seconds\": [Second…]}` once, then each second `event: second` with a `Second` and `event: stats` with a `Snapshot`; the schema is one event's. The stream ends when the server shuts down.", body = StatsEvent, content_type = "text/event-stream"),
        (status = 503, description = "The server is shutting down.", body = String, content_type = "text/plain"),
        AdminAccess,
    ),
)]
pub(super) async fn stream(State(app): State<App>) -> Response {
    let Some((seconds, mut events)) = app.live().subscribe() else {
        let mut response = Response::new(Body::from("shutting down\n"));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        return response;
    };
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        let seconds: Vec<&Second> = seconds.iter().map(|s| &**s).collect();
        let history = format!("event: history\ndata: {}\n\n", live::json(&History { seconds }));
        if tx.send(Bytes::from(history)).await.is_err() {
            return;
        }
        loop {
            match events.recv().await {
                Ok(event) => {
                    if tx.send(Bytes::copy_from_slice(event.as_bytes())).await.is_err() {
                        return;
                    }
                }
                // A slow reader misses seconds rather than holding the others back.
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let mut response = Response::new(Body::new(EventStream(rx)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// A body of the events a subscriber's task sends; it ends when the task does.
struct EventStream(mpsc::Receiver<Bytes>);

impl http_body::Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|event| event.map(|bytes| Ok(Frame::data(bytes))))
    }
}
