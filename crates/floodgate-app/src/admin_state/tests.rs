use super::*;
use crate::audit::Outcome;

/// A fresh directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("floodgate-state-{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn record(version: u64) -> AuditRecord {
    AuditRecord {
        version: Some(version),
        time: "2026-12-02T00:00:00.000Z".into(),
        source: Trigger::Admin,
        path: None,
        hash: Some(format!("{version:016x}")),
        added: vec!["per-user".into()],
        removed: Vec::new(),
        changed: Vec::new(),
        result: Outcome::Applied,
        error: None,
        restored: None,
        by: None,
        key: None,
    }
}

fn version(n: u64, text: &str) -> StoredVersion {
    let config = config::parse("admin", text).unwrap();
    StoredVersion {
        version: n,
        time: "2026-12-02T00:00:00.000Z".into(),
        trigger: Trigger::Admin,
        restored: None,
        file_hash: "0123456789abcdef".into(),
        source: StoredSource::of(&config.source, "admin"),
    }
}

const TEXT: &str = "rules:\n  - name: per-user\n    key: [user]\n    algorithm: sliding_window\n    limit: 3\n    window: 60s\n";

#[test]
fn what_is_written_is_read_back_after_a_reopen() {
    let dir = Dir::new("roundtrip");
    let (mut state, restored) = StateDir::open(&dir.0, 10).unwrap();
    assert!(restored.versions.is_empty() && restored.audit.is_empty());
    assert_eq!(restored.switches, SwitchChange::default());
    state.write_version(&version(1, TEXT), 1).unwrap();
    state.write_version(&version(2, &TEXT.replace("limit: 3", "limit: 5")), 1).unwrap();
    let mut kept = vec![record(1)];
    state.append_audit(&record(1), &kept).unwrap();
    kept.push(record(2));
    state.append_audit(&record(2), &kept).unwrap();
    let switches = SwitchChange { shed: Some(Shed::Low), stale_reads: Some(true), async_writes: None };
    state.write_switches(switches).unwrap();
    drop(state);

    let (_state, restored) = StateDir::open(&dir.0, 10).unwrap();
    assert_eq!(restored.versions.iter().map(|v| v.version).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(restored.versions[1], version(2, &TEXT.replace("limit: 3", "limit: 5")));
    assert_eq!(restored.audit, [record(1), record(2)]);
    assert_eq!(restored.switches, switches);
    let config = restored.versions[1].source.read().unwrap();
    assert!(config.source.text.contains("limit: 5"));
}

#[test]
fn a_kept_directory_configuration_reads_again_from_its_texts_not_from_the_files() {
    let dir = Dir::new("files");
    let conf = dir.0.join("conf");
    fs::create_dir_all(&conf).unwrap();
    fs::write(conf.join("a.yaml"), TEXT).unwrap();
    let loaded = config::load(&conf).unwrap();
    let stored = StoredSource::of(&loaded.source, "unused");
    fs::write(conf.join("a.yaml"), TEXT.replace("limit: 3", "limit: 9")).unwrap();
    let again = stored.read().unwrap();
    assert_eq!(again.source.hash, loaded.source.hash);
    assert_eq!(again.source.text, loaded.source.text);
    assert_eq!(again.source.path.as_deref(), Some(conf.as_path()));
}

#[test]
fn a_second_open_of_a_held_directory_is_refused_naming_the_holder() {
    let dir = Dir::new("lock");
    let (_held, _) = StateDir::open(&dir.0, 10).unwrap();
    let e = StateDir::open(&dir.0, 10).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, StateError::Locked { .. }), "{text}");
    assert!(text.contains(&format!("process {}", std::process::id())), "{text}");
}

#[test]
fn a_torn_last_audit_line_is_cut_and_later_records_follow_the_whole_ones() {
    let dir = Dir::new("torn");
    let (mut state, _) = StateDir::open(&dir.0, 10).unwrap();
    state.append_audit(&record(1), &[record(1)]).unwrap();
    drop(state);
    let path = dir.0.join(AUDIT);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(br#"{"version":2,"time":"2026-12-0"#).unwrap();
    drop(file);

    let (mut state, restored) = StateDir::open(&dir.0, 10).unwrap();
    assert_eq!(restored.audit, [record(1)]);
    state.append_audit(&record(3), &[record(1), record(3)]).unwrap();
    drop(state);
    let (_state, restored) = StateDir::open(&dir.0, 10).unwrap();
    assert_eq!(restored.audit, [record(1), record(3)]);
}

#[test]
fn a_corrupt_audit_line_before_the_end_stops_the_open_naming_file_and_line() {
    let dir = Dir::new("corrupt-audit");
    let (mut state, _) = StateDir::open(&dir.0, 10).unwrap();
    state.append_audit(&record(1), &[record(1)]).unwrap();
    drop(state);
    let path = dir.0.join(AUDIT);
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str("not json\n");
    text.push_str(&serde_json::to_string(&record(2)).unwrap());
    text.push('\n');
    fs::write(&path, text).unwrap();
    let e = StateDir::open(&dir.0, 10).unwrap_err().to_string();
    assert!(e.contains("audit.jsonl:2") && e.contains("not an audit record"), "{e}");
    assert_eq!(fs::read_to_string(&path).unwrap().lines().count(), 3, "nothing is dropped");
}

#[test]
fn a_corrupt_or_misnamed_version_file_stops_the_open_and_a_stray_temporary_is_removed() {
    let dir = Dir::new("corrupt-version");
    let (mut state, _) = StateDir::open(&dir.0, 10).unwrap();
    state.write_version(&version(1, TEXT), 1).unwrap();
    drop(state);
    let versions = dir.0.join(VERSIONS);
    fs::write(versions.join("00000000000000000002.json.tmp"), "{").unwrap();
    let (state, restored) = StateDir::open(&dir.0, 10).unwrap();
    assert_eq!(restored.versions.len(), 1);
    assert!(!versions.join("00000000000000000002.json.tmp").exists());
    drop(state);

    fs::write(versions.join(version_file(1)), "{\"version\": 1").unwrap();
    let e = StateDir::open(&dir.0, 10).unwrap_err().to_string();
    assert!(e.contains("00000000000000000001.json") && e.contains("not a kept configuration version"), "{e}");

    fs::write(versions.join(version_file(1)), serde_json::to_vec(&version(7, TEXT)).unwrap()).unwrap();
    let e = StateDir::open(&dir.0, 10).unwrap_err().to_string();
    assert!(e.contains("holds version 7, not 1"), "{e}");
}

#[test]
fn versions_older_than_the_kept_ones_are_removed() {
    let dir = Dir::new("prune");
    let (mut state, _) = StateDir::open(&dir.0, 10).unwrap();
    for n in 1..=5 {
        state.write_version(&version(n, TEXT), n.saturating_sub(2).max(1)).unwrap();
    }
    drop(state);
    let (_state, restored) = StateDir::open(&dir.0, 10).unwrap();
    assert_eq!(restored.versions.iter().map(|v| v.version).collect::<Vec<_>>(), [3, 4, 5]);
}

#[test]
fn the_audit_log_is_rewritten_to_the_kept_records_once_it_holds_twice_as_many() {
    let dir = Dir::new("rewrite");
    let (mut state, _) = StateDir::open(&dir.0, 3).unwrap();
    let mut kept: Vec<AuditRecord> = Vec::new();
    for n in 1..=8 {
        kept.push(record(n));
        if kept.len() > 3 {
            kept.remove(0);
        }
        state.append_audit(&record(n), &kept).unwrap();
        let lines = fs::read_to_string(dir.0.join(AUDIT)).unwrap().lines().count();
        assert!(lines < 6, "{lines} lines after {n} records");
    }
    drop(state);
    let (_state, restored) = StateDir::open(&dir.0, 3).unwrap();
    assert_eq!(restored.audit, [record(6), record(7), record(8)]);
}

#[test]
fn no_switches_set_removes_the_file_and_an_unknown_shed_is_refused() {
    let dir = Dir::new("switches");
    let (mut state, _) = StateDir::open(&dir.0, 10).unwrap();
    state.write_switches(SwitchChange { shed: Some(Shed::Normal), ..SwitchChange::default() }).unwrap();
    assert!(dir.0.join(SWITCHES).exists());
    state.write_switches(SwitchChange::default()).unwrap();
    assert!(!dir.0.join(SWITCHES).exists());
    drop(state);
    fs::write(dir.0.join(SWITCHES), r#"{"shed": "everything"}"#).unwrap();
    let e = StateDir::open(&dir.0, 10).unwrap_err().to_string();
    assert!(e.contains("switches.json") && e.contains("unknown shed \"everything\""), "{e}");
}
