//! Log lines and files for replay tests (also read by `floodgate-bench`'s `tests/replay`).

use std::path::PathBuf;

/// 2026-12-02T09:00:00Z, in seconds.
pub(crate) const T0: i64 = 1_796_202_000;

/// A fresh file path under the temporary directory.
pub(crate) fn temp(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!("floodgate-replay-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(format!("{}-{name}", N.fetch_add(1, Ordering::Relaxed)))
}

/// A combined-format line at `secs` since the epoch.
pub(crate) fn combined(addr: &str, user: &str, secs: i64, request: &str, xff: Option<&str>) -> String {
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let t = jiff::tz::TimeZone::UTC.to_datetime(jiff::Timestamp::from_second(secs).expect("time"));
    let when = format!(
        "{:02}/{}/{}:{:02}:{:02}:{:02} +0000",
        t.day(),
        MONTHS[t.month() as usize - 1],
        t.year(),
        t.hour(),
        t.minute(),
        t.second()
    );
    let xff = xff.map(|x| format!(" \"{x}\"")).unwrap_or_default();
    format!(
        "{addr} - {user} [{when}] \"{request} HTTP/1.1\" 200 512 \"-\" \"Mozilla/5.0 (X11; Linux x86_64)\"{xff}\n"
    )
}
