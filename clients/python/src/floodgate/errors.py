"""What can go wrong with a call to Floodgate, as types to branch on.

Being limited is a result (a :class:`~floodgate.Decision` with ``allowed`` false), not an error.
The errors are for requests that can never succeed as written (:class:`InvalidRequest`, the
caller's bug, never hidden by the fail mode), for answers about a reservation (:class:`NotFound`,
:class:`Conflict`), for refused credentials (:class:`Unauthorized`, :class:`Forbidden`), for
outages (:class:`Unavailable`, raised only by calls that have no fail mode to fall back on), and
for a denial the caller chose to turn into an error (:class:`RateLimited`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from floodgate.decision import Decision

FailureReason = Literal["unreachable", "deadline", "server_error", "breaker_open", "tls"]
"""Why a call got no verdict from Floodgate.

- ``unreachable``: the service could not be reached (connection refused, reset before an answer);
- ``deadline``: it did not answer within the call's deadline;
- ``server_error``: it answered with a 5xx (``503 store-unavailable``) or a body that is no answer;
- ``breaker_open``: the circuit breaker is open, so the call was not sent;
- ``tls``: the TLS handshake failed (a certificate the CA bundle does not verify, a client
  certificate the server requires and refused or did not get).
"""

FAILURE_REASONS: tuple[FailureReason, ...] = (
    "unreachable",
    "deadline",
    "server_error",
    "breaker_open",
    "tls",
)


@dataclass(frozen=True)
class Problem:
    """An RFC 9457 problem body (``application/problem+json``) as Floodgate answered it."""

    type: str
    """The problem's ``type`` URI, e.g. ``https://floodgate.dev/problems/never-allowed``."""
    title: str
    status: int
    detail: str
    body: Mapping[str, object] = field(default_factory=dict)
    """The whole body, for the fields beyond these four."""


class FloodgateError(Exception):
    """The base of every error the client raises."""


class ConfigError(FloodgateError, ValueError):
    """A client setting that cannot be used: ``field`` names it, ``reason`` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"invalid client configuration: {field}: {reason}")
        self.field = field
        self.reason = reason


class ProblemError(FloodgateError):
    """Floodgate refused the request with a problem body; ``problem`` is that body.

    ``problem`` is ``None`` only for :class:`InvalidRequest` raised by the client itself, before
    anything was sent.
    """

    def __init__(self, message: str, problem: Problem | None = None) -> None:
        super().__init__(message)
        self.problem = problem

    @property
    def status(self) -> int | None:
        """The HTTP status Floodgate answered; ``None`` when nothing was sent."""
        return None if self.problem is None else self.problem.status

    @classmethod
    def of(cls, problem: Problem) -> ProblemError:
        """The typed error of ``problem``, by its status and type."""
        message = f"floodgate refused the request ({problem.status} {problem.title}): {problem.detail}"
        kind: type[ProblemError]
        if problem.status == 404:
            kind = NotFound
        elif problem.status == 409:
            kind = Conflict
        elif problem.status == 401:
            kind = Unauthorized
        elif problem.status == 403:
            kind = Forbidden
        elif problem.status in (400, 413, 422):
            kind = InvalidRequest
        else:
            kind = ProblemError
        return kind(message, problem)


class InvalidRequest(ProblemError, ValueError):
    """A request that can never succeed as written: refused by the client before it was sent (a
    descriptor value that is not a string, a negative cost, ``cost`` with ``costs``…), or by the
    server (400 ``malformed-request``, 413 ``body-too-large``, 422 ``invalid-request`` or
    ``never-allowed``: a cost no rule can ever grant at once), with its problem body.

    It is a bug, not an outage: the fail mode never hides it.
    """


class NotFound(ProblemError):
    """``404 not-found``: a reservation id the server does not know (never given, or forgotten a
    while after it expired), or, from ``usage``, an unknown rule."""


class Conflict(ProblemError):
    """``409 reservation-settled``: the reservation was released, committed with other costs, or
    expired unsettled (it stays charged its estimate), or it holds a check's permits and was
    committed."""


class Unauthorized(ProblemError):
    """``401``: the server has ``auth`` clients and the call sent no token, or one no client has."""


class Forbidden(ProblemError):
    """``403``: the token's client lacks the endpoint's scope, or gave a descriptor pinned to it
    another value."""


class Unavailable(FloodgateError):
    """Floodgate gave no verdict: down, late, failing, or the circuit breaker is open.

    Raised by the calls without a fail mode (``report``, ``commit``, ``release``, ``usage``,
    ``simulate``); ``check``, ``peek`` and ``reserve`` are decided by the fail mode instead.

    ``not_sent`` is true when the request surely did not reach the service (the connection was
    never made, or the breaker refused it), so that a retry cannot run it twice. ``status`` is the
    HTTP status when there was an answer (a 5xx), and ``retry_after`` (seconds) what its
    ``Retry-After`` asked.
    """

    def __init__(
        self,
        reason: FailureReason,
        message: str,
        *,
        not_sent: bool = False,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.reason: FailureReason = reason
        self.not_sent = not_sent
        self.status = status
        self.retry_after = retry_after


class RateLimited(FloodgateError):
    """A denial turned into an error (:meth:`Decision.raise_for_denial`, or your own code), so that
    :func:`~floodgate.retry` waits it out: a denied request consumed nothing and did not run.

    ``retry_after`` is in seconds; ``decision`` is the denial, when there is one.
    """

    status = 429

    def __init__(self, retry_after: float, decision: Decision | None = None) -> None:
        super().__init__(f"rate limited; retry in {retry_after:.3f} s")
        self.retry_after = retry_after
        self.decision = decision
