//! No input makes the loader panic: random text, random YAML-ish text, and valid configurations
//! with bytes changed, removed or repeated all return `Ok` or `Err`.

use floodgate_config as config;
use proptest::prelude::*;

/// A valid configuration of each format, for mutation.
const NATIVE: &str = include_str!("fixtures/behaviour.yaml");
const PLANS: &str = include_str!("fixtures/plans.yaml");
const ENVOY: &str = include_str!("fixtures/edge_proxy.yaml");

/// Pieces of configuration syntax, to build text that is often nearly valid.
fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "rules:",
        "\n",
        "  - ",
        "name: ",
        "algorithm: ",
        "fixed_window",
        "token_bucket",
        "quota",
        "gcra",
        "limit: ",
        "window: ",
        "rate: ",
        "burst: ",
        "period: ",
        "month",
        "anchor: ",
        "time_zone: ",
        "UTC",
        "key: ",
        "[user]",
        "match: ",
        "{",
        "}",
        "[",
        "]",
        ", ",
        ": ",
        "by: ",
        "values: ",
        "overage: ",
        "degrade",
        "0",
        "1",
        "-1",
        "99999999999999999999999",
        "1.5",
        "10/s",
        "ten/s",
        "60s",
        "1h30m",
        "60",
        "rollout: ",
        "150%",
        "~",
        "true",
        "&a ",
        "*a",
        "<<: ",
        "'",
        "\"",
        "#",
        "\t",
        "domain: ",
        "descriptors:",
        "  - key: ",
        "value: ",
        "rate_limit: ",
        "unit: ",
        "second",
        "requests_per_unit: ",
        "unlimited: ",
        "shadow_mode: ",
        "replaces: ",
        "store:",
        "kind: ",
        "redis",
        "url: ",
        "headers: ",
        "!!binary ",
        "? ",
        "---\n",
        "...\n",
        "%YAML 1.2\n",
    ])
}

fn check(text: &str) {
    // Ok or Err, never a panic; an error always has a message.
    if let Err(e) = config::parse("fuzz.yaml", text) {
        assert!(!e.message.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_text(text in "\\PC{0,200}") {
        check(&text);
    }

    #[test]
    fn random_tokens(tokens in prop::collection::vec(token(), 0..80)) {
        check(&tokens.concat());
    }

    #[test]
    fn mutated_configurations(
        which in 0usize..3,
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<char>()), 1..6),
    ) {
        let mut text: Vec<char> = [NATIVE, PLANS, ENVOY][which].chars().collect();
        for (at, kind, c) in edits {
            if text.is_empty() {
                break;
            }
            let i = at.index(text.len());
            match kind {
                0 => text[i] = c,
                1 => { text.remove(i); }
                2 => text.insert(i, c),
                _ => {
                    // Repeat a slice: duplicated keys, rules and nesting.
                    let end = (i + 40).min(text.len());
                    let slice: Vec<char> = text[i..end].to_vec();
                    text.splice(i..i, slice);
                }
            }
        }
        check(&text.into_iter().collect::<String>());
    }
}

#[test]
fn hostile_inputs() {
    let bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n\
                rules: *f\n";
    for text in [
        "",
        "\u{0}",
        "\u{feff}rules: []",
        &"[".repeat(100_000),
        &"- ".repeat(50_000),
        &"{a: ".repeat(50_000),
        bomb,
        "rules:\n  - name: x\n    algorithm: token_bucket\n    rate: 18446744073709551615/ms\n",
        "rules:\n  - name: x\n    algorithm: fixed_window\n    limit: 18446744073709551616\n    window: 1s\n",
        "rules:\n  - name: x\n    algorithm: fixed_window\n    limit: 1\n    window: 99999999999999d\n",
        "rules:\n  - name: x\n    algorithm: quota\n    limit: 1\n    period: month\n    anchor: 255\n",
        "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: day, requests_per_unit: 4294967296000}\n",
    ] {
        check(text);
    }
}
