"""The asyncio client, :class:`AsyncFloodgate`: :class:`~floodgate.Floodgate`'s calls, awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from os import PathLike
from types import TracebackType
from typing import TypeVar

import httpx

from floodgate import wire
from floodgate.breaker import BreakerConfig, BreakerState, Clock
from floodgate.budget import RetryBudgetConfig
from floodgate.core import SIMULATE_DEADLINE, Answer, Core, attempts_of, reserve_costs, settings_of
from floodgate.decision import (
    Call,
    Decision,
    FailMode,
    FailureEvent,
    Settled,
    SimulatedRequest,
    Simulation,
    Stats,
    Usage,
)
from floodgate.errors import Unavailable
from floodgate.http1 import AsyncHttp1Transport
from floodgate.request import TTL, Costs, Descriptors, decide_body, settle_body, usage_query
from floodgate.reservation import AsyncReservation, Reserving
from floodgate.retry import RetryEvent, RetryPolicy, aretry
from floodgate.session import AsyncSession
from floodgate.simulate import simulate_body
from floodgate.transport import call_scope, within

T = TypeVar("T")


class AsyncFloodgate:
    """A client of Floodgate's HTTP API for asyncio: the calls of :class:`~floodgate.Floodgate`,
    with the same settings, deadline, fail mode, counters, circuit breaker and retry budget, on
    httpx's async pool. Make one per event loop and share it; close it with :meth:`aclose` (or
    ``async with``)."""

    def __init__(
        self,
        url: str,
        *,
        deadline: float | None = None,
        fail_mode: FailMode = "open",
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        ca: str | PathLike[str] | None = None,
        client_cert: str | PathLike[str] | None = None,
        client_key: str | PathLike[str] | None = None,
        breaker: BreakerConfig | bool = True,
        retry_budget: RetryBudgetConfig | bool = True,
        fail_closed_retry_after: float = 1.0,
        on_failure: Callable[[FailureEvent], None] | None = None,
        max_connections: int = 100,
        clock: Clock = time.monotonic,
    ) -> None:
        settings = settings_of(
            url,
            deadline=deadline,
            fail_mode=fail_mode,
            fail_closed_retry_after=fail_closed_retry_after,
            token=token,
            headers=headers,
            ca=ca,
            client_cert=client_cert,
            client_key=client_key,
            max_connections=max_connections,
        )
        self._core = Core(settings, breaker=breaker, retry_budget=retry_budget, on_failure=on_failure, clock=clock)
        self._transport = AsyncHttp1Transport(
            settings.host,
            settings.port,
            settings.tls,  # type: ignore[arg-type]
            max_connections=settings.limits.max_connections or 100,
            keepalive_expiry=settings.limits.keepalive_expiry or 30.0,
        )

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self._core.settings.url

    @property
    def deadline(self) -> float:
        """A call's deadline unless given, seconds."""
        return self._core.settings.deadline

    @property
    def fail_mode(self) -> FailMode:
        """What a check decides without a verdict unless given."""
        return self._core.settings.fail_mode

    @property
    def breaker_state(self) -> BreakerState | None:
        """Where the circuit breaker is; ``None`` when the client has none."""
        return self._core.breaker_state

    def stats(self) -> Stats:
        """What the client counted since it was made."""
        return self._core.stats()

    # === the calls ===

    async def check(
        self,
        descriptors: Descriptors,
        *,
        cost: int | None = None,
        costs: Costs | None = None,
        deadline: float | None = None,
        fail_mode: FailMode | None = None,
        domain: str | None = None,
    ) -> Decision:
        """Checks a request: consumes ``cost`` (default 1; or ``costs`` per dimension) from every
        rule that applies when all allow. Denied is a :class:`~floodgate.Decision` with
        ``allowed`` false, not an error."""
        return await self._decide("check", descriptors, cost, costs, deadline, fail_mode, domain, None)

    async def peek(
        self,
        descriptors: Descriptors,
        *,
        cost: int | None = None,
        costs: Costs | None = None,
        deadline: float | None = None,
        fail_mode: FailMode | None = None,
        domain: str | None = None,
    ) -> Decision:
        """What :meth:`check` would answer, consuming nothing."""
        return await self._decide("peek", descriptors, cost, costs, deadline, fail_mode, domain, None)

    async def report(
        self,
        descriptors: Descriptors,
        *,
        cost: int | None = None,
        costs: Costs | None = None,
        deadline: float | None = None,
        domain: str | None = None,
    ) -> Decision:
        """Consumes ``cost`` after the fact (tokens known once a response is done); never denies.
        Raises :class:`~floodgate.Unavailable` when the service gave no answer (``not_sent`` when it
        surely did not run, so :meth:`retry` may retry it)."""
        core = self._core
        seconds = core.deadline(deadline, "report")
        body = decide_body("report", descriptors, cost=cost, costs=costs, domain=domain)
        try:
            answer = await self._send("report", "POST", "report", body, None, seconds)
            return wire.decision("report", answer.status, answer.headers, answer.content)
        except Unavailable as error:
            core.count("report", error, None)
            raise

    def reserve(
        self,
        descriptors: Descriptors,
        *,
        cost: int | None = None,
        costs: Costs | None = None,
        tokens: int | None = None,
        ttl: TTL | None = None,
        deadline: float | None = None,
        fail_mode: FailMode | None = None,
        domain: str | None = None,
    ) -> Reserving:
        """Reserves an estimate before a call whose cost is known only at its end (the prompt's
        tokens plus ``max_tokens``), decided as a check (all-or-nothing, the same fail mode).
        ``tokens=N`` reserves ``{"tokens": N}`` (with ``cost``, that many ``requests`` too); ``ttl``
        is how long it is held unsettled (server default 5 min, at most 24 h).

        Awaited, it is the :class:`~floodgate.AsyncReservation`; ``async with client.reserve(...) as
        r:`` raises :class:`~floodgate.RateLimited` when denied, and releases what is held when the
        block ends — by an exception or otherwise — without :meth:`AsyncReservation.commit`."""
        body_cost, body_costs, dimensions = reserve_costs(cost, costs, tokens)

        async def make() -> AsyncReservation:
            decision = await self._decide(
                "reserve", descriptors, body_cost, body_costs, deadline, fail_mode, domain, ttl
            )
            return AsyncReservation(self, decision, dimensions)

        return Reserving(make)

    async def commit(
        self, reservation: str, costs: Costs | None = None, *, deadline: float | None = None, attempts: int = 2
    ) -> Settled:
        """Charges a reservation's actual cost: per dimension, what was reserved beyond it is given
        back, what exceeds it is charged on top (never denied); a dimension left out stays as
        reserved. Idempotent on the server, so an attempt that got no answer is retried up to
        ``attempts`` times. Raises :class:`~floodgate.NotFound` (unknown id),
        :class:`~floodgate.Conflict` (released, committed with other costs, or expired) and
        :class:`~floodgate.Unavailable` once the attempts are spent."""
        return await self._settle("commit", settle_body("commit", reservation, costs), deadline, attempts)

    async def release(self, reservation: str, *, deadline: float | None = None, attempts: int = 2) -> Settled:
        """Gives a reservation back entirely (concurrency permits included), or frees the permits a
        check took (its ``reservation``). Idempotent and retried as :meth:`commit`."""
        return await self._settle("release", settle_body("release", reservation), deadline, attempts)

    async def usage(self, rule: str, descriptors: Descriptors, *, deadline: float | None = None) -> Usage:
        """What one rule's counter holds now for the descriptors that make its key, consuming
        nothing. Raises :class:`~floodgate.NotFound` for an unknown rule,
        :class:`~floodgate.InvalidRequest` for a missing key descriptor."""
        core = self._core
        query = usage_query(rule, descriptors)
        seconds = core.deadline(deadline, "usage")
        try:
            answer = await self._send("usage", "GET", "usage", None, query, seconds)
            return wire.usage(answer.status, answer.header_map(), answer.content)
        except Unavailable as error:
            core.count("usage", error, None)
            raise

    async def simulate(
        self,
        algorithm: str,
        requests: Iterable[SimulatedRequest | int],
        *,
        sample_ms: int | None = None,
        until_ms: int | None = None,
        deadline: float = SIMULATE_DEADLINE,
        **params: str | int,
    ) -> Simulation:
        """Runs ``requests`` (arrival times in ms, or :class:`~floodgate.SimulatedRequest`) through
        one limit written as a rule writes it (``simulate("token_bucket", [0, 0, 250], rate="2/s",
        burst=8)``), on the server's playground: nothing is counted. A parameter the algorithm does
        not take is the server's :class:`~floodgate.InvalidRequest`."""
        core = self._core
        body = simulate_body(algorithm, requests, params, sample_ms, until_ms)
        seconds = core.deadline(deadline, "simulate")
        try:
            answer = await self._send("simulate", "POST", "simulate", body, None, seconds)
            return wire.simulation(answer.status, answer.header_map(), answer.content)
        except Unavailable as error:
            core.count("simulate", error, None)
            raise

    def session(
        self,
        session_id: str,
        *,
        descriptors: Descriptors | None = None,
        deadline: float | None = None,
        fail_mode: FailMode | None = None,
    ) -> AsyncSession:
        """An agent session's step budget: each :meth:`AsyncSession.step` checks the descriptor
        ``session`` (with ``descriptors``, e.g. the tenant), which a rule keyed on ``[session]``
        counts — ``algorithm: budget`` (``limit: 50``, ``ttl: 24h``)."""
        return AsyncSession(self, session_id, descriptors, deadline, fail_mode)

    async def retry(
        self,
        call: Callable[[], Awaitable[T]],
        policy: RetryPolicy | None = None,
        *,
        on_retry: Callable[[RetryEvent], None] | None = None,
    ) -> T:
        """:func:`~floodgate.aretry` within the client's retry budget: a retry the budget refuses
        raises the error of the attempt it would have repeated."""
        return await aretry(call, policy, budget=self._core.budget, on_retry=on_retry)

    async def warmup(self, timeout: float = 2.0) -> bool:
        """Opens a connection ahead of the first call (``GET /healthz``, not counted): whether the
        server answered healthy. Never raises: the fail mode covers an outage later."""
        message = self._core.message("GET", "healthz", None, None)
        try:
            with call_scope(timeout):
                status, _, _, _ = await within(timeout, self._transport.exchange(message))
            return status == 200
        except (httpx.HTTPError, TimeoutError):
            return False

    async def aclose(self) -> None:
        """Closes the pooled connections."""
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncFloodgate:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # === impl ===

    async def _send(
        self,
        call: Call,
        method: str,
        target: Call,
        body: bytes | None,
        params: Mapping[str, str] | None,
        deadline: float,
    ) -> Answer:
        core = self._core
        admitted = core.admit(call)
        message = core.message(method, target, body, params)
        with call_scope(deadline) as state:
            try:
                status, _, raw, content = await within(deadline, self._transport.exchange(message))
            except (httpx.TransportError, TimeoutError) as error:
                admitted.finish(True)
                raise core.unavailable(call, error, deadline, state.sent) from error
            except BaseException:
                admitted.abandon()
                raise
        admitted.finish(status >= 500)
        return Answer(status, [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw], content)

    async def _decide(
        self,
        call: Call,
        descriptors: Descriptors,
        cost: object,
        costs: object,
        deadline: float | None,
        fail_mode: FailMode | None,
        domain: str | None,
        ttl: object,
    ) -> Decision:
        core = self._core
        mode = core.fail_mode(fail_mode, call)
        seconds = core.deadline(deadline, call)
        body = decide_body(call, descriptors, cost=cost, costs=costs, domain=domain, ttl=ttl)
        try:
            answer = await self._send(call, "POST", call, body, None, seconds)
            return wire.decision(call, answer.status, answer.headers, answer.content)
        except Unavailable as error:
            return core.failed_decision(call, error, mode)

    async def _settle(self, call: Call, body: bytes, deadline: float | None, attempts: int) -> Settled:
        core = self._core
        attempts = attempts_of(attempts, call)
        seconds = core.deadline(deadline, call)
        attempt = 0
        while True:
            try:
                answer = await self._send(call, "POST", call, body, None, seconds)
                return wire.settled(call, answer.status, answer.header_map(), answer.content)
            except Unavailable as error:
                delay = core.settle_delay(error, attempt, attempts)
                if delay is None:
                    core.count(call, error, None)
                    raise
            attempt += 1
            await asyncio.sleep(delay)
