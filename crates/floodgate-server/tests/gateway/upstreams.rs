//! Real upstream servers for the gateway's tests, each on port 0 and stopped on drop: one that
//! answers (echoing what it received), one that streams server-sent events, one that fails (every
//! request with 503, or half of them at random), one that hangs, one that stalls its body, and a WebSocket
//! echo.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

type Reply = Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>;

fn full(status: StatusCode, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Full::new(body.into()).map_err(|e| match e {}).boxed());
    *response.status_mut() = status;
    response
}

/// What an upstream saw of one request.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: Bytes,
}

/// How an upstream answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// 200 with a JSON body naming the path.
    Answer,
    /// 503 on every request.
    FailAll,
    /// Never answers.
    Hang,
    /// Sends the head and a first chunk, then stalls.
    StallBody,
    /// Server-sent events: one event, then waits for [`Upstream::finish`], then one more.
    Sse,
    /// Answers after a pause of 20 ms, failing at random half of the time with 503.
    FlakyRandom,
    /// 101 and a WebSocket echo.
    WebSocket,
}

/// A running upstream.
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    pub(crate) requests: Arc<AtomicUsize>,
    pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
    behaviour: Arc<Mutex<Behaviour>>,
    finish: Arc<Notify>,
    pub(crate) sse_done: Arc<AtomicBool>,
    delay: Arc<Mutex<Duration>>,
    task: JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub(crate) async fn start(behaviour: Behaviour) -> Upstream {
        Self::on(TcpListener::bind("127.0.0.1:0").await.unwrap(), behaviour).await
    }

    pub(crate) async fn on(listener: TcpListener, behaviour: Behaviour) -> Upstream {
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let behaviour = Arc::new(Mutex::new(behaviour));
        let finish = Arc::new(Notify::new());
        let sse_done = Arc::new(AtomicBool::new(false));
        let delay = Arc::new(Mutex::new(Duration::ZERO));
        let state = (
            Arc::clone(&requests),
            Arc::clone(&seen),
            Arc::clone(&behaviour),
            Arc::clone(&finish),
            Arc::clone(&sse_done),
            Arc::clone(&delay),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(answer(state, request).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        Upstream { addr, requests, seen, behaviour, finish, sse_done, delay, task }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock() = behaviour;
    }

    pub(crate) fn set_delay(&self, delay: Duration) {
        *self.delay.lock() = delay;
    }

    pub(crate) fn count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Lets an SSE stream finish.
    pub(crate) fn finish(&self) {
        self.finish.notify_waiters();
        self.finish.notify_one();
    }
}

type State = (
    Arc<AtomicUsize>,
    Arc<Mutex<Vec<Seen>>>,
    Arc<Mutex<Behaviour>>,
    Arc<Notify>,
    Arc<AtomicBool>,
    Arc<Mutex<Duration>>,
);

async fn answer(state: State, mut request: Request<Incoming>) -> Reply {
    let (requests, seen, behaviour, finish, sse_done, delay) = state;
    let n = requests.fetch_add(1, Ordering::SeqCst);
    let behaviour = *behaviour.lock();
    let pause = *delay.lock();
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
    if behaviour == Behaviour::WebSocket {
        return websocket(&mut request);
    }
    let method = request.method().to_string();
    let path = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let headers = request.headers().clone();
    let body = request.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    seen.lock().push(Seen { method: method.clone(), path: path.clone(), headers, body: body.clone() });
    match behaviour {
        Behaviour::Answer => {
            let mut reply =
                full(StatusCode::OK, format!(r#"{{"path":"{path}","method":"{method}","n":{n}}}"#));
            reply.headers_mut().insert("content-type", "application/json".parse().unwrap());
            reply.headers_mut().insert("connection", "keep-alive".parse().unwrap());
            reply
        }
        Behaviour::FailAll => full(StatusCode::SERVICE_UNAVAILABLE, "down"),
        Behaviour::FlakyRandom => {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if fastrand::bool() {
                full(StatusCode::SERVICE_UNAVAILABLE, "down")
            } else {
                full(StatusCode::OK, "up")
            }
        }
        Behaviour::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        Behaviour::StallBody => {
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"first chunk\n")))).await;
                tokio::time::sleep(Duration::from_secs(3600)).await;
                drop(tx);
            });
            let stream = tokio_stream(rx);
            Response::new(StreamBody::new(stream).boxed())
        }
        Behaviour::Sse => {
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"data: first\n\n")))).await;
                finish.notified().await;
                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"data: last\n\n")))).await;
                sse_done.store(true, Ordering::SeqCst);
            });
            let mut reply = Response::new(StreamBody::new(tokio_stream(rx)).boxed());
            reply.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
            reply
        }
        Behaviour::WebSocket => unreachable!(),
    }
}

/// A receiver as a stream of frames.
fn tokio_stream(
    mut rx: mpsc::Receiver<Result<Frame<Bytes>, Infallible>>,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + Sync + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The WebSocket handshake (RFC 6455 §4.2.2), then an echo of every frame (unmasked back).
fn websocket(request: &mut Request<Incoming>) -> Reply {
    let Some(key) = request.headers().get("sec-websocket-key").cloned() else {
        return full(StatusCode::BAD_REQUEST, "no key");
    };
    let upgrade = hyper::upgrade::on(request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut io = TokioIo::new(upgraded);
        loop {
            let Some((opcode, payload)) = read_frame(&mut io).await else { return };
            if opcode == 8 {
                return;
            }
            if write_frame(&mut io, opcode, &payload, None).await.is_err() {
                return;
            }
        }
    });
    let mut reply = full(StatusCode::SWITCHING_PROTOCOLS, Bytes::new());
    let headers = reply.headers_mut();
    headers.insert("upgrade", "websocket".parse().unwrap());
    headers.insert("connection", "upgrade".parse().unwrap());
    headers.insert("sec-websocket-accept", accept_key(key.as_bytes()).parse().unwrap());
    reply
}

/// `Sec-WebSocket-Accept`: base64(SHA-1(key + GUID)).
pub(crate) fn accept_key(key: &[u8]) -> String {
    let mut input = key.to_vec();
    input.extend_from_slice(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, digest.as_ref())
}

/// One small frame: `(opcode, payload)`.
pub(crate) async fn read_frame<R: tokio::io::AsyncRead + Unpin>(io: &mut R) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    io.read_exact(&mut head).await.ok()?;
    let opcode = head[0] & 0x0f;
    let masked = head[1] & 0x80 != 0;
    let mut len = u64::from(head[1] & 0x7f);
    if len == 126 {
        let mut ext = [0u8; 2];
        io.read_exact(&mut ext).await.ok()?;
        len = u64::from(u16::from_be_bytes(ext));
    } else if len == 127 {
        return None;
    }
    let mut mask = [0u8; 4];
    if masked {
        io.read_exact(&mut mask).await.ok()?;
    }
    let mut payload = vec![0u8; len as usize];
    io.read_exact(&mut payload).await.ok()?;
    if masked {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    Some((opcode, payload))
}

/// Writes one small final frame, masked with `mask` (as a client must) or not.
pub(crate) async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(
    io: &mut W,
    opcode: u8,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) -> std::io::Result<()> {
    let mut frame = vec![0x80 | opcode];
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    assert!(payload.len() < 126, "small frames only");
    frame.push(mask_bit | payload.len() as u8);
    match mask {
        Some(mask) => {
            frame.extend_from_slice(&mask);
            frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        }
        None => frame.extend_from_slice(payload),
    }
    io.write_all(&frame).await?;
    io.flush().await
}
