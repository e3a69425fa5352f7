//! Metering a response as it flows: the tokens an answer generated, counted chunk by chunk from a
//! stream's server-sent events (or read whole from a JSON body), reconciled with the provider's
//! usage when it comes, and committed when the response ends — or, when the client goes away
//! mid-stream, what was generated so far; the rest of the reservation goes back.
//!
//! - Anthropic's messages stream reports its input in `message_start` and its cumulative output in
//!   `message_delta`; its text deltas are counted as they flow, and the last `message_delta`'s
//!   usage is what is charged when the stream ends whole.
//! - A stream of chat completions or completions was asked for its usage
//!   (`stream_options.include_usage`); when its client had not asked, that last chunk of empty
//!   `choices` is not forwarded.
//! - A stream that generates more than its allowance (an upstream that ignores `max_tokens`): under
//!   `cut`, the chunk that would pass the allowance is not forwarded, the stream ends with an error
//!   event in the API's format and the upstream connection is dropped; under `finish`, it is
//!   forwarded and what passed the reservation is charged on top when it ends.
//! - An answer without usage is charged the documented estimate: the prompt as counted at
//!   admission (or as the provider reported it at the stream's start) plus the completion tokens
//!   counted in the text (never nothing); a JSON body too large to read back is charged its whole
//!   reservation.

use crate::metrics::LlmMetrics;
use std::borrow::Cow;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floodgate::Settlement;
use floodgate_app::App;
use floodgate_config::gateway::OverBudget;
use serde_json::Value;

use super::anthropic;
use super::chunk;
use super::counter::Counter;
use super::endpoint::Endpoint;
use super::respond::cut_event;
use super::tariff::{Tariff, Used};
use crate::routes::RouteTable;

/// The largest JSON answer kept to read its usage.
const MAX_JSON: usize = 16 << 20;

/// What the meter does with a piece of the body.
#[derive(Debug)]
pub(crate) enum Step {
    /// Forward these bytes (maybe none yet: an event is incomplete).
    Pass(Bytes),
    /// Forward these bytes, then end the body: the stream was cut.
    End(Bytes),
}

/// Where and how an answer's cost is committed: a reservation on the route's metered rules, or on
/// the quota rule of the upstream the call went to.
pub(crate) struct Account {
    pub(crate) app: App,
    /// The table whose domains the reservation was made on.
    pub(crate) table: Arc<RouteTable>,
    pub(crate) reservation: String,
    /// The upstream's quota rule it holds, if that is what it is.
    pub(crate) quota: Option<String>,
}

impl Account {
    fn domain(&self) -> &floodgate_app::control::Domain {
        let quota = self.quota.as_deref().and_then(|q| self.table.policies.quota(q));
        quota.unwrap_or(&self.table.policies.metered)
    }

    /// Commits what `used` costs by `tariff` (in the background: a body is dropped synchronously).
    fn commit(self, tariff: &Tariff, used: Used) {
        let costs = tariff.costs(used, false);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            let domain = self.domain();
            if let Err(error) = self.app.decisions().settle(domain, &self.reservation, Settlement::Commit(&costs)).await {
                tracing::warn!(reservation = %self.reservation, error = %error, "gateway: an LLM call's cost could not be committed");
            }
        });
    }

    /// Gives the whole reservation back: the call generated nothing.
    pub(crate) fn release(self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            let domain = self.domain();
            if let Err(error) = self.app.decisions().settle(domain, &self.reservation, Settlement::Release).await {
                tracing::warn!(reservation = %self.reservation, error = %error, "gateway: an LLM call's reservation could not be released");
            }
        });
    }
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account").field("reservation", &self.reservation).finish_non_exhaustive()
    }
}

/// Meters one answer.
pub(crate) struct Meter {
    /// The reservations the answer's cost is committed to.
    accounts: Vec<Account>,
    endpoint: Endpoint,
    stream: bool,
    counter: Counter,
    tariff: Tariff,
    /// The prompt as counted at admission.
    prompt: u64,
    /// The completion tokens reserved.
    allowance: u64,
    over_budget: OverBudget,
    /// Hide the usage chunk the client did not ask for.
    hide_usage: bool,
    /// A stream's incomplete event, or a JSON body so far.
    buf: BytesMut,
    /// A JSON body too large to keep.
    overflowed: bool,
    /// Completion tokens counted in the text so far.
    counted: u64,
    /// What the provider reported.
    usage: Option<Used>,
    /// The input the provider reported before its usage (Anthropic's `message_start`).
    input: Option<Used>,
    /// The responses API's last event number.
    sequence: Option<u64>,
    cut: bool,
    /// The upstream's body came to its end.
    reached_end: bool,
    /// The route's series, until the answer is recorded in them (`None` after, or in tests).
    metrics: Option<LlmMetrics>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("endpoint", &self.endpoint)
            .field("counted", &self.counted)
            .field("allowance", &self.allowance)
            .finish_non_exhaustive()
    }
}

/// What a meter is set up with.
#[derive(Debug)]
pub(crate) struct Metering {
    pub(crate) accounts: Vec<Account>,
    pub(crate) endpoint: Endpoint,
    pub(crate) stream: bool,
    pub(crate) counter: Counter,
    pub(crate) tariff: Tariff,
    pub(crate) prompt: u64,
    pub(crate) allowance: u64,
    pub(crate) over_budget: OverBudget,
    pub(crate) hide_usage: bool,
    pub(crate) metrics: Option<LlmMetrics>,
}

impl Meter {
    pub(crate) fn new(m: Metering) -> Meter {
        Meter {
            accounts: m.accounts,
            endpoint: m.endpoint,
            stream: m.stream,
            counter: m.counter,
            tariff: m.tariff,
            prompt: m.prompt,
            allowance: m.allowance,
            over_budget: m.over_budget,
            hide_usage: m.hide_usage,
            buf: BytesMut::new(),
            overflowed: false,
            counted: 0,
            usage: None,
            input: None,
            sequence: None,
            cut: false,
            reached_end: false,
            metrics: m.metrics,
        }
    }

    /// Whether the meter may change what is forwarded (so the upstream's length no longer holds).
    pub(crate) fn rewrites(&self) -> bool {
        self.stream
    }

    /// A piece of the upstream's body.
    pub(crate) fn data(&mut self, data: &Bytes) -> Step {
        if !self.stream {
            if !self.overflowed {
                if self.buf.len() + data.len() > MAX_JSON {
                    self.overflowed = true;
                    self.buf = BytesMut::new();
                } else {
                    self.buf.extend_from_slice(data);
                }
            }
            return Step::Pass(data.clone());
        }
        self.buf.extend_from_slice(data);
        let mut out = BytesMut::new();
        while let Some(end) = event_end(&self.buf) {
            let event = self.buf.split_to(end).freeze();
            match self.event(&event) {
                Forward::Yes if self.hide_usage => out.extend_from_slice(&without_null_usage(&event)),
                Forward::Yes => out.extend_from_slice(&event),
                Forward::Hide => {}
                Forward::Cut => {
                    self.cut = true;
                    let sequence = self.sequence.map(|n| n + 1);
                    out.extend_from_slice(
                        cut_event(self.endpoint, self.counted_before_cut(), "tokens", sequence).as_bytes(),
                    );
                    self.buf.clear();
                    return Step::End(out.freeze());
                }
            }
        }
        Step::Pass(out.freeze())
    }

    /// What is left of a stream's body at its end (an event without its blank line), forwarded as
    /// it is.
    pub(crate) fn rest(&mut self) -> Bytes {
        self.reached_end = true;
        if !self.stream || self.buf.is_empty() {
            return Bytes::new();
        }
        let event = self.buf.split().freeze();
        match self.event(&event) {
            Forward::Yes => event,
            Forward::Hide | Forward::Cut => Bytes::new(),
        }
    }

    /// The completion tokens forwarded before a cut.
    fn counted_before_cut(&self) -> u64 {
        self.counted.min(self.allowance)
    }

    /// The answer ended (or was cut, or the client went away): commits its cost, once.
    pub(crate) fn finish(&mut self) {
        let metrics = self.metrics.take();
        if metrics.is_none() && self.accounts.is_empty() {
            return;
        }
        let used = self.used();
        if let Some(metrics) = metrics {
            metrics.prompt_tokens.increment(used.prompt);
            metrics.completion_tokens.increment(used.completion);
            if let Some(micros) = self.tariff.spend(used) {
                metrics.spend.increment(micros);
            }
            if self.usage.is_none() {
                metrics.estimated.increment(1);
            }
            let end = match (self.cut, self.reached_end) {
                (true, _) => &metrics.cut,
                (false, true) => &metrics.whole,
                (false, false) => &metrics.broken,
            };
            end.increment(1);
        }
        for account in std::mem::take(&mut self.accounts) {
            account.commit(&self.tariff, used);
        }
    }

    /// What the answer used: the provider's usage, else the estimate (see the module docs).
    fn used(&mut self) -> Used {
        if !self.stream && !self.overflowed && !self.buf.is_empty() {
            let body = std::mem::take(&mut self.buf);
            self.read_json(&body);
        }
        if !self.stream && self.overflowed && self.usage.is_none() {
            return Used { prompt: self.prompt, completion: self.allowance, ..Used::default() };
        }
        match self.usage {
            // A stream cut before its usage came: what was counted, beside the input the provider
            // reported when it did.
            Some(usage) if !self.cut => usage,
            _ => {
                let input = self.input.unwrap_or(Used { prompt: self.prompt, ..Used::default() });
                Used { completion: self.counted, ..input }
            }
        }
    }

    /// The tokens of [`Meter::used`].
    #[cfg(test)]
    fn cost(&mut self) -> u64 {
        let used = self.used();
        used.prompt + used.completion
    }

    /// One whole server-sent event: counted, and whether it goes on to the client.
    fn event(&mut self, event: &[u8]) -> Forward {
        let Ok(text) = std::str::from_utf8(event) else { return Forward::Yes };
        // The data, borrowed when the event has one `data:` line (as every provider sends).
        let mut lines =
            text.lines().filter_map(|l| l.strip_prefix("data:")).map(|d| d.strip_prefix(' ').unwrap_or(d));
        let data: Cow<'_, str> = match (lines.next(), lines.next()) {
            (None, _) => return Forward::Yes,
            (Some(one), None) => Cow::Borrowed(one),
            (Some(first), Some(second)) => {
                let mut joined = format!("{first}\n{second}");
                for more in lines {
                    joined.push('\n');
                    joined.push_str(more);
                }
                Cow::Owned(joined)
            }
        };
        if data == "[DONE]" {
            return Forward::Yes;
        }
        let before = self.counted;
        let hide = match self.endpoint {
            Endpoint::Messages => {
                let Ok(event) = serde_json::from_str::<anthropic::Event<'_>>(&data) else {
                    return Forward::Yes;
                };
                let read = event.read(&self.counter, self.input);
                self.counted += read.generated;
                self.input = read.input.or(self.input);
                self.usage = read.usage.or(self.usage);
                false
            }
            Endpoint::Responses => {
                let Ok(event) = serde_json::from_str::<chunk::Event<'_>>(&data) else { return Forward::Yes };
                self.responses_event(&event);
                false
            }
            _ => {
                let Ok(chunk) = serde_json::from_str::<chunk::Chunk<'_>>(&data) else { return Forward::Yes };
                self.chunk(&chunk)
            }
        };
        if hide {
            return Forward::Hide;
        }
        if self.counted > self.allowance && self.counted > before && self.over_budget == OverBudget::Cut {
            return Forward::Cut;
        }
        Forward::Yes
    }

    /// A chunk of chat completions or completions; `true` when it is the usage chunk to hide.
    fn chunk(&mut self, chunk: &chunk::Chunk<'_>) -> bool {
        let choices = chunk.choices.as_deref().unwrap_or_default();
        for choice in choices {
            let mut n = 0;
            if let Some(part) = &choice.delta {
                for text in [&part.content, &part.refusal, &part.reasoning_content, &part.reasoning]
                    .into_iter()
                    .flatten()
                {
                    n += self.counter.count(text);
                }
                for call in part.tool_calls.iter().flatten() {
                    if let Some(args) = call.function.as_ref().and_then(|f| f.arguments.as_deref()) {
                        n += self.counter.count(args);
                    }
                }
            }
            if let Some(text) = &choice.text {
                n += self.counter.count(text);
            }
            self.counted += n;
        }
        if let Some(usage) = &chunk.usage {
            self.usage = Some(usage.used());
            return self.hide_usage && choices.is_empty();
        }
        false
    }

    /// The tokens of one choice of a whole JSON answer.
    fn choice_tokens(&self, choice: &Value) -> u64 {
        let mut n = 0;
        for part in [choice.get("delta"), choice.get("message")].into_iter().flatten() {
            for field in ["content", "refusal", "reasoning_content", "reasoning"] {
                if let Some(Value::String(text)) = part.get(field) {
                    n += self.counter.count(text);
                }
            }
            if let Some(Value::Array(calls)) = part.get("tool_calls") {
                for call in calls {
                    if let Some(Value::String(args)) = call.pointer("/function/arguments") {
                        n += self.counter.count(args);
                    }
                }
            }
        }
        if let Some(Value::String(text)) = choice.get("text") {
            n += self.counter.count(text);
        }
        n
    }

    /// An event of the responses API.
    fn responses_event(&mut self, event: &chunk::Event<'_>) {
        if let Some(n) = event.sequence_number {
            self.sequence = Some(n);
        }
        if event.kind.ends_with(".delta") {
            if let Some(delta) = &event.delta {
                self.counted += self.counter.count(delta);
            }
        } else if matches!(&*event.kind, "response.completed" | "response.incomplete" | "response.failed")
            && let Some(usage) = event.response.as_ref().and_then(|r| r.usage.as_ref())
        {
            self.usage = Some(usage.used());
        }
    }

    /// A whole JSON answer: its usage, else the tokens of its text.
    fn read_json(&mut self, body: &[u8]) {
        let Ok(value) = serde_json::from_slice::<Value>(body) else { return };
        // A whole JSON document came: the server may stop reading at its length, before the body
        // says it ended.
        self.reached_end = true;
        if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
            let usage = match self.endpoint {
                Endpoint::Responses => Some(responses_usage(usage)),
                Endpoint::Embeddings => Some(Used { completion: 0, ..chat_usage(usage) }),
                Endpoint::Messages => anthropic::usage(usage),
                Endpoint::Chat | Endpoint::Completions => Some(chat_usage(usage)),
            };
            if let Some(usage) = usage {
                self.usage = Some(usage);
                return;
            }
        }
        match self.endpoint {
            Endpoint::Responses => {
                if let Some(Value::Array(items)) = value.get("output") {
                    for item in items {
                        if let Some(Value::Array(parts)) = item.get("content") {
                            for part in parts {
                                if let Some(Value::String(text)) = part.get("text") {
                                    self.counted += self.counter.count(text);
                                }
                            }
                        }
                        if let Some(Value::String(args)) = item.get("arguments") {
                            self.counted += self.counter.count(args);
                        }
                    }
                }
            }
            Endpoint::Messages => self.counted += anthropic::content_tokens(&value, &self.counter),
            Endpoint::Embeddings => {}
            Endpoint::Chat | Endpoint::Completions => {
                if let Some(Value::Array(choices)) = value.get("choices") {
                    let n: u64 = choices.iter().map(|c| self.choice_tokens(c)).sum();
                    self.counted += n;
                }
            }
        }
    }
}

impl Drop for Meter {
    /// A body dropped before its end (the client went away): what was generated is committed.
    fn drop(&mut self) {
        self.finish();
    }
}

enum Forward {
    Yes,
    Hide,
    Cut,
}

fn number(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

/// Usage as chat completions, completions and embeddings report it.
fn chat_usage(usage: &Value) -> Used {
    Used {
        prompt: number(usage, "/prompt_tokens"),
        cached: number(usage, "/prompt_tokens_details/cached_tokens"),
        completion: number(usage, "/completion_tokens"),
        cache_write: 0,
    }
}

/// Usage as the responses API reports it.
fn responses_usage(usage: &Value) -> Used {
    Used {
        prompt: number(usage, "/input_tokens"),
        cached: number(usage, "/input_tokens_details/cached_tokens"),
        completion: number(usage, "/output_tokens"),
        cache_write: 0,
    }
}

/// `event` without the `"usage":null` that asking for usage adds to every chunk, for a client
/// that did not ask. JSON escapes the quotes of a string's content, so the bytes
/// `,"usage":null` (or `"usage":null,`) can only be the field itself.
fn without_null_usage(event: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    const TRAILING: &[u8] = b",\"usage\":null";
    const LEADING: &[u8] = b"\"usage\":null,";
    let found = |needle: &[u8]| event.windows(needle.len()).position(|w| w == needle);
    match found(TRAILING)
        .map(|at| (at, TRAILING.len()))
        .or_else(|| found(LEADING).map(|at| (at, LEADING.len())))
    {
        Some((at, len)) => {
            let mut out = Vec::with_capacity(event.len() - len);
            out.extend_from_slice(&event[..at]);
            out.extend_from_slice(&event[at + len..]);
            std::borrow::Cow::Owned(out)
        }
        None => std::borrow::Cow::Borrowed(event),
    }
}

/// The end of the first whole event in `buf` (past its blank line), if any.
fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 1 < buf.len() {
        match (buf[i], buf[i + 1]) {
            (b'\n', b'\n') => return Some(i + 2),
            (b'\r', b'\n') if buf.get(i + 2..i + 4) == Some(b"\r\n") => return Some(i + 4),
            (b'\r', b'\r') => return Some(i + 2),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(endpoint: Endpoint, allowance: u64, over: OverBudget, hide: bool) -> Meter {
        Meter::new(Metering {
            accounts: Vec::new(),
            endpoint,
            stream: true,
            counter: Counter::Bpe(tiktoken_rs::o200k_base_singleton()),
            tariff: Tariff::of(&floodgate_config::gateway::Llm::default(), "m").unwrap(),
            prompt: 10,
            allowance,
            over_budget: over,
            hide_usage: hide,
            metrics: None,
        })
    }

    fn chunk(content: &str) -> String {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{content:?}}}}}],\"usage\":null}}\n\n"
        )
    }

    const USAGE: &str = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3}}\n\n";

    fn pass(step: Step) -> String {
        match step {
            Step::Pass(b) => String::from_utf8(b.to_vec()).unwrap(),
            Step::End(_) => panic!("cut"),
        }
    }

    #[test]
    fn events_split_across_pieces_are_counted_once_whole() {
        let mut m = meter(Endpoint::Chat, 100, OverBudget::Cut, false);
        let text = format!("{}{}{USAGE}data: [DONE]\n\n", chunk(" river"), chunk(" stone"));
        let (a, b) = text.split_at(17);
        let mut out = pass(m.data(&Bytes::from(a.to_owned())));
        assert_eq!(out, "", "nothing whole yet");
        out += &pass(m.data(&Bytes::from(b.to_owned())));
        assert_eq!(out, text);
        assert_eq!(m.counted, 2);
        assert_eq!(m.cost(), 15, "the provider's usage wins");
    }

    #[test]
    fn the_usage_chunk_the_client_did_not_ask_for_is_hidden() {
        let mut m = meter(Endpoint::Chat, 100, OverBudget::Cut, true);
        let text = format!("{}{USAGE}data: [DONE]\n\n", chunk(" river"));
        let without = chunk(" river").replace(",\"usage\":null", "");
        assert_eq!(pass(m.data(&Bytes::from(text))), format!("{without}data: [DONE]\n\n"));
        assert_eq!(m.cost(), 15);
        let quoted = "data: {\"choices\":[{\"delta\":{\"content\":\",\\\"usage\\\":null\"}}]}\n\n";
        assert_eq!(&*without_null_usage(quoted.as_bytes()), quoted.as_bytes(), "text that quotes it is kept");
    }

    #[test]
    fn a_stream_past_its_allowance_is_cut_under_cut_and_forwarded_under_finish() {
        let text = format!("{}{}{}", chunk(" river"), chunk(" stone"), chunk(" light"));
        let mut m = meter(Endpoint::Chat, 2, OverBudget::Cut, false);
        match m.data(&Bytes::from(text.clone())) {
            Step::End(bytes) => {
                let out = String::from_utf8(bytes.to_vec()).unwrap();
                assert!(out.starts_with(&format!("{}{}", chunk(" river"), chunk(" stone"))), "{out}");
                assert!(out.contains("\"error\"") && !out.contains(" light"), "{out}");
            }
            Step::Pass(_) => panic!("not cut"),
        }
        assert_eq!(m.cost(), 10 + 3, "the cut chunk was generated: charged");
        let mut m = meter(Endpoint::Chat, 2, OverBudget::Finish, false);
        assert_eq!(pass(m.data(&Bytes::from(text.clone()))), text);
        assert_eq!(m.cost(), 13);
    }

    #[test]
    fn the_responses_api_is_counted_from_its_deltas_and_completed_event() {
        let mut m = meter(Endpoint::Responses, 100, OverBudget::Cut, false);
        let text = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\" river\",\"sequence_number\":4}\n\n";
        pass(m.data(&Bytes::from(text)));
        assert_eq!(m.cost(), 11, "the estimate while no usage came");
        let done = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}},\"sequence_number\":5}\n\n";
        pass(m.data(&Bytes::from(done)));
        assert_eq!(m.cost(), 10);
    }

    fn event(kind: &str, data: &str) -> String {
        format!("event: {kind}\ndata: {data}\n\n")
    }

    fn messages_stream(words: &[&str]) -> String {
        let mut text = event(
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":9,"cache_read_input_tokens":3,"output_tokens":1}}}"#,
        );
        text += &event(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        );
        text += &event("ping", r#"{"type": "ping"}"#);
        for word in words {
            let delta = serde_json::json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": word}});
            text += &event("content_block_delta", &delta.to_string());
        }
        text
    }

    fn messages_end(output: u64) -> String {
        let delta = format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"end_turn","stop_sequence":null}},"usage":{{"output_tokens":{output}}}}}"#
        );
        event("content_block_stop", r#"{"type":"content_block_stop","index":0}"#)
            + &event("message_delta", &delta)
            + &event("message_stop", r#"{"type":"message_stop"}"#)
    }

    #[test]
    fn a_messages_stream_is_counted_as_it_flows_and_charged_its_final_usage() {
        let mut m = meter(Endpoint::Messages, 100, OverBudget::Cut, false);
        let text = messages_stream(&[" river", " stone"]);
        assert_eq!(pass(m.data(&Bytes::from(text.clone()))), text);
        assert_eq!(m.counted, 2);
        assert_eq!(m.cost(), 12 + 2, "the input the provider reported, and the text counted");
        let end = messages_end(5);
        assert_eq!(pass(m.data(&Bytes::from(end.clone()))), end);
        assert_eq!(m.used(), Used { prompt: 12, cached: 3, cache_write: 0, completion: 5 });
    }

    #[test]
    fn a_messages_stream_past_its_allowance_ends_with_anthropics_error_event() {
        let mut m = meter(Endpoint::Messages, 2, OverBudget::Cut, false);
        let text = messages_stream(&[" river", " stone", " light"]);
        let Step::End(bytes) = m.data(&Bytes::from(text)) else { panic!("not cut") };
        let out = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(out.contains(" stone") && !out.contains(" light"), "{out}");
        let last = out.trim_end().rsplit("\n\n").next().unwrap();
        let data = last.strip_prefix("event: error\ndata: ").expect(last);
        let error: Value = serde_json::from_str(data).unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "rate_limit_error");
        assert_eq!(m.cost(), 12 + 3, "the crossing delta was generated: charged");
    }

    #[test]
    fn a_json_answer_without_usage_is_charged_its_text() {
        let mut m = meter(Endpoint::Chat, 100, OverBudget::Cut, false);
        m.stream = false;
        let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":" river stone"}}]}"#;
        pass(m.data(&Bytes::from(body)));
        assert_eq!(m.cost(), 10 + 2);
    }
}
