//! The store conformance suite, one test per behaviour.

use floodgate::{MemoryConfig, MemoryStore};

floodgate_testkit::conformance_tests!(|clock| MemoryStore::with_config(MemoryConfig::default(), clock));
