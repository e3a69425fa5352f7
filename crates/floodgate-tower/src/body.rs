//! [`RateLimitBody`]: the response body, holding the request's concurrency permits until it ends.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::permit::Permits;

pin_project! {
    /// The body of a response that passed through [`RateLimit`](crate::RateLimit): the inner
    /// service's body, or the layer's own `application/problem+json` body (429, 400).
    ///
    /// When the request holds concurrency permits, they are released as soon as the body ends
    /// (its last frame is read, or it fails) or is dropped, whichever comes first.
    pub struct RateLimitBody<B> {
        #[pin]
        kind: Kind<B>,
        permit: Option<Permits>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

impl<B> RateLimitBody<B> {
    pub(crate) fn inner(body: B, permit: Option<Permits>) -> Self {
        RateLimitBody { kind: Kind::Inner { body }, permit }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        RateLimitBody { kind: Kind::Full { data: Some(data).filter(|d| !d.is_empty()) }, permit: None }
    }

    /// Whether the body still holds concurrency permits.
    pub fn holds_permits(&self) -> bool {
        self.permit.is_some()
    }
}

impl<B> Body for RateLimitBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        match this.kind.project() {
            KindProj::Inner { mut body } => {
                let frame = std::task::ready!(body.as_mut().poll_frame(cx));
                let ended = match &frame {
                    None | Some(Err(_)) => true,
                    Some(Ok(_)) => body.is_end_stream(),
                };
                if ended {
                    // Dropping the permit releases it.
                    this.permit.take();
                }
                Poll::Ready(frame)
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d.into())))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for RateLimitBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RateLimitBody");
        match &self.kind {
            Kind::Inner { body } => d.field("inner", body),
            Kind::Full { data } => d.field("full", data),
        };
        d.field("holds_permits", &self.permit.is_some()).finish()
    }
}
