//! An LLM request as the gateway reads it: which endpoint, which model, streamed or not, how many
//! tokens it may generate — and the rewrites admission makes (the allowance capped, usage asked of
//! a stream). What cannot be read is refused in the endpoint's dialect's error format.

use bytes::Bytes;
use floodgate_config::gateway::Allowance;
use serde_json::{Map, Value};

use super::endpoint::Endpoint;
use super::respond::{Refusal, invalid};

/// A request admitted for reading.
#[derive(Debug)]
pub(crate) struct LlmRequest {
    pub(crate) endpoint: Endpoint,
    body: Map<String, Value>,
    pub(crate) model: String,
    pub(crate) stream: bool,
    /// What the request asks to generate at most, when it says (the smallest of its fields).
    pub(crate) asked: Option<u64>,
    /// Whether the client asked for the usage of its stream (`stream_options.include_usage`).
    pub(crate) client_wants_usage: bool,
    /// Whether the body changed since it was read.
    changed: bool,
    raw: Bytes,
}

impl LlmRequest {
    /// Reads `raw` as a request to `endpoint`, its limits checked against `allowance`.
    pub(crate) fn parse(
        endpoint: Endpoint,
        raw: Bytes,
        allowance: &Allowance,
    ) -> Result<LlmRequest, Refusal> {
        let dialect = endpoint.dialect();
        let refuse = |message: String, param: Option<&str>| invalid(dialect, message, param);
        let body = match serde_json::from_slice::<Value>(&raw) {
            Ok(Value::Object(body)) => body,
            Ok(_) => return Err(refuse("The request body must be a JSON object.".to_owned(), None)),
            Err(e) => {
                return Err(refuse(format!("We could not parse the JSON body of your request: {e}."), None));
            }
        };
        let model = match body.get("model") {
            Some(Value::String(model)) if !model.is_empty() => model.clone(),
            Some(Value::String(_)) | None | Some(Value::Null) => {
                return Err(refuse("You must provide a model parameter.".to_owned(), Some("model")));
            }
            Some(other) => {
                return Err(refuse(format!("`model` must be a string, not {other}."), Some("model")));
            }
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(refuse(format!("`stream` must be a boolean, not {other}."), Some("stream")));
            }
        };
        if stream && endpoint == Endpoint::Embeddings {
            return Err(refuse("Embeddings are not streamed.".to_owned(), Some("stream")));
        }
        let mut asked: Option<u64> = None;
        for field in endpoint.limit_fields() {
            let n = match body.get(*field) {
                None | Some(Value::Null) => continue,
                Some(value) => value.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
                    refuse(
                        format!("`{field}` must be a whole number of tokens from 1, not {value}."),
                        Some(field),
                    )
                })?,
            };
            if n > allowance.max_tokens {
                return Err(refuse(
                    format!(
                        "`{field}` is {n}, above the most this gateway lets one request generate ({}).",
                        allowance.max_tokens
                    ),
                    Some(field),
                ));
            }
            asked = Some(asked.map_or(n, |a| a.min(n)));
        }
        if asked.is_none()
            && let [field] = endpoint.limit_fields()
            && endpoint.limit_required()
        {
            return Err(refuse(
                format!("{field}: Field required (the most tokens the answer may generate)."),
                Some(field),
            ));
        }
        let client_wants_usage = body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(LlmRequest { endpoint, body, model, stream, asked, client_wants_usage, changed: false, raw })
    }

    /// The body, as read.
    pub(crate) fn body(&self) -> &Map<String, Value> {
        &self.body
    }

    /// Bounds what the request generates at `tokens`: every limit field it has is set to it, or
    /// when it has none, the endpoint's: `max_tokens` for chat completions and completions (what
    /// every OpenAI-compatible server reads; `max_completion_tokens` for OpenAI's reasoning models,
    /// `o1`, `o3`, `o4`, `gpt-5`, which refuse `max_tokens`), `max_output_tokens` for responses.
    pub(crate) fn bound(&mut self, tokens: u64) {
        let fields = self.endpoint.limit_fields();
        let mut set = false;
        for field in fields {
            if self.body.get(*field).is_some_and(|v| !v.is_null()) {
                self.body.insert((*field).to_owned(), Value::from(tokens));
                set = true;
            }
        }
        if !set {
            let field = match self.endpoint {
                // OpenAI's reasoning models refuse `max_tokens`.
                Endpoint::Chat if reasoning(&self.model) => "max_completion_tokens",
                Endpoint::Chat | Endpoint::Completions | Endpoint::Messages => "max_tokens",
                Endpoint::Responses => "max_output_tokens",
                Endpoint::Embeddings => return,
            };
            self.body.insert(field.to_owned(), Value::from(tokens));
        }
        // Anthropic's extended thinking must think less than `max_tokens`: a budget the bound
        // leaves no room under is lowered below it (Anthropic refuses one under 1024).
        if self.endpoint == Endpoint::Messages
            && let Some(budget) = self.body.get_mut("thinking").and_then(|t| t.get_mut("budget_tokens"))
            && budget.as_u64().is_some_and(|b| b >= tokens)
        {
            *budget = Value::from(tokens.saturating_sub(1).max(1));
        }
        self.changed = true;
    }

    /// Switches the request to `model` (a plan past its limit degrading it).
    pub(crate) fn set_model(&mut self, model: &str) {
        self.model = model.to_owned();
        self.body.insert("model".to_owned(), Value::from(model));
        self.changed = true;
    }

    /// Asks a stream of chat completions or completions for its usage in a last chunk; `true` when
    /// the client had not asked (that chunk is then hidden from it). The responses API always
    /// reports usage in its last event.
    pub(crate) fn ask_usage(&mut self) -> bool {
        if !self.stream
            || self.client_wants_usage
            || !matches!(self.endpoint, Endpoint::Chat | Endpoint::Completions)
        {
            return false;
        }
        let options = self.body.entry("stream_options").or_insert_with(|| Value::Object(Map::new()));
        if !options.is_object() {
            *options = Value::Object(Map::new());
        }
        if let Value::Object(options) = options {
            options.insert("include_usage".to_owned(), Value::Bool(true));
        }
        self.changed = true;
        true
    }

    /// The body to send upstream: as received when nothing changed.
    pub(crate) fn into_bytes(self) -> Bytes {
        if !self.changed {
            return self.raw;
        }
        match serde_json::to_vec(&Value::Object(self.body)) {
            Ok(bytes) => Bytes::from(bytes),
            Err(_) => self.raw,
        }
    }
}

/// Whether `model` is one of OpenAI's reasoning models (a provider prefix such as `openai/` ignored).
fn reasoning(model: &str) -> bool {
    let bare = model.rsplit('/').next().unwrap_or(model);
    ["o1", "o3", "o4", "gpt-5"].iter().any(|p| bare.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn parse(endpoint: Endpoint, body: &str) -> Result<LlmRequest, Refusal> {
        LlmRequest::parse(endpoint, Bytes::from(body.to_owned()), &Allowance::default())
    }

    #[test]
    fn a_messages_request_must_name_a_sane_max_tokens_and_is_refused_in_anthropics_format() {
        for body in [
            "not json",
            r#"{"model": "claude-sonnet-4-5", "messages": []}"#,
            r#"{"max_tokens": 10, "messages": []}"#,
            r#"{"model": "claude-sonnet-4-5", "max_tokens": -5}"#,
            r#"{"model": "claude-sonnet-4-5", "max_tokens": 0}"#,
            r#"{"model": "claude-sonnet-4-5", "max_tokens": 100000000}"#,
        ] {
            let refusal = parse(Endpoint::Messages, body).expect_err(body);
            assert_eq!(refusal.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(refusal.body["type"], "error", "{body}");
            assert_eq!(refusal.body["error"]["type"], "invalid_request_error", "{body}");
        }
        let refusal =
            parse(Endpoint::Messages, r#"{"model": "claude-sonnet-4-5", "messages": []}"#).unwrap_err();
        assert!(refusal.body["error"]["message"].as_str().unwrap().starts_with("max_tokens: Field required"));
        let mut request =
            parse(Endpoint::Messages, r#"{"model":"claude-sonnet-4-5","max_tokens":500,"stream":true}"#)
                .unwrap();
        assert_eq!(request.asked, Some(500));
        assert!(!request.ask_usage(), "Anthropic's streams always carry their usage");
        request.bound(120);
        let body: Value = serde_json::from_slice(&request.into_bytes()).unwrap();
        assert_eq!(body["max_tokens"], 120);
        let thinking = r#"{"model":"claude-sonnet-4-5","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":4000}}"#;
        let mut request = parse(Endpoint::Messages, thinking).unwrap();
        request.bound(3000);
        let body: Value = serde_json::from_slice(&request.into_bytes()).unwrap();
        assert_eq!(
            (body["max_tokens"].as_u64(), body["thinking"]["budget_tokens"].as_u64()),
            (Some(3000), Some(2999))
        );
    }

    #[test]
    fn bad_input_is_refused_never_passed_free() {
        for body in [
            "not json",
            "[1]",
            r#"{"messages": []}"#,
            r#"{"model": 3}"#,
            r#"{"model": "gpt-4o", "max_tokens": -1}"#,
            r#"{"model": "gpt-4o", "max_tokens": 0}"#,
            r#"{"model": "gpt-4o", "max_tokens": 1.5}"#,
            r#"{"model": "gpt-4o", "max_tokens": "10"}"#,
            r#"{"model": "gpt-4o", "max_completion_tokens": 1000000000}"#,
            r#"{"model": "gpt-4o", "stream": "yes"}"#,
        ] {
            let refusal = parse(Endpoint::Chat, body).expect_err(body);
            assert_eq!(refusal.status, StatusCode::BAD_REQUEST, "{body}");
        }
    }

    #[test]
    fn the_smallest_limit_is_the_allowance_asked_and_capping_rewrites_each() {
        let mut request =
            parse(Endpoint::Chat, r#"{"model":"gpt-4o","max_tokens":500,"max_completion_tokens":300}"#)
                .unwrap();
        assert_eq!(request.asked, Some(300));
        request.bound(120);
        let body: Value = serde_json::from_slice(&request.into_bytes()).unwrap();
        assert_eq!(body["max_tokens"], 120);
        assert_eq!(body["max_completion_tokens"], 120);

        let mut request = parse(Endpoint::Responses, r#"{"model":"gpt-4o","input":"hi"}"#).unwrap();
        assert_eq!(request.asked, None);
        request.bound(64);
        let body: Value = serde_json::from_slice(&request.into_bytes()).unwrap();
        assert_eq!(body["max_output_tokens"], 64);
    }

    #[test]
    fn a_stream_is_asked_for_its_usage_once() {
        let raw = r#"{"model":"gpt-4o","stream":true,"messages":[]}"#;
        let mut request = parse(Endpoint::Chat, raw).unwrap();
        assert!(request.ask_usage());
        let body: Value = serde_json::from_slice(&request.into_bytes()).unwrap();
        assert_eq!(body["stream_options"]["include_usage"], true);
        let asked = r#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true}}"#;
        let mut request = parse(Endpoint::Chat, asked).unwrap();
        assert!(!request.ask_usage());
        assert_eq!(request.into_bytes(), Bytes::from(asked), "unchanged, byte for byte");
    }
}
