"""The Python client generated from docs/openapi.json (openapi-python-client), against a live server.

scripts/api-fuzz generates the client as the package `floodgate_client`, starts `floodgate serve`
with scripts/api/native.yaml and the admin token below, and runs this with the server's URL:
every call goes through the generated code, and every answer is read into its generated models.

    python client_check.py http://127.0.0.1:8080
"""

import sys

from floodgate_client import AuthenticatedClient, Client
from floodgate_client.api.admin import get_config, inspect_key, reset_key
from floodgate_client.api.decisions import check, peek, report, simulate
from floodgate_client.api.operations import healthz, readyz
from floodgate_client.models import (
    CheckRequest,
    CheckRequestDescriptors,
    SimulatedRequest,
    SimulateQuotaWeek,
    SimulateQuotaWeekAlgorithm,
    SimulateQuotaWeekPeriod,
    SimulateTokenBucket,
    SimulateTokenBucketAlgorithm,
    Verdict,
)
from floodgate_client.models.inspect_key_descriptors import InspectKeyDescriptors
from floodgate_client.models.reset_key_descriptors import ResetKeyDescriptors

TOKEN = "api-fuzz-admin-token"
PROBLEMS = "https://floodgate.dev/problems/"


def request(cost=1, **descriptors):
    return CheckRequest(descriptors=CheckRequestDescriptors.from_dict(descriptors), cost=cost)


def main(url):
    client = Client(base_url=url, raise_on_unexpected_status=True)
    admin = AuthenticatedClient(base_url=url, token=TOKEN, raise_on_unexpected_status=True)

    assert healthz.sync_detailed(client=client).status_code == 200
    assert readyz.sync_detailed(client=client).status_code == 200

    # chat-per-user: 10 a minute per user on POST /chat; the eleventh is denied, with Retry-After.
    chat = {"user": "client-check", "route": "POST /chat"}
    for i in range(10):
        answer = check.sync_detailed(client=client, body=request(**chat))
        assert answer.status_code == 200, (i, answer.status_code, answer.content)
        assert isinstance(answer.parsed, Verdict) and answer.parsed.allowed
    denied = check.sync_detailed(client=client, body=request(**chat))
    assert denied.status_code == 429, denied.content
    verdict = denied.parsed
    assert isinstance(verdict, Verdict) and not verdict.allowed and verdict.retry_after_ms > 0
    rule = next(l for l in verdict.limits if l.name == "chat-per-user")
    assert (rule.limit, rule.remaining, rule.outcome.value) == (10, 0, "denied")
    assert int(denied.headers["retry-after"]) >= 1
    assert denied.headers["ratelimit-policy"].startswith('"chat-per-user";q=10;w=60')

    # peek consumes nothing; report never denies.
    assert peek.sync_detailed(client=client, body=request(**chat)).status_code == 429
    reported = report.sync_detailed(client=client, body=request(cost=5, **chat))
    assert reported.status_code == 200 and reported.parsed.allowed

    # A cost the per-user bucket (burst 20) can never grant: a never-allowed problem.
    never = check.sync_detailed(client=client, body=request(cost=21, user="client-check-2"))
    assert never.status_code == 422, never.content
    assert never.parsed.type_.value == PROBLEMS + "never-allowed", never.parsed
    assert never.headers["content-type"] == "application/problem+json"

    # Stated values, read from the document's schema: the template rule takes them within its bounds.
    stated = CheckRequest.from_dict(
        {"descriptors": {"user": "client-check-3"}, "stated": {"limit": 3, "window_ms": 60000}}
    )
    answer = check.sync_detailed(client=client, body=stated)
    assert answer.status_code == 200, answer.content
    rule = next(l for l in answer.parsed.limits if l.name == "stated-global")
    assert (rule.limit, rule.remaining) == (3, 2), rule
    above = CheckRequest.from_dict({"descriptors": {"user": "client-check-3"}, "stated": {"limit": 2000000}})
    refused = check.sync_detailed(client=client, body=above)
    assert refused.status_code == 422 and "above the rule's bound 1000000" in refused.parsed.detail, refused.content

    # The admin API needs the token.
    refused = get_config.sync_detailed(client=client)
    assert refused.status_code == 401 and refused.parsed.type_.value == PROBLEMS + "unauthorized"
    config = get_config.sync_detailed(client=admin)
    assert config.status_code == 200 and config.parsed.rules == 7, config.content
    assert config.parsed.headers.value == "both"

    # The key's state, then its reset: the user may chat again.
    descriptors = {"user": "client-check", "route": "POST /chat"}
    state = inspect_key.sync_detailed(
        client=admin, rule="chat-per-user", descriptors=InspectKeyDescriptors.from_dict(descriptors)
    )
    assert state.status_code == 200 and state.parsed.remaining == 0 and not state.parsed.allowed
    missing = inspect_key.sync_detailed(client=admin, rule="no-such-rule")
    assert missing.status_code == 404 and missing.parsed.type_.value == PROBLEMS + "not-found"
    reset = reset_key.sync_detailed(
        client=admin, rule="chat-per-user", descriptors=ResetKeyDescriptors.from_dict({"user": "client-check"})
    )
    assert reset.status_code == 200 and reset.parsed.reset
    assert check.sync_detailed(client=client, body=request(**chat)).status_code == 200

    # The playground, through the body's schema for its algorithm: a burst of 8 at 2/s passes 8 of 10;
    # a cost above the burst is refused, never to pass.
    burst = [SimulatedRequest(at_ms=0) for _ in range(10)] + [SimulatedRequest(at_ms=0, cost=9)]
    body = SimulateTokenBucket(algorithm=SimulateTokenBucketAlgorithm.TOKEN_BUCKET, rate="2/s", burst=8, requests=burst)
    run = simulate.sync_detailed(client=client, body=body)
    assert run.status_code == 200, run.content
    assert [d.allowed for d in run.parsed.decisions] == [True] * 8 + [False] * 3
    assert run.parsed.decisions[8].retry_after_ms == 500 and run.parsed.decisions[10].retry_after_ms is None
    week = SimulateQuotaWeek(
        algorithm=SimulateQuotaWeekAlgorithm.QUOTA,
        period=SimulateQuotaWeekPeriod.WEEK,
        limit=2,
        anchor="sun",
        requests=[SimulatedRequest(at_ms=0) for _ in range(3)],
    )
    run = simulate.sync_detailed(client=client, body=week)
    assert run.status_code == 200 and [d.allowed for d in run.parsed.decisions] == [True, True, False], run.content

    print("generated client: every call answered as the document says")


if __name__ == "__main__":
    main(sys.argv[1])
