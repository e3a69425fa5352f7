"""The WSGI middleware in a real Flask app and the Django middleware in a real Django project
(through Django's test client, which runs the whole handler and middleware stack, and through a
WSGI server on a socket), against the real server."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import django
import httpx
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import Client as DjangoClient
from flask import Flask, request

from floodgate import Floodgate
from floodgate.wsgi import RateLimitMiddleware, decision_of, degraded_model, flask_route
from support import RunningFloodgate, free_port


@pytest.fixture(scope="module")
def django_client(server: RunningFloodgate) -> Iterator[Floodgate]:
    with Floodgate(server.url, deadline=5.0) as shared:
        yield shared


@pytest.fixture(scope="module")
def django_project(django_client: Floodgate) -> None:
    # Settings are configured once a process: every test of the module shares this project.
    if not settings.configured:
        settings.configure(
            DEBUG=False,
            ALLOWED_HOSTS=["*"],
            ROOT_URLCONF="django_app.urls",
            SECRET_KEY="floodgate-tests",
            MIDDLEWARE=["floodgate.django.FloodgateMiddleware"],
            INSTALLED_APPS=[],
            FLOODGATE={
                "CLIENT": django_client,
                "DESCRIPTORS": "django_app.hooks.descriptors",
                "SKIP": "django_app.hooks.skip",
                "TRUSTED_PROXIES": ["10.0.0.0/8"],
            },
        )
        django.setup()


def test_django_checks_each_request_by_its_url_pattern(django_project: None, uid: str) -> None:
    http = DjangoClient()
    headers = {"x-user-id": uid}
    first = http.get("/items/1", headers=headers)
    assert first.status_code == 200 and first.json() == {"item": 1}
    assert first["x-ratelimit-limit"] == "2" and first["x-ratelimit-remaining"] == "1"
    assert http.get("/items/2", headers=headers).status_code == 200
    denied = http.get("/items/3", headers=headers)
    assert denied.status_code == 429
    assert denied["content-type"] == "application/problem+json"
    problem = denied.json()
    assert problem["type"] == "https://floodgate.dev/problems/rate-limited" and problem["limit"] == 2
    assert int(denied["retry-after"]) == problem["retry_after"]
    healthz = http.get("/healthz", headers=headers)
    assert healthz.status_code == 200 and "x-ratelimit-limit" not in healthz


def test_django_views_read_degrade_to_from_the_request(django_project: None, uid: str) -> None:
    http = DjangoClient()
    models = [http.get("/model", headers={"x-tenant-id": uid}).json()["model"] for _ in range(3)]
    assert models == ["large-model", "large-model", "small-model"]


def test_django_bad_settings_are_improperly_configured(django_project: None) -> None:
    from django.test import override_settings

    from floodgate.django import FloodgateMiddleware

    for bad, says in [
        ({"URL": "http://127.0.0.1:1", "DEADLNE": 1}, "unknown keys"),
        ({}, "URL"),
        ({"URL": "http://127.0.0.1:1", "CLIENT": "floodgate.Floodgate"}, "not both"),
        ({"CLIENT": "floodgate.Floodgate"}, "must be a floodgate.Floodgate"),
        ({"URL": "http://127.0.0.1:1", "TRUSTED_PROXIES": ["10.0.0.0/33"]}, "trusted_proxies"),
    ]:
        with override_settings(FLOODGATE=bad), pytest.raises(ImproperlyConfigured, match=says):
            FloodgateMiddleware(lambda r: None)  # type: ignore[arg-type,return-value]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def django_on_a_socket(django_project: None) -> Iterator[str]:
    from django.core.wsgi import get_wsgi_application

    httpd: WSGIServer = make_server("127.0.0.1", free_port(), get_wsgi_application(), handler_class=_Quiet)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_django_through_a_wsgi_server_ignores_a_spoofed_forwarded_for(
    django_on_a_socket: str, client: Floodgate, uid: str
) -> None:
    spoofed = str(ipaddress.ip_address(f"2001:db8::2:{uid[:4]}"))  # as the middleware writes it
    with httpx.Client(base_url=django_on_a_socket) as http:
        codes = [
            http.get(f"/items/{n}", headers={"x-user-id": uid, "x-forwarded-for": spoofed}).status_code
            for n in range(3)
        ]
    assert codes == [200, 200, 429]
    assert client.usage("per-ip", {"ip": spoofed}).used == 0


def make_flask(client: Floodgate) -> Flask:
    app = Flask(__name__)

    @app.get("/items/<int:item_id>")
    def item(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.get("/model")
    def model() -> dict[str, str]:
        return {"model": degraded_model(decision_of(request.environ), "large-model")}

    app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app,
        client=client,
        route=flask_route(app),
        descriptors=lambda incoming: (
            {"suite": "plans", "plan": "free"} if incoming.path == "/model" else {"suite": "flask"}
        ),
    )
    return app


def test_flask_checks_each_request_by_its_rule(client: Floodgate, uid: str) -> None:
    app = make_flask(client)
    http = app.test_client()
    headers = {"x-user-id": uid}
    first = http.get("/items/1", headers=headers)
    assert first.status_code == 200 and first.headers["x-ratelimit-remaining"] == "1"
    assert http.get("/items/2", headers=headers).status_code == 200
    denied = http.get("/items/3", headers=headers)
    assert denied.status_code == 429 and denied.content_type == "application/problem+json"
    assert denied.get_json()["retry_after"] == int(denied.headers["retry-after"]) >= 1
    models = [http.get("/model", headers={"x-tenant-id": uid}).get_json()["model"] for _ in range(3)]
    assert models == ["large-model", "large-model", "small-model"]


def test_flask_middleware_fails_open_when_floodgate_is_down() -> None:
    with Floodgate(f"http://127.0.0.1:{free_port()}") as down:
        answer = make_flask(down).test_client().get("/items/1", headers={"x-user-id": "u1"})
    assert answer.status_code == 200 and "x-ratelimit-limit" not in answer.headers


def test_a_wsgi_checks_permits_are_released_when_the_response_is_closed(client: Floodgate, uid: str) -> None:
    app = Flask(__name__)

    @app.get("/work")
    def work() -> str:
        return "done"

    app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, client=client, descriptors=lambda incoming: {"suite": "permits"}
    )
    http = app.test_client()
    # `buffered` reads the body and closes the app's iterable, as a WSGI server does once it sent it.
    codes = [http.get("/work", headers={"x-user-id": uid}, buffered=True).status_code for _ in range(3)]
    assert codes == [200, 200, 200]
    held = http.get("/work", headers={"x-user-id": uid})  # not closed yet: its permit is held
    assert http.get("/work", headers={"x-user-id": uid}, buffered=True).status_code == 429
    held.close()
    assert http.get("/work", headers={"x-user-id": uid}, buffered=True).status_code == 200
