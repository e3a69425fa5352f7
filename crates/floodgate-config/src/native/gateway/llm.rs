//! `llm:` on a route: the route speaks a model API, and its token budgets are reserved at admission
//! and charged from what the model really generated (DESIGN.md §16).

use std::time::Duration;

use crate::error::Invalid;
use crate::native::positive_duration;
use crate::yaml::{Item, did_you_mean};

/// The model API an LLM route speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LlmApi {
    /// OpenAI's: chat completions, completions, responses and embeddings (what most providers and
    /// local servers speak).
    #[default]
    OpenAi,
    /// Anthropic's Messages API (`POST …/v1/messages`; `…/v1/messages/count_tokens` is proxied
    /// unmetered).
    Anthropic,
}

/// What happens when the completion allowance a request asks for is more than its budgets have left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenShort {
    /// Rewrite the request's allowance to what is left, when that is at least
    /// `min_completion_tokens` (the default).
    #[default]
    Cap,
    /// Refuse it: 429 with the exact `Retry-After`.
    Deny,
}

/// What happens to a stream that generates more than its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverBudget {
    /// Stop forwarding at the budget, end the stream with an error event in the API's format.
    #[default]
    Cut,
    /// Let it end; what it generated past its reservation is charged when it ends.
    Finish,
}

/// The completion allowance: what a request may generate, reserved at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    /// Reserved for a request that names no `max_tokens`, `max_completion_tokens` or
    /// `max_output_tokens` (default 1024).
    pub default_max_tokens: u64,
    /// The smallest allowance worth a call (default 16): under `cap`, a request whose budgets
    /// have less than this left past its prompt is refused.
    pub min_completion_tokens: u64,
    /// The largest allowance a request may ask for (default 1,000,000): above it, 400.
    pub max_tokens: u64,
    /// `cap` (default) or `deny`.
    pub when_short: WhenShort,
}

impl Default for Allowance {
    fn default() -> Self {
        Allowance {
            default_max_tokens: 1024,
            min_completion_tokens: 16,
            max_tokens: 1_000_000,
            when_short: WhenShort::Cap,
        }
    }
}

/// How a model's text is counted when its encoding is not known.
#[derive(Debug, Clone, PartialEq)]
pub enum Tokenizer {
    /// OpenAI's `o200k_base`.
    O200k,
    /// OpenAI's `cl100k_base`.
    Cl100k,
    /// One token per this many characters, rounded up (a documented estimate).
    CharsPerToken(f64),
}

/// What a model costs, in dollars per million tokens (so that one token costs this many
/// micro-dollars).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// A prompt token not read from the provider's cache.
    pub input: f64,
    /// A prompt token read from the provider's cache (default: `input`).
    pub cached_input: f64,
    /// A generated token.
    pub output: f64,
    /// A prompt token written to the provider's cache (Anthropic's `cache_creation_input_tokens`;
    /// default: `input`).
    pub cache_write: f64,
}

/// One of an LLM route's upstreams, tried in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmUpstream {
    /// Where it is.
    pub upstream: super::Upstream,
    /// The rule holding its quota (a provider's tokens or requests per minute), if any: a call goes
    /// there only when the rule has room for it, and the provider's 429 spends what the rule has
    /// left, so that the next calls go elsewhere until it refills.
    pub quota_rule: Option<String>,
}

/// A route's LLM settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Llm {
    /// The API it speaks (`openai` or `anthropic`).
    pub api: LlmApi,
    /// The completion allowance.
    pub allowance: Allowance,
    /// What a stream that generates more than its budget gets (default `cut`).
    pub over_budget_mid_stream: OverBudget,
    /// The cost dimension tokens are counted in (default `tokens`): the rules with `cost: tokens`.
    pub dimension: String,
    /// Tokenizers by model name, in order: a name ending in `*` is a prefix. Models that no entry
    /// names use OpenAI's encoding for the model when known (o200k for `gpt-4o`, `gpt-4.1`,
    /// `gpt-4.5`, `gpt-5`, `o1`, `o3`, `o4`; cl100k for `gpt-4`, `gpt-3.5-turbo` and
    /// `text-embedding-*`), else `chars_per_token`.
    pub tokenizers: Vec<(String, Tokenizer)>,
    /// The fallback for a model with no known encoding: one token per this many characters
    /// (default 3, a cautious figure: English averages about 4 characters per token).
    pub chars_per_token: f64,
    /// The largest request body read (default 4 MiB; larger: 413).
    pub max_body: usize,
    /// How long an admitted call's reservation lasts when the call never ends (default 10m): past
    /// it, it stays charged its estimate.
    pub reservation_ttl: Duration,
    /// Prices by model name, in order (a name ending in `*` is a prefix). When any is set, every
    /// metered call is priced in `price_dimension`, and a model with no price is refused.
    pub prices: Vec<(String, Price)>,
    /// The cost dimension spend is counted in, in micro-dollars (default `usd_micros`: a rule with
    /// `cost: usd_micros` and `limit: 50000000` is a $50 budget).
    pub price_dimension: String,
    /// The upstreams, in order (empty: the route's `upstream` alone). A call that one answers with
    /// 429 or a 5xx, or cannot reach, or whose breaker is open, or whose quota rule has no room,
    /// goes to the next, its reservation carried over.
    pub upstreams: Vec<LlmUpstream>,
}

impl Llm {
    /// The price of `model`, by the first entry of `prices` that names it.
    pub fn price(&self, model: &str) -> Option<Price> {
        self.prices.iter().find(|(name, _)| matches_model(name, model)).map(|(_, price)| *price)
    }

    /// The configured tokenizer of `model`, by the first entry of `tokenizers` that names it.
    pub fn tokenizer(&self, model: &str) -> Option<&Tokenizer> {
        self.tokenizers.iter().find(|(name, _)| matches_model(name, model)).map(|(_, t)| t)
    }
}

/// Whether an entry named `name` (a prefix when it ends in `*`) names `model`.
fn matches_model(name: &str, model: &str) -> bool {
    match name.strip_suffix('*') {
        Some(prefix) => model.starts_with(prefix),
        None => model == name,
    }
}

impl Default for Llm {
    fn default() -> Self {
        Llm {
            api: LlmApi::OpenAi,
            allowance: Allowance::default(),
            over_budget_mid_stream: OverBudget::Cut,
            dimension: "tokens".to_owned(),
            tokenizers: Vec::new(),
            chars_per_token: 3.0,
            max_body: 4 << 20,
            reservation_ttl: Duration::from_secs(600),
            prices: Vec::new(),
            price_dimension: "usd_micros".to_owned(),
            upstreams: Vec::new(),
        }
    }
}

const FIELDS: &[&str] = &[
    "api",
    "allowance",
    "over_budget_mid_stream",
    "dimension",
    "tokenizers",
    "chars_per_token",
    "max_body",
    "reservation_ttl",
    "prices",
    "price_dimension",
    "upstreams",
];

/// Reads a route's `llm:` section; its upstreams' quota rules must be among `rules`.
pub(super) fn llm(item: Item<'_>, rules: &[floodgate::Rule]) -> Result<Llm, Invalid> {
    let fields = item.fields("the LLM settings", Some(FIELDS))?;
    let mut llm = Llm::default();
    let api = fields.require("api", "the model API the route speaks: api: openai, or api: anthropic")?;
    llm.api = match api.str("a model API")? {
        "openai" => LlmApi::OpenAi,
        "anthropic" => LlmApi::Anthropic,
        other => {
            return Err(api.error(format!(
                "unknown model API {other:?}: expected openai (OpenAI-compatible) or anthropic (Anthropic's \
                 Messages API){}",
                did_you_mean(other, ["openai", "anthropic"])
            )));
        }
    };
    if let Some(a) = fields.get("allowance").filter(|i| !i.is_null()) {
        llm.allowance = allowance(a)?;
    }
    if let Some(o) = fields.get("over_budget_mid_stream") {
        llm.over_budget_mid_stream = match o.str("cut or finish")? {
            "cut" => OverBudget::Cut,
            "finish" => OverBudget::Finish,
            other => {
                return Err(o.error(format!(
                    "unknown over_budget_mid_stream {other:?}: expected cut or finish{}",
                    did_you_mean(other, ["cut", "finish"])
                )));
            }
        };
    }
    if let Some(d) = fields.get("dimension") {
        llm.dimension = dimension(&d, "tokens")?;
    }
    if let Some(d) = fields.get("price_dimension") {
        llm.price_dimension = dimension(&d, "usd_micros")?;
    }
    if llm.dimension == llm.price_dimension {
        let at = fields.get("price_dimension").or_else(|| fields.get("dimension")).unwrap_or(item.clone());
        return Err(
            at.error("dimension and price_dimension are the same: tokens and spend are counted apart")
        );
    }
    if let Some(p) = fields.get("prices").filter(|i| !i.is_null()) {
        let map = p.fields("prices by model name", None)?;
        for (name, _, value) in map.iter() {
            if name.is_empty() || name == "*" {
                return Err(value.error("a model name (or a prefix ending in *) is needed"));
            }
            llm.prices.push((name.to_owned(), price(&value)?));
        }
    }
    if let Some(c) = fields.get("chars_per_token") {
        llm.chars_per_token = chars_per_token(&c)?;
    }
    if let Some(t) = fields.get("tokenizers").filter(|i| !i.is_null()) {
        let map = t.fields("tokenizers by model name", None)?;
        for (name, _, value) in map.iter() {
            if name.is_empty() || name == "*" {
                return Err(value.error("a model name (or a prefix ending in *) is needed"));
            }
            let tokenizer = if value.is_map() {
                let f = value.fields("a tokenizer", Some(&["chars_per_token"]))?;
                let c = f.require("chars_per_token", "chars_per_token: 3.5")?;
                Tokenizer::CharsPerToken(chars_per_token(&c)?)
            } else {
                match value.str("o200k, cl100k or {chars_per_token: N}")? {
                    "o200k" | "o200k_base" => Tokenizer::O200k,
                    "cl100k" | "cl100k_base" => Tokenizer::Cl100k,
                    other => {
                        return Err(value.error(format!(
                            "unknown tokenizer {other:?}: expected o200k, cl100k or {{chars_per_token: N}}{}",
                            did_you_mean(other, ["o200k", "cl100k"])
                        )));
                    }
                }
            };
            llm.tokenizers.push((name.to_owned(), tokenizer));
        }
    }
    if let Some(m) = fields.get("max_body") {
        llm.max_body = super::size(&m, "max_body")?;
    }
    if let Some(list) = fields.get("upstreams").filter(|i| !i.is_null()) {
        let elements = list.elements("a list of upstreams")?;
        if elements.is_empty() {
            return Err(
                list.error("upstreams is an empty list: name at least one, or use the route's upstream")
            );
        }
        for element in elements {
            let upstream = super::upstream::upstream_with(element.clone(), &["quota_rule"])?;
            let quota_rule = match element
                .is_map()
                .then(|| element.fields("an upstream", None))
                .transpose()?
            {
                Some(f) => match f.get("quota_rule") {
                    Some(q) => {
                        let name = q.str("a rule's name")?;
                        if !rules.iter().any(|r| r.name() == name) {
                            return Err(q.error(format!(
                                "quota_rule {name:?} names no rule{}",
                                did_you_mean(name, rules.iter().map(|r| r.name()))
                            )));
                        }
                        if llm.upstreams.iter().any(|u: &LlmUpstream| u.quota_rule.as_deref() == Some(name)) {
                            return Err(q.error(format!("quota_rule {name:?} is already another upstream's")));
                        }
                        Some(name.to_owned())
                    }
                    None => None,
                },
                None => None,
            };
            llm.upstreams.push(LlmUpstream { upstream, quota_rule });
        }
    }
    if let Some(t) = fields.get("reservation_ttl") {
        let ttl = positive_duration(t.clone(), "reservation_ttl")?;
        if ttl > Duration::from_secs(24 * 3600) {
            return Err(t.error("reservation_ttl: at most 24h"));
        }
        llm.reservation_ttl = ttl;
    }
    Ok(llm)
}

/// A cost dimension name other than `requests`.
fn dimension(item: &Item<'_>, example: &str) -> Result<String, Invalid> {
    let name = item.str("a cost dimension")?;
    if !floodgate::cost::valid_dimension(name) || name == floodgate::cost::REQUESTS {
        return Err(item.error(format!(
            "invalid dimension {name:?}: a cost dimension other than requests, lowercase letters, digits and _ \
             (e.g. {example})"
        )));
    }
    Ok(name.to_owned())
}

/// `{input, cached_input, cache_write, output}`: dollars per million tokens.
fn price(item: &Item<'_>) -> Result<Price, Invalid> {
    let fields = item.fields(
        "a price ($ per million tokens)",
        Some(&["input", "cached_input", "cache_write", "output"]),
    )?;
    let dollars = |field: &str| -> Result<Option<f64>, Invalid> {
        let Some(value) = fields.get(field) else { return Ok(None) };
        match value.number().filter(|n| n.is_finite() && *n >= 0.0 && *n <= 100_000.0) {
            Some(n) => Ok(Some(n)),
            None => Err(value.error(format!(
                "invalid {field} price {}: dollars per million tokens, from 0 to 100000, e.g. 0.15",
                value.node.describe()
            ))),
        }
    };
    let input = dollars("input")?.ok_or_else(|| {
        item.missing("input", "missing field \"input\": dollars per million prompt tokens, e.g. 0.15")
    })?;
    let output = dollars("output")?.ok_or_else(|| {
        item.missing("output", "missing field \"output\": dollars per million generated tokens, e.g. 0.60")
    })?;
    let cached_input = dollars("cached_input")?.unwrap_or(input);
    let cache_write = dollars("cache_write")?.unwrap_or(input);
    Ok(Price { input, cached_input, output, cache_write })
}

fn chars_per_token(item: &Item<'_>) -> Result<f64, Invalid> {
    match item.number().filter(|n| n.is_finite() && *n >= 0.5 && *n <= 100.0) {
        Some(n) => Ok(n),
        None => Err(item.error(format!(
            "invalid chars_per_token {}: a number of characters per token from 0.5 to 100, e.g. 3.5",
            item.node.describe()
        ))),
    }
}

fn allowance(item: Item<'_>) -> Result<Allowance, Invalid> {
    let fields = item.fields(
        "the completion allowance",
        Some(&["default_max_tokens", "min_completion_tokens", "max_tokens", "when_short"]),
    )?;
    let mut allowance = Allowance::default();
    if let Some(d) = fields.get("default_max_tokens") {
        allowance.default_max_tokens = d.u64_at_least("default_max_tokens", 1)?;
    }
    if let Some(m) = fields.get("min_completion_tokens") {
        allowance.min_completion_tokens = m.u64_at_least("min_completion_tokens", 1)?;
    }
    if let Some(m) = fields.get("max_tokens") {
        allowance.max_tokens = m.u64_at_least("max_tokens", 1)?;
    }
    if let Some(w) = fields.get("when_short") {
        allowance.when_short = match w.str("cap or deny")? {
            "cap" => WhenShort::Cap,
            "deny" => WhenShort::Deny,
            other => {
                return Err(w.error(format!(
                    "unknown when_short {other:?}: expected cap or deny{}",
                    did_you_mean(other, ["cap", "deny"])
                )));
            }
        };
    }
    if allowance.min_completion_tokens > allowance.default_max_tokens {
        let at = fields.get("min_completion_tokens").unwrap_or(item.clone());
        return Err(at.error("min_completion_tokens is above default_max_tokens"));
    }
    if allowance.default_max_tokens > allowance.max_tokens {
        let at = fields.get("default_max_tokens").unwrap_or(item.clone());
        return Err(at.error("default_max_tokens is above max_tokens"));
    }
    Ok(allowance)
}
