//! Who the caller is: `identity:` — JWT verification (HS256 with a secret from the environment,
//! RS256/ES256 with a JWKS file, both read and checked at load), the claims that give `user`,
//! `tenant` and `plan`, and the unverified identity headers.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet};

use crate::error::Invalid;
use crate::yaml::{Item, Value};

/// Who the caller is: a verified JWT's claims, or, without a token, unverified identity headers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Identity {
    /// JWT verification; `None`: no token is verified, every request is anonymous.
    pub jwt: Option<Jwt>,
    /// Which claims give `user`, `tenant` and `plan` (default `sub`, `tid`, `plan`).
    pub claims: Claims,
    /// Request headers that give `user`, `tenant` or `plan` **only when no token was verified**
    /// (default none). A verified token's claims always win, and the gateway replaces these
    /// headers with the verified values toward the upstream.
    pub headers: IdentityHeaders,
}

/// The claims that give the identity descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `user` (default `sub`).
    pub user: String,
    /// `tenant` (default `tid`).
    pub tenant: String,
    /// `plan` (default `plan`).
    pub plan: String,
}

impl Default for Claims {
    fn default() -> Self {
        Claims { user: "sub".into(), tenant: "tid".into(), plan: "plan".into() }
    }
}

/// Unverified identity headers (see [`Identity::headers`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentityHeaders {
    /// The header giving `user`, e.g. `x-user-id`.
    pub user: Option<HeaderName>,
    /// The header giving `tenant`, e.g. `x-tenant-id`.
    pub tenant: Option<HeaderName>,
    /// The header giving `plan`.
    pub plan: Option<HeaderName>,
}

impl IdentityHeaders {
    /// `(descriptor, header)` for each header configured.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &HeaderName)> {
        [("user", &self.user), ("tenant", &self.tenant), ("plan", &self.plan)]
            .into_iter()
            .filter_map(|(d, h)| h.as_ref().map(|h| (d, h)))
    }
}

/// How tokens are verified: HS256 with a shared secret, RS256/ES256 with the keys of a JWKS file.
#[derive(Clone, PartialEq)]
pub struct Jwt {
    /// The HS256 secret: the raw bytes of the environment variable named by `hs256_secret_env`.
    pub hs256_secret: Option<Secret>,
    /// The environment variable the secret was read from.
    pub hs256_secret_env: Option<String>,
    /// The RS256 and ES256 (P-256) keys of the JWKS file.
    pub jwks: Vec<Jwk>,
    /// The JWKS file.
    pub jwks_file: Option<PathBuf>,
    /// The required `iss`, if any.
    pub issuer: Option<String>,
    /// The accepted `aud` values (a token must name one), if any.
    pub audience: Option<Vec<String>>,
    /// Clock skew allowed on `exp` and `nbf` (default 0 s).
    pub leeway: Duration,
}

impl fmt::Debug for Jwt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jwt")
            .field("hs256_secret_env", &self.hs256_secret_env)
            .field("jwks_file", &self.jwks_file)
            .field("jwks", &self.jwks.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway", &self.leeway)
            .finish_non_exhaustive()
    }
}

/// Secret bytes, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

pub(super) fn identity(item: Item<'_>) -> Result<Identity, Invalid> {
    let fields = item.fields("the identity settings", Some(&["jwt", "claims", "headers"]))?;
    let mut identity = Identity::default();
    if let Some(j) = fields.get("jwt").filter(|i| !i.is_null()) {
        identity.jwt = Some(jwt(j)?);
    }
    if let Some(c) = fields.get("claims").filter(|i| !i.is_null()) {
        let claims = c.fields("the claims of the identity descriptors", Some(&["user", "tenant", "plan"]))?;
        for (name, slot) in [
            ("user", &mut identity.claims.user),
            ("tenant", &mut identity.claims.tenant),
            ("plan", &mut identity.claims.plan),
        ] {
            if let Some(claim) = claims.get(name) {
                let text = claim.str("a claim name")?;
                if text.is_empty() {
                    return Err(claim.error("a claim name cannot be empty"));
                }
                *slot = text.to_owned();
            }
        }
    }
    if let Some(h) = fields.get("headers").filter(|i| !i.is_null()) {
        let headers = h.fields("identity headers (user, tenant, plan)", Some(&["user", "tenant", "plan"]))?;
        for (name, slot) in [
            ("user", &mut identity.headers.user),
            ("tenant", &mut identity.headers.tenant),
            ("plan", &mut identity.headers.plan),
        ] {
            if let Some(header) = headers.get(name) {
                *slot = Some(header_name(&header)?);
            }
        }
    }
    Ok(identity)
}

fn header_name(item: &Item<'_>) -> Result<HeaderName, Invalid> {
    let text = item.str("a header name")?;
    HeaderName::from_bytes(text.to_ascii_lowercase().as_bytes())
        .map_err(|_| item.error(format!("invalid header name {}", item.node.describe())))
}

const JWT_FIELDS: &[&str] = &["hs256_secret_env", "jwks_file", "issuer", "audience", "leeway"];

fn jwt(item: Item<'_>) -> Result<Jwt, Invalid> {
    let fields = item.fields("the JWT settings", Some(JWT_FIELDS))?;
    let mut jwt = Jwt {
        hs256_secret: None,
        hs256_secret_env: None,
        jwks: Vec::new(),
        jwks_file: None,
        issuer: None,
        audience: None,
        leeway: Duration::ZERO,
    };
    if let Some(e) = fields.get("hs256_secret_env") {
        let name = e.str("an environment variable name")?;
        let value = std::env::var_os(name).ok_or_else(|| {
            e.error(format!("the environment variable {name:?} (the HS256 secret) is not set"))
        })?;
        let bytes = value.into_encoded_bytes();
        if bytes.len() < 32 {
            return Err(e.error(format!(
                "the HS256 secret in {name:?} is {} bytes: use at least 32 random bytes",
                bytes.len()
            )));
        }
        jwt.hs256_secret = Some(Secret(bytes));
        jwt.hs256_secret_env = Some(name.to_owned());
    }
    if let Some(f) = fields.get("jwks_file") {
        let path = f.str("a JWKS file path")?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| f.error(format!("cannot read the JWKS file {path:?}: {e}")))?;
        let set: JwkSet = serde_json::from_str(&text)
            .map_err(|e| f.error(format!("the JWKS file {path:?} is not a JSON Web Key Set: {e}")))?;
        for (i, key) in set.keys.iter().enumerate() {
            check_jwk(key).map_err(|why| f.error(format!("the JWKS file {path:?}: key {i}: {why}")))?;
        }
        if set.keys.is_empty() {
            return Err(f.error(format!("the JWKS file {path:?} has no keys")));
        }
        jwt.jwks = set.keys;
        jwt.jwks_file = Some(PathBuf::from(path));
    }
    if jwt.hs256_secret.is_none() && jwt.jwks.is_empty() {
        return Err(
            item.error("jwt needs hs256_secret_env, jwks_file or both: the keys tokens are verified with")
        );
    }
    if let Some(i) = fields.get("issuer") {
        jwt.issuer = Some(i.str("an issuer")?.to_owned());
    }
    if let Some(a) = fields.get("audience") {
        let values = match &a.node.value {
            Value::Seq(_) => a
                .elements("a list of audiences")?
                .iter()
                .map(|e| e.str("an audience").map(str::to_owned))
                .collect::<Result<Vec<_>, _>>()?,
            _ => vec![a.str("an audience")?.to_owned()],
        };
        if values.is_empty() {
            return Err(a.error("audience is an empty list: name at least one, or remove it"));
        }
        jwt.audience = Some(values);
    }
    if let Some(l) = fields.get("leeway") {
        let text = l.text("a duration")?;
        jwt.leeway = crate::duration::parse(&text)
            .map_err(|why| l.error(format!("invalid leeway {}: {why}", l.node.describe())))?;
    }
    Ok(jwt)
}

/// A JWKS key the gateway can verify with: RSA (RS256) or EC P-256 (ES256), with a usable key.
fn check_jwk(key: &Jwk) -> Result<(), String> {
    use jsonwebtoken::jwk::{EllipticCurve, KeyAlgorithm};
    match &key.algorithm {
        AlgorithmParameters::RSA(_) => {
            if key.common.key_algorithm.is_some_and(|a| a != KeyAlgorithm::RS256) {
                return Err("an RSA key must be for RS256".into());
            }
        }
        AlgorithmParameters::EllipticCurve(ec) => {
            if ec.curve != EllipticCurve::P256 {
                return Err("an EC key must be on P-256 (ES256)".into());
            }
            if key.common.key_algorithm.is_some_and(|a| a != KeyAlgorithm::ES256) {
                return Err("an EC key must be for ES256".into());
            }
        }
        _ => return Err("only RSA (RS256) and EC P-256 (ES256) keys are supported".into()),
    }
    jsonwebtoken::DecodingKey::from_jwk(key).map(|_| ()).map_err(|e| format!("unusable key: {e}"))
}
