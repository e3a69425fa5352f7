//! `replay`: the replay's decisions against the memory store's own on a manual clock
//! ([`differential`]), and `--suggest` on logs whose per-key peaks are known ([`suggest`]). The
//! command line end to end is tested with `floodgate-bench` (its `tests/replay`).

mod differential;
mod lines;
mod suggest;

use lines::{T0, combined, temp};
