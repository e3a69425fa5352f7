"""The Python snippets of the package README and of docs/clients.md run against the real server;
the README's first snippet is the quickstart, as it says."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from floodgate import Floodgate
from support import REPO, RunningFloodgate, floodgate

README = Path(__file__).resolve().parents[1] / "README.md"
CLIENTS_DOC = REPO / "docs" / "clients.md"

POLICY = """
store: { kind: memory }
headers: both
descriptors: [rule]
rules:
  - name: chat-per-user
    match: { route: "POST /chat" }
    key: [user]
    algorithm: sliding_window
    limit: 10
    window: 60s
  - name: chat
    match: { rule: chat }
    key: [user]
    algorithm: fixed_window
    limit: 10000
    window: 1h
  - name: tenant-tokens
    key: [tenant]
    algorithm: fixed_window
    limit: 100000
    window: 1h
    cost: tokens
  - name: agent-steps
    key: [session]
    algorithm: budget
    limit: 50
    ttl: 24h
"""


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def python_section(doc: str) -> str:
    start = doc.index("\n## Python\n")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end != -1 else None]


@pytest.fixture(scope="module")
def docs_server() -> Iterator[RunningFloodgate]:
    with floodgate(POLICY) as running:
        yield running


def snippets() -> list[tuple[str, str]]:
    found = [(f"README.md#{i}", block) for i, block in enumerate(python_blocks(README.read_text()))]
    section = python_section(CLIENTS_DOC.read_text())
    found += [(f"docs/clients.md#{i}", block) for i, block in enumerate(python_blocks(section))]
    return found


def test_there_are_snippets_in_both_documents() -> None:
    names = [name for name, _ in snippets()]
    assert sum(name.startswith("README") for name in names) >= 5
    assert sum(name.startswith("docs") for name in names) >= 3


@pytest.mark.parametrize(("name", "code"), snippets(), ids=[name for name, _ in snippets()])
def test_a_snippet_runs_against_a_live_server(
    name: str, code: str, docs_server: RunningFloodgate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOODGATE_URL", docs_server.url)
    # The documented 50 ms deadline, made patient: a loaded machine must not turn an answer into a
    # fail-mode decision here (see conftest's patient_default_deadline).
    code = code.replace("http://127.0.0.1:8080", docs_server.url).replace("deadline=0.05", "deadline=5.0")
    namespace: dict[str, object] = {"__name__": f"snippet_{name}"}
    try:
        exec(compile(code, name, "exec"), namespace)
    finally:
        # A snippet's client lives as long as its program; here the program ends with the test.
        for value in namespace.values():
            if isinstance(value, Floodgate):
                value.close()


def test_the_readmes_first_snippet_is_the_quickstart() -> None:
    first = python_blocks(README.read_text())[0]
    quickstart = (Path(__file__).resolve().parents[1] / "examples" / "quickstart.py").read_text()
    without_docstring = quickstart.split('"""', 2)[2].lstrip("\n")
    assert first == without_docstring
