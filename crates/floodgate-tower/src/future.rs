//! [`ResponseFuture`]: check, then call the inner service or answer for it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use floodgate::EngineError;
use floodgate_http::{HeaderStyle, Problem, limited_response, rate_limit_headers, tag_header};
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::permit::Permits;
use crate::service::{CheckFuture, Checked};
use crate::{RateLimitBody, RateLimitInfo};

pin_project! {
    /// The response future of [`RateLimit`](crate::RateLimit).
    ///
    /// Dropping it before it completes releases any concurrency permit the request was admitted
    /// with. Like most futures, it panics if polled again after it completed.
    pub struct ResponseFuture<T, B>
    where
        T: Service<Request<B>>,
    {
        #[pin]
        state: State<T, B, T::Future>,
        style: HeaderStyle,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<T, B, F> {
        Checking { check: CheckFuture, pending: Option<(T, Request<B>)> },
        Calling { #[pin] future: F, info: Option<RateLimitInfo>, permit: Option<Permits> },
        Done,
    }
}

impl<T, B> ResponseFuture<T, B>
where
    T: Service<Request<B>>,
{
    pub(crate) fn new(check: CheckFuture, inner: T, request: Request<B>, style: HeaderStyle) -> Self {
        ResponseFuture { state: State::Checking { check, pending: Some((inner, request)) }, style }
    }
}

impl<T, B, ResBody> Future for ResponseFuture<T, B>
where
    T: Service<Request<B>, Response = Response<ResBody>>,
{
    type Output = Result<Response<RateLimitBody<ResBody>>, T::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let style = *this.style;
        loop {
            match this.state.as_mut().project() {
                StateProj::Checking { check, pending } => {
                    let checked = ready!(Pin::new(check).poll(cx));
                    let Some((mut inner, mut request)) = pending.take() else {
                        this.state.set(State::Done);
                        continue;
                    };
                    let (info, permit) = match checked {
                        Checked::NeverAllowed(error) => {
                            this.state.set(State::Done);
                            let problem = match &error {
                                EngineError::Descriptor { descriptor, expected, .. } => Problem::invalid(
                                    format!("The request's {descriptor} descriptor is not {expected}."),
                                ),
                                EngineError::MissingDescriptor { descriptor, .. } => {
                                    Problem::invalid(format!(
                                        "The request has no {descriptor} descriptor, which a limit needs."
                                    ))
                                }
                                EngineError::Cost { .. } => Problem::never_allowed(),
                                // A rule that needs a stated limit, which a layer never states.
                                EngineError::Stated { .. } | EngineError::Unclaimed { .. } => {
                                    Problem::invalid(format!("{error}."))
                                }
                            };
                            let mut response = problem_response(&problem);
                            // For outer layers (logs): which rule, and why. Not in the body.
                            response.extensions_mut().insert(error);
                            return Poll::Ready(Ok(response));
                        }
                        Checked::Verdict { info, .. } if !info.verdict().allowed => {
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(denied_response(&info, style)));
                        }
                        Checked::Verdict { info, permit } => (info, permit),
                    };
                    tag_header(info.verdict(), request.headers_mut());
                    request.extensions_mut().insert(info.clone());
                    let future = inner.call(request);
                    this.state.set(State::Calling { future, info: Some(info), permit });
                }
                StateProj::Calling { future, info, permit } => {
                    let result = ready!(future.poll(cx));
                    let (info, permit) = (info.take(), permit.take());
                    this.state.set(State::Done);
                    // On an error, `permit` is dropped here, which releases it.
                    let response = result?;
                    let (mut parts, body) = response.into_parts();
                    if let Some(info) = &info {
                        rate_limit_headers(info.verdict(), style, &mut parts.headers);
                        if info.is_tagged() {
                            tag_header(info.verdict(), &mut parts.headers);
                        }
                    }
                    return Poll::Ready(Ok(Response::from_parts(parts, RateLimitBody::inner(body, permit))));
                }
                StateProj::Done => panic!("`ResponseFuture` polled after completion"),
            }
        }
    }
}

impl<T, B> fmt::Debug for ResponseFuture<T, B>
where
    T: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Checking { .. } => "checking",
            State::Calling { .. } => "calling",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture").field("state", &state).field("style", &self.style).finish()
    }
}

/// A 429 with the rate-limit headers, `Retry-After` and the problem body.
fn denied_response<ResBody>(info: &RateLimitInfo, style: HeaderStyle) -> Response<RateLimitBody<ResBody>> {
    limited_response(info.verdict(), style).map(RateLimitBody::full)
}

fn problem_response<ResBody>(problem: &Problem) -> Response<RateLimitBody<ResBody>> {
    problem.to_response().map(RateLimitBody::full)
}
