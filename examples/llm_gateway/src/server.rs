//! The server: one axum handler for the four endpoints, what it saw, and the events a test waits on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;

use crate::prompt::{encoding_of, prompt_tokens};
use crate::wire::{self, Answer, Api, Usage};
use crate::words::word;

/// What the upstream generates unless a request says otherwise.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Tokens per completion, before the request's own cap (default 16).
    pub tokens: u64,
    /// The wait before each streamed chunk (default none).
    pub delay: Duration,
    /// The length of each embedding vector (default 8).
    pub dimensions: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { tokens: 16, delay: Duration::ZERO, dimensions: 8 }
    }
}

/// A request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its path.
    pub path: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body (`null` when it was not JSON).
    pub body: Value,
}

/// What the upstream did with a request it answered with text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The request's path.
    pub path: String,
    /// The request's model.
    pub model: String,
    /// Whether it was streamed.
    pub stream: bool,
    /// The prompt tokens it counted.
    pub prompt_tokens: u64,
    /// The completion tokens it generated and handed to the connection.
    pub sent: u64,
    /// Whether the answer ended whole (`false`: broken on purpose, or the client went away).
    pub whole: bool,
    /// Whether the usage was sent.
    pub usage_sent: bool,
}

pub(crate) struct Shared {
    pub(crate) settings: Settings,
    seen: Mutex<Vec<Seen>>,
    outcomes: Mutex<Vec<Outcome>>,
    paused: AtomicU64,
    resumed: watch::Sender<u64>,
    changed: Notify,
    pub(crate) answers: AtomicU64,
    /// A status every request gets, as [`FakeOpenAi::answer_with`] set it.
    forced: Mutex<Option<(StatusCode, u64)>>,
}

impl Shared {
    pub(crate) fn note(&self, outcome: Outcome) {
        self.outcomes.lock().push(outcome);
        self.changed.notify_waiters();
    }

    /// Waits, counted among the paused streams, until [`FakeOpenAi::resume`].
    pub(crate) async fn pause(&self) {
        let mut resumed = self.resumed.subscribe();
        resumed.mark_unchanged();
        self.paused.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
        let _ = resumed.changed().await;
        self.paused.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A running fake upstream; stopped on drop.
pub struct FakeOpenAi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for FakeOpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeOpenAi").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeOpenAi {
    /// Serves on `listener` with `settings`.
    pub fn serve(listener: TcpListener, settings: Settings) -> std::io::Result<FakeOpenAi> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            settings,
            seen: Mutex::new(Vec::new()),
            outcomes: Mutex::new(Vec::new()),
            paused: AtomicU64::new(0),
            resumed: watch::channel(0).0,
            changed: Notify::new(),
            answers: AtomicU64::new(0),
            forced: Mutex::new(None),
        });
        let app = Router::new().fallback(answer).with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeOpenAi { addr, shared, task })
    }

    /// Serves on a port of 127.0.0.1 the system picks.
    pub async fn start(settings: Settings) -> std::io::Result<FakeOpenAi> {
        FakeOpenAi::serve(TcpListener::bind("127.0.0.1:0").await?, settings)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().clone()
    }

    /// What each text answer ended as, in the order they ended.
    pub fn outcomes(&self) -> Vec<Outcome> {
        self.shared.outcomes.lock().clone()
    }

    /// How many streams are stopped at their `x-fake-pause-after` now.
    pub fn paused(&self) -> u64 {
        self.shared.paused.load(Ordering::Acquire)
    }

    /// From now on, answers every request with `status` (a 429 with `retry-after-ms`
    /// `retry_after_ms`), as `x-fake-status` would; `None`: answers again.
    pub fn answer_with(&self, status: Option<(u16, u64)>) {
        *self.shared.forced.lock() = status.and_then(|(s, ms)| Some((StatusCode::from_u16(s).ok()?, ms)));
    }

    /// Lets every paused stream go on.
    pub fn resume(&self) {
        self.shared.resumed.send_modify(|n| *n += 1);
    }

    /// Waits until `ready` holds of this upstream (checked at each request, pause and answer's
    /// end), at most `within`; whether it held.
    pub async fn wait(&self, within: Duration, ready: impl Fn(&FakeOpenAi) -> bool) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if ready(self) {
                return true;
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return ready(self);
            }
        }
    }
}

/// What a request asked for with the `x-fake-*` headers.
#[derive(Debug, Default)]
pub(crate) struct Controls {
    pub(crate) tokens: Option<u64>,
    pub(crate) delay: Option<Duration>,
    pub(crate) status: Option<StatusCode>,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) fail_after: Option<u64>,
    pub(crate) no_usage: bool,
    pub(crate) pause_after: Option<u64>,
    pub(crate) overshoot: u64,
    pub(crate) cached: u64,
    /// Anthropic's messages: the prompt tokens written to the cache.
    pub(crate) cache_write: u64,
    /// Anthropic's messages: an `error` event (`overloaded_error`) after this many text deltas.
    pub(crate) error_after: Option<u64>,
}

impl Controls {
    fn of(headers: &HeaderMap) -> Controls {
        let number =
            |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
        Controls {
            tokens: number("x-fake-tokens"),
            delay: number("x-fake-delay-ms").map(Duration::from_millis),
            status: number("x-fake-status").and_then(|n: u64| StatusCode::from_u16(n as u16).ok()),
            retry_after_ms: number("x-fake-retry-after-ms"),
            fail_after: number("x-fake-fail-after"),
            no_usage: headers.contains_key("x-fake-no-usage"),
            pause_after: number("x-fake-pause-after"),
            overshoot: number("x-fake-overshoot").unwrap_or(0),
            cached: number("x-fake-cached").unwrap_or(0),
            cache_write: number("x-fake-cache-write").unwrap_or(0),
            error_after: number("x-fake-error-after"),
        }
    }
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn answer(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let bytes = to_bytes(body, 16 << 20).await.unwrap_or_default();
    let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
    shared.seen.lock().push(Seen {
        path: path.clone(),
        headers: parts.headers.clone(),
        body: parsed.clone().unwrap_or(Value::Null),
    });
    shared.changed.notify_waiters();
    let mut controls = Controls::of(&parts.headers);
    if let Some((status, ms)) = *shared.forced.lock() {
        controls.status = Some(status);
        controls.retry_after_ms = Some(ms);
    }
    // Anthropic's Messages API, in its own wire format.
    if crate::anthropic::serves(&path) {
        return crate::anthropic::answer(shared, &parts.headers, path, parsed, controls).await;
    }
    if let Some(status) = controls.status {
        let mut response = if status == StatusCode::TOO_MANY_REQUESTS {
            let body = wire::error(
                "Rate limit reached for requests on this fake upstream.",
                "requests",
                Some("rate_limit_exceeded"),
            );
            let mut response = json_response(status, &body);
            let ms = controls.retry_after_ms.unwrap_or(1000);
            let headers = response.headers_mut();
            headers.insert("retry-after-ms", HeaderValue::from(ms));
            headers.insert(http::header::RETRY_AFTER, HeaderValue::from(ms.div_ceil(1000)));
            headers.insert("x-ratelimit-remaining-requests", HeaderValue::from(0));
            headers.insert("x-ratelimit-remaining-tokens", HeaderValue::from(0));
            response
        } else {
            json_response(status, &wire::error("The fake upstream fails on purpose.", "server_error", None))
        };
        response.headers_mut().insert("x-request-id", HeaderValue::from_static("req_fake"));
        return response;
    }
    let Some(api) = Api::of(&path) else {
        let body = wire::error(
            &format!("Unknown request URL: POST {path}."),
            "invalid_request_error",
            Some("unknown_url"),
        );
        return json_response(StatusCode::NOT_FOUND, &body);
    };
    let Some(body) = parsed.filter(Value::is_object) else {
        let body =
            wire::error("We could not parse the JSON body of your request.", "invalid_request_error", None);
        return json_response(StatusCode::BAD_REQUEST, &body);
    };
    let model = body.get("model").and_then(Value::as_str).unwrap_or("").to_owned();
    if model.is_empty() {
        let body = wire::error("you must provide a model parameter", "invalid_request_error", None);
        return json_response(StatusCode::BAD_REQUEST, &body);
    }
    let encoding = encoding_of(&model);
    let prompt = prompt_tokens(&path, &body, encoding);
    if api == Api::Embeddings {
        let inputs = match body.get("input") {
            Some(Value::Array(items)) if items.iter().all(|i| !i.is_number()) => items.len(),
            _ => 1,
        };
        let base64 = body.get("encoding_format").and_then(Value::as_str) == Some("base64");
        let usage = (!controls.no_usage).then_some(prompt);
        shared.note(Outcome {
            path,
            model: model.clone(),
            stream: false,
            prompt_tokens: prompt,
            sent: 0,
            whole: true,
            usage_sent: usage.is_some(),
        });
        return json_response(
            StatusCode::OK,
            &wire::embeddings(&model, inputs, shared.settings.dimensions, base64, usage),
        );
    }
    let cap = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .filter_map(|f| body.get(*f).and_then(Value::as_u64))
        .min();
    let wanted = controls.tokens.unwrap_or(shared.settings.tokens);
    let count = cap.map_or(wanted, |c| c.min(wanted));
    let length = count < wanted;
    // An upstream that ignores the request's bound.
    let count = count + controls.overshoot;
    let seed = shared.answers.fetch_add(1, Ordering::Relaxed);
    let answer = Answer {
        api,
        id: format!("{}-{seed:024x}", api.prefix()).replace("resp-", "resp_"),
        created: now_secs(),
        model: model.clone(),
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let cached = controls.cached.min(prompt);
    let include_usage =
        body.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false)
            && !controls.no_usage;
    let mut outcome =
        Outcome { path, model, stream, prompt_tokens: prompt, sent: 0, whole: true, usage_sent: false };
    if !stream {
        let text: String = (0..count).map(|i| word(seed, i)).collect();
        let usage = (!controls.no_usage).then_some(Usage { prompt, cached, completion: count });
        outcome.sent = count;
        outcome.usage_sent = usage.is_some();
        let max = body.get("max_output_tokens").and_then(Value::as_u64);
        let body = answer.body(&text, length, usage, max);
        shared.note(outcome);
        return json_response(StatusCode::OK, &body);
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let plan = Plan {
        answer,
        count,
        length,
        usage: Usage { prompt, cached, completion: count },
        include_usage,
        no_usage: controls.no_usage,
        delay: controls.delay.unwrap_or(shared.settings.delay),
        fail_after: controls.fail_after,
        pause_after: controls.pause_after,
        max: body.get("max_output_tokens").and_then(Value::as_u64),
        seed,
    };
    tokio::spawn(async move {
        let (sent, whole, usage_sent) = plan.stream(&tx, &shared).await;
        outcome.sent = sent;
        outcome.whole = whole;
        outcome.usage_sent = usage_sent;
        shared.note(outcome);
    });
    event_stream(rx)
}

/// A response of server-sent events, whose body is what comes on `rx` (an error breaks it).
pub(crate) fn event_stream(mut rx: mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Response {
    // A break waits one poll before it is passed on: the server aborts the connection on a body
    // error, dropping what it has not yet written, and the head and the chunks before the break
    // must reach the client first (the server writes what it holds when the body is pending).
    let mut broke: Option<std::io::Error> = None;
    let stream = futures_util::stream::poll_fn(move |cx| {
        if let Some(error) = broke.take() {
            return std::task::Poll::Ready(Some(Err(error)));
        }
        match std::task::ready!(rx.poll_recv(cx)) {
            Some(Err(error)) => {
                broke = Some(error);
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
            item => std::task::Poll::Ready(item),
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A stream to send.
struct Plan {
    answer: Answer,
    count: u64,
    length: bool,
    usage: Usage,
    include_usage: bool,
    no_usage: bool,
    delay: Duration,
    fail_after: Option<u64>,
    pause_after: Option<u64>,
    max: Option<u64>,
    seed: u64,
}

/// The stream's channel closed: the client went away.
struct Gone;

impl Plan {
    /// Sends the stream: (content chunks sent, whether it ended whole, whether usage was sent).
    async fn stream(
        self,
        tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
        shared: &Shared,
    ) -> (u64, bool, bool) {
        let send = |text: String| async move { tx.send(Ok(Bytes::from(text))).await.map_err(|_| Gone) };
        let mut sent = 0;
        let mut sequence = 0u64;
        let mut next_event = |mut value: Value| {
            value["sequence_number"] = json!(sequence);
            sequence += 1;
            wire::event(&value)
        };
        let responses = self.answer.api == Api::Responses;
        let item_id = self.answer.message_id();
        // The opening: the role (chat), or the response's creation and its empty message.
        let opening: Vec<String> = match self.answer.api {
            Api::Chat => vec![wire::data(&self.answer.chunk(Some(""), true, None, self.include_usage))],
            Api::Responses => {
                let created = self.answer.response("in_progress", "", None, self.max);
                vec![
                    next_event(json!({"type": "response.created", "response": created})),
                    next_event(json!({"type": "response.in_progress", "response": created})),
                    next_event(json!({"type": "response.output_item.added", "output_index": 0,
                        "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}})),
                    next_event(
                        json!({"type": "response.content_part.added", "item_id": item_id, "output_index": 0,
                        "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
                    ),
                ]
            }
            _ => Vec::new(),
        };
        for text in opening {
            if send(text).await.is_err() {
                return (sent, false, false);
            }
        }
        let mut text = String::new();
        for i in 0..self.count {
            if self.fail_after == Some(i) {
                let _ = tx
                    .send(Err(std::io::Error::other("the fake upstream breaks the stream on purpose")))
                    .await;
                return (sent, false, false);
            }
            if self.pause_after == Some(i) {
                shared.pause().await;
            }
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            let piece = word(self.seed, i);
            text.push_str(piece);
            let chunk = if responses {
                next_event(
                    json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0,
                    "content_index": 0, "delta": piece, "logprobs": []}),
                )
            } else {
                wire::data(&self.answer.chunk(Some(piece), false, None, self.include_usage))
            };
            if send(chunk).await.is_err() {
                return (sent, false, false);
            }
            sent += 1;
        }
        let finish = if self.length { "length" } else { "stop" };
        let mut closing = Vec::new();
        let mut usage_sent = false;
        if responses {
            let status = if self.length { "incomplete" } else { "completed" };
            let usage = (!self.no_usage).then_some(self.usage);
            usage_sent = usage.is_some();
            let item = self.answer.message_item(&text, status);
            closing.push(next_event(
                json!({"type": "response.output_text.done", "item_id": item_id, "output_index": 0,
                "content_index": 0, "text": text, "logprobs": []}),
            ));
            closing.push(next_event(json!({"type": "response.content_part.done", "item_id": item_id, "output_index": 0,
                "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": [], "logprobs": []}})));
            closing.push(next_event(
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            ));
            let kind = if self.length { "response.incomplete" } else { "response.completed" };
            closing.push(next_event(
                json!({"type": kind, "response": self.answer.response(status, &text, usage, self.max)}),
            ));
        } else {
            let last = match self.answer.api {
                Api::Chat => self.answer.chunk(None, false, Some(finish), self.include_usage),
                _ => self.answer.chunk(Some(""), false, Some(finish), self.include_usage),
            };
            closing.push(wire::data(&last));
            if self.include_usage {
                closing.push(wire::data(&self.answer.usage_chunk(self.usage)));
                usage_sent = true;
            }
            closing.push("data: [DONE]\n\n".to_owned());
        }
        for text in closing {
            if send(text).await.is_err() {
                return (sent, false, false);
            }
        }
        (sent, true, usage_sent)
    }
}
