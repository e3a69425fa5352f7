//! A model's token counter: one of OpenAI's BPE encodings, or a ratio of characters per token
//! (an estimate, for the models whose encoding is not known).

use tiktoken_rs::CoreBPE;

/// How one model's text is counted.
#[derive(Clone, Copy)]
pub(crate) enum Counter {
    Bpe(&'static CoreBPE),
    /// One token per this many characters, rounded up.
    Ratio(f64),
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Counter::Bpe(_) => f.write_str("Counter::Bpe"),
            Counter::Ratio(r) => write!(f, "Counter::Ratio({r})"),
        }
    }
}

impl Counter {
    /// The tokens of `text`.
    pub(crate) fn count(&self, text: &str) -> u64 {
        match self {
            Counter::Bpe(bpe) => bpe.encode_ordinary(text).len() as u64,
            Counter::Ratio(chars_per_token) => (text.chars().count() as f64 / chars_per_token).ceil() as u64,
        }
    }

    /// Whether this is OpenAI's encoding (not an estimate).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn exact(&self) -> bool {
        matches!(self, Counter::Bpe(_))
    }
}
