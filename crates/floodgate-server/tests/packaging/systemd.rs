//! `deploy/systemd/floodgate.service`.

use std::collections::BTreeMap;
use std::path::Path;

use floodgate_server::cli::LogFormat;

use crate::support::{check_config, read, run, serve_args, tempdir, text};

const UNIT: &str = "deploy/systemd/floodgate.service";
const BIN: &str = env!("CARGO_BIN_EXE_floodgate");
const INSTALL_HINT: &str =
    "install it with `apt-get install -y systemd` (the Debian package ships systemd-analyze)";
/// Where the unit expects the binary (docs/deploy.md installs it there).
const INSTALLED: &str = "/usr/local/bin/floodgate";

/// The unit's `[Service]` directives, each with its values in order (a directive may repeat).
fn service() -> BTreeMap<String, Vec<String>> {
    let mut directives: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut section = String::new();
    for line in read(UNIT).lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        assert!(!line.ends_with('\\'), "{UNIT}: keep each directive on one line: {line}");
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("{UNIT}: not a directive: {line}"));
        if section == "Service" {
            directives.entry(key.trim().to_owned()).or_default().push(value.trim().to_owned());
        }
    }
    directives
}

/// The unit with the binary's path replaced by the binary these tests built: systemd-analyze
/// checks that `ExecStart` is executable.
fn unit_for_this_build(dir: &Path) -> std::path::PathBuf {
    let unit = read(UNIT);
    assert!(unit.contains(&format!("ExecStart={INSTALLED} ")), "{UNIT} runs {INSTALLED}");
    let path = dir.join("floodgate.service");
    std::fs::write(&path, unit.replace(INSTALLED, BIN)).unwrap();
    path
}

fn systemd_analyze(args: &[&str]) -> std::process::Output {
    run(Path::new("systemd-analyze"), args, INSTALL_HINT)
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let dir = tempdir("verify");
    let unit = unit_for_this_build(&dir);
    let output = systemd_analyze(&["verify", unit.to_str().unwrap()]);
    assert!(output.status.success(), "systemd-analyze verify failed:\n{}", text(&output));
    // Unknown directives and bad values are warnings on stderr with a zero exit: none allowed.
    assert!(output.stderr.is_empty(), "systemd-analyze verify warned:\n{}", text(&output));

    // And it can fail: a misspelt directive is reported.
    let broken = dir.join("broken.service");
    std::fs::write(
        &broken,
        std::fs::read_to_string(&unit).unwrap().replace("ProtectSystem=", "ProtectSytem="),
    )
    .unwrap();
    let output = systemd_analyze(&["verify", broken.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("ProtectSytem"), "{}", text(&output));
}

#[test]
fn the_units_sandbox_exposure_is_low() {
    let dir = tempdir("security");
    let unit = unit_for_this_build(&dir);
    let output = systemd_analyze(&["security", "--offline=yes", "--no-pager", unit.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    let report = String::from_utf8_lossy(&output.stdout);
    let exposure: f64 = report
        .lines()
        .find_map(|l| l.split("Overall exposure level for floodgate.service:").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no overall exposure in:\n{report}"));
    // 0 is fully sandboxed, 10 not at all; systemd calls up to 1.9 "OK". A service that must
    // listen on the network cannot take PrivateNetwork= or IPAddressDeny=.
    assert!(exposure <= 1.5, "exposure {exposure} (at most 1.5):\n{report}");
}

#[test]
fn the_unit_is_sandboxed_and_reloads_with_sighup() {
    let service = service();
    let one = |key: &str| -> &str {
        match service.get(key).map(Vec::as_slice) {
            Some([value]) => value,
            other => panic!("{UNIT}: {key}= must be set once, found {other:?}"),
        }
    };
    for (key, value) in [
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("LockPersonality", "yes"),
        ("SystemCallArchitectures", "native"),
        // No capability at all: it binds unprivileged ports.
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("KillSignal", "SIGTERM"),
        // A configuration error (exit 64) is not retried in a loop.
        ("RestartPreventExitStatus", "64"),
    ] {
        assert_eq!(one(key), value, "{UNIT}: {key}=");
    }
    assert_eq!(
        service.get("SystemCallFilter").map(Vec::as_slice),
        Some(&["@system-service".to_owned(), "~@privileged @resources".to_owned()][..]),
        "{UNIT}: the system-service set, minus privileged and resource calls"
    );
    assert_eq!(one("RestrictAddressFamilies"), "AF_INET AF_INET6 AF_UNIX");
}

#[test]
fn the_units_command_line_parses_and_its_listeners_keep_the_admin_api_on_loopback() {
    let service = service();
    let exec = &service["ExecStart"];
    assert_eq!(exec.len(), 1, "one ExecStart");
    let mut words = exec[0].split_whitespace().map(str::to_owned);
    assert_eq!(words.next().as_deref(), Some(INSTALLED));
    let args: Vec<String> = words.collect();
    let (format, serve) = serve_args(UNIT, &args);
    assert_eq!(format, LogFormat::Json, "journald keeps JSON lines whole");
    assert!(serve.http.ip().is_loopback(), "no admin token in the unit: the HTTP listener stays on loopback");
    assert_eq!(serve.config.as_deref(), Some(Path::new("/etc/floodgate/floodgate.yaml")));
    assert_eq!(one_value(&service, "ConfigurationDirectory"), "floodgate", "/etc/floodgate exists");
    assert_eq!(
        one_value(&service, "StateDirectory"),
        "floodgate",
        "/var/lib/floodgate is writable, for store.persist"
    );
    // The example the install steps copy to /etc/floodgate is a valid configuration.
    assert!(read(UNIT).contains("crates/floodgate-config/src/example.yaml /etc/floodgate/floodgate.yaml"));
    check_config("example.yaml", &read("crates/floodgate-config/src/example.yaml"));
}

fn one_value<'a>(service: &'a BTreeMap<String, Vec<String>>, key: &str) -> &'a str {
    service.get(key).and_then(|v| v.first()).map(String::as_str).unwrap_or_default()
}
