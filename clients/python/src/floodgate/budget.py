"""A retry budget: retries are allowed at most a share of the calls made lately, so that a service
that fails is not sent a second wave of retries on top of its traffic (Finagle's and linkerd's
retry budgets, as in the TypeScript and Rust clients)."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from floodgate.breaker import Clock
from floodgate.errors import ConfigError
from floodgate.request import seconds_of

_BUCKETS = 10


@dataclass(frozen=True)
class RetryBudgetConfig:
    """How many retries a budget allows. Settings out of range raise
    :class:`~floodgate.ConfigError` naming them (``retry_budget.ratio``)."""

    ratio: float = 0.1
    """The share of recent calls that may be retried, from 0 to 1."""
    min_per_second: int = 1
    """Retries allowed per second of ``window`` whatever the traffic, so that a quiet client can
    still retry (10 in the default window)."""
    window: float = 10.0
    """How far back calls and retries are counted, seconds."""

    def __post_init__(self) -> None:
        ratio = self.ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ConfigError("retry_budget.ratio", f"must be from 0 to 1 (a share of the calls), got {ratio!r}")
        floor = self.min_per_second
        if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
            raise ConfigError("retry_budget.min_per_second", f"must be a whole number >= 0, got {floor!r}")
        seconds_of(self.window, "retry_budget.window")


class _Bucket:
    __slots__ = ("calls", "retries", "span")

    def __init__(self) -> None:
        self.span = -1
        self.calls = 0
        self.retries = 0


class RetryBudget:
    """The calls and retries of the last ``window`` (ten buckets). :meth:`deposit` for every call
    sent, retries included; :meth:`withdraw` before a retry: granted while the retries of the window
    stay within ``ratio`` × the calls that were not retries, plus ``min_per_second`` × the window's
    seconds. Thread-safe."""

    def __init__(self, config: RetryBudgetConfig | None = None, clock: Clock = time.monotonic) -> None:
        self.config = config if config is not None else RetryBudgetConfig()
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets = [_Bucket() for _ in range(_BUCKETS)]
        self.granted = 0
        """Retries granted since it was made."""
        self.refused = 0
        """Retries refused since it was made."""

    def deposit(self) -> None:
        """A call was sent (a first attempt or a retry)."""
        with self._lock:
            self._current().calls += 1

    def withdraw(self) -> bool:
        """Asks for a retry: whether it may be sent."""
        with self._lock:
            bucket = self._current()
            calls = retries = 0
            for b in self._buckets:
                if b.span >= 0 and b.span <= bucket.span and bucket.span - b.span < _BUCKETS:
                    calls += b.calls
                    retries += b.retries
            # In millionths, so that 10 % of 30 calls is exactly 3 retries.
            config = self.config
            allowed = round(config.min_per_second * config.window * 1e6) + round(config.ratio * 1e6) * (calls - retries)
            ok = (retries + 1) * 1_000_000 <= allowed
            if ok:
                bucket.retries += 1
                self.granted += 1
            else:
                self.refused += 1
            return ok

    def _current(self) -> _Bucket:
        span = math.floor(self._clock() / max(self.config.window / _BUCKETS, 1e-6))
        bucket = self._buckets[span % _BUCKETS]
        if bucket.span != span:
            bucket.span, bucket.calls, bucket.retries = span, 0, 0
        return bucket


def budget_config_of(value: object) -> RetryBudgetConfig | None:
    """``True``/``None`` → the defaults, ``False`` → no budget, a :class:`RetryBudgetConfig` → it."""
    if value is None or value is True:
        return RetryBudgetConfig()
    if value is False:
        return None
    if isinstance(value, RetryBudgetConfig):
        return value
    raise ConfigError("retry_budget", f"must be a RetryBudgetConfig, True or False, got {value!r}")
