//! [`RateLimitInfo`]: the verdict, handed to the application in the request extensions.

use std::sync::Arc;

use floodgate::{Descriptors, Verdict};

/// What the layer decided for an admitted request, inserted into its extensions so the handler can
/// read it (with axum: `Extension<RateLimitInfo>`): the [`Verdict`] (tags, remaining capacity) and
/// the [`Descriptors`] it was made for — e.g. to [`report`](floodgate::Engine::report) a cost known
/// only once the work is done.
///
/// Cloning is cheap (one reference count).
#[derive(Debug, Clone)]
pub struct RateLimitInfo {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    verdict: Verdict,
    descriptors: Descriptors,
    cost: u64,
}

impl RateLimitInfo {
    pub(crate) fn new(verdict: Verdict, descriptors: Descriptors, cost: u64) -> Self {
        RateLimitInfo { inner: Arc::new(Inner { verdict, descriptors, cost }) }
    }

    /// The engine's verdict.
    pub fn verdict(&self) -> &Verdict {
        &self.inner.verdict
    }

    /// The descriptors extracted from the request.
    pub fn descriptors(&self) -> &Descriptors {
        &self.inner.descriptors
    }

    /// The cost the request was checked with.
    pub fn cost(&self) -> u64 {
        self.inner.cost
    }

    /// The names of the `tag` rules that flagged the request.
    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.inner.verdict.tags()
    }

    /// Whether a `tag` rule flagged the request.
    pub fn is_tagged(&self) -> bool {
        self.tags().next().is_some()
    }

    /// The model to switch to, when the request's plan is over its limit and degrades rather
    /// than refuses (see [`Verdict::degrade_to`](floodgate::Verdict::degrade_to)); the response
    /// also gets the `floodgate-degrade` header.
    pub fn degrade_to(&self) -> Option<&str> {
        self.inner.verdict.degrade_to()
    }
}
