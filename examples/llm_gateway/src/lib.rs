//! `fake-openai`: an OpenAI-compatible upstream that generates text without a model, for the LLM
//! gateway's example and tests.
//!
//! It speaks OpenAI's wire format — `POST /v1/chat/completions`, `/v1/completions`,
//! `/v1/responses` and `/v1/embeddings`, as JSON and as server-sent events (`data: {…}\n\n`, and
//! `data: [DONE]\n\n` where OpenAI sends it) — so that the real `openai` SDKs can talk to it:
//!
//! - **Prompt tokens** are counted with OpenAI's encoding for the model (o200k for `gpt-4o`,
//!   `gpt-4.1`, `o1`…; cl100k for `gpt-4`, `gpt-3.5-turbo` and the embeddings models; o200k for
//!   any other name) and a chat message costs 3 tokens beside its role and content, the reply 3
//!   more, as OpenAI counts them.
//! - **Completions** are words, each one token in both encodings, never the same twice in a row:
//!   `tokens` of them ([`Settings::tokens`]), or fewer when the request's `max_tokens`,
//!   `max_completion_tokens` or `max_output_tokens` says so (then `finish_reason: "length"`, or
//!   `status: "incomplete"` for a response). Streamed, each word is one chunk.
//! - **Usage** is reported as OpenAI does: in the body, in a last chunk of empty `choices` when the
//!   request asked `stream_options: {include_usage: true}` (every other chunk then carries
//!   `"usage": null`), in `response.completed` for the responses API.
//!
//! Each request may change what it gets with headers (the SDKs send them as `extra_headers`):
//!
//! | header | effect |
//! |---|---|
//! | `x-fake-tokens: N` | generate N tokens (before the request's own cap) |
//! | `x-fake-delay-ms: N` | wait N ms before each streamed chunk |
//! | `x-fake-status: 429` | answer this status with an OpenAI error body; with 429, `retry-after-ms` and `retry-after` |
//! | `x-fake-retry-after-ms: N` | the `retry-after-ms` of that answer (default 1000) |
//! | `x-fake-fail-after: N` | break the stream (no terminating chunk) after N content chunks |
//! | `x-fake-no-usage: 1` | leave the usage out, wherever it would be |
//! | `x-fake-pause-after: N` | stop after N content chunks until [`FakeOpenAi::resume`] |
//! | `x-fake-overshoot: N` | generate N tokens past the request's bound (an upstream that ignores it) |
//! | `x-fake-cached: N` | report N of the prompt's tokens as read from a cache |
//!
//! It speaks **Anthropic's Messages API** too (`POST /v1/messages`, streamed and not, and
//! `/v1/messages/count_tokens`), byte for byte in Anthropic's wire format, with the same headers
//! (a 429's wait in `retry-after` seconds, as Anthropic sends it) and two more of its own:
//! `x-fake-cache-write: N` (N prompt tokens reported as written to the cache) and
//! `x-fake-error-after: N` (an `event: error` of `overloaded_error` after N text deltas, as
//! Anthropic ends a stream that fails). Its input is counted by [`anthropic_prompt_tokens`].
//!
//! [`FakeOpenAi`] keeps what it was asked ([`FakeOpenAi::seen`]) and what each stream sent
//! ([`FakeOpenAi::outcomes`]), and lets a test wait for those events rather than sleep.

mod anthropic;
mod prompt;
mod server;
mod wire;
mod words;

pub use self::anthropic::prompt_tokens as anthropic_prompt_tokens;
pub use self::prompt::{Encoding, encoding_of, prompt_tokens};
pub use self::server::{FakeOpenAi, Outcome, Seen, Settings};
pub use self::words::WORDS;
