//! `timeouts` against a real `floodgate serve` process and nginx: each budget ends every request
//! with a `504` naming it (nginx: a `504`), whatever the machine's load; how close to its value it
//! fires is the bench's figure, not this test's.

use super::{assert_common, bench, floodgate_binary, u};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_budget_answers_504_naming_itself() {
    let binary = floodgate_binary();
    let v = bench(&["timeouts", "--floodgate", &binary, "--timeout", "200ms", "--requests", "6", "-c", "3"])
        .await;
    assert_common(&v, "timeouts");
    let budgets = v["budgets"].as_array().unwrap_or_else(|| panic!("budgets: {v}"));
    let rows: Vec<(&str, &str)> =
        budgets.iter().map(|b| (b["proxy"].as_str().unwrap(), b["budget"].as_str().unwrap())).collect();
    assert_eq!(
        rows,
        [
            ("floodgate", "connect"),
            ("floodgate", "first_byte"),
            ("floodgate", "total"),
            ("nginx", "connect"),
            ("nginx", "first_byte")
        ]
    );
    for b in budgets {
        assert_eq!(u(b, "requests"), 6, "{b}");
        assert_eq!(u(b, "wrong"), 0, "every answer a 504 naming its budget: {b}");
        assert!(b["overshoot_p50_ms"].as_f64().unwrap() >= 0.0, "no budget fires before its value: {b}");
    }
}
