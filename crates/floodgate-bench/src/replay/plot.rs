//! `--plot PATH.svg` for `replay`.

use super::{Outcome, ReplayReport};

/// The SVG of `report`.
pub fn svg(_report: &ReplayReport, _outcome: &Outcome) -> String {
    String::new()
}
