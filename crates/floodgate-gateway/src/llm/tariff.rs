//! What a call costs in each dimension an LLM route charges: `requests` (1), tokens (its prompt and
//! what it generates), and with a price table, spend in micro-dollars — a price in dollars per
//! million tokens being the micro-dollars one token costs: a prompt token at `input`, one read
//! from the provider's cache at `cached_input`, one written to it (Anthropic's
//! `cache_creation_input_tokens`) at `cache_write`, a generated token at `output`. Each call's
//! spend is rounded up to the micro-dollar.

use floodgate::Costs;
use floodgate::cost::REQUESTS;
use floodgate_config::gateway::{Llm, Price};

/// The prices of one call's model, and the dimensions it is charged in.
#[derive(Debug, Clone)]
pub(crate) struct Tariff {
    tokens: String,
    money: Option<(String, Price)>,
}

/// What one call used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Used {
    /// Prompt tokens, those read from the provider's cache included.
    pub(crate) prompt: u64,
    /// Of which read from the cache.
    pub(crate) cached: u64,
    /// Of which written to the cache (Anthropic's prompt caching).
    pub(crate) cache_write: u64,
    /// Generated tokens.
    pub(crate) completion: u64,
}

impl Tariff {
    /// The tariff of `model` on a route with `llm`: `Err` when the route has prices and none for it.
    pub(crate) fn of(llm: &Llm, model: &str) -> Result<Tariff, ()> {
        let money = match llm.prices.is_empty() {
            true => None,
            false => Some((llm.price_dimension.clone(), llm.price(model).ok_or(())?)),
        };
        Ok(Tariff { tokens: llm.dimension.clone(), money })
    }

    /// The tokens dimension.
    pub(crate) fn tokens(&self) -> &str {
        &self.tokens
    }

    /// The micro-dollars `used` costs, when the route has prices.
    pub(crate) fn spend(&self, used: Used) -> Option<u64> {
        self.money.as_ref().map(|(_, price)| Tariff::micros(price, used))
    }

    /// The micro-dollars of `used`, rounded up.
    fn micros(price: &Price, used: Used) -> u64 {
        let cached = used.cached.min(used.prompt);
        let written = used.cache_write.min(used.prompt - cached);
        let dollars_per_million = (used.prompt - cached - written) as f64 * price.input
            + cached as f64 * price.cached_input
            + written as f64 * price.cache_write
            + used.completion as f64 * price.output;
        // A price in $ per million tokens is µ$ per token. The small epsilon keeps an exact product
        // (150.0000000001 from floating point) from rounding up a micro-dollar.
        (dollars_per_million - 1e-9).ceil().max(0.0) as u64
    }

    /// What `used` costs, per dimension, with `requests` when `request` (a reservation; a commit
    /// leaves the request as it was reserved).
    pub(crate) fn costs(&self, used: Used, request: bool) -> Costs {
        let mut costs = Costs::new();
        if request {
            costs.set(REQUESTS, 1);
        }
        costs.set(self.tokens.as_str(), used.prompt + used.completion);
        if let Some((dimension, price)) = &self.money {
            costs.set(dimension.as_str(), Tariff::micros(price, used));
        }
        costs
    }

    /// The most a call of `prompt` tokens may generate within `left` of `dimension`; `None` when
    /// the dimension is not one this tariff charges (requests, say: no allowance changes it).
    pub(crate) fn affordable(&self, dimension: &str, left: u64, prompt: u64) -> Option<u64> {
        if dimension == self.tokens {
            return Some(left.saturating_sub(prompt));
        }
        let (money, price) = self.money.as_ref()?;
        if dimension != money {
            return None;
        }
        let prompt_cost = Tariff::micros(price, Used { prompt, ..Used::default() });
        let rest = left.saturating_sub(prompt_cost);
        if price.output <= 0.0 {
            return Some(u64::MAX);
        }
        // The most completion tokens whose cost, added to the prompt's, stays within `left`.
        let mut n = (rest as f64 / price.output).floor() as u64;
        while n > 0 && Tariff::micros(price, Used { prompt, completion: n, ..Used::default() }) > left {
            n -= 1;
        }
        Some(n)
    }

    /// What `dimension` costs a call of `prompt` tokens and `allowance`.
    pub(crate) fn cost_in(&self, dimension: &str, prompt: u64, allowance: u64) -> u64 {
        self.costs(Used { prompt, completion: allowance, ..Used::default() }, true).get(dimension)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tariff() -> Tariff {
        let price = Price { input: 0.15, cached_input: 0.075, output: 0.60, cache_write: 0.1875 };
        Tariff { tokens: "tokens".into(), money: Some(("usd_micros".into(), price)) }
    }

    #[test]
    fn a_price_per_million_tokens_is_micro_dollars_per_token() {
        let costs = tariff().costs(Used { prompt: 1000, completion: 100, ..Used::default() }, true);
        assert_eq!(costs.get("requests"), 1);
        assert_eq!(costs.get("tokens"), 1100);
        assert_eq!(costs.get("usd_micros"), 150 + 60);
        let cached = tariff().costs(Used { prompt: 1000, cached: 400, ..Used::default() }, false);
        assert_eq!(cached.get("usd_micros"), 90 + 30, "600 at 0.15 and 400 at 0.075");
        assert!(!cached.names("requests"));
        let odd = tariff().costs(Used { prompt: 1, completion: 1, ..Used::default() }, false);
        assert_eq!(odd.get("usd_micros"), 1, "0.75 µ$ rounds up");
        let written =
            tariff().costs(Used { prompt: 1000, cached: 200, cache_write: 400, completion: 0 }, false);
        assert_eq!(
            written.get("usd_micros"),
            60 + 15 + 75,
            "400 at 0.15, 200 at 0.075, 400 written at 0.1875"
        );
    }

    #[test]
    fn the_allowance_that_fits_what_is_left_of_each_dimension() {
        let t = tariff();
        assert_eq!(t.affordable("tokens", 500, 100), Some(400));
        // 1000 µ$ left, a prompt of 1000 tokens costs 150: 850 µ$ buy 1416 tokens at 0.60.
        assert_eq!(t.affordable("usd_micros", 1000, 1000), Some(1416));
        assert!(t.cost_in("usd_micros", 1000, 1416) <= 1000 && t.cost_in("usd_micros", 1000, 1417) > 1000);
        assert_eq!(t.affordable("requests", 10, 100), None);
        assert_eq!(t.affordable("usd_micros", 100, 1000), Some(0), "not even the prompt");
    }
}
