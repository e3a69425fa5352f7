//! Counting tokens: OpenAI's BPE encodings (embedded in `tiktoken-rs`, never fetched) for the
//! models whose encoding is known, a configured tokenizer per model name, and a ratio of characters
//! per token for the others.
//!
//! What a request's input costs, by API (OpenAI's own way of counting a chat):
//! - chat completions: 3 tokens per message beside its role, its content (a string, or the `text`
//!   of its parts; an image part counts 85, a low-detail image's cost) and its name (1 more),
//!   plus 3 for the reply; the `tools` and `functions` declared count as their JSON text;
//! - responses: `instructions`, and `input` as a string or as messages (as a chat's);
//! - completions and embeddings: the `prompt` or `input` text (a list: each item; token ids:
//!   one each);
//! - Anthropic's messages: as [`anthropic::prompt_tokens`] estimates them.

use floodgate_config::gateway::{Llm, Tokenizer};
use serde_json::Value;

use super::anthropic;
use super::counter::Counter;
use super::endpoint::Endpoint;

/// What a low-detail image costs (OpenAI's base figure); larger images cost more upstream, which
/// the final usage reconciles.
const IMAGE_TOKENS: u64 = 85;

fn of(tokenizer: &Tokenizer) -> Counter {
    match tokenizer {
        Tokenizer::O200k => Counter::Bpe(tiktoken_rs::o200k_base_singleton()),
        Tokenizer::Cl100k => Counter::Bpe(tiktoken_rs::cl100k_base_singleton()),
        Tokenizer::CharsPerToken(n) => Counter::Ratio(*n),
    }
}

/// The models whose OpenAI encoding is known, by prefix, first match wins.
const KNOWN: [(&str, Tokenizer); 14] = [
    ("gpt-4o", Tokenizer::O200k),
    ("chatgpt-4o", Tokenizer::O200k),
    ("gpt-4.1", Tokenizer::O200k),
    ("gpt-4.5", Tokenizer::O200k),
    ("gpt-5", Tokenizer::O200k),
    ("gpt-oss", Tokenizer::O200k),
    ("o1", Tokenizer::O200k),
    ("o3", Tokenizer::O200k),
    ("o4", Tokenizer::O200k),
    ("codex-", Tokenizer::O200k),
    ("gpt-4", Tokenizer::Cl100k),
    ("gpt-3.5", Tokenizer::Cl100k),
    ("gpt-35", Tokenizer::Cl100k),
    ("text-embedding-", Tokenizer::Cl100k),
];

/// How `model`'s text is counted on a route with `llm`: the route's own tokenizers first (exact
/// names, or prefixes ending in `*`), then OpenAI's known models (a provider prefix such as
/// `openai/` ignored), then the route's `chars_per_token`.
pub(crate) fn counter(llm: &Llm, model: &str) -> Counter {
    if let Some(tokenizer) = llm.tokenizer(model) {
        return of(tokenizer);
    }
    let bare = model.rsplit('/').next().unwrap_or(model);
    match KNOWN.iter().find(|(prefix, _)| bare.starts_with(prefix)) {
        Some((_, tokenizer)) => of(tokenizer),
        None => Counter::Ratio(llm.chars_per_token),
    }
}

/// The input tokens of a request to `endpoint` with `body`.
pub(crate) fn prompt_tokens(
    endpoint: Endpoint,
    body: &serde_json::Map<String, Value>,
    counter: &Counter,
) -> u64 {
    match endpoint {
        Endpoint::Chat => {
            let declared: u64 = ["tools", "functions"]
                .iter()
                .filter_map(|f| body.get(*f))
                .map(|v| counter.count(&v.to_string()))
                .sum();
            messages(body.get("messages"), counter) + declared
        }
        Endpoint::Responses => {
            let instructions =
                body.get("instructions").and_then(Value::as_str).map_or(0, |t| counter.count(t));
            let input = match body.get("input") {
                Some(Value::String(text)) => counter.count(text),
                other => messages(other, counter),
            };
            let declared = body.get("tools").map_or(0, |v| counter.count(&v.to_string()));
            instructions + input + declared
        }
        Endpoint::Completions => texts(body.get("prompt"), counter),
        Endpoint::Embeddings => texts(body.get("input"), counter),
        Endpoint::Messages => anthropic::prompt_tokens(body, counter),
    }
}

fn messages(list: Option<&Value>, counter: &Counter) -> u64 {
    let Some(Value::Array(list)) = list else { return 0 };
    let mut total = 3;
    for message in list {
        total += 3;
        if let Some(Value::String(role)) = message.get("role") {
            total += counter.count(role);
        }
        if let Some(Value::String(name)) = message.get("name") {
            total += 1 + counter.count(name);
        }
        total += content(message.get("content"), counter);
        // Tool calls an assistant message carries, and a function call's output (responses).
        for field in ["tool_calls", "function_call", "arguments", "output"] {
            match message.get(field) {
                Some(Value::String(text)) => total += counter.count(text),
                Some(v @ (Value::Array(_) | Value::Object(_))) => total += counter.count(&v.to_string()),
                _ => {}
            }
        }
    }
    total
}

/// A message's content: a string, or parts (`text`, `input_text`, images).
fn content(content: Option<&Value>, counter: &Counter) -> u64 {
    match content {
        Some(Value::String(text)) => counter.count(text),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| match part.get("text").and_then(Value::as_str) {
                Some(text) => counter.count(text),
                None => match part.get("type").and_then(Value::as_str) {
                    Some("image_url" | "input_image") => IMAGE_TOKENS,
                    _ => counter.count(&part.to_string()),
                },
            })
            .sum(),
        _ => 0,
    }
}

/// A string, a list of strings, a list of token ids, or a list of lists of token ids.
fn texts(input: Option<&Value>, counter: &Counter) -> u64 {
    match input {
        Some(Value::String(text)) => counter.count(text),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => counter.count(text),
                Value::Number(_) => 1,
                Value::Array(ids) => ids.len() as u64,
                other => counter.count(&other.to_string()),
            })
            .sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llm() -> Llm {
        Llm::default()
    }

    #[test]
    fn openai_models_get_their_encoding_and_others_the_ratio() {
        let llm = llm();
        let o200k = tiktoken_rs::o200k_base_singleton() as *const _;
        let cl100k = tiktoken_rs::cl100k_base_singleton() as *const _;
        let bpe = |model: &str| match counter(&llm, model) {
            Counter::Bpe(b) => Some(b as *const _),
            Counter::Ratio(_) => None,
        };
        for model in ["gpt-4o-mini", "gpt-4.1", "o3-mini", "gpt-5", "openai/gpt-4o"] {
            assert_eq!(bpe(model), Some(o200k), "{model}");
        }
        for model in ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "text-embedding-3-small"] {
            assert_eq!(bpe(model), Some(cl100k), "{model}");
        }
        assert!(!counter(&llm, "llama-3-8b").exact());
        assert_eq!(
            counter(&llm, "llama-3-8b").count("abcdefg"),
            3,
            "7 characters at 3 per token, rounded up"
        );
    }

    #[test]
    fn configured_tokenizers_come_first() {
        let mut llm = llm();
        llm.tokenizers.push(("llama-*".into(), Tokenizer::O200k));
        llm.tokenizers.push(("gpt-4o".into(), Tokenizer::CharsPerToken(2.0)));
        assert!(counter(&llm, "llama-3").exact());
        assert_eq!(counter(&llm, "gpt-4o").count("abcd"), 2);
        assert!(counter(&llm, "gpt-4o-mini").exact(), "an exact name is not a prefix");
    }

    #[test]
    fn a_chat_counts_as_openai_counts_it() {
        let counter = counter(&llm(), "gpt-4o");
        let body = serde_json::json!({"messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hello there"}
        ]});
        let expected = 3
            + (3 + counter.count("system") + counter.count("You are terse."))
            + (3 + counter.count("user") + counter.count("Hello there"));
        assert_eq!(prompt_tokens(Endpoint::Chat, body.as_object().unwrap(), &counter), expected);
    }

    #[test]
    fn embeddings_and_completions_count_each_input() {
        let counter = counter(&llm(), "text-embedding-3-small");
        let body = serde_json::json!({"input": ["one two", "three"]});
        let expected = counter.count("one two") + counter.count("three");
        assert_eq!(prompt_tokens(Endpoint::Embeddings, body.as_object().unwrap(), &counter), expected);
        let body = serde_json::json!({"prompt": [[1, 2, 3], [4]]});
        assert_eq!(prompt_tokens(Endpoint::Completions, body.as_object().unwrap(), &counter), 4);
    }
}
