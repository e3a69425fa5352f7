//! The `floodgate-bench replay` binary end to end: the JSON of DESIGN.md §13, gzip, `--compare`,
//! Envoy logs behind trusted proxies, `--plot`, and bad input refused with exit code 64.

use std::io::Write as _;
use std::process::Command;

use serde_json::Value;

use super::{T0, combined, temp};

const PER_IP_2: &str = "rules:\n  - name: per-ip\n    key: [ip]\n    algorithm: fixed_window\n    limit: 2\n    window: 1m\n  - name: orders\n    match: { route: \"POST /api/orders/{id}\" }\n    key: [user]\n    algorithm: sliding_log\n    limit: 1\n    window: 1m\n    action: shadow\n";
const PER_IP_3: &str =
    "rules:\n  - name: per-ip\n    key: [ip]\n    algorithm: fixed_window\n    limit: 3\n    window: 1m\n";

fn write(name: &str, text: &str) -> std::path::PathBuf {
    let path = temp(name);
    std::fs::write(&path, text).expect("write");
    path
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_floodgate-bench")).arg("replay").args(args).output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs with `--json` and returns the JSON.
fn json(args: &[&str]) -> Value {
    let path = temp("report.json");
    let p = path.to_string_lossy().into_owned();
    let mut all = args.to_vec();
    all.extend(["--json", &p, "--quiet"]);
    let (code, _, err) = run(&all);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("json")).expect("valid JSON")
}

/// One client over its limit (4 in a minute), one under it (1), a malformed line, and alice's two
/// orders in a minute.
fn log() -> String {
    let mut text = String::new();
    for s in 0..4 {
        text.push_str(&combined("203.0.113.7", "-", T0 + s, "GET /api/items?page=2", None));
    }
    text.push_str("203.0.113.8 - - [not a time] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n");
    text.push_str(&combined("198.51.100.1", "alice", T0 + 70, "POST /api/orders/17", None));
    text.push_str(&combined("198.51.100.2", "alice", T0 + 71, "POST /api/orders/18", None));
    text
}

#[test]
fn the_json_report_has_the_designed_shape_and_counts() {
    let log = write("access.log", &log());
    let config = write("a.yaml", PER_IP_2);
    let v = json(&[
        "--log",
        log.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--routes",
        "/api/orders/{id}",
        "--map",
        "user=remote_user",
        "--suggest",
    ]);
    let keys: Vec<&str> = ["lines", "malformed", "requests", "denied", "rules", "suggest"].to_vec();
    for k in keys {
        assert!(v.get(k).is_some(), "{k} missing in {v}");
    }
    assert_eq!((v["lines"].as_u64(), v["malformed"].as_u64()), (Some(7), Some(1)));
    assert_eq!((v["requests"].as_u64(), v["denied"].as_u64()), (Some(6), Some(2)));
    assert_eq!(v["malformed_lines"][0]["line"], 5);
    let per_ip = &v["rules"][0];
    assert_eq!(per_ip["name"], "per-ip");
    assert_eq!((per_ip["matched"].as_u64(), per_ip["denied"].as_u64()), (Some(6), Some(2)));
    assert_eq!(per_ip["keys_denied"], 1);
    assert_eq!(per_ip["top_keys"], serde_json::json!([{"key": "203.0.113.7", "denied": 2}]));
    // The shadowed rule: alice's second order would have been denied, and was not refused.
    let orders = &v["rules"][1];
    assert_eq!((orders["matched"].as_u64(), orders["denied"].as_u64()), (Some(2), Some(1)));
    assert_eq!(orders["shadow_denied"], 1);
    assert_eq!(orders["top_keys"][0]["key"], "alice");
    assert_eq!((v["clients"].as_u64(), v["clients_denied"].as_u64()), (Some(3), Some(1)));
    assert_eq!(v["busiest_second"]["requests"], 1);
    let row = &v["suggest"][0];
    for k in ["rule", "algorithm", "limit", "peak_p50", "peak_p99", "peak_p999", "peak_max"] {
        assert!(row.get(k).is_some(), "{k} missing in {row}");
    }
    // per-ip's peaks: 4 (203.0.113.7), 1, 1; one key of three may not be refused at 0.1 %.
    assert_eq!(
        (row["rule"].as_str(), row["algorithm"].as_str(), row["limit"].as_u64()),
        (Some("per-ip"), Some("fixed_window"), Some(4))
    );
}

#[test]
fn a_gzip_log_reads_as_the_plain_one() {
    let text = log();
    let plain = write("plain.log", &text);
    let gz = temp("packed.log.gz");
    let mut e = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).expect("gz"),
        flate2::Compression::default(),
    );
    e.write_all(text.as_bytes()).expect("gzip");
    e.finish().expect("gzip");
    let config = write("a.yaml", PER_IP_2);
    let a = json(&["--log", plain.to_str().unwrap(), "--config", config.to_str().unwrap()]);
    let b = json(&["--log", gz.to_str().unwrap(), "--config", config.to_str().unwrap()]);
    assert_eq!(a["rules"], b["rules"]);
    // Without `--map user=remote_user`, nothing gives `user`: the orders rule never applied, and
    // the report says why.
    assert_eq!(a["unmapped_descriptors"], serde_json::json!(["user"]));
    assert_eq!(a["rules"][1]["matched"], 0);
    assert_eq!((a["requests"].clone(), a["denied"].clone()), (b["requests"].clone(), b["denied"].clone()));
}

#[test]
fn compare_reports_both_policies_and_what_only_one_denies() {
    let log = write("access.log", &log());
    let a = write("a.yaml", PER_IP_2);
    let b = write("b.yaml", PER_IP_3);
    let v = json(&[
        "--log",
        log.to_str().unwrap(),
        "--config",
        a.to_str().unwrap(),
        "--compare",
        b.to_str().unwrap(),
    ]);
    assert_eq!(v["a"]["denied"], 2);
    assert_eq!(v["b"]["denied"], 1);
    assert_eq!((v["only_a_denied"].as_u64(), v["only_b_denied"].as_u64()), (Some(1), Some(0)));
    let v = json(&[
        "--log",
        log.to_str().unwrap(),
        "--config",
        b.to_str().unwrap(),
        "--compare",
        a.to_str().unwrap(),
    ]);
    assert_eq!((v["only_a_denied"].as_u64(), v["only_b_denied"].as_u64()), (Some(0), Some(1)));
}

#[test]
fn envoy_logs_key_on_the_client_behind_trusted_proxies() {
    let mut text = String::new();
    for (i, xff) in [
        "198.51.100.7, 10.0.0.2",
        "198.51.100.7, 10.0.0.3",
        "198.51.100.7, 10.0.0.2",
        "198.51.100.9, 10.0.0.2",
    ]
    .iter()
    .enumerate()
    {
        text.push_str(&format!(
            "[2026-12-02T09:00:0{i}.250Z] \"GET /api/items HTTP/1.1\" 200 - 0 312 4 3 \"{xff}\" \"okhttp/4.12\" \"5b1f0c8e-3f1d-4c55-9b8a-1c2d3e4f5a6{i}\" \"shop.example\" \"10.1.2.3:8080\"\n"
        ));
    }
    let log = write("envoy.log", &text);
    let config = write("a.yaml", PER_IP_2);
    let v = json(&[
        "--log",
        log.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--trusted-proxy",
        "10.0.0.0/8",
    ]);
    assert_eq!(v["rules"][0]["top_keys"], serde_json::json!([{"key": "198.51.100.7", "denied": 1}]));
    // Untrusted, the proxies are the clients.
    let v = json(&["--log", log.to_str().unwrap(), "--config", config.to_str().unwrap()]);
    assert_eq!(v["rules"][0]["top_keys"], serde_json::json!([{"key": "10.0.0.2", "denied": 1}]));
}

#[test]
fn the_plot_is_an_svg_with_a_panel_per_rule() {
    let log = write("access.log", &log());
    let config = write("a.yaml", PER_IP_2);
    let svg = temp("replay.svg");
    let (code, _, err) = run(&[
        "--log",
        log.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--routes",
        "/api/orders/{id}",
        "--map",
        "user=remote_user",
        "--plot",
        svg.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&svg).expect("svg");
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"), "{text}");
    assert!(text.contains("per-ip") && text.contains("orders"));
}

#[test]
fn bad_input_is_refused_with_exit_code_64_saying_what() {
    let junk = write("junk.log", "hello\nworld\n");
    let good = write("access.log", &log());
    let config = write("a.yaml", PER_IP_2);
    let bad_config = write(
        "bad.yaml",
        "rules:\n  - name: x\n    algorithm: fixed_window\n    limit: ten\n    window: 1m\n",
    );
    let cases: [(Vec<&str>, &str); 4] = [
        (vec!["--log", junk.to_str().unwrap(), "--config", config.to_str().unwrap()], "give --format"),
        (vec!["--log", good.to_str().unwrap(), "--config", bad_config.to_str().unwrap()], "limit"),
        (
            vec![
                "--log",
                good.to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
                "--routes",
                "orders/{id}",
            ],
            "--routes",
        ),
        (vec!["--log", "/nonexistent.log", "--config", config.to_str().unwrap()], "no such file"),
    ];
    for (args, words) in cases {
        let (code, _, err) = run(&args);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
    // A format that does not fit the lines: every line malformed, counted, not a failure.
    let v =
        json(&["--log", good.to_str().unwrap(), "--config", config.to_str().unwrap(), "--format", "envoy"]);
    assert_eq!(
        (v["lines"].as_u64(), v["malformed"].as_u64(), v["requests"].as_u64()),
        (Some(7), Some(7), Some(0))
    );
}

#[test]
fn the_guides_example_policies_replay() {
    let log = write("access.log", &log());
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/replay");
    for name in ["guess.yaml", "tuned.yaml", "shadow.yaml", "rollout.yaml"] {
        let config = format!("{dir}/{name}");
        let v =
            json(&["--log", log.to_str().unwrap(), "--config", &config, "--routes", "/api/products/{id}"]);
        let rules: Vec<&str> =
            v["rules"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(rules, ["per-ip", "login-per-ip", "products-api"], "{name}");
        assert_eq!(v["requests"], 6, "{name}");
    }
}

#[test]
fn a_quota_in_each_clients_logged_zone_renews_at_its_own_midnight() {
    let policy = "descriptors: [tz]\nrules:\n  - name: daily\n    key: [ip]\n    algorithm: quota\n    limit: 1\n    period: day\n    time_zone: { by: tz }\n";
    let mut text = String::new();
    // T0 is 09:00Z; 16:00Z is the next day in Tokyo (UTC+9), the same day in UTC.
    for secs in [T0, T0 + 7 * 3600] {
        text.push_str(&combined("203.0.113.1", "Asia/Tokyo", secs, "GET /", None));
        text.push_str(&combined("203.0.113.2", "UTC", secs, "GET /", None));
    }
    text.push_str(&combined("203.0.113.3", "Mars/Olympus", T0 + 8 * 3600, "GET /", None));
    let log = write("zones.log", &text);
    let config = write("zones.yaml", policy);
    let v = json(&[
        "--log",
        log.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--map",
        "tz=remote_user",
    ]);
    assert_eq!((v["requests"].as_u64(), v["denied"].as_u64()), (Some(4), Some(1)), "{v}");
    assert_eq!(v["rules"][0]["top_keys"], serde_json::json!([{"key": "203.0.113.2", "denied": 1}]), "{v}");
    assert_eq!(v["errors"].as_u64(), Some(1), "the zone that is none is an error, not a request: {v}");
}
