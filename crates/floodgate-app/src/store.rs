//! The configured store, opened: see [`AnyStore`].

pub use floodgate_config::store::*;
