"""Per-route limits for FastAPI: a dependency, ``Depends(rate_limit("chat", cost=…))``.

.. code-block:: python

    from fastapi import Depends, FastAPI
    from floodgate import AsyncFloodgate, Decision
    from floodgate.fastapi import install, rate_limit

    app = FastAPI()
    install(app, AsyncFloodgate("http://127.0.0.1:8080"))

    @app.post("/chat")
    async def chat(decision: Decision = Depends(rate_limit("chat", cost=1))) -> dict[str, str]:
        return {"model": decision.degrade_to or "large-model"}

The dependency checks the route's request with the descriptors of
:class:`~floodgate.incoming.Describe` (``route`` is the route's template) plus ``rule`` — so that
rules can ``match: {rule: chat}`` — and ``descriptors(request)``; passes the rate-limit headers to
the response; and raises :class:`RateLimitExceeded` when denied, which the handler :func:`install`
registers answers with 429, ``Retry-After`` and the problem+json body. Concurrency permits an
allowed check took are released once the route has answered.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Union

from fastapi import FastAPI, HTTPException, Request, Response

from floodgate.aio import AsyncFloodgate
from floodgate.asgi import STATE_KEY, incoming_of, release_quietly
from floodgate.client_ip import ProxyHeader
from floodgate.decision import Decision
from floodgate.errors import ConfigError
from floodgate.incoming import Describe, denial, own_descriptors, problem_for
from floodgate.request import cost_of

__all__ = ["RateLimitExceeded", "install", "rate_limit"]

RequestCost = Union[int, Callable[[Request], Union[int, Awaitable[int]]]]
RequestDescriptors = Callable[[Request], Union[Mapping[str, str], Awaitable[Mapping[str, str]]]]


class RateLimitExceeded(HTTPException):
    """A request the dependency denied: a 429 carrying its :class:`~floodgate.Decision`, the
    problem body (``detail``) and the headers."""

    def __init__(self, decision: Decision) -> None:
        _, headers = denial(decision)
        super().__init__(
            status_code=429,
            detail=problem_for(decision),
            headers={k: v for k, v in headers if k != "content-length"},
        )
        self.decision = decision


@dataclass(frozen=True)
class Installed:
    """What :func:`install` leaves on ``app.state.floodgate``."""

    client: AsyncFloodgate
    describe: Describe


def install(
    app: FastAPI,
    client: AsyncFloodgate,
    *,
    trusted_proxies: Iterable[str] = (),
    forwarded_header: ProxyHeader = "x-forwarded-for",
    user_header: str | None = "x-user-id",
    tenant_header: str | None = "x-tenant-id",
) -> None:
    """Gives ``app``'s :func:`rate_limit` dependencies their client and how they describe a request,
    and answers :class:`RateLimitExceeded` with the problem+json 429 Floodgate's front doors send."""
    if not isinstance(client, AsyncFloodgate):
        raise ConfigError("client", f"must be an AsyncFloodgate, got {type(client).__name__}")
    describe = Describe(
        trusted_proxies=tuple(trusted_proxies),
        forwarded_header=forwarded_header,
        user_header=user_header,
        tenant_header=tenant_header,
    )
    app.state.floodgate = Installed(client, describe)

    async def answer(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RateLimitExceeded)
        body, headers = denial(exc.decision)
        return Response(content=body, status_code=429, headers=dict(headers))

    app.add_exception_handler(RateLimitExceeded, answer)


def _installed(request: Request) -> Installed:
    found = getattr(request.app.state, "floodgate", None)
    if not isinstance(found, Installed):
        raise RuntimeError("floodgate.fastapi.rate_limit needs floodgate.fastapi.install(app, client) first")
    return found


def rate_limit(
    rule: str | None = None,
    *,
    cost: RequestCost = 1,
    descriptors: RequestDescriptors | None = None,
    headers_on_allowed: bool = True,
) -> Callable[[Request, Response], AsyncIterator[Decision]]:
    """A dependency that checks the route's requests (see the module's documentation). ``cost`` is a
    number, or a function (or coroutine function) of the request, e.g. of its body's ``max_tokens``;
    ``descriptors(request)`` adds descriptors of your own."""
    if rule is not None and (not isinstance(rule, str) or rule == ""):
        raise ConfigError("rule", f"must be a non-empty string, got {rule!r}")
    if not callable(cost):
        cost_of(cost, "rate_limit")

    async def dependency(request: Request, response: Response) -> AsyncIterator[Decision]:
        installed = _installed(request)
        incoming = incoming_of(request.scope, installed.describe)
        checked = installed.describe.descriptors(incoming)
        if rule is not None:
            checked["rule"] = rule
        if descriptors is not None:
            extra = descriptors(request)
            if inspect.isawaitable(extra):
                extra = await extra
            checked.update(own_descriptors(extra))
        amount = cost(request) if callable(cost) else cost
        if inspect.isawaitable(amount):
            amount = await amount
        amount = cost_of(amount, "rate_limit")
        decision = await installed.client.check(checked, cost=None if amount == 1 else amount)
        request.scope.setdefault("state", {})[STATE_KEY] = decision
        if not decision.allowed:
            raise RateLimitExceeded(decision)
        if headers_on_allowed:
            response.headers.update(decision.headers)
        try:
            yield decision
        finally:
            if decision.reservation is not None:
                await release_quietly(installed.client, decision.reservation)

    return dependency
