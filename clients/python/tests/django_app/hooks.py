"""Functions the test project's FLOODGATE setting names by dotted path."""

from __future__ import annotations

from floodgate.incoming import Incoming


def descriptors(incoming: Incoming) -> dict[str, str]:
    """The suite of the request: `plans` for the model view (with the tenant's plan), else `django`."""
    if incoming.path == "/model":
        return {"suite": "plans", "plan": "free"}
    return {"suite": "django"}


def skip(incoming: Incoming) -> bool:
    return incoming.path == "/healthz"
