//! Who may call: the configuration's `auth:` clients (DESIGN.md §12), compiled for one running
//! configuration, below every front door.
//!
//! A front door asks [`Clients::authorize`] with the request's `Authorization` header (gRPC: its
//! `authorization` metadata) and the [`Scope`] its endpoint needs:
//!
//! | endpoint | scope |
//! |---|---|
//! | `POST /v1/check`, `POST /v1/peek`, gRPC `ShouldRateLimit` | `check` |
//! | `POST /v1/report` | `report` |
//! | `POST /v1/reserve`, `/v1/commit`, `/v1/release` | `reserve` |
//! | `GET /v1/usage` | `check` |
//! | `POST /v1/simulate` | `check`, or the admin API's access (the dashboard's playground) |
//! | `/admin/...` | `admin` (see [`admin_access`]) |
//!
//! No token, or one no client has: [`Refusal::Missing`] / [`Refusal::Unknown`] (401). A client
//! without the scope, or asking for a descriptor pinned to another value:
//! [`Refusal::Scope`] / [`Refusal::Pinned`] (403).
//!
//! Tokens are compared in constant time: the presented token's SHA-256 against every client's (all
//! of them, whichever matches), so neither its length, its content nor which client it belongs to
//! shows in the time taken. Neither tokens nor digests are ever logged. A reload reads the tokens
//! anew and swaps the clients with the rest of the configuration: a rotated token is in force for
//! the next request.

use std::sync::Arc;

use floodgate::Descriptors;
use floodgate_config::auth::{AuthConfig, Scope, Scopes};
use ring::digest::{SHA256, digest};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::metrics::{Api, ClientRequests, Metrics};

/// The scope a front door's endpoint needs (see the table above).
pub fn scope_of(api: Api) -> Scope {
    match api {
        Api::Check | Api::Peek | Api::Grpc | Api::Gateway => Scope::Check,
        Api::Report => Scope::Report,
    }
}

/// The clients of one running configuration.
pub struct Clients {
    clients: Box<[Client]>,
    /// Whether some client holds the `admin` scope (the admin API then requires a token).
    any_admin: bool,
    /// What they were built from (a reload compares tokens with it).
    config: AuthConfig,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").field("clients", &self.clients).finish_non_exhaustive()
    }
}

/// One client.
pub struct Client {
    /// Its name (the `client` label).
    pub name: String,
    digest: [u8; 32],
    scopes: Scopes,
    /// Descriptors pinned to it, sorted by name.
    pinned: Box<[(String, String)]>,
    /// Its `floodgate_requests_total` counters.
    pub requests: Arc<ClientRequests>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("pinned", &self.pinned)
            .finish_non_exhaustive()
    }
}

/// Why a request is refused.
#[derive(Debug)]
pub enum Refusal<'a> {
    /// No `Authorization: Bearer` token.
    Missing,
    /// A token no client has.
    Unknown,
    /// A client without the scope the endpoint needs.
    Scope(&'a Client, Scope),
    /// A client asking for `descriptor` with another value than the one pinned to it (or, on an
    /// Envoy domain, not naming it).
    Pinned {
        /// The client.
        client: &'a Client,
        /// The descriptor pinned to it.
        descriptor: &'a str,
        /// The value pinned.
        value: &'a str,
    },
}

impl<'a> Refusal<'a> {
    /// Whether the answer is 401 (no valid credentials) rather than 403.
    pub fn unauthenticated(&self) -> bool {
        matches!(self, Refusal::Missing | Refusal::Unknown)
    }

    /// The client, when the token was one.
    pub fn client(&self) -> Option<&'a Client> {
        match self {
            Refusal::Missing | Refusal::Unknown => None,
            Refusal::Scope(client, _) | Refusal::Pinned { client, .. } => Some(client),
        }
    }

    /// What the caller is told (never the token).
    pub fn detail(&self) -> String {
        match self {
            Refusal::Missing => {
                "This server requires `Authorization: Bearer <token>` with a client's token.".into()
            }
            Refusal::Unknown => "The bearer token is not one of this server's clients.".into(),
            Refusal::Scope(client, scope) => {
                format!(
                    "Client {:?} does not have the {:?} scope this endpoint needs.",
                    client.name,
                    scope.as_str()
                )
            }
            Refusal::Pinned { client, descriptor, value } => format!(
                "Client {:?} may only use descriptor {descriptor:?} = {value:?}, and must name it on an Envoy domain.",
                client.name
            ),
        }
    }
}

impl Clients {
    /// The clients of `config`, counted in `metrics` under their names.
    pub fn new(config: AuthConfig, metrics: &Metrics) -> Clients {
        let clients: Box<[Client]> = config
            .clients
            .iter()
            .map(|c| Client {
                name: c.name.clone(),
                digest: sha256(&c.token.0),
                scopes: c.scopes,
                pinned: c.descriptors.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                requests: metrics.client(&c.name),
            })
            .collect();
        let any_admin = clients.iter().any(|c| c.scopes.contains(Scope::Admin));
        Clients { clients, any_admin, config }
    }

    /// The configuration they were built from.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// Whether some client holds the `admin` scope.
    pub fn any_admin(&self) -> bool {
        self.any_admin
    }

    /// The client whose token `authorization` carries (`Bearer <token>`, the scheme in any case).
    pub fn identify(&self, authorization: Option<&[u8]>) -> Result<&Client, Refusal<'_>> {
        let token = authorization.and_then(bearer).ok_or(Refusal::Missing)?;
        let presented = sha256(token);
        // Every client is compared, and the match selected without a branch on secret data.
        let mut found = u32::MAX;
        for (i, client) in self.clients.iter().enumerate() {
            let equal = client.digest.ct_eq(&presented);
            found = u32::conditional_select(&found, &(i as u32), equal);
        }
        self.clients.get(found as usize).ok_or(Refusal::Unknown)
    }

    /// The client of `authorization`, when it holds `scope`.
    pub fn authorize(&self, authorization: Option<&[u8]>, scope: Scope) -> Result<&Client, Refusal<'_>> {
        let client = self.identify(authorization)?;
        if client.scopes.contains(scope) { Ok(client) } else { Err(Refusal::Scope(client, scope)) }
    }
}

impl Client {
    /// Whether the client holds `scope`.
    pub fn holds(&self, scope: Scope) -> bool {
        self.scopes.contains(scope)
    }

    /// Applies the descriptors pinned to this client to a request's: a value other than the
    /// pinned one is refused; a missing one is added (`native`: the native policy), or refused (an
    /// Envoy domain, whose rules match descriptors as entries in order, so adding one would change
    /// which rule applies).
    pub fn pin(&self, descriptors: &mut Descriptors, native: bool) -> Result<(), Refusal<'_>> {
        for (name, value) in self.pinned.iter() {
            match descriptors.get(name) {
                Some(given) if given == value => {}
                None if native => descriptors.insert(name.clone(), value.clone()),
                _ => return Err(Refusal::Pinned { client: self, descriptor: name, value }),
            }
        }
        Ok(())
    }

    /// Whether an Envoy descriptor (its entries) names every pinned descriptor with its value.
    pub fn check_entries<'e>(
        &self,
        entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
    ) -> Result<(), Refusal<'_>> {
        for (name, value) in self.pinned.iter() {
            if !entries.clone().any(|(k, v)| k == name && v == value) {
                return Err(Refusal::Pinned { client: self, descriptor: name, value });
            }
        }
        Ok(())
    }
}

/// Who may use the admin API.
#[derive(Debug, PartialEq, Eq)]
pub enum Access {
    /// Admitted, as this caller.
    Admitted(AdminCaller),
    /// 401: a token is required and none valid was sent.
    Unauthorized,
    /// 403: a client's token without the `admin` scope.
    MissingScope(String),
    /// 403: no token is configured and the peer is not on loopback.
    LoopbackOnly,
}

/// Who an admitted admin call is from: what the audit log records as its `by`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCaller {
    /// The bearer of the server's admin token (`--admin-token`).
    AdminToken,
    /// The `auth` client of this name, which holds the `admin` scope.
    Client(String),
    /// A loopback peer, on a server that requires no token.
    Loopback,
}

impl AdminCaller {
    /// Who asked, as the audit log writes it: `caller`'s [`AdminCaller::label`], or `unknown`
    /// when no one was named (a router without the admin API's access check).
    pub fn audit_name(caller: Option<&AdminCaller>) -> String {
        caller.map_or_else(|| "unknown".to_owned(), AdminCaller::label)
    }

    /// As the audit log writes it: `admin_token`, `client:<name>` or `loopback`.
    pub fn label(&self) -> String {
        match self {
            AdminCaller::AdminToken => "admin_token".to_owned(),
            AdminCaller::Client(name) => format!("client:{name}"),
            AdminCaller::Loopback => "loopback".to_owned(),
        }
    }
}

/// The admin API's access rule, unifying the admin token with the clients:
/// - a token is required when the server has an admin token (`--admin-token`) or some client
///   holds the `admin` scope; the admin token, or an `admin` client's token, then admits, from
///   anywhere; another client's token is 403, anything else 401;
/// - otherwise only loopback peers are admitted (forwarding headers are ignored).
pub fn admin_access(
    admin_token: Option<&str>,
    clients: Option<&Clients>,
    loopback: bool,
    authorization: Option<&[u8]>,
) -> Access {
    let clients_require = clients.is_some_and(Clients::any_admin);
    if admin_token.is_none() && !clients_require {
        return if loopback { Access::Admitted(AdminCaller::Loopback) } else { Access::LoopbackOnly };
    }
    let token = authorization.and_then(bearer);
    if let (Some(expected), Some(given)) = (admin_token, token)
        && bool::from(sha256(expected.as_bytes()).ct_eq(&sha256(given)))
    {
        return Access::Admitted(AdminCaller::AdminToken);
    }
    match clients.map(|c| c.authorize(authorization, Scope::Admin)) {
        Some(Ok(client)) => Access::Admitted(AdminCaller::Client(client.name.clone())),
        Some(Err(Refusal::Scope(client, _))) => Access::MissingScope(client.name.clone()),
        _ => Access::Unauthorized,
    }
}

/// The token of `Bearer <token>` (RFC 6750: the scheme in any case, then spaces), if any.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_config::auth::{Client as ClientConfig, TokenSource};
    use floodgate_config::gateway::Secret;

    fn clients() -> Clients {
        let client = |name: &str, token: &str, scopes: &[Scope], pinned: &[(&str, &str)]| ClientConfig {
            name: name.into(),
            token: Secret(token.as_bytes().to_vec()),
            token_source: TokenSource::Env("X".into()),
            scopes: scopes.iter().copied().collect(),
            descriptors: pinned.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        let config = AuthConfig {
            clients: vec![
                client("bff", "bff-token-0123456789", &[Scope::Check], &[("tenant", "t1")]),
                client("ops", "ops-token-0123456789", &[Scope::Admin], &[]),
            ],
        };
        Clients::new(config, &Metrics::new("memory"))
    }

    #[test]
    fn a_token_identifies_its_client_and_nothing_else_does() {
        let c = clients();
        assert_eq!(c.identify(Some(b"Bearer bff-token-0123456789")).unwrap().name, "bff");
        assert_eq!(c.identify(Some(b"bearer   ops-token-0123456789 ")).unwrap().name, "ops");
        assert!(matches!(c.identify(None), Err(Refusal::Missing)));
        assert!(matches!(c.identify(Some(b"Basic bff-token-0123456789")), Err(Refusal::Missing)));
        assert!(matches!(c.identify(Some(b"Bearer ")), Err(Refusal::Missing)));
        assert!(matches!(c.identify(Some(b"Bearer bff-token-012345678")), Err(Refusal::Unknown)));
        assert!(matches!(c.identify(Some(b"Bearer bff-token-01234567890")), Err(Refusal::Unknown)));
        assert!(matches!(
            c.authorize(Some(b"Bearer bff-token-0123456789"), Scope::Report),
            Err(Refusal::Scope(_, Scope::Report))
        ));
    }

    #[test]
    fn pinned_descriptors_are_added_on_the_native_policy_and_never_overridden() {
        let c = clients();
        let bff = c.identify(Some(b"Bearer bff-token-0123456789")).unwrap();
        let mut d = Descriptors::new().with("user", "u1");
        bff.pin(&mut d, true).unwrap();
        assert_eq!(d.get("tenant"), Some("t1"));
        let mut other = Descriptors::new().with("tenant", "t2");
        assert!(matches!(bff.pin(&mut other, true), Err(Refusal::Pinned { descriptor: "tenant", .. })));
        let mut missing = Descriptors::new().with("user", "u1");
        assert!(bff.pin(&mut missing, false).is_err(), "an Envoy domain must name it");
        assert!(bff.check_entries([("tenant", "t1"), ("user", "u")].into_iter()).is_ok());
        assert!(bff.check_entries([("user", "u")].into_iter()).is_err());
    }

    #[test]
    fn admin_access_unifies_the_admin_token_and_admin_clients() {
        let c = clients();
        let ops = Some(&b"Bearer ops-token-0123456789"[..]);
        let bff = Some(&b"Bearer bff-token-0123456789"[..]);
        // No admin token, no admin client: loopback only, as before.
        assert_eq!(admin_access(None, None, true, None), Access::Admitted(AdminCaller::Loopback));
        assert_eq!(admin_access(None, None, false, None), Access::LoopbackOnly);
        // An admin client: a token is required, from loopback too.
        assert_eq!(admin_access(None, Some(&c), true, None), Access::Unauthorized);
        assert_eq!(
            admin_access(None, Some(&c), false, ops),
            Access::Admitted(AdminCaller::Client("ops".into()))
        );
        assert_eq!(admin_access(None, Some(&c), true, bff), Access::MissingScope("bff".into()));
        // The admin token admits beside the clients.
        let admin = Some(&b"Bearer the-admin-token"[..]);
        assert_eq!(
            admin_access(Some("the-admin-token"), Some(&c), false, admin),
            Access::Admitted(AdminCaller::AdminToken)
        );
        assert_eq!(admin_access(Some("the-admin-token"), None, false, ops), Access::Unauthorized);
    }
}
