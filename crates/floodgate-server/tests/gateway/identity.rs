//! Identity-aware pools: rules before verification (the IP pool, which stops a flood of bad tokens
//! before any signature is checked), JWT verification (ES256 and RS256 from a JWKS file here;
//! HS256 in `binary.rs`, whose secret comes from the environment), rules after it (per user, per
//! tenant, the anonymous pool), and client identity headers that never override verified claims.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

use super::Gateway;
use super::upstreams::{Behaviour, Upstream};

/// An ES256 key pair: the JWKS file holding its public key, and the key to sign with.
pub(crate) struct Keys {
    pub(crate) jwks: PathBuf,
    signing: EncodingKey,
}

impl Keys {
    pub(crate) fn new() -> Keys {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let raw = pair.public_key_raw();
        assert_eq!(raw.len(), 65, "an uncompressed P-256 point");
        let jwks = json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(&raw[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&raw[33..]),
        }]});
        let path = std::env::temp_dir().join(format!("floodgate-jwks-{}.json", fastrand::u64(..)));
        std::fs::write(&path, jwks.to_string()).unwrap();
        Keys { jwks: path, signing: EncodingKey::from_ec_der(&pair.serialize_der()) }
    }

    /// A token with `claims` (plus `exp` in an hour unless given).
    pub(crate) fn token(&self, mut claims: serde_json::Value) -> String {
        if claims.get("exp").is_none() {
            claims["exp"] = json!(now() + 3600);
        }
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("k1".into());
        jsonwebtoken::encode(&header, &claims, &self.signing).unwrap()
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.jwks);
    }
}

/// Unix seconds now, for the tokens' `exp` and `nbf` (which the gateway checks on the wall clock).
#[allow(clippy::disallowed_methods)]
pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs()
}

fn config(keys: &Keys, upstream: &Upstream) -> String {
    format!(
        r#"
rules:
  - name: per-ip
    key: [ip]
    algorithm: fixed_window
    limit: 8
    window: 60s
  - name: per-user
    key: [user]
    match: {{ authenticated: "true" }}
    algorithm: fixed_window
    limit: 2
    window: 60s
  - name: per-tenant
    key: [tenant]
    algorithm: fixed_window
    limit: 3
    window: 60s
  - name: anonymous
    key: [ip]
    match: {{ authenticated: "false" }}
    algorithm: fixed_window
    limit: 2
    window: 60s
gateway:
  trusted_proxies: [127.0.0.1/32]
  identity:
    jwt: {{ jwks_file: "{jwks}", issuer: https://id.example, audience: api }}
    claims: {{ user: sub, tenant: tid }}
    headers: {{ user: x-user-id, tenant: x-tenant-id }}
  routes:
    - name: all
      match: {{ path: "/{{*rest}}" }}
      upstream: {url}
"#,
        jwks = keys.jwks.display(),
        url = upstream.url()
    )
}

fn claims(sub: &str, tid: &str) -> serde_json::Value {
    json!({"sub": sub, "tid": tid, "iss": "https://id.example", "aud": "api"})
}

fn from(ip: &str) -> (&'static str, String) {
    ("x-forwarded-for", ip.to_owned())
}

#[tokio::test]
async fn a_flood_of_bad_tokens_is_stopped_by_the_ip_pool_before_any_signature_is_checked() {
    let (keys, upstream) = (Keys::new(), Upstream::start(Behaviour::Answer).await);
    let gateway = Gateway::start(&config(&keys, &upstream)).await;
    // Signed by another key under the same kid: its signature does not verify.
    let forged = Keys::new().token(claims("u1", "t1"));
    let (xff, ip) = from("203.0.113.1");
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let bearer = format!("Bearer {forged}");
        let reply = gateway.get("/r", &[(xff, &ip), ("authorization", &bearer)]).await;
        if reply.status == 401 {
            assert_eq!(reply.json()["type"], "https://floodgate.dev/problems/unauthorized");
            assert!(reply.json()["detail"].as_str().unwrap().contains("signature"), "{}", reply.body);
            assert!(reply.header("www-authenticate").is_some());
        }
        statuses.push(reply.status);
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 401, 401, 401, 429, 429]);
    assert_eq!(upstream.count(), 0);
    // A good token from the same IP is stopped by the same pool: it counts every request.
    let good = format!("Bearer {}", keys.token(claims("u1", "t1")));
    assert_eq!(gateway.get("/r", &[(xff, &ip), ("authorization", &good)]).await.status, 429);
    gateway.stop().await;
}

#[tokio::test]
async fn authenticated_and_anonymous_traffic_have_pools_of_their_own() {
    let (keys, upstream) = (Keys::new(), Upstream::start(Behaviour::Answer).await);
    let gateway = Gateway::start(&config(&keys, &upstream)).await;
    let (xff, ip) = from("203.0.113.2");
    let u1 = format!("Bearer {}", keys.token(claims("u1", "t1")));
    let u2 = format!("Bearer {}", keys.token(claims("u2", "t2")));
    // Anonymous: two, then the anonymous pool is spent.
    let anonymous: Vec<u16> = [
        gateway.get("/r", &[(xff, &ip)]).await.status,
        gateway.get("/r", &[(xff, &ip)]).await.status,
        gateway.get("/r", &[(xff, &ip)]).await.status,
    ]
    .into();
    assert_eq!(anonymous, [200, 200, 429]);
    // Authenticated users from the same address are not in the anonymous pool; each has two.
    let mut users = Vec::new();
    for token in [&u1, &u1, &u1, &u2] {
        users.push(gateway.get("/r", &[(xff, &ip), ("authorization", token)]).await.status);
    }
    assert_eq!(users, [200, 200, 429, 200], "per user after verification");
    // The upstream sees the verified identity, not the client's headers.
    let seen = upstream.seen.lock().last().cloned().unwrap();
    assert_eq!(seen.headers["x-user-id"], "u2");
    gateway.stop().await;
}

#[tokio::test]
async fn a_forged_tenant_header_is_ignored_under_a_valid_token() {
    let (keys, upstream) = (Keys::new(), Upstream::start(Behaviour::Answer).await);
    let gateway = Gateway::start(&config(&keys, &upstream)).await;
    let (xff, ip) = from("203.0.113.3");
    // Three users of tenant t1, each sending another tenant id: the tenant pool (3) is t1's.
    let mut statuses = Vec::new();
    for (i, user) in ["a", "b", "c", "d"].iter().enumerate() {
        let token = format!("Bearer {}", keys.token(claims(user, "t1")));
        let forged = format!("forged-{i}");
        let reply = gateway
            .get(
                "/r",
                &[(xff, &ip), ("authorization", &token), ("x-tenant-id", &forged), ("x-user-id", "admin")],
            )
            .await;
        statuses.push(reply.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429], "the verified tenant t1 is limited, whatever the header says");
    for seen in upstream.seen.lock().iter() {
        assert_eq!(seen.headers["x-tenant-id"], "t1", "the upstream gets the verified tenant");
        assert_ne!(seen.headers["x-user-id"], "admin");
    }
    gateway.stop().await;
}

#[tokio::test]
async fn expired_wrong_audience_wrong_issuer_premature_and_unsigned_tokens_get_401() {
    let (keys, upstream) = (Keys::new(), Upstream::start(Behaviour::Answer).await);
    let gateway = Gateway::start(&config(&keys, &upstream)).await;
    let unsigned = {
        let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#);
        let body = URL_SAFE_NO_PAD.encode(claims("u1", "t1").to_string());
        format!("{header}.{body}.")
    };
    let cases = [
        (keys.token(json!({"sub": "u", "tid": "t", "iss": "https://id.example", "aud": "api", "exp": now() - 60})), "expired"),
        (keys.token(json!({"sub": "u", "tid": "t", "iss": "https://id.example", "aud": "other"})), "audience"),
        (keys.token(json!({"sub": "u", "tid": "t", "iss": "https://evil.example", "aud": "api"})), "issuer"),
        (
            keys.token(json!({"sub": "u", "tid": "t", "iss": "https://id.example", "aud": "api", "nbf": now() + 600})),
            "not valid yet",
        ),
        (unsigned, "malformed"),
        ("not-a-jwt".to_owned(), "malformed"),
    ];
    for (i, (token, says)) in cases.iter().enumerate() {
        let ip = format!("198.51.100.{i}");
        let bearer = format!("Bearer {token}");
        let reply = gateway.get("/r", &[("x-forwarded-for", &ip), ("authorization", &bearer)]).await;
        assert_eq!(reply.status, 401, "{says}: {}", reply.body);
        assert_eq!(reply.header("content-type"), Some("application/problem+json"));
        let detail = reply.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(says), "{says}: {detail}");
    }
    assert_eq!(upstream.count(), 0);
    let valid = format!("Bearer {}", keys.token(claims("u9", "t9")));
    assert_eq!(
        gateway.get("/r", &[("x-forwarded-for", "198.51.100.99"), ("authorization", &valid)]).await.status,
        200
    );
    gateway.stop().await;
}

/// An RS256 token signed with a key of `fixtures/` (the JWKS beside it holds the public half of
/// `rs256-signing.pem` under kid `r1`; `rs256-other.pem` is a key the gateway does not know).
fn rs256_token(pem: &str, claims: serde_json::Value) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gateway/fixtures").join(pem);
    // PKCS#1 PEM: the base64 between the armour lines is the DER that ring reads.
    let pem = std::fs::read_to_string(&path).unwrap();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(body).unwrap();
    let key = EncodingKey::from_rsa_der(&der);
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("r1".into());
    let mut claims = claims;
    claims["exp"] = json!(now() + 3600);
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

#[tokio::test]
async fn rs256_tokens_verify_against_an_rsa_key_of_the_jwks_file() {
    let upstream = Upstream::start(Behaviour::Answer).await;
    let jwks = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gateway/fixtures/rs256-jwks.json");
    let text = format!(
        r#"
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 1
    window: 60s
gateway:
  identity:
    jwt: {{ jwks_file: "{jwks}", issuer: https://id.example, audience: api }}
    claims: {{ user: sub, tenant: tid }}
    headers: {{ user: x-user-id }}
  routes:
    - name: all
      match: {{ path: "/{{*rest}}" }}
      upstream: {url}
"#,
        jwks = jwks.display(),
        url = upstream.url()
    );
    let gateway = Gateway::start(&text).await;
    let good = format!("Bearer {}", rs256_token("rs256-signing.pem", claims("r-user", "t1")));
    let first = gateway.get("/r", &[("authorization", &good)]).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(upstream.seen.lock()[0].headers["x-user-id"], "r-user", "the verified subject");
    // The per-user pool is the verified subject's: its one request is spent.
    assert_eq!(gateway.get("/r", &[("authorization", &good)]).await.status, 429);
    // Signed by another RSA key under the same kid: refused before the upstream.
    let forged = format!("Bearer {}", rs256_token("rs256-other.pem", claims("r-user", "t1")));
    let refused = gateway.get("/r", &[("authorization", &forged)]).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert_eq!(refused.header("content-type"), Some("application/problem+json"));
    assert_eq!(upstream.count(), 1);
    gateway.stop().await;
}
