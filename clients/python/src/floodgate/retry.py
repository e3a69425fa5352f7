"""Retries of calls that surely did not run, with exponential backoff and full jitter, honouring
``Retry-After`` — for your own calls (an LLM API, a tool) and for Floodgate's.

A call is retried only when its error says it surely did not run — a refused connection, a 429,
a 503 that carries ``Retry-After`` (the server declined it and said when to come back), a denial
turned into :class:`~floodgate.RateLimited` — or, when the caller marks the call idempotent, when
its outcome is unknown (a timeout, a connection lost mid-call). Any other error is raised at once.
:meth:`Floodgate.retry <floodgate.Floodgate.retry>` runs the same within the client's retry budget.
"""

from __future__ import annotations

import asyncio
import math
import random as _random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

from floodgate.budget import RetryBudget
from floodgate.errors import ConfigError, RateLimited, Unavailable
from floodgate.request import seconds_of
from floodgate.wire import retry_after_seconds

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How :func:`retry` retries: at most ``attempts`` times after the first call, waiting a random
    time below ``min(max_backoff, base × 2^n)`` (full jitter) before retry ``n + 1``, and at least
    what the error's ``Retry-After`` asks."""

    attempts: int = 2
    """Retries after the first call (so at most ``attempts + 1`` calls)."""
    base: float = 0.1
    """The first backoff ceiling, seconds."""
    max_backoff: float = 2.0
    """The largest backoff ceiling, seconds."""
    jitter: bool = True
    """Full jitter (a uniformly random wait below the ceiling); ``False``: exactly the ceiling."""
    idempotent: bool = False
    """The call may run twice: an error with an unknown outcome (a timeout, a connection lost
    mid-call) may be retried."""
    max_retry_after: float = 60.0
    """A ``Retry-After`` longer than this (seconds) is not waited for: the error is raised."""

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 0:
            raise ConfigError("retry.attempts", f"must be a whole number >= 0, got {self.attempts!r}")
        for name in ("base", "max_backoff", "max_retry_after"):
            seconds_of(getattr(self, name), f"retry.{name}")

    def backoff(self, attempt: int, random: Callable[[], float] = _random.random) -> float:
        """The wait (seconds) before retry ``attempt + 1``, before any ``Retry-After``."""
        ceiling = min(self.max_backoff, self.base * 2.0 ** min(attempt, 62))
        return random() * ceiling if self.jitter else ceiling


@dataclass(frozen=True, slots=True)
class RetryEvent:
    """A retry about to be made: its number (1 for the first retry), the wait, and the error."""

    attempt: int
    delay: float
    error: BaseException


def _status(error: BaseException) -> int | None:
    if isinstance(error, httpx.HTTPStatusError):
        return error.response.status_code
    for name in ("status_code", "status"):
        value = getattr(error, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    response = getattr(error, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _header(error: BaseException, name: str) -> str | None:
    for holder in (error, getattr(error, "response", None)):
        headers = getattr(holder, "headers", None)
        getter = getattr(headers, "get", None)
        if callable(getter):
            value = getter(name)
            if isinstance(value, str):
                return value
    return None


def retry_after_of(error: BaseException) -> float | None:
    """How long the error asks to wait, seconds: its ``retry_after`` (:class:`RateLimited`,
    :class:`Unavailable`, or any error with such a number), or its ``Retry-After`` header (seconds
    or an HTTP date) found on ``error.headers`` or ``error.response.headers``."""
    value = getattr(error, "retry_after", None)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return retry_after_seconds(_header(error, "retry-after"))


def tls_failure(error: BaseException) -> bool:
    """Whether a TLS error (:class:`ssl.SSLError`) is among the error's causes."""
    seen: BaseException | None = error
    for _ in range(6):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def surely_did_not_run(error: BaseException) -> bool:
    """Whether the error's call surely did not run: a refused connection (not a TLS failure, which
    a retry meets again), a 429, a 503 with ``Retry-After``, a denial. A call the open breaker
    refused did not run either, but is not retried: the breaker decides when to try again."""
    if isinstance(error, RateLimited):
        return True
    if isinstance(error, Unavailable):
        if error.not_sent:
            return error.reason not in ("breaker_open", "tls")
        return error.status == 429 or (error.status == 503 and error.retry_after is not None)
    if isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return not tls_failure(error)
    if isinstance(error, ConnectionRefusedError):
        return True
    status = _status(error)
    if status == 429:
        return True
    return status == 503 and retry_after_of(error) is not None


def outcome_unknown(error: BaseException) -> bool:
    """Whether the error leaves its call's outcome unknown: a timeout, a connection lost mid-call,
    a 5xx from Floodgate."""
    if isinstance(error, Unavailable):
        return not error.not_sent and error.reason in ("deadline", "unreachable", "server_error")
    if isinstance(error, (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return True
    return isinstance(error, (TimeoutError, asyncio.TimeoutError, ConnectionResetError, BrokenPipeError))


def _plan(
    error: BaseException,
    attempt: int,
    policy: RetryPolicy,
    budget: RetryBudget | None,
    random: Callable[[], float],
) -> float | None:
    """The wait before retrying after ``error``, or ``None`` when it is not retried."""
    retryable = surely_did_not_run(error) or (policy.idempotent and outcome_unknown(error))
    if not retryable or attempt >= policy.attempts:
        return None
    asked = retry_after_of(error)
    if asked is not None and asked > policy.max_retry_after:
        return None
    if budget is not None and not budget.withdraw():
        return None
    return max(policy.backoff(attempt, random), asked or 0.0)


def retry(
    call: Callable[[], T],
    policy: RetryPolicy | None = None,
    *,
    budget: RetryBudget | None = None,
    on_retry: Callable[[RetryEvent], None] | None = None,
    sleep: Callable[[float], object] = time.sleep,
    random: Callable[[], float] = _random.random,
) -> T:
    """Calls ``call`` and retries it as ``policy`` says (see the module's documentation); the
    error of the last attempt is raised. ``budget``, when given, is asked before each retry: a
    retry it refuses raises the error at once. ``sleep`` and ``random`` are for tests."""
    policy = policy if policy is not None else RetryPolicy()
    attempt = 0
    while True:
        try:
            return call()
        except Exception as error:
            delay = _plan(error, attempt, policy, budget, random)
            if delay is None:
                raise
            attempt += 1
            if on_retry is not None:
                on_retry(RetryEvent(attempt, delay, error))
        sleep(delay)


async def aretry(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy | None = None,
    *,
    budget: RetryBudget | None = None,
    on_retry: Callable[[RetryEvent], None] | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    random: Callable[[], float] = _random.random,
) -> T:
    """:func:`retry` for coroutines: ``call`` is a function returning an awaitable."""
    policy = policy if policy is not None else RetryPolicy()
    attempt = 0
    while True:
        try:
            return await call()
        except Exception as error:
            delay = _plan(error, attempt, policy, budget, random)
            if delay is None:
                raise
            attempt += 1
            if on_retry is not None:
                on_retry(RetryEvent(attempt, delay, error))
        await sleep(delay)
