#![cfg_attr(fuzzing, no_main)]
//! Fuzz target: collision-freedom of the keys the engine builds (`floodgate::key`), end to end:
//! two descriptor sets that differ in a value a rule keys on never reach the store under the
//! same key, whatever bytes the values hold (separators, digits, length prefixes, empty values).
//!
//! Input: two descriptor sets, separated by a `0xFF` byte; in each, `0x00`-separated values for
//! the descriptors `user`, `tenant`, `route` in turn (a missing one is absent from the request).
//! The policy has rules keyed on `[user]`, `[user, tenant]`, `[tenant, user]` (same descriptors,
//! other order), `[tenant]`, `[route, user]`, a global rule, and two rules with one name prefix of
//! another's. Each set is peeked (nothing consumed) through a store that records the keys.
//!
//! Properties: each key decodes back into its rule's name, its key descriptors' names and the
//! request's values, in order; and two keys are equal exactly when they are the same rule's and
//! that rule's key values are equal.

use std::num::NonZeroU64;
use std::sync::Mutex;
use std::time::Duration;

use floodgate::core::{FixedWindow, Grant};
use floodgate::store::{Applied, Mode, Op, Records, Store, StoreError};
use floodgate::{Descriptors, Hit, Impossible, Limit, MemoryStore, Policy, Rule};

const NAMES: [&str; 3] = ["user", "tenant", "route"];

/// Rule name and key descriptors.
const RULES: [(&str, &[&str]); 8] = [
    ("per-user", &["user"]),
    ("per-user-tenant", &["user", "tenant"]),
    ("per-tenant-user", &["tenant", "user"]),
    ("per-tenant", &["tenant"]),
    ("per-route-user", &["route", "user"]),
    ("global", &[]),
    ("a", &["user"]),
    ("a4:user", &[]),
];

/// A memory store that records the key of every op it is given.
#[derive(Debug, Default)]
struct Recording {
    inner: MemoryStore,
    keys: Mutex<Vec<(usize, Vec<u8>)>>,
}

impl Store for Recording {
    async fn apply(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Result<(), StoreError> {
        self.record(ops);
        self.inner.apply(ops, mode, out).await
    }

    fn try_apply_now(&self, ops: &[Op<'_>], mode: Mode, out: &mut Applied) -> Option<Result<(), StoreError>> {
        self.record(ops);
        self.inner.try_apply_now(ops, mode, out)
    }

    async fn refund(&self, key: &[u8], limit: &Limit, grant: Grant) -> Result<(), StoreError> {
        self.inner.refund(key, limit, grant).await
    }

    async fn reset(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.inner.reset(key).await
    }
}

/// Keeps no reservation records.
impl Records for Recording {}

impl Recording {
    fn record(&self, ops: &[Op<'_>]) {
        let mut keys = self.keys.lock().unwrap();
        keys.extend(ops.iter().map(|op| (op.scope_len, op.key.to_vec())));
    }

    fn take(&self) -> Vec<(usize, Vec<u8>)> {
        std::mem::take(&mut *self.keys.lock().unwrap())
    }
}

fn policy() -> Policy {
    let limit = || FixedWindow::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(60)).unwrap();
    Policy::new(RULES.iter().map(|(name, key)| Rule::new(*name, limit()).key(key.iter().copied())))
        .expect("a valid policy")
}

/// The descriptor set of one half of the input: values for `NAMES` in turn.
fn descriptors(half: &[u8]) -> (Descriptors, [Option<String>; 3]) {
    let mut values: [Option<String>; 3] = Default::default();
    let mut descriptors = Descriptors::new();
    if !half.is_empty() {
        for (i, value) in half.split(|b| *b == 0).take(NAMES.len()).enumerate() {
            let value = String::from_utf8_lossy(value).into_owned();
            descriptors.insert(NAMES[i], value.clone());
            values[i] = Some(value);
        }
    }
    (descriptors, values)
}

/// The keys the engine gives `descriptors`, by rule position; `None` for a rule that does not
/// apply (a key descriptor missing).
fn keys(store: &Recording, policy: &Policy, descriptors: &Descriptors) -> Vec<Option<Vec<u8>>> {
    let result = policy
        .evaluate_now(store, floodgate::Mode::Peek, &[Hit::new(descriptors, 1)], Impossible::Error)
        .expect("the memory store answers at once")
        .expect("a valid request");
    let recorded = store.take();
    let mut by_rule = vec![None; RULES.len()];
    assert_eq!(recorded.len(), result.limits.len(), "one op per rule that applied");
    for (limit, (scope_len, key)) in result.limits.iter().zip(recorded) {
        let (name, key_names) = RULES[limit.index];
        assert_eq!(*limit.rule, *name);
        // The key decodes into the rule's name, its key descriptors' names, then the values.
        let fields =
            floodgate::key::decode(&key).unwrap_or_else(|| panic!("a key that does not decode: {key:?}"));
        let mut expected: Vec<&[u8]> = vec![name.as_bytes()];
        expected.extend(key_names.iter().map(|n| n.as_bytes()));
        let scope = expected.len();
        expected.extend(key_names.iter().map(|n| descriptors.get(n).expect("present").as_bytes()));
        assert_eq!(fields, expected, "rule {name}");
        let scope_bytes: usize =
            fields[..scope].iter().map(|f| f.len() + 1 + f.len().to_string().len()).sum();
        assert_eq!(scope_len, scope_bytes, "the scope is the rule's name and key descriptors");
        by_rule[limit.index] = Some(key);
    }
    by_rule
}

floodgate_fuzz::fuzz_target!(|data| {
    static POLICY: std::sync::OnceLock<Policy> = std::sync::OnceLock::new();
    let policy = POLICY.get_or_init(policy);
    let mut halves = data.splitn(2, |b| *b == 0xFF);
    let (a, a_values) = descriptors(halves.next().unwrap_or_default());
    let (b, b_values) = descriptors(halves.next().unwrap_or_default());
    let store = Recording::default();
    let (a_keys, b_keys) = (keys(&store, policy, &a), keys(&store, policy, &b));

    let value = |values: &[Option<String>; 3], name: &str| {
        values[NAMES.iter().position(|n| *n == name).unwrap()].clone()
    };
    for (i, a_key) in a_keys.iter().enumerate() {
        let Some(a_key) = a_key else { continue };
        for (j, b_key) in b_keys.iter().enumerate() {
            let Some(b_key) = b_key else { continue };
            let same_values = RULES[i].1.iter().all(|n| value(&a_values, n) == value(&b_values, n));
            assert_eq!(
                a_key == b_key,
                i == j && same_values,
                "rule {} of {a:?} and rule {} of {b:?}: keys {:?} and {:?}",
                RULES[i].0,
                RULES[j].0,
                String::from_utf8_lossy(a_key),
                String::from_utf8_lossy(b_key)
            );
        }
    }
});
