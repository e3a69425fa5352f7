//! `floodgate-bench replay`, the binary end to end: formats, gzip, `--compare`, `--json`,
//! `--plot`, bad input ([`cli`]). The replay itself is tested in `floodgate-replay`, whose log
//! lines these tests write too.

mod cli;
#[path = "../../../floodgate-replay/tests/replay/lines.rs"]
mod lines;

use lines::{T0, combined, temp};
