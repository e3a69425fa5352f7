"""Agent step budgets: ``client.session(id).step()`` is a check with the descriptor ``session: id``,
which a rule keyed on ``[session]`` counts — ``algorithm: budget`` (``limit: 50``, ``ttl: 24h``: 50
steps, never refilled, gone a day after the session's first step). The server has no session
endpoint of its own: a session is a descriptor, and its budget a rule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from floodgate.decision import Decision, FailMode, Step
from floodgate.errors import InvalidRequest
from floodgate.request import Descriptors, descriptors_of

if TYPE_CHECKING:
    from floodgate.aio import AsyncFloodgate
    from floodgate.client import Floodgate


def _step(decision: Decision) -> Step:
    remaining = min((lim.remaining for lim in decision.limits), default=None)
    return Step(allowed=decision.allowed, remaining=remaining, decision=decision)


class _Steps:
    def __init__(
        self,
        session_id: object,
        descriptors: Descriptors | None,
        deadline: float | None,
        fail_mode: FailMode | None,
    ) -> None:
        if not isinstance(session_id, str) or session_id == "":
            raise InvalidRequest(f"session: the session id must be a non-empty string, got {session_id!r}")
        self.id = session_id
        self._descriptors = {**descriptors_of(descriptors or {}, "session"), "session": session_id}
        self._deadline = deadline
        self._fail_mode = fail_mode


class Session(_Steps):
    """A session's step budget, from :meth:`Floodgate.session <floodgate.Floodgate.session>`."""

    def __init__(
        self,
        client: Floodgate,
        session_id: str,
        descriptors: Descriptors | None,
        deadline: float | None,
        fail_mode: FailMode | None,
    ) -> None:
        super().__init__(session_id, descriptors, deadline, fail_mode)
        self._client = client

    def step(self, cost: int = 1) -> Step:
        """Spends ``cost`` steps of the budget, or says it is spent (``allowed`` false, with the
        wait until the budget is gone in ``decision.retry_after``)."""
        decision = self._client.check(self._descriptors, cost=cost, deadline=self._deadline, fail_mode=self._fail_mode)
        return _step(decision)


class AsyncSession(_Steps):
    """A session's step budget, from :meth:`AsyncFloodgate.session <floodgate.AsyncFloodgate.session>`."""

    def __init__(
        self,
        client: AsyncFloodgate,
        session_id: str,
        descriptors: Descriptors | None,
        deadline: float | None,
        fail_mode: FailMode | None,
    ) -> None:
        super().__init__(session_id, descriptors, deadline, fail_mode)
        self._client = client

    async def step(self, cost: int = 1) -> Step:
        """As :meth:`Session.step`."""
        decision = await self._client.check(
            self._descriptors, cost=cost, deadline=self._deadline, fail_mode=self._fail_mode
        )
        return _step(decision)
