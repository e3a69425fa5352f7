//! `rules:`: one rule's name, algorithm, `match`, `key`, action, rollout, store-failure policy and
//! what its headers advertise.

use std::sync::LazyLock;

use floodgate::store::PrefetchBatch;
use floodgate::{
    Action, ByDescriptor, CalendarBy, Condition, IpPrefix, Limit, LimitKind, OnStoreError, PartitionKeys,
    Pattern, Rule,
};

use super::descriptors::Vocabulary;
use super::limits::{Count, Shape, bucket, count, counted, shape};
use super::positive_duration;
use super::stated::{self, Statements};
use crate::algorithm::{self, Algorithm};
use crate::doubles;
use crate::duration;
use crate::error::Invalid;
use crate::fingerprint::Canonical;
use crate::yaml::{Fields, Item, Value, alternatives, did_you_mean};

/// The fields of a rule: these, and every algorithm's parameters (from the registry).
static RULE_FIELDS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut fields = vec!["name", "match", "key", "algorithm"];
    fields.extend(algorithm::all_parameters());
    fields.extend([
        "overage",
        "action",
        "max_wait",
        "rollout",
        "on_store_error",
        "prefetch",
        "shards",
        "ip_prefix",
        "cost",
        "headers",
        "block_for",
    ]);
    fields
});

/// Validates one rule; returns it with its fingerprint. `in_doubles` is the kind of a store that
/// computes in doubles (`redis`, `redis_cluster`), which refuses limits out of their exact range.
pub(crate) fn compile(
    item: Item<'_>,
    vocabulary: &Vocabulary,
    partition_keys: Option<&PartitionKeys>,
    seen: &mut Vec<(String, usize)>,
    in_doubles: Option<&str>,
) -> Result<(Rule, u64), Invalid> {
    let fields = item.fields("a rule", Some(&RULE_FIELDS))?;
    compile_fields(item, fields, vocabulary, partition_keys, seen, in_doubles)
}

/// Validates one rule whose mapping may also hold the fields `others`, which the caller reads
/// itself (an RLQS bucket rule's `strategy`); no partition keys, no store computing in doubles.
pub(crate) fn compile_with(
    item: Item<'_>,
    vocabulary: &Vocabulary,
    seen: &mut Vec<(String, usize)>,
    others: &[&str],
) -> Result<(Rule, u64), Invalid> {
    let mut allowed: Vec<&str> = RULE_FIELDS.clone();
    allowed.extend(others);
    let fields = item.fields("a rule", Some(&allowed))?;
    compile_fields(item, fields, vocabulary, None, seen, None)
}

fn compile_fields(
    item: Item<'_>,
    fields: Fields<'_>,
    vocabulary: &Vocabulary,
    partition_keys: Option<&PartitionKeys>,
    seen: &mut Vec<(String, usize)>,
    in_doubles: Option<&str>,
) -> Result<(Rule, u64), Invalid> {
    let mut canonical = Canonical::default();

    // name
    let name_item = fields.require("name", "every rule needs a unique name, e.g. name: chat-per-user")?;
    let name = name_item.text("a rule name")?;
    if name.trim().is_empty() || name.chars().any(char::is_control) {
        return Err(name_item
            .error(format!("invalid rule name {}: must be non-empty text", name_item.node.describe())));
    }
    if let Some((_, line)) = seen.iter().find(|(n, _)| *n == name) {
        return Err(name_item.error(format!("duplicate rule name {name:?} (first defined at line {line})")));
    }
    seen.push((name.to_string(), name_item.node.line));
    canonical.field("name", &name);

    // algorithm and its parameters
    let (algorithm, limit, by, calendar, mut statements) =
        algorithm_limit(&item, &fields, vocabulary, &mut canonical)?;
    let mut rule = Rule::new(name.as_ref(), limit);
    if let Some(by) = by {
        rule = rule.vary_by(by);
    }
    if let Some(calendar) = calendar {
        rule = rule.calendar_by(calendar);
    }

    // match
    let mut conditions: Vec<(String, String)> = Vec::new();
    if let Some(match_item) = fields.get("match").filter(|i| !i.is_null()) {
        for (descriptor, condition) in self::conditions(match_item, vocabulary)? {
            let described = match &condition {
                Condition::Present => "present".to_owned(),
                Condition::OneOf(values) => format!("one of {values:?}"),
                Condition::NoneOf(values) => format!("none of {values:?}"),
                Condition::Like(pattern) => format!("like {:?}", pattern.as_str()),
                Condition::NotLike(patterns) => {
                    format!("like none of {:?}", patterns.iter().map(Pattern::as_str).collect::<Vec<_>>())
                }
            };
            conditions.push((descriptor.clone(), described));
            rule = rule.when_condition(descriptor, condition);
        }
    }
    conditions.sort();
    canonical.field("match", &conditions);

    // key
    let key = match fields.get("key").filter(|i| !i.is_null()) {
        Some(key_item) => key_of(key_item, vocabulary)?,
        None => Vec::new(),
    };
    canonical.field("key", &key);
    rule = rule.key(key);

    // action, rollout, store failures
    let action = match fields.get("action") {
        Some(a) => {
            let text = a.str("an action")?;
            match Action::from_name(text) {
                Some(Action::Delay { .. }) => {
                    let wait = fields.require(
                        "max_wait",
                        "action delay waits for capacity up to max_wait, e.g. max_wait: 2s",
                    )?;
                    Action::Delay { max_wait: positive_duration(wait, "max_wait")? }
                }
                Some(action) => action,
                None => {
                    let names = Action::ALL.map(Action::name);
                    return Err(a.error(format!(
                        "unknown action {text:?}: expected {}{}",
                        alternatives(names),
                        did_you_mean(text, names)
                    )));
                }
            }
        }
        None => Action::Deny,
    };
    if !matches!(action, Action::Delay { .. })
        && let Some(wait) = fields.key_item("max_wait")
    {
        return Err(wait.error("max_wait applies to action: delay only"));
    }
    canonical.field("action", action.name());
    if let Action::Delay { max_wait } = action {
        canonical.field("max_wait", duration::format(max_wait));
    }
    rule = rule.action(action);

    let rollout = match fields.get("rollout") {
        Some(r) => rollout(r)?,
        None => 100.0,
    };
    canonical.field("rollout", rollout);
    rule = rule.rollout(rollout);

    let on_store_error = match fields.get("on_store_error") {
        Some(o) => {
            let text = o.str("a store failure policy")?;
            canonical.field("on_store_error", text);
            match OnStoreError::from_name(text) {
                Some(OnStoreError::Local) if algorithm.kind == LimitKind::Concurrency => {
                    return Err(o.error(
                        "on_store_error local is not available for the concurrency algorithm (a permit \
                         taken locally could not be released on the store): use fail_open or fail_closed",
                    ));
                }
                Some(policy) => policy,
                None => {
                    let names = OnStoreError::ALL.map(OnStoreError::as_str);
                    return Err(o.error(format!(
                        "unknown on_store_error {text:?}: expected {}{}",
                        alternatives(names),
                        did_you_mean(text, names)
                    )));
                }
            }
        }
        None => OnStoreError::FailOpen,
    };
    rule = rule.on_store_error(on_store_error);

    if let Some(p) = fields.get("prefetch").filter(|i| !i.is_null()) {
        let batch = prefetch(p, algorithm.kind)?;
        canonical.field("prefetch", (batch.size(), duration::format(batch.ttl())));
        rule = rule.prefetch(batch);
    }

    if let Some(item) = fields.get("shards").filter(|i| !i.is_null()) {
        let n = shards(&item, &rule)?;
        canonical.field("shards", n);
        rule = rule.shards(n);
    }

    if let Some(item) = fields.get("cost") {
        let dimension = item.str("a cost dimension")?;
        if !floodgate::cost::valid_dimension(dimension) {
            return Err(item.error(format!(
                "invalid cost {dimension:?}: expected requests (the default) or the name of a cost dimension \
                 (lowercase letters, digits and _, starting with a letter, at most {} characters), such as tokens",
                floodgate::cost::MAX_DIMENSION_LEN
            )));
        }
        if algorithm.kind == LimitKind::Concurrency && dimension != floodgate::cost::REQUESTS {
            return Err(item.error(format!(
                "cost {dimension:?} is not available for the concurrency algorithm: a permit is one request in \
                 flight, so it counts requests"
            )));
        }
        // Only a dimension other than the default changes the rule's identity: the counters of a rule
        // that says `cost: requests` are those it had without saying so.
        if dimension != floodgate::cost::REQUESTS {
            canonical.field("cost", dimension);
        }
        rule = rule.cost(dimension);
    }

    if let Some(item) = fields.get("ip_prefix").filter(|i| !i.is_null()) {
        let prefix = ip_prefix(&item, &rule)?;
        canonical.field("ip_prefix", (prefix.v4(), prefix.v6()));
        rule = rule.ip_prefix(prefix);
    }

    // What the rule's headers advertise: not part of its identity (its counters stay).
    if let Some(item) = fields.get("headers").filter(|i| !i.is_null()) {
        rule = headers(&item, rule, partition_keys)?;
    }

    // The penalty box, and what requests may state.
    if let Some(item) = fields.get("block_for").filter(|i| !i.is_null()) {
        let (own, bound) = stated::block_for(&item)?;
        if algorithm.kind == LimitKind::Concurrency && (own.is_some() || bound.is_some()) {
            return Err(item.error(
                "block_for is not available for the concurrency algorithm: a permit held is not a count a block \
                 could forget",
            ));
        }
        if own.is_some() && rule.prefetch_batch().is_some() {
            return Err(item.error(
                "block_for is not available with prefetch: units spent locally would not see the block",
            ));
        }
        if let Some(own) = own {
            canonical.field("block_for", duration::format(own));
            rule = rule.block_for(own);
        }
        statements.block_for = bound;
    }
    if let Some(statable) = statements.statable(&mut canonical) {
        let refuse = |reason: &str| item.error(format!("stated limits: {reason}"));
        if statements.limit.is_some() && rule.varies_by().is_some() {
            return Err(refuse("a limit that varies by a descriptor cannot also be stated by requests"));
        }
        if rule.shard_count().is_some() {
            return Err(refuse("not available with shards (a stated limit could not be split)"));
        }
        if rule.prefetch_batch().is_some() {
            return Err(refuse("not available with prefetch"));
        }
        rule = rule.statable(statable);
    }

    if let Some(kind) = in_doubles {
        doubles::check_native(&rule, &item, &fields, kind)?;
    }

    Ok((rule, canonical.hash()))
}

/// A rule's `headers: { partition_key: true }`: its limits carry a partition key, made with the
/// top-level `partition_keys` secret.
fn headers(item: &Item<'_>, rule: Rule, partition_keys: Option<&PartitionKeys>) -> Result<Rule, Invalid> {
    if !item.is_map() {
        return Err(item.error(
            "a rule's headers is a mapping such as { partition_key: true }; which headers are sent (ietf, \
             legacy, ...) is set once, at the top level (headers: both)",
        ));
    }
    let fields =
        item.fields("a rule's header settings (e.g. { partition_key: true })", Some(&["partition_key"]))?;
    let Some(pk) = fields.get("partition_key") else { return Ok(rule) };
    if !pk.bool()? {
        return Ok(rule);
    }
    match partition_keys {
        Some(keys) => Ok(rule.partition_key(keys.clone())),
        None => Err(pk.error(
            "partition_key needs the secret that keys it: add partition_keys: { secret_env: NAME } (or \
             secret_file: PATH) at the top level, the same on every instance",
        )),
    }
}

/// What [`algorithm_limit`] reads.
type AlgorithmLimit = (&'static Algorithm, Limit, Option<ByDescriptor>, Option<CalendarBy>, Statements);

/// A rule's algorithm and its parameters (`algorithm: token_bucket`, `rate: 2/s`, `burst: 8`):
/// the algorithm, its limit, the limit's variants when it varies by a descriptor, and a quota's
/// calendar when its time zone or anchor comes from a descriptor.
pub(crate) fn algorithm_limit(
    item: &Item<'_>,
    fields: &Fields<'_>,
    vocabulary: &Vocabulary,
    canonical: &mut Canonical,
) -> Result<AlgorithmLimit, Invalid> {
    let names = || algorithm::names().collect::<Vec<_>>().join(", ");
    let algorithm_item = fields.require("algorithm", &format!("expected one of {}", names()))?;
    let algorithm_name = algorithm_item.str("an algorithm")?;
    let Some(algorithm) = algorithm::by_name(algorithm_name) else {
        return Err(algorithm_item.error(format!(
            "unknown algorithm {algorithm_name:?}: expected one of {}{}",
            names(),
            did_you_mean(algorithm_name, algorithm::names())
        )));
    };
    canonical.field("algorithm", algorithm.name());
    check_parameters(item.clone(), fields, algorithm)?;

    let mut calendar = None;
    let mut statements = Statements::default();
    let (limit, by) = match algorithm.kind {
        LimitKind::TokenBucket | LimitKind::Gcra => bucket(fields, algorithm.kind, vocabulary, canonical)?,
        _ => {
            let shape = shape(fields, algorithm.kind, vocabulary, canonical, &mut statements)?;
            if let Shape::Quota(_, by) = &shape {
                calendar = by.clone();
            }
            let limit_item = fields.require("limit", "a limit is required")?;
            let count = if stated::is_from(&limit_item) {
                let l = stated::limit(&limit_item)?;
                let own = l.own();
                statements.limit = Some(l);
                Count::One(own)
            } else {
                count(limit_item.clone(), vocabulary)?
            };
            counted(fields, &shape, &count, &limit_item, canonical)?
        }
    };
    Ok((algorithm, limit, by, calendar, statements))
}

/// An algorithm and its parameters alone, as a rule writes them (`{algorithm: token_bucket, rate:
/// 2/s, burst: 8}`), in a mapping whose other fields, named in `others`, the caller reads itself.
/// One count only: a limit that varies by a descriptor has no meaning without descriptors.
pub(crate) fn limit_alone(root: Item<'_>, others: &[&str]) -> Result<Limit, Invalid> {
    let mut allowed = vec!["algorithm"];
    allowed.extend(algorithm::all_parameters());
    allowed.extend(others);
    let fields = root.fields("an algorithm with its parameters", Some(&allowed))?;
    if let Some(item) = ["time_zone", "anchor"].iter().find_map(|f| fields.get(f).filter(Item::is_map)) {
        return Err(item.error(
            "a time zone or anchor that comes from a descriptor needs descriptors: write one, e.g. time_zone: \
             Europe/Berlin",
        ));
    }
    let (_, limit, by, _, statements) =
        algorithm_limit(&root, &fields, &Vocabulary::default(), &mut Canonical::default())?;
    if statements.limit.is_some() || statements.window.is_some() {
        return Err(
            root.error("a limit or window from the request needs a request: give the values themselves")
        );
    }
    if let Some(burst) = fields.get("burst")
        && burst.u64_at_least("burst", 1)? > algorithm::MAX_BURST_AT_ANY_RATE
    {
        return Err(burst.error(format!(
            "invalid burst {}: at most {} here, the largest every rate takes",
            burst.node.describe(),
            algorithm::MAX_BURST_AT_ANY_RATE
        )));
    }
    if by.is_some()
        && let Some(item) = fields.get("limit")
    {
        return Err(item
            .error("a limit that varies by a descriptor needs descriptors: give one count, e.g. limit: 5"));
    }
    Ok(limit)
}

/// `ip_prefix: { v4: 24, v6: 64 }`: the `ip` descriptor keyed by its network. A family left out
/// is keyed by the whole address (32 or 128).
fn ip_prefix(item: &Item<'_>, rule: &Rule) -> Result<IpPrefix, Invalid> {
    if !rule.key_descriptors().iter().any(|d| d == "ip") {
        return Err(item.error(
            "ip_prefix groups the ip descriptor by network, but the rule's key does not name ip: add ip to key",
        ));
    }
    let fields = item.fields("ip_prefix (e.g. { v4: 32, v6: 64 })", Some(&["v4", "v6"]))?;
    let length = |name: &str, max: u64| -> Result<Option<u8>, Invalid> {
        let Some(l) = fields.get(name) else { return Ok(None) };
        let n = l.u64_at_least(&format!("ip_prefix {name} length"), 1)?;
        if n > max {
            return Err(l.error(format!("invalid ip_prefix {name} length {n}: at most {max}")));
        }
        Ok(Some(n as u8))
    };
    let (v4, v6) = (length("v4", 32)?, length("v6", 128)?);
    if v4.is_none() && v6.is_none() {
        return Err(item.error("ip_prefix needs v4, v6 or both, e.g. ip_prefix: { v6: 64 }"));
    }
    IpPrefix::new(v4.unwrap_or(32), v6.unwrap_or(128)).ok_or_else(|| item.error("invalid ip_prefix lengths"))
}

/// `prefetch: { batch: N, ttl: DURATION }`: batch leases, for the algorithms where a unit taken
/// early is worth the same when spent later.
fn prefetch(item: Item<'_>, kind: LimitKind) -> Result<PrefetchBatch, Invalid> {
    if let Some(why) = kind.prefetch_refusal() {
        return Err(item.error(format!(
            "prefetch is not available for the {kind} algorithm: {why}; it is for {}",
            LimitKind::prefetching()
        )));
    }
    let fields = item.fields("prefetch (e.g. { batch: 20, ttl: 1s })", Some(&["batch", "ttl"]))?;
    let batch_item =
        fields.require("batch", "prefetch needs batch: the most units taken in one store call, e.g. 20")?;
    let size = batch_item.u64_at_least("prefetch batch", 2)?;
    let ttl_item = fields.require("ttl", "prefetch needs ttl: how long a batch is spent from, e.g. 1s")?;
    let ttl = positive_duration(ttl_item.clone(), "prefetch ttl")?;
    PrefetchBatch::try_new(size, ttl).map_err(|e| item.error(e.to_string()))
}

/// `shards: N`: the limit spread over N keys, for the algorithms whose limit splits exactly.
fn shards(item: &Item<'_>, rule: &Rule) -> Result<u16, Invalid> {
    let n = item.u64_at_least("shards", 2)?;
    let n = u16::try_from(n).map_err(|_| item.error(format!("invalid shards {n}: at most {}", u16::MAX)))?;
    let kind = rule.limit().kind();
    if kind == LimitKind::Concurrency {
        return Err(item.error(
            "shards is not available for the concurrency algorithm: a permit must be released on the key it was \
             taken on",
        ));
    }
    if rule.limits().count() > 1 {
        return Err(item.error("shards is not available with a limit that varies by a descriptor"));
    }
    if rule.calendar_source().is_some() {
        return Err(
            item.error("shards is not available with a time zone or anchor that comes from a descriptor")
        );
    }
    if rule.limit().split(n).is_none() {
        return Err(item.error(format!(
            "invalid shards {n}: some shards would get nothing (every count of the limit must be at least {n})"
        )));
    }
    Ok(n)
}

/// Refuses parameters of other algorithms, and requires the algorithm's own required ones.
fn check_parameters(item: Item<'_>, fields: &Fields<'_>, algorithm: &Algorithm) -> Result<(), Invalid> {
    let parameters = algorithm::all_parameters();
    for given in fields.names() {
        if parameters.contains(&given)
            && !algorithm.takes(given)
            && let Some(key) = fields.key_item(given)
        {
            return Err(key.error(format!(
                "{given:?} does not apply to algorithm {} (its parameters: {})",
                algorithm.name(),
                algorithm.parameter_names().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    for p in algorithm.parameters.iter().filter(|p| p.required()) {
        if fields.get(p.name).is_none() {
            return Err(item.missing(
                p.name,
                format!("algorithm {} requires {:?} (e.g. {})", algorithm.name(), p.name, p.example),
            ));
        }
    }
    Ok(())
}

/// A condition in `match`: a value, a list of values, or `{present: true}`.
fn condition(item: &Item<'_>) -> Result<Condition, Invalid> {
    match &item.node.value {
        Value::Map(_) => {
            const FORMS: &str = "{present: true}, {not: [values]}, {like: pattern} or {not_like: [patterns]}";
            let fields = item.fields("a condition", Some(&["present", "not", "like", "not_like"]))?;
            if fields.len() != 1 {
                return Err(item.error(format!("write either {FORMS}: one of them")));
            }
            let patterns = |at: &Item<'_>| -> Result<Vec<Pattern>, Invalid> {
                Ok(values(at)?.into_iter().map(Pattern::new).collect())
            };
            if let Some(present) = fields.get("present") {
                return if present.bool()? {
                    Ok(Condition::Present)
                } else {
                    Err(present.error(
                        "present: false is not supported (a rule cannot require a descriptor to be absent): \
                         remove the condition",
                    ))
                };
            }
            if let Some(not) = fields.get("not") {
                return Ok(Condition::NoneOf(values(&not)?));
            }
            if let Some(like) = fields.get("like") {
                return Ok(Condition::Like(Pattern::new(
                    like.text("a pattern such as \"GET /api/*\"")?.into_owned(),
                )));
            }
            match fields.get("not_like") {
                Some(not_like) => Ok(Condition::NotLike(patterns(&not_like)?)),
                None => Err(item.error(format!("expected {FORMS}"))),
            }
        }
        Value::Seq(_) => Ok(Condition::OneOf(values(item)?)),
        Value::Null => Err(item.error(
            "expected a value, a list of values, {present: true}, {not: [values]}, {like: pattern} or \
             {not_like: [patterns]}",
        )),
        _ => Ok(Condition::OneOf(vec![item.text("a descriptor value")?.into_owned()])),
    }
}

/// A value or a non-empty list of values.
fn values(item: &Item<'_>) -> Result<Vec<String>, Invalid> {
    if !matches!(item.node.value, Value::Seq(_)) {
        return Ok(vec![item.text("a descriptor value")?.into_owned()]);
    }
    let elements = item.elements("a list of values")?;
    if elements.is_empty() {
        return Err(item.error("an empty list matches nothing: list at least one value"));
    }
    elements.iter().map(|e| e.text("a descriptor value").map(|t| t.into_owned())).collect()
}

/// `key: [user]`, `key: user`, `key: []` or `key: [global]`.
/// A rule's `match`: each descriptor named, with its condition, in document order.
pub(crate) fn conditions(
    item: Item<'_>,
    vocabulary: &Vocabulary,
) -> Result<Vec<(String, Condition)>, Invalid> {
    let entries = item.fields("conditions on descriptors", None)?;
    let mut conditions = Vec::with_capacity(entries.len());
    for (descriptor, key, value) in entries.iter() {
        vocabulary.check(descriptor, key)?;
        conditions.push((descriptor.to_owned(), condition(&value)?));
    }
    Ok(conditions)
}

/// A rule's `key`: the descriptors whose values make its keys.
pub(crate) fn key_of(item: Item<'_>, vocabulary: &Vocabulary) -> Result<Vec<String>, Invalid> {
    let elements = match item.node.value {
        Value::Str(_) => vec![item],
        _ => item.elements("a list of descriptor names")?,
    };
    let mut key: Vec<String> = Vec::new();
    for element in &elements {
        let name = element.str("a descriptor name")?;
        if name == "global" {
            if elements.len() > 1 {
                return Err(element.error(
                    "\"global\" means one key for all requests and cannot be combined with other descriptors",
                ));
            }
            continue;
        }
        vocabulary.check(name, element.clone())?;
        if key.iter().any(|k| k == name) {
            return Err(element.error(format!("descriptor {name:?} appears twice in the key")));
        }
        key.push(name.to_owned());
    }
    Ok(key)
}

/// `rollout: 50%`, `rollout: 50` or `rollout: 12.5%`.
fn rollout(item: Item<'_>) -> Result<f64, Invalid> {
    let percent = match item.number() {
        Some(n) => Some(n),
        None => item.str("a percentage").ok().and_then(|s| {
            let s = s.trim();
            s.strip_suffix('%').unwrap_or(s).trim().parse::<f64>().ok()
        }),
    };
    let described = item.node.describe();
    match percent.filter(|p| p.is_finite()) {
        Some(p) if (0.0..=100.0).contains(&p) => Ok(p),
        Some(p) if p > 100.0 => Err(item.error(format!("invalid rollout {described}: above 100%"))),
        _ => Err(item.error(format!(
            "invalid rollout {described}: expected a percentage from 0% to 100%, e.g. rollout: 50%"
        ))),
    }
}
