"""The FastAPI app of the benchmark, one variant per process (``FLOODGATE_BENCH_VARIANT``):

- ``none``: no limiter;
- ``slowapi``: slowapi 0.1.10's ``SlowAPIASGIMiddleware`` on its in-memory storage (``memory://``),
  a default limit keyed on the client address, headers on;
- ``floodgate``: :class:`floodgate.asgi.RateLimitMiddleware` on an ``AsyncFloodgate`` against the
  Floodgate server at ``FLOODGATE_URL``, its deadline ``FLOODGATE_BENCH_DEADLINE`` seconds (the
  runner's ``--deadline``).

Both limiters allow every request (limits far above the load, one key: the loopback address), so
what is measured is what checking costs. ``GET /hello`` is what the load generator asks;
``GET /stats`` (never under load) says what the Floodgate client counted, so the run can tell
whether any decision was the fail mode's.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict

from fastapi import FastAPI

from floodgate import AsyncFloodgate
from floodgate.asgi import RateLimitMiddleware

variant = os.environ.get("FLOODGATE_BENCH_VARIANT", "none")
floodgate = AsyncFloodgate(
    os.environ.get("FLOODGATE_URL", "http://127.0.0.1:8080"),
    deadline=float(os.environ.get("FLOODGATE_BENCH_DEADLINE", "0.05")),
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    if variant == "floodgate":
        await floodgate.warmup()
    yield
    await floodgate.aclose()


app = FastAPI(lifespan=lifespan)


@app.get("/hello")
async def hello() -> dict[str, str]:
    return {"hello": "world"}


@app.get("/stats")
async def stats() -> dict[str, object]:
    return asdict(floodgate.stats())


if variant == "slowapi":
    from slowapi import Limiter
    from slowapi.middleware import SlowAPIASGIMiddleware
    from slowapi.util import get_remote_address

    app.state.limiter = Limiter(
        key_func=get_remote_address,
        default_limits=["100000000/minute"],
        storage_uri="memory://",
        headers_enabled=True,
    )
    app.add_middleware(SlowAPIASGIMiddleware)
elif variant == "floodgate":
    app.add_middleware(RateLimitMiddleware, client=floodgate, skip=lambda incoming: incoming.path == "/stats")
elif variant != "none":
    raise SystemExit(f"FLOODGATE_BENCH_VARIANT must be none, slowapi or floodgate, got {variant!r}")
