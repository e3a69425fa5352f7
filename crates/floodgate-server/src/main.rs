//! `floodgate`: the standalone rate-limit service.

fn main() {}
