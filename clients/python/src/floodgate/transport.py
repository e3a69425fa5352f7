"""What the clients' transports (:mod:`floodgate.http1`) share: the deadline of a call, and TLS.

httpx's timeouts bound each phase of a request on its own (getting a connection, connecting, each
write, each read), so a call could take several times its timeout. Each call here runs in a
:func:`call_scope` holding its deadline: the sync transport gives every socket operation only what
is left of it (:func:`seconds_left`), so a server that is silent or answers a byte at a time cannot
hold a decision past it; the async client bounds each call with one timer (:func:`within`). The
scope also records whether the call's request was written at all (:func:`mark_sent`), so that a
call that ended before it was (refused, or no connection in time) is known not to have run.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
import ssl
import sys
import time
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from os import PathLike

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


def seconds_left() -> float | None:
    """What is left of the current call's deadline, seconds (``None`` outside a call)."""
    state = _CALL.get()
    return None if state is None else state.deadline - time.monotonic()


def mark_sent() -> None:
    """Records that the current call's request was written."""
    state = _CALL.get()
    if state is not None:
        state.sent = True


# === TLS ===


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
