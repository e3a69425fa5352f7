"""The fail modes and the deadline: the server stopped, a black hole (a listener that accepts and
never answers), a server answering a byte at a time, a 503; decided by the fail mode, counted,
and the calls without a fail mode raising :class:`Unavailable`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from floodgate import AsyncFloodgate, FailureEvent, Floodgate, Unavailable
from support import DrippingServer, RunningFloodgate, ScriptedServer, SilentServer, floodgate

POLICY = """
store: { kind: memory }
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 100
    window: 1h
"""


@pytest.fixture
def own_server() -> Iterator[RunningFloodgate]:
    with floodgate(POLICY) as running:
        yield running


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def test_a_stopped_server_is_decided_by_the_fail_mode_and_counted(own_server: RunningFloodgate) -> None:
    events: list[FailureEvent] = []
    with Floodgate(own_server.url, deadline=5.0, on_failure=events.append, breaker=False) as client:
        assert client.check({"user": "u1"}).status == 200
        own_server.stop()
        opened = client.check({"user": "u1"})
        assert opened.allowed and opened.status == 0
        assert opened.failure is not None and (opened.failure.reason, opened.failure.mode) == ("unreachable", "open")
        closed = client.check({"user": "u1"}, fail_mode="closed")
        assert not closed.allowed and closed.retry_after == 1.0 and closed.headers == {"retry-after": "1"}
        peeked = client.peek({"user": "u1"}, fail_mode="closed")
        assert not peeked.allowed
        with pytest.raises(Unavailable) as down:
            client.report({"user": "u1"})
        assert down.value.reason == "unreachable" and down.value.not_sent
        stats = client.stats()
        assert (stats.failed_open, stats.failed_closed) == (1, 2)
        assert stats.failures["unreachable"] == 4
        assert [(e.call, e.mode) for e in events] == [
            ("check", "open"),
            ("check", "closed"),
            ("peek", "closed"),
            ("report", None),
        ]
        own_server.start()
        assert client.check({"user": "u1"}).status == 200


def test_a_client_failing_closed_denies_and_says_when_to_retry(own_server: RunningFloodgate) -> None:
    own_server.stop()
    with Floodgate(own_server.url, fail_mode="closed", fail_closed_retry_after=2.5, breaker=False) as client:
        decision = client.check({"user": "u1"})
        assert not decision.allowed and decision.retry_after == 2.5 and decision.retry_after_header == 3
        assert client.stats().failed_closed == 1


def test_the_deadline_decides_against_a_silent_listener(silent: SilentServer) -> None:
    with Floodgate(silent.url, deadline=0.2, breaker=False) as client:
        decision = client.check({"user": "u1"})
        assert decision.allowed and decision.failure is not None and decision.failure.reason == "deadline"
        with pytest.raises(Unavailable) as late:
            client.report({"user": "u1"})
        assert late.value.reason == "deadline" and not late.value.not_sent
    assert silent.requests() >= 2


def test_the_deadline_bounds_the_whole_call_against_a_server_answering_a_byte_at_a_time() -> None:
    # Every read gets a byte before httpx's per-read timeout: only a deadline over the call ends it.
    dripping = DrippingServer()
    try:
        with Floodgate(dripping.url, deadline=0.3, breaker=False) as client:
            decision = client.check({"user": "u1"}, fail_mode="closed")
        assert not decision.allowed and decision.failure is not None
        assert decision.failure.reason == "deadline"
    finally:
        dripping.close()


@pytest.mark.anyio
async def test_async_the_deadline_bounds_the_whole_call_against_a_dripping_server() -> None:
    dripping = DrippingServer()
    try:
        async with AsyncFloodgate(dripping.url, deadline=0.3, breaker=False) as client:
            decision = await client.check({"user": "u1"})
        assert decision.allowed and decision.failure is not None and decision.failure.reason == "deadline"
    finally:
        dripping.close()


def test_a_503_is_a_server_error_the_fail_mode_covers() -> None:
    problem = (
        b'{"type":"https://floodgate.dev/problems/store-unavailable",'
        b'"title":"Store Unavailable","status":503,"detail":"x"}'
    )
    scripted = ScriptedServer([(503, {"content-type": "application/problem+json", "retry-after": "3"}, problem)])
    try:
        with Floodgate(scripted.url, deadline=5.0, breaker=False) as client:
            decision = client.check({"user": "u1"}, fail_mode="closed")
            assert not decision.allowed and decision.failure is not None
            assert decision.failure.reason == "server_error"
            with pytest.raises(Unavailable) as failing:
                client.usage("per-user", {"user": "u1"})
            assert failing.value.status == 503 and failing.value.retry_after == 3.0
    finally:
        scripted.close()


@pytest.mark.anyio
async def test_async_fail_modes_with_the_server_stopped_and_black_holed(
    own_server: RunningFloodgate, silent: SilentServer
) -> None:
    async with AsyncFloodgate(own_server.url, deadline=5.0, breaker=False) as client:
        assert (await client.check({"user": "u1"})).status == 200
        own_server.stop()
        opened = await client.check({"user": "u1"})
        assert opened.allowed and opened.failure is not None and opened.failure.reason == "unreachable"
        closed = await client.check({"user": "u1"}, fail_mode="closed")
        assert not closed.allowed
        with pytest.raises(Unavailable):
            await client.report({"user": "u1"})
        assert client.stats().failures["unreachable"] == 3
    async with AsyncFloodgate(silent.url, deadline=0.2, fail_mode="closed", breaker=False) as late:
        decision = await late.check({"user": "u1"})
        assert not decision.allowed and decision.failure is not None and decision.failure.reason == "deadline"
        assert late.stats().failed_closed == 1
