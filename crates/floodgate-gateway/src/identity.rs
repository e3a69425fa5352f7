//! Who the caller is: a `Bearer` JWT verified with the configured keys, or nobody (anonymous).
//!
//! - HS256 with the secret of `hs256_secret_env` (its raw bytes); RS256 and ES256 with the keys of
//!   `jwks_file` (by `kid` when the token names one, else every key of its algorithm is tried).
//! - `exp` is required; `exp` and `nbf` are checked (with `leeway`), and `iss` and `aud` when
//!   configured. `alg: none` and every algorithm but these three are refused: a token's header
//!   never chooses a weaker check than the keys allow.
//! - The claims named by `identity.claims` give `user`, `tenant` and `plan` (a string, or a number
//!   written as text); `authenticated` is `"true"`.
//!
//! Without a token the request is anonymous: `authenticated` is `"false"`, and the unverified
//! identity headers (`identity.headers`) give the identity descriptors. A client's identity
//! headers never override a verified token's claims: with a valid token they are not read.

use floodgate::Descriptors;
use floodgate_config::gateway::{Claims, IdentityHeaders, Jwt};
use http::HeaderMap;
use http::header::AUTHORIZATION;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

/// The keys tokens are verified with, and how claims become descriptors.
pub(super) struct Verifier {
    hs256: Option<DecodingKey>,
    /// `(kid, algorithm, key)` of the JWKS file.
    jwks: Vec<(Option<String>, Algorithm, DecodingKey)>,
    issuer: Option<String>,
    audience: Option<Vec<String>>,
    leeway: u64,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("hs256", &self.hs256.is_some())
            .field("jwks", &self.jwks.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

/// What a request's credentials say.
#[derive(Debug)]
pub(super) enum Identity {
    /// No token: anonymous.
    Anonymous,
    /// A verified token's claims.
    Verified(Map<String, Value>),
}

impl Verifier {
    /// The verifier of `jwt` (checked when the configuration was loaded: every key is usable).
    pub(super) fn new(jwt: &Jwt) -> Verifier {
        let jwks = jwt
            .jwks
            .iter()
            .filter_map(|key| {
                let algorithm = match &key.algorithm {
                    jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => Algorithm::RS256,
                    jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                    _ => return None,
                };
                let decoding = DecodingKey::from_jwk(key).ok()?;
                Some((key.common.key_id.clone(), algorithm, decoding))
            })
            .collect();
        Verifier {
            hs256: jwt.hs256_secret.as_ref().map(|s| DecodingKey::from_secret(&s.0)),
            jwks,
            issuer: jwt.issuer.clone(),
            audience: jwt.audience.clone(),
            leeway: jwt.leeway.as_secs(),
        }
    }

    /// The request's identity: anonymous without an `Authorization: Bearer` header, its claims
    /// when the token verifies, or why it does not.
    pub(super) fn identify(&self, headers: &HeaderMap) -> Result<Identity, String> {
        let Some(value) = headers.get(AUTHORIZATION) else { return Ok(Identity::Anonymous) };
        let text = value.to_str().map_err(|_| "the Authorization header is not text".to_owned())?;
        let Some((scheme, token)) = text.trim().split_once(' ') else {
            return Err("expected Authorization: Bearer <token>".into());
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            // Another scheme (Basic, say) is not the gateway's to judge: anonymous.
            return Ok(Identity::Anonymous);
        }
        self.verify(token.trim()).map(Identity::Verified)
    }

    fn verify(&self, token: &str) -> Result<Map<String, Value>, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("malformed token ({e})"))?;
        let candidates: Vec<&DecodingKey> = match header.alg {
            Algorithm::HS256 => self.hs256.iter().collect(),
            Algorithm::RS256 | Algorithm::ES256 => self
                .jwks
                .iter()
                .filter(|(kid, alg, _)| {
                    *alg == header.alg && (header.kid.is_none() || kid.is_none() || *kid == header.kid)
                })
                .map(|(_, _, key)| key)
                .collect(),
            other => return Err(format!("algorithm {other:?} is not accepted")),
        };
        if candidates.is_empty() {
            return Err(format!(
                "no key for algorithm {:?}{}",
                header.alg,
                match &header.kid {
                    Some(kid) => format!(" and kid {kid:?}"),
                    None => String::new(),
                }
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        validation.validate_exp = true;
        validation.set_required_spec_claims(&["exp"]);
        match &self.audience {
            Some(audience) => validation.set_audience(audience),
            None => validation.validate_aud = false,
        }
        if let Some(issuer) = &self.issuer {
            validation.set_issuer(&[issuer]);
        }
        let mut last = String::new();
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation) {
                Ok(data) => return Ok(data.claims),
                Err(e) => last = describe(&e),
            }
        }
        Err(last)
    }
}

/// Why a token failed, for the 401's detail (never the token or a key).
fn describe(error: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match error.kind() {
        ErrorKind::ExpiredSignature => "it has expired".into(),
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => "it is not for this audience".into(),
        ErrorKind::InvalidIssuer => "it is not from the expected issuer".into(),
        ErrorKind::InvalidSignature => "its signature does not verify".into(),
        // Also a claim present but no whole number of seconds that fits 64 bits (`exp: 1e23`).
        ErrorKind::MissingRequiredClaim(claim) => {
            format!("it has no {claim} claim, or one that is no whole number of seconds")
        }
        ErrorKind::InvalidAlgorithm => "its algorithm does not match the key".into(),
        other => format!("it cannot be read ({other:?})"),
    }
}

/// Adds the identity descriptors: from verified claims, or for an anonymous request from the
/// unverified identity headers. `authenticated` is `"true"` or `"false"`. Returns the identity
/// values set, `(descriptor, value)`, to pass to the upstream in place of the client's headers.
pub(super) fn describe_identity(
    identity: &Identity,
    claims: &Claims,
    headers: &IdentityHeaders,
    request: &HeaderMap,
    out: &mut Descriptors,
) -> Vec<(&'static str, String)> {
    let mut set = Vec::new();
    match identity {
        Identity::Verified(map) => {
            out.insert("authenticated", "true");
            for (descriptor, claim) in
                [("user", &claims.user), ("tenant", &claims.tenant), ("plan", &claims.plan)]
            {
                let value = match map.get(claim.as_str()) {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Number(n)) => Some(n.to_string()),
                    Some(Value::Bool(b)) => Some(b.to_string()),
                    _ => None,
                };
                if let Some(value) = value {
                    out.insert(descriptor, &value);
                    set.push((descriptor, value));
                }
            }
        }
        Identity::Anonymous => {
            out.insert("authenticated", "false");
            for (descriptor, header) in headers.iter() {
                if let Some(value) = request.get(header) {
                    out.insert(descriptor, String::from_utf8_lossy(value.as_bytes()));
                }
            }
        }
    }
    set
}
