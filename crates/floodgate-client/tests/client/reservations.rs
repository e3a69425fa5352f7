//! Costs, reserve/commit/release with the `Reservation` guard, and usage, against the real server.

use std::time::Duration;

use floodgate_client::{Client, Error, Request};
use floodgate_testkit::wait;

use super::{Running, client, read_message, refusing_url};

const CONFIG: &str = "
store: { kind: memory }
descriptors: [stream]
rules:
  - name: tenant-requests
    key: [tenant]
    algorithm: fixed_window
    limit: 100
    window: 1h
  - name: tenant-tokens
    key: [tenant]
    algorithm: fixed_window
    limit: 10000
    window: 1h
    cost: tokens
  - name: streams
    key: [stream]
    algorithm: concurrency
    limit: 1
    lease: 1h
";

fn tenant(id: &str) -> Request {
    Request::new().descriptor("tenant", id)
}

async fn used(floodgate: &Client, rule: &str, id: &str) -> u64 {
    floodgate.usage(rule, &tenant(id)).await.unwrap().used
}

#[tokio::test]
async fn costs_count_each_dimension_in_its_own_rule_and_usage_reads_them() {
    let mut server = Running::start(CONFIG).await;
    let floodgate = client(&server.url());
    let d = floodgate.check(&tenant("c").costs("requests", 1).costs("tokens", 1200)).await.unwrap();
    assert!(d.allowed);
    assert_eq!(used(&floodgate, "tenant-requests", "c").await, 1);
    assert_eq!(used(&floodgate, "tenant-tokens", "c").await, 1200);
    assert!(!floodgate.peek(&tenant("c").costs("tokens", 9000)).await.unwrap().allowed);
    floodgate.report(&tenant("c").costs("tokens", 300)).await.unwrap();
    let usage = floodgate.usage("tenant-tokens", &tenant("c")).await.unwrap();
    assert_eq!((usage.limit, usage.used, usage.remaining), (10_000, 1500, 8500));
    assert_eq!(usage.period_end.unwrap() - usage.period_start.unwrap(), 3_600_000);
    assert_eq!(usage.previous, None, "a window keeps no previous period");
    assert!(matches!(
        floodgate.check(&tenant("c").cost(1).costs("tokens", 1)).await,
        Err(Error::InvalidRequest(m)) if m.contains("not both")
    ));
    assert!(matches!(floodgate.usage("nope", &tenant("c")).await, Err(Error::NotFound { .. })));
    assert!(matches!(
        floodgate.usage("tenant-tokens", &Request::new()).await,
        Err(Error::Problem { status: 422, .. })
    ));
    server.stop().await;
}

#[tokio::test]
async fn commit_refunds_the_over_reservation_once_and_the_same_commit_answers_the_same() {
    let mut server = Running::start(CONFIG).await;
    let floodgate = client(&server.url());
    let request = tenant("r").costs("requests", 1).costs("tokens", 4300).ttl(Duration::from_secs(120));
    let reserved = floodgate.reserve(&request).await.unwrap();
    assert!(reserved.decision.allowed);
    let expires = reserved.decision.expires_at_ms.unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    assert!(expires > now && expires <= now + 121_000, "the ttl is sent");
    let reservation = reserved.reservation.unwrap();
    let id = reservation.id().to_owned();
    assert_eq!(id.len(), 32);
    assert_eq!(used(&floodgate, "tenant-tokens", "r").await, 4300);
    let settled = reservation.commit(&[("tokens", 812)]).await.unwrap();
    assert_eq!(settled.state, "committed");
    assert_eq!(settled.refunded.get("tokens"), Some(&3488));
    assert_eq!(used(&floodgate, "tenant-tokens", "r").await, 812);
    assert_eq!(used(&floodgate, "tenant-requests", "r").await, 1, "left out: stays as reserved");
    assert_eq!(floodgate.commit(&id, &[("tokens", 812)]).await.unwrap(), settled);
    assert_eq!(used(&floodgate, "tenant-tokens", "r").await, 812, "charged once");
    assert!(matches!(floodgate.commit(&id, &[("tokens", 900)]).await, Err(Error::ReservationSettled { .. })));
    assert!(matches!(floodgate.release(&id).await, Err(Error::ReservationSettled { .. })));
    assert!(matches!(
        floodgate.commit("0123456789abcdef0123456789abcdef", &[]).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(floodgate.release("").await, Err(Error::InvalidRequest(_))));
    server.stop().await;
}

#[tokio::test]
async fn release_gives_everything_back_and_a_dropped_guard_releases() {
    let mut server = Running::start(CONFIG).await;
    let floodgate = client(&server.url());
    let estimate = || tenant("g").costs("requests", 1).costs("tokens", 5000);
    let reserved = floodgate.reserve(&estimate()).await.unwrap();
    let released = reserved.reservation.unwrap().release().await.unwrap();
    assert_eq!(released.state, "released");
    assert_eq!(used(&floodgate, "tenant-tokens", "g").await, 0);

    // A cancelled call: the guard is dropped unsettled, and a spawned task releases it.
    let reserved = floodgate.reserve(&estimate()).await.unwrap();
    let id = reserved.reservation.as_ref().unwrap().id().to_owned();
    assert_eq!(used(&floodgate, "tenant-tokens", "g").await, 5000);
    drop(reserved);
    wait::until("the dropped reservation is released", || async {
        (used(&floodgate, "tenant-tokens", "g").await == 0).then_some(())
    })
    .await;
    assert_eq!(floodgate.release(&id).await.unwrap().state, "released", "released by the drop");

    // Denied: nothing held, no guard.
    let big = floodgate.reserve(&tenant("g").costs("tokens", 9000)).await.unwrap();
    let denied = floodgate.reserve(&tenant("g").costs("tokens", 2000)).await.unwrap();
    assert!(!denied.decision.allowed && denied.reservation.is_none());
    big.reservation.unwrap().commit(&[]).await.unwrap();
    assert_eq!(used(&floodgate, "tenant-tokens", "g").await, 9000, "a commit of nothing keeps the estimate");
    server.stop().await;
}

#[tokio::test]
async fn a_check_that_took_permits_carries_the_id_that_release_frees_them_with() {
    let mut server = Running::start(CONFIG).await;
    let floodgate = client(&server.url());
    let stream = || Request::new().descriptor("stream", "s1");
    let first = floodgate.check(&stream()).await.unwrap();
    let id = first.reservation.clone().expect("a floodgate-reservation id");
    assert!(!floodgate.check(&stream()).await.unwrap().allowed, "the one permit is held");
    assert!(floodgate.release(&id).await.unwrap().refunded.is_empty());
    assert!(floodgate.check(&stream()).await.unwrap().allowed, "free again");
    server.stop().await;
}

#[tokio::test]
async fn settling_is_retried_when_no_answer_came_then_unavailable() {
    let floodgate = client(&refusing_url().await);
    let error = floodgate.release("0123456789abcdef0123456789abcdef").await.unwrap_err();
    assert!(matches!(error, Error::Unavailable { .. }));
    assert_eq!(floodgate.stats().calls, 3, "the first attempt and two retries");
    assert_eq!(floodgate.stats().unreachable, 1);
}

/// A proxy that forwards every request to `upstream`, but cuts the connection instead of the first
/// commit's answer: the commit ran, its caller never heard.
async fn proxy_losing_the_first_commit_answer(upstream: std::net::SocketAddr) -> String {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let lost = Arc::new(AtomicBool::new(false));
    tokio::spawn(async move {
        loop {
            let (mut downstream, _) = listener.accept().await.unwrap();
            let lost = lost.clone();
            tokio::spawn(async move {
                let mut up = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let (mut down_buffer, mut up_buffer) = (Vec::new(), Vec::new());
                while let Some(request) = read_message(&mut downstream, &mut down_buffer).await {
                    up.write_all(&request).await.unwrap();
                    let answer = read_message(&mut up, &mut up_buffer).await.unwrap();
                    if request.starts_with(b"POST /v1/commit ") && !lost.swap(true, Ordering::SeqCst) {
                        return; // both connections dropped: the answer is lost
                    }
                    downstream.write_all(&answer).await.unwrap();
                }
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_retried_and_settles_once() {
    let mut server = Running::start(CONFIG).await;
    let direct = client(&server.url());
    let floodgate = client(&proxy_losing_the_first_commit_answer(server.addr).await);
    let reserved =
        floodgate.reserve(&tenant("lost").costs("requests", 1).costs("tokens", 1000)).await.unwrap();
    let settled = reserved.reservation.unwrap().commit(&[("tokens", 100)]).await.unwrap();
    assert_eq!(settled.refunded.get("tokens"), Some(&900));
    assert_eq!(floodgate.stats().calls, 3, "the reserve, the commit whose answer was lost, its retry");
    assert_eq!(used(&direct, "tenant-tokens", "lost").await, 100, "refunded once, not twice");
    server.stop().await;
}
