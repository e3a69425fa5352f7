//! [`RateLimit`]: the service that checks each request before its inner service sees it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use floodgate::delay::{InTurn, Room, decide_in_turn, makes_wait};
use floodgate::{Descriptors, Engine, EngineError, MemoryStore, Store};
use http::{Request, Response};
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::layer::Config;
use crate::permit::Permits;
use crate::{RateLimitBody, RateLimitInfo};

/// Rate-limits requests to `T` with an [`Engine`] (made by [`RateLimitLayer`](crate::RateLimitLayer)).
///
/// Per request: the extractors build the descriptors, the engine checks them at the request's
/// cost, and then
/// - **allowed**: the request goes to `T` with a [`RateLimitInfo`] in its extensions and the
///   `floodgate-tag` request header set to the tagging rules (removed if the client sent one and
///   no rule tagged); the response gets the rate-limit headers, and `floodgate-tag` when tagged;
/// - **denied**: `T` is not called; the answer is `429 Too Many Requests` with the rate-limit
///   headers, `Retry-After` and an `application/problem+json` body
///   ([`Problem::from_verdict`](floodgate_http::Problem::from_verdict));
/// - **never allowed** (an [`EngineError`]: the cost is 0 or above what an enforced limit can ever
///   grant): `T` is not called; the answer is `400 Bad Request` with a problem body of type
///   `https://floodgate.dev/problems/never-allowed` — waiting would not help, so it is not a 429.
///   The body names no rule; the [`EngineError`] is in the response extensions for outer layers
///   (logging) to read.
///
/// Errors of `T` pass through unchanged. Concurrency permits are released when the response body
/// ends or is dropped, when `T` fails, or when the response future is dropped before a response.
pub struct RateLimit<T, S = MemoryStore> {
    inner: T,
    config: Arc<Config<S>>,
}

impl<T, S> RateLimit<T, S> {
    pub(crate) fn from_config(inner: T, config: Arc<Config<S>>) -> Self {
        RateLimit { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<T: Clone, S> Clone for RateLimit<T, S> {
    fn clone(&self) -> Self {
        RateLimit { inner: self.inner.clone(), config: Arc::clone(&self.config) }
    }
}

impl<T: fmt::Debug, S> fmt::Debug for RateLimit<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl<T, S, B, ResBody> Service<Request<B>> for RateLimit<T, S>
where
    T: Service<Request<B>, Response = Response<ResBody>> + Clone,
    S: Store,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = T::Error;
    type Future = ResponseFuture<T, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The ready service goes with the request; a fresh clone waits for the next `poll_ready`.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = request.into_parts();
        let descriptors = self.config.descriptors(&parts);
        let cost = self.config.cost(&parts);
        let tier = self.config.tier(&parts);
        let engine = &self.config.engine;
        // A store that answers at once (the memory store) decides here, with no future to
        // allocate, unless requests wait in a delay queue this one may have to join; one that has
        // to wait (Redis), or a denial a delay rule makes wait, is awaited in a boxed future.
        let now = match self.config.queues.is_empty() {
            true => engine.check_now(&descriptors, cost),
            false => None,
        };
        let check = match now {
            Some(Ok(verdict)) if makes_wait(&engine.policy(), &verdict) => CheckFuture::Waiting(Box::pin(
                check(Arc::clone(&self.config), descriptors, cost, tier, Some(verdict)),
            )),
            Some(result) => CheckFuture::Ready(Some(checked(engine, result, descriptors, cost))),
            None => {
                CheckFuture::Waiting(Box::pin(check(Arc::clone(&self.config), descriptors, cost, tier, None)))
            }
        };
        ResponseFuture::new(check, inner, Request::from_parts(parts, body), self.config.style)
    }
}

/// The engine's answer, with the permits to release if the request was admitted with some.
pub(crate) enum Checked {
    Verdict { info: RateLimitInfo, permit: Option<Permits> },
    NeverAllowed(EngineError),
}

/// The engine's answer to come: already there, or awaited from the store.
pub(crate) enum CheckFuture {
    /// Decided in `call` (taken when polled).
    Ready(Option<Checked>),
    /// Waiting for the store.
    Waiting(Pin<Box<dyn Future<Output = Checked> + Send>>),
}

impl Future for CheckFuture {
    type Output = Checked;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Checked> {
        match self.get_mut() {
            CheckFuture::Ready(checked) => {
                Poll::Ready(checked.take().expect("`CheckFuture` polled after completion"))
            }
            CheckFuture::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}

/// Checks the request (starting from `first`, when already decided with nobody waiting), in turn
/// with the requests waiting for the same delay keys: while a delay rule denies it, it waits in its
/// key's queue and, at the head, for the exact `retry_after`, and is checked again — up to the
/// rule's `max_wait`, and only with a place among the waiting requests.
async fn check<S: Store>(
    config: Arc<Config<S>>,
    descriptors: Descriptors,
    cost: u64,
    tier: u8,
    first: Option<floodgate::Verdict>,
) -> Checked {
    let engine = &config.engine;
    let policy = engine.policy();
    let room = Room { waiting: &config.waiting, queues: &config.queues, sleep: tokio::time::sleep };
    let decide = || engine.check(&descriptors, cost);
    let InTurn { result, .. } = decide_in_turn(room, &policy, &descriptors, tier, first, decide, || ()).await;
    checked(engine, result, descriptors, cost)
}

fn checked<S: Store>(
    engine: &Arc<Engine<S>>,
    result: Result<floodgate::Verdict, EngineError>,
    descriptors: Descriptors,
    cost: u64,
) -> Checked {
    match result {
        Ok(verdict) => {
            let holds_permits = verdict.holds_permits();
            let info = RateLimitInfo::new(verdict, descriptors, cost);
            let permit = holds_permits.then(|| {
                let (engine, info) = (Arc::clone(engine), info.clone());
                Permits::new(async move {
                    let _ = engine.release(info.descriptors(), info.verdict()).await;
                })
            });
            Checked::Verdict { info, permit }
        }
        Err(error) => Checked::NeverAllowed(error),
    }
}
