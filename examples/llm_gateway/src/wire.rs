//! OpenAI's wire format: the bodies, chunks and events each endpoint answers with.

use base64::Engine as _;
use serde_json::{Value, json};

/// Which API a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Chat,
    Completions,
    Responses,
    Embeddings,
}

impl Api {
    pub(crate) fn of(path: &str) -> Option<Api> {
        match path {
            "/v1/chat/completions" => Some(Api::Chat),
            "/v1/completions" => Some(Api::Completions),
            "/v1/responses" => Some(Api::Responses),
            "/v1/embeddings" => Some(Api::Embeddings),
            _ => None,
        }
    }

    /// The id prefix of its objects.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Api::Chat => "chatcmpl",
            Api::Completions => "cmpl",
            Api::Responses => "resp",
            Api::Embeddings => "emb",
        }
    }
}

/// Token counts of one answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    pub(crate) prompt: u64,
    /// Of the prompt, the tokens read from a cache.
    pub(crate) cached: u64,
    pub(crate) completion: u64,
}

impl Usage {
    /// As chat completions and completions report it.
    pub(crate) fn chat(self) -> Value {
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
            "prompt_tokens_details": {"cached_tokens": self.cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        })
    }

    /// As the responses API reports it.
    pub(crate) fn responses(self) -> Value {
        json!({
            "input_tokens": self.prompt,
            "input_tokens_details": {"cached_tokens": self.cached},
            "output_tokens": self.completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.prompt + self.completion
        })
    }
}

/// What identifies one answer in all its chunks.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) api: Api,
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) model: String,
}

impl Answer {
    /// The whole answer of a request not streamed.
    pub(crate) fn body(&self, text: &str, length: bool, usage: Option<Usage>, max: Option<u64>) -> Value {
        let finish = if length { "length" } else { "stop" };
        let mut body = match self.api {
            Api::Chat => json!({
                "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null,
                    "annotations": []}, "logprobs": null, "finish_reason": finish}],
                "service_tier": "default", "system_fingerprint": "fp_fake_openai"
            }),
            Api::Completions => json!({
                "id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": finish}],
                "system_fingerprint": "fp_fake_openai"
            }),
            Api::Responses => {
                return self.response(if length { "incomplete" } else { "completed" }, text, usage, max);
            }
            Api::Embeddings => unreachable!("embeddings have no text"),
        };
        if let Some(usage) = usage {
            body["usage"] = usage.chat();
        }
        body
    }

    /// A streamed chunk of chat completions or completions: `piece` of text (chat: with the
    /// assistant's role on the first), and the finish reason on the last.
    pub(crate) fn chunk(
        &self,
        piece: Option<&str>,
        first: bool,
        finish: Option<&str>,
        usage_null: bool,
    ) -> Value {
        let mut chunk = match self.api {
            Api::Chat => {
                let mut delta = serde_json::Map::new();
                if first {
                    delta.insert("role".into(), json!("assistant"));
                    delta.insert("refusal".into(), Value::Null);
                }
                if let Some(piece) = piece {
                    delta.insert("content".into(), json!(piece));
                }
                json!({
                    "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "service_tier": "default", "system_fingerprint": "fp_fake_openai",
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
                })
            }
            _ => json!({
                "id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "system_fingerprint": "fp_fake_openai",
                "choices": [{"text": piece.unwrap_or(""), "index": 0, "logprobs": null, "finish_reason": finish}]
            }),
        };
        if usage_null {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The extra last chunk of `stream_options: {include_usage: true}`: no choices, the usage.
    pub(crate) fn usage_chunk(&self, usage: Usage) -> Value {
        let object = if self.api == Api::Chat { "chat.completion.chunk" } else { "text_completion" };
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "system_fingerprint": "fp_fake_openai", "choices": [], "usage": usage.chat()
        })
    }

    /// A response object of the responses API, in `status`.
    pub(crate) fn response(&self, status: &str, text: &str, usage: Option<Usage>, max: Option<u64>) -> Value {
        let output = if status == "in_progress" {
            json!([])
        } else {
            json!([self.message_item(text, if status == "completed" { "completed" } else { "incomplete" })])
        };
        let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        json!({
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "background": false, "error": null, "incomplete_details": incomplete, "instructions": null,
            "max_output_tokens": max, "model": self.model, "output": output, "parallel_tool_calls": true,
            "previous_response_id": null, "reasoning": {"effort": null, "summary": null},
            "service_tier": "default", "store": true, "temperature": 1.0,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": 1.0,
            "truncation": "disabled", "usage": usage.map(Usage::responses), "user": null, "metadata": {}
        })
    }

    pub(crate) fn message_id(&self) -> String {
        format!("msg_{}", &self.id[5..])
    }

    /// The one output item of a response: the assistant's message.
    pub(crate) fn message_item(&self, text: &str, status: &str) -> Value {
        json!({
            "id": self.message_id(), "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        })
    }
}

/// The body of an embeddings answer: one vector of `dimensions` per input, as floats or as the
/// base64 of little-endian `f32`s (`encoding_format: "base64"`, what the Python SDK asks for).
pub(crate) fn embeddings(
    model: &str,
    inputs: usize,
    dimensions: usize,
    base64: bool,
    usage: Option<u64>,
) -> Value {
    let data: Vec<Value> = (0..inputs)
        .map(|i| {
            let vector: Vec<f32> = (0..dimensions).map(|d| ((i * 31 + d) % 17) as f32 / 17.0).collect();
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let mut body = json!({"object": "list", "data": data, "model": model});
    if let Some(tokens) = usage {
        body["usage"] = json!({"prompt_tokens": tokens, "total_tokens": tokens});
    }
    body
}

/// OpenAI's error body.
pub(crate) fn error(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

/// `data: <json>\n\n`.
pub(crate) fn data(value: &Value) -> String {
    format!("data: {value}\n\n")
}

/// `event: <type>\ndata: <json>\n\n`, the responses API's events.
pub(crate) fn event(value: &Value) -> String {
    format!("event: {}\ndata: {value}\n\n", value["type"].as_str().unwrap_or("message"))
}
