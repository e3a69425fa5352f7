//! Concurrency permits are held by the response and released when it ends, is dropped, fails or
//! never comes.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::num::NonZeroU64;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::post as post_route;
use bytes::Bytes;
use floodgate::Rule;
use floodgate_core::Concurrency;
use floodgate_tower::RateLimitLayer;
use http::StatusCode;
use http_body::Frame;
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tower::ServiceExt;

use crate::{TestEngine, engine, post, send};

/// A body whose frames the test sends, one channel per response.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

type Senders = Arc<Mutex<Vec<mpsc::Sender<Bytes>>>>;

fn one_in_flight() -> (Arc<TestEngine>, Router, Senders) {
    let rule = Rule::new(
        "in-flight",
        Concurrency::try_new(NonZeroU64::new(1).unwrap(), Duration::from_secs(60)).unwrap(),
    );
    let (engine, _clock) = engine([rule]);
    let senders: Senders = Arc::default();
    let streams = senders.clone();
    let app = Router::new()
        .route(
            "/stream",
            post_route(move || {
                let streams = streams.clone();
                async move {
                    let (tx, rx) = mpsc::channel(4);
                    streams.lock().unwrap().push(tx);
                    Body::new(ChannelBody(rx))
                }
            }),
        )
        .route("/hang", post_route(std::future::pending::<&'static str>))
        .route("/quick", post_route(|| async { "done" }))
        .layer(RateLimitLayer::new(engine.clone()));
    (engine, app, senders)
}

fn req(path: &str) -> http::Request<Body> {
    post(path).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn a_streaming_response_holds_the_permit_until_its_body_ends() {
    let (_engine, app, senders) = one_in_flight();
    let slow = send(&app, req("/stream")).await;
    assert_eq!(slow.status(), StatusCode::OK);
    let tx = senders.lock().unwrap().pop().unwrap();

    assert_eq!(send(&app, req("/quick")).await.status(), StatusCode::TOO_MANY_REQUESTS);

    // Partly read: still in flight.
    let mut body = slow.into_body();
    tx.send(Bytes::from_static(b"first")).await.unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first");
    assert_eq!(send(&app, req("/quick")).await.status(), StatusCode::TOO_MANY_REQUESTS);

    // The stream ends: the permit is released while the body value still exists.
    tx.send(Bytes::from_static(b"last")).await.unwrap();
    drop(tx);
    let rest = (&mut body).collect().await.unwrap().to_bytes();
    assert_eq!(rest, "last");
    let quick = send(&app, req("/quick")).await;
    assert_eq!(quick.status(), StatusCode::OK);
    drop(body);
}

#[tokio::test]
async fn dropping_the_response_body_releases_the_permit() {
    let (_engine, app, senders) = one_in_flight();
    let slow = send(&app, req("/stream")).await;
    assert_eq!(send(&app, req("/quick")).await.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(slow);
    drop(senders.lock().unwrap().pop());
    assert_eq!(send(&app, req("/quick")).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_full_body_releases_the_permit_once_read() {
    let (_engine, app, _senders) = one_in_flight();
    let quick = send(&app, req("/quick")).await;
    assert_eq!(send(&app, req("/quick")).await.status(), StatusCode::TOO_MANY_REQUESTS);
    let body = quick.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "done");
    assert_eq!(send(&app, req("/quick")).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn dropping_the_response_future_before_a_response_releases_the_permit() {
    let (_engine, app, _senders) = one_in_flight();
    {
        let mut hanging = pin!(app.clone().oneshot(req("/hang")));
        // One poll: admitted (the memory store answers at once), then the handler hangs.
        let pending = poll_fn(|cx| Poll::Ready(hanging.as_mut().poll(cx).is_pending())).await;
        assert!(pending);
        assert_eq!(send(&app, req("/quick")).await.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(send(&app, req("/quick")).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_inner_service_error_releases_the_permit() {
    let rule = Rule::new(
        "in-flight",
        Concurrency::try_new(NonZeroU64::new(1).unwrap(), Duration::from_secs(60)).unwrap(),
    );
    let (engine, _clock) = engine([rule]);
    let service = tower::ServiceBuilder::new().layer(RateLimitLayer::new(engine)).service(tower::service_fn(
        |request: http::Request<Body>| async move {
            match request.uri().path() {
                "/fail" => Err("boom"),
                _ => Ok(http::Response::new(Body::from("ok"))),
            }
        },
    ));
    let held = service.clone().oneshot(req("/ok")).await.unwrap();
    assert_eq!(service.clone().oneshot(req("/ok")).await.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    drop(held);
    assert_eq!(service.clone().oneshot(req("/fail")).await.err(), Some("boom"));
    assert_eq!(service.clone().oneshot(req("/ok")).await.unwrap().status(), StatusCode::OK);
}
