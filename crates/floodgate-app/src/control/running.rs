//! [`Running`]: the configuration in force, as every request reads it — the policy of each
//! domain with its metric handles ([`Domain`]), the header style, who may call, the sections fixed
//! at start — built once per applied version.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use floodgate::Policy;
use floodgate_config::auth::Scope;
use floodgate_config::{Config, Source, StoreConfig, Survival};
use floodgate_http::HeaderStyle;

use crate::auth::{Client, Clients, Refusal};
use crate::metrics::{Metrics, RuleMetrics};

/// One policy ready to decide on the shared store, with its metric handles (indexed by rule
/// position, as [`LimitOutcome::index`](floodgate::LimitOutcome::index) gives it).
#[derive(Debug)]
pub struct Domain {
    /// The Envoy domain, or `None` for the native policy.
    pub name: Option<String>,
    /// The policy.
    pub policy: Arc<Policy>,
    /// The metric handles of its rules.
    pub metrics: RuleMetrics,
    /// What the dashboard's view keeps of this domain, made on its first decision (its rules'
    /// running totals by position: `crate::live`'s, opaque here so that the configuration does
    /// not depend on the view).
    pub live: OnceLock<Box<dyn Any + Send + Sync>>,
}

/// The configuration in force.
#[derive(Debug)]
pub struct Running {
    /// 1 at start, +1 for every applied change (reloads and rollbacks).
    pub version: u64,
    /// Which rate-limit headers to send.
    pub headers: HeaderStyle,
    /// The native policy: HTTP checks, and gRPC domains that no Envoy file defines.
    pub native: Arc<Domain>,
    /// The policies of Envoy domains.
    pub domains: HashMap<String, Arc<Domain>>,
    /// Where the configuration came from, and its text and hash.
    pub source: Source,
    /// Rule fingerprints, for the audit diff.
    pub fingerprints: BTreeMap<String, u64>,
    /// The store section (it cannot change without a restart).
    pub store: StoreConfig,
    /// The store's breaker and fallback settings (likewise).
    pub survival: Survival,
    /// The `gateway:` section, when there is one (the gateway derives its policies from the native
    /// one when it builds its route table).
    pub gateway: Option<Arc<floodgate_config::gateway::GatewayConfig>>,
    /// The rules whose metrics carry a `key` label (`metrics.detailed_rules`), for policies
    /// derived from this configuration's.
    pub detailed: Arc<BTreeSet<String>>,
    /// Who may call (the `auth:` section), when anyone is named.
    pub auth: Option<Arc<Clients>>,
    /// The HTTP listener's limits, for the connections accepted from now on.
    pub http: floodgate_config::http_server::HttpConfig,
    /// TLS on the HTTP and gRPC listeners (set up at start; its files are watched).
    pub tls: Option<floodgate_config::tls::TlsConfig>,
    /// The admin API's settings (its state directory is opened at start).
    pub admin: floodgate_config::admin::AdminConfig,
    /// Envoy's rate limit quota service (the `rlqs:` section), when configured.
    pub rlqs: Option<Arc<floodgate_config::rlqs::RlqsConfig>>,
}

impl Domain {
    /// `policy` as the domain `name` (`None`: the native policy), with its metric handles; the
    /// rules named in `detailed` count per key.
    pub fn new(
        name: Option<String>,
        policy: Policy,
        metrics: &Metrics,
        detailed: &BTreeSet<String>,
    ) -> Domain {
        let rule_metrics = metrics.rules(name.as_deref(), policy.rules(), detailed);
        Domain { name, policy: Arc::new(policy), metrics: rule_metrics, live: OnceLock::new() }
    }
}

impl Running {
    /// The policy deciding requests for `domain`: that Envoy domain's, or the native policy when
    /// no domain is given or no Envoy file defines it.
    pub fn domain(&self, domain: Option<&str>) -> &Domain {
        domain.and_then(|d| self.domains.get(d)).unwrap_or(&self.native)
    }

    /// The policy whose namespace is `namespace` (`None`: the native policy), if one is in force:
    /// where a reservation made on it is settled.
    pub fn policy_of(&self, namespace: Option<&str>) -> Option<&Domain> {
        match namespace {
            None => Some(&self.native),
            Some(d) => self
                .domains
                .get(d)
                .map(|domain| &**domain)
                .filter(|domain| domain.policy.namespace() == Some(d)),
        }
    }

    /// Whether every rule in force, over all policies, decides on a local share when the store
    /// fails (and there is at least one rule).
    pub fn all_local(&self) -> bool {
        let mut rules =
            self.native.policy.rules().chain(self.domains.values().flat_map(|d| d.policy.rules()));
        let mut any = false;
        let all = rules.all(|r| {
            any = true;
            r.store_error_policy() == floodgate::OnStoreError::Local
        });
        all && any
    }

    /// Who calls with `authorization` (an `Authorization` header's bytes, or gRPC's
    /// `authorization` metadata) on an endpoint that needs `scope`: `Ok(None)` when no `auth:`
    /// client is configured (anyone may call), the client when its token holds the scope, else
    /// why the call is refused.
    pub fn authorize(
        &self,
        authorization: Option<&[u8]>,
        scope: Scope,
    ) -> Result<Option<&Client>, Refusal<'_>> {
        match self.auth.as_deref() {
            None => Ok(None),
            Some(clients) => clients.authorize(authorization, scope).map(Some),
        }
    }

    /// How many rules are in force, over all policies.
    pub fn rule_count(&self) -> usize {
        self.native.policy.rules().count()
            + self.domains.values().map(|d| d.policy.rules().count()).sum::<usize>()
    }
}

/// The policies of `config`, with their metric handles.
pub(super) fn build(version: u64, config: Config, metrics: &Metrics) -> Running {
    let Config {
        store,
        survival,
        headers,
        policy,
        domains,
        fingerprints,
        detailed,
        gateway,
        source,
        auth,
        http,
        tls,
        admin,
        rlqs,
    } = config;
    let auth = auth.map(|a| Arc::new(Clients::new(a, metrics)));
    let gateway = gateway.map(Arc::new);
    let native = Arc::new(Domain::new(None, policy, metrics, &detailed));
    let domains = domains
        .into_iter()
        .map(|(name, policy)| (name.clone(), Arc::new(Domain::new(Some(name), policy, metrics, &detailed))))
        .collect();
    Running {
        version,
        headers,
        native,
        domains,
        source,
        fingerprints,
        store,
        survival,
        gateway,
        detailed: Arc::new(detailed),
        auth,
        http,
        tls,
        admin,
        rlqs: rlqs.map(Arc::new),
    }
}
