//! The IETF headers as a client reads them. An independent RFC 9651 parser (`sfv`), with the
//! draft's rules for each parameter on top (draft-ietf-httpapi-ratelimit-headers-11, sections 3
//! and 4), reads the draft's own examples and Floodgate's headers alike: what it accepts of the
//! draft, and the values it reads there, are what it then requires of Floodgate.

use floodgate::{LimitOutcome, Outcome, PartitionKey};
use proptest::prelude::*;
use sfv::{BareItem, ListEntry, Parser};

use super::{limit, of, render, verdict};
use crate::HeaderStyle;

/// One item of `RateLimit-Policy` (a quota policy) or of `RateLimit` (a service limit): the
/// policy's name and the parameters the draft defines, read with their types checked; any other
/// parameter is kept by name, as the draft allows ("can be regarded as comments").
#[derive(Debug, Default, PartialEq)]
struct DraftItem {
    name: String,
    /// `q`, a policy's quota (required on a policy item).
    q: Option<i64>,
    /// `qu`, a policy's quota unit; absent means `requests`.
    qu: Option<String>,
    /// `w`, a policy's window in seconds.
    w: Option<i64>,
    /// `r`, the available quota (required on a service limit item).
    r: Option<i64>,
    /// `t`, the effective window in seconds.
    t: Option<i64>,
    /// `pk`, the partition key.
    pk: Option<Vec<u8>>,
    /// Every other parameter, as `name=value` in the parser's rendering of the value.
    others: Vec<(String, String)>,
}

#[derive(Clone, Copy, PartialEq)]
enum Field {
    Policy,
    RateLimit,
}

/// Reads a field value (the lines of one field joined, as RFC 9651 §3.1 joins a list split over
/// several lines) as the draft defines it: a List of Items whose values are Strings, with typed
/// parameters. A value the draft calls malformed is an error saying why.
fn read(field: Field, value: &str) -> Result<Vec<DraftItem>, String> {
    let list: sfv::List = Parser::new(value).parse().map_err(|e| format!("not an sf-list: {e}"))?;
    let mut items = Vec::new();
    for entry in list {
        let ListEntry::Item(item) = entry else { return Err("an inner list is not an item".into()) };
        let BareItem::String(name) = &item.bare_item else {
            return Err(format!("the item value {:?} is not a String", item.bare_item));
        };
        let mut read = DraftItem { name: name.as_str().to_owned(), ..DraftItem::default() };
        for (key, value) in &item.params {
            let integer = |at_least: i64| match value {
                BareItem::Integer(n) if i64::from(*n) >= at_least => Ok(i64::from(*n)),
                _ => {
                    Err(format!("{} must be an Integer of at least {at_least}, not {value:?}", key.as_str()))
                }
            };
            match (field, key.as_str()) {
                (Field::Policy, "q") => read.q = Some(integer(0)?),
                (Field::Policy, "w") => read.w = Some(integer(1)?),
                (Field::Policy, "qu") => match value {
                    BareItem::String(unit) => read.qu = Some(unit.as_str().to_owned()),
                    _ => return Err(format!("qu must be a String, not {value:?}")),
                },
                (Field::RateLimit, "r") => read.r = Some(integer(0)?),
                (Field::RateLimit, "t") => read.t = Some(integer(0)?),
                (_, "pk") => match value {
                    BareItem::ByteSequence(bytes) => read.pk = Some(bytes.clone()),
                    _ => return Err(format!("pk must be a Byte Sequence, not {value:?}")),
                },
                (_, other) => read.others.push((other.to_owned(), bare(value))),
            }
        }
        match field {
            Field::Policy if read.q.is_none() => return Err(format!("{:?} has no q", read.name)),
            Field::RateLimit if read.r.is_none() => return Err(format!("{:?} has no r", read.name)),
            _ => {}
        }
        items.push(read);
    }
    if items.is_empty() {
        return Err("an empty list".into());
    }
    Ok(items)
}

/// A parameter's value as the draft would write it (`"tokens"`, `1000`).
fn bare(value: &BareItem) -> String {
    match value {
        BareItem::String(s) => format!("{:?}", s.as_str()),
        BareItem::Integer(n) => n.to_string(),
        BareItem::Token(t) => t.as_str().to_owned(),
        other => format!("{other:?}"),
    }
}

fn policy(name: &str, q: i64, w: Option<i64>) -> DraftItem {
    DraftItem { name: name.into(), q: Some(q), w, ..DraftItem::default() }
}

fn service(name: &str, r: i64, t: Option<i64>) -> DraftItem {
    DraftItem { name: name.into(), r: Some(r), t, ..DraftItem::default() }
}

// === the draft's own examples ===

/// Every `RateLimit-Policy` value of draft-ietf-httpapi-ratelimit-headers-11 (sections 3, 3.2,
/// 8.5, appendix B and the FAQ), as written there, and what it says.
#[test]
fn the_drafts_policy_examples_read_as_the_draft_describes_them() {
    let with = |mut item: DraftItem, f: &dyn Fn(&mut DraftItem)| {
        f(&mut item);
        item
    };
    let examples: Vec<(&str, Vec<DraftItem>)> = vec![
        (
            r#""burst";q=100;w=60,"daily";q=1000;w=86400"#,
            vec![policy("burst", 100, Some(60)), policy("daily", 1000, Some(86_400))],
        ),
        (r#""default";q=100;w=10"#, vec![policy("default", 100, Some(10))]),
        (
            r#""permin";q=50;w=60,"perhr";q=1000;w=3600"#,
            vec![policy("permin", 50, Some(60)), policy("perhr", 1000, Some(3600))],
        ),
        (
            r#""peruser";q=100;w=60;pk=:cHsdsRa894==:"#,
            vec![with(policy("peruser", 100, Some(60)), &|p| {
                p.pk = Some(vec![0x70, 0x7b, 0x1d, 0xb1, 0x16, 0xbc, 0xf7]);
            })],
        ),
        (
            r#""peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:"#,
            vec![with(policy("peruser", 65_535, Some(10)), &|p| {
                p.qu = Some("content-bytes".into());
                p.pk = Some(vec![0xb1, 0xd7, 0xe3, 0x2c, 0x95, 0x0e, 0x50]);
            })],
        ),
        (r#""somepolicy";q=10000;w=1000"#, vec![policy("somepolicy", 10_000, Some(1000))]),
        (r#""basic";q=100;w=60"#, vec![policy("basic", 100, Some(60))]),
        (r#""fixedwindow";q=100;w=60"#, vec![policy("fixedwindow", 100, Some(60))]),
        (r#""dynamic";q=15;w=20"#, vec![policy("dynamic", 15, Some(20))]),
        (
            r#""hour";q=1000;w=3600, "day";q=5000;w=86400"#,
            vec![policy("hour", 1000, Some(3600)), policy("day", 5000, Some(86_400))],
        ),
        // The FAQ's two field lines, one list.
        (
            r#""sliding";q=100;w=60;burst=1000, "fixed";q=5000;w=3600;burst=0"#,
            vec![
                with(policy("sliding", 100, Some(60)), &|p| p.others = vec![("burst".into(), "1000".into())]),
                with(policy("fixed", 5000, Some(3600)), &|p| p.others = vec![("burst".into(), "0".into())]),
            ],
        ),
        (r#""sliding";q=12;w=1"#, vec![policy("sliding", 12, Some(1))]),
    ];
    for (value, expected) in examples {
        assert_eq!(read(Field::Policy, value).as_ref(), Ok(&expected), "{value}");
    }
}

/// Every `RateLimit` value of the draft (sections 4, 4.2, 6, 7, 8.5, appendix B and the FAQ).
#[test]
fn the_drafts_ratelimit_examples_read_as_the_draft_describes_them() {
    let keyed = |mut item: DraftItem, pk: &[u8]| {
        item.pk = Some(pk.to_vec());
        item
    };
    let examples: Vec<(&str, DraftItem)> = vec![
        (r#""default";r=50;t=30"#, service("default", 50, Some(30))),
        // "an available quota of 999 requests for a partition key that has no time window"
        (r#""default";r=999;pk=:dHJpYWwxMjEzMjM=:"#, keyed(service("default", 999, None), b"trial121323")),
        // "a 300MB available quota for an application in the next 60 seconds"
        (
            r#""default";r=300000000;t=60;pk=:QXBwLTk5OQ==:"#,
            keyed(service("default", 300_000_000, Some(60)), b"App-999"),
        ),
        (r#""problemPolicy";r=0;t=10"#, service("problemPolicy", 0, Some(10))),
        (r#""default";r=1;t=7"#, service("default", 1, Some(7))),
        (r#""daily";r=1;t=86400"#, service("daily", 1, Some(86_400))),
        (r#""somepolicy";r=10000;t=10"#, service("somepolicy", 10_000, Some(10))),
        (r#""default";r=0;t=50"#, service("default", 0, Some(50))),
        (r#""default";r=0;t=48"#, service("default", 0, Some(48))),
        (r#""dayLimit";r=100;t=36000"#, service("dayLimit", 100, Some(36_000))),
        (r#""basic";r=60;t=58"#, service("basic", 60, Some(58))),
        (r#""basic";r=20;t=56"#, service("basic", 20, Some(56))),
        (r#""default";r=0;t=5"#, service("default", 0, Some(5))),
        (r#""fixedwindow";r=99;t=50"#, service("fixedwindow", 99, Some(50))),
        (r#""dynamic";r=9;t=50"#, service("dynamic", 9, Some(50))),
        (r#""dynamic";r=0;t=20"#, service("dynamic", 0, Some(20))),
        (r#""dynamic";r=15;t=40"#, service("dynamic", 15, Some(40))),
        (r#""day";r=100;t=36000"#, service("day", 100, Some(36_000))),
        (r#""default";r=50;t=60"#, service("default", 50, Some(60))),
        (r#""sliding";r=50;t=44"#, service("sliding", 50, Some(44))),
        // The FAQ writes `q` on a service limit: a parameter the draft does not define there.
        (
            r#""sliding";q=12;r=6;t=1"#,
            DraftItem { others: vec![("q".into(), "12".into())], ..service("sliding", 6, Some(1)) },
        ),
    ];
    for (value, expected) in examples {
        assert_eq!(read(Field::RateLimit, value), Ok(vec![expected]), "{value}");
    }
}

/// The reader refuses what the draft calls malformed, so that what it accepts of Floodgate is
/// worth something.
#[test]
fn the_reader_refuses_values_the_draft_calls_malformed() {
    for (field, value, why) in [
        (Field::Policy, "default;q=100;w=10", "is not a String"),
        (Field::Policy, r#""default";w=10"#, "has no q"),
        (Field::Policy, r#""default";q=100;qu=requests"#, "qu must be a String"),
        (Field::Policy, r#""default";q=100;w=0"#, "w must be an Integer of at least 1"),
        (Field::Policy, r#""default";q=-1"#, "q must be an Integer of at least 0"),
        (Field::Policy, r#""default";q=100;pk="u1""#, "pk must be a Byte Sequence"),
        (Field::RateLimit, r#""default";t=10"#, "has no r"),
        (Field::RateLimit, r#""default";r=1;pk=:not base64:"#, "not an sf-list"),
        (Field::RateLimit, r#"("a" "b");r=1"#, "inner list"),
    ] {
        let error = read(field, value).expect_err(value);
        assert!(error.contains(why), "{value}: {error}");
    }
}

// === Floodgate's headers, read back ===

fn concurrency(mut l: LimitOutcome) -> LimitOutcome {
    l.permit = true;
    l
}

fn keyed(mut l: LimitOutcome, pk: [u8; 16]) -> LimitOutcome {
    l.partition = Some(PartitionKey::from_bytes(pk));
    l
}

/// The IETF headers of a verdict of these limits, read back: (policy items, service limit items).
fn read_back(limits: impl IntoIterator<Item = LimitOutcome>) -> (Vec<DraftItem>, Vec<DraftItem>) {
    let h = render(&verdict(limits), HeaderStyle::Ietf);
    let value = |name: &str| h[name].to_str().unwrap().to_owned();
    (
        read(Field::Policy, &value("ratelimit-policy")).unwrap(),
        read(Field::RateLimit, &value("ratelimit")).unwrap(),
    )
}

#[test]
fn a_requests_rule_says_no_unit_the_drafts_default() {
    let (policies, limits) = read_back([limit("per-user", Outcome::Allowed, 10, 9, 30_000)]);
    assert_eq!(policies, [policy("per-user", 10, Some(60))]);
    assert_eq!(limits, [service("per-user", 9, Some(30))]);
}

#[test]
fn a_concurrency_rule_says_concurrent_requests_in_qu() {
    let (policies, limits) = read_back([concurrency(limit("in-flight", Outcome::Allowed, 4, 3, 30_000))]);
    assert_eq!(
        policies,
        [DraftItem { qu: Some("concurrent-requests".into()), ..policy("in-flight", 4, Some(60)) }]
    );
    // `qu` is a policy's parameter only: the service limit names its policy, which says the unit.
    assert_eq!(limits, [service("in-flight", 3, Some(30))]);
    let h = render(
        &verdict([concurrency(limit("in-flight", Outcome::Allowed, 4, 3, 30_000))]),
        HeaderStyle::Ietf,
    );
    assert_eq!(h["ratelimit-policy"], r#""in-flight";q=4;qu="concurrent-requests";w=60"#);
}

#[test]
fn a_rule_counting_tokens_names_its_unit_in_the_vendor_parameter_not_in_qu() {
    let (policies, limits) =
        read_back([of(limit("tokens-per-min", Outcome::Allowed, 90_000, 89_000, 60_000), "tokens")]);
    assert_eq!(
        policies,
        [DraftItem {
            others: vec![("floodgate-qu".into(), r#""tokens""#.into())],
            ..policy("tokens-per-min", 90_000, Some(60))
        }]
    );
    assert_eq!(limits, [service("tokens-per-min", 89_000, Some(60))]);
}

#[test]
fn a_partition_key_is_a_byte_sequence_on_the_policy_and_on_the_ratelimit_item() {
    let bytes: [u8; 16] = std::array::from_fn(|i| i as u8);
    let h = render(
        &verdict([keyed(limit("per-user", Outcome::Allowed, 10, 9, 30_000), bytes)]),
        HeaderStyle::Ietf,
    );
    assert_eq!(h["ratelimit-policy"], r#""per-user";q=10;w=60;pk=:AAECAwQFBgcICQoLDA0ODw==:"#);
    assert_eq!(h["ratelimit"], r#""per-user";r=9;t=30;pk=:AAECAwQFBgcICQoLDA0ODw==:"#);
    let (policies, limits) = read_back([keyed(limit("per-user", Outcome::Allowed, 10, 9, 30_000), bytes)]);
    assert_eq!(policies[0].pk.as_deref(), Some(&bytes[..]));
    assert_eq!(limits[0].pk.as_deref(), Some(&bytes[..]));
}

#[test]
fn every_kind_of_rule_side_by_side_each_with_its_own_parameters() {
    let pk = [0xfe; 16];
    let v = [
        limit("per-user", Outcome::Allowed, 10, 9, 30_000),
        keyed(concurrency(limit("in-flight", Outcome::Allowed, 2, 0, 5_000)), pk),
        of(limit("tokens", Outcome::Allowed, 1000, 900, 60_000), "tokens"),
    ];
    let h = render(&verdict(v.clone()), HeaderStyle::Ietf);
    // The most restrictive (nothing left) first, then the others in rule order.
    assert_eq!(
        h["ratelimit-policy"],
        concat!(
            r#""in-flight";q=2;qu="concurrent-requests";w=60;pk=:/v7+/v7+/v7+/v7+/v7+/g==:, "#,
            r#""per-user";q=10;w=60, "#,
            r#""tokens";q=1000;w=60;floodgate-qu="tokens""#
        )
    );
    assert_eq!(h["ratelimit"], r#""in-flight";r=0;t=5;pk=:/v7+/v7+/v7+/v7+/v7+/g==:"#);
    let (policies, limits) = read_back(v);
    let names: Vec<_> = policies.iter().map(|p| (p.name.as_str(), p.qu.as_deref(), p.pk.is_some())).collect();
    assert_eq!(
        names,
        [
            ("in-flight", Some("concurrent-requests"), true),
            ("per-user", None, false),
            ("tokens", None, false)
        ]
    );
    assert_eq!(limits.len(), 1);
}

proptest! {
    /// Whatever a rule is called and whatever its partition key, the headers are sf-lists the
    /// reader takes, naming the rule (printable ASCII as it is, anything else as `?`) and carrying
    /// the key's bytes.
    #[test]
    fn every_rendered_header_reads_back(
        name in "\\PC{1,12}",
        limit_of in 1u64..1_000_000,
        remaining_share in 0u64..=100,
        pk in proptest::option::of(any::<[u8; 16]>()),
        permit in any::<bool>(),
        tokens in any::<bool>(),
    ) {
        let remaining = limit_of * remaining_share / 100;
        let mut l = limit(&name, Outcome::Allowed, limit_of, remaining, 1_500);
        l.permit = permit;
        if tokens {
            l = of(l, "tokens");
        }
        l.partition = pk.map(PartitionKey::from_bytes);
        let (policies, limits) = read_back([l]);
        let shown: String = name.chars().map(|c| if (' '..='~').contains(&c) { c } else { '?' }).collect();
        prop_assert_eq!(&policies[0].name, &shown);
        prop_assert_eq!(&limits[0].name, &shown);
        prop_assert_eq!(policies[0].q, Some(limit_of as i64));
        prop_assert_eq!(limits[0].r, Some(remaining as i64));
        prop_assert_eq!(policies[0].qu.as_deref(), permit.then_some("concurrent-requests"));
        prop_assert_eq!(policies[0].pk.as_deref(), pk.as_ref().map(|b| &b[..]));
        prop_assert_eq!(limits[0].pk.as_deref(), pk.as_ref().map(|b| &b[..]));
    }
}
