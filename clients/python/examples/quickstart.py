"""Floodgate in front of a FastAPI app: every request is checked with the descriptors ``method``,
``route`` (the route's template, ``POST /chat``), ``ip`` and ``user`` (the ``x-user-id`` header).

    floodgate serve &                       # the built-in example policy: 10 chats a minute per user
    FLOODGATE_URL=http://127.0.0.1:8080 uvicorn quickstart:app --port 8000
    curl -si -X POST localhost:8000/chat -H 'x-user-id: u1'
"""

import os

from fastapi import FastAPI

from floodgate.asgi import RateLimitMiddleware

app = FastAPI()
app.add_middleware(RateLimitMiddleware, url=os.environ.get("FLOODGATE_URL", "http://127.0.0.1:8080"))


@app.post("/chat")
async def chat() -> dict[str, str]:
    return {"answer": "…"}
