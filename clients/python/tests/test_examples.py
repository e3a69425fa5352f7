"""The examples, run as users run them: the quickstart on the server's built-in example policy,
and the chat example on its own policy, each against the real binary."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from floodgate import Floodgate
from support import REPO, RunningFloodgate, asgi, floodgate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(path: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The example's module, imported afresh with ``FLOODGATE_URL`` set."""
    monkeypatch.setenv("FLOODGATE_URL", url)
    spec = importlib.util.spec_from_file_location(f"example_{uuid.uuid4().hex}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example_server() -> Iterator[RunningFloodgate]:
    builtin = (REPO / "crates" / "floodgate-config" / "src" / "example.yaml").read_text()
    with floodgate(builtin) as running:
        yield running


@pytest.fixture(scope="module")
def chat_server() -> Iterator[RunningFloodgate]:
    with floodgate((EXAMPLES / "fastapi_chat" / "floodgate.yaml").read_text()) as running:
        yield running


@pytest.mark.anyio
async def test_the_quickstart_limits_chats_per_user(
    example_server: RunningFloodgate, monkeypatch: pytest.MonkeyPatch
) -> None:
    quickstart = load(EXAMPLES / "quickstart.py", example_server.url, monkeypatch)
    async with asgi(quickstart.app) as http:
        codes = [(await http.post("/chat", headers={"x-user-id": "u1"})).status_code for _ in range(12)]
    assert codes == [200] * 10 + [429] * 2


@pytest.mark.anyio
async def test_chat_twelve_requests_ten_answered(
    chat_server: RunningFloodgate, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat = load(EXAMPLES / "fastapi_chat" / "app.py", chat_server.url, monkeypatch)
    user, tenant = uuid.uuid4().hex, uuid.uuid4().hex
    headers = {"x-user-id": user, "x-tenant-id": tenant}
    async with asgi(chat.app) as http:
        answers = [
            await http.post("/chat", json={"prompt": "hi there", "max_tokens": 16}, headers=headers) for _ in range(12)
        ]
    assert [a.status_code for a in answers] == [200] * 10 + [429] * 2
    assert int(answers[-1].headers["retry-after"]) >= 1
    assert answers[-1].headers["content-type"] == "application/problem+json"
    assert answers[0].json()["model"] == "large-model"


@pytest.mark.anyio
async def test_chat_commits_what_the_model_used_and_denies_when_the_tokens_are_spent(
    chat_server: RunningFloodgate, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat = load(EXAMPLES / "fastapi_chat" / "app.py", chat_server.url, monkeypatch)
    tenant = uuid.uuid4().hex
    async with asgi(chat.app) as http:
        answer = await http.post(
            "/chat",
            json={"prompt": "one two three", "max_tokens": 4000},
            headers={"x-user-id": "a", "x-tenant-id": tenant},
        )
        assert answer.status_code == 200 and answer.json()["tokens"] == 6
        with Floodgate(chat_server.url, deadline=5.0) as client:
            assert client.usage("chat-tokens-per-tenant", {"tenant": tenant}).used == 6  # the rest went back
            client.report({"tenant": tenant}, costs={"tokens": 19_990})
        denied = await http.post(
            "/chat", json={"prompt": "hi", "max_tokens": 100}, headers={"x-user-id": "b", "x-tenant-id": tenant}
        )
        assert denied.status_code == 429 and denied.json()["limit"] == 20_000


@pytest.mark.anyio
async def test_chat_a_free_plan_past_its_quota_switches_to_the_small_model(
    chat_server: RunningFloodgate, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat = load(EXAMPLES / "fastapi_chat" / "app.py", chat_server.url, monkeypatch)
    tenant = uuid.uuid4().hex
    models = []
    async with asgi(chat.app) as http:
        for n in range(102):
            # A user per chat: the 10-a-minute per-user limit is not what this test is about.
            headers = {"x-user-id": f"{tenant}-{n}", "x-tenant-id": tenant, "x-plan": "free"}
            answer = await http.post("/chat", json={"prompt": "hi", "max_tokens": 1}, headers=headers)
            models.append(answer.json()["model"])
    assert models == ["large-model"] * 100 + ["small-model"] * 2


@pytest.mark.anyio
async def test_chat_an_agent_session_has_fifty_steps(
    chat_server: RunningFloodgate, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat = load(EXAMPLES / "fastapi_chat" / "app.py", chat_server.url, monkeypatch)
    session = uuid.uuid4().hex
    async with asgi(chat.app) as http:
        steps = [await http.post("/agent/step", headers={"x-session-id": session}) for _ in range(51)]
    assert [s.status_code for s in steps] == [200] * 50 + [429]
    assert steps[49].json() == {"remaining": 0}
    assert int(steps[50].headers["retry-after"]) > 3600
