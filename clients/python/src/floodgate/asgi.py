"""Floodgate for ASGI apps (FastAPI, Starlette, any ASGI framework): :class:`RateLimitMiddleware`
checks every HTTP request against a Floodgate server, passes the rate-limit headers on, and answers
a denied request with 429, ``Retry-After`` and a problem+json body.

.. code-block:: python

    from fastapi import FastAPI
    from floodgate.asgi import RateLimitMiddleware

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, url="http://127.0.0.1:8080", trusted_proxies=["10.0.0.0/8"])

The decision is left in the request's state (``request.state.floodgate``, ``scope["state"]``), so
that a handler reads ``degrade_to`` (:func:`degraded_model`). Pure ASGI: nothing of Starlette is
imported; on a Starlette or FastAPI app the route's template is found by matching the app's routes
(the middleware runs before routing).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from floodgate.aio import AsyncFloodgate
from floodgate.client_ip import ProxyHeader
from floodgate.decision import Decision, FailMode
from floodgate.errors import ConfigError, FloodgateError
from floodgate.incoming import CostFn, Describe, DescriptorsFn, Incoming, degraded_model, denial, own_descriptors

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

STATE_KEY = "floodgate"
"""Where the decision is left in ``scope["state"]`` (``request.state.floodgate``)."""

__all__ = ["RateLimitMiddleware", "decision_of", "degraded_model", "incoming_of", "route_template"]

_FULL = 2  # starlette.routing.Match.FULL
_PARTIAL = 1


def _match_value(match: object) -> int:
    value = getattr(match, "value", match)
    return value if isinstance(value, int) else 0


def _template(routes: Iterable[Any], scope: Scope, prefix: str) -> str | None:
    partial: str | None = None
    for route in routes:
        try:
            match, child = route.matches(scope)
        except (AttributeError, TypeError, KeyError):
            continue
        kind = _match_value(match)
        if kind not in (_FULL, _PARTIAL):
            continue
        path = getattr(route, "path_format", None)
        inner = getattr(route, "routes", None)
        if inner is not None and kind == _FULL:
            sub = dict(scope)
            sub.update(child)
            found = _template(inner, sub, prefix + (path if isinstance(path, str) else ""))
            if found is not None:
                return found
            continue
        if not isinstance(path, str):
            continue
        if kind == _FULL:
            return prefix + path
        partial = partial or prefix + path
    return partial


def route_template(scope: Scope) -> str | None:
    """The template of the route a Starlette or FastAPI app will route ``scope`` to
    (``/items/{item_id}``, mounts included), or the one routing set (``scope["route"]``); ``None``
    when no route matches or the app has no routes to match."""
    routed = scope.get("route")
    path = getattr(routed, "path_format", None)
    if isinstance(path, str):
        return path
    app = scope.get("app")
    routes = getattr(getattr(app, "router", app), "routes", None)
    if routes is None:
        return None
    return _template(routes, scope, "")


class RouteTemplates:
    """:func:`route_template`, remembered per method and path (the router's matching is the same
    each time for one app): at most ``size`` paths, forgotten all at once when full, so that paths
    with ids in them cannot grow it without bound."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._known: dict[tuple[object, str, str, str], str | None] = {}

    def __call__(self, scope: Scope) -> str | None:
        key = (id(scope.get("app")), scope.get("method", "GET"), scope.get("root_path", ""), scope.get("path", "/"))
        try:
            return self._known[key]
        except KeyError:
            pass
        found = route_template(scope)
        if len(self._known) >= self._size:
            self._known.clear()
        self._known[key] = found
        return found


def _user(scope: Scope) -> str | None:
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    for name in ("identity", "display_name"):
        try:
            value = getattr(user, name)
        except (NotImplementedError, AttributeError):
            continue
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) != "":
            return str(value)
    return None


def incoming_of(
    scope: Scope, describe: Describe, route: bool = True, templates: Callable[[Scope], str | None] = route_template
) -> Incoming:
    """The :class:`~floodgate.incoming.Incoming` of an HTTP scope (its route's template found by
    ``templates``, when ``route``)."""
    headers: dict[str, str] = {}
    forwarded: list[str] = []
    forwarded_name = describe.client_ip.header.encode()
    for raw_name, raw_value in scope.get("headers", ()):
        value = raw_value.decode("latin-1")
        if raw_name == forwarded_name:
            forwarded.append(value)
        name = raw_name.decode("latin-1")
        if name not in headers:
            headers[name] = value
    client = scope.get("client")
    peer = client[0] if client else None
    user, tenant = describe.identity(headers)
    authenticated = _user(scope)
    return Incoming(
        method=scope.get("method", "GET"),
        path=scope.get("path", "/"),
        route=templates(scope) if route else None,
        headers=headers,
        client_ip=describe.client_ip.resolve(peer, forwarded),
        user=authenticated if authenticated is not None else user,
        tenant=tenant,
        raw=scope,
    )


def decision_of(request_or_scope: object) -> Decision | None:
    """The decision the middleware (or :func:`floodgate.fastapi.rate_limit`) made for a request: a
    Starlette ``Request`` or an ASGI scope."""
    scope = getattr(request_or_scope, "scope", request_or_scope)
    state = scope.get("state") if isinstance(scope, MutableMapping) else None
    found = state.get(STATE_KEY) if isinstance(state, MutableMapping) else None
    return found if isinstance(found, Decision) else None


async def send_denial(send: Send, decision: Decision) -> None:
    """Answers 429 with the problem+json body, ``Retry-After`` and the rate-limit headers."""
    body, headers = denial(decision)
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RateLimitMiddleware:
    """Checks each HTTP request (see the module's documentation).

    Give a ``client`` (an :class:`~floodgate.AsyncFloodgate` to share), or a ``url`` (with
    ``deadline``, ``fail_mode``, ``token``) to make one. The descriptors are those of
    :class:`~floodgate.incoming.Describe` — ``method``, ``route``, ``ip`` through
    ``trusted_proxies`` (walked from the right over ``forwarded_header``; only hops in those networks
    are skipped), ``user`` and ``tenant`` (the authenticated ``scope["user"]``, else the
    ``user_header``/``tenant_header`` headers), ``rule`` — then ``descriptors(incoming)`` (a function
    or a coroutine function). ``cost`` is a number or a function of the request; ``skip(incoming)``
    lets a request through unchecked. Allowed responses carry the rate-limit headers unless
    ``headers_on_allowed`` is false; concurrency permits an allowed check took are released when
    the app has answered. A client the middleware made from ``url`` is closed when the app's
    lifespan shuts down.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        client: AsyncFloodgate | None = None,
        url: str | None = None,
        deadline: float | None = None,
        fail_mode: FailMode | None = None,
        token: str | None = None,
        rule: str | None = None,
        cost: int | CostFn = 1,
        descriptors: DescriptorsFn | None = None,
        skip: Callable[[Incoming], bool] | None = None,
        trusted_proxies: Iterable[str] = (),
        forwarded_header: ProxyHeader = "x-forwarded-for",
        user_header: str | None = "x-user-id",
        tenant_header: str | None = "x-tenant-id",
        headers_on_allowed: bool = True,
        route: bool = True,
    ) -> None:
        self.app = app
        self.client = client_of(client, url, deadline, fail_mode, token)
        self._owns_client = client is None
        self.describe = Describe(
            trusted_proxies=tuple(trusted_proxies),
            forwarded_header=forwarded_header,
            user_header=user_header,
            tenant_header=tenant_header,
            rule=rule,
            cost=cost,
        )
        self.descriptors = descriptors
        self.skip = skip
        self.headers_on_allowed = headers_on_allowed
        self.route = route
        self._templates = RouteTemplates()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and self._owns_client:
            await self.app(scope, receive, self._closing_at_shutdown(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = incoming_of(scope, self.describe, self.route, self._templates)
        if self.skip is not None and self.skip(incoming):
            await self.app(scope, receive, send)
            return
        descriptors = self.describe.descriptors(incoming)
        if self.descriptors is not None:
            extra = self.descriptors(incoming)
            if inspect.isawaitable(extra):
                extra = await extra
            descriptors.update(own_descriptors(extra))
        cost = self.describe.cost_of(incoming)
        decision = await self.client.check(descriptors, cost=None if cost == 1 else cost)
        scope.setdefault("state", {})[STATE_KEY] = decision
        if not decision.allowed:
            await send_denial(send, decision)
            return
        try:
            if self.headers_on_allowed and decision.headers:
                await self.app(scope, receive, _with_headers(send, decision))
            else:
                await self.app(scope, receive, send)
        finally:
            if decision.reservation is not None:
                await release_quietly(self.client, decision.reservation)

    def _closing_at_shutdown(self, send: Send) -> Send:
        """The lifespan's ``send``: the client the middleware made is closed as the app shuts down."""

        async def sending(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await self.client.aclose()
            await send(message)

        return sending


def _with_headers(send: Send, decision: Decision) -> Send:
    extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in decision.headers.items()]

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", ()), *extra]
        await send(message)

    return sending


async def release_quietly(client: AsyncFloodgate, reservation: str) -> None:
    """Frees a check's concurrency permits; a release that fails is counted by the client and the
    permits end with their lease."""
    with contextlib.suppress(FloodgateError):
        await client.release(reservation)


def client_of(
    client: AsyncFloodgate | None,
    url: str | None,
    deadline: float | None,
    fail_mode: FailMode | None,
    token: str | None,
) -> AsyncFloodgate:
    """The client a middleware uses: the one given, or one made from ``url`` and its settings."""
    if client is not None:
        if url is not None or deadline is not None or fail_mode is not None or token is not None:
            raise ConfigError("client", "give either a client, or url/deadline/fail_mode/token to make one, not both")
        if not isinstance(client, AsyncFloodgate):
            raise ConfigError("client", f"must be an AsyncFloodgate, got {type(client).__name__}")
        return client
    if url is None:
        raise ConfigError("url", "is required (or give a client)")
    return AsyncFloodgate(
        url,
        deadline=deadline,
        fail_mode="open" if fail_mode is None else fail_mode,
        token=token,
    )
