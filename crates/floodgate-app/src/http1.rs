//! The listeners' own HTTP/1.1, for the plain requests that are nearly all of a busy door's
//! (DESIGN.md §12): an HTTP/1.1 request whose head fits `max_header_bytes`, with no body or a
//! `Content-Length` body read with its head, is parsed here with httparse (hyper's parser), handed
//! to the door's service, and answered by writing the response straight to the socket: its head
//! and a body that is ready go out in one `writev`, and a body that streams (an SSE answer) is
//! written frame by frame as it comes. No dispatcher, no channel and no buffer of hyper's sit
//! between the socket and the service.
//!
//! Anything else is where the connection is handed to hyper, with every byte read so far
//! ([`Served::Hyper`]), and hyper serves it from that request on, as it serves a connection from
//! its start: HTTP/2's preface, HTTP/1.0, `Transfer-Encoding`, `Expect`, `Upgrade`, `CONNECT`, a
//! body still on its way, a head that httparse refuses or that outgrows `max_header_bytes`. So the
//! answers to bad requests (400, 431), streamed request bodies, `100 Continue` and upgrades stay
//! hyper's, and a request is never parsed twice to different effect: a request is served here only
//! when every byte of it is in, and handed over untouched otherwise.
//!
//! What this side keeps of hyper's server: a response is framed by its `Content-Length` (given, or
//! the body's exact size) or else chunked; HEAD, 204 and 304 answers carry no body; a `Date` is
//! added when the response has none; `Connection: close` from either side ends the connection after
//! the response; a request head must arrive within `header_read_timeout` of its first byte; and
//! once the server stops, a connection ends after the response in flight, or at once when idle.

use std::future::Future;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

use axum::body::Body;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use floodgate_http::Answer;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

/// The most header fields a request head may have here (hyper's own bound; a head with more is
/// hyper's to refuse, with a 431).
const MAX_HEADERS: usize = 100;
/// Room a request's header map keeps for headers the door adds (a gateway's forwarding headers:
/// `X-Forwarded-For`, `Forwarded`, `X-Forwarded-Proto`, `X-Forwarded-Host`), so that adding them does
/// not grow (rehash) the map.
const ADDED_HEADERS: usize = 6;
/// Fields a head has without its field positions leaving the stack.
const INLINE_FIELDS: usize = 24;
/// Free room the read buffer keeps before each read.
const READ_ROOM: usize = 4 * 1024;
/// A data frame under this size is copied beside the head and framing; a larger one is written
/// from its own bytes.
const COPY_UNDER: usize = 4 * 1024;

/// How a connection's own HTTP/1.1 ended.
pub(crate) enum Served<I> {
    /// The connection is done: closed by either side, idle when the server stopped, or late with
    /// a head.
    Closed,
    /// The connection is hyper's from here: its next request is one only hyper serves. `read`
    /// holds the bytes read from `io` and not yet used, which hyper must read first.
    Hyper { io: I, read: BytesMut },
}

/// The connection's limits that this side applies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_header_bytes: usize,
    pub(crate) header_read_timeout: std::time::Duration,
}

/// Serves `io`'s requests with `service` while each is one this side serves (see the module
/// docs); stops after the response in flight once `stop` turns true.
pub(crate) async fn serve<I, S, F, R>(
    mut io: I,
    service: &S,
    limits: Limits,
    stop: &mut watch::Receiver<bool>,
) -> std::io::Result<Served<I>>
where
    I: AsyncRead + AsyncWrite + Unpin,
    S: Fn(Request<Body>) -> F,
    F: Future<Output = R>,
    R: Into<Answer<Body>>,
{
    let mut read = BytesMut::new();
    let mut out = BytesMut::new();
    let mut timer: Option<Pin<Box<Sleep>>> = None;
    // A head must be whole within `header_read_timeout` of the connection's start, then of the
    // previous response (hyper's timeout runs so too); the idle timeout is the listener's.
    let mut deadline = Instant::now() + limits.header_read_timeout;
    loop {
        // The next request's head, whole.
        let (request, keep_alive) = loop {
            if !read.is_empty() {
                match parse(&mut read, limits.max_header_bytes) {
                    Parsed::Request(request, keep_alive) => break (request, keep_alive),
                    Parsed::Hyper => return Ok(Served::Hyper { io, read }),
                    Parsed::Invalid => {
                        io.write_all(BAD_REQUEST).await?;
                        let _ = io.shutdown().await;
                        return Ok(Served::Closed);
                    }
                    // Hyper answers a head over the limit (431) once it has read it.
                    Parsed::Partial if read.len() >= limits.max_header_bytes => {
                        return Ok(Served::Hyper { io, read });
                    }
                    Parsed::Partial => {}
                }
            }
            // A stop ends a connection between requests.
            if read.is_empty() && *stop.borrow() {
                return Ok(Served::Closed);
            }
            match fill(&mut io, &mut read, &mut timer, deadline, stop).await? {
                Filled::Bytes => {}
                Filled::Closed | Filled::Stopped => return Ok(Served::Closed),
                Filled::Late => {
                    tracing::debug!("no whole request head within header_read_timeout");
                    return Ok(Served::Closed);
                }
            }
        };
        let head_only = request.method() == Method::HEAD;
        // A client that goes away while its answer is made ends the connection, and the answer
        // with it (as hyper does): a gateway's upstream call, an LLM's stream, is dropped.
        let room = limits.max_header_bytes;
        let mut answering = std::pin::pin!(service(request));
        let answered = std::future::poll_fn(|cx| match answering.as_mut().poll(cx) {
            Poll::Ready(response) => Poll::Ready(Some(response)),
            Poll::Pending if gone(&mut io, &mut read, room, cx) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        })
        .await;
        let Some(response) = answered else {
            tracing::debug!("the client went away before its answer");
            return Ok(Served::Closed);
        };
        let close = !keep_alive || *stop.borrow();
        let client = Client { io: &mut io, read: &mut read, room };
        if respond(client, &mut out, response.into(), head_only, close).await? {
            let _ = io.shutdown().await;
            return Ok(Served::Closed);
        }
        deadline = Instant::now() + limits.header_read_timeout;
    }
}

/// Whether the client has gone (its side closed, or the connection failed), reading what it sends
/// meanwhile (a pipelined request) into `read`, up to `room` bytes; the task is woken when that
/// changes.
fn gone<I: AsyncRead + Unpin>(io: &mut I, read: &mut BytesMut, room: usize, cx: &mut Context<'_>) -> bool {
    while read.len() < room {
        if read.capacity() - read.len() < READ_ROOM {
            read.reserve(READ_ROOM);
        }
        match tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, read) {
            Poll::Ready(Ok(0) | Err(_)) => return true,
            Poll::Ready(Ok(_)) => {}
            Poll::Pending => return false,
        }
    }
    false
}

/// The connection a response is written on, and its read side, watched while the body is awaited.
struct Client<'a, I> {
    io: &'a mut I,
    read: &'a mut BytesMut,
    /// How much of a next request the read buffer takes meanwhile.
    room: usize,
}

/// What a wait for bytes ended with.
enum Filled {
    Bytes,
    /// The client closed its side.
    Closed,
    /// The server stopped while the connection was idle.
    Stopped,
    /// The deadline for the head passed.
    Late,
}

/// Reads what `io` has into `read`, waiting until `deadline`; while the connection is idle (nothing
/// read of a next request), until `stop` turns true.
async fn fill<I: AsyncRead + Unpin>(
    io: &mut I,
    read: &mut BytesMut,
    timer: &mut Option<Pin<Box<Sleep>>>,
    deadline: Instant,
    stop: &mut watch::Receiver<bool>,
) -> std::io::Result<Filled> {
    if read.capacity() - read.len() < READ_ROOM {
        read.reserve(2 * READ_ROOM);
    }
    let idle = read.is_empty();
    let mut stopped = std::pin::pin!(async {
        if idle {
            let _ = stop.wait_for(|s| *s).await;
        } else {
            std::future::pending::<()>().await;
        }
    });
    std::future::poll_fn(|cx| {
        match tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, read) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Ok(Filled::Closed)),
            Poll::Ready(Ok(_)) => return Poll::Ready(Ok(Filled::Bytes)),
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        // One timer for the connection, set for an earlier head's deadline until it fires: then
        // it is moved on to this one (not reset on every request).
        let sleep = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        while sleep.as_mut().poll(cx).is_ready() {
            if Instant::now() >= deadline {
                return Poll::Ready(Ok(Filled::Late));
            }
            sleep.as_mut().reset(deadline);
        }
        if stopped.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(Filled::Stopped));
        }
        Poll::Pending
    })
    .await
}

/// A head parsed from the read buffer.
#[allow(clippy::large_enum_variant)] // returned once per request and matched at once
enum Parsed {
    /// Not whole yet.
    Partial,
    /// A request this side serves, and whether the connection stays open after it. Its head and
    /// body were taken from the buffer.
    Request(Request<Body>, bool),
    /// A request that only hyper serves (or refuses); nothing was taken from the buffer.
    Hyper,
    /// A head httparse took whose target or fields `http` refuses; it was taken from the buffer.
    Invalid,
}

/// What this side answers a head it took and then found invalid (hyper answers the same).
const BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// Where a header's name and value lie in the head's bytes.
#[derive(Debug, Clone, Copy)]
struct Field {
    name: (u32, u32),
    value: (u32, u32),
}

/// The request at the start of `read` (see [`Parsed`]).
fn parse(read: &mut BytesMut, max_head: usize) -> Parsed {
    let mut fields = Fields::new();
    let Some((len, method, path)) = parse_fields(read, max_head, &mut fields) else {
        return Parsed::Hyper;
    };
    let count = fields.len();
    if len == 0 {
        return Parsed::Partial;
    }
    let field = |at: (u32, u32)| &read[at.0 as usize..(at.0 + at.1) as usize];
    let mut length = 0u64;
    let (mut lengths, mut close) = (0, false);
    for f in &fields {
        let name = field(f.name);
        let is = |known: &HeaderName| name.eq_ignore_ascii_case(known.as_str().as_bytes());
        if is(&CONTENT_LENGTH) {
            let Some(n) = content_length(field(f.value).trim_ascii()) else { return Parsed::Hyper };
            length = n;
            lengths += 1;
        } else if is(&CONNECTION) {
            close |= field(f.value)
                .split(|b| *b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"));
        } else if is(&TRANSFER_ENCODING) || is(&http::header::EXPECT) || is(&http::header::UPGRADE) {
            return Parsed::Hyper;
        }
    }
    // Two lengths (hyper refuses those that differ), or a body not all in yet: hyper's.
    if lengths > 1 || length > (read.len() - len) as u64 {
        return Parsed::Hyper;
    }
    let head = read.split_to(len).freeze();
    let body = match length {
        0 => Body::empty(),
        n => Body::from(read.split_to(n as usize).freeze()),
    };
    let slice = |at: (u32, u32)| head.slice(at.0 as usize..(at.0 + at.1) as usize);
    let Ok(uri) = Uri::from_maybe_shared(slice(path)) else { return Parsed::Invalid };
    let mut headers = HeaderMap::with_capacity(count + ADDED_HEADERS);
    for f in &fields {
        let Ok(name) = HeaderName::from_bytes(&head[f.name.0 as usize..(f.name.0 + f.name.1) as usize])
        else {
            return Parsed::Invalid;
        };
        let Ok(value) = HeaderValue::from_maybe_shared(slice(f.value)) else { return Parsed::Invalid };
        headers.append(name, value);
    }
    let mut request = Request::new(body);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    Parsed::Request(request, !close)
}

/// Where a head's fields lie.
type Fields = smallvec::SmallVec<[Field; INLINE_FIELDS]>;

/// The head's length (0 while it is not whole), method and target, and where its fields lie (in
/// `fields`); `None` for a head that is hyper's.
fn parse_fields(
    read: &BytesMut,
    max_head: usize,
    fields: &mut Fields,
) -> Option<(usize, Method, (u32, u32))> {
    let mut slots: [MaybeUninit<httparse::Header<'_>>; MAX_HEADERS] =
        [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(read, &mut slots) {
        Ok(httparse::Status::Complete(len)) if len <= max_head => len,
        Ok(httparse::Status::Complete(_)) | Err(_) => return None,
        Ok(httparse::Status::Partial) => return Some((0, Method::GET, (0, 0))),
    };
    if request.version != Some(1) {
        return None;
    }
    let method = Method::from_bytes(request.method?.as_bytes()).ok()?;
    if method == Method::CONNECT {
        return None;
    }
    let base = read.as_ptr() as usize;
    let at = |s: &[u8]| ((s.as_ptr() as usize - base) as u32, s.len() as u32);
    let path = at(request.path?.as_bytes());
    fields.extend(request.headers.iter().map(|h| Field { name: at(h.name.as_bytes()), value: at(h.value) }));
    Some((len, method, path))
}

/// A `Content-Length` value: decimal digits only, within `u64`.
fn content_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0')))
}

/// How a response's body goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    None,
    Length(u64),
    Chunked,
}

/// Writes `response` on the client's connection (its head first into `out`), the body as it
/// comes. Whether the connection must close after it: `close` asked, the response says so, its
/// body broke or ran short of its length, or the client went away while the body was awaited.
async fn respond<I: AsyncRead + AsyncWrite + Unpin>(
    client: Client<'_, I>,
    out: &mut BytesMut,
    answer: Answer<Body>,
    head_only: bool,
    mut close: bool,
) -> std::io::Result<bool> {
    let Client { io, read, room } = client;
    // Rate-limit headers rendered as lines go into the head as they are, replacing the response's
    // own headers of the same names.
    let Answer { response, lines } = answer;
    let (parts, mut body) = response.into_parts();
    let status = parts.status;
    let bodiless = head_only
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    out.reserve(128 + parts.headers.len() * 48 + lines.as_ref().map_or(0, |lines| lines.as_bytes().len()));
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.put_slice(b"\r\n");
    // One pass over the headers: each is written, and the few that frame the message are noted
    // on the way (no lookup by name).
    let (mut declared, mut said_close, mut dated) = (None, false, false);
    for (name, value) in &parts.headers {
        if *name == TRANSFER_ENCODING || lines.as_ref().is_some_and(|lines| lines.replaces(name)) {
            continue;
        } else if *name == CONTENT_LENGTH {
            // Written with the framing, below (a HEAD answer's own length goes out as it is).
            if !bodiless {
                declared = Some(value);
                continue;
            }
        } else if *name == CONNECTION {
            said_close |= has_token(value.as_bytes(), b"close");
        } else if *name == DATE {
            dated = true;
        }
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    if let Some(lines) = &lines {
        out.put_slice(lines.as_bytes());
    }
    close |= said_close;
    let framing = if bodiless {
        Framing::None
    } else {
        match declared.map(|v| content_length(v.as_bytes().trim_ascii())) {
            Some(Some(n)) => Framing::Length(n),
            // A length that is no number is not written on; the body frames itself.
            _ => body.size_hint().exact().map_or(Framing::Chunked, Framing::Length),
        }
    };
    if !dated {
        out.put_slice(b"date: ");
        put_date(out);
        out.put_slice(b"\r\n");
    }
    match framing {
        Framing::Length(n) => {
            out.put_slice(b"content-length: ");
            out.put_slice(itoa::Buffer::new().format(n).as_bytes());
            out.put_slice(b"\r\n");
        }
        Framing::Chunked => out.put_slice(b"transfer-encoding: chunked\r\n"),
        // A HEAD answer's own length (or none) went out with its headers.
        Framing::None => {}
    }
    if close && !said_close {
        out.put_slice(b"connection: close\r\n");
    }
    out.put_slice(b"\r\n");
    if framing == Framing::None {
        flush(io, out, Bytes::new()).await?;
        return Ok(close);
    }
    let mut sent = 0u64;
    loop {
        // Frames that are ready go out with what is buffered; the buffer is written before waiting.
        let frame = match ready(&mut body).await {
            Some(frame) => frame,
            None => {
                flush(io, out, Bytes::new()).await?;
                let next = std::future::poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
                    Poll::Ready(frame) => Poll::Ready(Some(frame)),
                    Poll::Pending if gone(io, read, room, cx) => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                });
                match next.await {
                    Some(frame) => frame,
                    // The client went away: the body is dropped with the connection.
                    None => return Ok(true),
                }
            }
        };
        let frame = match frame {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(e)) => {
                // The client sees the body cut: no last chunk, or fewer bytes than its length.
                tracing::debug!(error = %e, "a response body broke; closing the connection");
                flush(io, out, Bytes::new()).await?;
                return Ok(true);
            }
        };
        let data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                if let (Ok(trailers), Framing::Chunked) = (frame.into_trailers(), framing) {
                    out.put_slice(b"0\r\n");
                    for (name, value) in &trailers {
                        out.put_slice(name.as_str().as_bytes());
                        out.put_slice(b": ");
                        out.put_slice(value.as_bytes());
                        out.put_slice(b"\r\n");
                    }
                    out.put_slice(b"\r\n");
                    flush(io, out, Bytes::new()).await?;
                    return Ok(close);
                }
                continue;
            }
        };
        if data.is_empty() {
            continue;
        }
        sent += data.len() as u64;
        match framing {
            Framing::Length(n) if sent > n => {
                tracing::debug!(
                    length = n,
                    "a response body longer than its Content-Length; closing the connection"
                );
                flush(io, out, Bytes::new()).await?;
                return Ok(true);
            }
            Framing::Chunked => {
                put_hex(out, data.len());
                out.put_slice(b"\r\n");
            }
            _ => {}
        }
        if data.len() < COPY_UNDER {
            out.put_slice(&data);
        } else {
            flush(io, out, data).await?;
        }
        if framing == Framing::Chunked {
            out.put_slice(b"\r\n");
        }
    }
    match framing {
        Framing::Chunked => out.put_slice(b"0\r\n\r\n"),
        Framing::Length(n) if sent < n => {
            tracing::debug!(
                length = n,
                sent,
                "a response body shorter than its Content-Length; closing the connection"
            );
            close = true;
        }
        _ => {}
    }
    flush(io, out, Bytes::new()).await?;
    Ok(close)
}

/// Puts `n` in hexadecimal (a chunk's size).
fn put_hex(out: &mut BytesMut, mut n: usize) {
    let mut digits = [0u8; 2 * std::mem::size_of::<usize>()];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789ABCDEF"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&digits[at..]);
}

/// A body's next frame, as the body gives it.
type Frame = Option<Result<http_body::Frame<Bytes>, axum::Error>>;

/// The body's next frame if it is ready now, `None` if not (the task is then woken when it is).
async fn ready(body: &mut Body) -> Option<Frame> {
    std::future::poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
        Poll::Ready(frame) => Poll::Ready(Some(frame)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Writes `out`, then `data`, in as few writes as the socket takes (one `writev` when it takes
/// all), and flushes.
async fn flush<I: AsyncWrite + Unpin>(
    io: &mut I,
    out: &mut BytesMut,
    mut data: Bytes,
) -> std::io::Result<()> {
    while !out.is_empty() || !data.is_empty() {
        let slices = [IoSlice::new(out), IoSlice::new(&data)];
        let n = io.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_out = n.min(out.len());
        out.advance(from_out);
        data.advance(n - from_out);
    }
    io.flush().await
}

/// Whether the comma-separated `value` has `token` (in any case).
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value.split(|b| *b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

thread_local! {
    /// This thread's `Date` value, and the second it is of.
    static NOW_DATE: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((0, String::new())) };
}

/// Puts the `Date` value of now (IMF-fixdate, RFC 9110 §5.6.7), formatted once a second per
/// thread.
fn put_date(out: &mut BytesMut) {
    let now = SystemTime::now();
    let second = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    NOW_DATE.with_borrow_mut(|(at, text)| {
        if *at != second || text.is_empty() {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.put_slice(text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, DuplexStream};
    use tokio::sync::mpsc;

    use super::*;
    use http::Response;

    const LIMITS: Limits = Limits { max_header_bytes: 8 * 1024, header_read_timeout: Duration::from_secs(5) };

    /// Answers every request with its method, target and body, each on a line, length known.
    async fn echo(request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.expect("the request body");
        let text = format!("{} {}\n{}", parts.method, parts.uri, String::from_utf8_lossy(&body));
        Response::new(Body::from(text))
    }

    /// Serves `server` with `service` on a task of its own; how it ended, with the bytes a
    /// connection handed to hyper would give it first.
    fn serving<S, F>(
        server: DuplexStream,
        service: S,
        limits: Limits,
        mut stop: watch::Receiver<bool>,
    ) -> Ending
    where
        S: Fn(Request<Body>) -> F + Send + Sync + 'static,
        F: Future<Output = Response<Body>> + Send,
    {
        tokio::spawn(async move {
            match serve(server, &service, limits, &mut stop).await {
                Ok(Served::Closed) => Ok(None),
                Ok(Served::Hyper { read, .. }) => Ok(Some(read.to_vec())),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    /// How a connection served on a task ended (see [`serving`]).
    type Ending = tokio::task::JoinHandle<Result<Option<Vec<u8>>, String>>;

    /// A connection served with `echo`, and the stop it watches.
    fn echoing(limits: Limits) -> (DuplexStream, Ending, watch::Sender<bool>) {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (stop, watching) = watch::channel(false);
        (client, serving(server, echo, limits, watching), stop)
    }

    /// Reads from `client` until `done` holds for what was read, or the connection closes.
    async fn read_until(client: &mut DuplexStream, done: impl Fn(&str) -> bool) -> String {
        let mut said = Vec::new();
        let mut buf = [0u8; 4096];
        while !done(&String::from_utf8_lossy(&said)) {
            let n = client.read(&mut buf).await.expect("a read");
            if n == 0 {
                break;
            }
            said.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&said).into_owned()
    }

    /// Everything `client` is sent until the server closes it.
    async fn read_to_close(client: &mut DuplexStream) -> String {
        read_until(client, |_| false).await
    }

    /// The head of `answer` without its `date` line, which changes by the second.
    fn without_date(answer: &str) -> String {
        answer.split("\r\n").filter(|line| !line.starts_with("date: ")).collect::<Vec<_>>().join("\r\n")
    }

    #[tokio::test]
    async fn pipelined_requests_are_answered_in_order_on_one_connection() {
        let (mut client, served, _stop) = echoing(LIMITS);
        client
            .write_all(b"GET /a?x=1 HTTP/1.1\r\nHost: f\r\n\r\nPOST /b HTTP/1.1\r\nHost: f\r\nContent-Length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let answers = read_until(&mut client, |s| s.contains("POST /b\nhello")).await;
        assert_eq!(
            without_date(&answers),
            "HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nGET /a?x=1\nHTTP/1.1 200 OK\r\ncontent-length: 13\r\n\r\nPOST /b\nhello"
        );
        let date = answers.split("\r\n").find_map(|l| l.strip_prefix("date: ")).expect("a Date");
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
        // Kept open: one more request on the same connection.
        client.write_all(b"GET /c HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
        assert!(read_until(&mut client, |s| s.contains("GET /c")).await.ends_with("GET /c\n"));
        drop(client);
        assert_eq!(served.await.unwrap(), Ok(None));
    }

    #[tokio::test]
    async fn a_head_and_body_that_arrive_in_pieces_are_served_once_whole() {
        let (mut client, served, _stop) = echoing(LIMITS);
        let request = b"POST /p HTTP/1.1\r\nHost: f\r\nContent-Length: 3\r\n\r\nabc";
        // The head in three pieces: each is read before the next is sent.
        for piece in [&request[..10], &request[10..30]] {
            client.write_all(piece).await.unwrap();
            tokio::task::yield_now().await;
        }
        client.write_all(&request[30..]).await.unwrap();
        assert!(read_until(&mut client, |s| s.ends_with("abc")).await.ends_with("POST /p\nabc"));
        drop(client);
        assert_eq!(served.await.unwrap(), Ok(None));
    }

    #[tokio::test]
    async fn requests_only_hyper_serves_are_handed_over_with_every_byte_read() {
        let cases: [&[u8]; 10] = [
            b"POST /u HTTP/1.1\r\nHost: f\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"POST /u HTTP/1.1\r\nHost: f\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n",
            b"GET /ws HTTP/1.1\r\nHost: f\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: f\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"CONNECT f:443 HTTP/1.1\r\nHost: f:443\r\n\r\n",
            // A body still on its way.
            b"POST /u HTTP/1.1\r\nHost: f\r\nContent-Length: 10\r\n\r\nabc",
            b"POST /u HTTP/1.1\r\nHost: f\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
            b"POST /u HTTP/1.1\r\nHost: f\r\nContent-Length: +3\r\n\r\nabc",
            b"GET /\x01 HTTP/1.1\r\n\r\n",
        ];
        for case in cases {
            let (mut client, served, _stop) = echoing(LIMITS);
            // A plain request first, served here; then the one for hyper.
            client.write_all(b"GET /first HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
            read_until(&mut client, |s| s.ends_with("GET /first\n")).await;
            client.write_all(case).await.unwrap();
            let handed = served.await.unwrap().unwrap();
            assert_eq!(handed.as_deref(), Some(case), "{}", String::from_utf8_lossy(case));
        }
    }

    #[tokio::test]
    async fn a_head_over_max_header_bytes_is_handed_to_hyper_whole_or_not() {
        let limits = Limits { max_header_bytes: 1024, ..LIMITS };
        let big = format!("GET / HTTP/1.1\r\nHost: f\r\nX-Big: {}\r\n\r\n", "a".repeat(2000));
        for sent in [&big[..1500], &big[..]] {
            let (mut client, served, _stop) = echoing(limits);
            client.write_all(sent.as_bytes()).await.unwrap();
            let handed = served.await.unwrap().unwrap().expect("handed to hyper");
            assert!(sent.as_bytes().starts_with(&handed) && handed.len() >= 1024, "{}", handed.len());
        }
    }

    /// A body whose frames come from a channel, of unknown length.
    struct Frames(mpsc::Receiver<Result<http_body::Frame<Bytes>, std::io::Error>>);

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
            self.0.poll_recv(cx)
        }
    }

    /// The sending side of a [`Frames`] body.
    type FrameSender = mpsc::Sender<Result<http_body::Frame<Bytes>, std::io::Error>>;

    /// A connection whose first answer's body is the frames sent on the channel returned, and
    /// whose later answers are plain (the stop returned never comes).
    async fn streaming() -> (DuplexStream, FrameSender, watch::Sender<bool>) {
        let (frames, body) = mpsc::channel(4);
        let body = std::sync::Mutex::new(Some(Frames(body)));
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (stop, watching) = watch::channel(false);
        let service = move |_: Request<Body>| {
            let body = body.lock().unwrap().take();
            async move {
                match body {
                    Some(body) => Response::new(Body::new(body)),
                    None => Response::new(Body::from("one request streamed, and this one plain")),
                }
            }
        };
        // The task runs on; the client and the frames drive it.
        drop(serving(server, service, LIMITS, watching));
        client.write_all(b"GET /sse HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
        (client, frames, stop)
    }

    #[tokio::test]
    async fn a_body_of_unknown_length_goes_out_chunked_frame_by_frame_with_its_trailers() {
        let (mut client, frames, _stop) = streaming().await;
        frames.send(Ok(http_body::Frame::data(Bytes::from("data: 1\n\n")))).await.unwrap();
        // The first frame reaches the client before the second exists.
        let first = read_until(&mut client, |s| s.ends_with("data: 1\n\n\r\n")).await;
        assert!(
            without_date(&first).starts_with("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\n")
        );
        let big = "x".repeat(COPY_UNDER + 1);
        frames.send(Ok(http_body::Frame::data(Bytes::from(big.clone())))).await.unwrap();
        let mut trailers = HeaderMap::new();
        trailers.insert("x-usage", HeaderValue::from_static("42"));
        frames.send(Ok(http_body::Frame::trailers(trailers))).await.unwrap();
        drop(frames);
        let rest = read_until(&mut client, |s| s.ends_with("\r\n\r\n")).await;
        assert_eq!(rest, format!("{:X}\r\n{big}\r\n0\r\nx-usage: 42\r\n\r\n", big.len()));
    }

    #[tokio::test]
    async fn a_body_that_breaks_cuts_the_answer_and_closes_the_connection() {
        let (mut client, frames, _stop) = streaming().await;
        frames.send(Ok(http_body::Frame::data(Bytes::from("part")))).await.unwrap();
        frames.send(Err(std::io::Error::other("the upstream went away"))).await.unwrap();
        let said = read_to_close(&mut client).await;
        assert!(said.ends_with("\r\n\r\n4\r\npart\r\n"), "no last chunk: {said:?}");
    }

    /// A connection answering each request with `response()`, and what it said to `request`.
    async fn answer_to(request: &str, response: fn() -> Response<Body>) -> String {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (stop, watching) = watch::channel(false);
        let served = serving(server, move |_| async move { response() }, LIMITS, watching);
        client.write_all(request.as_bytes()).await.unwrap();
        // Shut the client's side once the answer is in; the server then closes too.
        let said = read_until(&mut client, |s| s.contains("\r\n\r\n")).await;
        drop((client, stop));
        assert_eq!(served.await.unwrap(), Ok(None));
        without_date(&said)
    }

    #[tokio::test]
    async fn head_204_and_304_answers_carry_no_body() {
        let with_length = || {
            let mut response = Response::new(Body::empty());
            response.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from_static("120"));
            response
        };
        let said = answer_to("HEAD / HTTP/1.1\r\nHost: f\r\n\r\n", with_length).await;
        assert_eq!(said, "HTTP/1.1 200 OK\r\ncontent-length: 120\r\n\r\n");
        for status in [StatusCode::NO_CONTENT, StatusCode::NOT_MODIFIED] {
            let response = match status {
                StatusCode::NO_CONTENT => || {
                    let mut response = Response::new(Body::from("ignored"));
                    *response.status_mut() = StatusCode::NO_CONTENT;
                    response
                },
                _ => || {
                    let mut response = Response::new(Body::empty());
                    *response.status_mut() = StatusCode::NOT_MODIFIED;
                    response
                },
            };
            let said = answer_to("GET / HTTP/1.1\r\nHost: f\r\n\r\n", response).await;
            assert_eq!(said, format!("HTTP/1.1 {status}\r\n\r\n"));
        }
    }

    #[tokio::test]
    async fn connection_close_from_either_side_ends_the_connection_after_the_answer() {
        let (mut client, served, _stop) = echoing(LIMITS);
        client.write_all(b"GET /bye HTTP/1.1\r\nHost: f\r\nConnection: close\r\n\r\n").await.unwrap();
        let said = read_to_close(&mut client).await;
        assert!(said.contains("\r\nconnection: close\r\n") && said.ends_with("GET /bye\n"), "{said}");
        assert_eq!(served.await.unwrap(), Ok(None));

        let closing = || {
            let mut response = Response::new(Body::from("done"));
            response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
            response
        };
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (_stop, watching) = watch::channel(false);
        let served = serving(server, move |_| async move { closing() }, LIMITS, watching);
        client.write_all(b"GET / HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
        let said = without_date(&read_to_close(&mut client).await);
        assert_eq!(said, "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 4\r\n\r\ndone");
        assert_eq!(served.await.unwrap(), Ok(None));
    }

    #[tokio::test]
    async fn a_body_shorter_or_longer_than_its_length_closes_the_connection() {
        for (declared, body) in [("10", "short"), ("2", "longer")] {
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            let (_stop, watching) = watch::channel(false);
            let service = move |_| async move {
                let mut response = Response::new(Body::new(Frames({
                    let (tx, rx) = mpsc::channel(1);
                    tx.try_send(Ok(http_body::Frame::data(Bytes::from(body)))).unwrap();
                    rx
                })));
                response.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from_static(declared));
                response
            };
            let served = serving(server, service, LIMITS, watching);
            client.write_all(b"GET / HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
            let said = read_to_close(&mut client).await;
            assert!(said.contains(&format!("content-length: {declared}\r\n")), "{said}");
            // A short body goes out and the close cuts it; a long one is not written at all.
            let end = if body.len() < declared.parse().unwrap() { body } else { "\r\n\r\n" };
            assert!(said.ends_with(end), "{said:?}");
            assert_eq!(served.await.unwrap(), Ok(None));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_not_whole_within_the_header_read_timeout_closes_the_connection() {
        // From the connection's start: part of a head, or nothing at all.
        for sent in [&b"GET / HTTP/1.1\r\nHost: f\r\n"[..], b""] {
            let (mut client, served, _stop) = echoing(LIMITS);
            client.write_all(sent).await.unwrap();
            closed_at(&mut client, LIMITS.header_read_timeout).await;
            assert_eq!(served.await.unwrap(), Ok(None));
        }
        // From the previous response, the timer set for the first head's deadline moved on.
        let (mut client, served, _stop) = echoing(LIMITS);
        tokio::time::sleep(LIMITS.header_read_timeout / 2).await;
        client.write_all(b"GET /1 HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
        read_until(&mut client, |s| s.ends_with("GET /1\n")).await;
        closed_at(&mut client, LIMITS.header_read_timeout).await;
        assert_eq!(served.await.unwrap(), Ok(None));
    }

    /// With the clock paused (moved by hand here): `client`'s connection is still open a
    /// millisecond before `after` from now, and closed with nothing written at `after`.
    async fn closed_at(client: &mut DuplexStream, after: Duration) {
        // The served connection's task runs whenever this one yields.
        async fn settle() {
            for _ in 0..16 {
                tokio::task::yield_now().await;
            }
        }
        let tick = Duration::from_millis(1);
        let mut byte = [0u8; 1];
        // Whatever the connection has to do at this instant (its first poll, too) is done first.
        settle().await;
        tokio::time::advance(after - tick).await;
        settle().await;
        let early = tokio::time::timeout(Duration::ZERO, client.read(&mut byte)).await;
        assert!(early.is_err(), "the connection ended before its deadline: {early:?}");
        tokio::time::advance(tick).await;
        settle().await;
        let due = tokio::time::timeout(Duration::ZERO, client.read(&mut byte)).await;
        assert!(
            matches!(due, Ok(Ok(0))),
            "the connection is not closed, with nothing written, at its deadline: {due:?}"
        );
    }

    #[tokio::test]
    async fn a_stop_closes_an_idle_connection_and_one_in_flight_after_its_answer() {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (stop, watching) = watch::channel(false);
        let served = serving(server, echo, LIMITS, watching);
        client.write_all(b"GET /1 HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
        read_until(&mut client, |s| s.ends_with("GET /1\n")).await;
        stop.send(true).unwrap();
        assert_eq!(read_to_close(&mut client).await, "");
        assert_eq!(served.await.unwrap(), Ok(None));

        // In flight: the service waits for the stop, and its answer still goes out, closing.
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (stop, watching) = watch::channel(false);
        let seen = watching.clone();
        let (began, mut begun) = mpsc::channel(1);
        let service = move |_| {
            let (mut seen, began) = (seen.clone(), began.clone());
            async move {
                began.send(()).await.unwrap();
                let _ = seen.wait_for(|s| *s).await;
                Response::new(Body::from("late"))
            }
        };
        let served = serving(server, service, LIMITS, watching);
        client.write_all(b"GET /2 HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
        begun.recv().await.unwrap();
        stop.send(true).unwrap();
        let said = read_to_close(&mut client).await;
        assert!(said.contains("connection: close\r\n") && said.ends_with("late"), "{said}");
        assert_eq!(served.await.unwrap(), Ok(None));
    }

    #[tokio::test]
    async fn a_target_that_http_refuses_is_answered_400_and_closed() {
        // httparse takes these targets; `http`'s URI does not (hyper answers them 400 too).
        for target in ["/`", "http://[::1/", "http://"] {
            let (mut client, served, _stop) = echoing(LIMITS);
            client.write_all(format!("GET {target} HTTP/1.1\r\nHost: f\r\n\r\n").as_bytes()).await.unwrap();
            assert_eq!(read_to_close(&mut client).await.as_bytes(), BAD_REQUEST, "{target}");
            assert_eq!(served.await.unwrap(), Ok(None));
        }
    }

    #[tokio::test]
    async fn a_client_that_goes_away_drops_its_answer_in_the_making_and_its_body() {
        // Before the answer: the service's future is dropped.
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (_stop, watching) = watch::channel(false);
        let (dropped, mut on_drop) = mpsc::channel::<()>(1);
        let (began, mut begun) = mpsc::channel(1);
        let service = move |_| {
            let (dropped, began) = (dropped.clone(), began.clone());
            async move {
                let _held = dropped;
                began.send(()).await.unwrap();
                std::future::pending::<Response<Body>>().await
            }
        };
        let served = serving(server, service, LIMITS, watching);
        client.write_all(b"GET /slow HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
        begun.recv().await.unwrap();
        drop(client);
        let dropped = floodgate_testkit::wait::finished("the answer's future dropped", on_drop.recv());
        assert_eq!(dropped.await, None);
        assert_eq!(served.await.unwrap(), Ok(None));

        // While its body streams: the body is dropped.
        let (mut client, frames, _stop) = streaming().await;
        frames.send(Ok(http_body::Frame::data(Bytes::from("first")))).await.unwrap();
        read_until(&mut client, |s| s.ends_with("first\r\n")).await;
        drop(client);
        floodgate_testkit::wait::finished("the body dropped", frames.closed()).await;
    }

    #[tokio::test]
    async fn a_request_sent_while_an_answer_streams_is_served_after_it() {
        let (mut client, frames, _stop) = streaming().await;
        frames.send(Ok(http_body::Frame::data(Bytes::from("first")))).await.unwrap();
        read_until(&mut client, |s| s.ends_with("first\r\n")).await;
        client.write_all(b"GET /next HTTP/1.1\r\nHost: f\r\n\r\n").await.unwrap();
        frames.send(Ok(http_body::Frame::data(Bytes::from("last")))).await.unwrap();
        drop(frames);
        let said = read_until(&mut client, |s| s.contains("one request")).await;
        assert!(said.starts_with("4\r\nlast\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"), "{said:?}");
    }

    /// A parsed request, for comparing: its method and target, headers, body, and whether the
    /// connection stays open after it.
    type Seen = (String, Vec<(String, Vec<u8>)>, Vec<u8>, bool);

    /// What a parse came to: the request, or which other way it went.
    fn outcome(read: &mut BytesMut) -> Result<Seen, &'static str> {
        match parse(read, 8 * 1024) {
            Parsed::Partial => Err("partial"),
            Parsed::Hyper => Err("hyper"),
            Parsed::Invalid => Err("invalid"),
            Parsed::Request(request, keep_alive) => {
                let (parts, body) = request.into_parts();
                let headers =
                    parts.headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect();
                let body = futures_body(body);
                Ok((format!("{} {}", parts.method, parts.uri), headers, body, keep_alive))
            }
        }
    }

    /// A body made of bytes already read, read out without a runtime.
    fn futures_body(body: Body) -> Vec<u8> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut body = std::pin::pin!(body);
        let mut out = Vec::new();
        while let Poll::Ready(Some(frame)) = body.as_mut().poll_frame(&mut cx) {
            out.extend_from_slice(&frame.expect("a frame").into_data().expect("data"));
        }
        out
    }

    proptest::proptest! {
        /// Any bytes: a request taken, a refusal, or nothing taken (for more bytes, or for hyper);
        /// never a panic.
        #[test]
        fn any_bytes_are_taken_whole_or_left_whole(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let mut read = BytesMut::from(&bytes[..]);
            match outcome(&mut read) {
                Err("partial" | "hyper") => proptest::prop_assert_eq!(&read[..], &bytes[..]),
                _ => proptest::prop_assert!(bytes.ends_with(&read[..])),
            }
        }

        /// A plain request, read in any pieces: each prefix that ends in its head waits for more,
        /// one that ends in its body is hyper's, and the whole is the same request as when read at
        /// once (the bytes after it left for the next).
        #[test]
        fn a_request_read_in_pieces_is_the_request_read_whole(
            path in "/[a-z0-9/._~-]{0,24}",
            values in proptest::collection::vec("[!-~]([ -~]{0,14}[!-~])?", 0..6),
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let mut text = format!("POST {path} HTTP/1.1\r\nHost: f\r\n").into_bytes();
            for (i, value) in values.iter().enumerate() {
                text.extend_from_slice(format!("X-H{i}: {value}\r\n").as_bytes());
            }
            text.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            let head = text.len();
            text.extend_from_slice(&body);
            let whole = outcome(&mut BytesMut::from(&[&text[..], b"GET /next"].concat()[..]));
            let (target, headers, got, keep_alive) = whole.expect("a plain request");
            proptest::prop_assert_eq!(target, format!("POST {path}"));
            proptest::prop_assert_eq!(headers.len(), values.len() + 2);
            for (i, value) in values.iter().enumerate() {
                proptest::prop_assert_eq!(&headers[i + 1], &(format!("x-h{i}"), value.as_bytes().to_vec()));
            }
            proptest::prop_assert_eq!(got, body.clone());
            proptest::prop_assert!(keep_alive);
            let at = cut.index(text.len());
            let mut prefix = BytesMut::from(&text[..at]);
            let expected = if at < head { "partial" } else { "hyper" };
            proptest::prop_assert_eq!(outcome(&mut prefix).err(), Some(expected));
            proptest::prop_assert_eq!(&prefix[..], &text[..at]);
        }
    }

    #[test]
    fn chunk_sizes_are_hexadecimal() {
        for n in [0usize, 1, 9, 10, 15, 16, 255, 4096, 65_535, usize::MAX] {
            let mut out = BytesMut::new();
            put_hex(&mut out, n);
            assert_eq!(out, format!("{n:X}").as_bytes());
        }
    }
}
