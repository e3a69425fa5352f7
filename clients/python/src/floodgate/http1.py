"""The async client's transport: HTTP/1.1 over asyncio streams, connections kept alive in a pool —
an httpx transport (``httpx.AsyncBaseTransport``), written for the small JSON exchanges of
Floodgate's API.

Why not httpcore's pool: measured in a FastAPI app (BENCHMARKS.md, "Python middleware overhead"),
a call through httpcore cost about 1,160 Python function calls — its pool's locks and cancel-scope
shields (anyio), h11's state machine — some 400 µs of CPU on this machine, more than the rest of
the request; the middleware's cost was mostly that. Here a call is one write of the whole request
and the reads of one answer.

What it speaks: HTTP/1.1 requests with a body known in advance; answers with ``Content-Length``,
``Transfer-Encoding: chunked``, or neither (read to the end, the connection then closed); ``1xx``
answers skipped; ``Connection: close`` honoured. A connection is reused only after an answer read
in full; a call that fails or is cancelled midway closes its connection. An idle connection the
server closed (its end read by the event loop) is dropped before reuse, and so is one idle longer
than ``keepalive_expiry``. TLS by the given ``ssl.SSLContext`` (ALPN ``http/1.1``). Time is the caller's
to bound (the client wraps each call in one timer); errors are httpx's (``ConnectError``,
``ReadError``, ``WriteError``, ``RemoteProtocolError``).
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import time

import httpx

from floodgate.transport import mark_sent

_MAX_HEAD = 65536


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = time.monotonic()

    def stale(self, expiry: float) -> bool:
        # The event loop reads a connection's end as soon as the server closes it: no need to ask
        # the socket (a system call per request).
        return time.monotonic() - self.idle_since > expiry or self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


def _head(request: httpx.Request, body: bytes) -> bytes:
    url = request.url
    target = url.raw_path or b"/"
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), target)]
    for name, value in request.headers.raw:
        lines.append(name + b": " + value)
    if "content-length" not in request.headers and (body or request.method in ("POST", "PUT", "PATCH")):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _parse_head(head: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise httpx.RemoteProtocolError(f"malformed header line: {line[:80]!r}")
        headers.append((name.lower(), value.strip()))
    return int(parts[1]), parts[0], headers


class AsyncHttp1Transport(httpx.AsyncBaseTransport):
    """The transport (see the module's documentation) to ``host``:``port`` — every request goes
    there, whatever its URL's authority (the client sends only to its server)."""

    def __init__(
        self,
        host: str,
        port: int,
        context: ssl.SSLContext | None,
        *,
        max_connections: int = 100,
        keepalive_expiry: float = 30.0,
    ) -> None:
        self._host = host
        self._port = port
        self._context = context
        self._idle: collections.deque[_Connection] = collections.deque()
        self._open = 0
        self._max = max_connections
        self._expiry = keepalive_expiry
        self._freed: asyncio.Event | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        status, version, headers, content = await self.exchange(
            _head(request, body) + body, head=request.method == "HEAD"
        )
        return httpx.Response(
            status,
            headers=headers,
            content=content,
            request=request,
            extensions={"http_version": version},
        )

    async def exchange(
        self, message: bytes, *, head: bool = False
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes]:
        """Sends ``message`` — a whole HTTP/1.1 request, head and body — on a kept-alive connection
        and reads its answer: the status, the HTTP version, the headers (names lowercase) and the
        body. The async client calls this directly, its requests' bytes made once for each call
        (:meth:`handle_async_request` is the same for an ``httpx.Request``); ``head`` says the
        request is a ``HEAD`` (its answer has no body)."""
        if self._closed:
            raise RuntimeError("the transport is closed")
        connection = await self._acquire()
        reusable = False
        try:
            connection.writer.write(message)
            mark_sent()
            status, version, headers, content, reusable = await self._answer(connection, head)
        except OSError as error:
            raise httpx.ReadError(str(error) or type(error).__name__) from error
        except asyncio.IncompleteReadError as error:
            raise httpx.RemoteProtocolError(
                "the server closed the connection before its answer was complete"
            ) from error
        except asyncio.LimitOverrunError as error:
            raise httpx.RemoteProtocolError("an answer's head was too large") from error
        finally:
            self._release(connection, reusable)
        return status, version, headers, content

    async def _answer(
        self, connection: _Connection, head_request: bool
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes, bool]:
        reader = connection.reader
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as error:
                if not error.partial:
                    raise httpx.RemoteProtocolError("the server closed the connection without answering") from error
                raise
            if len(head) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("an answer's head was too large")
            status, version, headers = _parse_head(head)
            if not 100 <= status < 200:
                break
        fields = dict(headers)
        connection_header = fields.get(b"connection", b"").lower()
        keep = b"close" not in connection_header and (version == b"HTTP/1.1" or b"keep-alive" in connection_header)
        if head_request or status in (204, 304):
            return status, version, headers, b"", keep
        if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
            return status, version, headers, await self._chunked(reader), keep
        length = fields.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise httpx.RemoteProtocolError(f"a Content-Length of {length[:40]!r}")
            return status, version, headers, await reader.readexactly(int(length)), keep
        return status, version, headers, await reader.read(), False

    @staticmethod
    async def _chunked(reader: asyncio.StreamReader) -> bytes:
        chunks: list[bytes] = []
        while True:
            line = await reader.readuntil(b"\r\n")
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise httpx.RemoteProtocolError(f"a chunk size of {size_text[:40]!r}") from None
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                return b"".join(chunks)
            chunk = await reader.readexactly(size + 2)
            if chunk[-2:] != b"\r\n":
                raise httpx.RemoteProtocolError("a chunk without its CRLF")
            chunks.append(chunk[:-2])

    async def _acquire(self) -> _Connection:
        while True:
            while self._idle:
                connection = self._idle.pop()
                if not connection.stale(self._expiry):
                    return connection
                self._drop(connection)
            if self._open < self._max:
                self._open += 1
                try:
                    return await self._connect()
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
            if self._freed is None:
                self._freed = asyncio.Event()
            self._freed.clear()
            await self._freed.wait()

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(
                self._host,
                self._port,
                ssl=self._context,
                server_hostname=self._host if self._context is not None else None,
                limit=_MAX_HEAD,
            )
        except (OSError, ssl.SSLError) as error:
            raise httpx.ConnectError(str(error) or type(error).__name__) from error
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    def _release(self, connection: _Connection, reusable: bool) -> None:
        if reusable and not self._closed:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            self._drop(connection)
        self._wake()

    def _drop(self, connection: _Connection) -> None:
        self._open -= 1
        connection.close()

    def _wake(self) -> None:
        if self._freed is not None:
            self._freed.set()

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._drop(self._idle.pop())
