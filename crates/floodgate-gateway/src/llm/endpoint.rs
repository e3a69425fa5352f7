//! Which endpoint of OpenAI's API a request is, told by its path's end.

/// An endpoint of OpenAI's API, told by the request path's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `…/chat/completions`.
    Chat,
    /// `…/completions`.
    Completions,
    /// `…/responses`.
    Responses,
    /// `…/embeddings`.
    Embeddings,
}

impl Endpoint {
    /// The endpoint of `path`; `None` for one that is not metered (`/v1/models`, say), which the
    /// route proxies as any route does.
    pub(crate) fn of(path: &str) -> Option<Endpoint> {
        let path = path.trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Endpoint::Chat)
        } else if path.ends_with("/completions") {
            Some(Endpoint::Completions)
        } else if path.ends_with("/responses") {
            Some(Endpoint::Responses)
        } else if path.ends_with("/embeddings") {
            Some(Endpoint::Embeddings)
        } else {
            None
        }
    }

    /// Whether it generates text (and so has a completion allowance).
    pub(crate) fn generates(self) -> bool {
        self != Endpoint::Embeddings
    }

    /// The fields that bound what a request generates, in the order they are read.
    pub(super) fn limit_fields(self) -> &'static [&'static str] {
        match self {
            Endpoint::Chat => &["max_completion_tokens", "max_tokens"],
            Endpoint::Completions => &["max_tokens"],
            Endpoint::Responses => &["max_output_tokens"],
            Endpoint::Embeddings => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_told_by_the_path_end() {
        assert_eq!(Endpoint::of("/v1/chat/completions"), Some(Endpoint::Chat));
        assert_eq!(Endpoint::of("/openai/v1/completions"), Some(Endpoint::Completions));
        assert_eq!(Endpoint::of("/v1/responses"), Some(Endpoint::Responses));
        assert_eq!(Endpoint::of("/v1/embeddings/"), Some(Endpoint::Embeddings));
        assert_eq!(Endpoint::of("/v1/models"), None);
    }
}
