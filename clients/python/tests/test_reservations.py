"""Reservations against the real server: committed (the over-reservation refunded), released,
expired, a commit whose answer was lost retried and settled once, 404 and 409 as typed errors,
the context managers (sync and async) releasing on an exception or an exit without commit, and a
check's concurrency permits freed by release."""

from __future__ import annotations

import time

import pytest

from conftest import POLICY
from floodgate import (
    AsyncFloodgate,
    Conflict,
    Floodgate,
    InvalidRequest,
    NotFound,
    RateLimited,
    Reservation,
)
from support import CuttingProxy, RunningFloodgate, free_port


def tokens_used(client: Floodgate, tenant: str) -> int:
    return client.usage("tokens-per-tenant", {"tenant": tenant}).used


def test_a_commit_charges_the_actual_and_refunds_the_rest(client: Floodgate, uid: str) -> None:
    held = client.reserve({"suite": "tokens", "tenant": uid}, tokens=4000, ttl="2m")
    assert isinstance(held, Reservation) and held.allowed and held.id is not None
    assert held.decision.expires_at is not None and held.decision.expires_at > time.time()
    assert tokens_used(client, uid) == 4000
    settled = held.commit(812)
    assert settled is not None and settled.state == "committed"
    assert (settled.reserved, settled.charged, settled.refunded) == (
        {"tokens": 4000},
        {"tokens": 812},
        {"tokens": 3188},
    )
    assert tokens_used(client, uid) == 812
    again = held.commit(812)  # the same commit: the same answer, nothing charged twice
    assert again == settled and tokens_used(client, uid) == 812
    with pytest.raises(Conflict) as other:
        held.commit(900)
    assert other.value.problem is not None and other.value.problem.status == 409
    with pytest.raises(Conflict):
        held.release()


def test_a_commit_past_the_estimate_charges_the_excess(client: Floodgate, uid: str) -> None:
    held = client.reserve({"suite": "tokens", "tenant": uid}, cost=1, tokens=100)
    assert held.dimensions == {"tokens": 100, "requests": 1}
    settled = held.commit({"tokens": 250})
    assert settled is not None and settled.excess == {"tokens": 150}
    assert tokens_used(client, uid) == 250
    with pytest.raises(InvalidRequest, match="per dimension"):
        Reservation(client, held.decision, {"a": 1, "b": 1}).commit(5)


def test_a_release_gives_everything_back(client: Floodgate, uid: str) -> None:
    held = client.reserve({"suite": "tokens", "tenant": uid}, costs={"requests": 1, "tokens": 3000})
    settled = held.release()
    assert settled is not None and settled.state == "released" and settled.refunded == {"requests": 1, "tokens": 3000}
    assert tokens_used(client, uid) == 0
    with pytest.raises(Conflict):
        held.commit(10)


def test_a_denied_reserve_holds_nothing_and_entering_it_raises_rate_limited(client: Floodgate, uid: str) -> None:
    who = {"suite": "tokens", "tenant": uid}
    client.report(who, costs={"tokens": 9500})
    denied = client.reserve(who, tokens=1000)
    assert not denied.allowed and denied.id is None
    assert denied.decision.rule == "tokens-per-tenant"
    with pytest.raises(RateLimited) as limited:
        denied.__enter__()
    assert limited.value.decision is denied.decision
    assert tokens_used(client, uid) == 9500


def test_the_context_manager_releases_on_an_exception_and_on_an_exit_without_commit(
    client: Floodgate, uid: str
) -> None:
    who = {"suite": "tokens", "tenant": uid}
    entered: list[Reservation] = []

    def failing_call() -> None:
        with client.reserve(who, tokens=2000) as held:
            entered.append(held)
            assert tokens_used(client, uid) == 2000
            raise RuntimeError("the model failed")

    with pytest.raises(RuntimeError, match="the model failed"):
        failing_call()
    assert entered[0].settled is not None and entered[0].settled.state == "released"
    with client.reserve(who, tokens=2000) as unused:
        pass
    assert unused.settled is not None and unused.settled.state == "released"
    with client.reserve(who, tokens=2000) as used:
        used.commit(500)
    assert used.settled is not None and used.settled.state == "committed"
    assert tokens_used(client, uid) == 500


def test_unknown_and_expired_reservations_are_typed_errors(client: Floodgate, uid: str) -> None:
    with pytest.raises(NotFound):
        client.commit("0123456789abcdef0123456789abcdef", {"tokens": 1})
    # On a server whose store's clock stands still until the test moves it: the reservation
    # expires when the clock passes its ttl, not when this machine's does.
    clocked = RunningFloodgate(POLICY, args=("--manual-clock", "1800000000000"))
    try:
        with Floodgate(clocked.url, deadline=5.0) as on_clock:
            held = on_clock.reserve({"suite": "tokens", "tenant": uid}, tokens=700, ttl=1)
            assert held.decision.expires_at is not None
            clocked.advance_clock(1000)
            with pytest.raises(Conflict, match="expired"):
                held.commit(100)
            assert tokens_used(on_clock, uid) == 700  # an expired reservation stays charged its estimate
    finally:
        clocked.close()


def test_a_commit_whose_answer_was_lost_is_retried_and_settled_once(server: RunningFloodgate, uid: str) -> None:
    proxy = CuttingProxy(server.port, "/v1/commit", cuts=1)
    try:
        with Floodgate(proxy.url, deadline=5.0) as client:
            held = client.reserve({"suite": "tokens", "tenant": uid}, tokens=1000)
            settled = held.commit(300)
            assert settled is not None and settled.charged == {"tokens": 300}
            assert tokens_used(client, uid) == 300
        assert [line.split(b" ")[1] for line in proxy.cut] == [b"/v1/commit"]
        assert sum(1 for line in proxy.forwarded if b"/v1/commit" in line) == 2
    finally:
        proxy.close()


def test_settling_against_a_refused_port_spends_its_attempts() -> None:
    with Floodgate(f"http://127.0.0.1:{free_port()}", breaker=False) as client:
        from floodgate import Unavailable

        with pytest.raises(Unavailable) as down:
            client.release("0123456789abcdef0123456789abcdef", attempts=2)
        assert down.value.reason == "unreachable"
        assert client.stats().calls == 3


def test_a_fail_open_reserve_holds_nothing_to_settle() -> None:
    with Floodgate(f"http://127.0.0.1:{free_port()}", breaker=False) as client:
        with client.reserve({"tenant": "t"}, tokens=10) as held:
            assert held.allowed and held.id is None
            assert held.commit(5) is None
        assert client.stats().calls == 1


def test_a_checks_concurrency_permits_are_freed_by_release(client: Floodgate, uid: str) -> None:
    who = {"suite": "permits", "user": uid}
    first = client.check(who)
    assert first.allowed and first.reservation is not None
    assert "floodgate-reservation" not in first.headers
    assert not client.check(who).allowed
    released = client.release(first.reservation)
    assert released.state == "released" and released.refunded == {}
    assert client.check(who).allowed


@pytest.mark.anyio
async def test_async_reservations_commit_release_and_release_on_an_exception(
    server: RunningFloodgate, uid: str
) -> None:
    who = {"suite": "tokens", "tenant": uid}
    async with AsyncFloodgate(server.url, deadline=5.0) as client:
        held = await client.reserve(who, tokens=1000)
        assert held.allowed and held.id is not None
        settled = await held.commit(400)
        assert settled is not None and settled.charged == {"tokens": 400}
        async with client.reserve(who, tokens=1000) as unused:
            assert unused.id is not None
        assert unused.settled is not None and unused.settled.state == "released"
        with pytest.raises(ValueError, match="boom"):
            async with client.reserve(who, tokens=1000) as failing:
                raise ValueError("boom")
        assert failing.settled is not None and failing.settled.state == "released"
        async with client.reserve(who, tokens=1000) as used:
            await used.commit({"tokens": 100})
        assert (await client.usage("tokens-per-tenant", {"tenant": uid})).used == 500
        await client.report(who, costs={"tokens": 9500})
        with pytest.raises(RateLimited):
            async with client.reserve(who, tokens=1000):
                pytest.fail("a denied reservation is not entered")
        session = client.session(uid, descriptors={"suite": "steps"})
        assert [(await session.step()).remaining for _ in range(3)] == [2, 1, 0]
        assert not (await session.step()).allowed
