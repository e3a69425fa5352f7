"""Reservations as context managers: an estimate held across a call whose cost is known only at its
end, committed with the actual cost or released — on an exception, or an exit without commit.

.. code-block:: python

    with client.reserve({"tenant": "t1"}, tokens=4096, ttl="2m") as held:
        answer = call_model(max_tokens=4096)
        held.commit(answer.usage.total_tokens)     # the unused tokens go back
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Generator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from floodgate.core import commit_costs
from floodgate.decision import Decision, Settled
from floodgate.errors import FloodgateError, RateLimited

if TYPE_CHECKING:
    from floodgate.aio import AsyncFloodgate
    from floodgate.client import Floodgate


class _Held:
    """What the sync and the async reservation share: the decision, the dimensions reserved, and
    whether it is settled."""

    def __init__(self, decision: Decision, dimensions: Mapping[str, int]) -> None:
        self.decision = decision
        """The reserve's decision (denied, allowed with an id, or decided by the fail mode)."""
        self.dimensions = dict(dimensions)
        """What was reserved, per dimension."""
        self.settled: Settled | None = None
        """The answer of the commit or release that settled it, once one did."""

    @property
    def allowed(self) -> bool:
        """Whether the reserve was allowed (by the server, or by the ``open`` fail mode)."""
        return self.decision.allowed

    @property
    def id(self) -> str | None:
        """The reservation's id; ``None`` when denied, or when the fail mode decided (nothing is
        held, nothing to settle)."""
        return self.decision.reservation

    def _entered(self) -> None:
        if not self.decision.allowed:
            retry_after = self.decision.retry_after if self.decision.retry_after is not None else 1.0
            raise RateLimited(retry_after, self.decision)

    def _must_release(self) -> bool:
        return self.id is not None and self.settled is None


class Reservation(_Held):
    """A reservation made by :meth:`Floodgate.reserve <floodgate.Floodgate.reserve>`."""

    def __init__(self, client: Floodgate, decision: Decision, dimensions: Mapping[str, int]) -> None:
        super().__init__(decision, dimensions)
        self._client = client

    def commit(self, actual: int | Mapping[str, int] | None = None) -> Settled | None:
        """Charges the actual cost — a mapping of dimension → amount, or a whole number for the
        ``tokens`` dimension (else the only one reserved); nothing: as reserved. ``None`` when
        nothing is held (the fail mode decided). Committing again with other amounts is the
        server's :class:`~floodgate.Conflict`."""
        costs = commit_costs(actual, self.dimensions)
        if self.id is None:
            return None
        self.settled = self._client.commit(self.id, costs)  # type: ignore[arg-type]
        return self.settled

    def release(self) -> Settled | None:
        """Gives everything back. ``None`` when nothing is held."""
        if self.id is None:
            return None
        self.settled = self._client.release(self.id)
        return self.settled

    def __enter__(self) -> Reservation:
        self._entered()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._must_release():
            # A release that fails is counted by the client; what is held stays charged until its ttl.
            with contextlib.suppress(FloodgateError):
                self.release()


class AsyncReservation(_Held):
    """A reservation made by :meth:`AsyncFloodgate.reserve <floodgate.AsyncFloodgate.reserve>`."""

    def __init__(self, client: AsyncFloodgate, decision: Decision, dimensions: Mapping[str, int]) -> None:
        super().__init__(decision, dimensions)
        self._client = client

    async def commit(self, actual: int | Mapping[str, int] | None = None) -> Settled | None:
        """As :meth:`Reservation.commit`."""
        costs = commit_costs(actual, self.dimensions)
        if self.id is None:
            return None
        self.settled = await self._client.commit(self.id, costs)  # type: ignore[arg-type]
        return self.settled

    async def release(self) -> Settled | None:
        """As :meth:`Reservation.release`."""
        if self.id is None:
            return None
        self.settled = await self._client.release(self.id)
        return self.settled

    async def __aenter__(self) -> AsyncReservation:
        self._entered()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._must_release():
            # A release that fails is counted by the client; what is held stays charged until its ttl.
            with contextlib.suppress(FloodgateError):
                await self.release()


class Reserving:
    """The async ``reserve`` call: awaited, the :class:`AsyncReservation`; used with ``async with``,
    entered as one (raising :class:`~floodgate.RateLimited` when denied) and released on exit unless
    committed."""

    def __init__(self, make: Callable[[], Awaitable[AsyncReservation]]) -> None:
        self._make = make
        self._made: AsyncReservation | None = None

    def __await__(self) -> Generator[Any, None, AsyncReservation]:
        return self._get().__await__()

    async def _get(self) -> AsyncReservation:
        if self._made is None:
            self._made = await self._make()
        return self._made

    async def __aenter__(self) -> AsyncReservation:
        held = await self._get()
        return await held.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._made is not None:
            await self._made.__aexit__(exc_type, exc, tb)
