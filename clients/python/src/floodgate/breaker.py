"""A circuit breaker: the state machine of Floodgate's own breakers (the store's and the gateway's,
``floodgate::breaker`` in Rust) and of the TypeScript and Rust clients, so that every client opens,
probes and closes by the same rules.

- **closed**: calls go through; their outcomes are counted over a sliding ``window`` (in ten
  buckets). ``consecutive_failures`` failures with no success between them open it, as does a
  share of failures of ``failure_rate`` once ``min_calls`` were made in the window. A failure
  counts toward the streak only if its call was sent once the streak had begun: the calls in
  flight together when one stall made them all fail are one failure, not hundreds.
- **open** for ``open_for``: every call is refused at once.
- **half_open**: exactly one call goes through as a probe while the others are refused. Its
  success closes the breaker, its failure opens it for another ``open_for``. A probe that takes
  longer than ``probe_timeout`` (hung, or its caller gone) no longer holds half-open.

Time comes from ``clock`` (seconds, monotonic), so every transition is tested by hand.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from floodgate.errors import ConfigError
from floodgate.request import seconds_of

BreakerState = Literal["closed", "open", "half_open"]
"""Where a breaker is."""

Clock = Callable[[], float]
"""A monotonic clock in seconds (``time.monotonic`` unless a test moves one by hand)."""

_BUCKETS = 10


@dataclass(frozen=True)
class BreakerConfig:
    """When a breaker opens and how it comes back. Settings out of range raise
    :class:`~floodgate.ConfigError` naming them (``breaker.consecutive_failures``)."""

    consecutive_failures: int = 10
    """Failures in a row that open it."""
    failure_rate: float = 0.5
    """The share of failed calls over ``window`` that opens it, above 0 and at most 1."""
    min_calls: int = 20
    """The fewest calls in the window for the rate to count."""
    window: float = 10.0
    """How far back calls are counted, seconds."""
    open_for: float = 2.0
    """How long it stays open before one probe, seconds."""
    probe_timeout: float = 1.0
    """How long a probe may take before another call probes instead, seconds."""

    def __post_init__(self) -> None:
        for name in ("consecutive_failures", "min_calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"breaker.{name}", f"must be a whole number >= 1, got {value!r}")
        rate = self.failure_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1:
            raise ConfigError("breaker.failure_rate", f"must be above 0 and at most 1, got {rate!r}")
        for name in ("window", "open_for", "probe_timeout"):
            seconds_of(getattr(self, name), f"breaker.{name}")


@dataclass(frozen=True, slots=True)
class Admission:
    """What a call may do: go (``call``, reporting with :meth:`CircuitBreaker.record`), go as the
    probe (``probe``, reporting with :meth:`CircuitBreaker.finish_probe`), or not go (``reject``)."""

    kind: Literal["call", "probe", "reject"]
    sent: float = 0.0


class _Bucket:
    __slots__ = ("calls", "failures", "span")

    def __init__(self) -> None:
        self.span = -1
        self.calls = 0
        self.failures = 0


class CircuitBreaker:
    """The state machine (see the module's documentation). Thread-safe."""

    def __init__(
        self,
        config: BreakerConfig | None = None,
        clock: Clock = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        self.config = config if config is not None else BreakerConfig()
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        self._opened_at = 0.0
        self._probe_started: float | None = None
        self._streak = 0
        self._streak_since: float | None = None
        self._buckets = [_Bucket() for _ in range(_BUCKETS)]

    @property
    def state(self) -> BreakerState:
        """Where it is now."""
        return self._state

    def open_remaining(self) -> float | None:
        """While open: seconds until the probe may go (0 once it may); ``None`` when not open."""
        if self._state != "open":
            return None
        return max(0.0, self._opened_at + self.config.open_for - self._clock())

    def admit(self) -> Admission:
        """Whether a call may go now."""
        with self._lock:
            now = self._clock()
            if self._state == "closed":
                return Admission("call", now)
            if self._state == "open":
                if now < self._opened_at + self.config.open_for:
                    return Admission("reject")
                self._probe_started = now
                self._move("half_open")
                return Admission("probe")
            if self._probe_started is None or now >= self._probe_started + self.config.probe_timeout:
                self._probe_started = now
                return Admission("probe")
            return Admission("reject")

    def record(self, failed: bool, sent: float) -> None:
        """Counts the outcome of a closed-state call sent at ``sent`` (from its admission)."""
        with self._lock:
            now = self._clock()
            span = math.floor(now / max(self.config.window / _BUCKETS, 1e-6))
            bucket = self._buckets[span % _BUCKETS]
            if bucket.span != span:
                bucket.span, bucket.calls, bucket.failures = span, 0, 0
            bucket.calls += 1
            if not failed:
                self._streak = 0
                self._streak_since = None
                return
            bucket.failures += 1
            if self._streak_since is None:
                self._streak_since = now
                self._streak = 1
            elif sent >= self._streak_since:
                self._streak += 1
            calls = failures = 0
            for b in self._buckets:
                if b.span >= 0 and b.span <= span and span - b.span < _BUCKETS:
                    calls += b.calls
                    failures += b.failures
            config = self.config
            tripped = (
                calls >= config.min_calls and failures >= config.failure_rate * calls
            ) or self._streak >= config.consecutive_failures
            if tripped and self._state == "closed":
                self._opened_at = now
                self._move("open")

    def finish_probe(self, succeeded: bool) -> None:
        """The probe's outcome: closed again, or open for another ``open_for``."""
        with self._lock:
            self._probe_started = None
            self._streak = 0
            self._streak_since = None
            if self._state != "half_open":
                return
            if succeeded:
                for b in self._buckets:
                    b.calls = b.failures = 0
                self._move("closed")
            else:
                self._opened_at = self._clock()
                self._move("open")

    def abandon_probe(self) -> None:
        """The probe ended with no outcome (its caller gave up): the next call may probe at once."""
        with self._lock:
            self._probe_started = None

    def _move(self, to: BreakerState) -> None:
        self._state = to
        if self._on_change is not None:
            self._on_change(to)


def breaker_config_of(value: object) -> BreakerConfig | None:
    """``True``/``None`` → the defaults, ``False`` → no breaker, a :class:`BreakerConfig` → it."""
    if value is None or value is True:
        return BreakerConfig()
    if value is False:
        return None
    if isinstance(value, BreakerConfig):
        return value
    raise ConfigError("breaker", f"must be a BreakerConfig, True or False, got {value!r}")
