"""Retries: only of calls that surely did not run (a refused connection, a 429, a 503 with
``Retry-After``, a denial), never of a timeout unless the call is idempotent; full jitter; at least
the ``Retry-After`` asked; within the retry budget."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from floodgate import (
    ConfigError,
    Floodgate,
    RateLimited,
    RetryBudget,
    RetryBudgetConfig,
    RetryEvent,
    RetryPolicy,
    Unavailable,
    aretry,
    retry,
    retry_after_of,
)
from floodgate.decision import Decision
from support import RunningFloodgate, ScriptedServer, SilentServer, free_port, wait_for


class ManualClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_a_real_429_is_retried_after_its_retry_after(client: Floodgate, uid: str) -> None:
    who = {"suite": "retry", "user": uid}
    assert client.check(who).allowed
    events: list[RetryEvent] = []
    allowed = client.retry(
        lambda: client.check(who).raise_for_denial(), RetryPolicy(attempts=3), on_retry=events.append
    )
    assert isinstance(allowed, Decision) and allowed.allowed
    assert events, "the second check of the window was denied, then retried"
    first = events[0]
    assert isinstance(first.error, RateLimited)
    assert first.delay >= first.error.retry_after > 0


def test_a_503_with_retry_after_is_retried_after_it() -> None:
    scripted = ScriptedServer([(503, {"retry-after": "1"}, b"busy"), (200, {}, b"ok")])
    events: list[RetryEvent] = []
    try:
        with httpx.Client() as http:

            def call() -> bytes:
                answer = http.get(scripted.url + "/model")
                answer.raise_for_status()
                return answer.content

            assert retry(call, on_retry=events.append) == b"ok"
        assert [e.error.response.status_code for e in events if isinstance(e.error, httpx.HTTPStatusError)] == [503]
        assert events[0].delay >= 1.0
        assert scripted.paths == ["/model", "/model"]
    finally:
        scripted.close()


def test_a_429_with_an_http_date_is_retried_after_that_date() -> None:
    when = email.utils.formatdate(time.time() + 1, usegmt=True)
    scripted = ScriptedServer([(429, {"retry-after": when}, b""), (200, {}, b"ok")])
    events: list[RetryEvent] = []
    try:
        with httpx.Client() as http:

            def call() -> int:
                answer = http.get(scripted.url)
                answer.raise_for_status()
                return answer.status_code

            assert retry(call, RetryPolicy(base=0.001), on_retry=events.append) == 200
        assert len(events) == 1 and 0 < events[0].delay <= 1.0
    finally:
        scripted.close()


def test_a_503_without_retry_after_and_other_statuses_are_not_retried() -> None:
    scripted = ScriptedServer([(503, {}, b"down"), (200, {}, b"ok")])
    try:
        with httpx.Client() as http:

            def call() -> int:
                answer = http.get(scripted.url)
                answer.raise_for_status()
                return answer.status_code

            with pytest.raises(httpx.HTTPStatusError):
                retry(call)
        assert len(scripted.paths) == 1
    finally:
        scripted.close()


def test_a_refused_connection_is_retried_at_most_attempts_times() -> None:
    events: list[RetryEvent] = []
    with Floodgate(f"http://127.0.0.1:{free_port()}", breaker=False) as client:
        with pytest.raises(Unavailable) as down:
            client.retry(
                lambda: client.report({"user": "u1"}), RetryPolicy(attempts=2, base=0.001), on_retry=events.append
            )
        assert down.value.reason == "unreachable"
        assert [e.attempt for e in events] == [1, 2]
        assert client.stats().calls == 3


def test_a_timeout_is_retried_only_when_the_call_is_idempotent() -> None:
    silent = SilentServer()
    try:
        with Floodgate(silent.url, deadline=0.1, breaker=False) as client:
            with pytest.raises(Unavailable) as late:
                client.retry(lambda: client.report({"user": "u1"}), RetryPolicy(base=0.001))
            assert late.value.reason == "deadline"
            wait_for(lambda: silent.requests() == 1, "the one request")
            with pytest.raises(Unavailable):
                client.retry(lambda: client.report({"user": "u1"}), RetryPolicy(base=0.001, idempotent=True))
            wait_for(lambda: silent.requests() == 4, "the first and two retries")
    finally:
        silent.close()


def test_a_retry_after_longer_than_the_policy_takes_is_not_waited_for() -> None:
    calls = []

    def denied() -> None:
        calls.append(1)
        raise RateLimited(120.0)

    with pytest.raises(RateLimited):
        retry(denied, RetryPolicy(max_retry_after=60.0))
    assert len(calls) == 1


def test_full_jitter_stays_below_the_doubling_ceiling() -> None:
    policy = RetryPolicy(base=0.1, max_backoff=0.35)
    assert [policy.backoff(n, random=lambda: 0.5) for n in range(4)] == [0.05, 0.1, 0.175, 0.175]
    assert RetryPolicy(jitter=False, base=0.1).backoff(2) == pytest.approx(0.4)
    waits: list[float] = []
    with pytest.raises(ConnectionRefusedError):
        retry(
            lambda: (_ for _ in ()).throw(ConnectionRefusedError()),
            RetryPolicy(attempts=3, base=1.0, max_backoff=8.0),
            sleep=waits.append,
            random=lambda: 0.999,
        )
    assert waits == pytest.approx([0.999, 1.998, 3.996])


def test_retry_after_is_read_from_errors_and_headers() -> None:
    assert retry_after_of(RateLimited(2.5)) == 2.5
    assert retry_after_of(Unavailable("server_error", "x", status=503, retry_after=4.0)) == 4.0
    response = httpx.Response(429, headers={"retry-after": "7"}, request=httpx.Request("GET", "http://x"))
    assert retry_after_of(httpx.HTTPStatusError("x", request=response.request, response=response)) == 7.0
    assert retry_after_of(ValueError("no")) is None


def test_bad_policies_are_named() -> None:
    with pytest.raises(ConfigError) as refused:
        RetryPolicy(attempts=-1)
    assert refused.value.field == "retry.attempts"


def test_the_budget_stops_the_retries_of_thirty_calls_at_five() -> None:
    # A floor of 2 (1 a second over a 2 s window) plus 10 % of 30 calls: 5 retries in all.
    clock = ManualClock()
    budget_config = RetryBudgetConfig(ratio=0.1, min_per_second=1, window=2.0)
    with Floodgate(f"http://127.0.0.1:{free_port()}", breaker=False, retry_budget=budget_config, clock=clock) as client:
        for _ in range(30):
            with pytest.raises(Unavailable):
                client.retry(lambda: client.report({"user": "u1"}), RetryPolicy(attempts=2, base=0.001))
        stats = client.stats()
        assert (stats.retries, stats.calls) == (5, 35)
        assert stats.retries_refused > 0


def test_the_budget_bounds_commit_retries_against_a_server_answering_503() -> None:
    scripted = ScriptedServer([(503, {"content-type": "application/json"}, b"{}")])
    clock = ManualClock()
    try:
        budget_config = RetryBudgetConfig(ratio=0.1, min_per_second=1, window=2.0)
        with Floodgate(scripted.url, deadline=5.0, breaker=False, retry_budget=budget_config, clock=clock) as client:
            for _ in range(30):
                with pytest.raises(Unavailable) as failing:
                    client.commit("0" * 32, {"tokens": 1})
                assert failing.value.status == 503
            assert client.stats().retries == 5
        assert len(scripted.paths) == 35
    finally:
        scripted.close()


def test_the_budget_arithmetic_on_a_clock_moved_by_hand() -> None:
    clock = ManualClock()
    budget = RetryBudget(RetryBudgetConfig(ratio=0.5, min_per_second=0, window=10.0), clock)
    for _ in range(4):
        budget.deposit()
    granted = []
    for _ in range(3):
        granted.append(budget.withdraw())
        if granted[-1]:
            budget.deposit()  # the retry is sent: a call, not one of the four
    # Half of the four first calls: two retries.
    assert granted == [True, True, False]
    clock.now += 10.0  # the window has passed: nothing counted
    assert not budget.withdraw()
    assert (budget.granted, budget.refused) == (2, 2)


@pytest.mark.anyio
async def test_aretry_retries_a_coroutine() -> None:
    attempts = []

    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionRefusedError()
        return "done"

    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    assert await aretry(flaky, sleep=no_wait) == "done"
    assert len(waits) == 2


def test_the_open_breaker_is_not_retried(server: RunningFloodgate) -> None:
    error = Unavailable("breaker_open", "open", not_sent=True)
    calls = []

    def refused() -> None:
        calls.append(1)
        raise error

    with pytest.raises(Unavailable):
        retry(refused)
    assert len(calls) == 1
