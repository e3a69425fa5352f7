//! The operator switches (`switches:` — shedding, stale reads, accepted writes) and what a route
//! offers them (`degrade:`), with the stale cache's bounds (`stale_cache:`).

use crate::error::Invalid;
use crate::yaml::{Item, did_you_mean};

use super::size;

/// Shedding priority: under `shed: low` the low routes are shed, under `shed: normal` the normal
/// ones too; critical routes are never shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Priority {
    /// Shed first.
    Low,
    /// Shed second (the default).
    #[default]
    Normal,
    /// Never shed.
    Critical,
}

impl Priority {
    /// `low`, `normal` or `critical`.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::Critical => "critical",
        }
    }
}

/// The degradations a route offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Degrade {
    /// `read: stale_cache`: the last good response of a GET is kept, and served while the read
    /// switch says so (or the breaker is open).
    pub stale_cache: bool,
    /// `write: accept_async`: writes are stored durably, answered 202 and replayed later while the
    /// write switch says so (or the breaker is open).
    pub accept_async: bool,
}

/// The operator switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Switches {
    /// Which priorities are shed.
    pub shed: Shed,
    /// Serve reads from the stale cache (routes with `read: stale_cache`).
    pub stale_reads: bool,
    /// Accept writes asynchronously (routes with `write: accept_async`).
    pub async_writes: bool,
}

/// Which priorities are shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Shed {
    /// Nothing (the default).
    #[default]
    None,
    /// Low-priority routes.
    Low,
    /// Low- and normal-priority routes.
    Normal,
}

impl Shed {
    /// `none`, `low` or `normal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Shed::None => "none",
            Shed::Low => "low",
            Shed::Normal => "normal",
        }
    }

    /// Whether a route of `priority` is shed.
    pub fn sheds(self, priority: Priority) -> bool {
        match self {
            Shed::None => false,
            Shed::Low => priority == Priority::Low,
            Shed::Normal => priority <= Priority::Normal,
        }
    }

    /// Parses `none`, `low` or `normal`.
    pub fn parse(text: &str) -> Option<Shed> {
        match text {
            "none" => Some(Shed::None),
            "low" => Some(Shed::Low),
            "normal" => Some(Shed::Normal),
            _ => None,
        }
    }
}

/// The stale cache's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleCacheConfig {
    /// All entries together, in body bytes (default 64 MiB); the oldest go first.
    pub max_bytes: usize,
    /// One entry's body (default 1 MiB); larger responses are not kept.
    pub max_entry: usize,
}

impl Default for StaleCacheConfig {
    fn default() -> Self {
        StaleCacheConfig { max_bytes: 64 << 20, max_entry: 1 << 20 }
    }
}

/// `stale_cache: {max_bytes, max_entry}`.
pub(super) fn stale_cache(item: Item<'_>) -> Result<StaleCacheConfig, Invalid> {
    let fields = item.fields("the stale cache's bounds", Some(&["max_bytes", "max_entry"]))?;
    let mut cache = StaleCacheConfig::default();
    if let Some(b) = fields.get("max_bytes") {
        cache.max_bytes = size(&b, "max_bytes")?;
    }
    if let Some(e) = fields.get("max_entry") {
        cache.max_entry = size(&e, "max_entry")?;
    }
    Ok(cache)
}

pub(super) fn switches(item: Item<'_>) -> Result<Switches, Invalid> {
    let fields = item.fields("the switches", Some(&["shed", "read", "write"]))?;
    let mut switches = Switches::default();
    if let Some(s) = fields.get("shed") {
        let text = s.text("none, low or normal")?;
        switches.shed = Shed::parse(&text).ok_or_else(|| {
            s.error(format!(
                "unknown shed {text:?}: expected none, low or normal{}",
                did_you_mean(&text, ["none", "low", "normal"])
            ))
        })?;
    }
    if let Some(r) = fields.get("read") {
        switches.stale_reads = match r.str("live or stale_cache")? {
            "live" => false,
            "stale_cache" => true,
            other => {
                return Err(r.error(format!("unknown read switch {other:?}: expected live or stale_cache")));
            }
        };
    }
    if let Some(w) = fields.get("write") {
        switches.async_writes = match w.str("live or accept_async")? {
            "live" => false,
            "accept_async" => true,
            other => {
                return Err(w.error(format!("unknown write switch {other:?}: expected live or accept_async")));
            }
        };
    }
    Ok(switches)
}

pub(super) fn degrade(item: Item<'_>) -> Result<Degrade, Invalid> {
    let fields = item.fields("the degradations", Some(&["read", "write"]))?;
    let mut degrade = Degrade::default();
    if let Some(r) = fields.get("read") {
        match r.str("stale_cache")? {
            "stale_cache" => degrade.stale_cache = true,
            other => return Err(r.error(format!("unknown read degradation {other:?}: expected stale_cache"))),
        }
    }
    if let Some(w) = fields.get("write") {
        match w.str("accept_async")? {
            "accept_async" => degrade.accept_async = true,
            other => {
                return Err(w.error(format!("unknown write degradation {other:?}: expected accept_async")));
            }
        }
    }
    Ok(degrade)
}
