"""Floodgate for Django: :class:`FloodgateMiddleware`, configured by the ``FLOODGATE`` setting.

.. code-block:: python

    # settings.py
    MIDDLEWARE = [
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "floodgate.django.FloodgateMiddleware",
        ...
    ]
    FLOODGATE = {"URL": "http://127.0.0.1:8080", "DEADLINE": 0.05, "FAIL_MODE": "open"}

Each request is checked once its URL is resolved (``process_view``), so that ``route`` is the URL
pattern (``GET /items/<int:item_id>``) — a request no pattern resolves (a 404) is not checked;
``user`` is the authenticated user's primary key (``request.user``), else the ``x-user-id`` header.
A denied request gets the 429 with ``Retry-After`` and the problem+json body; allowed responses
carry the rate-limit headers. The decision is ``request.floodgate`` (``degraded_model(request.floodgate, "gpt-4o")``).

The ``FLOODGATE`` keys: ``URL`` (required), ``DEADLINE`` (seconds), ``FAIL_MODE``, ``TOKEN``, ``CA``,
``CLIENT_CERT``, ``CLIENT_KEY`` — or instead ``CLIENT``, a :class:`~floodgate.Floodgate` to share
(or its dotted path) —, ``RULE``, ``COST`` (a number, or a function of the
:class:`~floodgate.incoming.Incoming`), ``DESCRIPTORS`` and ``SKIP`` (functions of it, or their
dotted paths), ``TRUSTED_PROXIES``, ``FORWARDED_HEADER``, ``USER_HEADER``, ``TENANT_HEADER``,
``HEADERS_ON_ALLOWED``. Another key, or a value that cannot be used, is ``ImproperlyConfigured``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.module_loading import import_string

from floodgate.client import Floodgate
from floodgate.decision import Decision
from floodgate.errors import ConfigError
from floodgate.incoming import CostFn, Describe, Incoming, degraded_model, denial
from floodgate.wsgi import DECISION_KEY, check, incoming_of, release_quietly

__all__ = ["FloodgateMiddleware", "decision_of", "degraded_model"]

_KEYS = frozenset(
    {
        "CLIENT",
        "URL",
        "DEADLINE",
        "FAIL_MODE",
        "TOKEN",
        "CA",
        "CLIENT_CERT",
        "CLIENT_KEY",
        "RULE",
        "COST",
        "DESCRIPTORS",
        "SKIP",
        "TRUSTED_PROXIES",
        "FORWARDED_HEADER",
        "USER_HEADER",
        "TENANT_HEADER",
        "HEADERS_ON_ALLOWED",
    }
)


def decision_of(request: HttpRequest) -> Decision | None:
    """The decision the middleware made for ``request``."""
    found = getattr(request, "floodgate", None)
    return found if isinstance(found, Decision) else None


def _function(value: object, key: str) -> Callable[..., Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = import_string(value)
    if not callable(value):
        raise ImproperlyConfigured(f"FLOODGATE['{key}'] must be a function or its dotted path, got {value!r}")
    return value


def _user(request: HttpRequest) -> str | None:
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    pk = getattr(user, "pk", None)
    return None if pk is None else str(pk)


_CLIENT_SETTINGS = ("URL", "DEADLINE", "FAIL_MODE", "TOKEN", "CA", "CLIENT_CERT", "CLIENT_KEY")


def _client(conf: Mapping[str, Any]) -> Floodgate:
    """The client of ``CLIENT`` (a :class:`~floodgate.Floodgate` or its dotted path), or one made
    from ``URL`` and the settings beside it."""
    given = conf.get("CLIENT")
    if given is not None:
        mixed = sorted(key for key in _CLIENT_SETTINGS if key in conf)
        if mixed:
            raise ImproperlyConfigured(f"FLOODGATE: give CLIENT, or {mixed} to make one, not both")
        client = import_string(given) if isinstance(given, str) else given
        if not isinstance(client, Floodgate):
            raise ImproperlyConfigured(f"FLOODGATE['CLIENT'] must be a floodgate.Floodgate, got {client!r}")
        return client
    if "URL" not in conf:
        raise ImproperlyConfigured("FLOODGATE['URL'] is required, e.g. http://127.0.0.1:8080 (or give CLIENT)")
    return Floodgate(
        conf["URL"],
        deadline=conf.get("DEADLINE"),
        fail_mode=conf.get("FAIL_MODE", "open"),
        token=conf.get("TOKEN"),
        ca=conf.get("CA"),
        client_cert=conf.get("CLIENT_CERT"),
        client_key=conf.get("CLIENT_KEY"),
    )


class FloodgateMiddleware:
    """The middleware (see the module's documentation)."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        conf: Mapping[str, Any] = getattr(settings, "FLOODGATE", {})
        if not isinstance(conf, Mapping):
            raise ImproperlyConfigured("FLOODGATE must be a dict of settings")
        unknown = sorted(set(conf) - _KEYS)
        if unknown:
            raise ImproperlyConfigured(f"FLOODGATE has unknown keys {unknown}; the keys are {sorted(_KEYS)}")
        try:
            self.client = _client(conf)
            cost = conf.get("COST", 1)
            self.describe = Describe(
                trusted_proxies=tuple(conf.get("TRUSTED_PROXIES", ())),
                forwarded_header=conf.get("FORWARDED_HEADER", "x-forwarded-for"),
                user_header=conf.get("USER_HEADER", "x-user-id"),
                tenant_header=conf.get("TENANT_HEADER", "x-tenant-id"),
                rule=conf.get("RULE"),
                cost=cast(CostFn, _function(cost, "COST")) if isinstance(cost, str) else cost,
            )
        except ConfigError as error:
            raise ImproperlyConfigured(f"FLOODGATE: {error}") from error
        self.descriptors = _function(conf.get("DESCRIPTORS"), "DESCRIPTORS")
        self.skip = _function(conf.get("SKIP"), "SKIP")
        self.headers_on_allowed = bool(conf.get("HEADERS_ON_ALLOWED", True))

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        decision = decision_of(request)
        if decision is not None and decision.allowed:
            if self.headers_on_allowed:
                for name, value in decision.headers.items():
                    if name not in response:
                        response[name] = value
            if decision.reservation is not None:
                release_quietly(self.client, decision.reservation)
        return response

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        if decision_of(request) is not None:
            return None
        match = request.resolver_match
        route = f"/{match.route}" if match is not None and match.route else None
        incoming: Incoming = incoming_of(request.META, self.describe, route, _user(request))
        incoming = Incoming(
            incoming.method,
            request.path,
            incoming.route,
            incoming.headers,
            incoming.client_ip,
            incoming.user,
            incoming.tenant,
            request,
        )
        if self.skip is not None and self.skip(incoming):
            return None
        decision = check(self.client, self.describe, incoming, self.descriptors)
        request.floodgate = decision  # type: ignore[attr-defined]
        request.META[DECISION_KEY] = decision
        if decision.allowed:
            return None
        body, headers = denial(decision)
        response = HttpResponse(body, status=429)
        for name, value in headers:
            response[name] = value
        return response
