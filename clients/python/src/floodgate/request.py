"""What a call sends: its input checked and encoded as the HTTP API's JSON bodies.

Every rule the server would refuse a request's shape by is checked here first, so that bad input
is an :class:`~floodgate.InvalidRequest` raised before anything is sent — never coerced: a
descriptor value that is not a string, a cost that is not a whole number from 1, ``cost`` with
``costs``, a cost dimension with another name than the server takes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import timedelta

from floodgate.decision import FailMode
from floodgate.errors import ConfigError, InvalidRequest

MAX_DESCRIPTORS = 64
"""The most descriptors a request may carry (the server's ``MAX_DESCRIPTORS``)."""
MAX_DIMENSIONS = 16
"""The most cost dimensions a request may name."""
MAX_COST = 2**64 - 1
"""The largest cost the server takes."""
MAX_TTL_MS = 24 * 3600 * 1000
"""The longest a reservation may be held: 24 h."""

_DIMENSION = re.compile(r"[a-z][a-z0-9_]{0,63}")

Descriptors = Mapping[str, str]
"""Descriptor name → value, e.g. ``{"user": "u1", "tenant": "t1", "route": "POST /chat"}``."""
Costs = Mapping[str, int]
"""Cost per dimension, e.g. ``{"requests": 1, "tokens": 1200}``: each rule counts its own."""
TTL = str | int | float | timedelta
"""How long a reservation is held: a duration as the configuration writes it (``"2m"``,
``"1h30m"``), or seconds, or a :class:`~datetime.timedelta`."""


def descriptors_of(descriptors: object, where: str) -> dict[str, str]:
    """``descriptors`` as a new dict, each name a non-empty string and each value a string."""
    if not isinstance(descriptors, Mapping):
        raise InvalidRequest(
            f"{where}: descriptors must be a mapping of name → string, got {type(descriptors).__name__}"
        )
    if len(descriptors) > MAX_DESCRIPTORS:
        raise InvalidRequest(f"{where}: at most {MAX_DESCRIPTORS} descriptors, got {len(descriptors)}")
    out: dict[str, str] = {}
    for name, value in descriptors.items():
        if not isinstance(name, str) or name == "":
            raise InvalidRequest(f"{where}: a descriptor name must be a non-empty string, got {name!r}")
        if not isinstance(value, str):
            raise InvalidRequest(f"{where}: descriptor {name!r} must be a string, got {type(value).__name__} {value!r}")
        out[name] = value
    return out


def _whole(value: object, least: int, what: str) -> int:
    # bool is an int in Python: True is not a cost of 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{what} must be a whole number, got {type(value).__name__} {value!r}")
    if value < least or value > MAX_COST:
        raise InvalidRequest(f"{what} must be from {least} to {MAX_COST}, got {value}")
    return value


def cost_of(cost: object, where: str) -> int:
    """A cost in ``requests``: a whole number from 1."""
    return _whole(cost, 1, f"{where}: cost")


def costs_of(costs: object, where: str, *, settling: bool = False) -> dict[str, int]:
    """Costs per dimension: at most 16 names as the server spells them, each a whole number from 0,
    at least one from 1 (except in a commit, where 0 charges nothing of that dimension)."""
    if not isinstance(costs, Mapping):
        raise InvalidRequest(
            f"{where}: costs must be a mapping of dimension → whole number, got {type(costs).__name__}"
        )
    if not settling and not 1 <= len(costs) <= MAX_DIMENSIONS:
        raise InvalidRequest(f"{where}: costs must name 1 to {MAX_DIMENSIONS} dimensions, got {len(costs)}")
    out: dict[str, int] = {}
    for dimension, amount in costs.items():
        if not isinstance(dimension, str) or not _DIMENSION.fullmatch(dimension):
            raise InvalidRequest(
                f"{where}: cost dimension {dimension!r} must be a lowercase name "
                "(a letter, then letters, digits or _; at most 64)"
            )
        out[dimension] = _whole(amount, 0, f"{where}: costs[{dimension!r}]")
    if not settling and all(amount == 0 for amount in out.values()):
        raise InvalidRequest(f"{where}: at least one cost must be 1 or more")
    return out


def ttl_of(ttl: object, where: str) -> str:
    """A reservation's ``ttl`` as the server reads it (``"90s"`` → kept; 90 → ``"1m30s"``)."""
    if isinstance(ttl, str):
        if ttl.strip() == "":
            raise InvalidRequest(f"{where}: ttl must be a duration such as '2m', got an empty string")
        return ttl
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
        seconds = float(ttl)
    else:
        raise InvalidRequest(f"{where}: ttl must be a duration string, seconds or a timedelta, got {ttl!r}")
    if not math.isfinite(seconds):
        raise InvalidRequest(f"{where}: ttl must be finite, got {ttl!r}")
    ms = round(seconds * 1000)
    if ms < 1 or ms > MAX_TTL_MS:
        raise InvalidRequest(f"{where}: ttl must be from 1 ms to 24 h, got {seconds} s")
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    parts = [(hours, "h"), (minutes, "m"), (secs, "s"), (millis, "ms")]
    return "".join(f"{n}{unit}" for n, unit in parts if n)


def seconds_of(value: object, field: str) -> float:
    """A positive, finite number of seconds (a deadline, a window); :class:`ConfigError` else."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(field, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def deadline_of(deadline: object, where: str) -> float:
    """A call's deadline in seconds; :class:`InvalidRequest` when it is not a positive number."""
    try:
        return seconds_of(deadline, f"{where}: deadline")
    except ConfigError as error:
        raise InvalidRequest(str(error)) from None


def fail_mode_of(mode: object, where: str) -> FailMode:
    """``open`` or ``closed``."""
    if mode == "open":
        return "open"
    if mode == "closed":
        return "closed"
    raise InvalidRequest(f"{where}: fail_mode must be 'open' or 'closed', got {mode!r}")


def reservation_of(reservation: object, where: str) -> str:
    """A reservation id: a non-empty string."""
    if not isinstance(reservation, str) or reservation == "":
        raise InvalidRequest(f"{where}: the reservation id must be a non-empty string, got {reservation!r}")
    return reservation


def decide_body(
    call: str,
    descriptors: object,
    *,
    cost: object = None,
    costs: object = None,
    domain: object = None,
    ttl: object = None,
) -> bytes:
    """The JSON body of ``/v1/check``, ``/v1/peek``, ``/v1/report`` or ``/v1/reserve``."""
    body: dict[str, object] = {"descriptors": descriptors_of(descriptors, call)}
    if cost is not None and costs is not None:
        raise InvalidRequest(f"{call}: give cost or costs, not both")
    if cost is not None:
        body["cost"] = cost_of(cost, call)
    if costs is not None:
        body["costs"] = costs_of(costs, call)
    if domain is not None:
        if not isinstance(domain, str) or domain == "":
            raise InvalidRequest(f"{call}: domain must be a non-empty string, got {domain!r}")
        body["domain"] = domain
    if ttl is not None:
        body["ttl"] = ttl_of(ttl, call)
    return json.dumps(body, separators=(",", ":")).encode()


def settle_body(call: str, reservation: object, costs: object = None) -> bytes:
    """The JSON body of ``/v1/commit`` or ``/v1/release``."""
    body: dict[str, object] = {"reservation": reservation_of(reservation, call)}
    if costs is not None:
        body["costs"] = costs_of(costs, call, settling=True)
    return json.dumps(body, separators=(",", ":")).encode()


def usage_query(rule: object, descriptors: object) -> dict[str, str]:
    """The query of ``GET /v1/usage``: the rule, and the descriptors that make its key."""
    if not isinstance(rule, str) or rule == "":
        raise InvalidRequest(f"usage: the rule must be a non-empty string, got {rule!r}")
    query = descriptors_of(descriptors, "usage")
    if "rule" in query:
        raise InvalidRequest("usage: no descriptor may be named 'rule' (it is the rule parameter)")
    return {"rule": rule, **query}
