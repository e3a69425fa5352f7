//! Values a request may state (`limit: {from: request, max: 10000}`, `window: {from: request,
//! max: 1d}`, `block_for: {from: request, max: 1h}`) and a rule's own `block_for`; see
//! `floodgate::stated`.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::Statable;

use super::positive_duration;
use crate::duration;
use crate::error::Invalid;
use crate::fingerprint::Canonical;
use crate::yaml::Item;

/// The one source a value may come from besides the configuration itself.
const FROM_REQUEST: &str = "request";

/// What `{from: request, max: M, default: D}` says: the bound, and the rule's own value (the
/// default) when it has one.
pub(crate) struct FromRequest<T> {
    pub(crate) max: T,
    pub(crate) default: Option<T>,
}

impl<T: Copy> FromRequest<T> {
    /// The rule's own value: its default, else the bound (a placeholder: the request must state
    /// it).
    pub(crate) fn own(&self) -> T {
        self.default.unwrap_or(self.max)
    }
}

/// Whether `item` is a `{from: ...}` mapping.
pub(crate) fn is_from(item: &Item<'_>) -> bool {
    item.is_map() && item.fields("", None).is_ok_and(|f| f.get("from").is_some())
}

/// Reads `{from: request, max, default}` with `parse` for the bound and the default; `what` names
/// the field in errors.
fn from_request<T: PartialOrd + Copy>(
    item: &Item<'_>,
    what: &str,
    example: &str,
    parse: impl Fn(Item<'_>) -> Result<T, Invalid>,
    show: impl Fn(T) -> String,
) -> Result<FromRequest<T>, Invalid> {
    let fields = item.fields(
        &format!("a {what} that requests state (e.g. {what}: {{from: request, max: {example}}})"),
        Some(&["from", "max", "default"]),
    )?;
    let from = fields.require("from", "from: request")?;
    let source = from.str("where the value comes from")?;
    if source != FROM_REQUEST {
        return Err(from.error(format!("unknown source {source:?}: a {what} comes from: request")));
    }
    let max_item = fields.require(
        "max",
        &format!("the largest {what} a request may state, e.g. max: {example} (a bound is required)"),
    )?;
    let max = parse(max_item)?;
    let default = match fields.get("default") {
        Some(d) => {
            let v = parse(d.clone())?;
            if v > max {
                return Err(d.error(format!("default {} is above max {}", show(v), show(max))));
            }
            Some(v)
        }
        None => None,
    };
    Ok(FromRequest { max, default })
}

/// `limit: {from: request, max: N, default: M}`.
pub(crate) fn limit(item: &Item<'_>) -> Result<FromRequest<NonZeroU64>, Invalid> {
    from_request(
        item,
        "limit",
        "10000",
        |i| Ok(NonZeroU64::new(i.u64_at_least("limit", 1)?).unwrap_or(NonZeroU64::MIN)),
        |n| n.to_string(),
    )
}

/// `window: {from: request, max: 1d, default: 60s}` (or `ttl:` for a budget), each a duration
/// longer than 0.
pub(crate) fn window(item: &Item<'_>, what: &str) -> Result<FromRequest<Duration>, Invalid> {
    from_request(item, what, "1d", |i| positive_duration(i, what), duration::format)
}

/// A rule's `block_for`: a duration (its own penalty box; `0s` for none) or `{from: request, max,
/// default}`. Returns the rule's own block and the bound on a stated one.
pub(crate) fn block_for(item: &Item<'_>) -> Result<(Option<Duration>, Option<Duration>), Invalid> {
    let any_duration = |i: Item<'_>| -> Result<Duration, Invalid> {
        let text = i.text("block_for")?;
        duration::parse(&text)
            .map_err(|why| i.error(format!("invalid block_for {}: {why}", i.node.describe())))
    };
    if is_from(item) {
        let stated = from_request(item, "block_for", "1h", any_duration, duration::format)?;
        if stated.max.is_zero() {
            return Err(
                item.error("block_for max is 0: requests could state no block at all; give a bound above 0")
            );
        }
        return Ok((stated.default.filter(|d| !d.is_zero()), Some(stated.max)));
    }
    Ok((Some(any_duration(item.clone())?).filter(|d| !d.is_zero()), None))
}

/// The statable values of a rule, and its fingerprint fields.
#[derive(Default)]
pub(crate) struct Statements {
    pub(crate) limit: Option<FromRequest<NonZeroU64>>,
    pub(crate) window: Option<FromRequest<Duration>>,
    pub(crate) block_for: Option<Duration>,
}

impl Statements {
    /// The engine's [`Statable`], if anything is statable.
    pub(crate) fn statable(&self, canonical: &mut Canonical) -> Option<Statable> {
        if self.limit.is_none() && self.window.is_none() && self.block_for.is_none() {
            return None;
        }
        let mut s = Statable::new();
        if let Some(l) = &self.limit {
            canonical.field("limit.from_request", (l.max.get(), l.default.map(NonZeroU64::get)));
            s = s.limit(l.max);
            if l.default.is_none() {
                s = s.require_limit();
            }
        }
        if let Some(w) = &self.window {
            canonical
                .field("window.from_request", (duration::format(w.max), w.default.map(duration::format)));
            s = s.window(w.max);
            if w.default.is_none() {
                s = s.require_window();
            }
        }
        if let Some(b) = self.block_for {
            canonical.field("block_for.from_request", duration::format(b));
            s = s.block_for(b);
        }
        Some(s)
    }
}
