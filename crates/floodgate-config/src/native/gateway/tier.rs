//! The priority tiers of requests waiting under `action: delay`: `delay_queue:` (the tiers'
//! weights and their aging, gateway-wide) and each route's `tier:` (where a request's tier comes
//! from: a header, or the plan of its identity).

use std::collections::BTreeMap;

use floodgate::delay::Fairness;
use http::HeaderName;

use crate::error::Invalid;
use crate::native::positive_duration;
use crate::yaml::{Item, did_you_mean};

/// Where a route's requests get their priority tier (`tier:`), 0 the highest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    /// Where the tier comes from.
    pub from: TierFrom,
    /// The tier of a request whose source gives none: no header, or a plan not listed (default the
    /// lowest tier).
    pub default: u8,
}

/// The source of a request's tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierFrom {
    /// `from: header`: the request header `name`, a tier number. A value that is not a tier is
    /// answered 400, naming the header.
    Header(HeaderName),
    /// `from: plan`: the request's `plan` descriptor (the verified token's plan claim, or the
    /// identity header), through `plans` (plan → tier).
    Plan(BTreeMap<String, u8>),
}

/// `delay_queue: {weights, aging}`.
pub(super) fn fairness(item: Item<'_>) -> Result<Fairness, Invalid> {
    let fields = item.fields("the delay queue settings", Some(&["weights", "aging"]))?;
    let mut weights: Vec<u32> = Fairness::DEFAULT_WEIGHTS.to_vec();
    let mut aging = Fairness::DEFAULT_AGING;
    let weights_item = fields.get("weights");
    if let Some(w) = &weights_item {
        weights = Vec::new();
        for e in w.elements("a list of weights, tier 0 first, e.g. [8, 4, 2, 1]")? {
            let n = e.u64_at_least("a tier weight", 1)?;
            weights.push(u32::try_from(n).map_err(|_| e.error(format!("tier weight {n} is too large")))?);
        }
    }
    if let Some(a) = fields.get("aging") {
        aging = positive_duration(a, "aging")?;
    }
    Fairness::new(&weights, aging)
        .map_err(|why| weights_item.as_ref().unwrap_or(&item).error(why.to_string()))
}

/// A route's `tier: {from: header, name, default}` or `tier: {from: plan, plans, default}`, for
/// `tiers` tiers.
pub(super) fn tier(item: Item<'_>, tiers: u8) -> Result<Tier, Invalid> {
    let fields = item.fields("a route's tier", Some(&["from", "name", "plans", "default"]))?;
    let from_item =
        fields.require("from", "where the tier comes from: from: header (with name) or from: plan")?;
    let in_range = |i: &Item<'_>, what: &str| -> Result<u8, Invalid> {
        let n = i.u64_at_least(what, 0)?;
        u8::try_from(n).ok().filter(|t| *t < tiers).ok_or_else(|| {
            i.error(format!(
                "{what} {n} is not a tier: tiers are 0 to {} (gateway.delay_queue.weights)",
                tiers - 1
            ))
        })
    };
    let from = match from_item.str("header or plan")? {
        "header" => {
            let name = fields.require("name", "the header giving the tier, e.g. name: x-priority")?;
            let text = name.str("a header name")?;
            let header = HeaderName::from_bytes(text.to_ascii_lowercase().as_bytes())
                .map_err(|_| name.error(format!("invalid header name {}", name.node.describe())))?;
            if let Some(p) = fields.get("plans") {
                return Err(
                    p.error("plans go with from: plan; from: header takes the tier number from the header")
                );
            }
            TierFrom::Header(header)
        }
        "plan" => {
            let p = fields.require("plans", "each plan's tier, e.g. plans: { enterprise: 0, free: 3 }")?;
            let plans = p.fields("each plan's tier", None)?;
            let mut map = BTreeMap::new();
            for (plan, _, value) in plans.iter() {
                map.insert(plan.to_owned(), in_range(&value, "tier")?);
            }
            if let Some(n) = fields.get("name") {
                return Err(n.error("name goes with from: header; from: plan reads the plan descriptor"));
            }
            TierFrom::Plan(map)
        }
        other => {
            return Err(from_item.error(format!(
                "unknown tier source {other:?}: expected header or plan{}",
                did_you_mean(other, ["header", "plan"])
            )));
        }
    };
    let default = match fields.get("default") {
        Some(d) => in_range(&d, "default tier")?,
        None => tiers - 1,
    };
    Ok(Tier { from, default })
}
