"""What the sync and the async client share, apart from sending: their settings, counters, circuit
breaker and retry budget, how a failure is named, counted and decided by the fail mode. Both
clients are thin over this: admit, send, read the answer with :mod:`floodgate.wire`."""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from os import PathLike
from urllib.parse import quote, urlencode

import httpx

from floodgate.breaker import Admission, BreakerConfig, BreakerState, CircuitBreaker, Clock, breaker_config_of
from floodgate.budget import RetryBudget, RetryBudgetConfig, budget_config_of
from floodgate.decision import Call, Decision, FailMode, Failure, FailureEvent, Stats
from floodgate.errors import FAILURE_REASONS, ConfigError, FailureReason, InvalidRequest, Unavailable
from floodgate.request import cost_of, deadline_of, fail_mode_of, seconds_of
from floodgate.retry import tls_failure
from floodgate.transport import ssl_context

__version__ = "0.1.0"

DEFAULT_DEADLINE = 0.05
"""A call's deadline unless told otherwise: 50 ms."""
SIMULATE_DEADLINE = 10.0
"""``simulate``'s deadline unless told otherwise: a playground call, never on a request's path."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered a call: the status, the headers (lowercase names), the body."""

    status: int
    headers: list[tuple[str, str]]
    content: bytes

    def header_map(self) -> dict[str, str]:
        return dict(self.headers)


class Pass:
    """A call the breaker let through: report whether it failed, or that its caller gave up."""

    __slots__ = ("_admission", "_breaker")

    def __init__(self, breaker: CircuitBreaker | None, admission: Admission | None) -> None:
        self._breaker = breaker
        self._admission = admission

    def finish(self, failed: bool) -> None:
        breaker, admission = self._breaker, self._admission
        if breaker is None or admission is None:
            return
        if admission.kind == "probe":
            breaker.finish_probe(not failed)
        else:
            breaker.record(failed, admission.sent)

    def abandon(self) -> None:
        if self._breaker is not None and self._admission is not None and self._admission.kind == "probe":
            self._breaker.abandon_probe()


_FREE_PASS = Pass(None, None)


@dataclass(frozen=True)
class Settings:
    """A client's settings, checked (see :class:`~floodgate.Floodgate` for each)."""

    url: str
    host: str
    port: int
    deadline: float
    fail_mode: FailMode
    fail_closed_retry_after: float
    headers: Mapping[str, str]
    tls: object
    limits: httpx.Limits


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def settings_of(
    url: object,
    *,
    deadline: object,
    fail_mode: object,
    fail_closed_retry_after: object,
    token: object,
    headers: object,
    ca: str | PathLike[str] | None,
    client_cert: str | PathLike[str] | None,
    client_key: str | PathLike[str] | None,
    max_connections: object,
) -> Settings:
    """The settings of a client, or :class:`ConfigError` naming the first that cannot be used."""
    if not isinstance(url, str) or url == "":
        raise ConfigError("url", "is required, e.g. http://127.0.0.1:8080")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        raise ConfigError("url", f"{url!r} is not a URL: {error}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError("url", f"must be http:// or https:// with a host, got {url!r}")
    if parsed.scheme == "http" and (ca is not None or client_cert is not None or client_key is not None):
        raise ConfigError("ca", "TLS settings need an https:// url")
    try:
        mode = fail_mode_of(fail_mode, "client")
    except InvalidRequest:
        raise ConfigError("fail_mode", f"must be 'open' or 'closed', got {fail_mode!r}") from None
    sent: dict[str, str] = {"content-type": "application/json", "user-agent": f"floodgate-python/{__version__}"}
    if token is not None:
        if not isinstance(token, str) or token.strip() == "" or not token.isprintable() or not _latin1(token):
            raise ConfigError("token", "must be a non-empty printable string (an auth client's bearer token)")
        sent["authorization"] = f"Bearer {token}"
    if headers is not None:
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ConfigError("headers", "must be a mapping of header name → string")
        for name, value in headers.items():
            if not _TOKEN.fullmatch(name) or any(ch in value for ch in "\r\n\0") or not _latin1(value):
                raise ConfigError("headers", f"{name!r}: {value!r} is not a header a request can carry")
        sent.update({k.lower(): v for k, v in headers.items()})
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ConfigError("max_connections", f"must be a whole number >= 1, got {max_connections!r}")
    return Settings(
        url=url.rstrip("/"),
        host=parsed.host,
        port=parsed.port or (443 if parsed.scheme == "https" else 80),
        deadline=DEFAULT_DEADLINE if deadline is None else seconds_of(deadline, "deadline"),
        fail_mode=mode,
        fail_closed_retry_after=seconds_of(fail_closed_retry_after, "fail_closed_retry_after"),
        headers=sent,
        tls=ssl_context(ca, client_cert, client_key) if parsed.scheme == "https" else None,
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=30.0
        ),
    )


class Core:
    """A client's shared state: settings, counters, breaker and budget."""

    def __init__(
        self,
        settings: Settings,
        *,
        breaker: BreakerConfig | bool,
        retry_budget: RetryBudgetConfig | bool,
        on_failure: Callable[[FailureEvent], None] | None,
        clock: Clock,
    ) -> None:
        self.settings = settings
        self.on_failure = on_failure
        self.lock = threading.Lock()
        self.calls = 0
        self.failed_open = 0
        self.failed_closed = 0
        self.failures: dict[FailureReason, int] = dict.fromkeys(FAILURE_REASONS, 0)
        self.transitions: dict[str, int] = {"open": 0, "half_open": 0, "closed": 0}
        breaker_config = breaker_config_of(breaker)
        self.breaker = None if breaker_config is None else CircuitBreaker(breaker_config, clock, self._breaker_moved)
        budget_config = budget_config_of(retry_budget)
        self.budget = None if budget_config is None else RetryBudget(budget_config, clock)
        self.urls = {
            call: httpx.URL(f"{settings.url}/v1/{call}")
            for call in ("check", "peek", "report", "reserve", "commit", "release", "usage", "simulate")
        }
        self.urls["healthz"] = httpx.URL(f"{settings.url}/healthz")
        self.targets = {call: url.raw_path for call, url in self.urls.items()}
        netloc = httpx.URL(settings.url).netloc
        self.head_block = (
            b"Host: "
            + netloc
            + b"\r\n"
            + b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in settings.headers.items())
        )

    def _breaker_moved(self, to: BreakerState) -> None:
        self.transitions[to] += 1

    @property
    def breaker_state(self) -> BreakerState | None:
        return None if self.breaker is None else self.breaker.state

    def deadline(self, deadline: object, call: str) -> float:
        """A call's deadline in seconds: the client's unless given."""
        return self.settings.deadline if deadline is None else deadline_of(deadline, call)

    def message(self, method: str, target: str, body: bytes | None, params: Mapping[str, str] | None) -> bytes:
        """The whole HTTP/1.1 request of one call (the async client's), head and body."""
        path = self.targets[target]
        if params:
            path += b"?" + urlencode(params, quote_via=quote).encode("ascii")
        content = body or b""
        return b"%s %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            method.encode("ascii"),
            path,
            self.head_block,
            len(content),
            content,
        )

    def fail_mode(self, mode: object, call: str) -> FailMode:
        """A call's fail mode: the client's unless given."""
        return self.settings.fail_mode if mode is None else fail_mode_of(mode, call)

    def admit(self, call: Call) -> Pass:
        """Whether the breaker lets the call go: a pass to report its outcome with, counted as a
        call sent. Raises the ``breaker_open`` :class:`Unavailable` of a call it refuses."""
        breaker = self.breaker
        if breaker is None:
            self.sent()
            return _FREE_PASS
        admission = breaker.admit()
        if admission.kind == "reject":
            left = breaker.open_remaining()
            detail = (
                f"the circuit breaker is half-open and another call is its probe: {call} not sent"
                if left is None
                else f"the circuit breaker is open after failed calls: {call} not sent; "
                f"the next call probes in {left * 1000:.0f} ms"
            )
            raise Unavailable("breaker_open", detail, not_sent=True)
        self.sent()
        return Pass(breaker, admission)

    def sent(self) -> None:
        with self.lock:
            self.calls += 1
        if self.budget is not None:
            self.budget.deposit()

    def unavailable(self, call: Call, error: Exception, deadline: float, sent: bool) -> Unavailable:
        """The :class:`Unavailable` of a call that could not be made or finished: ``error`` is
        httpx's, or the :class:`TimeoutError` of the call's deadline; ``sent`` whether its request
        was written (if not, it surely did not run)."""
        url = self.settings.url
        if tls_failure(error):
            return Unavailable(
                "tls", f"the TLS handshake with floodgate at {url} failed: {_root(error)}", not_sent=True
            )
        if isinstance(error, (httpx.TimeoutException, TimeoutError)):
            return Unavailable(
                "deadline", f"floodgate gave no answer to {call} within {deadline * 1000:g} ms", not_sent=not sent
            )
        if isinstance(error, httpx.ConnectError) or not sent:
            return Unavailable("unreachable", f"floodgate at {url} is unreachable ({_root(error)})", not_sent=True)
        return Unavailable(
            "unreachable", f"the connection to floodgate at {url} was lost during {call} ({_root(error)})"
        )

    def count(self, call: Call, error: Unavailable, mode: FailMode | None) -> None:
        """Counts a call without a verdict, and tells ``on_failure``."""
        with self.lock:
            self.failures[error.reason] += 1
            if mode == "open":
                self.failed_open += 1
            elif mode == "closed":
                self.failed_closed += 1
        if self.on_failure is not None:
            self.on_failure(FailureEvent(call, error.reason, mode, error))

    def failed_decision(self, call: Call, error: Unavailable, mode: FailMode) -> Decision:
        """What the fail mode decides in place of a verdict, counted."""
        self.count(call, error, mode)
        allowed = mode == "open"
        retry_after = None if allowed else self.settings.fail_closed_retry_after
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["retry-after"] = str(max(1, -int(-retry_after // 1)))
        return Decision(
            allowed=allowed,
            status=0,
            retry_after=retry_after,
            rule=None,
            limit=None,
            remaining=None,
            reset_after=None,
            degrade_to=None,
            headers=headers,
            failure=Failure(error.reason, mode),
        )

    def settle_delay(self, error: Unavailable, attempt: int, attempts: int) -> float | None:
        """The wait before retrying a commit or release that got no answer (idempotent on the
        server: a retry settles nothing twice), or ``None`` when it is not retried: attempts spent,
        the breaker open, a TLS failure, or the retry budget refusing. Full jitter below
        ``min(1 s, 25 ms × 2^attempt)``, at least the ``Retry-After`` asked (up to 60 s)."""
        if attempt >= attempts or error.reason in ("breaker_open", "tls"):
            return None
        if error.retry_after is not None and error.retry_after > 60:
            return None
        if self.budget is not None and not self.budget.withdraw():
            return None
        return max(random.random() * min(1.0, 0.025 * 2.0**attempt), error.retry_after or 0.0)

    def stats(self) -> Stats:
        with self.lock:
            return Stats(
                calls=self.calls,
                failed_open=self.failed_open,
                failed_closed=self.failed_closed,
                failures=dict(self.failures),
                breaker_opened=self.transitions["open"],
                breaker_half_opened=self.transitions["half_open"],
                breaker_closed=self.transitions["closed"],
                retries=0 if self.budget is None else self.budget.granted,
                retries_refused=0 if self.budget is None else self.budget.refused,
            )


def _root(error: BaseException) -> str:
    """The innermost cause's message (``[Errno 111] Connection refused``)."""
    seen = error
    for _ in range(6):
        nxt = seen.__cause__ or seen.__context__
        if nxt is None:
            break
        seen = nxt
    return str(seen) or type(seen).__name__


def attempts_of(attempts: object, call: str) -> int:
    """A settlement's retries: a whole number from 0."""
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise InvalidRequest(f"{call}: attempts must be a whole number >= 0, got {attempts!r}")
    return attempts


def reserve_costs(cost: object, costs: object, tokens: object) -> tuple[object, object, dict[str, int]]:
    """``reserve``'s ``cost``, ``costs`` and ``tokens`` as the body's ``cost`` and ``costs``, and the
    dimensions reserved. ``tokens=N`` is ``costs={"tokens": N}`` (with ``cost``, its ``requests``)."""
    if tokens is not None:
        merged: dict[str, object] = {}
        if costs is not None:
            if not isinstance(costs, Mapping):
                raise InvalidRequest("reserve: costs must be a mapping of dimension → whole number")
            merged.update(costs)
        if "tokens" in merged:
            raise InvalidRequest("reserve: give tokens or costs['tokens'], not both")
        merged["tokens"] = tokens
        if cost is not None:
            if "requests" in merged:
                raise InvalidRequest("reserve: give cost or costs['requests'], not both")
            merged["requests"] = cost_of(cost, "reserve")
        cost, costs = None, merged
    if costs is not None and isinstance(costs, Mapping):
        dimensions = {str(k): v for k, v in costs.items() if isinstance(v, int)}
    else:
        dimensions = {"requests": cost if isinstance(cost, int) else 1}
    return cost, costs, dimensions


def commit_costs(actual: object, dimensions: Mapping[str, int]) -> object:
    """A reservation's commit: a mapping as given, or a whole number for its ``tokens`` dimension
    (else its only one)."""
    if actual is None or isinstance(actual, Mapping):
        return actual
    if isinstance(actual, bool) or not isinstance(actual, int):
        raise InvalidRequest(f"commit: the actual cost must be a whole number or a mapping, got {actual!r}")
    if "tokens" in dimensions:
        return {"tokens": actual}
    if len(dimensions) == 1:
        return {next(iter(dimensions)): actual}
    raise InvalidRequest(
        f"commit: the reservation holds {sorted(dimensions)}: give the actual cost per dimension as a mapping"
    )
