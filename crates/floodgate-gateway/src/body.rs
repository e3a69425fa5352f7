//! The response body the client gets: the upstream's, streamed frame by frame as it arrives (never
//! buffered whole), holding what the request holds until it ends — its place among the route's
//! requests in flight, the concurrency permits of `concurrency` rules — and cut when the request's
//! `total` deadline passes. For a route with `read: stale_cache`, a copy of a good GET's body is
//! taken on the way, and kept once the body ended whole.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use floodgate_core::{Clock, SystemClock};
use floodgate_tower::Permits;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::llm::{Meter, Step};
use super::stale::StaleCache;
use super::upstream::UpstreamBody;

/// The request's total deadline passed while its response body was streaming.
#[derive(Debug, thiserror::Error)]
#[error("the route's total timeout passed while the response body was streaming")]
pub(super) struct TotalTimeout;

/// What a request holds until its response ends.
#[derive(Default)]
pub(super) struct Held {
    pub(super) in_flight: Option<OwnedSemaphorePermit>,
    /// The concurrency permits of `concurrency` rules, each phase's.
    pub(super) permits: Vec<Permits>,
}

/// A copy of a good GET's body on its way to the stale cache.
pub(super) struct Tee {
    pub(super) cache: Arc<StaleCache>,
    pub(super) key: String,
    pub(super) headers: HeaderMap,
    pub(super) buf: BytesMut,
    pub(super) clock: SystemClock,
}

/// The client's response body.
pub(super) struct GatewayBody {
    inner: UpstreamBody,
    deadline: Option<Pin<Box<Sleep>>>,
    tee: Option<Tee>,
    held: Option<Held>,
    /// An LLM call's meter: counts what flows, may hide or cut, commits when the body ends.
    meter: Option<Meter>,
    /// The meter cut the stream: nothing more is forwarded.
    done: bool,
    /// The upstream broke the body: the error is passed on at the next poll, once the server has
    /// flushed what came before it (see [`GatewayBody::broken`]).
    broke: Option<<Self as Body>::Error>,
}

impl GatewayBody {
    pub(super) fn new(
        inner: UpstreamBody,
        deadline: Option<Instant>,
        tee: Option<Tee>,
        held: Held,
        meter: Option<Meter>,
    ) -> Self {
        GatewayBody {
            inner,
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
            tee,
            held: Some(held),
            meter,
            done: false,
            broke: None,
        }
    }

    fn ended(&mut self, whole: bool) {
        if let Some(mut meter) = self.meter.take() {
            meter.finish();
        }
        self.held.take();
        if let Some(tee) = self.tee.take()
            && whole
        {
            let now = tee.clock.now();
            tee.cache.insert(tee.key, &tee.headers, tee.buf.freeze(), now);
        }
    }

    /// The upstream broke the body with `error`. The server aborts the client's connection on a
    /// body error, dropping whatever it has not yet written: when the head, the frames before the
    /// break and the break itself all arrive in one poll, the client would get nothing, not even
    /// the status. So the error waits one poll: this one answers `Pending` (the server then flushes
    /// what it holds) and wakes at once; the next one passes the error on.
    fn broken(
        &mut self,
        error: <Self as Body>::Error,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, <Self as Body>::Error>>> {
        self.ended(false);
        self.broke = Some(error);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(error) = this.broke.take() {
            this.done = true;
            return Poll::Ready(Some(Err(error)));
        }
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(deadline) = this.deadline.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            this.ended(false);
            return Poll::Ready(Some(Err(Box::new(TotalTimeout))));
        }
        if this.meter.is_some() {
            return this.poll_metered(cx);
        }
        match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            None => {
                this.ended(true);
                Poll::Ready(None)
            }
            Some(Err(e)) => this.broken(e, cx),
            Some(Ok(frame)) => {
                if let (Some(tee), Some(data)) = (this.tee.as_mut(), frame.data_ref()) {
                    if tee.buf.len() + data.len() > tee.cache.max_entry() {
                        this.tee = None;
                    } else {
                        tee.buf.extend_from_slice(data);
                    }
                }
                if this.inner.is_end_stream() {
                    this.ended(true);
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || (self.inner.is_end_stream() && self.meter.is_none())
    }

    fn size_hint(&self) -> SizeHint {
        match &self.meter {
            Some(meter) if meter.rewrites() => SizeHint::default(),
            _ => self.inner.size_hint(),
        }
    }
}

impl GatewayBody {
    /// The next frame of a metered body: what the meter forwards of the upstream's frames.
    fn poll_metered(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, <Self as Body>::Error>>> {
        loop {
            let Some(meter) = self.meter.as_mut() else { return Poll::Ready(None) };
            let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
            match frame {
                None => {
                    let rest = meter.rest();
                    self.ended(true);
                    self.done = true;
                    return Poll::Ready((!rest.is_empty()).then(|| Ok(Frame::data(rest))));
                }
                Some(Err(e)) => return self.broken(e, cx),
                Some(Ok(frame)) => {
                    let Some(data) = frame.data_ref() else {
                        // Trailers pass as they are.
                        return Poll::Ready(Some(Ok(frame)));
                    };
                    match meter.data(data) {
                        Step::Pass(bytes) if bytes.is_empty() => continue,
                        Step::Pass(bytes) => return Poll::Ready(Some(Ok(Frame::data(bytes)))),
                        Step::End(bytes) => {
                            // Cut: the upstream's connection goes with this body.
                            self.ended(false);
                            self.done = true;
                            return Poll::Ready(Some(Ok(Frame::data(bytes))));
                        }
                    }
                }
            }
        }
    }
}

use std::future::Future as _;
