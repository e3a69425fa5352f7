//! The dialect an LLM route speaks (`llm.api`), and what differs between them: which paths are
//! metered, and the shape of the errors the route answers itself. The rest of a dialect's wire
//! format — its limit fields, usage and stream events — belongs to its endpoints
//! ([`Endpoint`]: OpenAI's four, Anthropic's `messages`), each of which has one dialect.
//!
//! | | OpenAI (`api: openai`) | Anthropic (`api: anthropic`) |
//! |---|---|---|
//! | metered | `…/chat/completions`, `…/completions`, `…/responses`, `…/embeddings` | `…/messages` |
//! | error | `{"error": {"message", "type", "param", "code"}}` | `{"type": "error", "error": {"type", "message"}}` |
//! | 429 | `type`: the dimension, `code: rate_limit_exceeded` | `type: rate_limit_error` |

use floodgate_config::gateway::LlmApi;
use serde_json::{Value, json};

use super::endpoint::Endpoint;

/// The model API an LLM route speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// OpenAI's API, and every server compatible with it.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

/// What went wrong, for an error body in a dialect's format.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fault<'a> {
    /// The request cannot be read or never fits: 400 (`param` the field at fault, `code` OpenAI's).
    Invalid { param: Option<&'a str>, code: Option<&'a str> },
    /// The body is larger than the route reads: 413.
    TooLarge,
    /// The limits could not be decided: 503.
    Unavailable,
    /// A budget ran out: 429, `dimension` saying which (`tokens`, `requests`, the spend's).
    Limited { dimension: &'a str },
}

impl Dialect {
    /// The dialect of a route's `api`.
    pub(crate) fn of(api: LlmApi) -> Dialect {
        match api {
            LlmApi::OpenAi => Dialect::OpenAi,
            LlmApi::Anthropic => Dialect::Anthropic,
        }
    }

    /// The metered endpoint of `path`, told by its end; `None` for one that is not metered
    /// (`/v1/models`, Anthropic's `/v1/messages/count_tokens`), which the route proxies as any
    /// route does.
    pub(crate) fn endpoint(self, path: &str) -> Option<Endpoint> {
        let path = path.trim_end_matches('/');
        match self {
            Dialect::OpenAi if path.ends_with("/chat/completions") => Some(Endpoint::Chat),
            Dialect::OpenAi if path.ends_with("/completions") => Some(Endpoint::Completions),
            Dialect::OpenAi if path.ends_with("/responses") => Some(Endpoint::Responses),
            Dialect::OpenAi if path.ends_with("/embeddings") => Some(Endpoint::Embeddings),
            Dialect::Anthropic if path.ends_with("/messages") => Some(Endpoint::Messages),
            _ => None,
        }
    }

    /// An error body saying `message`, in this dialect's format.
    pub(crate) fn error(self, message: &str, fault: Fault<'_>) -> Value {
        match self {
            Dialect::OpenAi => {
                let (kind, param, code) = match fault {
                    Fault::Invalid { param, code } => ("invalid_request_error", param, code),
                    Fault::TooLarge => ("invalid_request_error", None, None),
                    Fault::Unavailable => ("server_error", None, None),
                    Fault::Limited { dimension } => (dimension, None, Some("rate_limit_exceeded")),
                };
                json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
            }
            Dialect::Anthropic => {
                let kind = match fault {
                    Fault::Invalid { .. } => "invalid_request_error",
                    Fault::TooLarge => "request_too_large",
                    Fault::Unavailable => "api_error",
                    Fault::Limited { .. } => "rate_limit_error",
                };
                json!({"type": "error", "error": {"type": kind, "message": message}})
            }
        }
    }
}

// Here rather than in endpoint.rs, so that the dialect knows its endpoints and not the reverse.
impl Endpoint {
    /// The dialect it belongs to (its error format).
    pub(crate) fn dialect(self) -> Dialect {
        match self {
            Endpoint::Messages => Dialect::Anthropic,
            Endpoint::Chat | Endpoint::Completions | Endpoint::Responses | Endpoint::Embeddings => {
                Dialect::OpenAi
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_told_by_the_path_end_in_each_dialect() {
        let openai = Dialect::OpenAi;
        assert_eq!(openai.endpoint("/v1/chat/completions"), Some(Endpoint::Chat));
        assert_eq!(openai.endpoint("/openai/v1/completions"), Some(Endpoint::Completions));
        assert_eq!(openai.endpoint("/v1/responses"), Some(Endpoint::Responses));
        assert_eq!(openai.endpoint("/v1/embeddings/"), Some(Endpoint::Embeddings));
        assert_eq!(openai.endpoint("/v1/models"), None);
        assert_eq!(openai.endpoint("/v1/messages"), None);
        let anthropic = Dialect::Anthropic;
        assert_eq!(anthropic.endpoint("/v1/messages"), Some(Endpoint::Messages));
        assert_eq!(anthropic.endpoint("/anthropic/v1/messages/"), Some(Endpoint::Messages));
        assert_eq!(anthropic.endpoint("/v1/messages/count_tokens"), None, "proxied, not metered");
        assert_eq!(anthropic.endpoint("/v1/chat/completions"), None);
        for endpoint in [Endpoint::Chat, Endpoint::Completions, Endpoint::Responses, Endpoint::Embeddings] {
            assert_eq!(endpoint.dialect(), Dialect::OpenAi);
        }
        assert_eq!(Endpoint::Messages.dialect(), Dialect::Anthropic);
    }

    #[test]
    fn errors_take_each_dialects_shape() {
        let limited = Fault::Limited { dimension: "tokens" };
        assert_eq!(
            Dialect::OpenAi.error("no", limited),
            json!({"error": {"message": "no", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}})
        );
        assert_eq!(
            Dialect::Anthropic.error("no", limited),
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "no"}})
        );
        let invalid = Fault::Invalid { param: Some("max_tokens"), code: None };
        assert_eq!(Dialect::Anthropic.error("bad", invalid)["error"]["type"], "invalid_request_error");
        assert_eq!(Dialect::Anthropic.error("big", Fault::TooLarge)["error"]["type"], "request_too_large");
    }
}
