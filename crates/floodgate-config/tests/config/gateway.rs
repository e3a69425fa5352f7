//! The `gateway:` section: a full one read into its settings, and every class of mistake reported
//! at its line, column and field.

use std::time::Duration;

use floodgate_config::gateway::{ForwardedHeader, Priority, Shed};
use floodgate_config::{self as config};

const FULL: &str = r#"
rules: []
gateway:
  listen: 127.0.0.1:8100
  trusted_proxies: [127.0.0.1/32, 10.0.0.0/8, "192.0.2.7"]
  forwarded_header: forwarded
  identity:
    claims: { user: sub, tenant: org, plan: tier }
    headers: { user: X-User-Id }
  switches: { shed: low, read: stale_cache }
  state_dir: /tmp/floodgate-gateway
  routes:
    - name: orders
      match: { path: "/api/orders/{id}", methods: [GET, post] }
      upstream: http://127.0.0.1:9000
      priority: critical
      timeouts: { connect: 1s, first_byte: 5s, total: 30s }
      retries: { attempts: 2, on: [connect_error, 502, 503], budget: 20% }
      breaker: { failure_rate: 50%, min_calls: 20, window: 30s, open_for: 30s }
      concurrency: 200
      fallback: { status: 503, body: '{"code":"DEGRADED"}', content_type: application/json, retry_after: 30s }
      degrade: { read: stale_cache, write: accept_async }
    - name: orders-delete
      match: { path: "/api/orders/{id}", methods: [DELETE] }
      upstream: { url: "http://127.0.0.1:9001/base", http2: true }
    - name: everything-else
      match: { path: "/{*rest}" }
      upstream: http://127.0.0.1:9002
      priority: low
"#;

#[test]
fn a_full_gateway_section_is_read_into_its_settings() {
    let config = config::parse("gw.yaml", FULL).unwrap();
    let gateway = config.gateway.expect("a gateway");
    assert_eq!(gateway.listen, "127.0.0.1:8100".parse().unwrap());
    assert_eq!(gateway.trusted_proxies.len(), 3);
    assert_eq!(gateway.forwarded_header, ForwardedHeader::Forwarded);
    assert_eq!(gateway.identity.claims.tenant, "org");
    assert_eq!(gateway.identity.headers.user.as_ref().map(|h| h.as_str()), Some("x-user-id"));
    assert!(gateway.identity.jwt.is_none());
    assert_eq!(gateway.switches.shed, Shed::Low);
    assert!(gateway.switches.stale_reads && !gateway.switches.async_writes);
    let orders = &gateway.routes[0];
    assert_eq!(
        orders.methods.as_ref().unwrap().iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        ["GET", "POST"]
    );
    assert_eq!(orders.priority, Priority::Critical);
    assert_eq!(orders.timeouts.total, Some(Duration::from_secs(30)));
    let retries = orders.retries.as_ref().unwrap();
    assert_eq!(
        (retries.attempts, retries.on_connect_error, &retries.statuses[..]),
        (2, true, &[502, 503][..])
    );
    assert!((retries.budget - 0.2).abs() < 1e-9);
    let breaker = orders.breaker.as_ref().unwrap();
    assert_eq!((breaker.min_calls, breaker.open_for), (20, Duration::from_secs(30)));
    assert_eq!(
        breaker.probe_timeout,
        Duration::from_secs(30),
        "a probe is bounded by the route's total timeout"
    );
    assert_eq!(orders.fallback.as_ref().unwrap().body, r#"{"code":"DEGRADED"}"#);
    assert!(orders.degrade.stale_cache && orders.degrade.accept_async);
    assert!(gateway.routes[1].upstream.http2);
    assert_eq!(gateway.routes[1].upstream.uri.path(), "/base");
    assert_eq!(gateway.routes[2].methods, None);
}

#[test]
fn delay_queue_tiers_and_route_tiers_are_read() {
    use floodgate_config::gateway::{Tier, TierFrom};
    let yaml = r#"
rules: []
gateway:
  delay_queue: { weights: [16, 4, 1], aging: 500ms }
  routes:
    - name: by-header
      match: { path: /a }
      upstream: http://127.0.0.1:9000
      tier: { from: header, name: X-Priority, default: 1 }
    - name: by-plan
      match: { path: /b }
      upstream: http://127.0.0.1:9000
      tier: { from: plan, plans: { enterprise: 0, free: 2 } }
    - name: none
      match: { path: /c }
      upstream: http://127.0.0.1:9000
"#;
    let gateway = config::parse("gw.yaml", yaml).unwrap().gateway.unwrap();
    assert_eq!(gateway.delay_queue.weights(), [16, 4, 1]);
    assert_eq!(gateway.delay_queue.aging(), Duration::from_millis(500));
    assert_eq!(
        gateway.routes[0].tier,
        Some(Tier { from: TierFrom::Header(http::HeaderName::from_static("x-priority")), default: 1 })
    );
    let plans = [("enterprise".to_owned(), 0), ("free".to_owned(), 2)].into_iter().collect();
    // Without a default, the lowest tier.
    assert_eq!(gateway.routes[1].tier, Some(Tier { from: TierFrom::Plan(plans), default: 2 }));
    assert_eq!(gateway.routes[2].tier, None);
    let defaults = config::parse("gw.yaml", "rules: []\ngateway: {}\n").unwrap().gateway.unwrap();
    assert_eq!((defaults.delay_queue.weights(), defaults.delay_queue.tiers()), (&[8, 4, 2, 1][..], 4));
}

#[test]
fn an_https_upstream_is_checked_against_its_ca_or_the_systems() {
    let dir = std::env::temp_dir().join(format!("floodgate-upstream-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .self_signed(&rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let path = dir.join("ca.pem");
    std::fs::write(&path, ca.pem()).unwrap();
    let yaml = format!(
        "rules: []\ngateway:\n  routes:\n    - name: own\n      match: {{ path: \"/a\" }}\n      upstream: {{ url: \"https://api.internal:8443\", http2: true, tls: {{ ca: {} }} }}\n    - name: public\n      match: {{ path: \"/b\" }}\n      upstream: https://api.openai.com\n    - name: plain\n      match: {{ path: \"/c\" }}\n      upstream: http://127.0.0.1:9000\n",
        path.display()
    );
    let gateway = config::parse("gw.yaml", &yaml).unwrap_or_else(|e| panic!("{e}")).gateway.unwrap();
    let own = &gateway.routes[0].upstream;
    assert!(own.http2);
    assert_eq!(own.tls.as_ref().unwrap().ca.path(), path);
    let public = gateway.routes[1].upstream.tls.as_ref().expect("https is TLS");
    assert_eq!(public.ca.path(), std::path::Path::new(config::gateway::SYSTEM_CA_BUNDLE));
    assert_eq!(gateway.routes[2].upstream.tls, None);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `(yaml of the gateway section, line, column, field, fragment of the message)`.
#[test]
fn each_mistake_is_reported_at_its_field() {
    let route = |extra: &str| {
        format!(
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: {{ path: \"/a\" }}\n      upstream: http://127.0.0.1:9000\n{extra}"
        )
    };
    for (yaml, line, column, field, says) in [
        ("rules: []\ngateway:\n  listen: localhost\n".to_owned(), 3, 11, "gateway.listen", "invalid listen address"),
        ("rules: []\ngateway:\n  trusted_proxies: [10.0.0.0/33]\n".to_owned(), 3, 21, "gateway.trusted_proxies[0]", "invalid trusted proxy"),
        ("rules: []\ngateway:\n  listn: 1\n".to_owned(), 3, 3, "gateway.listn", "did you mean \"listen\""),
        (route("      priority: urgent\n"), 7, 17, "gateway.routes[0].priority", "unknown priority"),
        (route("      timeouts: { connect: 0s }\n"), 7, 28, "gateway.routes[0].timeouts.connect", "longer than 0"),
        (route("      retries: { on: [404] }\n"), 7, 23, "gateway.routes[0].retries.on[0]", "only 5xx"),
        (route("      retries: { budget: 150% }\n"), 7, 26, "gateway.routes[0].retries.budget", "at most 100%"),
        (route("      breaker: { failure_rate: 0 }\n"), 7, 32, "gateway.routes[0].breaker.failure_rate", "above 0%"),
        (route("      degrade: { write: accept_async }\n"), 4, 7, "gateway.routes[0]", "state_dir"),
        (route("      fallback: { status: 99 }\n"), 7, 27, "gateway.routes[0].fallback.status", "at least 200"),
        (
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: { path: \"/a/{id\" }\n      upstream: http://h:1\n".to_owned(),
            5, 22, "gateway.routes[0].match.path", "invalid path template",
        ),
        (
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: { path: \"/a\" }\n      upstream: ftp://h:1\n".to_owned(),
            6, 17, "gateway.routes[0].upstream", "expected http://host:port or https://host:port",
        ),
        (
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: { path: \"/a\" }\n      upstream: { url: \"http://h:1\", tls: { ca: /x.pem } }\n".to_owned(),
            6, 43, "gateway.routes[0].upstream.tls", "tls is for https:// upstreams",
        ),
        (
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: { path: \"/a\" }\n      upstream: { url: \"https://h:1\", tls: { ca: /nonexistent/ca.pem } }\n".to_owned(),
            6, 50, "gateway.routes[0].upstream.tls.ca", "cannot read /nonexistent/ca.pem",
        ),
        (
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: { path: \"/a\" }\n      upstream: { url: \"https://h:1\", tls: { ca: /etc/hostname } }\n".to_owned(),
            6, 50, "gateway.routes[0].upstream.tls.ca", "no CA certificate",
        ),
        (
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: { path: \"/a\" }\n      upstream: { url: \"https://h:1\", tls: { cert: /x.pem } }\n".to_owned(),
            6, 46, "gateway.routes[0].upstream.tls.cert", "unknown field",
        ),
        (
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: { path: \"/a\", methods: [GIT] }\n      upstream: http://h:1\n    - name: s\n      match: { path: \"/a\", methods: [GIT] }\n      upstream: http://h:1\n".to_owned(),
            7, 7, "gateway.routes[1]", "same path and method",
        ),
        (
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: { path: \"/a/{id}\" }\n      upstream: http://h:1\n    - name: s\n      match: { path: \"/a/{key}\" }\n      upstream: http://h:1\n".to_owned(),
            7, 7, "gateway.routes[1]", "conflicts",
        ),
        (
            "rules: []\ngateway:\n  identity:\n    jwt: { hs256_secret_env: FLOODGATE_TEST_SURELY_UNSET }\n".to_owned(),
            4, 30, "gateway.identity.jwt.hs256_secret_env", "is not set",
        ),
        (
            "rules: []\ngateway:\n  identity:\n    jwt: { jwks_file: /nonexistent/jwks.json }\n".to_owned(),
            4, 23, "gateway.identity.jwt.jwks_file", "cannot read the JWKS file",
        ),
        ("rules: []\ngateway:\n  identity:\n    jwt: { issuer: x }\n".to_owned(), 4, 10, "gateway.identity.jwt", "hs256_secret_env, jwks_file"),
        (route("      tier: { from: header, name: x-priority, default: 4 }\n"), 7, 56, "gateway.routes[0].tier.default", "default tier 4 is not a tier: tiers are 0 to 3"),
        (route("      tier: { from: cookie }\n"), 7, 21, "gateway.routes[0].tier.from", "unknown tier source \"cookie\""),
        (route("      tier: { from: plan, plans: { gold: 8 } }\n"), 7, 42, "gateway.routes[0].tier.plans.gold", "tier 8 is not a tier"),
        (route("      tier: { from: header }\n"), 7, 13, "gateway.routes[0].tier.name", "missing field \"name\""),
        ("rules: []\ngateway:\n  delay_queue: { weights: [1, 2] }\n".to_owned(), 3, 27, "gateway.delay_queue.weights", "tier 1 weighs 2, more than tier 0"),
        ("rules: []\ngateway:\n  delay_queue: { weights: [4, 0] }\n".to_owned(), 3, 31, "gateway.delay_queue.weights[1]", "at least 1"),
        ("rules: []\ngateway:\n  delay_queue: { aging: 0s }\n".to_owned(), 3, 25, "gateway.delay_queue.aging", "longer than 0"),
    ] {
        let err = config::parse("gw.yaml", &yaml).expect_err(&yaml);
        assert_eq!(err.field.as_deref(), Some(field), "{yaml}\n{}", err.message);
        assert_eq!((err.line, err.column), (Some(line), Some(column)), "{yaml}\n{}", err.message);
        assert!(err.message.starts_with(&format!("gw.yaml:{line}:{column}: {field}: ")), "{}", err.message);
        assert!(err.message.contains(says), "{yaml}\n{}", err.message);
    }
}

#[test]
fn rules_may_use_the_authenticated_descriptor() {
    let yaml = "rules:\n  - name: anonymous\n    match: { authenticated: \"false\" }\n    key: [ip]\n    algorithm: fixed_window\n    limit: 5\n    window: 1s\n";
    assert!(config::parse("a.yaml", yaml).is_ok());
}

#[test]
fn an_llm_route_is_read_with_its_defaults_and_its_settings() {
    use floodgate_config::gateway::{OverBudget, Tokenizer, WhenShort};
    let yaml = r#"
rules: []
gateway:
  routes:
    - name: chat
      match: { path: "/v1/{*rest}", methods: [POST] }
      upstream: http://127.0.0.1:9000
      llm:
        api: openai
        allowance: { default_max_tokens: 512, min_completion_tokens: 32, max_tokens: 8192, when_short: deny }
        over_budget_mid_stream: finish
        tokenizers: { "llama-*": o200k, mistral-small: { chars_per_token: 3.5 } }
        chars_per_token: 2.5
        prices: { gpt-4o-mini: { input: 0.15, cached_input: 0.075, output: 0.60 }, "gpt-4o*": { input: 2.5, output: 10 } }
        max_body: 1048576
        reservation_ttl: 2m
    - name: plain
      match: { path: "/v2/{*rest}" }
      upstream: http://127.0.0.1:9000
      llm: { api: openai }
    - name: claude
      match: { path: "/anthropic/{*rest}" }
      upstream: http://127.0.0.1:9001
      llm: { api: anthropic, prices: { "claude-*": { input: 3, cached_input: 0.3, cache_write: 3.75, output: 15 } } }
"#;
    let gateway = config::parse("gw.yaml", yaml).unwrap().gateway.unwrap();
    let llm = gateway.routes[0].llm.as_ref().unwrap();
    assert_eq!(llm.allowance.default_max_tokens, 512);
    assert_eq!(llm.allowance.min_completion_tokens, 32);
    assert_eq!(llm.allowance.max_tokens, 8192);
    assert_eq!(llm.allowance.when_short, WhenShort::Deny);
    assert_eq!(llm.over_budget_mid_stream, OverBudget::Finish);
    assert_eq!(
        llm.tokenizers,
        vec![
            ("llama-*".to_owned(), Tokenizer::O200k),
            ("mistral-small".to_owned(), Tokenizer::CharsPerToken(3.5)),
        ]
    );
    assert_eq!(llm.chars_per_token, 2.5);
    use floodgate_config::gateway::Price;
    assert_eq!(
        llm.price("gpt-4o-mini"),
        Some(Price { input: 0.15, cached_input: 0.075, output: 0.60, cache_write: 0.15 })
    );
    assert_eq!(
        llm.price("gpt-4o-2024-08-06"),
        Some(Price { input: 2.5, cached_input: 2.5, output: 10.0, cache_write: 2.5 })
    );
    assert_eq!(llm.price("gpt-4.1"), None);
    assert_eq!(llm.price_dimension, "usd_micros");
    assert_eq!(llm.max_body, 1 << 20);
    assert_eq!(llm.reservation_ttl, Duration::from_secs(120));
    let plain = gateway.routes[1].llm.as_ref().unwrap();
    assert_eq!(plain.api, floodgate_config::gateway::LlmApi::OpenAi);
    let anthropic = gateway.routes[2].llm.as_ref().unwrap();
    assert_eq!(anthropic.api, floodgate_config::gateway::LlmApi::Anthropic);
    assert_eq!(
        anthropic.price("claude-sonnet-4-5"),
        Some(Price { input: 3.0, cached_input: 0.3, output: 15.0, cache_write: 3.75 })
    );
    assert_eq!(plain.allowance.default_max_tokens, 1024);
    assert_eq!(plain.allowance.when_short, WhenShort::Cap);
    assert_eq!(plain.over_budget_mid_stream, OverBudget::Cut);
    assert_eq!(plain.dimension, "tokens");
    assert_eq!(gateway.routes.len(), 3);
}

#[test]
fn each_llm_mistake_is_reported_at_its_field() {
    // Line 7 is `      llm: <llm>`: a value's column is 12 plus its place in `llm`.
    for (llm, at, field, says) in [
        ("{ api: anthropics }", "anthropics", "gateway.routes[0].llm.api", "unknown model API"),
        ("{ api: gemini }", "gemini", "gateway.routes[0].llm.api", "openai (OpenAI-compatible) or anthropic"),
        (
            "{ api: anthropic, prices: { claude: { input: 3, output: 15, cache_write: -1 } } }",
            "-1",
            "gateway.routes[0].llm.prices.claude.cache_write",
            "invalid cache_write price",
        ),
        ("{ allowance: {} }", "{ allowance", "gateway.routes[0].llm.api", "missing field \"api\""),
        (
            "{ api: openai, allowance: { when_short: wait } }",
            "wait",
            "gateway.routes[0].llm.allowance.when_short",
            "cap or deny",
        ),
        (
            "{ api: openai, allowance: { default_max_tokens: 0 } }",
            "0 }",
            "gateway.routes[0].llm.allowance.default_max_tokens",
            "at least 1",
        ),
        (
            "{ api: openai, allowance: { min_completion_tokens: 2000 } }",
            "2000",
            "gateway.routes[0].llm.allowance.min_completion_tokens",
            "above default_max_tokens",
        ),
        (
            "{ api: openai, over_budget_mid_stream: stop }",
            "stop",
            "gateway.routes[0].llm.over_budget_mid_stream",
            "cut or finish",
        ),
        (
            "{ api: openai, dimension: requests }",
            "requests",
            "gateway.routes[0].llm.dimension",
            "other than requests",
        ),
        (
            "{ api: openai, chars_per_token: 0 }",
            "0 }",
            "gateway.routes[0].llm.chars_per_token",
            "from 0.5 to 100",
        ),
        (
            "{ api: openai, tokenizers: { gpt: p50k } }",
            "p50k",
            "gateway.routes[0].llm.tokenizers.gpt",
            "unknown tokenizer",
        ),
        (
            "{ api: openai, reservation_ttl: 2d }",
            "2d",
            "gateway.routes[0].llm.reservation_ttl",
            "at most 24h",
        ),
    ] {
        let yaml = format!(
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: {{ path: \"/v1/{{*rest}}\" }}\n      upstream: http://127.0.0.1:9000\n      llm: {llm}\n"
        );
        let column = 12 + llm.find(at).unwrap();
        let err = config::parse("gw.yaml", &yaml).expect_err(&yaml);
        assert_eq!(err.field.as_deref(), Some(field), "{yaml}\n{}", err.message);
        assert_eq!((err.line, err.column), (Some(7), Some(column)), "{yaml}\n{}", err.message);
        assert!(err.message.contains(says), "{yaml}\n{}", err.message);
    }
}

#[test]
fn an_upstream_url_may_come_from_the_environment_with_a_default() {
    let route = |upstream: &str| {
        format!(
            "rules: []\ngateway:\n  routes:\n    - name: r\n      match: {{ path: \"/a\" }}\n      upstream: {upstream}\n"
        )
    };
    // Unset: the default.
    let yaml = route("{ url_env: FLOODGATE_TEST_SURELY_UNSET_UPSTREAM, url: \"http://127.0.0.1:9000\" }");
    let gateway = config::parse("gw.yaml", &yaml).unwrap().gateway.unwrap();
    assert_eq!(gateway.routes[0].upstream.uri, "http://127.0.0.1:9000");
    // Unset and no default: said so, at the variable.
    let err =
        config::parse("gw.yaml", &route("{ url_env: FLOODGATE_TEST_SURELY_UNSET_UPSTREAM }")).unwrap_err();
    assert_eq!(err.field.as_deref(), Some("gateway.routes[0].upstream.url_env"), "{}", err.message);
    assert!(err.message.contains("is not set, and no url is given"), "{}", err.message);
    // Set (PATH always is) to something that is no URL: refused, naming where it came from.
    let err =
        config::parse("gw.yaml", &route("{ url_env: PATH, url: \"http://127.0.0.1:9000\" }")).unwrap_err();
    assert!(err.message.contains("(from PATH)"), "{}", err.message);
}

#[test]
fn an_llm_route_may_list_its_upstreams_in_order_each_with_a_quota_rule() {
    let yaml = |route: &str| {
        format!(
            "rules:\n  - name: provisioned\n    key: [global]\n    algorithm: fixed_window\n    limit: 1000\n    window: 1m\n    cost: tokens\ngateway:\n  routes:\n    - name: r\n      match: {{ path: \"/v1/{{*rest}}\" }}\n{route}"
        )
    };
    let ok = yaml(
        "      llm:\n        api: openai\n        upstreams:\n          - { url: \"http://127.0.0.1:9000\", quota_rule: provisioned }\n          - \"http://127.0.0.1:9001\"\n",
    );
    let gateway = config::parse("gw.yaml", &ok).unwrap().gateway.unwrap();
    let route = &gateway.routes[0];
    let upstreams = &route.llm.as_ref().unwrap().upstreams;
    assert_eq!(upstreams.len(), 2);
    assert_eq!(upstreams[0].quota_rule.as_deref(), Some("provisioned"));
    assert_eq!(upstreams[1].upstream.uri, "http://127.0.0.1:9001");
    assert_eq!(route.upstream.uri, "http://127.0.0.1:9000", "the route's upstream is the first");

    for (route, field, says) in [
        (
            "      upstream: http://h:1\n      llm: { api: openai, upstreams: [\"http://h:2\"] }\n",
            "gateway.routes[0].upstream",
            "not both",
        ),
        (
            "      llm: { api: openai, upstreams: [{ url: \"http://h:2\", quota_rule: provisiond }] }\n",
            "gateway.routes[0].llm.upstreams[0].quota_rule",
            "did you mean \"provisioned\"",
        ),
        (
            "      llm: { api: openai, upstreams: [{ url: \"http://h:2\", quota_rule: provisioned }, { url: \"http://h:3\", quota_rule: provisioned }] }\n",
            "gateway.routes[0].llm.upstreams[1].quota_rule",
            "already another upstream's",
        ),
        ("      llm: { api: openai, upstreams: [] }\n", "gateway.routes[0].llm.upstreams", "empty list"),
        ("      llm: { api: openai }\n", "gateway.routes[0].upstream", "missing field \"upstream\""),
    ] {
        let yaml = yaml(route);
        let err = config::parse("gw.yaml", &yaml).expect_err(&yaml);
        assert_eq!(err.field.as_deref(), Some(field), "{yaml}\n{}", err.message);
        assert!(err.message.contains(says), "{yaml}\n{}", err.message);
    }
}
