"""An incoming request as the middleware see it, whatever the framework: the descriptors made of it,
and the 429 it gets when denied — the problem+json body Floodgate's own front doors send."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Union

from floodgate.client_ip import ClientIp, ProxyHeader
from floodgate.decision import Decision
from floodgate.errors import ConfigError, InvalidRequest
from floodgate.request import cost_of, descriptors_of
from floodgate.wire import deciding

RATE_LIMITED_TYPE = "https://floodgate.dev/problems/rate-limited"
"""The problem type of a request denied by a rate limit."""
PROBLEM_CONTENT_TYPE = "application/problem+json"


@dataclass(frozen=True, slots=True)
class Incoming:
    """What the middleware know of a request: its method, path, the route's template when one
    matched (``/items/{item_id}``, never the raw path), its headers (lowercase names, the first
    line of each), the client's IP through trusted proxies, the user and tenant, and the
    framework's own request object (an ASGI scope, a WSGI environ, a Django ``HttpRequest``)."""

    method: str
    path: str
    route: str | None
    headers: Mapping[str, str]
    client_ip: str | None
    user: str | None = None
    tenant: str | None = None
    raw: object = field(default=None, repr=False)


DescriptorsFn = Callable[[Incoming], Union[Mapping[str, str], Awaitable[Mapping[str, str]]]]
"""Descriptors of your own for a request, added to (and overriding) the defaults."""
CostFn = Callable[[Incoming], int]


@dataclass(frozen=True)
class Describe:
    """How a request becomes descriptors: ``method``, ``route`` (``"POST /chat"``: the matched
    route's template, absent when none matched), ``ip`` (through ``trusted_proxies``), ``user`` and
    ``tenant`` (the framework's authenticated user when there is one, else the ``user_header`` and
    ``tenant_header`` headers — which only a trusted gateway should set; ``None`` for none), the
    ``rule`` descriptor when given (so rules can ``match: {rule: <name>}``), then ``descriptors``.
    """

    trusted_proxies: tuple[str, ...] = ()
    forwarded_header: ProxyHeader = "x-forwarded-for"
    user_header: str | None = "x-user-id"
    tenant_header: str | None = "x-tenant-id"
    rule: str | None = None
    cost: int | CostFn = 1
    client_ip: ClientIp = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "client_ip", ClientIp(self.trusted_proxies, self.forwarded_header))
        for name in ("user_header", "tenant_header"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or value == ""):
                raise ConfigError(name, f"must be a header name or None, got {value!r}")
            if value is not None:
                object.__setattr__(self, name, value.lower())
        if self.rule is not None and (not isinstance(self.rule, str) or self.rule == ""):
            raise ConfigError("rule", f"must be a non-empty string, got {self.rule!r}")
        if not callable(self.cost):
            try:
                cost_of(self.cost, "middleware")
            except InvalidRequest as error:
                raise ConfigError("cost", str(error)) from None

    def identity(self, headers: Mapping[str, str]) -> tuple[str | None, str | None]:
        """The user and tenant from the request's headers."""
        user = headers.get(self.user_header) if self.user_header is not None else None
        tenant = headers.get(self.tenant_header) if self.tenant_header is not None else None
        return user or None, tenant or None

    def descriptors(self, incoming: Incoming) -> dict[str, str]:
        """The default descriptors of ``incoming``."""
        out = {"method": incoming.method}
        if incoming.route is not None:
            out["route"] = f"{incoming.method} {incoming.route}"
        if incoming.client_ip is not None:
            out["ip"] = incoming.client_ip
        if incoming.user is not None:
            out["user"] = incoming.user
        if incoming.tenant is not None:
            out["tenant"] = incoming.tenant
        if self.rule is not None:
            out["rule"] = self.rule
        return out

    def cost_of(self, incoming: Incoming) -> int:
        """The request's cost."""
        cost = self.cost(incoming) if callable(self.cost) else self.cost
        return cost_of(cost, "middleware")


def own_descriptors(extra: object) -> dict[str, str]:
    """What a ``descriptors`` callable returned, checked (a value that is not a string is a bug)."""
    return descriptors_of(extra, "middleware descriptors")


def problem_for(decision: Decision, now: float | None = None) -> dict[str, object]:
    """The 429 body of a denied decision, as Floodgate's front doors write it: ``retry_after`` in
    seconds (rounded up, at least 1), and the numbers of the denying limit that makes the client
    wait longest (``reset`` in Unix seconds). Never names rules or keys."""
    retry_after = decision.retry_after_header or 1
    unit = "second" if retry_after == 1 else "seconds"
    problem: dict[str, object] = {
        "type": RATE_LIMITED_TYPE,
        "title": "Too Many Requests",
        "status": 429,
        "detail": f"Rate limit exceeded; retry in {retry_after} {unit}.",
        "retry_after": retry_after,
    }
    denying = deciding(False, decision.limits)
    if denying is not None:
        problem["limit"] = denying.limit
        problem["remaining"] = denying.remaining
        problem["reset"] = math.ceil((time.time() if now is None else now) + denying.reset_after)
    return problem


def denial(decision: Decision) -> tuple[bytes, list[tuple[str, str]]]:
    """The 429's body and headers: problem+json, ``Retry-After``, and the rate-limit headers."""
    problem = problem_for(decision)
    body = json.dumps(problem, separators=(",", ":")).encode()
    headers = [(k, v) for k, v in decision.headers.items() if k != "retry-after"]
    headers.append(("retry-after", str(problem["retry_after"])))
    headers.append(("content-type", PROBLEM_CONTENT_TYPE))
    headers.append(("content-length", str(len(body))))
    return body, headers


def degraded_model(decision: Decision | None, requested: str) -> str:
    """The model to serve a request with: the ``degrade_to`` of its decision when its plan is over
    its limit and its ``overage`` switches models, else ``requested``."""
    if decision is None or decision.degrade_to is None:
        return requested
    return decision.degrade_to
