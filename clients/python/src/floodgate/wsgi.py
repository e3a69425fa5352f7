"""Floodgate for WSGI apps (Flask, Django, any WSGI framework): :class:`RateLimitMiddleware` checks
every request against a Floodgate server with the sync client, passes the rate-limit headers on,
and answers a denied request with 429, ``Retry-After`` and a problem+json body.

.. code-block:: python

    from flask import Flask
    from floodgate.wsgi import RateLimitMiddleware, flask_route

    app = Flask(__name__)
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, url="http://127.0.0.1:8080", route=flask_route(app))

The decision is left in the environ (``environ["floodgate.decision"]``; :func:`decision_of`). For
Django, :class:`floodgate.django.FloodgateMiddleware` is the middleware class to list in
``MIDDLEWARE``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from floodgate.client import Floodgate
from floodgate.client_ip import ProxyHeader
from floodgate.decision import Decision, FailMode
from floodgate.errors import ConfigError, FloodgateError
from floodgate.incoming import CostFn, Describe, Incoming, degraded_model, denial, own_descriptors

__all__ = ["RateLimitMiddleware", "decision_of", "degraded_model", "flask_route", "incoming_of"]

Environ = dict[str, Any]
ExcInfo = tuple[type[BaseException], BaseException, TracebackType] | tuple[None, None, None]
StartResponse = Callable[..., Callable[[bytes], object]]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]
RouteFn = Callable[[Environ], "str | None"]
SyncDescriptorsFn = Callable[[Incoming], Mapping[str, str]]

DECISION_KEY = "floodgate.decision"
"""Where the decision is left in the environ."""


def decision_of(environ: Mapping[str, object]) -> Decision | None:
    """The decision the middleware made for a request (its WSGI environ; ``request.environ`` in
    Flask, ``request.META`` in Django)."""
    found = environ.get(DECISION_KEY)
    return found if isinstance(found, Decision) else None


def _header_key(name: str) -> str:
    return "HTTP_" + name.upper().replace("-", "_")


def incoming_of(environ: Mapping[str, Any], describe: Describe, route: str | None, user: str | None = None) -> Incoming:
    """The :class:`~floodgate.incoming.Incoming` of a WSGI environ (``route`` as the framework
    matched it; ``user`` when the framework authenticated one)."""
    headers: dict[str, str] = {}
    for key, value in environ.items():
        if key.startswith("HTTP_") and isinstance(value, str):
            headers[key[5:].replace("_", "-").lower()] = value
    if "CONTENT_TYPE" in environ:
        headers["content-type"] = str(environ["CONTENT_TYPE"])
    forwarded = environ.get(_header_key(describe.client_ip.header))
    header_user, tenant = describe.identity(headers)
    return Incoming(
        method=str(environ.get("REQUEST_METHOD", "GET")).upper(),
        path=str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", "/")),
        route=route,
        headers=headers,
        client_ip=describe.client_ip.resolve(
            environ.get("REMOTE_ADDR"), [forwarded] if isinstance(forwarded, str) else []
        ),
        user=user if user is not None else header_user,
        tenant=tenant,
        raw=environ,
    )


def flask_route(app: object) -> RouteFn:
    """The route template of a Flask (Werkzeug) app's request, matched ahead of the app
    (``/items/<int:item_id>``), or ``None`` when no rule matches. ``app`` is a Flask app (anything
    with Werkzeug's ``url_map``)."""
    url_map: Any = getattr(app, "url_map", None)
    if url_map is None or not callable(getattr(url_map, "bind_to_environ", None)):
        raise ConfigError("route", f"flask_route needs a Flask app (with a url_map), got {type(app).__name__}")

    def route(environ: Environ) -> str | None:
        try:
            rule, _ = url_map.bind_to_environ(environ).match(return_rule=True)
        except Exception:  # Werkzeug's NotFound, MethodNotAllowed, RequestRedirect
            return None
        template = getattr(rule, "rule", None)
        return template if isinstance(template, str) else None

    return route


class _Released:
    """The app's response iterable, releasing a check's permits when the server closes it."""

    def __init__(self, body: Iterable[bytes], release: Callable[[], None]) -> None:
        self._body = body
        self._release = release

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._release()


class RateLimitMiddleware:
    """Checks each request of a WSGI app (see the module's documentation).

    The settings are those of :class:`floodgate.asgi.RateLimitMiddleware`, with a sync
    :class:`~floodgate.Floodgate` as ``client``, ``descriptors`` a plain function, and ``route`` a
    function of the environ giving the route's template (:func:`flask_route`).
    """

    def __init__(
        self,
        app: WSGIApp,
        *,
        client: Floodgate | None = None,
        url: str | None = None,
        deadline: float | None = None,
        fail_mode: FailMode | None = None,
        token: str | None = None,
        rule: str | None = None,
        cost: int | CostFn = 1,
        descriptors: SyncDescriptorsFn | None = None,
        skip: Callable[[Incoming], bool] | None = None,
        route: RouteFn | None = None,
        trusted_proxies: Iterable[str] = (),
        forwarded_header: ProxyHeader = "x-forwarded-for",
        user_header: str | None = "x-user-id",
        tenant_header: str | None = "x-tenant-id",
        headers_on_allowed: bool = True,
    ) -> None:
        self.app = app
        self.client = sync_client_of(client, url, deadline, fail_mode, token)
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
        self.route = route
        self.headers_on_allowed = headers_on_allowed

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        incoming = incoming_of(environ, self.describe, self.route(environ) if self.route is not None else None)
        if self.skip is not None and self.skip(incoming):
            return self.app(environ, start_response)
        decision = check(self.client, self.describe, incoming, self.descriptors)
        environ[DECISION_KEY] = decision
        if not decision.allowed:
            body, headers = denial(decision)
            start_response("429 Too Many Requests", headers)
            return [body]
        responding = start_response
        if self.headers_on_allowed and decision.headers:
            extra = list(decision.headers.items())

            def responding(status: str, headers: list[tuple[str, str]], exc_info: ExcInfo | None = None) -> Any:
                return start_response(status, [*headers, *extra], exc_info)

        reservation = decision.reservation
        if reservation is None:
            return self.app(environ, responding)
        try:
            answer = self.app(environ, responding)
        except BaseException:
            release_quietly(self.client, reservation)
            raise
        return _Released(answer, lambda: release_quietly(self.client, reservation))


def check(
    client: Floodgate,
    describe: Describe,
    incoming: Incoming,
    descriptors: SyncDescriptorsFn | None,
) -> Decision:
    """The check of one request: the default descriptors, then ``descriptors(incoming)``."""
    checked = describe.descriptors(incoming)
    if descriptors is not None:
        checked.update(own_descriptors(descriptors(incoming)))
    cost = describe.cost_of(incoming)
    return client.check(checked, cost=None if cost == 1 else cost)


def release_quietly(client: Floodgate, reservation: str) -> None:
    """Frees a check's concurrency permits; a release that fails is counted by the client."""
    with contextlib.suppress(FloodgateError):
        client.release(reservation)


def sync_client_of(
    client: Floodgate | None,
    url: str | None,
    deadline: float | None,
    fail_mode: FailMode | None,
    token: str | None,
) -> Floodgate:
    """The client a middleware uses: the one given, or one made from ``url`` and its settings."""
    if client is not None:
        if url is not None or deadline is not None or fail_mode is not None or token is not None:
            raise ConfigError("client", "give either a client, or url/deadline/fail_mode/token to make one, not both")
        if not isinstance(client, Floodgate):
            raise ConfigError("client", f"must be a Floodgate, got {type(client).__name__}")
        return client
    if url is None:
        raise ConfigError("url", "is required (or give a client)")
    return Floodgate(
        url,
        deadline=deadline,
        fail_mode="open" if fail_mode is None else fail_mode,
        token=token,
    )
