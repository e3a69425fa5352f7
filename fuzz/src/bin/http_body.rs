#![cfg_attr(fuzzing, no_main)]
//! Fuzz target: the check API's request body (`floodgate_http::wire::CheckRequest::parse`, what
//! `/v1/check`, `/v1/peek` and `/v1/report` read), seeded with the bodies of the docs and tests.
//!
//! Properties: no body panics; a refused body is a 400 (not JSON) or 422 (JSON of the wrong
//! shape) problem with a detail, rendered as JSON; an accepted one holds at most
//! `MAX_DESCRIPTORS` descriptors and a cost of at least 1, reads back the same when written out
//! again, and its verdict on the built-in policy renders as JSON.

use floodgate::{Hit, Impossible, MemoryStore, Mode};
use floodgate_http::wire::{CheckRequest, MAX_DESCRIPTORS, VerdictBody};

floodgate_fuzz::fuzz_target!(|data| {
    let request = match CheckRequest::parse(data) {
        Ok(request) => request,
        Err(problem) => {
            assert!(
                matches!(problem.status, 400 | 422),
                "status {} for a bad body: {problem:?}",
                problem.status
            );
            assert!(!problem.detail.is_empty(), "{problem:?}");
            let rendered: serde_json::Value =
                serde_json::from_str(&problem.to_json()).expect("a problem renders as JSON");
            assert_eq!(rendered["status"], problem.status);
            return;
        }
    };
    assert!(request.descriptors.len() <= MAX_DESCRIPTORS);
    assert!(request.cost >= 1);

    // Written out and read again: the same request.
    let descriptors: serde_json::Map<String, serde_json::Value> =
        request.descriptors.iter().map(|(k, v)| (k.to_owned(), v.into())).collect();
    let written =
        serde_json::json!({"descriptors": descriptors, "cost": request.cost, "domain": request.domain});
    let again =
        CheckRequest::parse(written.to_string().as_bytes()).expect("a request written out reads back");
    assert_eq!(again.cost, request.cost);
    assert_eq!(again.domain, request.domain);
    let pairs = |r: &CheckRequest| {
        let mut p: Vec<(String, String)> =
            r.descriptors.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        p.sort();
        p
    };
    assert_eq!(pairs(&again), pairs(&request));

    // Decided on the built-in policy (a cost above a limit is an error, as the API says 422).
    static POLICY: std::sync::OnceLock<floodgate::Policy> = std::sync::OnceLock::new();
    let policy = POLICY.get_or_init(|| floodgate_config::builtin().policy);
    let hits = [Hit::new(&request.descriptors, request.cost)];
    let result =
        policy.evaluate_now(&MemoryStore::new(), Mode::Check, &hits, Impossible::Error).expect("at once");
    if let Ok(verdict) = result {
        let body = VerdictBody::from(&verdict).to_json();
        let rendered: serde_json::Value = serde_json::from_slice(&body).expect("a verdict renders as JSON");
        assert_eq!(rendered["allowed"], verdict.allowed);
    }
});
