//! Every class of bad input gets a precise problem+json answer: never a panic, never a 500.

use floodgate::Rule;
use floodgate_testkit::wait;
use http::Method;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Reply, TestServer, from_rules, per_minute};

async fn server() -> TestServer {
    TestServer::start(from_rules([Rule::new("per-user", per_minute(10)).key(["user"])])).await
}

/// Asserts a problem+json answer of `status` whose detail contains every one of `words`.
fn assert_problem(reply: &Reply, status: u16, words: &[&str]) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(reply.content_type(), "application/problem+json");
    let problem = reply.json();
    assert_eq!(problem["status"], status);
    assert!(problem["type"].as_str().unwrap().starts_with("https://floodgate.dev/problems/"));
    let detail = problem["detail"].as_str().unwrap();
    for word in words {
        assert!(detail.contains(word), "{word:?} not in {detail:?}");
    }
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_400() {
    let s = server().await;
    assert_problem(&s.post("/v1/check", "user=u1").await, 400, &["not valid JSON", "line 1 column 1"]);
    assert_problem(&s.post("/v1/check", r#"{"descriptors": {"user": "u1""#).await, 400, &["not valid JSON"]);
    assert_problem(&s.post("/v1/check", "").await, 400, &["empty"]);
    assert_problem(&s.post("/v1/check", vec![0xff, 0xfe, b'{']).await, 400, &["not valid JSON"]);
    s.stop().await;
}

#[tokio::test]
async fn json_of_the_wrong_shape_is_a_422_naming_the_field() {
    let s = server().await;
    let cases: &[(&str, &[&str])] = &[
        (r#"[{"descriptors": {}}]"#, &["must be a JSON object", "an array"]),
        ("42", &["must be a JSON object", "a number (42)"]),
        (r#"{"cost": 1}"#, &["Missing field \"descriptors\""]),
        (r#"{"descriptors": ["user", "u1"]}"#, &["\"descriptors\" must be an object", "an array"]),
        (r#"{"descriptors": {"user": 42}}"#, &[r#"descriptors."user" must be a string"#, "a number (42)"]),
        (r#"{"descriptors": {"user": null}}"#, &[r#"descriptors."user" must be a string"#, "null"]),
        (
            r#"{"descriptors": {"user": {"id": "u1"}}}"#,
            &[r#"descriptors."user" must be a string"#, "an object"],
        ),
        (r#"{"descriptors": {"user": "u1"}, "cots": 1}"#, &[r#"Unknown field "cots""#]),
        (r#"{"descriptors": {"user": "u1"}, "cost": "1"}"#, &["\"cost\" must be a whole number", "a string"]),
        (r#"{"descriptors": {"user": "u1"}, "cost": -1}"#, &["\"cost\" must be a whole number", "(-1)"]),
        (r#"{"descriptors": {"user": "u1"}, "cost": 1.5}"#, &["\"cost\" must be a whole number", "(1.5)"]),
        (r#"{"descriptors": {"user": "u1"}, "domain": 7}"#, &["\"domain\" must be a string"]),
        (r#"{"descriptors": {"user": "u1", "user": "u2"}}"#, &["appears twice"]),
    ];
    for (body, words) in cases {
        for path in ["/v1/check", "/v1/peek", "/v1/report"] {
            assert_problem(&s.post(path, *body).await, 422, words);
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn cost_zero_is_a_422() {
    let s = server().await;
    assert_problem(
        &s.post("/v1/check", r#"{"descriptors": {"user": "u1"}, "cost": 0}"#).await,
        422,
        &["cost must be at least 1"],
    );
    s.stop().await;
}

#[tokio::test]
async fn an_ip_that_is_no_address_under_a_prefix_rule_is_a_422_naming_the_rule_and_value() {
    let rule =
        Rule::new("per-net", per_minute(10)).key(["ip"]).ip_prefix(floodgate::IpPrefix::new(24, 64).unwrap());
    let s = TestServer::start(from_rules([rule])).await;
    assert_eq!(s.post("/v1/check", r#"{"descriptors": {"ip": "192.0.2.7"}}"#).await.status, 200);
    assert_problem(
        &s.post("/v1/check", r#"{"descriptors": {"ip": "192.0.2.7:443"}}"#).await,
        422,
        &["\"per-net\"", "\"192.0.2.7:443\"", "not an IP address"],
    );
    s.stop().await;
}

#[tokio::test]
async fn too_many_descriptors_is_a_422() {
    let s = server().await;
    let many: serde_json::Map<String, serde_json::Value> =
        (0..65).map(|i| (format!("d{i}"), serde_json::Value::from("v"))).collect();
    let body = serde_json::json!({ "descriptors": many }).to_string();
    assert_problem(&s.post("/v1/check", body).await, 422, &["at most 64"]);
    s.stop().await;
}

#[tokio::test]
async fn a_body_over_64_kib_is_a_413_with_or_without_content_length() {
    let s = server().await;
    let big = format!(r#"{{"descriptors": {{"user": "{}"}}}}"#, "x".repeat(64 * 1024));
    let refused = s.post("/v1/check", big.clone()).await;
    assert_problem(&refused, 413, &["65536 bytes"]);
    // The body was not read, so the connection closes after the answer, which says so: a client
    // that pools connections must not send its next request on it.
    assert_eq!(refused.headers.get("connection").map(|v| v.as_bytes()), Some(&b"close"[..]));

    // Chunked, so that the limit is found while reading rather than from Content-Length.
    let mut tcp = tokio::net::TcpStream::connect(s.http).await.unwrap();
    let head = "POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    tcp.write_all(head.as_bytes()).await.unwrap();
    for chunk in big.as_bytes().chunks(8192) {
        if tcp.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await.is_err() {
            break;
        }
        let _ = tcp.write_all(chunk).await;
        let _ = tcp.write_all(b"\r\n").await;
    }
    let _ = tcp.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = wait::finished("the answer and the close", tcp.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("application/problem+json"));
    assert!(answer.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{answer}");

    // Exactly at the limit is fine (and is then a body of the wrong shape, here: still JSON).
    let pad = 64 * 1024 - r#"{"descriptors": {"user": ""}}"#.len();
    let at_limit = format!(r#"{{"descriptors": {{"user": "{}"}}}}"#, "y".repeat(pad));
    assert_eq!(at_limit.len(), 64 * 1024);
    assert_eq!(s.post("/v1/check", at_limit).await.status, 200);
    s.stop().await;
}

#[tokio::test]
async fn unknown_paths_and_methods_are_problems_too() {
    let s = server().await;
    assert_problem(&s.get("/v1/nope").await, 404, &["No such endpoint"]);
    assert_problem(&s.get("/v1/check").await, 405, &["method"]);
    let put = s.request(Method::PUT, "/v1/check", "{}", &[]).await;
    assert_eq!(put.status, 405);
    s.stop().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the body, the answer is a verdict or a 4xx problem — never a 5xx.
    #[test]
    fn no_body_makes_the_server_fail(body in prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        "\\{\"descriptors\": \\{(\"[a-z]{0,3}\": (\"[a-z]{0,3}\"|[0-9]{1,3}|null|true|\\[\\]),? ?){0,4}\\}(, \"cost\": -?[0-9]{1,21}(\\.[0-9])?)?(, \"[a-z]{1,6}\": 1)?\\}".prop_map(String::into_bytes),
    ]) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let s = server().await;
            for path in ["/v1/check", "/v1/report", "/v1/peek"] {
                let reply = s.post(path, body.clone()).await;
                prop_assert!([200, 400, 422, 429].contains(&reply.status), "{} {}", reply.status, reply.body);
                if reply.status >= 400 && reply.status != 429 {
                    prop_assert_eq!(reply.content_type(), "application/problem+json");
                }
            }
            s.stop().await;
            Ok(())
        })?;
    }
}
