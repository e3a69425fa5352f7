//! The one duration grammar, for configuration files and for `floodgate-bench`'s flags alike:
//! `250us`, `500ms`, `60s`, `1m`, `1h`, `1d`, and combinations such as `1h30m` or `1s500ms`
//! (whole numbers, units from the largest to the smallest, each at most once; `µs` is `us`). A
//! number without a unit is refused: `window: 60` could mean seconds or milliseconds, and guessing
//! wrong is a limit off by a factor of a thousand. So is a fraction (`1.5s`: write `1s500ms`).
//!
//! ```
//! use std::time::Duration;
//! use floodgate_config::duration;
//! assert_eq!(duration::parse("1h30m"), Ok(Duration::from_secs(5400)));
//! assert!(duration::parse("60").unwrap_err().contains("\"60s\""));
//! assert_eq!(duration::format(Duration::from_millis(1500)), "1s500ms");
//! ```

use std::time::Duration;

/// The units, largest first, with their length in microseconds.
const UNITS: [(&str, u64); 6] = [
    ("d", 86_400_000_000),
    ("h", 3_600_000_000),
    ("m", 60_000_000),
    ("s", 1_000_000),
    ("ms", 1_000),
    ("us", 1),
];

/// What a duration looks like, for messages.
pub const SYNTAX_HINT: &str =
    "expected a whole number with a unit: us, ms, s, m, h or d (e.g. \"500ms\", \"60s\", \"1h30m\")";

/// Parses `text`; the error says what is wrong, without the text itself.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SYNTAX_HINT.to_owned());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "a unit is missing: write \"{text}s\" for seconds or \"{text}ms\" for milliseconds"
        ));
    }
    if let Some((whole, _)) = text.split_once('.')
        && !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("{text:?} is a fraction: write whole units, e.g. \"1s500ms\" for 1.5 seconds"));
    }
    let mut rest = text;
    let mut total_us: u64 = 0;
    // Index into UNITS of the last unit used: units must go from larger to smaller, once each.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(SYNTAX_HINT.to_owned());
        }
        let (number, after) = rest.split_at(digits);
        let letters = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(letters);
        let (unit, after) = match after.strip_prefix('µ').filter(|_| unit.is_empty()) {
            Some(after) if after.starts_with('s') => ("us", &after[1..]),
            _ => (unit, after),
        };
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(if unit.is_empty() {
                format!("a unit is missing after {number}: {SYNTAX_HINT}")
            } else {
                format!("unknown unit {unit:?}: {SYNTAX_HINT}")
            });
        };
        if last.is_some_and(|l| l >= index) {
            return Err("units must go from the largest to the smallest, each at most once (e.g. \"1h30m\")"
                .to_owned());
        }
        last = Some(index);
        let value: u64 = number.parse().map_err(|_| "the number is too large".to_owned())?;
        total_us = value
            .checked_mul(UNITS[index].1)
            .and_then(|us| total_us.checked_add(us))
            .ok_or_else(|| "the duration is too large".to_owned())?;
        rest = after;
    }
    Ok(Duration::from_micros(total_us))
}

/// `d` written back the way [`parse`] reads it (`1h30m`, `500ms`), to the microsecond, for
/// fingerprints, reports and docs.
pub fn format(d: Duration) -> String {
    let mut us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    if us == 0 {
        return "0ms".to_owned();
    }
    let mut out = String::new();
    for (unit, len) in UNITS {
        if us >= len {
            out.push_str(&(us / len).to_string());
            out.push_str(unit);
            us %= len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_the_documented_units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1d2h3m4s5ms"), Ok(Duration::from_millis(93_784_005)));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("1ms5us"), Ok(Duration::from_micros(1005)));
    }

    #[test]
    fn refuses_fractions_with_the_way_to_write_them() {
        let err = parse("1.5s").unwrap_err();
        assert!(err.contains("\"1s500ms\""), "{err}");
    }

    #[test]
    fn refuses_numbers_without_units() {
        let err = parse("60").unwrap_err();
        assert!(err.contains("\"60s\""), "{err}");
    }

    #[test]
    fn refuses_garbage() {
        for text in [
            "",
            "s",
            "1x",
            "1.5s",
            "-1s",
            "1s1s",
            "1s1h",
            "1 h",
            "99999999999999999999d",
            "9999999999999999d",
        ] {
            assert!(parse(text).is_err(), "{text:?} was accepted");
        }
    }

    #[test]
    fn formats_back() {
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::from_millis(5)), "5ms");
        assert_eq!(format(Duration::ZERO), "0ms");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(us in 1u64..10_000_000_000_000_000) {
            let d = Duration::from_micros(us);
            prop_assert_eq!(parse(&format(d)), Ok(d));
        }

        #[test]
        fn never_panics(text in ".{0,24}") {
            let _ = parse(&text);
        }
    }
}
