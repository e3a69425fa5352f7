"""Test helpers: the real ``floodgate`` binary started on a free loopback port with a temporary
configuration, and servers that misbehave on purpose — a listener that accepts and never answers
(a black hole), one that answers a byte at a time, a proxy that cuts an answer, a tiny HTTP server
answering scripted statuses. Each runs on its own thread and is stopped by the test that made it.

The binary is ``$FLOODGATE_BIN``, else ``target/debug/floodgate`` of this repository; missing, the
tests fail (they never skip) and say how to build it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[3]
HANG_GUARD = 60.0
"""How long a test waits for an event that should come before it fails instead of hanging. It
says nothing about how fast anything is."""


def floodgate_binary() -> Path:
    """The ``floodgate`` binary, or an error saying how to build it."""
    path = Path(os.environ.get("FLOODGATE_BIN", REPO / "target" / "debug" / "floodgate"))
    if not path.is_file():
        raise RuntimeError(
            f"the floodgate binary is missing at {path}: build it with "
            "`cargo build -p floodgate-server --bin floodgate` (or set FLOODGATE_BIN to one)"
        )
    return path


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(condition: Callable[[], bool], what: str, timeout: float = HANG_GUARD) -> None:
    """Polls ``condition`` until it holds; fails after ``timeout`` (a hang guard, not a latency)."""
    until = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > until:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


class RunningFloodgate:
    """``floodgate serve`` with a configuration, on a port that stays the same across restarts."""

    def __init__(
        self,
        config: str,
        *,
        port: int | None = None,
        env: dict[str, str] | None = None,
        scheme: str = "http",
        args: tuple[str, ...] = (),
    ) -> None:
        self.binary = floodgate_binary()
        self._dir = tempfile.TemporaryDirectory(prefix="floodgate-py-")
        self.config_path = Path(self._dir.name) / "floodgate.yaml"
        self.config_path.write_text(config)
        self.port = port if port is not None else free_port()
        self.grpc_port = free_port()
        self.env = {**os.environ, "RUST_LOG": "warn", **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.scheme = scheme
        self.args = args
        self.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(Path(self._dir.name) / "floodgate.log", "wb")  # noqa: SIM115 - kept for the process
        self.process = subprocess.Popen(
            [
                str(self.binary),
                "serve",
                "--config",
                str(self.config_path),
                "--http",
                f"127.0.0.1:{self.port}",
                "--grpc",
                f"127.0.0.1:{self.grpc_port}",
                "--no-watch",
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=self.env,
        )
        log.close()
        self._wait_listening()

    def _wait_listening(self) -> None:
        process = self.process
        assert process is not None

        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"floodgate exited with {process.returncode} at start:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError:
                return False
            if self.scheme == "https":
                return True
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                    return bool(answer.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        wait_for(up, f"floodgate to listen on port {self.port}")

    def advance_clock(self, ms: int) -> None:
        """Moves the store's manual clock (a server started with ``--manual-clock``) by ``ms``."""
        request = urllib.request.Request(
            f"{self.url}/admin/clock",
            data=f'{{"advance_ms": {ms}}}'.encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.status == 200, answer.read()

    def log(self) -> str:
        return (Path(self._dir.name) / "floodgate.log").read_text(errors="replace")

    def stop(self) -> None:
        """Kills the server and waits for it: the port then refuses connections."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Starts it again on the same port and configuration (a fresh memory store)."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()


@contextmanager
def floodgate(config: str, **kwargs: Any) -> Iterator[RunningFloodgate]:
    server = RunningFloodgate(config, **kwargs)
    try:
        yield server
    finally:
        server.close()


class _Loop:
    """A thread running a selector loop over a listening socket, until closed."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ, None)
        self._stopping = False
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping:
            for key, _ in self._selector.select(timeout=0.05):
                if key.fileobj is self.listener:
                    try:
                        conn, _ = self.listener.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    with self._lock:
                        self._sockets.add(conn)
                    self.accepted(conn)
                    self._selector.register(conn, selectors.EVENT_READ, None)
                else:
                    conn = key.fileobj  # type: ignore[assignment]
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        self._drop(conn)
                    else:
                        self.received(conn, data)
            self.tick()
        for conn in list(self._sockets):
            self._drop(conn)
        self._selector.close()
        self.listener.close()

    def _drop(self, conn: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        with self._lock:
            self._sockets.discard(conn)
        conn.close()

    def accepted(self, conn: socket.socket) -> None:
        pass

    def received(self, conn: socket.socket, data: bytes) -> None:
        pass

    def tick(self) -> None:
        pass

    def close(self) -> None:
        self._stopping = True
        self._thread.join()


class SilentServer(_Loop):
    """A listener that accepts connections, reads, and never answers: a service up but late (a
    black hole)."""

    def __init__(self) -> None:
        self._accepted = 0
        self._requests = 0
        super().__init__()

    def accepted(self, conn: socket.socket) -> None:
        self._accepted += 1

    def received(self, conn: socket.socket, data: bytes) -> None:
        self._requests += data.count(b" HTTP/1.1\r\n")

    def accepted_count(self) -> int:
        return self._accepted

    def requests(self) -> int:
        """HTTP requests received so far (request lines read), none of them answered."""
        return self._requests


class DrippingServer(_Loop):
    """Answers every request with a status line and then one header byte at a time, forever: each
    read of the client gets a byte before its timeout, so only a deadline over the whole call ends
    it."""

    def __init__(self) -> None:
        self._dripping: dict[socket.socket, int] = {}
        self._next = 0.0
        super().__init__()

    def received(self, conn: socket.socket, data: bytes) -> None:
        if conn not in self._dripping:
            self._dripping[conn] = 0
            conn.send(b"HTTP/1.1 200 OK\r\n")

    def tick(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 0.005
        for conn in list(self._dripping):
            try:
                conn.send(b"x-drip: " if self._dripping[conn] == 0 else b"a")
                self._dripping[conn] += 1
            except OSError:
                del self._dripping[conn]


class CuttingProxy(_Loop):
    """Forwards HTTP/1.1 requests to ``upstream``; the first ``cuts`` requests whose request line
    contains ``path`` are forwarded and answered upstream, but their answer is dropped and the
    client's connection closed — a lost answer. Counts what it forwarded."""

    def __init__(self, upstream_port: int, path: str, cuts: int = 1) -> None:
        self.upstream_port = upstream_port
        self.path = path.encode()
        self.cuts_left = cuts
        self.forwarded: list[bytes] = []
        self.cut: list[bytes] = []
        self._buffers: dict[socket.socket, bytes] = {}
        super().__init__()

    def received(self, conn: socket.socket, data: bytes) -> None:
        buffer = self._buffers.get(conn, b"") + data
        head, sep, rest = buffer.partition(b"\r\n\r\n")
        if not sep:
            self._buffers[conn] = buffer
            return
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if len(rest) < length:
            self._buffers[conn] = buffer
            return
        self._buffers[conn] = rest[length:]
        request = head + sep + rest[:length]
        request_line = head.split(b"\r\n", 1)[0]
        answer = self._forward(request)
        self.forwarded.append(request_line)
        if self.path in request_line and self.cuts_left > 0:
            self.cuts_left -= 1
            self.cut.append(request_line)
            self._drop(conn)
            return
        conn.setblocking(True)
        conn.sendall(answer)
        conn.setblocking(False)

    def _forward(self, request: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10) as up:
            # One request per upstream connection: the answer ends when upstream closes.
            head, sep, body = request.partition(b"\r\n\r\n")
            up.sendall(head + b"\r\nconnection: close" + sep + body)
            chunks = []
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        answer = b"".join(chunks)
        # Keep the client's connection open: drop upstream's `connection: close`.
        return answer.replace(b"connection: close\r\n", b"")


class ScriptedServer:
    """A tiny real HTTP server answering each request with the next of ``answers`` (status,
    headers, body), then with the last one; records the paths it was asked."""

    def __init__(self, answers: list[tuple[int, dict[str, str], bytes]]) -> None:
        self.answers = list(answers)
        self.paths: list[str] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                if length:
                    self.rfile.read(length)
                scripted.paths.append(self.path)
                status, headers, body = scripted.answers.pop(0) if len(scripted.answers) > 1 else scripted.answers[0]
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = _answer
            do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


@asynccontextmanager
async def asgi(app: Any, peer: tuple[str, int] = ("127.0.0.1", 40000)) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client calling ``app`` through httpx's ASGI transport from ``peer``, the app's
    lifespan started before and shut down after (so that what the app opened is closed)."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def receive() -> dict[str, Any]:
        return await inbox.get()

    async def send(message: dict[str, Any]) -> None:
        await outbox.put(message)

    running = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        transport = httpx.ASGITransport(app=app, client=peer)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            yield http
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await running


class RawServer(_Loop):
    """Answers each HTTP request (its head and its Content-Length body read) with the next of
    ``answers``, raw bytes, then with the last one; an answer given as ``(bytes, True)`` closes the
    connection after it. Counts the connections it accepted and the requests it read."""

    def __init__(self, answers: list[bytes | tuple[bytes, bool]]) -> None:
        self.answers = list(answers)
        self.connections = 0
        self.requests: list[bytes] = []
        self._buffers: dict[socket.socket, bytes] = {}
        super().__init__()

    def accepted(self, conn: socket.socket) -> None:
        self.connections += 1

    def received(self, conn: socket.socket, data: bytes) -> None:
        buffer = self._buffers.get(conn, b"") + data
        while True:
            head, sep, rest = buffer.partition(b"\r\n\r\n")
            if not sep:
                break
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(rest) < length:
                break
            buffer = rest[length:]
            self.requests.append(head.split(b"\r\n", 1)[0])
            answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            raw, close = answer if isinstance(answer, tuple) else (answer, False)
            conn.setblocking(True)
            conn.sendall(raw)
            conn.setblocking(False)
            if close:
                self._drop(conn)
                return
        self._buffers[conn] = buffer
