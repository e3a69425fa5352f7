"""The HTTP connections under the clients: httpx's pooled keep-alive transports, with a deadline
that bounds a whole call, and TLS.

httpx's timeouts bound each phase of a request (getting a connection, connecting, each write, each
read) on its own, so a call could take several times its timeout. Here the network backend under
httpcore's pool gives every socket operation only what is left of the call's deadline — set for
the duration of a call with :func:`deadline_scope` — so that no call waits longer, whatever the
server does (silent, or answering a byte at a time).
"""

from __future__ import annotations

import contextvars
import ssl
import time
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from os import PathLike

import httpcore
import httpx

from floodgate.errors import ConfigError

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("floodgate_deadline", default=None)

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


@contextmanager
def deadline_scope(seconds: float) -> Iterator[None]:
    """Every socket operation of the calls made inside gets at most what is left of ``seconds``."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, exc: type[Exception]) -> float | None:
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise exc("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


# === impl sync ===


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
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
        stream = self._inner.connect_tcp(
            host, port, _left(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _Stream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# === impl async ===


class _AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        inner = await self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout))
        return _AsyncStream(inner)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(
            host, port, _left(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _AsyncStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


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
    """httpx's transport whose pool runs on the deadline-bounded network backend."""

    def __init__(self, context: ssl.SSLContext | None, limits: httpx.Limits) -> None:
        super().__init__(verify=context if context is not None else True, limits=limits, trust_env=False)
        self._pool = httpcore.ConnectionPool(ssl_context=context, network_backend=_Backend(), **_pool_limits(limits))


class AsyncTransport(httpx.AsyncHTTPTransport):
    """httpx's async transport whose pool runs on the deadline-bounded network backend."""

    def __init__(self, context: ssl.SSLContext | None, limits: httpx.Limits) -> None:
        super().__init__(verify=context if context is not None else True, limits=limits, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context, network_backend=_AsyncBackend(), **_pool_limits(limits)
        )
