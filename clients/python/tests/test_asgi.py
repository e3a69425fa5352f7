"""The ASGI middleware and the FastAPI dependency in real FastAPI apps, through httpx's ASGI
transport and through uvicorn on a socket, against the real server."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import Depends, FastAPI, Request

from floodgate import AsyncFloodgate, Decision, Floodgate
from floodgate.asgi import RateLimitMiddleware, RouteTemplates, decision_of, degraded_model, route_template
from floodgate.fastapi import install, rate_limit
from floodgate.incoming import Incoming
from support import RunningFloodgate, asgi, free_port, wait_for


def make_app(url: str, **options: Any) -> FastAPI:
    app = FastAPI()
    options.setdefault("descriptors", lambda incoming: {"suite": "middleware"})
    app.add_middleware(RateLimitMiddleware, url=url, deadline=5.0, **options)

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/model")
    async def model(request: Request) -> dict[str, str]:
        return {"model": degraded_model(decision_of(request), "large-model")}

    return app


@pytest.fixture
async def http(server: RunningFloodgate) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi(make_app(server.url)) as made:
        yield made


@pytest.mark.anyio
async def test_allowed_responses_carry_the_headers_and_the_third_request_is_a_problem_429(
    http: httpx.AsyncClient, uid: str
) -> None:
    headers = {"x-user-id": uid}
    first = await http.get("/items/1", headers=headers)
    assert first.status_code == 200 and first.json() == {"item": 1}
    assert first.headers["x-ratelimit-limit"] == "2" and first.headers["x-ratelimit-remaining"] == "1"
    assert first.headers["ratelimit-policy"].startswith('"items-per-user";q=2')
    # Another item is the same route template: the same counter.
    assert (await http.get("/items/2", headers=headers)).status_code == 200
    denied = await http.get("/items/3", headers=headers)
    assert denied.status_code == 429
    assert denied.headers["content-type"] == "application/problem+json"
    problem = denied.json()
    assert problem["type"] == "https://floodgate.dev/problems/rate-limited"
    assert problem["status"] == 429 and problem["limit"] == 2 and problem["remaining"] == 0
    assert int(denied.headers["retry-after"]) == problem["retry_after"] >= 1
    assert denied.headers["x-ratelimit-remaining"] == "0"
    # Another user has a counter of its own.
    assert (await http.get("/items/3", headers={"x-user-id": uid + "-other"})).status_code == 200


@pytest.mark.anyio
async def test_route_templates_are_matched_before_routing(server: RunningFloodgate) -> None:
    app = make_app(server.url)
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/items/7", "root_path": "", "app": app}
    assert route_template(scope) == "/items/{item_id}"
    scope["path"] = "/nowhere"
    assert route_template(scope) is None
    remembered = RouteTemplates(size=2)
    for n in range(5):
        assert remembered(dict(scope, path=f"/items/{n}")) == "/items/{item_id}"
        assert len(remembered._known) <= 2


@pytest.mark.anyio
async def test_skip_own_descriptors_and_cost_functions(server: RunningFloodgate, uid: str) -> None:
    async def descriptors(incoming: Incoming) -> dict[str, str]:
        return {"suite": "middleware", "user": incoming.headers["x-account"]}

    app = make_app(
        server.url,
        descriptors=descriptors,
        cost=lambda incoming: 2 if incoming.method == "GET" else 1,
        skip=lambda incoming: incoming.path == "/healthz",
    )
    async with asgi(app) as http:
        for _ in range(3):
            skipped = await http.get("/healthz", headers={"x-account": uid})
            assert skipped.status_code == 200 and "x-ratelimit-limit" not in skipped.headers
        first = await http.get("/items/1", headers={"x-account": uid})
        assert first.status_code == 200 and first.headers["x-ratelimit-remaining"] == "0"
        assert (await http.get("/items/1", headers={"x-account": uid})).status_code == 429


@pytest.mark.anyio
async def test_degrade_to_is_readable_from_the_request_state(server: RunningFloodgate, uid: str) -> None:
    app = make_app(server.url, descriptors=lambda incoming: {"suite": "plans", "plan": "free"})
    async with asgi(app) as http:
        models = [(await http.get("/model", headers={"x-tenant-id": uid})).json()["model"] for _ in range(3)]
    assert models == ["large-model", "large-model", "small-model"]


@pytest.mark.anyio
async def test_a_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored(
    server: RunningFloodgate, client: Floodgate, uid: str
) -> None:
    spoofed = str(ipaddress.ip_address(f"2001:db8::{uid[:4]}"))  # as the middleware writes it

    def app() -> FastAPI:
        return make_app(server.url, trusted_proxies=["10.0.0.0/8"], descriptors=lambda incoming: {"suite": "ip"})

    async with asgi(app(), peer=("198.51.100.7", 40000)) as http:
        assert (await http.get("/healthz", headers={"x-forwarded-for": spoofed})).status_code == 200
    assert client.usage("per-ip", {"ip": spoofed}).used == 0
    # From a trusted proxy the chain is walked from the right: the client's own left-most entry
    # (6.6.6.6) is not believed, the address our proxy saw is.
    async with asgi(app(), peer=("10.0.0.2", 40000)) as http:
        chain = f"6.6.6.6, {spoofed}, 10.9.9.9"
        assert (await http.get("/healthz", headers={"x-forwarded-for": chain})).status_code == 200
    assert client.usage("per-ip", {"ip": spoofed}).used == 1


@pytest.mark.anyio
async def test_a_checks_permits_are_released_once_the_app_has_answered(server: RunningFloodgate, uid: str) -> None:
    app = FastAPI()
    entered, leave = asyncio.Event(), asyncio.Event()

    @app.get("/slow")
    async def slow() -> dict[str, str]:
        entered.set()
        await leave.wait()
        return {"done": "yes"}

    app.add_middleware(RateLimitMiddleware, url=server.url, deadline=5.0, descriptors=lambda i: {"suite": "permits"})
    async with asgi(app) as http:
        held = asyncio.ensure_future(http.get("/slow", headers={"x-user-id": uid}))
        await entered.wait()
        assert (await http.get("/slow", headers={"x-user-id": uid})).status_code == 429
        leave.set()
        assert (await held).status_code == 200
        assert (await http.get("/slow", headers={"x-user-id": uid})).status_code == 200


@pytest.mark.anyio
async def test_the_middleware_fails_open_when_floodgate_is_down() -> None:
    app = make_app(f"http://127.0.0.1:{free_port()}")
    async with asgi(app) as http:
        answer = await http.get("/items/1", headers={"x-user-id": "u1"})
    assert answer.status_code == 200 and "x-ratelimit-limit" not in answer.headers


class UvicornThread:
    """A real uvicorn server on a loopback socket, in a thread (its own event loop)."""

    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", proxy_headers=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, "uvicorn to start")
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join()


@pytest.fixture
def uvicorn_app(server: RunningFloodgate) -> Iterator[UvicornThread]:
    running = UvicornThread(make_app(server.url, trusted_proxies=["10.0.0.0/8"]))
    try:
        yield running
    finally:
        running.close()


def test_through_uvicorn_on_a_socket(uvicorn_app: UvicornThread, client: Floodgate, uid: str) -> None:
    spoofed = str(ipaddress.ip_address(f"2001:db8::1:{uid[:4]}"))  # as the middleware writes it
    with httpx.Client(base_url=uvicorn_app.url) as http:
        codes = [http.get(f"/items/{n}", headers={"x-user-id": uid}).status_code for n in range(3)]
        assert codes == [200, 200, 429]
        denied = http.get("/items/9", headers={"x-user-id": uid})
        assert denied.headers["content-type"] == "application/problem+json"
        assert json.loads(denied.content)["retry_after"] == int(denied.headers["retry-after"])
        # The peer is 127.0.0.1, not a trusted proxy: its X-Forwarded-For is not believed.
        http.get("/healthz", headers={"x-forwarded-for": spoofed, "x-user-id": uid})
    assert client.usage("per-ip", {"ip": spoofed}).used == 0


# === the FastAPI dependency ===


def make_chat_app(floodgate: AsyncFloodgate) -> FastAPI:
    app = FastAPI()
    install(app, floodgate)

    async def max_tokens(request: Request) -> int:
        body = await request.json()
        return int(body.get("max_tokens", 1))

    @app.post("/chat")
    async def chat(
        request: Request, decision: Decision = Depends(rate_limit("chat", cost=max_tokens))
    ) -> dict[str, Any]:
        body = await request.json()
        return {"echo": body["prompt"], "remaining": decision.remaining}

    @app.get("/free")
    async def free() -> dict[str, str]:
        return {"free": "yes"}

    return app


@pytest.mark.anyio
async def test_the_dependency_limits_a_route_by_its_rule_and_cost(server: RunningFloodgate, uid: str) -> None:
    async with AsyncFloodgate(server.url, deadline=5.0) as floodgate, asgi(make_chat_app(floodgate)) as http:
        headers = {"x-user-id": uid}
        first = await http.post("/chat", json={"prompt": "hi", "max_tokens": 4}, headers=headers)
        assert first.status_code == 200 and first.json() == {"echo": "hi", "remaining": 6}
        assert first.headers["x-ratelimit-remaining"] == "6"
        second = await http.post("/chat", json={"prompt": "hi", "max_tokens": 4}, headers=headers)
        assert second.json()["remaining"] == 2
        denied = await http.post("/chat", json={"prompt": "hi", "max_tokens": 4}, headers=headers)
        assert denied.status_code == 429
        assert denied.headers["content-type"] == "application/problem+json"
        assert denied.json()["type"] == "https://floodgate.dev/problems/rate-limited"
        assert int(denied.headers["retry-after"]) >= 1
        # The rule's smaller cost still fits; the route without the dependency is not checked.
        assert (await http.post("/chat", json={"prompt": "hi", "max_tokens": 2}, headers=headers)).status_code == 200
        free = await http.get("/free", headers=headers)
        assert free.status_code == 200 and "x-ratelimit-limit" not in free.headers
