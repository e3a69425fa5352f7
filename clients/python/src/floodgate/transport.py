"""The deadline of a call, and the sync client's connections: httpx's transport on httpcore's
keep-alive pool, on a network backend of its own, and TLS. (The async client's transport is
:mod:`floodgate.http1`.)

- **A deadline over the whole call.** httpx's timeouts bound each phase of a request on its own
  (getting a connection, connecting, each write, each read), so a call could take several times its
  timeout. Each call runs in a :func:`call_scope` that holds its deadline: the sync backend gives
  every socket operation only what is left of it, so a server that is silent or answers a byte at
  a time cannot hold a decision past it; the async client bounds each call with one timer
  (:func:`within`).
- **One write per request.** httpcore writes a request's head and its body separately; the
  sync streams hold writes until the connection next reads (a request is always followed by
  reading its answer), so a request leaves in one segment, and ``TCP_NODELAY`` is set.

The scope also records whether a call's request was written at all, so that a call that ended
before it was (refused, or no connection in time) is known not to have run: :func:`call_scope`'s
``sent``.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
import ssl
import sys
import time
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from os import PathLike

import httpcore
import httpx

from floodgate.errors import ConfigError

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
_NODELAY: SocketOption = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class CallState:
    """One call's deadline (monotonic seconds) and whether its request was written."""

    __slots__ = ("deadline", "sent")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.sent = False


_CALL: contextvars.ContextVar[CallState | None] = contextvars.ContextVar("floodgate_call", default=None)


@contextmanager
def call_scope(seconds: float) -> Iterator[CallState]:
    """The calls made inside have ``seconds`` in all; the state says whether a request was sent."""
    state = CallState(time.monotonic() + seconds)
    token = _CALL.set(state)
    try:
        yield state
    finally:
        _CALL.reset(token)


T = typing.TypeVar("T")


async def within(seconds: float, work: typing.Coroutine[typing.Any, typing.Any, T]) -> T:
    """``work``, or :class:`TimeoutError` once ``seconds`` have passed (and ``work`` is cancelled):
    one timer for the whole call."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await work
    return await asyncio.wait_for(work, seconds)


def _left(timeout: float | None, exc: type[Exception]) -> float | None:
    state = _CALL.get()
    if state is None:
        return timeout
    left = state.deadline - time.monotonic()
    if left <= 0:
        raise exc("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


def mark_sent() -> None:
    """Records that the current call's request was written."""
    state = _CALL.get()
    if state is not None:
        state.sent = True


# === impl sync ===


class _Stream(httpcore.NetworkStream):
    """A socket stream whose writes wait for the next read, and whose every operation gets at
    most what is left of the call's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._pending = bytearray()

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._pending:
            self._flush(timeout)
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._pending += buffer

    def _flush(self, timeout: float | None) -> None:
        pending = bytes(self._pending)
        self._pending.clear()
        self._inner.write(pending, _left(timeout, httpcore.WriteTimeout))
        mark_sent()

    def close(self) -> None:
        self._pending.clear()
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout))
        return _Stream(inner)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        options = [*(socket_options or ()), _NODELAY]
        stream = self._inner.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout), local_address, options)
        return _Stream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# === TLS and the transports ===


def ssl_context(
    ca: str | PathLike[str] | None,
    cert: str | PathLike[str] | None,
    key: str | PathLike[str] | None,
) -> ssl.SSLContext:
    """The TLS settings of an ``https://`` client: the server verified by ``ca`` (a PEM bundle;
    the system's trusted CAs without one), and ``cert``/``key`` presented for mutual TLS. Files
    that cannot be used raise :class:`~floodgate.ConfigError` naming the setting and the file."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if ca is not None:
        try:
            context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError("ca", f"cannot use {str(ca)!r} as a CA bundle: {error}") from error
    if (cert is None) != (key is None):
        raise ConfigError(
            "client_cert" if cert is None else "client_key", "mutual TLS needs both a certificate and its key"
        )
    if cert is not None and key is not None:
        try:
            context.load_cert_chain(certfile=cert, keyfile=key)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(
                "client_cert",
                f"cannot use {str(cert)!r} with the key {str(key)!r}: {error}",
            ) from error
    context.set_alpn_protocols(["http/1.1"])
    return context


def _pool_limits(limits: httpx.Limits) -> dict[str, typing.Any]:
    return {
        "max_connections": limits.max_connections,
        "max_keepalive_connections": limits.max_keepalive_connections,
        "keepalive_expiry": limits.keepalive_expiry,
    }


class Transport(httpx.HTTPTransport):
    """httpx's transport, its pool on the corked, deadline-bounded backend."""

    def __init__(self, context: ssl.SSLContext | None, limits: httpx.Limits) -> None:
        # The pool httpx makes here is replaced below, with `context` (so its `verify` is unused).
        super().__init__(verify=False, limits=limits, trust_env=False)
        self._pool = httpcore.ConnectionPool(ssl_context=context, network_backend=_Backend(), **_pool_limits(limits))
