//! The parts of a streamed event the meter reads, deserialized as borrowed views (text that needs
//! no unescaping is not copied; every other field is skipped unread): a chunk of chat completions
//! or completions, an event of the responses API.

use std::borrow::Cow;

use serde::Deserialize;

use super::tariff::Used;

/// A chunk of chat completions or completions.
#[derive(Debug, Deserialize)]
pub(crate) struct Chunk<'a> {
    #[serde(borrow, default)]
    pub(crate) choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    pub(crate) usage: Option<ChatUsage>,
}

/// One choice of a chunk: its delta (chat completions) or text (completions).
#[derive(Debug, Deserialize)]
pub(crate) struct Choice<'a> {
    #[serde(borrow, default)]
    pub(crate) delta: Option<Part<'a>>,
    #[serde(borrow, default)]
    pub(crate) text: Option<Cow<'a, str>>,
}

/// What a delta carries that the model generated.
#[derive(Debug, Deserialize)]
pub(crate) struct Part<'a> {
    #[serde(borrow, default)]
    pub(crate) content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) tool_calls: Option<Vec<ToolCall<'a>>>,
}

/// A tool call's delta: its arguments' text.
#[derive(Debug, Deserialize)]
pub(crate) struct ToolCall<'a> {
    #[serde(borrow, default)]
    pub(crate) function: Option<Function<'a>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Function<'a> {
    #[serde(borrow, default)]
    pub(crate) arguments: Option<Cow<'a, str>>,
}

/// Usage as chat completions, completions and embeddings report it.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<Cached>,
}

#[derive(Debug, Deserialize)]
struct Cached {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl ChatUsage {
    pub(crate) fn used(&self) -> Used {
        Used {
            prompt: self.prompt_tokens,
            cached: self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0),
            completion: self.completion_tokens,
            cache_write: 0,
        }
    }
}

/// An event of the responses API.
#[derive(Debug, Deserialize)]
pub(crate) struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    pub(crate) kind: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) delta: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(crate) sequence_number: Option<u64>,
    #[serde(default)]
    pub(crate) response: Option<Finished>,
}

/// The response a last event carries: its usage.
#[derive(Debug, Deserialize)]
pub(crate) struct Finished {
    #[serde(default)]
    pub(crate) usage: Option<ResponsesUsage>,
}

/// Usage as the responses API reports it.
#[derive(Debug, Deserialize)]
pub(crate) struct ResponsesUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<Cached>,
}

impl ResponsesUsage {
    pub(crate) fn used(&self) -> Used {
        Used {
            prompt: self.input_tokens,
            cached: self.input_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0),
            completion: self.output_tokens,
            cache_write: 0,
        }
    }
}
