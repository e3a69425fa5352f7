"""What a call receives: the HTTP API's answers read into typed values, or the typed error they are.

An answer that is neither the expected body nor a problem (a 5xx, garbage, a proxy's page) is
:class:`~floodgate.Unavailable` with reason ``server_error``: an outage, which the fail mode
covers. A problem+json answer (4xx other than 429) is the caller's bug or a settled reservation:
its :class:`~floodgate.ProblemError`, which the fail mode never hides.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, Literal, TypeGuard, cast

from floodgate.decision import (
    DENYING_OUTCOMES,
    UNENFORCED_OUTCOMES,
    Decision,
    Limit,
    PreviousPeriod,
    Settled,
    SimulatedDecision,
    Simulation,
    Usage,
)
from floodgate.errors import Problem, ProblemError, Unavailable

_PASSED_HEADERS = frozenset({"retry-after", "ratelimit", "ratelimit-policy"})
_PASSED_PREFIXES = ("x-ratelimit-", "floodgate-")
_RESERVATION_HEADER = "floodgate-reservation"


def passed_header(name: str) -> bool:
    """Whether a response header (lowercase) is one to pass on: the rate-limit headers and
    ``floodgate-*`` (not ``floodgate-reservation``, an id for the caller alone)."""
    return (name in _PASSED_HEADERS or name.startswith(_PASSED_PREFIXES)) and name != _RESERVATION_HEADER


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` value in seconds: delay-seconds or an HTTP date; ``None`` if neither."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _json(content: bytes) -> object:
    try:
        return cast(object, json.loads(content))
    except ValueError:
        return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _seconds(ms: object) -> float | None:
    return ms / 1000 if _is_int(ms) else None


def failed(call: str, status: int, content: bytes, headers: Mapping[str, str]) -> Exception:
    """The error of an answer that is not the call's result: a problem (4xx other than 429) or an
    outage (5xx, 429 from something in between, garbage)."""
    body = _json(content)
    if 400 <= status < 500 and status != 429 and isinstance(body, dict):
        data = cast(dict[str, Any], body)
        problem = Problem(
            type=str(data.get("type", "about:blank")),
            title=str(data.get("title", status)),
            status=status,
            detail=str(data.get("detail", content[:200].decode(errors="replace"))),
            body=data,
        )
        return ProblemError.of(problem)
    text = content[:200].decode(errors="replace")
    return Unavailable(
        "server_error",
        f"floodgate answered {call} with {status}: {text}",
        status=status,
        retry_after=retry_after_seconds(headers.get("retry-after")),
    )


def _limit(raw: object) -> Limit | None:
    # `type(x) is int`: a JSON number read as an int, never a bool or a float.
    if type(raw) is not dict:
        return None
    try:
        name, limit, remaining = raw["name"], raw["limit"], raw["remaining"]
        reset, retry, allowed, outcome = raw["reset_after_ms"], raw["retry_after_ms"], raw["allowed"], raw["outcome"]
    except KeyError:
        return None
    if not (
        type(name) is str
        and type(limit) is int
        and type(remaining) is int
        and type(reset) is int
        and (retry is None or type(retry) is int)
        and type(allowed) is bool
        and type(outcome) is str
    ):
        return None
    return Limit(name, limit, remaining, reset / 1000, None if retry is None else retry / 1000, allowed, outcome)


def deciding(allowed: bool, limits: Iterable[Limit]) -> Limit | None:
    """The limit that decided, as the server picks it: on a denial the denying limit with the
    longest wait (then the longest reset), when allowed the enforced one with the least left (then
    the longest reset)."""
    if not allowed:
        denying = [lim for lim in limits if lim.outcome in DENYING_OUTCOMES]
        if not denying:
            return None
        return max(denying, key=lambda lim: (lim.retry_after or 0.0, lim.reset_after))
    enforced = [lim for lim in limits if lim.outcome not in UNENFORCED_OUTCOMES]
    if not enforced:
        return None
    return min(enforced, key=lambda lim: (lim.remaining, -lim.reset_after))


def decision(call: str, status: int, headers: Iterable[tuple[str, str]], content: bytes) -> Decision:
    """The decision of a check, peek, report or reserve answer (200 or 429 with a verdict), or the
    error it is."""
    header_map: dict[str, str] = {}
    reservation_header: str | None = None
    for name, value in headers:
        if name in _PASSED_HEADERS or name.startswith(_PASSED_PREFIXES):
            if name == _RESERVATION_HEADER:
                reservation_header = value
            else:
                header_map[name] = value
    if status in (200, 429):
        body = _json(content)
        if isinstance(body, dict):
            data = cast(dict[str, Any], body)
            allowed, raw_limits = data.get("allowed"), data.get("limits")
            if isinstance(allowed, bool) and isinstance(raw_limits, list):
                limits = tuple(_limit(raw) for raw in raw_limits)
                if all(lim is not None for lim in limits):
                    checked = cast(tuple[Limit, ...], limits)
                    top = deciding(allowed, checked)
                    reservation = data.get("reservation", reservation_header) if allowed else None
                    degrade = data.get("degrade_to", header_map.get("floodgate-degrade")) if allowed else None
                    return Decision(
                        allowed=allowed,
                        status=status,
                        retry_after=None if allowed else (_seconds(data.get("retry_after_ms")) or 0.0),
                        rule=None if top is None else top.name,
                        limit=None if top is None else top.limit,
                        remaining=None if top is None else top.remaining,
                        reset_after=None if top is None else top.reset_after,
                        degrade_to=degrade if isinstance(degrade, str) else None,
                        limits=checked,
                        headers=header_map,
                        reservation=reservation if isinstance(reservation, str) else None,
                        expires_at=_seconds(data.get("expires_at_ms")) if allowed else None,
                    )
    raise failed(call, status, content, header_map)


def _amounts(raw: object) -> dict[str, int] | None:
    if not isinstance(raw, dict):
        return None
    data = cast(dict[str, Any], raw)
    if not all(isinstance(k, str) and _is_int(v) for k, v in data.items()):
        return None
    return cast(dict[str, int], data)


def settled(call: str, status: int, headers: Mapping[str, str], content: bytes) -> Settled:
    """The answer of a commit or release, or the error it is."""
    body = _json(content)
    if status == 200 and isinstance(body, dict):
        data = cast(dict[str, Any], body)
        reservation, state = data.get("reservation"), data.get("state")
        amounts = [_amounts(data.get(k)) for k in ("reserved", "charged", "refunded", "excess")]
        if isinstance(reservation, str) and state in ("committed", "released") and all(a is not None for a in amounts):
            reserved, charged, refunded, excess = cast(list[dict[str, int]], amounts)
            return Settled(reservation, state, reserved, charged, refunded, excess)
    raise failed(call, status, content, headers)


def usage(status: int, headers: Mapping[str, str], content: bytes) -> Usage:
    """The answer of ``GET /v1/usage``, or the error it is."""
    body = _json(content)
    if status == 200 and isinstance(body, dict):
        data = cast(dict[str, Any], body)
        rule = data.get("rule")
        numbers = [data.get(k) for k in ("limit", "used", "remaining", "reset_after_ms")]
        start, end = data.get("period_start"), data.get("period_end")
        previous = _previous(data.get("previous"))
        if (
            isinstance(rule, str)
            and all(_is_int(n) for n in numbers)
            and (start is None or _is_int(start))
            and (end is None or _is_int(end))
            and previous is not False
        ):
            limit, used, remaining, reset = cast(list[int], numbers)
            return Usage(
                rule=rule,
                limit=limit,
                used=used,
                remaining=remaining,
                period_start=_seconds(start),
                period_end=_seconds(end),
                reset_after=reset / 1000,
                previous=previous,
            )
    raise failed("usage", status, content, headers)


def _previous(value: object) -> PreviousPeriod | Literal[False] | None:
    """A usage's ``previous`` (absent or null: ``None``), or ``False`` when it is malformed."""
    if value is None:
        return None
    if isinstance(value, dict):
        data = cast(dict[str, Any], value)
        numbers = [data.get(k) for k in ("used", "period_start", "period_end")]
        if all(_is_int(n) for n in numbers):
            used, start, end = cast(list[int], numbers)
            return PreviousPeriod(used=used, period_start=start / 1000, period_end=end / 1000)
    return False


def simulation(status: int, headers: Mapping[str, str], content: bytes) -> Simulation:
    """The answer of ``POST /v1/simulate``, or the error it is."""
    body = _json(content)
    if status == 200 and isinstance(body, dict):
        data = cast(dict[str, Any], body)
        algorithm, limit, raw = data.get("algorithm"), data.get("limit"), data.get("decisions")
        levels = data.get("levels")
        if isinstance(algorithm, str) and _is_int(limit) and isinstance(raw, list):
            decisions = []
            for item in cast(list[object], raw):
                if not isinstance(item, dict):
                    break
                d = cast(dict[str, Any], item)
                at, allowed, remaining, reset = (
                    d.get("at_ms"),
                    d.get("allowed"),
                    d.get("remaining"),
                    d.get("reset_after_ms"),
                )
                retry = d.get("retry_after_ms")
                if not (
                    _is_int(at)
                    and isinstance(allowed, bool)
                    and _is_int(remaining)
                    and _is_int(reset)
                    and (retry is None or _is_int(retry))
                ):
                    break
                decisions.append(SimulatedDecision(at, allowed, remaining, reset, retry))
            else:
                return Simulation(
                    algorithm=algorithm,
                    limit=limit,
                    decisions=tuple(decisions),
                    levels=tuple(cast(list[Mapping[str, object]], levels)) if isinstance(levels, list) else None,
                )
    raise failed("simulate", status, content, headers)
