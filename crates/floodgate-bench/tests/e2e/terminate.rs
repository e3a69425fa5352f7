//! The binary under `SIGTERM`: it stops every process it started before it exits.

use floodgate_testkit::wait;

/// The processes descended from `pid` (its children, theirs, …), from `/proc`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else { continue };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Whether `pid` still runs (a zombie no longer does).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

#[tokio::test]
async fn a_terminated_bench_leaves_none_of_its_servers_running() {
    let mut bench = tokio::process::Command::new(env!("CARGO_BIN_EXE_floodgate-bench"))
        .args(["soak", "--store", "redis", "-d", "10m", "--quiet", "--floodgate", &super::floodgate_binary()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("floodgate-bench starts");
    let pid = bench.id().expect("a pid");
    // Its server and the Redis it shares, once both run.
    let started = wait::until("the bench's floodgate and redis-server", || async {
        let started = descendants(pid);
        let named = |name: &str| started.iter().any(|p| command_line(*p).contains(name));
        (named(" serve ") && named("redis-server")).then_some(started)
    })
    .await;
    let status = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert!(status.success());
    let exit = wait::finished("the bench's exit", bench.wait()).await.unwrap();
    assert_eq!(exit.code(), Some(143), "the exit status of a SIGTERM");
    let left: Vec<String> = started.iter().filter(|p| runs(**p)).map(|p| command_line(*p)).collect();
    assert!(left.is_empty(), "still running after the bench exited: {left:?}");
}
