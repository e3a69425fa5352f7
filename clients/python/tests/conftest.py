"""Fixtures: one real ``floodgate`` server for the whole run on the policy below (each test uses
descriptors of its own, so tests do not share counters), and the clients made for it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from floodgate import Floodgate
from support import RunningFloodgate

# Every rule matches a `suite` descriptor, so that a test's requests meet only the rules it means.
POLICY = """
store: { kind: memory }
headers: both
descriptors: [suite, rule]
rules:
  - name: per-user
    match: { suite: checks }
    key: [user]
    algorithm: fixed_window
    limit: 3
    window: 1h
  - name: requests-per-tenant
    match: { suite: tokens }
    key: [tenant]
    algorithm: fixed_window
    limit: 100
    window: 1h
  - name: tokens-per-tenant
    match: { suite: tokens }
    key: [tenant]
    algorithm: fixed_window
    limit: 10000
    window: 1h
    cost: tokens
  - name: one-a-second
    match: { suite: retry }
    key: [user]
    algorithm: fixed_window
    limit: 1
    window: 1s
  - name: in-flight
    match: { suite: permits }
    key: [user]
    algorithm: concurrency
    limit: 1
    lease: 1h
  - name: agent-steps
    match: { suite: steps }
    key: [session]
    algorithm: budget
    limit: 3
    ttl: 24h
  - name: monthly-plan
    match: { suite: plans }
    key: [tenant]
    algorithm: quota
    period: month
    limit: { by: plan, values: { free: 2, enterprise: 2 } }
    overage: { free: { degrade_to: small-model }, enterprise: deny }
  - name: items-per-user
    match: { suite: middleware, route: "GET /items/{item_id}" }
    key: [user]
    algorithm: fixed_window
    limit: 2
    window: 1h
  - name: wsgi-items-per-user
    match: { suite: [django, flask], route: "GET /items/<int:item_id>" }
    key: [suite, user]
    algorithm: fixed_window
    limit: 2
    window: 1h
  - name: per-ip
    match: { suite: ip }
    key: [ip]
    algorithm: fixed_window
    limit: 1000
    window: 1h
  - name: chat-rule
    match: { rule: chat }
    key: [user]
    algorithm: fixed_window
    limit: 10
    window: 1h
"""


@pytest.fixture(autouse=True)
def patient_default_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients made without a deadline (the examples', the documentation's, the middleware's from
    a url) get 5 s instead of 50 ms: these tests are about answers, and a loaded machine must not
    turn an answer into a fail-mode decision. The deadline itself is tested with explicit ones
    against servers that never answer."""
    monkeypatch.setattr("floodgate.core.DEFAULT_DEADLINE", 5.0)


@pytest.fixture(scope="session")
def server() -> Iterator[RunningFloodgate]:
    running = RunningFloodgate(POLICY)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def client(server: RunningFloodgate) -> Iterator[Floodgate]:
    # A generous deadline: these tests are about answers, not about speed on a loaded machine.
    with Floodgate(server.url, deadline=5.0) as made:
        yield made


@pytest.fixture
def uid() -> str:
    """A fresh id, so that a test's counters are its own."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
