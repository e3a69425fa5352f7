"""Floodgate's Python client: rate-limit decisions from a Floodgate server, with a deadline on every
call, a fail mode, safe retries, a circuit breaker and reservations.

.. code-block:: python

    from floodgate import Floodgate

    floodgate = Floodgate("http://127.0.0.1:8080", deadline=0.05, fail_mode="open")
    decision = floodgate.check({"user": "u1", "route": "POST /chat"})
    if not decision.allowed:
        print("retry in", decision.retry_after, "s")

:class:`AsyncFloodgate` is the same for asyncio. The middleware are in :mod:`floodgate.asgi`
(FastAPI, Starlette), :mod:`floodgate.fastapi` (a per-route dependency), :mod:`floodgate.wsgi`
(Flask, any WSGI app) and :mod:`floodgate.django`.
"""

from floodgate.aio import AsyncFloodgate
from floodgate.breaker import BreakerConfig, BreakerState, CircuitBreaker
from floodgate.budget import RetryBudget, RetryBudgetConfig
from floodgate.client import Floodgate
from floodgate.core import __version__
from floodgate.decision import (
    Decision,
    FailMode,
    Failure,
    FailureEvent,
    Limit,
    PreviousPeriod,
    Settled,
    SimulatedDecision,
    SimulatedRequest,
    Simulation,
    Stats,
    Step,
    Usage,
)
from floodgate.errors import (
    ConfigError,
    Conflict,
    FailureReason,
    FloodgateError,
    Forbidden,
    InvalidRequest,
    NotFound,
    Problem,
    ProblemError,
    RateLimited,
    Unauthorized,
    Unavailable,
)
from floodgate.reservation import AsyncReservation, Reservation
from floodgate.retry import RetryEvent, RetryPolicy, aretry, outcome_unknown, retry, retry_after_of, surely_did_not_run
from floodgate.session import AsyncSession, Session

__all__ = [
    "AsyncFloodgate",
    "AsyncReservation",
    "AsyncSession",
    "BreakerConfig",
    "BreakerState",
    "CircuitBreaker",
    "ConfigError",
    "Conflict",
    "Decision",
    "FailMode",
    "Failure",
    "FailureEvent",
    "FailureReason",
    "Floodgate",
    "FloodgateError",
    "Forbidden",
    "InvalidRequest",
    "Limit",
    "NotFound",
    "PreviousPeriod",
    "Problem",
    "ProblemError",
    "RateLimited",
    "Reservation",
    "RetryBudget",
    "RetryBudgetConfig",
    "RetryEvent",
    "RetryPolicy",
    "Session",
    "Settled",
    "SimulatedDecision",
    "SimulatedRequest",
    "Simulation",
    "Stats",
    "Step",
    "Unauthorized",
    "Unavailable",
    "Usage",
    "__version__",
    "aretry",
    "outcome_unknown",
    "retry",
    "retry_after_of",
    "surely_did_not_run",
]
