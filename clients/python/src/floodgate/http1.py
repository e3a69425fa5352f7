"""The clients' transports: HTTP/1.1 with connections kept alive in a pool — httpx transports
(``httpx.BaseTransport`` on sockets for the sync client, ``httpx.AsyncBaseTransport`` on asyncio
streams for the async one), written for the small JSON exchanges of Floodgate's API.

Why not httpx's own pool (httpcore): measured in a FastAPI app (BENCHMARKS.md, "Python middleware
overhead"), a check through httpx's client and httpcore cost about 2,500 Python function calls — the
client's layers, the pool's locks and cancel-scope shields (anyio), a timer per socket operation,
h11's state machine — some 400 µs of CPU on this machine, more than the rest of the request; the
middleware's cost was mostly that. Here a call is one write of the whole request (its bytes made
once by the client: :meth:`~AsyncHttp1Transport.exchange`) and the reads of one answer, about 270
function calls.

What they speak: HTTP/1.1 requests with a body known in advance; answers with ``Content-Length``,
``Transfer-Encoding: chunked``, or neither (read to the end, the connection then closed); ``1xx``
answers skipped; ``Connection: close`` honoured. A connection is reused only after an answer read
in full; a call that fails or is cancelled midway closes its connection. An idle connection the
server closed is dropped before reuse (the event loop has read its end; the sync transport asks the
socket), and so is one idle longer than ``keepalive_expiry``. TLS by the given ``ssl.SSLContext``
(ALPN ``http/1.1``). Time: the async client bounds each call with one timer, the sync transport
gives each socket operation what is left of the call's deadline (:mod:`floodgate.transport`).
Errors are httpx's (``ConnectError``, ``ConnectTimeout``, ``ReadError``, ``ReadTimeout``,
``WriteError``, ``RemoteProtocolError``, ``PoolTimeout``).
"""

from __future__ import annotations

import asyncio
import collections
import select
import socket
import ssl
import threading
import time

import httpx

from floodgate.transport import mark_sent, seconds_left

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


def _framing(
    status: int, version: bytes, headers: list[tuple[bytes, bytes]], head_request: bool
) -> tuple[str, int, bool]:
    """How an answer's body is framed — ``none``, ``chunked``, ``length`` (with the length) or
    ``eof`` (read to the end) — and whether its connection may be kept."""
    fields = dict(headers)
    connection_header = fields.get(b"connection", b"").lower()
    keep = b"close" not in connection_header and (version == b"HTTP/1.1" or b"keep-alive" in connection_header)
    if head_request or status in (204, 304):
        return "none", 0, keep
    if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        return "chunked", 0, keep
    length = fields.get(b"content-length")
    if length is not None:
        if not length.isdigit():
            raise httpx.RemoteProtocolError(f"a Content-Length of {length[:40]!r}")
        return "length", int(length), keep
    return "eof", 0, False


def _chunk_size(line: bytes) -> int:
    size_text = line.split(b";", 1)[0].strip()
    try:
        return int(size_text, 16)
    except ValueError:
        raise httpx.RemoteProtocolError(f"a chunk size of {size_text[:40]!r}") from None


def _chunk(chunk: bytes) -> bytes:
    if chunk[-2:] != b"\r\n":
        raise httpx.RemoteProtocolError("a chunk without its CRLF")
    return chunk[:-2]


# === impl async ===


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
        kind, length, keep = _framing(status, version, headers, head_request)
        if kind == "none":
            return status, version, headers, b"", keep
        if kind == "chunked":
            return status, version, headers, await self._chunked(reader), keep
        if kind == "length":
            return status, version, headers, await reader.readexactly(length), keep
        return status, version, headers, await reader.read(), False

    @staticmethod
    async def _chunked(reader: asyncio.StreamReader) -> bytes:
        chunks: list[bytes] = []
        while True:
            size = _chunk_size(await reader.readuntil(b"\r\n"))
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                return b"".join(chunks)
            chunks.append(_chunk(await reader.readexactly(size + 2)))

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


# === impl sync ===


class _EndOfStream(Exception):
    """The server closed the connection; ``partial`` says whether any of the answer had come."""

    def __init__(self, partial: bool) -> None:
        super().__init__("the server closed the connection")
        self.partial = partial


class _SyncConnection:
    """A socket with a read buffer; every operation gets at most what is left of the call's
    deadline (:func:`~floodgate.transport.call_scope`)."""

    __slots__ = ("buffer", "idle_since", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.idle_since = time.monotonic()

    def send(self, message: bytes) -> None:
        self.sock.settimeout(time_left())
        self.sock.sendall(message)

    def _fill(self) -> None:
        self.sock.settimeout(time_left())
        data = self.sock.recv(65536)
        if not data:
            raise _EndOfStream(bool(self.buffer))
        self.buffer += data

    def readuntil(self, separator: bytes, limit: int = _MAX_HEAD) -> bytes:
        start = 0
        while True:
            found = self.buffer.find(separator, start)
            if found >= 0:
                end = found + len(separator)
                taken = bytes(self.buffer[:end])
                del self.buffer[:end]
                return taken
            if len(self.buffer) > limit:
                raise httpx.RemoteProtocolError("an answer's head was too large")
            start = max(0, len(self.buffer) - len(separator) + 1)
            self._fill()

    def readexactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            self._fill()
        taken = bytes(self.buffer[:count])
        del self.buffer[:count]
        return taken

    def read_to_end(self) -> bytes:
        try:
            while True:
                self._fill()
        except _EndOfStream:
            taken = bytes(self.buffer)
            self.buffer.clear()
            return taken

    def stale(self, expiry: float) -> bool:
        if time.monotonic() - self.idle_since > expiry or self.buffer:
            return True
        # Readable while idle: the server closed it (or said something unasked).
        readable, _, _ = select.select([self.sock], [], [], 0)
        return bool(readable)

    def close(self) -> None:
        self.sock.close()


def time_left() -> float | None:
    """What is left of the current call's deadline (``None``: no deadline); a deadline passed is
    :class:`TimeoutError`."""
    left = seconds_left()
    if left is not None and left <= 0:
        raise TimeoutError("the call's deadline has passed")
    return left


class Http1Transport(httpx.BaseTransport):
    """The sync client's transport: :class:`AsyncHttp1Transport`'s, on sockets, for threads (a
    pool shared by every thread). Each socket operation gets what is left of the call's deadline,
    so a server that is silent or answers a byte at a time cannot hold a call past it."""

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
        self._idle: collections.deque[_SyncConnection] = collections.deque()
        self._open = 0
        self._max = max_connections
        self._expiry = keepalive_expiry
        self._lock = threading.Condition()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        status, version, headers, content = self.exchange(_head(request, body) + body, head=request.method == "HEAD")
        return httpx.Response(
            status, headers=headers, content=content, request=request, extensions={"http_version": version}
        )

    def exchange(self, message: bytes, *, head: bool = False) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes]:
        """As :meth:`AsyncHttp1Transport.exchange`."""
        if self._closed:
            raise RuntimeError("the transport is closed")
        connection = self._acquire()
        reusable = False
        try:
            try:
                connection.send(message)
            except TimeoutError as error:
                raise httpx.WriteTimeout(str(error)) from error
            except OSError as error:
                raise httpx.WriteError(str(error) or type(error).__name__) from error
            mark_sent()
            status, version, headers, content, reusable = self._answer(connection, head)
        except TimeoutError as error:
            raise httpx.ReadTimeout(str(error)) from error
        except _EndOfStream as error:
            what = "before its answer was complete" if error.partial else "without answering"
            raise httpx.RemoteProtocolError(f"the server closed the connection {what}") from error
        except OSError as error:
            raise httpx.ReadError(str(error) or type(error).__name__) from error
        finally:
            self._release(connection, reusable)
        return status, version, headers, content

    @staticmethod
    def _answer(
        connection: _SyncConnection, head_request: bool
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes, bool]:
        while True:
            status, version, headers = _parse_head(connection.readuntil(b"\r\n\r\n"))
            if not 100 <= status < 200:
                break
        kind, length, keep = _framing(status, version, headers, head_request)
        if kind == "none":
            return status, version, headers, b"", keep
        if kind == "length":
            return status, version, headers, connection.readexactly(length), keep
        if kind == "eof":
            return status, version, headers, connection.read_to_end(), False
        chunks: list[bytes] = []
        while True:
            size = _chunk_size(connection.readuntil(b"\r\n"))
            if size == 0:
                while connection.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                return status, version, headers, b"".join(chunks), keep
            chunks.append(_chunk(connection.readexactly(size + 2)))

    def _acquire(self) -> _SyncConnection:
        with self._lock:
            while True:
                while self._idle:
                    connection = self._idle.pop()
                    if not connection.stale(self._expiry):
                        return connection
                    self._drop(connection)
                if self._open < self._max:
                    self._open += 1
                    break
                left = seconds_left()
                if left is not None and left <= 0:
                    raise httpx.PoolTimeout("no connection came free before the call's deadline")
                self._lock.wait(left)
        try:
            return self._connect()
        except BaseException:
            with self._lock:
                self._open -= 1
                self._lock.notify()
            raise

    def _connect(self) -> _SyncConnection:
        try:
            sock = socket.create_connection((self._host, self._port), timeout=time_left())
        except TimeoutError as error:
            raise httpx.ConnectTimeout(str(error) or "connecting timed out") from error
        except OSError as error:
            raise httpx.ConnectError(str(error) or type(error).__name__) from error
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock.settimeout(time_left())
                sock = self._context.wrap_socket(sock, server_hostname=self._host)
        except TimeoutError as error:
            sock.close()
            raise httpx.ConnectTimeout(str(error) or "the TLS handshake timed out") from error
        except (OSError, ssl.SSLError) as error:
            sock.close()
            raise httpx.ConnectError(str(error) or type(error).__name__) from error
        return _SyncConnection(sock)

    def _release(self, connection: _SyncConnection, reusable: bool) -> None:
        with self._lock:
            if reusable and not self._closed:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            else:
                self._drop(connection)
            self._lock.notify()

    def _drop(self, connection: _SyncConnection) -> None:
        self._open -= 1
        connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            while self._idle:
                self._drop(self._idle.pop())
