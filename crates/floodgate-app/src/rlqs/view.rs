//! What the service core shows of its groups: to the fleet ([`GroupDemand`]) and to the dashboard
//! ([`GroupView`]).

/// A bucket group's share of the fleet, as [`Quotas::exchange`](super::Quotas::exchange) reads and
/// writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDemand {
    /// The group's name across the fleet (domain, rule and key values).
    pub group: String,
    /// Its global limit, requests per second.
    pub limit: f64,
    /// This instance's members: a name unique in the fleet, the demand (requests per second) and
    /// the share it desires by this instance's view of the fleet (requests per second).
    pub members: Vec<(String, f64, f64)>,
}

/// A group as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct GroupView {
    /// The domain.
    pub domain: String,
    /// The rule.
    pub rule: String,
    /// The values of the rule's key, in its order.
    pub key: Vec<String>,
    /// The global limit, requests per second (`null` for a blanket rule).
    pub limit: Option<f64>,
    /// This instance's streams reporting the group.
    pub members: Vec<MemberView>,
    /// The other instances' streams, as last read from the store.
    pub remote_streams: usize,
    /// Their demand, requests per second.
    pub remote_demand: f64,
    /// The rate last assigned to them, requests per second.
    pub remote_assigned: f64,
    /// The rate assigned over the fleet (this instance's and the others'), against `limit`.
    pub fleet_assigned: f64,
    /// The rate this instance may assign: on a fleet, what it holds of the limit (`null` before
    /// its first exchange); on one instance, the limit (`null` for a blanket rule).
    pub claim: Option<f64>,
}

/// One stream's bucket in a group.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct MemberView {
    /// The stream, numbered in this instance.
    pub stream: u64,
    /// The bucket id, as `{key: value, ...}`.
    pub bucket: String,
    /// Its demand, requests per second.
    pub demand: f64,
    /// The rate assigned, requests per second (`null`: none yet, or no limit).
    pub assigned: Option<f64>,
}
