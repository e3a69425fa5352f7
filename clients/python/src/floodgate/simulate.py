"""The body of ``POST /v1/simulate`` (the playground): one limit, as a rule writes it, and the
requests to run through it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from floodgate.decision import SimulatedRequest
from floodgate.errors import InvalidRequest
from floodgate.request import MAX_COST

MAX_REQUESTS = 10_000
"""The most requests one simulation takes."""


def _whole(value: object, least: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least or value > MAX_COST:
        raise InvalidRequest(f"simulate: {what} must be a whole number from {least}, got {value!r}")
    return value


def simulate_body(
    algorithm: object,
    requests: Iterable[SimulatedRequest | int],
    params: Mapping[str, object],
    sample_ms: object,
    until_ms: object,
) -> bytes:
    """The JSON body; each parameter is the server's to check (a 400 naming it) beyond its type."""
    if not isinstance(algorithm, str) or algorithm == "":
        raise InvalidRequest(f"simulate: algorithm must be a name such as 'token_bucket', got {algorithm!r}")
    body: dict[str, object] = {"algorithm": algorithm}
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise InvalidRequest(
                f"simulate: parameter {name!r} must be written as a rule writes it (a string or a whole "
                f"number), got {value!r}"
            )
        body[name] = value
    hits: list[dict[str, int]] = []
    for i, request in enumerate(requests):
        if isinstance(request, SimulatedRequest):
            at, cost = request.at_ms, request.cost
        else:
            at, cost = request, 1
        hit = {"at_ms": _whole(at, 0, f"requests[{i}].at_ms")}
        if cost != 1:
            hit["cost"] = _whole(cost, 1, f"requests[{i}].cost")
        hits.append(hit)
    if len(hits) > MAX_REQUESTS:
        raise InvalidRequest(f"simulate: at most {MAX_REQUESTS} requests, got {len(hits)}")
    body["requests"] = hits
    if sample_ms is not None:
        body["sample_ms"] = _whole(sample_ms, 1, "sample_ms")
    if until_ms is not None:
        if sample_ms is None:
            raise InvalidRequest("simulate: until_ms needs sample_ms")
        body["until_ms"] = _whole(until_ms, 0, "until_ms")
    return json.dumps(body, separators=(",", ":")).encode()
