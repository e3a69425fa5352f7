//! `upstreams` against real `floodgate` processes, one per protocol, each in front of the bench's
//! upstream: every configuration answers every request, each request reaches the upstream once
//! over the HTTP version configured, and HTTP/2 carries the load on fewer upstream connections
//! than HTTP/1.1. How fast any of it is, is the bench's business, not this test's.

use serde_json::Value;

use super::{assert_common, bench, f, floodgate_binary, u};

/// The scenario under test, as its report names it.
const SCENARIO: &str = "upstreams";
/// Connections to each gateway: enough requests in flight for HTTP/1.1 to need several upstream
/// connections.
const CONNECTIONS: u64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_protocol_answers_everything_and_http2_uses_fewer_upstream_connections() {
    let binary = floodgate_binary();
    let connections = CONNECTIONS.to_string();
    let v = bench(&[SCENARIO, "--floodgate", &binary, "-c", &connections, "-d", "1s"]).await;
    assert_common(&v, SCENARIO);
    assert_eq!(u(&v, "connections"), CONNECTIONS, "{v}");
    assert_eq!(f(&v, "duration_s"), 1.0, "{v}");
    assert!(u(&v, "upstream_max_streams") >= 1, "{v}");

    let points = v["points"].as_array().unwrap_or_else(|| panic!("points: {v}"));
    let protocols: Vec<&str> = points.iter().map(|p| p["protocol"].as_str().unwrap_or_default()).collect();
    assert_eq!(protocols, ["http1", "h2c", "https1", "https2"], "{v}");
    let point = |name: &str| -> &Value {
        points.iter().find(|p| p["protocol"] == name).unwrap_or_else(|| panic!("{name} missing: {v}"))
    };
    for p in points {
        let name = p["protocol"].as_str().unwrap_or_default();
        for field in [
            "upstream",
            "requests_per_sec",
            "allowed",
            "denied",
            "errors",
            "errors_by_kind",
            "p50_us",
            "p99_us",
            "p999_us",
            "upstream_connections",
            "upstream_connections_opened",
            "upstream_requests",
            "upstream_http2_requests",
            "ratio_to_http1",
        ] {
            assert!(p.get(field).is_some(), "{name}: {field} missing in {p}");
        }
        // Every request answered, none refused (the limit never denies), no error.
        assert_eq!((u(p, "errors"), u(p, "denied")), (0, 0), "{name}: {p}");
        assert!(u(p, "allowed") > 0 && f(p, "requests_per_sec") > 0.0, "{name}: {p}");
        // Each answer came from the upstream, once: nothing retried, nothing answered elsewhere.
        assert_eq!(u(p, "upstream_requests"), u(p, "allowed"), "{name}: {p}");
        // Over the HTTP version the route asks for.
        let over_h2 = if name == "h2c" || name == "https2" { u(p, "upstream_requests") } else { 0 };
        assert_eq!(u(p, "upstream_http2_requests"), over_h2, "{name}: {p}");
        assert!(u(p, "upstream_connections") >= 1, "{name}: {p}");
        assert!(u(p, "upstream_connections_opened") <= u(p, "upstream_connections"), "{name}: {p}");
        let ratio = f(p, "ratio_to_http1");
        assert!(ratio > 0.0, "{name}: {p}");
        assert!((ratio - f(p, "requests_per_sec") / f(point("http1"), "requests_per_sec")).abs() < 1e-9);
    }
    assert_eq!(f(point("http1"), "ratio_to_http1"), 1.0);
    assert!(point("https2")["upstream"].as_str().is_some_and(|s| s.contains("https://")), "{v}");

    // HTTP/2 multiplexes: fewer upstream connections than HTTP/1.1, a request in flight on each.
    let http1 = u(point("http1"), "upstream_connections");
    for name in ["h2c", "https2"] {
        let used = u(point(name), "upstream_connections");
        assert!(used < http1, "{name} used {used} upstream connections, http1 {http1}: {v}");
    }
    // The common fields are the first configuration's.
    assert_eq!(u(&v, "allowed"), u(point("http1"), "allowed"), "{v}");
}

#[tokio::test]
async fn only_the_protocols_asked_for_are_measured_and_without_http1_there_is_no_ratio() {
    let binary = floodgate_binary();
    let v = bench(&[SCENARIO, "--floodgate", &binary, "--protocols", "h2c", "-c", "2", "-d", "200ms"]).await;
    let points = v["points"].as_array().unwrap_or_else(|| panic!("points: {v}"));
    assert_eq!(points.len(), 1, "{v}");
    assert_eq!(points[0]["protocol"], "h2c");
    assert!(points[0]["ratio_to_http1"].is_null(), "{v}");
    assert_eq!(u(&points[0], "errors"), 0, "{v}");
}
