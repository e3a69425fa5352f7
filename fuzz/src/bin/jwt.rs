#![cfg_attr(fuzzing, no_main)]
//! Fuzz target: the gateway's JWT verification (`floodgate_gateway::verify_authorization`),
//! HS256 with a secret the input never knows, seeded with well-formed and broken tokens.
//!
//! Input: the first byte picks the mode; the rest is either (even) an `Authorization` header value
//! as a client sends it, or (odd) a claims payload, signed here with the configured secret.
//!
//! Properties: no header panics. A header the input wrote itself never verifies — forging the
//! signature without the secret is what must stay impossible, whatever the header's shape
//! (`alg: none`, another algorithm, odd base64, a huge header). A payload signed with the secret
//! verifies only as the JSON object it is, claims unchanged; one that is an object with a far
//! `exp` and no `nbf` always verifies; and the same token with its signature altered never does.

use std::time::{SystemTime, UNIX_EPOCH};

use floodgate_config::gateway::{Jwt, Secret};
use floodgate_gateway::verify_authorization;
use http::{HeaderMap, HeaderValue};
use jsonwebtoken::{EncodingKey, Header};
use serde_json::{Map, Value};

const SECRET: &[u8] = b"floodgate-fuzz-hs256-secret-0123456789abcdef";

fn jwt() -> Jwt {
    Jwt {
        hs256_secret: Some(Secret(SECRET.to_vec())),
        hs256_secret_env: Some("FUZZ_SECRET".into()),
        jwks: Vec::new(),
        jwks_file: None,
        issuer: None,
        audience: None,
        leeway: std::time::Duration::ZERO,
    }
}

fn verify(value: &[u8]) -> Option<Result<Option<Map<String, Value>>, String>> {
    let value = HeaderValue::from_bytes(value).ok()?;
    let mut headers = HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, value);
    Some(verify_authorization(&jwt(), &headers))
}

floodgate_fuzz::fuzz_target!(|data| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode & 1 == 0 {
        if let Some(result) = verify(rest) {
            assert!(!matches!(result, Ok(Some(_))), "a token the input wrote verified: {result:?}");
        }
        return;
    }
    let Ok(payload) = serde_json::from_slice::<Value>(rest) else { return };
    let Ok(token) = jsonwebtoken::encode(&Header::default(), &payload, &EncodingKey::from_secret(SECRET))
    else {
        return;
    };
    let result = verify(format!("Bearer {token}").as_bytes()).expect("a token is a header value");
    if let Ok(Some(claims)) = &result {
        // The payload as the token carries it: written as JSON, and read back (a number past f64's
        // precision reads back as its nearest float, not always the same one twice).
        let sent: Value = serde_json::from_str(&payload.to_string()).expect("JSON reads back");
        assert_eq!(Some(claims), sent.as_object(), "the claims are the payload, unchanged");
    }
    #[allow(clippy::disallowed_methods)]
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if let Some(object) = payload.as_object()
        // A NumericDate the verifier reads: a whole number of seconds that fits 64 bits.
        && object.get("exp").and_then(Value::as_u64).is_some_and(|exp| exp > now + 3600)
        && !object.contains_key("nbf")
    {
        assert!(matches!(result, Ok(Some(_))), "a well-signed token with a far exp was refused: {result:?}");
    }
    // The signature altered (its first character): never verifies.
    let (signed, signature) = token.rsplit_once('.').expect("three parts");
    let mut altered = signature.as_bytes().to_vec();
    if let Some(first) = altered.first_mut() {
        *first = if *first == b'A' { b'B' } else { b'A' };
    }
    let forged = format!("Bearer {signed}.{}", String::from_utf8_lossy(&altered));
    if let Some(result) = verify(forged.as_bytes()) {
        assert!(!matches!(result, Ok(Some(_))), "an altered signature verified");
    }
});
