//! The text grammars of configuration values as regular expressions (ECMA-262, as JSON Schema's
//! `pattern` reads them): what an API that reads a value with this crate's parsers states in its
//! document. Each is tested against the parser it describes; [`duration`](crate::duration) has
//! its own.
//!
//! ```
//! let rate = regex::Regex::new(&floodgate_config::pattern::rate()).unwrap();
//! assert!(rate.is_match("10/s") && rate.is_match("600/minute") && !rate.is_match("2000/ms"));
//! ```

/// The whitespace `str::trim` removes (`char::is_whitespace`), any number of it, as a class.
pub(crate) const SPACE: &str =
    "[\\t\\n\\u000B\\f\\r \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]*";

/// The whole numbers from 1 to `max` (at least 1), without leading zeros.
pub(crate) fn range(max: u64) -> String {
    let digits = max.to_string();
    let len = digits.len();
    // `[lo-hi]`, or the digit alone.
    let class = |lo: u8, hi: u8| if lo == hi { lo.to_string() } else { format!("[{lo}-{hi}]") };
    // Exactly `n` digits, any.
    let any = |n: usize| match n {
        0 => String::new(),
        1 => "[0-9]".to_owned(),
        n => format!("[0-9]{{{n}}}"),
    };
    let mut alternatives = Vec::new();
    // Fewer digits than `max`: any, not starting with 0.
    match len {
        0 | 1 => {}
        2 => alternatives.push("[1-9]".to_owned()),
        _ => alternatives.push(format!("[1-9][0-9]{{0,{}}}", len - 2)),
    }
    // As many digits: `max`'s first i digits, a smaller one (not 0 first), then any.
    for (i, digit) in digits.bytes().map(|b| b - b'0').enumerate() {
        let low = u8::from(i == 0);
        if digit > low {
            alternatives.push(format!("{}{}{}", &digits[..i], class(low, digit - 1), any(len - i - 1)));
        }
    }
    alternatives.push(digits.clone());
    format!("({})", alternatives.join("|"))
}

/// The units of a rate with their spellings and their length in microseconds, as
/// [`Rate`](floodgate_core::Rate)'s parser reads them.
const RATE_UNITS: [(&str, u64); 5] = [
    ("ms", 1_000),
    ("s|sec|second", 1_000_000),
    ("m|min|minute", 60_000_000),
    ("h|hour", 3_600_000_000),
    ("d|day", 86_400_000_000),
];

/// A rate, `N/unit`, as the configuration reads it: `N` from 1 to one per microsecond of the unit
/// (`1000/ms` at most), `+` and leading zeros allowed, whitespace around each part.
pub fn rate() -> String {
    let alternatives: Vec<String> = RATE_UNITS
        .iter()
        .map(|(spellings, us)| format!("{}{SPACE}/{SPACE}({spellings})", range(*us)))
        .collect();
    format!("^{SPACE}\\+?0*({}){SPACE}$", alternatives.join("|"))
}

/// A weekday as a week's anchor names it: its name or its first three letters, in any case.
pub fn weekday() -> String {
    let any_case = |text: &str| -> String {
        text.chars().map(|c| format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())).collect()
    };
    let names: Vec<String> = floodgate_core::calendar::weekday_names()
        .map(|name| format!("{}({})?", any_case(&name[..3]), any_case(&name[3..])))
        .collect();
    format!("^({})$", names.join("|"))
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use floodgate_core::Rate;
    use floodgate_core::calendar::Period;
    use jiff::civil::Weekday;
    use proptest::prelude::*;

    use super::*;

    static RATE: LazyLock<regex::Regex> = LazyLock::new(|| regex::Regex::new(&rate()).unwrap());
    static WEEKDAY: LazyLock<regex::Regex> = LazyLock::new(|| regex::Regex::new(&weekday()).unwrap());

    #[test]
    fn ranges_are_the_numbers_up_to_their_maximum() {
        for max in [1, 9, 10, 23, 59, 60, 99, 100, 999, 1000, 1440, 86_400, 3_600_000_000] {
            let range = regex::Regex::new(&format!("^{}$", range(max))).unwrap();
            for n in (1..=max.min(20_000)).chain([max.saturating_sub(1).max(1), max]) {
                assert!(range.is_match(&n.to_string()), "{n} ≤ {max}");
            }
            for n in [0, max + 1, max * 10, max + 1000] {
                assert!(!range.is_match(&n.to_string()), "{n} > {max}");
            }
            assert!(!range.is_match("01"), "no leading zero");
        }
    }

    #[test]
    fn the_patterns_admit_the_documented_examples() {
        for text in
            ["10/s", "600/m", "5000/h", "1/d", "1000/ms", "2/second", " +02 / min ", "3600000000/hour"]
        {
            assert!(RATE.is_match(text), "{text:?}");
        }
        for text in ["0/s", "1001/ms", "10/fortnight", "ten/s", "10", "/s", "10/s/s", "+ 1/s", "3600000001/h"]
        {
            assert!(!RATE.is_match(text), "{text:?}");
        }
        for text in ["monday", "Mon", "SUNDAY", "wEd"] {
            assert!(WEEKDAY.is_match(text), "{text:?}");
        }
        for text in ["mo", "mond", "1", " monday", "monday "] {
            assert!(!WEEKDAY.is_match(text), "{text:?}");
        }
    }

    fn rate_like() -> impl Strategy<Value = String> {
        let pieces = prop_oneof![
            "[0-9]{1,3}",
            "[1-9][0-9]{3,11}",
            Just("1000".to_owned()),
            Just("1000000".to_owned()),
            Just("86400000000".to_owned()),
            Just("86400000001".to_owned()),
            prop::sample::select(vec![
                "/", "ms", "s", "sec", "second", "m", "min", "minute", "h", "hour", "d", "day", " ",
                "\u{a0}", "\u{1c}", "+", "0", "-", "x"
            ])
            .prop_map(str::to_owned),
        ];
        prop::collection::vec(pieces, 0..6).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        #[test]
        fn the_rate_pattern_is_the_parser(text in rate_like()) {
            prop_assert_eq!(RATE.is_match(&text), text.parse::<Rate>().is_ok(), "{:?}", text);
        }

        #[test]
        fn the_weekday_pattern_is_the_parser(text in "[a-zA-Z ]{0,10}|(mon|tue|wed|thu|fri|sat|sun)[a-z]{0,6}") {
            let week = Period::Week { starts_on: Weekday::Monday };
            prop_assert_eq!(WEEKDAY.is_match(&text), week.anchored(&text).is_ok(), "{:?}", text);
        }
    }
}
