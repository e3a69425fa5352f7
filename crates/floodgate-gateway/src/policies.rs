//! [`GatewayPolicies`]: the native policy as the gateway applies it, in two phases, derived from
//! the configuration in force when the route table is built.

use floodgate::Policy;
use floodgate_app::control::{Domain, Running};
use floodgate_app::metrics::Metrics;

/// The native policy as the gateway applies it, in two phases (DESIGN.md §9): the rules that need
/// no verified identity run before the JWT is verified (per `ip`, global, per route: a flood of bad
/// tokens is stopped there, before any signature is checked), the rules whose key, `match` or
/// plan-dependent limit uses `user`, `tenant`, `plan` or `authenticated` after it. Each rule is in
/// exactly one phase, so it counts once per request. Both phases keep the rules' names and keys,
/// hence the same counters as the check API's native policy.
#[derive(Debug)]
pub(crate) struct GatewayPolicies {
    /// The rules run before verification.
    pub(crate) before: Domain,
    /// The rules run after verification.
    pub(crate) after: Domain,
    /// What an LLM route reserves on after verification, in place of `after`: the same rules,
    /// those of the first phase that count a cost other than `requests` (tokens, say), which a
    /// request costing 1 in `requests` never reaches there — so each rule still counts once — and
    /// the rules that count per `model`, which run nowhere else.
    pub(crate) metered: Domain,
    /// Each LLM upstream's quota rule, alone, by name: it runs only when a call goes there.
    pub(crate) quotas: Vec<(String, Domain)>,
}

/// The descriptors only a verified identity (or its absence) gives.
pub(crate) const IDENTITY_DESCRIPTORS: [&str; 4] = ["user", "tenant", "plan", "authenticated"];

/// Whether `rule` runs after the JWT is verified: its key, conditions, plan-dependent limit or
/// quota calendar use an identity descriptor.
pub(crate) fn after_verification(rule: &floodgate::Rule) -> bool {
    let identity = |d: &str| IDENTITY_DESCRIPTORS.contains(&d);
    rule.key_descriptors().iter().any(|d| identity(d))
        || rule.conditions().iter().any(|(d, _)| identity(d))
        || rule.varies_by().is_some_and(identity)
        || rule.calendar_descriptors().any(identity)
}

/// The descriptor an LLM route adds once it read the request's body: its model.
pub(crate) const MODEL_DESCRIPTOR: &str = "model";

/// Whether `rule` counts per model (its key or conditions use `model`): only an LLM route's
/// metered requests have one, so it runs only there.
pub(crate) fn per_model(rule: &floodgate::Rule) -> bool {
    rule.key_descriptors().iter().any(|d| d == MODEL_DESCRIPTOR)
        || rule.conditions().iter().any(|(d, _)| d == MODEL_DESCRIPTOR)
        || rule.varies_by() == Some(MODEL_DESCRIPTOR)
}

impl GatewayPolicies {
    /// The two phases of `running`'s native policy, with their metric handles.
    pub(crate) fn new(running: &Running, metrics: &Metrics) -> Self {
        // The rules holding an LLM upstream's quota run only when a call goes to that upstream.
        let quota_rules: Vec<&str> = running
            .gateway
            .iter()
            .flat_map(|g| g.routes.iter())
            .filter_map(|r| r.llm.as_ref())
            .flat_map(|l| l.upstreams.iter())
            .filter_map(|u| u.quota_rule.as_deref())
            .collect();
        let rules = || running.native.policy.rules().filter(|r| !quota_rules.contains(&r.name()));
        let (after, before): (Vec<_>, Vec<_>) =
            rules().filter(|r| !per_model(r)).cloned().partition(after_verification);
        let metered: Vec<floodgate::Rule> = rules()
            .filter(|r| {
                after_verification(r) || r.cost_dimension() != floodgate::cost::REQUESTS || per_model(r)
            })
            .cloned()
            .collect();
        // The native policy's rules are valid together, hence in any subset: no rule of a native
        // file replaces another.
        let phase = |rules: Vec<floodgate::Rule>| {
            let policy = Policy::new(rules).unwrap_or_default();
            Domain::new(None, policy, metrics, &running.detailed)
        };
        let quotas = running
            .native
            .policy
            .rules()
            .filter(|r| quota_rules.contains(&r.name()))
            .map(|r| (r.name().to_owned(), phase(vec![r.clone()])))
            .collect();
        GatewayPolicies { before: phase(before), after: phase(after), metered: phase(metered), quotas }
    }

    /// The domain of the quota rule `name`, an LLM upstream's.
    pub(crate) fn quota(&self, name: &str) -> Option<&Domain> {
        self.quotas.iter().find(|(n, _)| n == name).map(|(_, d)| d)
    }
}
