"""The circuit breaker: its state machine on a clock moved by hand, and in the client against a
stopped server and a black hole — calls not sent while open, one probe at a time, a failed probe
opening it again, a probe closing it once the real server listens on the port again."""

from __future__ import annotations

import asyncio

import pytest

from floodgate import AsyncFloodgate, BreakerConfig, CircuitBreaker, ConfigError, Floodgate, Unavailable
from support import RunningFloodgate, SilentServer, floodgate, wait_for

POLICY = """
store: { kind: memory }
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 1000
    window: 1h
"""


def state(of: CircuitBreaker | Floodgate | AsyncFloodgate) -> str | None:
    """Where a breaker is (read through a function, so each read is a new value to the type checker)."""
    return of.state if isinstance(of, CircuitBreaker) else of.breaker_state


class ManualClock:
    """A monotonic clock moved by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_consecutive_failures_open_it_and_one_probe_closes_it() -> None:
    clock = ManualClock()
    moves: list[str] = []
    breaker = CircuitBreaker(BreakerConfig(consecutive_failures=3, open_for=2.0), clock, moves.append)
    for _ in range(3):
        admission = breaker.admit()
        assert admission.kind == "call"
        breaker.record(True, admission.sent)
    assert state(breaker) == "open" and breaker.admit().kind == "reject"
    assert breaker.open_remaining() == 2.0
    clock.advance(2.0)
    assert breaker.admit().kind == "probe"
    assert breaker.admit().kind == "reject"  # one probe at a time
    breaker.finish_probe(True)
    assert state(breaker) == "closed"
    assert moves == ["open", "half_open", "closed"]


def test_a_success_breaks_the_streak_and_a_stall_counts_once() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(BreakerConfig(consecutive_failures=3, min_calls=1000), clock)
    sent_together = [breaker.admit() for _ in range(5)]
    clock.advance(0.1)
    for admission in sent_together:  # all in flight when the stall began: one failure
        breaker.record(True, admission.sent)
    assert state(breaker) == "closed"
    for _ in range(2):
        breaker.record(True, breaker.admit().sent)
    assert state(breaker) == "open"


def test_a_failure_rate_over_the_window_opens_it() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(BreakerConfig(consecutive_failures=100, failure_rate=0.5, min_calls=10), clock)
    for i in range(10):
        breaker.record(i % 2 == 1, breaker.admit().sent)  # the 10th call fails: 5 of 10
    assert state(breaker) == "open"


def test_a_failed_probe_opens_it_again_and_a_hung_probe_gives_way() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(BreakerConfig(consecutive_failures=1, open_for=1.0, probe_timeout=0.5), clock)
    breaker.record(True, breaker.admit().sent)
    clock.advance(1.0)
    assert breaker.admit().kind == "probe"
    breaker.finish_probe(False)
    assert state(breaker) == "open" and breaker.admit().kind == "reject"
    clock.advance(1.0)
    assert breaker.admit().kind == "probe"
    clock.advance(0.5)
    assert breaker.admit().kind == "probe"  # the first probe hung past probe_timeout


def test_bad_settings_are_named() -> None:
    for settings, field in [
        ({"consecutive_failures": 0}, "breaker.consecutive_failures"),
        ({"failure_rate": 0}, "breaker.failure_rate"),
        ({"failure_rate": 1.5}, "breaker.failure_rate"),
        ({"open_for": 0}, "breaker.open_for"),
        ({"window": -1}, "breaker.window"),
    ]:
        with pytest.raises(ConfigError) as refused:
            BreakerConfig(**settings)  # type: ignore[arg-type]
        assert refused.value.field == field


def test_a_stopped_server_opens_it_then_calls_are_not_sent_until_a_probe_finds_it_back() -> None:
    clock = ManualClock()
    with floodgate(POLICY) as server:
        client = Floodgate(
            server.url, deadline=5.0, breaker=BreakerConfig(consecutive_failures=3, open_for=2.0), clock=clock
        )
        server.stop()
        for _ in range(3):
            assert client.check({"user": "u1"}).failure is not None
        assert state(client) == "open"
        sent = client.stats().calls
        refused = client.check({"user": "u1"}, fail_mode="closed")
        assert not refused.allowed and refused.failure is not None and refused.failure.reason == "breaker_open"
        with pytest.raises(Unavailable) as not_sent:
            client.report({"user": "u1"})
        assert not_sent.value.reason == "breaker_open" and not_sent.value.not_sent
        assert client.stats().calls == sent
        clock.advance(2.0)
        assert client.check({"user": "u1"}).failure is not None  # the probe, refused
        assert state(client) == "open"
        server.start()
        clock.advance(2.0)
        probe = client.check({"user": "u1"})
        assert probe.status == 200 and state(client) == "closed"
        stats = client.stats()
        assert (stats.breaker_opened, stats.breaker_half_opened, stats.breaker_closed) == (2, 2, 1)
        assert stats.failures["breaker_open"] == 2
        client.close()


@pytest.mark.anyio
async def test_a_black_hole_opens_it_and_then_receives_nothing_one_probe_at_a_time() -> None:
    clock = ManualClock()
    silent = SilentServer()
    try:
        client = AsyncFloodgate(
            silent.url, deadline=0.2, breaker=BreakerConfig(consecutive_failures=2, open_for=2.0), clock=clock
        )
        for _ in range(2):
            late = await client.check({"user": "u1"})
            assert late.failure is not None and late.failure.reason == "deadline"
        assert state(client) == "open"
        received = silent.requests()
        for _ in range(5):
            decided = await client.check({"user": "u1"})
            assert decided.failure is not None and decided.failure.reason == "breaker_open"
        assert silent.requests() == received
        clock.advance(2.0)
        probe = asyncio.ensure_future(client.check({"user": "u1"}))
        await asyncio.to_thread(wait_for, lambda: silent.requests() == received + 1, "the probe to arrive")
        while_probing = await client.check({"user": "u1"})
        assert while_probing.failure is not None and while_probing.failure.reason == "breaker_open"
        failed_probe = await probe
        assert failed_probe.failure is not None and failed_probe.failure.reason == "deadline"
        assert state(client) == "open" and silent.requests() == received + 1
        await client.aclose()
    finally:
        silent.close()


def test_without_a_breaker_every_call_is_sent(server: RunningFloodgate) -> None:
    silent = SilentServer()
    try:
        with Floodgate(silent.url, deadline=0.1, breaker=False) as client:
            for _ in range(12):
                client.check({"user": "u1"})
            assert state(client) is None
        wait_for(lambda: silent.requests() == 12, "the twelve requests")
    finally:
        silent.close()
