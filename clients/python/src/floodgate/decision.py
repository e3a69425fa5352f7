"""The answers of Floodgate's calls, as typed values (times in seconds unless a name says ``_ms``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from floodgate.errors import FailureReason, RateLimited

FailMode = Literal["open", "closed"]
"""What a check decides when Floodgate gives no verdict in time: ``open`` lets the request pass,
``closed`` denies it."""

Call = Literal["check", "peek", "report", "reserve", "commit", "release", "usage", "simulate"]
"""The client's calls."""

DENYING_OUTCOMES = frozenset({"denied", "error_denied", "local_denied"})
"""The outcomes of a limit that denied the request."""
UNENFORCED_OUTCOMES = frozenset({"shadow_denied", "tagged"})
"""The outcomes of a shadow or tag rule that would have denied: the request passes."""


@dataclass(frozen=True, slots=True)
class Limit:
    """What one rule that applied decided, as the server reports it."""

    name: str
    limit: int
    remaining: int
    reset_after: float
    """Seconds until the limit is fully replenished."""
    retry_after: float | None
    """When this rule denied: seconds until the same request would pass; else ``None``."""
    allowed: bool
    outcome: str
    """``allowed``, ``denied``, ``shadow_denied``, ``tagged``, ``error_allowed``, ``error_denied``,
    ``local_allowed`` or ``local_denied``."""


@dataclass(frozen=True, slots=True)
class Failure:
    """Why the fail mode decided, and which mode it was."""

    reason: FailureReason
    mode: FailMode


@dataclass(frozen=True, slots=True)
class Decision:
    """Floodgate's answer to a check, peek or reserve, or what the fail mode decided in its place.

    ``rule``, ``limit``, ``remaining`` and ``reset_after`` are those of the rule that decided: on a
    denial the denying rule that makes the caller wait longest, when allowed the enforced rule with
    the least left (the server's own choice for its 429 body and ``RateLimit`` header); ``None``
    when no rule applied or the fail mode decided.
    """

    allowed: bool
    status: int
    """200 or 429 from the server; 0 when the fail mode decided."""
    retry_after: float | None
    """When denied: seconds until the same request can pass; ``None`` when allowed."""
    rule: str | None
    limit: int | None
    remaining: int | None
    reset_after: float | None
    degrade_to: str | None
    """The model to switch to: set on an allowed verdict whose plan is over its limit and whose
    ``overage`` degrades (``degrade_to``, also the ``floodgate-degrade`` header)."""
    limits: tuple[Limit, ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    """The rate-limit headers to pass on to your own response (lowercase names):
    ``ratelimit-policy``, ``ratelimit``, ``x-ratelimit-*``, ``retry-after``, ``floodgate-*`` —
    whatever the server's ``headers:`` style sends (never ``floodgate-reservation``)."""
    reservation: str | None = None
    """The id to commit or release: of an allowed reserve, or of a check that took concurrency
    permits (release frees them). ``None`` otherwise, and when the fail mode decided."""
    expires_at: float | None = None
    """When an allowed reserve's reservation expires unsettled, Unix seconds (the server's clock)."""
    failure: Failure | None = None
    """Set when the fail mode decided because the service gave no verdict."""

    @property
    def retry_after_header(self) -> int | None:
        """``Retry-After`` in whole seconds (rounded up, at least 1) when denied, else ``None``."""
        if self.allowed:
            return None
        return max(1, math.ceil(self.retry_after if self.retry_after is not None else 1.0))

    def raise_for_denial(self) -> Decision:
        """This decision when allowed; :class:`~floodgate.RateLimited` when denied, which
        :func:`~floodgate.retry` waits out."""
        if self.allowed:
            return self
        raise RateLimited(self.retry_after if self.retry_after is not None else 1.0, self)


@dataclass(frozen=True, slots=True)
class Settled:
    """What a commit or a release did; a retry of it answers the same. Dimension → amount."""

    reservation: str
    state: Literal["committed", "released"]
    reserved: Mapping[str, int]
    charged: Mapping[str, int]
    """What stays charged."""
    refunded: Mapping[str, int]
    """What was given back."""
    excess: Mapping[str, int]
    """What the actual cost exceeded the reservation by, charged on top."""


@dataclass(frozen=True, slots=True)
class PreviousPeriod:
    """What a quota's key counted in the calendar period before the current one."""

    used: int
    """The count, exactly as kept (not capped at the limit)."""
    period_start: float
    """Start of that period, Unix seconds."""
    period_end: float
    """Its end (exclusive): the current period's start."""


@dataclass(frozen=True, slots=True)
class Usage:
    """One rule's counter for a key, now (``GET /v1/usage``), consuming nothing."""

    rule: str
    limit: int
    used: int
    remaining: int
    period_start: float | None
    """Start of the current window or period, Unix seconds (the store's clock); ``None`` for
    buckets and concurrency."""
    period_end: float | None
    reset_after: float
    """Seconds until the counter is fully replenished with no further traffic."""
    previous: PreviousPeriod | None = None
    """For a quota: what the key counted in the calendar period before the current one; ``None``
    for the other algorithms."""


@dataclass(frozen=True, slots=True)
class SimulatedRequest:
    """One request of a simulation: when it arrives (ms of simulated time) and its cost."""

    at_ms: int
    cost: int = 1


@dataclass(frozen=True, slots=True)
class SimulatedDecision:
    """One simulated request's decision (milliseconds, as the playground writes them)."""

    at_ms: int
    allowed: bool
    remaining: int
    reset_after_ms: int
    retry_after_ms: int | None
    """``None`` when allowed, or when the cost is above what the limit ever grants at once."""


@dataclass(frozen=True, slots=True)
class Simulation:
    """The answer of ``POST /v1/simulate``: one decision per request, in the order given."""

    algorithm: str
    limit: int
    decisions: tuple[SimulatedDecision, ...]
    levels: tuple[Mapping[str, object], ...] | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One agent step: allowed or not, and how many steps are left."""

    allowed: bool
    remaining: int | None
    """Steps left in the tightest budget that applied; ``None`` when none applied."""
    decision: Decision


@dataclass(frozen=True, slots=True)
class Stats:
    """What a client counted since it was made."""

    calls: int
    """Calls sent (a call the open breaker refused is not)."""
    failed_open: int
    """Checks, peeks and reserves allowed by the ``open`` fail mode."""
    failed_closed: int
    """Checks, peeks and reserves denied by the ``closed`` fail mode."""
    failures: Mapping[FailureReason, int]
    """Calls without a verdict, by reason (``breaker_open``: refused by the breaker, not sent)."""
    breaker_opened: int
    breaker_half_opened: int
    breaker_closed: int
    retries: int
    """Retries the retry budget granted."""
    retries_refused: int
    """Retries the retry budget refused (the error was raised instead)."""


@dataclass(frozen=True, slots=True)
class FailureEvent:
    """A call that got no verdict: which, why, what the fail mode decided (``None`` for calls that
    raise instead), and the error."""

    call: Call
    reason: FailureReason
    mode: FailMode | None
    error: Exception
