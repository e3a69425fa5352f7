//! Priority shedding and the degradation switches, from the admin API (audited, no restart) and
//! from the configuration: low routes shed first, then normal ones; stale reads; accepted writes.

use std::time::Duration;

use http::Method;

use super::upstreams::{Behaviour, Upstream};
use super::{Gateway, metric};

#[tokio::test]
async fn shedding_takes_low_routes_first_then_normal_ones_never_critical() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let yaml = format!(
        r#"
rules: []
gateway:
  shed_retry_after: 20s
  routes:
    - name: checkout
      match: {{ path: /checkout }}
      upstream: {url}
      priority: critical
    - name: search
      match: {{ path: /search }}
      upstream: {url}
    - name: recommendations
      match: {{ path: /recommendations }}
      upstream: {url}
      priority: low
"#,
        url = upstream.url()
    );
    let gateway = Gateway::start(&yaml).await;
    let statuses = async || {
        let mut out = Vec::new();
        for path in ["/checkout", "/search", "/recommendations"] {
            out.push(gateway.get(path, &[]).await.status);
        }
        out
    };
    assert_eq!(statuses().await, [200, 200, 200]);

    let set = gateway.admin(Method::PUT, "/admin/gateway/switches", r#"{"shed": "low"}"#).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(set.json()["shed"], "low");
    assert_eq!(statuses().await, [200, 200, 503]);
    let shed = gateway.get("/recommendations", &[]).await;
    assert_eq!(shed.header("retry-after"), Some("20"));
    assert_eq!(shed.json()["type"], "https://floodgate.dev/problems/shed");

    gateway.admin(Method::PUT, "/admin/gateway/switches", r#"{"shed": "normal"}"#).await;
    assert_eq!(statuses().await, [200, 503, 503]);

    let cleared = gateway.admin(Method::DELETE, "/admin/gateway/switches", "").await;
    assert_eq!(
        (cleared.json()["shed"].as_str(), cleared.json()["overridden"].as_bool()),
        (Some("none"), Some(false))
    );
    assert_eq!(statuses().await, [200, 200, 200]);

    // Every change is in the audit log; bad input is refused.
    let audit = gateway.admin(Method::GET, "/admin/audit", "").await.json();
    let switches: Vec<_> =
        audit["records"].as_array().unwrap().iter().filter(|r| r["source"] == "switch").collect();
    assert_eq!(switches.len(), 3, "{audit}");
    assert_eq!(switches[0]["changed"][0], "gateway.switches.shed: none → low");
    assert!(
        switches.iter().all(|r| r["by"] == "loopback"),
        "who asked, on a server without a token: {audit}"
    );
    assert_eq!(gateway.admin(Method::PUT, "/admin/gateway/switches", r#"{"shed": "all"}"#).await.status, 422);
    assert_eq!(gateway.admin(Method::PUT, "/admin/gateway/switches", r#"{"panic": true}"#).await.status, 422);
    let page = gateway.metrics().await;
    assert_eq!(metric(&page, r#"floodgate_gateway_shed_total{route="recommendations"}"#), Some(3.0));
    gateway.stop().await;
}

#[tokio::test]
async fn stale_reads_serve_the_last_good_response_marked_with_its_age() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let yaml = format!(
        r#"
rules: []
gateway:
  routes:
    - name: catalog
      match: {{ path: "/catalog/{{id}}", methods: [GET] }}
      upstream: {url}
      degrade: {{ read: stale_cache }}
"#,
        url = upstream.url()
    );
    let gateway = Gateway::start(&yaml).await;
    let fresh = gateway.get("/catalog/7?lang=en", &[]).await;
    assert_eq!(fresh.status, 200);
    assert!(fresh.header("floodgate-stale").is_none());
    // The upstream goes bad; reads switch to the stale cache.
    upstream.set(Behaviour::FailAll);
    assert_eq!(gateway.get("/catalog/7?lang=en", &[]).await.status, 503, "live until switched");
    gateway.admin(Method::PUT, "/admin/gateway/switches", r#"{"read": "stale_cache"}"#).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = upstream.count();
    let stale = gateway.get("/catalog/7?lang=en", &[]).await;
    assert_eq!(stale.status, 200);
    assert_eq!(stale.body, fresh.body, "the last good response");
    assert_eq!(stale.header("floodgate-stale"), Some("true"));
    assert!(stale.header("age").unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(stale.header("content-type"), Some("application/json"));
    assert_eq!(upstream.count(), before, "served without the upstream");
    // A read never cached goes to the upstream.
    assert_eq!(gateway.get("/catalog/8", &[]).await.status, 503);
    let page = gateway.metrics().await;
    assert_eq!(
        metric(&page, r#"floodgate_gateway_degraded_total{route="catalog",mode="stale_cache"}"#),
        Some(1.0)
    );
    gateway.stop().await;
}

#[tokio::test]
async fn accepted_writes_are_answered_202_replayed_and_their_outcome_fetched() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let dir = std::env::temp_dir().join(format!("floodgate-gw-{}", fastrand::u64(..)));
    let yaml = format!(
        r#"
rules: []
gateway:
  state_dir: "{dir}"
  switches: {{ write: accept_async }}
  routes:
    - name: orders
      match: {{ path: /orders }}
      upstream: {url}
      degrade: {{ write: accept_async }}
"#,
        dir = dir.display(),
        url = upstream.url()
    );
    let gateway = Gateway::start(&yaml).await;
    let reply =
        gateway.send(Method::POST, "/orders", &[("content-type", "application/json")], r#"{"item":1}"#).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let id = reply.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(reply.header("location"), Some(format!("/_floodgate/accepted/{id}").as_str()));
    // Replayed to the healthy upstream; the outcome can be fetched.
    let mut state = String::new();
    for _ in 0..100 {
        let status = gateway.get(&format!("/_floodgate/accepted/{id}"), &[]).await.json();
        state = status["state"].as_str().unwrap().to_owned();
        if state == "delivered" {
            assert_eq!(status["status"], 200);
            assert!(status["body"].as_str().unwrap().contains("/orders"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, "delivered");
    let seen = upstream.seen.lock().last().cloned().unwrap();
    assert_eq!((seen.method.as_str(), &seen.body[..]), ("POST", &br#"{"item":1}"#[..]));
    assert_eq!(seen.headers["content-type"], "application/json");
    // Reads still go live.
    assert_eq!(gateway.get("/orders", &[]).await.status, 200);
    assert_eq!(gateway.get("/_floodgate/accepted/unknown", &[]).await.status, 404);
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
