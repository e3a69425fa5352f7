"""The LLM-platform chat API on FastAPI, limited by Floodgate (see README.md beside this file)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from floodgate import AsyncFloodgate, RateLimited
from floodgate.asgi import RateLimitMiddleware, decision_of, degraded_model
from floodgate.incoming import Incoming, denial

floodgate = AsyncFloodgate(os.environ.get("FLOODGATE_URL", "http://127.0.0.1:8080"))


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    await floodgate.warmup()
    yield
    await floodgate.aclose()


app = FastAPI(lifespan=lifespan)


def plan(incoming: Incoming) -> dict[str, str]:
    """The tenant's plan, as the authentication in front of the app sets it (``x-plan``)."""
    found = incoming.headers.get("x-plan")
    return {} if found is None else {"plan": found}


# Every request: chat-per-user, chat-per-tenant and monthly-plan (user and tenant from the
# x-user-id and x-tenant-id headers, the route's template, the plan).
app.add_middleware(RateLimitMiddleware, client=floodgate, descriptors=plan)


class Chat(BaseModel):
    prompt: str
    max_tokens: int = 256


async def call_model(model: str, prompt: str, max_tokens: int) -> tuple[str, int]:
    """A stand-in for the model: answers with the prompt, using the prompt's words and as many
    tokens again, at most ``max_tokens``."""
    await asyncio.sleep(0)
    used = len(prompt.split()) + min(max_tokens, len(prompt.split()))
    return f"[{model}] {prompt}", used


@app.post("/chat")
async def chat(request: Request, body: Chat, x_tenant_id: str = Header("anonymous")) -> Response:
    model = degraded_model(decision_of(request), "large-model")
    estimate = len(body.prompt.split()) + body.max_tokens
    try:
        async with floodgate.reserve({"tenant": x_tenant_id}, tokens=estimate, ttl="2m") as held:
            answer, used = await call_model(model, body.prompt, body.max_tokens)
            await held.commit(used)  # what was reserved beyond `used` goes back
    except RateLimited as limited:
        if limited.decision is None:  # a reservation's denial always carries its decision
            raise
        content, headers = denial(limited.decision)
        return Response(content, status_code=429, headers=dict(headers))
    return JSONResponse({"model": model, "answer": answer, "tokens": used})


@app.post("/agent/step")
async def step(x_session_id: str = Header()) -> Response:
    taken = await floodgate.session(x_session_id).step()
    if not taken.allowed:
        content, headers = denial(taken.decision)
        return Response(content, status_code=429, headers=dict(headers))
    return JSONResponse({"remaining": taken.remaining})
