//! What one policy did to the log, counted as the replay goes: per rule (matched, would-deny,
//! keys denied, denials per second), for the whole policy (requests and clients refused, requests
//! per second), and, for `--suggest` and `--plot`, every key's request times per rule.

use std::collections::HashMap;

use floodgate::{Descriptors, IpPrefix, Outcome, Policy, Verdict};

/// A hash map with a fast, seeded hasher (keys are log values, not attacker-chosen at run time).
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// One rule's counts.
#[derive(Debug, Clone, Default)]
pub struct RuleTally {
    /// The rule's name.
    pub name: String,
    /// `deny`, `shadow`, `tag` or `delay`, with `rollout N%` when rolled out.
    pub action: String,
    /// Its algorithm's name.
    pub algorithm: &'static str,
    /// Requests the rule applied to.
    pub matched: u64,
    /// Requests its limit would have denied (enforced or not).
    pub denied: u64,
    /// Of those, denials that refused the request (the rule enforced for its key).
    pub enforced_denied: u64,
    /// Would-denials of a shadowed limit (action `shadow`, or outside a rollout).
    pub shadow_denied: u64,
    /// Would-denials of a `tag` limit.
    pub tagged: u64,
    /// Denials per key.
    pub keys: FastMap<Box<str>, u64>,
    /// Denials per second from the log's first second.
    pub per_second: Vec<u32>,
    /// Each key's request times (µs), when collected (`--suggest`, `--plot`).
    pub times: Option<FastMap<Box<str>, Vec<i64>>>,
}

/// Whether a key of a rule is its descriptors' values.
#[derive(Debug, Clone)]
struct KeyShape {
    names: Vec<String>,
    ip_prefix: Option<IpPrefix>,
}

/// One policy's counts.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Requests checked.
    pub requests: u64,
    /// Requests refused in the end (delayed ones that got through are not).
    pub denied: u64,
    /// Requests an enforced `delay` rule held before passing them.
    pub delayed: u64,
    /// Requests the engine refused to decide (a descriptor a rule cannot use).
    pub errors: u64,
    /// Per rule, in policy order.
    pub rules: Vec<RuleTally>,
    /// Per client address (`ip`): whether it was refused at least once.
    pub clients: FastMap<Box<str>, bool>,
    /// Requests per second from the log's first second.
    pub requests_per_second: Vec<u32>,
    /// Refused requests per second.
    pub denied_per_second: Vec<u32>,
    shapes: Vec<KeyShape>,
    buf: String,
}

fn bump(series: &mut Vec<u32>, second: usize) {
    if series.len() <= second {
        series.resize(second + 1, 0);
    }
    series[second] = series[second].saturating_add(1);
}

impl Tally {
    /// An empty tally for `policy`; keeps every key's times when `collect_times`.
    pub fn new(policy: &Policy, collect_times: bool) -> Self {
        let mut tally = Tally::default();
        for rule in policy.rules() {
            tally.rules.push(RuleTally {
                name: rule.name().to_owned(),
                action: rule.action_kind().name().to_owned(),
                algorithm: rule.limit().algorithm_name(),
                times: collect_times.then(FastMap::default),
                ..RuleTally::default()
            });
            tally.shapes.push(KeyShape {
                names: rule.key_descriptors().iter().filter(|n| *n != "global").cloned().collect(),
                ip_prefix: rule.ip_grouping(),
            });
        }
        tally
    }

    /// The key of rule `index` for `d`, as the report shows it: the value of a one-descriptor
    /// key, `name=value` pairs joined by `, ` for several, `(global)` for none; an `ip` grouped
    /// by the rule's prefix.
    fn key(&mut self, index: usize, d: &Descriptors) -> &str {
        let shape = &self.shapes[index];
        self.buf.clear();
        if shape.names.is_empty() {
            self.buf.push_str("(global)");
        }
        for (i, name) in shape.names.iter().enumerate() {
            let value = d.get(name).unwrap_or("");
            if shape.names.len() > 1 {
                if i > 0 {
                    self.buf.push_str(", ");
                }
                self.buf.push_str(name);
                self.buf.push('=');
            }
            match shape.ip_prefix.filter(|_| name == "ip").and_then(|p| p.group(value).ok()) {
                Some(group) => self.buf.push_str(&group),
                None => self.buf.push_str(value),
            }
        }
        &self.buf
    }

    /// Records the first decision on a request at `second` (from the log's first second), at
    /// `at_us`. `refused` is the request's final fate when known now (`None` while a delay
    /// holds it).
    pub fn record(
        &mut self,
        d: &Descriptors,
        verdict: &Verdict,
        second: usize,
        at_us: i64,
        refused: Option<bool>,
    ) {
        self.requests += 1;
        bump(&mut self.requests_per_second, second);
        for l in &verdict.limits {
            let i = l.index;
            if i >= self.rules.len() {
                continue;
            }
            let denied = !l.decision.allowed;
            let collect = self.rules[i].times.is_some();
            if !denied && !collect {
                self.rules[i].matched += 1;
                continue;
            }
            self.key(i, d);
            let key = std::mem::take(&mut self.buf);
            let rule = &mut self.rules[i];
            rule.matched += 1;
            if denied {
                rule.denied += 1;
                match l.outcome {
                    Outcome::ShadowDenied => rule.shadow_denied += 1,
                    Outcome::Tagged => rule.tagged += 1,
                    o if o.denies() => rule.enforced_denied += 1,
                    _ => {}
                }
                match rule.keys.get_mut(key.as_str()) {
                    Some(n) => *n += 1,
                    None => {
                        rule.keys.insert(key.as_str().into(), 1);
                    }
                }
                bump(&mut rule.per_second, second);
            }
            if let Some(times) = &mut rule.times {
                match times.get_mut(key.as_str()) {
                    Some(t) => t.push(at_us),
                    None => {
                        times.insert(key.as_str().into(), vec![at_us]);
                    }
                }
            }
            self.buf = key;
        }
        if let Some(refused) = refused {
            self.settle(d, second, refused);
        } else {
            self.delayed += 1;
        }
    }

    /// Records a request's final fate (at once, or once a delay has ended).
    pub fn settle(&mut self, d: &Descriptors, second: usize, refused: bool) {
        if refused {
            self.denied += 1;
            bump(&mut self.denied_per_second, second);
        }
        if let Some(ip) = d.get("ip") {
            match self.clients.get_mut(ip) {
                Some(r) => *r |= refused,
                None => {
                    self.clients.insert(ip.into(), refused);
                }
            }
        }
    }

    /// A request that a delay held and then let through: not refused, counted as delayed.
    pub fn delayed_then(&mut self, d: &Descriptors, second: usize, refused: bool) {
        if refused {
            self.delayed -= 1;
        }
        self.settle(d, second, refused);
    }

    /// Distinct clients (`ip`) seen, and those refused at least once.
    pub fn client_counts(&self) -> (u64, u64) {
        let refused = self.clients.values().filter(|r| **r).count();
        (self.clients.len() as u64, refused as u64)
    }
}
