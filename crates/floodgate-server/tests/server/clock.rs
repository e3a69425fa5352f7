//! `--manual-clock`: a server whose memory store's time moves only when `POST /admin/clock` moves
//! it, so a test drives windows and blocks deterministically; 404 on a server on the process
//! clock.

use floodgate_app::ServeOptions;
use floodgate_core::Timestamp;

use crate::support::{TestServer, check_body, parse};

const RULES: &str = "\
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 1
    window: 1m
    block_for: 10m
";

#[tokio::test]
async fn a_manual_clock_moves_only_when_the_admin_api_moves_it() {
    let start = Timestamp::from_millis(1_800_000_000_000);
    let server = TestServer::with_options(parse(RULES), ServeOptions::default().manual_clock(start)).await;
    assert_eq!(server.get("/admin/clock").await.json()["now_ms"], 1_800_000_000_000u64);
    let body = check_body(&[("user", "u1")], 1);
    assert_eq!(server.post("/v1/check", body.clone()).await.status, 200);
    let boxed = server.post("/v1/check", body.clone()).await;
    assert_eq!((boxed.status, boxed.json()["retry_after_ms"].as_u64()), (429, Some(600_000)));
    // Time stands still: the same answer, to the millisecond.
    assert_eq!(server.post("/v1/check", body.clone()).await.json()["retry_after_ms"], 600_000);
    let moved = server.post("/admin/clock", r#"{"advance_ms": 599999}"#).await;
    assert_eq!(moved.json()["now_ms"], 1_800_000_599_999u64);
    assert_eq!(server.post("/v1/check", body.clone()).await.json()["retry_after_ms"], 1);
    server.post("/admin/clock", r#"{"set_ms": 1800000600000}"#).await;
    assert_eq!(server.post("/v1/check", body.clone()).await.status, 200, "the box ended");
    // Never backwards, and one move at a time.
    for bad in [
        r#"{"set_ms": 1}"#,
        r#"{}"#,
        r#"{"advance_ms": 1, "set_ms": 1800000700000}"#,
        r#"{"advance_ms": -1}"#,
    ] {
        assert_eq!(server.post("/admin/clock", bad).await.status, 422, "{bad}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_server_on_the_process_clock_has_no_clock_to_move() {
    let server = TestServer::start(parse(RULES)).await;
    assert_eq!(server.get("/admin/clock").await.status, 404);
    assert_eq!(server.post("/admin/clock", r#"{"advance_ms": 1000}"#).await.status, 404);
    server.stop().await;
}
