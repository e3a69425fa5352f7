//! Anthropic's Messages API as the gateway reads it: what a request's input counts, the usage an
//! answer reports, and the parts of its stream's events the meter reads.
//!
//! Anthropic publishes no tokenizer, so the prompt is an **estimate**, made with the model's
//! counter (a configured `tokenizers:` entry, else `chars_per_token`, one token per 3 characters
//! by default), and the provider's usage corrects it when the answer ends:
//! - `system` (a string or text blocks), and each message's content: a string, or blocks — `text`
//!   its text, `thinking` its thinking, `tool_use` its `input` as JSON, `tool_result` its content
//!   (a string or blocks, counted alike), an `image` [`IMAGE_TOKENS`], any other block its JSON;
//! - 3 tokens per message for its framing, as a chat's;
//! - the declared `tools` as their JSON.
//!
//! Usage: Anthropic's `input_tokens` leaves out what was read from or written to its cache, so
//! the prompt charged is `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`
//! (the reads priced at `cached_input`, the writes at `cache_write`), the completion
//! `output_tokens`. A stream reports its input in `message_start` and its cumulative output (and,
//! lately, input) in `message_delta`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::counter::Counter;
use super::tariff::Used;

/// What an image block is estimated at: about the most Anthropic charges for one it does not
/// shrink (width × height / 750 for 1.15 megapixels); the usage corrects it.
pub(crate) const IMAGE_TOKENS: u64 = 1600;

/// The input tokens of a messages request `body`, estimated (see the module docs).
pub(crate) fn prompt_tokens(body: &Map<String, Value>, counter: &Counter) -> u64 {
    let system = content(body.get("system"), counter);
    let messages = match body.get("messages") {
        Some(Value::Array(list)) => list.iter().map(|m| 3 + content(m.get("content"), counter)).sum(),
        _ => 0,
    };
    let tools = body.get("tools").filter(|t| !t.is_null()).map_or(0, |t| counter.count(&t.to_string()));
    system + messages + tools
}

/// A content: a string, or blocks.
fn content(content: Option<&Value>, counter: &Counter) -> u64 {
    match content {
        Some(Value::String(text)) => counter.count(text),
        Some(Value::Array(blocks)) => blocks.iter().map(|b| block(b, counter)).sum(),
        _ => 0,
    }
}

fn block(block: &Value, counter: &Counter) -> u64 {
    let text = |field: &str| block.get(field).and_then(Value::as_str).map_or(0, |t| counter.count(t));
    match block.get("type").and_then(Value::as_str) {
        Some("text") => text("text"),
        Some("thinking") => text("thinking"),
        Some("image") => IMAGE_TOKENS,
        Some("tool_use") => block.get("input").map_or(0, |i| counter.count(&i.to_string())),
        Some("tool_result") => content(block.get("content"), counter),
        _ => counter.count(&block.to_string()),
    }
}

/// Usage as Anthropic reports it (in a body, `message_start`'s message, or `message_delta`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Usage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl Usage {
    /// Whether it reports the input (`message_delta` did not, until lately).
    fn has_input(&self) -> bool {
        self.input_tokens.is_some()
    }

    /// What it says was used.
    pub(crate) fn used(&self) -> Used {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let written = self.cache_creation_input_tokens.unwrap_or(0);
        Used {
            prompt: self.input_tokens.unwrap_or(0) + read + written,
            cached: read,
            cache_write: written,
            completion: self.output_tokens.unwrap_or(0),
        }
    }
}

/// An event of a messages stream.
#[derive(Debug, Deserialize)]
pub(crate) struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    pub(crate) kind: Cow<'a, str>,
    /// `content_block_delta`'s delta (its text), or `message_delta`'s (its stop reason).
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    /// `message_start`'s message: its usage.
    #[serde(default)]
    message: Option<Started>,
    /// `message_delta`'s usage.
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
struct Started {
    #[serde(default)]
    usage: Option<Usage>,
}

/// What one event says.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Read {
    /// The tokens it generated (counted in its text).
    pub(crate) generated: u64,
    /// The input the provider reported (`message_start`).
    pub(crate) input: Option<Used>,
    /// The answer's usage so far (`message_delta`: the output is cumulative), its input taken from
    /// `input` when it does not say.
    pub(crate) usage: Option<Used>,
}

impl Event<'_> {
    /// What this event says, its text counted with `counter`; `input` is what `message_start`
    /// reported.
    pub(crate) fn read(&self, counter: &Counter, input: Option<Used>) -> Read {
        let mut read = Read::default();
        match &*self.kind {
            "content_block_delta" => {
                if let Some(delta) = &self.delta {
                    read.generated = [&delta.text, &delta.partial_json, &delta.thinking]
                        .into_iter()
                        .flatten()
                        .map(|t| counter.count(t))
                        .sum();
                }
            }
            "message_start" => {
                read.input = self
                    .message
                    .as_ref()
                    .and_then(|m| m.usage.as_ref())
                    .map(|u| Used { completion: 0, ..u.used() });
            }
            "message_delta" => {
                if let Some(usage) = &self.usage {
                    let mut used = usage.used();
                    if !usage.has_input()
                        && let Some(input) = input
                    {
                        used = Used { completion: used.completion, ..input };
                    }
                    read.usage = Some(used);
                }
            }
            _ => {}
        }
        read
    }
}

/// A whole JSON answer's `usage` object, read; `None` when it is not Anthropic's.
pub(crate) fn usage(usage: &Value) -> Option<Used> {
    Usage::deserialize(usage).ok().map(|u| u.used())
}

/// The tokens of a whole JSON answer's content, counted (for an answer without usage).
pub(crate) fn content_tokens(body: &Value, counter: &Counter) -> u64 {
    match body.get("content") {
        Some(Value::Array(blocks)) => blocks.iter().map(|b| block(b, counter)).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn counter() -> Counter {
        Counter::Ratio(3.0)
    }

    #[test]
    fn the_system_every_text_block_and_the_tools_are_counted() {
        let c = counter();
        let body = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 100,
            "system": [{"type": "text", "text": "You are terse."}],
            "messages": [
                {"role": "user", "content": "Hello there"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hi."},
                    {"type": "tool_use", "id": "t1", "name": "get", "input": {"q": "rain"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "wet"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}
            ],
            "tools": [{"name": "get", "input_schema": {"type": "object"}}]
        });
        let tools = c.count(&body["tools"].to_string());
        let expected = c.count("You are terse.")
            + (3 + c.count("Hello there"))
            + (3 + c.count("Hi.") + c.count(&json!({"q": "rain"}).to_string()))
            + (3 + c.count("wet") + IMAGE_TOKENS)
            + tools;
        assert_eq!(prompt_tokens(body.as_object().unwrap(), &c), expected);
    }

    #[test]
    fn usage_counts_the_cache_as_prompt() {
        let usage: Usage = serde_json::from_value(json!({"input_tokens": 10, "output_tokens": 7,
            "cache_creation_input_tokens": 100, "cache_read_input_tokens": 50}))
        .unwrap();
        assert_eq!(usage.used(), Used { prompt: 160, cached: 50, cache_write: 100, completion: 7 });
    }

    #[test]
    fn a_stream_reports_its_input_first_and_its_cumulative_output_last() {
        let c = counter();
        let event = |text: &str| serde_json::from_str::<Event<'_>>(text).unwrap().read(&c, None);
        let start = event(
            r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":12,"output_tokens":1,"cache_read_input_tokens":4}}}"#,
        );
        let input = start.input.unwrap();
        assert_eq!(input, Used { prompt: 16, cached: 4, cache_write: 0, completion: 0 });
        let delta = event(
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"abcdef"}}"#,
        );
        assert_eq!(delta.generated, 2);
        let end = serde_json::from_str::<Event<'_>>(
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
        )
        .unwrap()
        .read(&c, Some(input));
        assert_eq!(end.usage, Some(Used { completion: 9, ..input }));
    }

    #[test]
    fn an_answer_without_usage_is_its_contents_tokens() {
        let c = counter();
        let body = json!({"content": [{"type": "text", "text": "abcdef"}]});
        assert_eq!(content_tokens(&body, &c), 2);
        let body = json!({"content": [], "usage": {"input_tokens": 3, "output_tokens": 4}});
        assert_eq!(usage(&body["usage"]), Some(Used { prompt: 3, completion: 4, ..Used::default() }));
    }
}
