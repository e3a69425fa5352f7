//! Anthropic's Messages API, byte for byte as Anthropic sends it: `POST /v1/messages` as JSON and
//! as server-sent events (`event: message_start`, `content_block_start`, `ping`,
//! `content_block_delta` with `text_delta`s, `content_block_stop`, `message_delta` with the stop
//! reason and the cumulative `output_tokens`, `message_stop`), `POST /v1/messages/count_tokens`,
//! and its errors (`{"type": "error", "error": {"type", "message"}, "request_id"}`; a 429's
//! `retry-after` in whole seconds; a stream's `event: error`).
//!
//! It asks what Anthropic asks: an `x-api-key` (else 401 `authentication_error`) and an
//! `anthropic-version` (else 400), a `model` and a `max_tokens`. Input tokens are counted with the
//! model's encoding (o200k for Anthropic's model names: a stand-in, as Anthropic publishes none)
//! by [`prompt_tokens`]; `input_tokens` leaves out what `x-fake-cached` says was read from a cache
//! and `x-fake-cache-write` written to it, as Anthropic's does.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::prompt::{Encoding, encoding_of};
use crate::server::{Controls, Outcome, Shared, event_stream, json_response};
use crate::words::word;

/// What an image block counts (as the gateway estimates it).
const IMAGE_TOKENS: u64 = 1600;

/// Whether `path` is one of the Messages API's.
pub(crate) fn serves(path: &str) -> bool {
    matches!(path, "/v1/messages" | "/v1/messages/count_tokens")
}

/// The input tokens of a messages request `body`: `system`, 3 per message beside its content (a
/// string, or blocks: `text`, `thinking`, `tool_use`'s input as JSON, `tool_result`'s content, an
/// image 1600, any other block its JSON), and the `tools` as JSON — the gateway's estimate, made
/// with `encoding`.
pub fn prompt_tokens(body: &Value, encoding: Encoding) -> u64 {
    let system = content(body.get("system"), encoding);
    let messages: u64 = match body.get("messages") {
        Some(Value::Array(list)) => list.iter().map(|m| 3 + content(m.get("content"), encoding)).sum(),
        _ => 0,
    };
    let tools = body.get("tools").filter(|t| !t.is_null()).map_or(0, |t| encoding.count(&t.to_string()));
    system + messages + tools
}

fn content(content: Option<&Value>, encoding: Encoding) -> u64 {
    match content {
        Some(Value::String(text)) => encoding.count(text),
        Some(Value::Array(blocks)) => blocks.iter().map(|b| block(b, encoding)).sum(),
        _ => 0,
    }
}

fn block(block: &Value, encoding: Encoding) -> u64 {
    let text = |field: &str| block.get(field).and_then(Value::as_str).map_or(0, |t| encoding.count(t));
    match block.get("type").and_then(Value::as_str) {
        Some("text") => text("text"),
        Some("thinking") => text("thinking"),
        Some("image") => IMAGE_TOKENS,
        Some("tool_use") => block.get("input").map_or(0, |i| encoding.count(&i.to_string())),
        Some("tool_result") => content(block.get("content"), encoding),
        _ => encoding.count(&block.to_string()),
    }
}

/// Anthropic's error body.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body =
        json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"});
    let mut response = json_response(status, &body);
    response.headers_mut().insert("request-id", HeaderValue::from_static("req_fake"));
    response
}

/// `event: <type>\ndata: <json>\n\n`.
fn event(value: &Value) -> String {
    format!("event: {}\ndata: {value}\n\n", value["type"].as_str().unwrap_or("message"))
}

/// Token counts of one answer, as Anthropic reports them.
#[derive(Debug, Clone, Copy)]
struct Usage {
    /// The whole prompt, cache reads and writes included.
    prompt: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
}

impl Usage {
    fn json(self) -> Value {
        json!({
            "input_tokens": self.prompt - self.cache_read - self.cache_write,
            "cache_creation_input_tokens": self.cache_write,
            "cache_read_input_tokens": self.cache_read,
            "output_tokens": self.output,
            "service_tier": "standard"
        })
    }
}

/// Answers a request to the Messages API (`path`: [`serves`]).
pub(crate) async fn answer(
    shared: Arc<Shared>,
    headers: &HeaderMap,
    path: String,
    parsed: Option<Value>,
    controls: Controls,
) -> Response {
    if let Some(status) = controls.status {
        return match status {
            StatusCode::TOO_MANY_REQUESTS => {
                let mut response =
                    error(status, "rate_limit_error", "Number of requests has exceeded your rate limit.");
                let secs = controls.retry_after_ms.unwrap_or(1000).div_ceil(1000);
                let headers = response.headers_mut();
                headers.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
                headers.insert("anthropic-ratelimit-requests-remaining", HeaderValue::from(0));
                headers.insert("anthropic-ratelimit-tokens-remaining", HeaderValue::from(0));
                response
            }
            s if s.as_u16() == 529 => error(s, "overloaded_error", "Overloaded"),
            s => error(s, "api_error", "The fake upstream fails on purpose."),
        };
    }
    if !headers.contains_key("x-api-key") && !headers.contains_key(http::header::AUTHORIZATION) {
        return error(StatusCode::UNAUTHORIZED, "authentication_error", "x-api-key header is required");
    }
    if !headers.contains_key("anthropic-version") {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "anthropic-version: header is required",
        );
    }
    let Some(body) = parsed.filter(Value::is_object) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "There was an error parsing the body.",
        );
    };
    let model = body.get("model").and_then(Value::as_str).unwrap_or("").to_owned();
    if model.is_empty() {
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", "model: Field required");
    }
    let encoding = encoding_of(&model);
    let prompt = prompt_tokens(&body, encoding);
    if path == "/v1/messages/count_tokens" {
        return json_response(StatusCode::OK, &json!({"input_tokens": prompt}));
    }
    let Some(max_tokens) = body.get("max_tokens").and_then(Value::as_u64).filter(|n| *n >= 1) else {
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", "max_tokens: Field required");
    };
    let wanted = controls.tokens.unwrap_or(shared.settings.tokens);
    let count = max_tokens.min(wanted);
    let stop_reason = if count < wanted { "max_tokens" } else { "end_turn" };
    // An upstream that ignores the request's bound.
    let count = count + controls.overshoot;
    let seed = shared.answers.fetch_add(1, Ordering::Relaxed);
    let id = format!("msg_fake{seed:020x}");
    let cache_read = controls.cached.min(prompt);
    let cache_write = controls.cache_write.min(prompt - cache_read);
    let usage = Usage { prompt, cache_read, cache_write, output: count };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let mut outcome = Outcome {
        path,
        model: model.clone(),
        stream,
        prompt_tokens: prompt,
        sent: 0,
        whole: true,
        usage_sent: false,
    };
    if !stream {
        let text: String = (0..count).map(|i| word(seed, i)).collect();
        let mut message = json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason, "stop_sequence": null
        });
        if !controls.no_usage {
            message["usage"] = usage.json();
        }
        outcome.sent = count;
        outcome.usage_sent = !controls.no_usage;
        shared.note(outcome);
        return json_response(StatusCode::OK, &message);
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let plan = Plan {
        id,
        model,
        count,
        stop_reason,
        usage: (!controls.no_usage).then_some(usage),
        delay: controls.delay.unwrap_or(shared.settings.delay),
        fail_after: controls.fail_after,
        error_after: controls.error_after,
        pause_after: controls.pause_after,
        seed,
    };
    tokio::spawn(async move {
        let (sent, whole) = plan.stream(&tx, &shared).await;
        outcome.sent = sent;
        outcome.whole = whole;
        outcome.usage_sent = whole && plan.usage.is_some();
        shared.note(outcome);
    });
    event_stream(rx)
}

/// A messages stream to send.
struct Plan {
    id: String,
    model: String,
    count: u64,
    stop_reason: &'static str,
    usage: Option<Usage>,
    delay: Duration,
    fail_after: Option<u64>,
    error_after: Option<u64>,
    pause_after: Option<u64>,
    seed: u64,
}

impl Plan {
    /// Sends the stream: (text deltas sent, whether it ended whole).
    async fn stream(&self, tx: &mpsc::Sender<Result<Bytes, std::io::Error>>, shared: &Shared) -> (u64, bool) {
        let send = |value: Value| async move { tx.send(Ok(Bytes::from(event(&value)))).await.is_ok() };
        // Anthropic's `message_start` reports the input and one output token so far.
        let start_usage = self.usage.map(|u| Usage { output: 1, ..u }.json());
        let mut message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": null, "stop_sequence": null
        });
        if let Some(usage) = start_usage {
            message["usage"] = usage;
        }
        let opening = [
            json!({"type": "message_start", "message": message}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
        ];
        for value in opening {
            if !send(value).await {
                return (0, false);
            }
        }
        let mut sent = 0;
        for i in 0..self.count {
            if self.fail_after == Some(i) {
                let _ = tx
                    .send(Err(std::io::Error::other("the fake upstream breaks the stream on purpose")))
                    .await;
                return (sent, false);
            }
            if self.error_after == Some(i) {
                let overloaded =
                    json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
                let _ = send(overloaded).await;
                return (sent, false);
            }
            if self.pause_after == Some(i) {
                shared.pause().await;
            }
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            let delta = json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": word(self.seed, i)}});
            if !send(delta).await {
                return (sent, false);
            }
            sent += 1;
        }
        let mut delta = json!({"type": "message_delta",
            "delta": {"stop_reason": self.stop_reason, "stop_sequence": null}});
        if self.usage.is_some() {
            delta["usage"] = json!({"output_tokens": self.count});
        }
        let closing =
            [json!({"type": "content_block_stop", "index": 0}), delta, json!({"type": "message_stop"})];
        for value in closing {
            if !send(value).await {
                return (sent, false);
            }
        }
        (sent, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_counts_the_system_each_message_and_the_tools() {
        let e = Encoding::O200k;
        let body = json!({"system": "Be brief.", "messages": [
            {"role": "user", "content": "Hello"},
            {"role": "user", "content": [{"type": "text", "text": "there"}, {"type": "image", "source": {}}]}
        ]});
        assert_eq!(
            prompt_tokens(&body, e),
            e.count("Be brief.") + 3 + e.count("Hello") + 3 + e.count("there") + 1600
        );
    }
}
