//! The gateway's operator switches, below every front door: what the configuration says
//! (`gateway.switches`), and what the admin API set over it (`/admin/gateway/switches`, audited)
//! until it clears them. The gateway reads them on every request (three relaxed atomic loads); an
//! override outlives reloads, so that a reload made for another reason does not undo an operator's
//! decision during an incident.

use std::sync::atomic::{AtomicU8, Ordering};

use floodgate_config::gateway::{Shed, Switches};

/// No override: the configuration's value holds.
const UNSET: u8 = u8::MAX;

/// The admin API's overrides of the configured switches.
#[derive(Debug)]
pub struct Overrides {
    shed: AtomicU8,
    stale_reads: AtomicU8,
    async_writes: AtomicU8,
}

impl Default for Overrides {
    fn default() -> Self {
        Overrides {
            shed: AtomicU8::new(UNSET),
            stale_reads: AtomicU8::new(UNSET),
            async_writes: AtomicU8::new(UNSET),
        }
    }
}

/// What the admin API may set; `None` leaves a switch as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwitchChange {
    /// Which priorities are shed.
    pub shed: Option<Shed>,
    /// Serve reads from the stale cache.
    pub stale_reads: Option<bool>,
    /// Accept writes asynchronously.
    pub async_writes: Option<bool>,
}

impl Overrides {
    /// The switches in force: each override, or else the configured value.
    pub fn effective(&self, configured: Switches) -> Switches {
        let shed = match self.shed.load(Ordering::Relaxed) {
            0 => Shed::None,
            1 => Shed::Low,
            2 => Shed::Normal,
            _ => configured.shed,
        };
        let flag = |cell: &AtomicU8, default: bool| match cell.load(Ordering::Relaxed) {
            UNSET => default,
            v => v == 1,
        };
        Switches {
            shed,
            stale_reads: flag(&self.stale_reads, configured.stale_reads),
            async_writes: flag(&self.async_writes, configured.async_writes),
        }
    }

    /// Sets the switches `change` names; returns what changed, as audit lines
    /// (`gateway.switches.shed: none → low`), given the switches in force before.
    pub fn set(&self, change: SwitchChange, before: Switches) -> Vec<String> {
        let mut changed = Vec::new();
        if let Some(shed) = change.shed {
            self.shed.store(shed as u8, Ordering::Relaxed);
            changed.push(format!("gateway.switches.shed: {} → {}", before.shed.as_str(), shed.as_str()));
        }
        let word = |on: bool, yes: &'static str| if on { yes } else { "live" };
        if let Some(stale) = change.stale_reads {
            self.stale_reads.store(u8::from(stale), Ordering::Relaxed);
            changed.push(format!(
                "gateway.switches.read: {} → {}",
                word(before.stale_reads, "stale_cache"),
                word(stale, "stale_cache")
            ));
        }
        if let Some(writes) = change.async_writes {
            self.async_writes.store(u8::from(writes), Ordering::Relaxed);
            changed.push(format!(
                "gateway.switches.write: {} → {}",
                word(before.async_writes, "accept_async"),
                word(writes, "accept_async")
            ));
        }
        changed
    }

    /// Clears every override: the configuration's switches hold again.
    pub fn clear(&self) {
        for cell in [&self.shed, &self.stale_reads, &self.async_writes] {
            cell.store(UNSET, Ordering::Relaxed);
        }
    }

    /// The overrides set, as a change that [`Overrides::restore`] puts back.
    pub fn current(&self) -> SwitchChange {
        let flag = |cell: &AtomicU8| match cell.load(Ordering::Relaxed) {
            UNSET => None,
            v => Some(v == 1),
        };
        let shed = match self.shed.load(Ordering::Relaxed) {
            0 => Some(Shed::None),
            1 => Some(Shed::Low),
            2 => Some(Shed::Normal),
            _ => None,
        };
        SwitchChange { shed, stale_reads: flag(&self.stale_reads), async_writes: flag(&self.async_writes) }
    }

    /// Sets exactly the overrides `change` names, clearing the others.
    pub fn restore(&self, change: SwitchChange) {
        self.clear();
        if let Some(shed) = change.shed {
            self.shed.store(shed as u8, Ordering::Relaxed);
        }
        if let Some(stale) = change.stale_reads {
            self.stale_reads.store(u8::from(stale), Ordering::Relaxed);
        }
        if let Some(writes) = change.async_writes {
            self.async_writes.store(u8::from(writes), Ordering::Relaxed);
        }
    }

    /// Whether any override is set.
    pub fn any(&self) -> bool {
        [&self.shed, &self.stale_reads, &self.async_writes].iter().any(|c| c.load(Ordering::Relaxed) != UNSET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_until_cleared() {
        let overrides = Overrides::default();
        let configured = Switches { shed: Shed::Low, stale_reads: true, async_writes: false };
        assert_eq!(overrides.effective(configured), configured);
        let changed = overrides.set(
            SwitchChange { shed: Some(Shed::Normal), async_writes: Some(true), ..SwitchChange::default() },
            configured,
        );
        assert_eq!(
            changed,
            ["gateway.switches.shed: low → normal", "gateway.switches.write: live → accept_async"]
        );
        let now = overrides.effective(configured);
        assert_eq!((now.shed, now.stale_reads, now.async_writes), (Shed::Normal, true, true));
        let set = overrides.current();
        assert_eq!(
            set,
            SwitchChange { shed: Some(Shed::Normal), stale_reads: None, async_writes: Some(true) }
        );
        overrides.clear();
        assert!(!overrides.any());
        overrides.restore(set);
        assert_eq!(overrides.current(), set, "restore puts back exactly what current read");
        overrides.clear();
        assert_eq!(overrides.effective(configured), configured);
    }
}
