//! Access-log lines read into requests: nginx/Apache combined, Envoy's default format, and JSON
//! lines with a field mapping. A line that does not parse is an error saying why (its number is
//! the caller's), never a panic.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;
use smallvec::SmallVec;

/// One request read from a log line. Text borrows from the line (and field names from the
/// format) where it can: reading a combined or Envoy line allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// When the request started, in microseconds since the Unix epoch (UTC).
    pub time_us: i64,
    /// The client address as logged: the peer (`combined`), or none (`envoy`'s default format
    /// logs only `X-Forwarded-For`).
    pub addr: Option<Cow<'a, str>>,
    /// The logged `X-Forwarded-For`, if any.
    pub forwarded_for: Option<Cow<'a, str>>,
    /// `GET`, `POST`, …
    pub method: Cow<'a, str>,
    /// The request target as logged (path and query).
    pub path: Cow<'a, str>,
    /// The response status.
    pub status: u16,
    /// How long the request took, when the format logs it (Envoy's `%DURATION%`, a JSON field):
    /// how long a `concurrency` permit is held.
    pub duration_us: Option<u64>,
    /// Other logged fields, by name: `remote_user`, `header.referer` and `header.user-agent`
    /// (combined); `header.user-agent`, `header.x-request-id` and `header.host` (Envoy); the
    /// names a JSON-lines mapping gives (`user`, `tenant`, `header.<name>`…). Absent (`-`) ones
    /// are left out.
    pub fields: SmallVec<[(&'a str, Cow<'a, str>); 4]>,
}

impl Record<'_> {
    /// The field named `name`, if logged.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| *n == name).map(|(_, v)| &**v)
    }
}

/// Why a line could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LineError(pub String);

fn err<T>(why: impl Into<String>) -> Result<T, LineError> {
    Err(LineError(why.into()))
}

/// The log formats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
    /// "$http_referer" "$http_user_agent"`, optionally followed by `"$http_x_forwarded_for"`
    /// (nginx's `combined`, Apache's `combined`).
    Combined,
    /// Envoy's default access-log format: `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%
    /// %PROTOCOL%" %RESPONSE_CODE% … "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" …`.
    Envoy,
    /// One JSON object per line; the mapping says which field holds what.
    JsonLines(JsonFields),
}

/// Which JSON fields hold a record's parts. `time` is an RFC 3339 string or a number of seconds
/// since the epoch (fractions allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonFields {
    /// The time (default `time`).
    pub time: String,
    /// The client address (default `remote_addr`; optional in a line).
    pub addr: String,
    /// The logged `X-Forwarded-For` (default `x_forwarded_for`; optional in a line).
    pub forwarded_for: String,
    /// The method (default `method`).
    pub method: String,
    /// The request target (default `path`).
    pub path: String,
    /// The response status, a number or text (default `status`).
    pub status: String,
    /// How long the request took, in seconds (fractions allowed), as nginx's `$request_time`
    /// (default `request_time`; optional in a line).
    pub duration: String,
    /// More fields to keep, by descriptor name: `user` → `user_id`.
    pub extra: BTreeMap<String, String>,
}

impl Default for JsonFields {
    fn default() -> Self {
        JsonFields {
            time: "time".into(),
            addr: "remote_addr".into(),
            forwarded_for: "x_forwarded_for".into(),
            method: "method".into(),
            path: "path".into(),
            status: "status".into(),
            duration: "request_time".into(),
            extra: BTreeMap::new(),
        }
    }
}

impl JsonFields {
    /// Says that the JSON field `field` holds `name`: a part of the record (`time`, `addr`,
    /// `forwarded_for`, `method`, `path`, `status`, `duration`), or else a descriptor of that name.
    pub fn set(&mut self, name: &str, field: String) {
        let slot = match name {
            "time" => &mut self.time,
            "addr" => &mut self.addr,
            "forwarded_for" => &mut self.forwarded_for,
            "method" => &mut self.method,
            "path" => &mut self.path,
            "status" => &mut self.status,
            "duration" => &mut self.duration,
            descriptor => {
                self.extra.insert(descriptor.to_owned(), field);
                return;
            }
        };
        *slot = field;
    }
}

impl Format {
    /// The format of `line`, when only one format reads it.
    pub fn detect(line: &str) -> Option<Format> {
        let candidates = [Format::Combined, Format::Envoy, Format::JsonLines(JsonFields::default())];
        let mut readers = candidates.into_iter().filter(|f| f.parse(line).is_ok());
        let first = readers.next()?;
        readers.next().is_none().then_some(first)
    }

    /// Reads one line (without its line break).
    pub fn parse<'a>(&'a self, line: &'a str) -> Result<Record<'a>, LineError> {
        match self {
            Format::Combined => combined(line),
            Format::Envoy => envoy(line),
            Format::JsonLines(fields) => json_line(line, fields),
        }
    }
}

/// A cursor over a line's space-separated, bracketed and quoted fields.
struct Fields<'a> {
    rest: &'a str,
}

impl<'a> Fields<'a> {
    fn skip_spaces(&mut self) {
        let n = self.rest.bytes().take_while(|b| *b == b' ').count();
        self.rest = &self.rest[n..];
    }

    /// A bare field up to the next space.
    fn bare(&mut self, what: &str) -> Result<&'a str, LineError> {
        self.skip_spaces();
        let end = self.rest.bytes().position(|b| b == b' ').unwrap_or(self.rest.len());
        if end == 0 {
            return err(format!("missing {what}"));
        }
        let (field, rest) = self.rest.split_at(end);
        self.rest = rest;
        Ok(field)
    }

    /// A field between `open` and `close`; quoted fields may escape `"` as `\"`.
    fn enclosed(&mut self, open: char, close: char, what: &str) -> Result<&'a str, LineError> {
        self.skip_spaces();
        let Some(inner) = self.rest.strip_prefix(open) else {
            return err(format!("expected {what} starting with {open:?}"));
        };
        // Delimiters are ASCII: a byte scan finds them without decoding characters.
        let bytes = inner.as_bytes();
        let close_byte = close as u8;
        let mut i = 0;
        while let Some(at) = bytes[i..].iter().position(|b| *b == close_byte || *b == b'\\') {
            let at = i + at;
            if bytes[at] == close_byte {
                self.rest = &inner[at + 1..];
                return Ok(&inner[..at]);
            }
            // An escape: skip it and the byte it escapes.
            i = at + 2;
            if i > bytes.len() {
                break;
            }
        }
        err(format!("{what} is not closed with {close:?}"))
    }

    fn quoted(&mut self, what: &str) -> Result<&'a str, LineError> {
        self.enclosed('"', '"', what)
    }

    fn at_end(&self) -> bool {
        self.rest.trim().is_empty()
    }
}

/// `"GET /path HTTP/1.1"` → method and path.
fn request_line(request: &str) -> Result<(&str, &str), LineError> {
    let mut parts = request.split(' ');
    match (parts.next(), parts.next()) {
        (Some(method), Some(path))
            if !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase()) && !path.is_empty() =>
        {
            Ok((method, path))
        }
        _ => err(format!("request {request:?} is not \"METHOD /path PROTOCOL\"")),
    }
}

fn status(text: &str) -> Result<u16, LineError> {
    match text.parse::<u16>() {
        Ok(s) if (100..=599).contains(&s) => Ok(s),
        _ => err(format!("status {text:?} is not an HTTP status")),
    }
}

/// `-` (nginx, Envoy) means absent.
fn present(text: &str) -> Option<Cow<'_, str>> {
    (!text.is_empty() && text != "-").then_some(Cow::Borrowed(text))
}

/// Appends field `name` when logged.
fn keep<'a>(fields: &mut SmallVec<[(&'a str, Cow<'a, str>); 4]>, name: &'a str, text: &'a str) {
    if let Some(value) = present(text) {
        fields.push((name, value));
    }
}

fn combined(line: &str) -> Result<Record<'_>, LineError> {
    let mut f = Fields { rest: line };
    let addr = f.bare("client address")?;
    f.bare("ident")?;
    let user = f.bare("user")?;
    let time_us = local_time(f.enclosed('[', ']', "time")?)?;
    let (method, path) = request_line(f.quoted("request")?)?;
    let status = status(f.bare("status")?)?;
    f.bare("bytes sent")?;
    let referer = f.quoted("referer")?;
    let agent = f.quoted("user agent")?;
    let mut fields = SmallVec::new();
    keep(&mut fields, "remote_user", user);
    keep(&mut fields, "header.referer", referer);
    keep(&mut fields, "header.user-agent", agent);
    let forwarded_for = if f.at_end() { None } else { present(f.quoted("X-Forwarded-For")?) };
    if !f.at_end() {
        return err(format!("unexpected text after the last field: {:?}", f.rest.trim()));
    }
    Ok(Record {
        time_us,
        addr: present(addr),
        forwarded_for,
        method: Cow::Borrowed(method),
        path: Cow::Borrowed(path),
        status,
        duration_us: None,
        fields,
    })
}

fn envoy(line: &str) -> Result<Record<'_>, LineError> {
    let mut f = Fields { rest: line };
    let time_us = rfc3339(f.enclosed('[', ']', "start time")?)?;
    let (method, path) = request_line(f.quoted("request")?)?;
    let status = status(f.bare("response code")?)?;
    for what in ["response flags", "bytes received", "bytes sent"] {
        f.bare(what)?;
    }
    let duration = f.bare("duration")?;
    let duration_us = match duration {
        "-" => None,
        ms => Some(
            ms.parse::<u64>().map_err(|_| LineError(format!("duration {ms:?} is not milliseconds")))? * 1000,
        ),
    };
    f.bare("upstream service time")?;
    let forwarded_for = present(f.quoted("X-Forwarded-For")?);
    let mut fields = SmallVec::new();
    keep(&mut fields, "header.user-agent", f.quoted("user agent")?);
    keep(&mut fields, "header.x-request-id", f.quoted("request id")?);
    keep(&mut fields, "header.host", f.quoted("authority")?);
    f.quoted("upstream host")?;
    if !f.at_end() {
        return err(format!("unexpected text after the last field: {:?}", f.rest.trim()));
    }
    Ok(Record {
        time_us,
        addr: None,
        forwarded_for,
        method: Cow::Borrowed(method),
        path: Cow::Borrowed(path),
        status,
        duration_us,
        fields,
    })
}

fn json_line<'a>(line: &str, names: &'a JsonFields) -> Result<Record<'a>, LineError> {
    let value: Value = serde_json::from_str(line).map_err(|e| LineError(format!("not JSON: {e}")))?;
    let Value::Object(object) = value else { return err("not a JSON object") };
    let text = |name: &str| -> Option<Cow<'a, str>> {
        match object.get(name)? {
            Value::String(s) => present(s).map(|s| Cow::Owned(s.into_owned())),
            Value::Number(n) => Some(Cow::Owned(n.to_string())),
            _ => None,
        }
    };
    let required = |name: &str| text(name).ok_or_else(|| LineError(format!("no {name:?} field")));
    let time_us = match object.get(&names.time) {
        Some(Value::String(s)) => rfc3339(s)?,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(secs) if (0.0..1e11).contains(&secs) => (secs * 1e6).round() as i64,
            _ => return err(format!("time {n} is not seconds since the epoch")),
        },
        _ => return err(format!("no {:?} field with a time", names.time)),
    };
    let method = required(&names.method)?;
    let path = required(&names.path)?;
    let status = status(&required(&names.status)?)?;
    let duration_us = match object.get(&names.duration) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(secs) if (0.0..1e9).contains(&secs) => Some((secs * 1e6).round() as u64),
            _ => return err(format!("{:?} {n} is not a duration in seconds", names.duration)),
        },
        Some(Value::String(s)) => match s.parse::<f64>() {
            Ok(secs) if (0.0..1e9).contains(&secs) => Some((secs * 1e6).round() as u64),
            _ => return err(format!("{:?} {s:?} is not a duration in seconds", names.duration)),
        },
        Some(other) => return err(format!("{:?} {other} is not a duration in seconds", names.duration)),
    };
    let fields = names.extra.iter().filter_map(|(d, f)| Some((d.as_str(), text(f)?))).collect();
    Ok(Record {
        time_us,
        addr: text(&names.addr),
        forwarded_for: text(&names.forwarded_for),
        method,
        path,
        status,
        duration_us,
        fields,
    })
}

/// `10/Oct/2000:13:55:36 -0700`.
fn local_time(text: &str) -> Result<i64, LineError> {
    let bad = || LineError(format!("time {text:?} is not dd/Mon/yyyy:HH:MM:SS ±zzzz"));
    let (clock, zone) = text.split_once(' ').ok_or_else(bad)?;
    let b = clock.as_bytes();
    if b.len() != 20 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[14] != b':' || b[17] != b':' {
        return Err(bad());
    }
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = MONTHS.iter().position(|m| *m == &clock[3..6]).ok_or_else(bad)? as u32 + 1;
    let n = |r: std::ops::Range<usize>| clock[r].parse::<u32>().map_err(|_| bad());
    let (day, year, hour, minute, second) = (n(0..2)?, n(7..11)?, n(12..14)?, n(15..17)?, n(18..20)?);
    let offset = zone_offset(zone).ok_or_else(bad)?;
    civil(year, month, day, hour, minute, second, 0).ok_or_else(bad).map(|us| us - offset * 1_000_000)
}

/// `+hhmm` or `-hhmm`, in seconds.
fn zone_offset(zone: &str) -> Option<i64> {
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits = zone.get(1..).filter(|d| d.len() == 4 && d.bytes().all(|b| b.is_ascii_digit()))?;
    let (h, m): (i64, i64) = (digits[..2].parse().ok()?, digits[2..].parse().ok()?);
    (h <= 23 && m <= 59).then_some(sign * (h * 3600 + m * 60))
}

/// `2016-04-15T20:17:00.310Z` or with a `±hh:mm` offset.
fn rfc3339(text: &str) -> Result<i64, LineError> {
    let bad = || LineError(format!("time {text:?} is not an RFC 3339 time such as 2016-04-15T20:17:00.310Z"));
    if text.len() < 20 || !text.is_char_boundary(19) {
        return Err(bad());
    }
    let (clock, rest) = text.split_at(19);
    let b = clock.as_bytes();
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' || b[16] != b':'
    {
        return Err(bad());
    }
    let n = |r: std::ops::Range<usize>| clock[r].parse::<u32>().map_err(|_| bad());
    let (year, month, day, hour, minute, second) =
        (n(0..4)?, n(5..7)?, n(8..10)?, n(11..13)?, n(14..16)?, n(17..19)?);
    let (fraction, zone) = match rest.strip_prefix('.') {
        Some(r) => {
            let digits = r.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(bad());
            }
            let micros: String = r[..digits].chars().chain(std::iter::repeat('0')).take(6).collect();
            (micros.parse::<u32>().map_err(|_| bad())?, &r[digits..])
        }
        None => (0, rest),
    };
    let offset = match zone {
        "Z" | "z" => 0,
        z => zone_offset(&z.replacen(':', "", 1)).filter(|_| z.len() == 6).ok_or_else(bad)?,
    };
    civil(year, month, day, hour, minute, second, fraction).ok_or_else(bad).map(|us| us - offset * 1_000_000)
}

/// Microseconds since the epoch of a UTC civil time; `None` when it is not a real date and time.
fn civil(year: u32, month: u32, day: u32, hour: u32, minute: u32, second: u32, micros: u32) -> Option<i64> {
    let leap = (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400);
    let days_in = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&month) || day == 0 || day > days_in[month as usize - 1] {
        return None;
    }
    // A leap second (60) is read as the next second's start.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from 1970-01-01 (Howard Hinnant's days-from-civil).
    let (y, m) = (i64::from(year) - i64::from(month <= 2), i64::from(month));
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
    Some(secs * 1_000_000 + i64::from(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMBINED: &str = r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;
    const NGINX_XFF: &str = r#"10.0.0.7 - - [02/Dec/2026:06:00:01 +0000] "POST /api/orders/42?x=1 HTTP/1.1" 429 57 "-" "curl/8.5.0" "203.0.113.9, 10.0.0.7""#;
    const ENVOY: &str = r#"[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80""#;

    #[test]
    fn a_combined_line_as_apache_documents_it() {
        let r = Format::Combined.parse(COMBINED).unwrap();
        assert_eq!(
            (r.addr.as_deref(), &*r.method, &*r.path, r.status),
            (Some("127.0.0.1"), "GET", "/apache_pb.gif", 200)
        );
        // 2000-10-10T20:55:36Z
        assert_eq!(r.time_us, 971_211_336_000_000);
        assert_eq!(r.forwarded_for, None);
        assert_eq!(r.field("remote_user"), Some("frank"));
        assert_eq!(r.field("header.user-agent"), Some("Mozilla/4.08 [en] (Win98; I ;Nav)"));
        assert_eq!(r.field("header.referer"), Some("http://www.example.com/start.html"));
    }

    #[test]
    fn an_nginx_line_with_x_forwarded_for_appended() {
        let r = Format::Combined.parse(NGINX_XFF).unwrap();
        assert_eq!(r.forwarded_for.as_deref(), Some("203.0.113.9, 10.0.0.7"));
        assert_eq!((&*r.method, &*r.path, r.status), ("POST", "/api/orders/42?x=1", 429));
        assert_eq!(r.time_us, civil(2026, 12, 2, 6, 0, 1, 0).unwrap());
    }

    #[test]
    fn an_envoy_line_in_its_default_format() {
        let r = Format::Envoy.parse(ENVOY).unwrap();
        assert_eq!((&*r.method, &*r.path, r.status), ("POST", "/api/v1/locations", 204));
        assert_eq!(r.forwarded_for.as_deref(), Some("10.0.35.28"));
        assert_eq!(r.addr, None);
        assert_eq!(r.time_us, 1_460_751_420_310_000);
        assert_eq!(r.duration_us, Some(226_000));
    }

    #[test]
    fn json_lines_by_their_field_mapping() {
        let mut fields = JsonFields::default();
        fields.extra.insert("user".into(), "uid".into());
        let line = r#"{"time": 1700000000.25, "remote_addr": "192.0.2.1", "method": "GET", "path": "/a", "status": 200, "uid": "u-7", "request_time": "0.012"}"#;
        let format = Format::JsonLines(fields);
        let r = format.parse(line).unwrap();
        assert_eq!(r.time_us, 1_700_000_000_250_000);
        assert_eq!(r.duration_us, Some(12_000));
        assert_eq!(r.field("user"), Some("u-7"));
        let rfc = r#"{"time": "2026-12-02T06:00:00.5+01:00", "method": "GET", "path": "/", "status": "404"}"#;
        let r = format.parse(rfc).unwrap();
        assert_eq!(r.time_us, civil(2026, 12, 2, 5, 0, 0, 500_000).unwrap());
        assert_eq!((r.status, r.addr), (404, None));
    }

    #[test]
    fn the_format_is_detected_when_only_one_reads_the_line() {
        assert_eq!(Format::detect(COMBINED), Some(Format::Combined));
        assert_eq!(Format::detect(ENVOY), Some(Format::Envoy));
        assert!(matches!(
            Format::detect(r#"{"time": 1, "method": "GET", "path": "/", "status": 200}"#),
            Some(Format::JsonLines(_))
        ));
        assert_eq!(Format::detect("hello"), None);
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        let cases: &[(Format, &str, &str)] = &[
            (Format::Combined, "", "missing client address"),
            (
                Format::Combined,
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36] "GET / HTTP/1.1" 200 1 "-" "-""#,
                "is not dd/Mon/yyyy",
            ),
            (
                Format::Combined,
                r#"1.2.3.4 - - [31/Feb/2000:13:55:36 +0000] "GET / HTTP/1.1" 200 1 "-" "-""#,
                "is not dd/Mon/yyyy",
            ),
            (
                Format::Combined,
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 +0000] "get" 200 1 "-" "-""#,
                "not \"METHOD /path PROTOCOL\"",
            ),
            (
                Format::Combined,
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 +0000] "GET / HTTP/1.1" 999 1 "-" "-""#,
                "not an HTTP status",
            ),
            (
                Format::Combined,
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 +0000] "GET / HTTP/1.1" 200 1 "-" "unclosed"#,
                "not closed",
            ),
            (Format::Envoy, r#"[2016-04-15 20:17] "GET / HTTP/1.1" 200"#, "RFC 3339"),
            (Format::JsonLines(JsonFields::default()), "[1]", "not a JSON object"),
            (
                Format::JsonLines(JsonFields::default()),
                r#"{"time": 1, "method": "GET", "status": 200}"#,
                "no \"path\" field",
            ),
        ];
        for (format, line, words) in cases {
            let e = format.parse(line).expect_err(line);
            assert!(e.0.contains(words), "{line:?}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn civil_times_are_those_of_a_calendar_library(secs in 0i64..253_402_300_800, micros in 0u32..1_000_000) {
            let t = jiff::tz::TimeZone::UTC.to_datetime(jiff::Timestamp::from_second(secs).unwrap());
            let ours = civil(
                t.year() as u32, t.month() as u32, t.day() as u32,
                t.hour() as u32, t.minute() as u32, t.second() as u32, micros,
            );
            proptest::prop_assert_eq!(ours, Some(secs * 1_000_000 + i64::from(micros)));
        }

        #[test]
        fn any_line_is_read_or_refused_without_a_panic(line in ".{0,200}") {
            for format in [Format::Combined, Format::Envoy, Format::JsonLines(JsonFields::default())] {
                let _ = format.parse(&line);
            }
            let _ = Format::detect(&line);
        }

        #[test]
        fn any_near_miss_of_a_real_line_is_read_or_refused_without_a_panic(cut in 0usize..400, byte in 0u8..128) {
            for (format, line) in [(Format::Combined, NGINX_XFF), (Format::Envoy, ENVOY)] {
                let mut bytes = line.as_bytes().to_vec();
                let at = cut % bytes.len();
                bytes[at] = byte;
                let text = String::from_utf8_lossy(&bytes);
                let _ = format.parse(&text);
                let _ = format.parse(&line[..line.len().min(cut)]);
            }
        }
    }
}
