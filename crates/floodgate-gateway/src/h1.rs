//! HTTP/1.1 as the gateway speaks it on an inline upstream connection ([`pool`](super::pool)): the
//! request head written straight from the request's parts into one buffer, the response head parsed
//! with httparse (the parser hyper uses) into a [`Response`] whose header values share the bytes
//! read, and the response body's framing decoded from the connection's read buffer (RFC 9112 §6).
//!
//! Nothing here does I/O: [`pool`](super::pool) reads and writes, and hands these functions the
//! bytes.

use std::mem::MaybeUninit;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Version};

/// `Keep-Alive` (RFC 9112 §C.2.2), which `http` has no constant for.
pub(super) const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// The most header fields a response head may have (hyper's own bound).
pub(super) const MAX_HEADERS: usize = 100;
/// The most bytes a response head may take (each informational, 1xx, head within it on its own).
pub(super) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Room a response's header map keeps for the headers the gateway adds to it (the rate-limit
/// headers: five in the default style), so that adding them does not grow (rehash) the map.
const ADDED_HEADERS: usize = 6;
/// The most bytes a chunk's size line (with its extensions) may take.
const MAX_CHUNK_LINE: usize = 4 * 1024;
/// The most bytes a chunked body's trailer section may take.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// What went wrong on an upstream connection.
#[derive(Debug, thiserror::Error)]
pub(super) enum H1Error {
    #[error("the upstream connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the upstream closed the connection before its response head")]
    ClosedBeforeHead,
    #[error("the upstream closed the connection before its response body ended")]
    ClosedInBody,
    #[error("the upstream's response head is malformed: {0}")]
    MalformedHead(&'static str),
    #[error("the upstream's response head is over {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("the upstream's chunked body is malformed: {0}")]
    MalformedChunk(&'static str),
    #[error("the request body's length differs from its Content-Length")]
    RequestBodyLength,
    #[error("the client's request body broke: {0}")]
    RequestBody(String),
}

/// How the request's body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RequestFraming {
    /// No body: no framing header is added (a `Content-Length` the request has is kept).
    None,
    /// `Content-Length: n` (any the request had is replaced).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Writes the request head: the request line in origin form, the upstream's `Host`, the headers
/// (but `Host`, and the framing headers when this head frames a body itself), and the framing.
pub(super) fn write_head(
    out: &mut BytesMut,
    method: &Method,
    path_and_query: &str,
    host: &HeaderValue,
    headers: &HeaderMap,
    framing: RequestFraming,
) {
    let framed = framing != RequestFraming::None;
    out.reserve(64 + path_and_query.len() + headers.len() * 32);
    out.put_slice(method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(path_and_query.as_bytes());
    out.put_slice(b" HTTP/1.1\r\nhost: ");
    out.put_slice(host.as_bytes());
    out.put_slice(b"\r\n");
    for (name, value) in headers {
        if *name == HOST || (framed && (*name == CONTENT_LENGTH || *name == TRANSFER_ENCODING)) {
            continue;
        }
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    match framing {
        RequestFraming::None => {}
        RequestFraming::Length(n) => {
            out.put_slice(b"content-length: ");
            out.put_slice(itoa::Buffer::new().format(n).as_bytes());
            out.put_slice(b"\r\n");
        }
        RequestFraming::Chunked => out.put_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.put_slice(b"\r\n");
}

/// The size line of a chunk of `len` bytes (`len` in hex, CRLF).
pub(super) fn chunk_line(len: usize) -> Bytes {
    Bytes::from(format!("{len:X}\r\n"))
}

/// A response head, parsed.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) response: Response<()>,
    /// How its body is framed.
    pub(super) decoder: Decoder,
    /// The connection may carry another request once this response is read (HTTP/1.1 without
    /// `Connection: close`, or HTTP/1.0 with `keep-alive`, and framed by length or chunks).
    pub(super) keep_alive: bool,
}

/// Parses the response head at the start of `buf`, to a request of `method`; informational (1xx)
/// heads before it are read past. `Ok(None)`: the head is not complete yet. The head's bytes are
/// taken from `buf`; what follows (the body's first bytes) stays.
pub(super) fn parse_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, H1Error> {
    let mut fields = Fields::new();
    loop {
        let Some((len, status, version)) = parse_fields(buf, &mut fields)? else {
            return Ok(None);
        };
        if status.is_informational() {
            if status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(H1Error::MalformedHead(
                    "101 Switching Protocols to a request without an upgrade",
                ));
            }
            buf.advance(len);
            continue;
        }
        let head = buf.split_to(len).freeze();
        return head_of(&head, status, version, &fields, method).map(Some);
    }
}

/// Where a header's name and value lie in the head's bytes.
#[derive(Debug, Clone, Copy)]
struct Field {
    name: (u32, u32),
    value: (u32, u32),
}

/// Where a head's fields lie (on the stack for the usual few: no 100-field array set each time).
type Fields = smallvec::SmallVec<[Field; 24]>;

/// The head's length, status and version, and where its fields lie (in `fields`, emptied first);
/// `None` while incomplete.
fn parse_fields(
    buf: &BytesMut,
    fields: &mut Fields,
) -> Result<Option<(usize, StatusCode, Version)>, H1Error> {
    let mut slots: [MaybeUninit<httparse::Header<'_>>; MAX_HEADERS] =
        [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut slots,
    ) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => return Err(H1Error::HeadTooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(H1Error::MalformedHead("over 100 header fields")),
        Err(_) => return Err(H1Error::MalformedHead("not an HTTP/1.x response head")),
    };
    if len > MAX_HEAD_BYTES {
        return Err(H1Error::HeadTooLarge);
    }
    let status = response
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(H1Error::MalformedHead("the status code"))?;
    let version = match response.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| ((s.as_ptr() as usize - base) as u32, s.len() as u32);
    fields.clear();
    fields.extend(response.headers.iter().map(|h| Field { name: at(h.name.as_bytes()), value: at(h.value) }));
    Ok(Some((len, status, version)))
}

/// The response of a head whose bytes are `head`, its body's framing and whether the connection
/// stays open after it. The hop-by-hop fields that concern only this connection and that the
/// gateway would remove anyway — `Transfer-Encoding`, `Keep-Alive`, and a `Connection` that names no
/// other field — are read, not put in the response's map.
fn head_of(
    head: &Bytes,
    status: StatusCode,
    version: Version,
    fields: &[Field],
    method: &Method,
) -> Result<Head, H1Error> {
    let mut headers = HeaderMap::with_capacity(fields.len() + ADDED_HEADERS);
    let mut length: Option<u64> = None;
    let mut chunked = None;
    let (mut close, mut keep_alive) = (false, false);
    for field in fields {
        let (start, len) = (field.name.0 as usize, field.name.1 as usize);
        let name = HeaderName::from_bytes(&head[start..start + len])
            .map_err(|_| H1Error::MalformedHead("a header name"))?;
        let (start, len) = (field.value.0 as usize, field.value.1 as usize);
        let value = HeaderValue::from_maybe_shared(head.slice(start..start + len))
            .map_err(|_| H1Error::MalformedHead("a header value"))?;
        if name == CONTENT_LENGTH {
            for n in value.as_bytes().split(|b| *b == b',') {
                let n = content_length(n.trim_ascii()).ok_or(H1Error::MalformedHead("Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(H1Error::MalformedHead("Content-Length values that differ"));
                }
                length = Some(n);
            }
        } else if name == TRANSFER_ENCODING {
            // Only the last coding matters: chunked, or not (then the body runs to the close).
            let last = value.as_bytes().rsplit(|b| *b == b',').next().unwrap_or_default();
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            // Hop-by-hop: the gateway frames the client's response itself.
            continue;
        } else if name == CONNECTION {
            let mut names_others = false;
            for token in value.as_bytes().split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                let is_close = token.eq_ignore_ascii_case(b"close");
                let is_keep_alive = token.eq_ignore_ascii_case(b"keep-alive");
                close |= is_close;
                keep_alive |= is_keep_alive;
                names_others |= !(is_close || is_keep_alive || token.is_empty());
            }
            // Hop-by-hop: kept only when it names other fields, which the gateway then removes
            // with it (`upstream::strip_hop_by_hop`).
            if !names_others {
                continue;
            }
        } else if name == KEEP_ALIVE {
            continue;
        }
        headers.append(name, value);
    }
    let persistent = !close && (version == Version::HTTP_11 || keep_alive);
    let no_body =
        *method == Method::HEAD || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    let (decoder, framed) = if no_body {
        (Decoder::done(), true)
    } else {
        match (chunked, length) {
            // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3), which is not passed on:
            // the client's framing is then the gateway's own. A message with both is a smuggling
            // risk, so its connection is not used again.
            (Some(chunked), Some(_)) => {
                headers.remove(CONTENT_LENGTH);
                (if chunked { Decoder::chunked() } else { Decoder::to_close() }, false)
            }
            (Some(true), None) => (Decoder::chunked(), true),
            (Some(false), None) => (Decoder::to_close(), false),
            (None, Some(n)) => (Decoder::length(n), true),
            (None, None) => (Decoder::to_close(), false),
        }
    };
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = version;
    *response.headers_mut() = headers;
    Ok(Head { response, decoder, keep_alive: persistent && framed })
}

/// A `Content-Length` value: decimal digits only, within `u64`.
fn content_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0')))
}

/// A response body's framing, decoded step by step from the connection's read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decoder(State);

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// `Content-Length`: the bytes left.
    Length(u64),
    /// Chunked, before a chunk's size line.
    ChunkSize,
    /// Chunked, inside a chunk: the bytes left of it.
    ChunkData(u64),
    /// Chunked, the CRLF after a chunk's data.
    ChunkEnd,
    /// Chunked, after the last chunk: the trailer section.
    Trailers,
    /// To the connection's close.
    Close,
    /// The body ended.
    Done,
}

/// One step of decoding.
#[derive(Debug, PartialEq)]
pub(super) enum Decoded {
    Data(Bytes),
    Trailers(HeaderMap),
    /// The body ended.
    End,
    /// More bytes are needed.
    More,
}

impl Decoder {
    pub(super) fn length(n: u64) -> Decoder {
        Decoder(if n == 0 { State::Done } else { State::Length(n) })
    }

    pub(super) fn chunked() -> Decoder {
        Decoder(State::ChunkSize)
    }

    pub(super) fn to_close() -> Decoder {
        Decoder(State::Close)
    }

    pub(super) fn done() -> Decoder {
        Decoder(State::Done)
    }

    /// The body has ended (nothing more is read for it).
    pub(super) fn is_done(&self) -> bool {
        self.0 == State::Done
    }

    /// The bytes left when the framing says.
    pub(super) fn exact_left(&self) -> Option<u64> {
        match self.0 {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// The next step from `buf`: data (taken from `buf`, not copied), trailers, the end, or a
    /// call for more bytes.
    pub(super) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, H1Error> {
        loop {
            match self.0 {
                State::Done => return Ok(Decoded::End),
                State::Length(left) | State::ChunkData(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::More);
                    }
                    let take = usize::try_from(left).map_or(buf.len(), |left| left.min(buf.len()));
                    let left = left - take as u64;
                    self.0 = match (&self.0, left) {
                        (State::Length(_), 0) => State::Done,
                        (State::Length(_), left) => State::Length(left),
                        (_, 0) => State::ChunkEnd,
                        (_, left) => State::ChunkData(left),
                    };
                    return Ok(Decoded::Data(buf.split_to(take).freeze()));
                }
                State::Close => {
                    if buf.is_empty() {
                        return Ok(Decoded::More);
                    }
                    return Ok(Decoded::Data(buf.split().freeze()));
                }
                State::ChunkSize => {
                    let Some(end) = buf.iter().position(|b| *b == b'\n') else {
                        if buf.len() > MAX_CHUNK_LINE {
                            return Err(H1Error::MalformedChunk("a size line over 4 KiB"));
                        }
                        return Ok(Decoded::More);
                    };
                    if end > MAX_CHUNK_LINE {
                        return Err(H1Error::MalformedChunk("a size line over 4 KiB"));
                    }
                    let size = chunk_size(&buf[..end])?;
                    buf.advance(end + 1);
                    self.0 = if size == 0 { State::Trailers } else { State::ChunkData(size) };
                }
                State::ChunkEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(H1Error::MalformedChunk("no CRLF after a chunk's data"));
                    }
                    buf.advance(2);
                    self.0 = State::ChunkSize;
                }
                State::Trailers => {
                    if buf.starts_with(b"\r\n") {
                        buf.advance(2);
                        self.0 = State::Done;
                        return Ok(Decoded::End);
                    }
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        if buf.len() > MAX_TRAILER_BYTES {
                            return Err(H1Error::MalformedChunk("a trailer section over 16 KiB"));
                        }
                        return Ok(Decoded::More);
                    };
                    let trailers = trailers(&buf[..end + 4])?;
                    buf.advance(end + 4);
                    self.0 = State::Done;
                    return Ok(Decoded::Trailers(trailers));
                }
            }
        }
    }

    /// The connection closed: the end of a body framed by the close, else an error (unless the
    /// body had ended).
    pub(super) fn closed(&mut self) -> Result<(), H1Error> {
        match self.0 {
            State::Close | State::Done => {
                self.0 = State::Done;
                Ok(())
            }
            _ => Err(H1Error::ClosedInBody),
        }
    }
}

/// A chunk's size from its line (without the LF): hex digits, then optional extensions
/// (`;name=value`, after optional whitespace), then CR.
fn chunk_size(line: &[u8]) -> Result<u64, H1Error> {
    let line = line.strip_suffix(b"\r").ok_or(H1Error::MalformedChunk("a size line without CRLF"))?;
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(H1Error::MalformedChunk("a size line without a size"));
    }
    if digits > 16 {
        return Err(H1Error::MalformedChunk("a chunk size over 64 bits"));
    }
    let rest = line[digits..].trim_ascii_start();
    if !(rest.is_empty() || rest.starts_with(b";")) || rest.contains(&b'\r') {
        return Err(H1Error::MalformedChunk("a size line with bytes after the size"));
    }
    let size = line[..digits]
        .iter()
        .fold(0u64, |n, d| (n << 4) | u64::from(char::from(*d).to_digit(16).unwrap_or(0)));
    Ok(size)
}

/// The trailer fields of a chunked body, from the bytes after the last chunk to the empty line.
fn trailers(section: &[u8]) -> Result<HeaderMap, H1Error> {
    let mut slots = [httparse::EMPTY_HEADER; 32];
    let fields = match httparse::parse_headers(section, &mut slots) {
        Ok(httparse::Status::Complete((_, fields))) => fields,
        _ => return Err(H1Error::MalformedChunk("a trailer section")),
    };
    let mut map = HeaderMap::with_capacity(fields.len());
    for field in fields {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| H1Error::MalformedChunk("a trailer name"))?;
        let value =
            HeaderValue::from_bytes(field.value).map_err(|_| H1Error::MalformedChunk("a trailer value"))?;
        map.append(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn head(text: &str, method: &Method) -> Result<Option<Head>, H1Error> {
        parse_head(&mut BytesMut::from(text), method)
    }

    fn complete(text: &str) -> Head {
        head(text, &Method::GET).expect("a valid head").expect("a complete head")
    }

    /// Decodes `buf` to the end: the data, the trailers, and what is left in `buf`.
    fn decode_all(
        decoder: &mut Decoder,
        buf: &mut BytesMut,
    ) -> Result<(Vec<u8>, Option<HeaderMap>), H1Error> {
        let (mut data, mut trailers) = (Vec::new(), None);
        loop {
            match decoder.decode(buf)? {
                Decoded::Data(bytes) => data.extend_from_slice(&bytes),
                Decoded::Trailers(map) => trailers = Some(map),
                Decoded::End => return Ok((data, trailers)),
                Decoded::More => return Err(H1Error::ClosedInBody),
            }
        }
    }

    #[test]
    fn the_request_head_is_written_from_the_parts_with_the_upstreams_host_and_its_framing() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("client.example"));
        headers.insert("x-id", HeaderValue::from_static("7"));
        headers.append("x-id", HeaderValue::from_static("8"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("3"));
        let host = HeaderValue::from_static("upstream:8080");
        let mut out = BytesMut::new();
        write_head(&mut out, &Method::POST, "/a?b=c", &host, &headers, RequestFraming::Length(3));
        assert_eq!(
            &out[..],
            b"POST /a?b=c HTTP/1.1\r\nhost: upstream:8080\r\nx-id: 7\r\nx-id: 8\r\ncontent-length: 3\r\n\r\n"
        );
        out.clear();
        write_head(&mut out, &Method::PUT, "/", &host, &headers, RequestFraming::Chunked);
        assert_eq!(
            &out[..],
            b"PUT / HTTP/1.1\r\nhost: upstream:8080\r\nx-id: 7\r\nx-id: 8\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        // No body: the request's own Content-Length (say, 0) is passed on as it is.
        out.clear();
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        write_head(&mut out, &Method::DELETE, "/r/1", &host, &headers, RequestFraming::None);
        assert_eq!(
            &out[..],
            b"DELETE /r/1 HTTP/1.1\r\nhost: upstream:8080\r\nx-id: 7\r\nx-id: 8\r\ncontent-length: 0\r\n\r\n"
        );
        assert_eq!(chunk_line(255), "FF\r\n");
    }

    #[test]
    fn a_head_is_parsed_once_complete_and_its_body_bytes_stay_in_the_buffer() {
        let text = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\ncontent-length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello";
        for cut in 0..text.len() - 5 {
            assert!(head(&text[..cut], &Method::GET).unwrap().is_none(), "incomplete at {cut}");
        }
        let mut buf = BytesMut::from(text);
        let parsed = parse_head(&mut buf, &Method::GET).unwrap().unwrap();
        assert_eq!(&buf[..], b"hello");
        assert_eq!(parsed.response.status(), StatusCode::OK);
        assert_eq!(parsed.response.version(), Version::HTTP_11);
        let headers = parsed.response.headers();
        assert_eq!(headers["content-type"], "text/plain");
        assert_eq!(headers.get_all("x-a").iter().collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(parsed.decoder, Decoder::length(5));
        assert!(parsed.keep_alive);
    }

    #[test]
    fn the_framing_and_the_connections_future_follow_rfc_9112() {
        let cases: [(&str, &Method, Decoder, bool); 12] = [
            ("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", &Method::GET, Decoder::done(), true),
            ("HTTP/1.1 200 OK\r\ncontent-length: 7, 7\r\n\r\n", &Method::GET, Decoder::length(7), true),
            ("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", &Method::GET, Decoder::chunked(), true),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\n\r\n",
                &Method::GET,
                Decoder::chunked(),
                true,
            ),
            // Not chunked last: the body runs to the close.
            ("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n", &Method::GET, Decoder::to_close(), false),
            // Neither: to the close.
            ("HTTP/1.1 200 OK\r\n\r\n", &Method::GET, Decoder::to_close(), false),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\n",
                &Method::GET,
                Decoder::length(5),
                false,
            ),
            ("HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\n", &Method::GET, Decoder::length(5), false),
            (
                "HTTP/1.0 200 OK\r\ncontent-length: 5\r\nConnection: Keep-Alive\r\n\r\n",
                &Method::GET,
                Decoder::length(5),
                true,
            ),
            // No body, whatever the headers say.
            ("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", &Method::HEAD, Decoder::done(), true),
            ("HTTP/1.1 204 No Content\r\n\r\n", &Method::POST, Decoder::done(), true),
            (
                "HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n",
                &Method::GET,
                Decoder::done(),
                true,
            ),
        ];
        for (text, method, decoder, keep_alive) in cases {
            let parsed = head(text, method).unwrap().unwrap();
            assert_eq!((parsed.decoder, parsed.keep_alive), (decoder, keep_alive), "{text:?}");
        }
        // Both: Transfer-Encoding wins, Content-Length is not passed on, the connection is not reused.
        let both = complete("HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!(both.decoder, Decoder::chunked());
        assert!(!both.keep_alive);
        assert!(!both.response.headers().contains_key(CONTENT_LENGTH));
    }

    #[test]
    fn the_connections_own_fields_are_read_not_kept() {
        let parsed = complete(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nx-id: 7\r\n\r\n",
        );
        let names: Vec<&str> = parsed.response.headers().keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x-id"]);
        assert_eq!((parsed.decoder, parsed.keep_alive), (Decoder::chunked(), true));
        // `close` is read (the connection is not used again), and not kept either.
        let closing = complete("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
        assert!(!closing.response.headers().contains_key(CONNECTION));
        assert!(!closing.keep_alive);
        // A Connection that names another field stays, so that the field is removed with it.
        let naming = complete(
            "HTTP/1.1 200 OK\r\nconnection: keep-alive, x-hop\r\nx-hop: 1\r\ncontent-length: 0\r\n\r\n",
        );
        assert_eq!(naming.response.headers()["connection"], "keep-alive, x-hop");
        assert!(naming.response.headers().contains_key("x-hop"));
        assert!(naming.keep_alive);
    }

    #[test]
    fn informational_heads_are_read_past() {
        let mut buf = BytesMut::from(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </s.css>\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok",
        );
        let parsed = parse_head(&mut buf, &Method::POST).unwrap().unwrap();
        assert_eq!(parsed.response.status(), StatusCode::CREATED);
        assert!(!parsed.response.headers().contains_key("link"));
        assert_eq!(&buf[..], b"ok");
        // A 1xx alone is not yet an answer.
        assert!(head("HTTP/1.1 100 Continue\r\n\r\n", &Method::POST).unwrap().is_none());
    }

    #[test]
    fn a_malformed_head_is_an_error_that_says_what() {
        let cases = [
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
                "Content-Length values that differ",
            ),
            ("HTTP/1.1 200 OK\r\ncontent-length: 5, 6\r\n\r\n", "Content-Length values that differ"),
            ("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\n", "Content-Length"),
            (
                "HTTP/1.1 101 Switching Protocols\r\n\r\n",
                "101 Switching Protocols to a request without an upgrade",
            ),
            ("SMTP ready\r\n\r\n", "not an HTTP/1.x response head"),
            ("HTTP/1.1 200 OK\r\nbad header\r\n\r\n", "not an HTTP/1.x response head"),
        ];
        for (text, what) in cases {
            match head(text, &Method::GET) {
                Err(H1Error::MalformedHead(said)) => assert_eq!(said, what, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        let many: String = (0..101).map(|i| format!("x-{i}: v\r\n")).collect();
        let too_many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert!(matches!(
            head(&too_many, &Method::GET),
            Err(H1Error::MalformedHead("over 100 header fields"))
        ));
        let endless = format!("HTTP/1.1 200 OK\r\nx-big: {}", "a".repeat(MAX_HEAD_BYTES));
        assert!(matches!(head(&endless, &Method::GET), Err(H1Error::HeadTooLarge)));
    }

    #[test]
    fn a_length_framed_body_is_its_bytes_and_what_follows_is_left() {
        let mut decoder = Decoder::length(5);
        let mut buf = BytesMut::from("hel");
        assert_eq!(decoder.decode(&mut buf).unwrap(), Decoded::Data(Bytes::from_static(b"hel")));
        assert_eq!(decoder.exact_left(), Some(2));
        assert_eq!(decoder.decode(&mut buf).unwrap(), Decoded::More);
        assert!(decoder.closed().is_err(), "closed with 2 bytes to come");
        buf.extend_from_slice(b"loEXTRA");
        assert_eq!(decoder.decode(&mut buf).unwrap(), Decoded::Data(Bytes::from_static(b"lo")));
        assert!(decoder.is_done());
        assert_eq!(decoder.decode(&mut buf).unwrap(), Decoded::End);
        assert_eq!(&buf[..], b"EXTRA");
        let mut to_close = Decoder::to_close();
        let mut buf = BytesMut::from("all of it");
        assert_eq!(to_close.decode(&mut buf).unwrap(), Decoded::Data(Bytes::from_static(b"all of it")));
        assert_eq!(to_close.decode(&mut buf).unwrap(), Decoded::More);
        to_close.closed().unwrap();
        assert_eq!(to_close.decode(&mut buf).unwrap(), Decoded::End);
    }

    #[test]
    fn a_chunked_body_with_extensions_and_trailers_is_decoded() {
        let mut decoder = Decoder::chunked();
        let mut buf = BytesMut::from(
            "5;name=value\r\nhello\r\n6 ; ext\r\n world\r\n0\r\nx-checksum: abc\r\nx-more: 1\r\n\r\nNEXT",
        );
        let (data, trailers) = decode_all(&mut decoder, &mut buf).unwrap();
        assert_eq!(data, b"hello world");
        let trailers = trailers.expect("trailers");
        assert_eq!(
            (trailers["x-checksum"].as_bytes(), trailers["x-more"].as_bytes()),
            (&b"abc"[..], &b"1"[..])
        );
        assert_eq!(&buf[..], b"NEXT");
        let mut plain = Decoder::chunked();
        let mut buf = BytesMut::from("a\r\n0123456789\r\n0\r\n\r\n");
        assert_eq!(decode_all(&mut plain, &mut buf).unwrap(), (b"0123456789".to_vec(), None));
        assert!(buf.is_empty());
        assert!(Decoder::chunked().closed().is_err());
    }

    #[test]
    fn a_malformed_chunked_body_is_an_error_that_says_what() {
        let cases = [
            ("zz\r\n", "a size line without a size"),
            ("5\n", "a size line without CRLF"),
            ("5 x\r\n", "a size line with bytes after the size"),
            ("5\r\nhelloXY", "no CRLF after a chunk's data"),
            ("11111111111111111\r\n", "a chunk size over 64 bits"),
        ];
        for (text, what) in cases {
            let mut decoder = Decoder::chunked();
            match decode_all(&mut decoder, &mut BytesMut::from(text)) {
                Err(H1Error::MalformedChunk(said)) => assert_eq!(said, what, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        let long = format!("5;{}", "e".repeat(MAX_CHUNK_LINE + 1));
        assert!(matches!(
            Decoder::chunked().decode(&mut BytesMut::from(long.as_str())),
            Err(H1Error::MalformedChunk("a size line over 4 KiB"))
        ));
        let endless_trailers = format!("0\r\nx: {}", "t".repeat(MAX_TRAILER_BYTES));
        assert!(matches!(
            decode_all(&mut Decoder::chunked(), &mut BytesMut::from(endless_trailers.as_str())),
            Err(H1Error::MalformedChunk("a trailer section over 16 KiB"))
        ));
    }

    proptest! {
        /// Any body, cut into any chunks (some with extensions), arriving in any pieces, decodes to
        /// itself, and what follows the last chunk stays in the buffer.
        #[test]
        fn chunked_bodies_decode_to_themselves_however_they_arrive(
            body in proptest::collection::vec(any::<u8>(), 0..600),
            sizes in proptest::collection::vec(1usize..90, 1..20),
            pieces in proptest::collection::vec(1usize..40, 1..40),
            extension in any::<bool>(),
        ) {
            let mut wire = Vec::new();
            let mut rest = &body[..];
            let mut sizes = sizes.iter().cycle();
            while !rest.is_empty() {
                let n = (*sizes.next().unwrap()).min(rest.len());
                wire.extend_from_slice(format!("{n:x}").as_bytes());
                if extension {
                    wire.extend_from_slice(b" ;a=\"b\"");
                }
                wire.extend_from_slice(b"\r\n");
                wire.extend_from_slice(&rest[..n]);
                wire.extend_from_slice(b"\r\n");
                rest = &rest[n..];
            }
            wire.extend_from_slice(b"0\r\n\r\nNEXT");
            let mut decoder = Decoder::chunked();
            let mut buf = BytesMut::new();
            let mut decoded = Vec::new();
            let mut fed = 0;
            let mut pieces = pieces.iter().cycle();
            loop {
                match decoder.decode(&mut buf).unwrap() {
                    Decoded::Data(bytes) => decoded.extend_from_slice(&bytes),
                    Decoded::Trailers(_) => prop_assert!(false, "no trailers were sent"),
                    Decoded::End => break,
                    Decoded::More => {
                        prop_assert!(fed < wire.len(), "more asked for after the whole body");
                        let n = (*pieces.next().unwrap()).min(wire.len() - fed);
                        buf.extend_from_slice(&wire[fed..fed + n]);
                        fed += n;
                    }
                }
            }
            prop_assert_eq!(decoded, body);
            buf.extend_from_slice(&wire[fed..]);
            prop_assert_eq!(&buf[..], b"NEXT");
        }

        /// Whatever bytes an upstream sends as a head or a chunked body, parsing and decoding
        /// answer (a head, an error, a call for more), never panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_head(&mut BytesMut::from(&bytes[..]), &Method::GET);
            let mut prefixed = b"HTTP/1.1 200 OK\r\n".to_vec();
            prefixed.extend_from_slice(&bytes);
            let _ = parse_head(&mut BytesMut::from(&prefixed[..]), &Method::GET);
            let mut decoder = Decoder::chunked();
            let mut buf = BytesMut::from(&bytes[..]);
            for _ in 0..bytes.len() + 2 {
                match decoder.decode(&mut buf) {
                    Ok(Decoded::Data(_) | Decoded::Trailers(_)) => {}
                    _ => break,
                }
            }
        }
    }
}
