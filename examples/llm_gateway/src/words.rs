//! The words a completion is made of: each one token in both o200k and cl100k (a test checks), so
//! that a completion of N words is N tokens whoever counts them.

/// The words, each with its leading space.
pub const WORDS: [&str; 48] = [
    " river", " stone", " light", " water", " house", " green", " small", " world", " time", " people",
    " music", " garden", " city", " road", " morning", " night", " cloud", " tree", " bird", " fire",
    " wind", " paper", " story", " north", " south", " bridge", " window", " table", " letter", " summer",
    " winter", " silver", " golden", " quiet", " bright", " open", " dark", " warm", " cold", " field",
    " lake", " market", " song", " door", " hill", " sea", " snow", " star",
];

/// The `i`-th word of the completion numbered `seed`: consecutive words always differ, and two
/// completions with different seeds start apart.
pub(crate) fn word(seed: u64, i: u64) -> &'static str {
    let n = WORDS.len() as u64;
    // 7 and 48 are coprime: a walk of step 7 visits every word before it repeats one.
    WORDS[((seed.wrapping_mul(13) + i * 7) % n) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Encoding;

    #[test]
    fn every_word_is_one_token_in_both_encodings() {
        for w in WORDS {
            assert_eq!(Encoding::O200k.count(w), 1, "{w:?} in o200k");
            assert_eq!(Encoding::Cl100k.count(w), 1, "{w:?} in cl100k");
        }
    }

    #[test]
    fn consecutive_words_differ() {
        for seed in 0..10 {
            for i in 0..200 {
                assert_ne!(word(seed, i), word(seed, i + 1));
            }
        }
    }
}
