//! The one duration grammar, for configuration files and for `floodgate-bench`'s flags alike:
//! `250us`, `500ms`, `60s`, `1m`, `1h`, `1d`, and combinations such as `1h30m` or `1s500ms`
//! (whole numbers, units from the largest to the smallest, each at most once; `µs` is `us`). A
//! number without a unit is refused: `window: 60` could mean seconds or milliseconds, and guessing
//! wrong is a limit off by a factor of a thousand. So is a fraction (`1.5s`: write `1s500ms`). Each
//! number has at most [`MAX_DIGITS`] digits for its unit (leading zeros aside), so that no duration
//! overflows.
//!
//! [`positive_pattern`] is the grammar of a duration above 0 as a regular expression, and
//! [`parse_clock`] / [`clock_pattern`] a duration written as a clock reads, up to a bound: what an
//! API states in its document and checks alike.
//!
//! ```
//! use std::time::Duration;
//! use floodgate_config::duration;
//! assert_eq!(duration::parse("1h30m"), Ok(Duration::from_secs(5400)));
//! assert!(duration::parse("60").unwrap_err().contains("\"60s\""));
//! assert_eq!(duration::format(Duration::from_millis(1500)), "1s500ms");
//! let day = Duration::from_secs(86_400);
//! assert_eq!(duration::parse_clock("90m", day), Ok(Duration::from_secs(5400)));
//! assert!(duration::parse_clock("1h90m", day).is_err() && duration::parse_clock("25h", day).is_err());
//! ```

use std::time::Duration;

use crate::pattern::{SPACE, range};

/// The units, largest first, with their length in microseconds.
const UNITS: [(&str, u64); 6] = [
    ("d", 86_400_000_000),
    ("h", 3_600_000_000),
    ("m", 60_000_000),
    ("s", 1_000_000),
    ("ms", 1_000),
    ("us", 1),
];

/// The most digits each unit's number may have, leading zeros aside, in [`UNITS`] order: at
/// most 99 999 999 days, 999 999 999 hours, … — together under 2^64 µs (about 15.8 × 10^18), so
/// that no duration overflows.
pub const MAX_DIGITS: [usize; 6] = [8, 9, 10, 12, 15, 18];

/// What a duration looks like, for messages.
pub const SYNTAX_HINT: &str =
    "expected a whole number with a unit: us, ms, s, m, h or d (e.g. \"500ms\", \"60s\", \"1h30m\")";

/// Parses `text`; the error says what is wrong, without the text itself.
pub fn parse(text: &str) -> Result<Duration, String> {
    let total_us = components(text)?
        .into_iter()
        .try_fold(0u64, |total, (unit, n)| n.checked_mul(UNITS[unit].1).and_then(|us| total.checked_add(us)));
    // Unreachable with MAX_DIGITS; kept so that a change to them cannot overflow silently.
    total_us.map(Duration::from_micros).ok_or_else(|| "the duration is too large".to_owned())
}

/// `text`'s numbers, each with its unit's index in [`UNITS`], in the order written.
fn components(text: &str) -> Result<Vec<(usize, u64)>, String> {
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
    let mut written = Vec::new();
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
        if number.trim_start_matches('0').len() > MAX_DIGITS[index] {
            return Err(format!(
                "{number}{}: at most {} digits of {}",
                UNITS[index].0, MAX_DIGITS[index], UNITS[index].0
            ));
        }
        let value: u64 = number.parse().map_err(|_| "the number is too large".to_owned())?;
        written.push((index, value));
        rest = after;
    }
    Ok(written)
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

/// A unit as written: `us` may be `µs`.
fn unit_pattern(index: usize) -> &'static str {
    match UNITS[index].0 {
        "us" => "(us|µs)",
        unit => unit,
    }
}

/// Any number of at most `digits` digits, leading zeros aside.
fn any_number(digits: usize) -> String {
    format!("0*[0-9]{{1,{digits}}}")
}

/// What [`parse`] reads and is longer than 0, as a regular expression (ECMA-262, as JSON Schema's
/// `pattern`): units largest first, each at most once, at most [`MAX_DIGITS`] digits each, at
/// least one number not 0.
pub fn positive_pattern() -> String {
    // One alternative per unit, the first that is not 0: zeros before it, anything after it.
    let alternatives: Vec<String> = (0..UNITS.len())
        .map(|first| {
            let mut alternative = String::new();
            for unit in 0..first {
                alternative.push_str(&format!("(0+{})?", unit_pattern(unit)));
            }
            let rest = MAX_DIGITS[first] - 1;
            alternative.push_str(&format!("0*[1-9][0-9]{{0,{rest}}}{}", unit_pattern(first)));
            for (unit, digits) in MAX_DIGITS.iter().enumerate().skip(first + 1) {
                alternative.push_str(&format!("({}{})?", any_number(*digits), unit_pattern(unit)));
            }
            alternative
        })
        .collect();
    format!("^{SPACE}({}){SPACE}$", alternatives.join("|"))
}

/// Each unit's count in the next larger one (`h` in a day, `m` in an hour, …): the most a number
/// written after the first may be, less one.
const CLOCK: [u64; 6] = [u64::MAX, 24, 60, 60, 1000, 1000];

/// Parses `text` as a duration of at most `max` written as a clock reads it: the first number
/// from 1 to `max` in its unit, each number after it below its unit's count in the next larger
/// one (`1h30m`, `90m`, `1d`; not `1h90m`, `0h30m`). `max` is a whole number of days.
pub fn parse_clock(text: &str, max: Duration) -> Result<Duration, String> {
    let written = components(text)?;
    let within = |(unit, n): &(usize, u64)| *n < CLOCK[*unit];
    let first = written.first().map_or(0, |(_, n)| *n);
    if first == 0 || !written.iter().skip(1).all(within) {
        return Err("not as a clock reads: the first number above 0, each after it below the next larger \
                    unit (\"1h30m\" or \"90m\", not \"1h90m\" or \"0h30m\")"
            .to_owned());
    }
    let d = parse(text)?;
    if d > max {
        return Err(format!("longer than {}", format(max)));
    }
    Ok(d)
}

/// What [`parse_clock`] reads for `max` (a whole number of days), as a regular expression.
pub fn clock_pattern(max: Duration) -> String {
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    debug_assert!(max_us.is_multiple_of(UNITS[0].1), "{max:?} is not a whole number of days");
    let alternatives: Vec<String> = (0..UNITS.len())
        .filter_map(|first| {
            let bound = max_us / UNITS[first].1;
            // At the bound, only zeros after it; below it, any clock after it.
            let mut at = format!("0*{bound}{}", unit_pattern(first));
            let mut below = (bound > 1).then(|| format!("0*{}{}", range(bound - 1), unit_pattern(first)));
            for (unit, count) in CLOCK.iter().enumerate().skip(first + 1) {
                at.push_str(&format!("(0+{})?", unit_pattern(unit)));
                if let Some(below) = &mut below {
                    let clock = format!("(0+|0*{})", range(count - 1));
                    below.push_str(&format!("({clock}{})?", unit_pattern(unit)));
                }
            }
            (bound >= 1).then(|| below.map_or_else(|| at.clone(), |below| format!("{below}|{at}")))
        })
        .collect();
    format!("^{SPACE}({}){SPACE}$", alternatives.join("|"))
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

    #[test]
    fn refuses_more_digits_than_a_unit_may_have() {
        assert_eq!(parse("99999999d"), Ok(Duration::from_secs(99_999_999 * 86_400)));
        assert!(parse("100000000d").unwrap_err().contains("at most 8 digits of d"));
        assert_eq!(parse("000000000001d"), Ok(Duration::from_secs(86_400)), "leading zeros aside");
        let longest: String = UNITS
            .iter()
            .zip(MAX_DIGITS)
            .map(|((unit, _), digits)| format!("{}{unit}", "9".repeat(digits)))
            .collect();
        assert!(parse(&longest).is_ok(), "{longest}");
    }

    #[test]
    fn a_clock_duration_is_the_first_number_then_numbers_below_the_next_unit() {
        let day = Duration::from_secs(86_400);
        for (text, secs) in [
            ("1d", 86_400),
            ("24h", 86_400),
            ("24h0m0s", 86_400),
            ("1440m", 86_400),
            ("86400s", 86_400),
            ("90m", 5_400),
            ("1h30m", 5_400),
            ("23h59m59s", 86_399),
            (" 5m ", 300),
            ("05m", 300),
        ] {
            assert_eq!(parse_clock(text, day), Ok(Duration::from_secs(secs)), "{text}");
        }
        for text in ["1h90m", "0h30m", "0s", "25h", "24h1s", "1d1h", "1441m", "2d", "1h24h", ""] {
            assert!(parse_clock(text, day).is_err(), "{text:?} was accepted");
        }
    }

    /// `s` made of what durations are made of, so that generated text is often one.
    fn duration_like() -> impl Strategy<Value = String> {
        let pieces = prop_oneof![
            "[0-9]{1,3}",
            "0{1,12}",
            "[1-9][0-9]{5,19}",
            Just("1".to_owned()),
            Just("24".to_owned()),
            Just("59".to_owned()),
            Just("60".to_owned()),
            Just("999".to_owned()),
            Just("1440".to_owned()),
            Just("86400".to_owned()),
            prop::sample::select(vec![
                "d", "h", "m", "s", "ms", "us", "µs", "µ", "x", " ", "\t", "\u{a0}", "\u{1c}", "\u{feff}",
                ".", "+"
            ])
            .prop_map(str::to_owned),
        ];
        prop::collection::vec(pieces, 0..8).prop_map(|pieces| pieces.concat())
    }

    static POSITIVE: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(&positive_pattern()).unwrap());
    static CLOCK_DAY: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(&clock_pattern(Duration::from_secs(86_400))).unwrap());

    #[test]
    fn the_patterns_admit_the_documented_examples() {
        for text in ["250us", "250µs", "500ms", "60s", "1m", "1h", "1d", "1h30m", "1s500ms", "0h1s", " 5m\t"]
        {
            assert!(POSITIVE.is_match(text), "{text:?}");
        }
        for text in ["0s", "0h0m", "60", "1.5s", "", "1h 30m", "100000000d"] {
            assert!(!POSITIVE.is_match(text), "{text:?}");
        }
        for text in ["1d", "24h", "90m", "1h30m", "23h59m59s999ms999us", "86400000000us"] {
            assert!(CLOCK_DAY.is_match(text), "{text:?}");
        }
        for text in ["1h90m", "0h30m", "25h", "24h1us", "1d0h1m"] {
            assert!(!CLOCK_DAY.is_match(text), "{text:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        /// The pattern a document states admits exactly what `parse` reads as longer than 0.
        #[test]
        fn the_positive_pattern_is_the_parser(text in duration_like()) {
            let parsed = parse(&text).is_ok_and(|d| !d.is_zero());
            prop_assert_eq!(POSITIVE.is_match(&text), parsed, "{:?}", text);
        }

        /// The clock pattern admits exactly what `parse_clock` reads.
        #[test]
        fn the_clock_pattern_is_the_parser(text in duration_like()) {
            let day = Duration::from_secs(86_400);
            prop_assert_eq!(CLOCK_DAY.is_match(&text), parse_clock(&text, day).is_ok(), "{:?}", text);
        }
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
