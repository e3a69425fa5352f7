"""Every call of the sync client against the real server: check, peek, report, reserve, commit,
release, usage, simulate, sessions; typed results and typed errors."""

from __future__ import annotations

import time

import pytest

from floodgate import (
    ConfigError,
    Decision,
    Floodgate,
    InvalidRequest,
    NotFound,
    SimulatedRequest,
)


def test_check_allows_then_denies_with_the_deciding_rule_and_its_headers(client: Floodgate, uid: str) -> None:
    who = {"suite": "checks", "user": uid}
    first = client.check(who)
    assert isinstance(first, Decision)
    assert first.allowed and first.status == 200
    assert (first.rule, first.limit, first.remaining) == ("per-user", 3, 2)
    assert first.retry_after is None and first.failure is None
    assert first.headers["x-ratelimit-limit"] == "3"
    assert first.headers["x-ratelimit-remaining"] == "2"
    assert first.headers["ratelimit-policy"].startswith('"per-user";q=3')
    client.check(who, cost=2)
    denied = client.check(who)
    assert not denied.allowed and denied.status == 429
    assert denied.rule == "per-user" and denied.remaining == 0
    assert denied.retry_after is not None and 0 < denied.retry_after <= 3600
    assert denied.retry_after_header is not None and denied.retry_after_header >= 1
    assert denied.headers["retry-after"] == str(denied.retry_after_header)
    assert [lim.outcome for lim in denied.limits] == ["denied"]
    assert denied.reservation is None and denied.degrade_to is None


def test_peek_consumes_nothing(client: Floodgate, uid: str) -> None:
    who = {"suite": "checks", "user": uid}
    for _ in range(5):
        assert client.peek(who).remaining == 2
    assert client.check(who).remaining == 2


def test_report_charges_after_the_fact_and_never_denies(client: Floodgate, uid: str) -> None:
    who = {"suite": "checks", "user": uid}
    reported = client.report(who, cost=5)
    assert reported.allowed and reported.remaining == 0
    # `used` is read as the limit less what remains: a report past the limit shows as the limit.
    assert client.usage("per-user", {"user": uid}).used == 3
    assert not client.check(who).allowed


def test_costs_per_dimension_count_in_their_own_rules(client: Floodgate, uid: str) -> None:
    who = {"suite": "tokens", "tenant": uid}
    decision = client.check(who, costs={"requests": 1, "tokens": 1200})
    assert decision.allowed
    assert {lim.name for lim in decision.limits} == {"requests-per-tenant", "tokens-per-tenant"}
    client.report(who, costs={"tokens": 300})
    assert client.usage("tokens-per-tenant", {"tenant": uid}).used == 1500
    assert client.usage("requests-per-tenant", {"tenant": uid}).used == 1
    too_many = client.check(who, costs={"requests": 1, "tokens": 9000})
    assert not too_many.allowed and too_many.rule == "tokens-per-tenant"


def test_usage_reads_a_counter_and_names_its_period(client: Floodgate, uid: str) -> None:
    client.check({"suite": "checks", "user": uid})
    usage = client.usage("per-user", {"user": uid})
    assert (usage.rule, usage.limit, usage.used, usage.remaining) == ("per-user", 3, 1, 2)
    assert usage.period_start is not None and usage.period_end is not None
    assert usage.period_start <= time.time() < usage.period_end
    assert usage.previous is None, "a window keeps no previous period"
    with pytest.raises(NotFound) as unknown:
        client.usage("no-such-rule", {"user": uid})
    assert unknown.value.problem is not None and unknown.value.problem.status == 404


def test_usage_of_a_quota_names_the_period_before_the_current_one(client: Floodgate, uid: str) -> None:
    usage = client.usage("monthly-plan", {"tenant": uid, "plan": "free"})
    assert usage.previous is not None and usage.period_start is not None
    assert usage.previous.used == 0, "a tenant never seen spent nothing last month"
    assert usage.previous.period_end == usage.period_start
    assert usage.previous.period_start < usage.previous.period_end


def test_simulate_runs_the_playground(client: Floodgate) -> None:
    simulation = client.simulate("token_bucket", [0, 0, SimulatedRequest(250, 2)], rate="2/s", burst=2)
    assert simulation.algorithm == "token_bucket" and simulation.limit == 2
    assert [d.allowed for d in simulation.decisions] == [True, True, False]
    assert simulation.decisions[2].retry_after_ms is not None
    with pytest.raises(InvalidRequest) as refused:
        client.simulate("token_bucket", [0], rate="two/s")
    assert refused.value.problem is not None and "rate" in refused.value.problem.detail


def test_a_plan_over_its_quota_degrades_and_the_decision_says_to_which_model(client: Floodgate, uid: str) -> None:
    free = {"suite": "plans", "tenant": uid, "plan": "free"}
    assert [client.check(free).degrade_to for _ in range(2)] == [None, None]
    degraded = client.check(free)
    assert degraded.allowed and degraded.degrade_to == "small-model"
    assert degraded.headers["floodgate-degrade"] == "small-model"
    enterprise = {"suite": "plans", "tenant": uid + "-e", "plan": "enterprise"}
    client.check(enterprise)
    client.check(enterprise)
    refused = client.check(enterprise)
    assert not refused.allowed and refused.degrade_to is None


def test_session_steps_spend_a_budget(client: Floodgate, uid: str) -> None:
    session = client.session(uid, descriptors={"suite": "steps"})
    steps = [session.step() for _ in range(4)]
    assert [s.allowed for s in steps] == [True, True, True, False]
    assert [s.remaining for s in steps[:3]] == [2, 1, 0]
    spent = steps[3].decision
    assert spent.rule == "agent-steps" and spent.retry_after is not None and spent.retry_after > 3600


def test_a_cost_no_rule_can_ever_grant_is_an_invalid_request_with_the_problem(client: Floodgate, uid: str) -> None:
    with pytest.raises(InvalidRequest) as never:
        client.check({"suite": "checks", "user": uid}, cost=4)
    problem = never.value.problem
    assert problem is not None and problem.status == 422
    assert problem.type == "https://floodgate.dev/problems/never-allowed"


@pytest.mark.parametrize(
    ("descriptors", "options", "says"),
    [
        ({"user": 42}, {}, "descriptor 'user' must be a string"),
        ({"user": None}, {}, "must be a string"),
        ({"": "x"}, {}, "non-empty string"),
        (["user", "u1"], {}, "mapping"),
        ({"user": "u1"}, {"cost": -1}, "cost must be from 1"),
        ({"user": "u1"}, {"cost": 0}, "cost must be from 1"),
        ({"user": "u1"}, {"cost": 1.5}, "whole number"),
        ({"user": "u1"}, {"cost": True}, "whole number"),
        ({"user": "u1"}, {"cost": "2"}, "whole number"),
        ({"user": "u1"}, {"cost": 2**64}, "cost must be from 1"),
        ({"user": "u1"}, {"cost": 1, "costs": {"tokens": 1}}, "not both"),
        ({"user": "u1"}, {"costs": {}}, "1 to 16"),
        ({"user": "u1"}, {"costs": {"tokens": 0}}, "at least one"),
        ({"user": "u1"}, {"costs": {"tokens": -5}}, "from 0"),
        ({"user": "u1"}, {"costs": {"Tokens": 5}}, "lowercase"),
        ({"user": "u1"}, {"deadline": 0}, "deadline"),
        ({"user": "u1"}, {"deadline": -1.0}, "deadline"),
        ({"user": "u1"}, {"fail_mode": "sideways"}, "fail_mode"),
        ({"user": "u1"}, {"domain": ""}, "domain"),
    ],
)
def test_bad_input_is_a_typed_error_before_anything_is_sent(
    client: Floodgate, descriptors: object, options: dict[str, object], says: str
) -> None:
    before = client.stats().calls
    with pytest.raises(InvalidRequest, match=says) as refused:
        client.check(descriptors, **options)  # type: ignore[arg-type]
    assert refused.value.problem is None
    assert client.stats().calls == before


def test_too_many_descriptors_are_refused(client: Floodgate) -> None:
    with pytest.raises(InvalidRequest, match="at most 64"):
        client.check({f"d{i}": "x" for i in range(65)})


def test_bad_settings_are_config_errors_naming_the_field(server: object) -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({"url": "ftp://x"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": "http://127.0.0.1:1", "deadline": 0}, "deadline"),
        ({"url": "http://127.0.0.1:1", "fail_mode": "maybe"}, "fail_mode"),
        ({"url": "http://127.0.0.1:1", "token": ""}, "token"),
        ({"url": "http://127.0.0.1:1", "ca": "/nonexistent.pem"}, "ca"),
        ({"url": "https://127.0.0.1:1", "ca": "/nonexistent.pem"}, "ca"),
        ({"url": "http://127.0.0.1:1", "max_connections": 0}, "max_connections"),
        ({"url": "http://127.0.0.1:1", "headers": {"x-tenant": "t1\r\nx-admin: yes"}}, "headers"),
        ({"url": "http://127.0.0.1:1", "headers": {"bad name": "x"}}, "headers"),
        ({"url": "http://127.0.0.1:1", "token": "abc\r\nx-admin: yes"}, "token"),
    ]
    for settings, field in cases:
        with pytest.raises(ConfigError) as refused:
            Floodgate(**settings)  # type: ignore[arg-type]
        assert refused.value.field == field, settings


def test_warmup_answers_whether_the_server_is_healthy(client: Floodgate) -> None:
    assert client.warmup()
    with Floodgate("http://127.0.0.1:1") as nowhere:
        assert not nowhere.warmup(timeout=1.0)
