//! Which endpoint of a model API a request is (told by its path's end, in its route's dialect:
//! [`Dialect::endpoint`](super::dialect::Dialect::endpoint)), and what each reads.

/// A metered endpoint of a model API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// OpenAI's `…/chat/completions`.
    Chat,
    /// OpenAI's `…/completions`.
    Completions,
    /// OpenAI's `…/responses`.
    Responses,
    /// OpenAI's `…/embeddings`.
    Embeddings,
    /// Anthropic's `…/messages`.
    Messages,
}

impl Endpoint {
    /// Whether it generates text (and so has a completion allowance).
    pub(crate) fn generates(self) -> bool {
        self != Endpoint::Embeddings
    }

    /// The fields that bound what a request generates, in the order they are read.
    pub(super) fn limit_fields(self) -> &'static [&'static str] {
        match self {
            Endpoint::Chat => &["max_completion_tokens", "max_tokens"],
            Endpoint::Completions | Endpoint::Messages => &["max_tokens"],
            Endpoint::Responses => &["max_output_tokens"],
            Endpoint::Embeddings => &[],
        }
    }

    /// Whether a request must name its limit (Anthropic's `max_tokens` is required: a request
    /// without it is a 400, as the provider answers).
    pub(super) fn limit_required(self) -> bool {
        self == Endpoint::Messages
    }
}
