//! `auth:`: who may call the data plane (DESIGN.md §12). Each client has a name, a bearer token
//! read from an environment variable or a file **when the configuration is loaded** (so a reload
//! rotates it), the scopes it holds, and optionally descriptors pinned to it.
//!
//! ```yaml
//! auth:
//!   clients:
//!     - name: shop-bff
//!       token_env: SHOP_BFF_TOKEN          # or token_file: /run/secrets/shop-bff
//!       scopes: [check, report]
//!       descriptors: { tenant: shop }      # every call of this client is for tenant "shop"
//!     - name: ops
//!       token_file: /run/secrets/ops
//!       scopes: [admin]
//! ```
//!
//! Everything is checked now, at its line: the variable is set, the file is readable, a token is
//! at least [`MIN_TOKEN_BYTES`] long, no two clients share a name or a token, scopes are known.
//! Tokens are never printed (`Debug` shows their length).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::gateway::Secret;
use crate::error::Invalid;
use crate::yaml::{Item, did_you_mean};

/// The shortest token accepted, in bytes: 16 (e.g. `openssl rand -hex 16` gives 32).
pub const MIN_TOKEN_BYTES: usize = 16;

/// The name the metrics give requests without a client (`client="anonymous"`): no client may take it.
pub const ANONYMOUS: &str = "anonymous";

/// The `auth:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// The clients, in configuration order (at least one).
    pub clients: Vec<Client>,
}

/// One client of the data plane.
#[derive(Clone, PartialEq, Eq)]
pub struct Client {
    /// Its name: the `client` label of `floodgate_requests_total`, and the name in logs.
    pub name: String,
    /// Its bearer token (surrounding whitespace, such as a file's final newline, removed).
    pub token: Secret,
    /// Where the token was read.
    pub token_source: TokenSource,
    /// What it may call.
    pub scopes: Scopes,
    /// Descriptors pinned to it: a check or report of this client is for these values only (a
    /// request that names another value is refused; on the native policy a missing one is added).
    pub descriptors: BTreeMap<String, String>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("token_source", &self.token_source)
            .field("scopes", &self.scopes)
            .field("descriptors", &self.descriptors)
            .finish()
    }
}

/// Where a client's token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// An environment variable, by name (`token_env`).
    Env(String),
    /// A file (`token_file`), e.g. a mounted Kubernetes Secret.
    File(PathBuf),
}

/// A scope: what a client may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Scope {
    /// `POST /v1/check`, `POST /v1/peek`, `GET /v1/usage`, `POST /v1/simulate`, and gRPC
    /// `ShouldRateLimit`.
    Check = 1,
    /// `POST /v1/report`.
    Report = 2,
    /// `POST /v1/reserve`, `/v1/commit`, `/v1/release`.
    Reserve = 4,
    /// The admin API under `/admin/`.
    Admin = 8,
    /// Stating a limit, window or block duration with a check, peek or report (`stated`), for the
    /// rules that take them from the request; on top of the endpoint's own scope.
    StateLimits = 16,
}

impl Scope {
    /// Every scope, as configuration names it.
    pub const ALL: [Scope; 5] =
        [Scope::Check, Scope::Report, Scope::Reserve, Scope::Admin, Scope::StateLimits];

    /// Its name: `check`, `report`, `reserve`, `admin` or `state_limits`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Check => "check",
            Scope::Report => "report",
            Scope::Reserve => "reserve",
            Scope::Admin => "admin",
            Scope::StateLimits => "state_limits",
        }
    }

    fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of scopes.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    /// Whether `scope` is in the set.
    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope as u8 != 0
    }

    /// The set with `scope` added.
    pub fn with(self, scope: Scope) -> Scopes {
        Scopes(self.0 | scope as u8)
    }
}

impl fmt::Debug for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(Scope::ALL.into_iter().filter(|s| self.contains(*s))).finish()
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Self {
        iter.into_iter().fold(Scopes::default(), Scopes::with)
    }
}

const FIELDS: &[&str] = &["clients"];
const CLIENT_FIELDS: &[&str] = &["name", "token_env", "token_file", "scopes", "descriptors"];

/// Validates the `auth` section, reading every token.
pub(crate) fn compile(item: Item<'_>) -> Result<AuthConfig, Invalid> {
    let fields = item.fields("the auth settings", Some(FIELDS))?;
    let list =
        fields.require("clients", "the clients that may call, each with a name, a token and scopes")?;
    let mut clients: Vec<Client> = Vec::new();
    for element in list.elements("a list of clients")? {
        let client = client(&element)?;
        if clients.iter().any(|c| c.name == client.name) {
            return Err(element.error(format!("client {:?} is defined twice", client.name)));
        }
        if let Some(other) = clients.iter().find(|c| c.token == client.token) {
            return Err(element.error(format!(
                "client {:?} has the same token as client {:?}: each client needs its own token",
                client.name, other.name
            )));
        }
        clients.push(client);
    }
    if clients.is_empty() {
        return Err(list.error(
            "auth.clients is empty: every call would be refused; name at least one client, or remove auth",
        ));
    }
    Ok(AuthConfig { clients })
}

fn client(item: &Item<'_>) -> Result<Client, Invalid> {
    let fields = item.fields("a client", Some(CLIENT_FIELDS))?;
    let name_item = fields.require("name", "the client's name, e.g. shop-bff")?;
    let name = name_item.str("a client name")?;
    if name.is_empty()
        || name.len() > 64
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(name_item.error(format!(
            "invalid client name {}: 1 to 64 letters, digits, '-', '_' or '.' (it is a metrics label)",
            name_item.node.describe()
        )));
    }
    if name == ANONYMOUS {
        return Err(name_item.error(format!(
            "the client name {ANONYMOUS:?} is reserved for requests without a client (metrics)"
        )));
    }
    let (token, token_source) = match (fields.get("token_env"), fields.get("token_file")) {
        (Some(_), Some(_)) => {
            let key = fields.key_item("token_file").unwrap_or_else(|| item.clone());
            return Err(key.error("give token_env or token_file, not both"));
        }
        (None, None) => {
            return Err(item.missing(
                "token_env",
                format!(
                    "client {name:?} has no token: give token_env (a variable's name) or token_file (a path)"
                ),
            ));
        }
        (Some(e), None) => {
            let var = e.str("an environment variable name")?;
            let value = std::env::var_os(var).ok_or_else(|| {
                e.error(format!("the environment variable {var:?} (client {name:?}'s token) is not set"))
            })?;
            let value = value.into_string().map_err(|_| {
                e.error(format!("the environment variable {var:?} (client {name:?}'s token) is not UTF-8"))
            })?;
            (
                token(&e, &value, &format!("the environment variable {var:?}"))?,
                TokenSource::Env(var.to_owned()),
            )
        }
        (None, Some(f)) => {
            let path = f.str("a file path")?;
            let text = std::fs::read_to_string(path).map_err(|e| {
                f.error(format!("cannot read the token file {path:?} (client {name:?}'s token): {e}"))
            })?;
            (token(&f, &text, &format!("the token file {path:?}"))?, TokenSource::File(PathBuf::from(path)))
        }
    };
    let scopes_item =
        fields.require("scopes", "what the client may call: check, report, reserve, admin, state_limits")?;
    let mut scopes = Scopes::default();
    for s in scopes_item.elements("a list of scopes")? {
        let text = s.str("a scope")?;
        let scope = Scope::parse(text).ok_or_else(|| {
            s.error(format!(
                "unknown scope {text:?}: expected check, report, reserve or admin{}",
                did_you_mean(text, Scope::ALL.map(Scope::as_str))
            ))
        })?;
        scopes = scopes.with(scope);
    }
    if scopes == Scopes::default() {
        return Err(scopes_item.error(format!("client {name:?} has no scope: it could call nothing")));
    }
    let mut descriptors = BTreeMap::new();
    if let Some(d) = fields.get("descriptors").filter(|d| !d.is_null()) {
        let pinned = d.fields("descriptors pinned to the client (name: value)", None)?;
        for (descriptor, _, value) in pinned.iter() {
            let value = value.text("a descriptor value")?;
            descriptors.insert(descriptor.to_owned(), value.into_owned());
        }
    }
    Ok(Client { name: name.to_owned(), token, token_source, scopes, descriptors })
}

/// A token as given, without surrounding whitespace; refused when too short or when it has
/// characters a header cannot carry.
fn token(item: &Item<'_>, raw: &str, from: &str) -> Result<Secret, Invalid> {
    let token = raw.trim();
    if token.len() < MIN_TOKEN_BYTES {
        return Err(item.error(format!(
            "{from} holds a token of {} bytes: use at least {MIN_TOKEN_BYTES} random characters",
            token.len()
        )));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(item.error(format!(
            "{from} holds a token with spaces or characters other than printable ASCII: an \
             `Authorization: Bearer` header cannot carry it"
        )));
    }
    Ok(Secret(token.as_bytes().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse_document;

    fn compile_text(text: &str) -> Result<AuthConfig, Invalid> {
        let root = parse_document(text).expect("valid YAML");
        compile(Item::root(&root))
    }

    fn token_file(name: &str, content: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("floodgate-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn a_client_reads_its_token_from_a_file_without_the_final_newline() {
        let path = token_file("ok", "0123456789abcdef0123\n");
        let auth = compile_text(&format!(
            "clients:\n  - name: bff\n    token_file: {}\n    scopes: [check, report]\n    descriptors: {{tenant: t1}}\n",
            path.display()
        ))
        .unwrap();
        let client = &auth.clients[0];
        assert_eq!(client.token.0, b"0123456789abcdef0123");
        assert!(client.scopes.contains(Scope::Check) && client.scopes.contains(Scope::Report));
        assert!(!client.scopes.contains(Scope::Admin) && !client.scopes.contains(Scope::Reserve));
        assert_eq!(client.descriptors["tenant"], "t1");
        assert!(!format!("{client:?}").contains("0123456789"), "never printed: {client:?}");
    }

    #[test]
    fn a_missing_variable_or_file_is_an_error_at_its_line() {
        let e = compile_text(
            "clients:\n  - name: bff\n    token_env: FLOODGATE_TEST_NO_SUCH_VAR\n    scopes: [check]\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("clients[0].token_env")));
        assert!(e.message.contains("FLOODGATE_TEST_NO_SUCH_VAR") && e.message.contains("not set"), "{e:?}");
        let e = compile_text(
            "clients:\n  - name: bff\n    token_file: /nonexistent/floodgate-token\n    scopes: [check]\n",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("cannot read the token file"), "{e:?}");
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let short = token_file("short", "abc");
        let good = token_file("good", "0123456789abcdef");
        let other = token_file("other", "fedcba9876543210");
        let cases = [
            ("clients: []\n".to_owned(), "is empty"),
            ("clients:\n  - name: bff\n    scopes: [check]\n".to_owned(), "has no token"),
            (
                format!(
                    "clients:\n  - name: bff\n    token_file: {}\n    scopes: [check]\n",
                    short.display()
                ),
                "3 bytes",
            ),
            (
                format!("clients:\n  - name: bff\n    token_file: {}\n    scopes: [chek]\n", good.display()),
                "did you mean",
            ),
            (
                format!("clients:\n  - name: bff\n    token_file: {}\n    scopes: []\n", good.display()),
                "no scope",
            ),
            (
                format!(
                    "clients:\n  - name: anonymous\n    token_file: {}\n    scopes: [check]\n",
                    good.display()
                ),
                "reserved",
            ),
            (
                format!(
                    "clients:\n  - name: 'a b'\n    token_file: {}\n    scopes: [check]\n",
                    good.display()
                ),
                "invalid client name",
            ),
            (
                format!(
                    "clients:\n  - {{name: a, token_file: {0}, scopes: [check]}}\n  - {{name: b, token_file: {0}, scopes: [check]}}\n",
                    good.display()
                ),
                "same token",
            ),
            (
                format!(
                    "clients:\n  - {{name: a, token_file: {0}, scopes: [check]}}\n  - {{name: a, token_file: {1}, scopes: [check]}}\n",
                    good.display(),
                    other.display()
                ),
                "defined twice",
            ),
            (
                format!(
                    "clients:\n  - {{name: a, token_file: {0}, token_env: X, scopes: [check]}}\n",
                    good.display()
                ),
                "not both",
            ),
        ];
        for (text, expected) in cases {
            let e = compile_text(&text).unwrap_err();
            assert!(e.message.contains(expected), "{text}: {e:?}");
            assert!(e.line.is_some(), "located: {e:?}");
        }
    }
}
