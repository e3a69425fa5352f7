//! What a request's input costs in tokens, as OpenAI counts it.

use serde_json::Value;
use tiktoken_rs::CoreBPE;

/// One of OpenAI's BPE encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `o200k_base`: `gpt-4o`, `gpt-4.1`, `gpt-5`, the `o` series.
    O200k,
    /// `cl100k_base`: `gpt-4`, `gpt-3.5-turbo`, the `text-embedding-*` models.
    Cl100k,
}

impl Encoding {
    fn bpe(self) -> &'static CoreBPE {
        match self {
            Encoding::O200k => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100k => tiktoken_rs::cl100k_base_singleton(),
        }
    }

    /// The tokens of `text`.
    pub fn count(self, text: &str) -> u64 {
        self.bpe().encode_ordinary(text).len() as u64
    }
}

/// The encoding of `model` (o200k for a name this upstream does not know).
pub fn encoding_of(model: &str) -> Encoding {
    let cl100k = ["gpt-4-", "gpt-3.5", "gpt-35", "text-embedding-"];
    if model == "gpt-4" || cl100k.iter().any(|p| model.starts_with(p)) {
        Encoding::Cl100k
    } else {
        Encoding::O200k
    }
}

/// The prompt tokens of a request to `path` with `body`: chat messages at 3 tokens each beside
/// their role, content and name (1 more), plus 3 for the reply; a completion's or embedding's input
/// as its text (a list: each item); a response's input as a string or as messages.
pub fn prompt_tokens(path: &str, body: &Value, encoding: Encoding) -> u64 {
    match path {
        "/v1/chat/completions" => messages(body.get("messages"), encoding),
        "/v1/responses" => match body.get("input") {
            Some(Value::String(text)) => encoding.count(text),
            other => messages(other, encoding),
        },
        "/v1/completions" => texts(body.get("prompt"), encoding),
        _ => texts(body.get("input"), encoding),
    }
}

fn messages(list: Option<&Value>, encoding: Encoding) -> u64 {
    let Some(Value::Array(list)) = list else { return 0 };
    let mut total = 3;
    for message in list {
        total += 3;
        if let Some(Value::String(role)) = message.get("role") {
            total += encoding.count(role);
        }
        if let Some(Value::String(name)) = message.get("name") {
            total += 1 + encoding.count(name);
        }
        total += content(message.get("content"), encoding);
    }
    total
}

/// A message's content: a string, or parts whose `text` counts.
fn content(content: Option<&Value>, encoding: Encoding) -> u64 {
    match content {
        Some(Value::String(text)) => encoding.count(text),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| encoding.count(t))
            .sum(),
        _ => 0,
    }
}

/// A string, a list of strings, a list of token ids, or a list of lists of token ids.
fn texts(input: Option<&Value>, encoding: Encoding) -> u64 {
    match input {
        Some(Value::String(text)) => encoding.count(text),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => encoding.count(text),
                Value::Number(_) => 1,
                Value::Array(ids) => ids.len() as u64,
                _ => 0,
            })
            .sum(),
        _ => 0,
    }
}
