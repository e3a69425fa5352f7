//! LLM routes (`llm: {api: openai}` or `{api: anthropic}`, DESIGN.md §16): the traffic that costs
//! money, metered on the wire.
//!
//! ```text
//!  request ─► endpoint of the path in the route's dialect (dialect.rs: OpenAI's chat completions,
//!             completions, responses, embeddings; Anthropic's messages; any other path is
//!             proxied as on any route)
//!     ─► body read (up to `max_body`), checked: JSON, a model, sane limits (else 400, in the
//!        dialect's error format)
//!     ─► prompt tokens counted (tokens.rs; anthropic.rs estimates Anthropic's) + the completion
//!        allowance (the request's max_tokens / max_completion_tokens / max_output_tokens, or
//!        `default_max_tokens`; Anthropic's max_tokens is required)
//!     ─► one reservation on every rule after verification and every token rule (admission.rs):
//!        allowed; or capped to what is left (`cap`); or 429 with the exact wait
//!     ─► the request bounded at its allowance, a stream asked for its usage (request.rs)
//!     ─► upstream ─► the answer metered as it flows, committed when it ends (meter.rs; each
//!        endpoint's usage and stream events read its way: chunk.rs, anthropic.rs); an answer
//!        that is not a success releases the reservation
//! ```
//!
//! The reservation's verdict gives the rate-limit headers, so `x-ratelimit-remaining-tokens`
//! counts what calls in flight hold. `floodgate-allowance` says what the call may generate, and
//! `capped-from=` what it asked for when that was capped.

mod admission;
mod anthropic;
mod chunk;
mod counter;
mod dialect;
mod endpoint;
mod failover;
mod meter;
mod request;
mod respond;
mod tariff;
mod tokens;

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use floodgate::{Descriptors, Verdict};
use floodgate_app::App;
use floodgate_config::gateway::Llm;
use floodgate_http::HeaderStyle;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

pub(crate) use self::dialect::Dialect;
pub(crate) use self::endpoint::Endpoint;
pub(crate) use self::failover::{Hold, Request as Attempts, Tried, call_in_order};
pub(crate) use self::meter::{Meter, Step};

use self::admission::{Estimate, admit};
use self::counter::Counter;
use self::meter::{Account, Metering};
use self::request::LlmRequest;
use self::tariff::Tariff;
use crate::metrics::LlmMetrics;
use crate::routes::RouteTable;
use crate::state::GatewayState;

/// The header saying what the call may generate: `300`, or `300; capped-from=1024`.
pub(crate) const ALLOWANCE_HEADER: HeaderName = HeaderName::from_static("floodgate-allowance");

/// An admitted call, until its answer comes.
#[derive(Debug)]
pub(crate) struct Call {
    /// The reservation's verdict, for the rate-limit headers.
    pub(crate) verdict: Verdict,
    /// The dialect it speaks.
    pub(crate) dialect: Dialect,
    /// The body to send upstream.
    pub(crate) body: Bytes,
    endpoint: Endpoint,
    stream: bool,
    prompt: u64,
    allowance: u64,
    capped_from: Option<u64>,
    counter: Counter,
    tariff: Tariff,
    hide_usage: bool,
    reservation: Option<String>,
    /// The descriptors it was reserved with (the model among them).
    descriptors: Descriptors,
    /// The route's LLM series.
    metrics: LlmMetrics,
}

/// Reads, counts and admits a request to `endpoint` on a route with `llm`; the answer to send
/// instead when it is refused. Counted in the route's LLM series (`metrics`).
#[allow(clippy::too_many_arguments)] // the request's parts, as the handler holds them
pub(crate) async fn admit_call(
    gateway: &GatewayState,
    table: &RouteTable,
    tier: u8,
    llm: &Llm,
    endpoint: Endpoint,
    descriptors: &Descriptors,
    body: Body,
    style: HeaderStyle,
    metrics: &LlmMetrics,
) -> Result<Call, Response> {
    let dialect = endpoint.dialect();
    let admitted: Result<Call, Response> = async {
        let limited = http_body_util::Limited::new(body, llm.max_body);
        let raw = match http_body_util::BodyExt::collect(limited).await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
                return Err(respond::too_large(dialect, llm.max_body).into_response());
            }
            Err(e) => {
                let message = format!("The request body could not be read: {e}.");
                return Err(respond::invalid(dialect, message, None).into_response());
            }
        };
        let mut request = LlmRequest::parse(endpoint, raw, &llm.allowance).map_err(|r| r.into_response())?;
        let Ok(tariff) = Tariff::of(llm, &request.model) else {
            let message = format!(
                "The model `{}` has no price on this gateway, and every call here is priced.",
                request.model
            );
            return Err(respond::unpriced(dialect, message).into_response());
        };
        // Rules may count per model (`key: [tenant, model]`).
        let mut descriptors = descriptors.clone();
        descriptors.insert(crate::policies::MODEL_DESCRIPTOR, request.model.clone());
        let counter = tokens::counter(llm, &request.model);
        let prompt = tokens::prompt_tokens(endpoint, request.body(), &counter);
        let generates = endpoint.generates();
        let wanted = if generates { request.asked.unwrap_or(llm.allowance.default_max_tokens) } else { 0 };
        let estimate =
            Estimate { descriptors: &descriptors, prompt, wanted, generates, tariff: &tariff, dialect };
        let admitted = admit(gateway, &table.policies.metered, llm, estimate, style, tier).await?;
        // A plan past its limit switches the call to a smaller model: the upstream is asked for it,
        // and it is counted and priced as that model (its price when it has one, else the one asked
        // for); `floodgate-degrade` says so, to the upstream and the client.
        let (mut counter, mut tariff) = (counter, tariff);
        if let Some(model) = admitted.verdict.degrade_to().filter(|m| *m != request.model) {
            request.set_model(model);
            counter = tokens::counter(llm, model);
            if let Ok(priced) = Tariff::of(llm, model) {
                tariff = priced;
            }
        }
        if generates {
            request.bound(admitted.allowance);
        }
        let hide_usage = request.ask_usage();
        let stream = request.stream;
        Ok(Call {
            verdict: admitted.verdict,
            dialect,
            body: request.into_bytes(),
            endpoint,
            stream,
            prompt,
            allowance: admitted.allowance,
            capped_from: admitted.capped_from,
            counter,
            tariff,
            hide_usage,
            reservation: admitted.reservation,
            descriptors,
            metrics: metrics.clone(),
        })
    }
    .await;
    match &admitted {
        Ok(call) => {
            let counter = if call.capped_from.is_some() { &metrics.capped } else { &metrics.admitted };
            counter.increment(1);
            metrics.reserved_tokens.increment(call.prompt + call.allowance);
        }
        Err(refusal) => {
            let counter = match refusal.status() {
                StatusCode::TOO_MANY_REQUESTS => &metrics.refused,
                status if status.is_server_error() => &metrics.unavailable,
                _ => &metrics.invalid,
            };
            counter.increment(1);
        }
    }
    admitted
}

impl Call {
    /// `floodgate-allowance` on the answer, for a call that generates.
    pub(crate) fn allowance_header(&self, headers: &mut HeaderMap) {
        if !self.endpoint.generates() {
            return;
        }
        let value = match self.capped_from {
            Some(asked) => format!("{}; capped-from={asked}", self.allowance),
            None => self.allowance.to_string(),
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(ALLOWANCE_HEADER, value);
        }
    }

    /// What the call was reserved: its prompt and whole allowance, per dimension.
    pub(crate) fn estimate(&self) -> floodgate::Costs {
        let used =
            tariff::Used { prompt: self.prompt, completion: self.allowance, ..tariff::Used::default() };
        self.tariff.costs(used, true)
    }

    /// The meter of the upstream's answer of `status` (`hold`: the quota reservation of the
    /// upstream that gave it): a success is metered and committed when it ends; anything else
    /// generated nothing, and the reservations are released now.
    pub(crate) fn answered(
        self,
        status: StatusCode,
        app: &App,
        table: &Arc<RouteTable>,
        llm: &Llm,
        hold: Option<Hold>,
    ) -> Option<Meter> {
        let mut accounts: Vec<Account> = self
            .reservation
            .map(|reservation| Account {
                app: app.clone(),
                table: Arc::clone(table),
                reservation,
                quota: None,
            })
            .into_iter()
            .collect();
        accounts.extend(hold.map(|h| h.account(app, table)));
        if !status.is_success() {
            self.metrics.released.increment(1);
            for account in accounts {
                account.release();
            }
            return None;
        }
        Some(Meter::new(Metering {
            accounts,
            endpoint: self.endpoint,
            stream: self.stream,
            counter: self.counter,
            tariff: self.tariff,
            prompt: self.prompt,
            allowance: self.allowance,
            over_budget: llm.over_budget_mid_stream,
            hide_usage: self.hide_usage,
            metrics: Some(self.metrics),
        }))
    }

    /// The call never reached an answer (the upstream failed, or every upstream was skipped):
    /// nothing was generated.
    pub(crate) fn failed(self, app: &App, table: &Arc<RouteTable>, llm: &Llm) {
        drop(self.answered(StatusCode::BAD_GATEWAY, app, table, llm, None));
    }
}
