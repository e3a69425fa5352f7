"""The OpenAI Python SDK against Floodgate's LLM gateway: each scenario of tests/llm/sdk.rs, its
results printed as one JSON object for the Rust test to check against the gateway's budgets.

Environment: FLOODGATE_LLM_BASE_URL (the gateway's /v1) and FLOODGATE_LLM_TENANT (a prefix: each
scenario is its own tenant, "<prefix>-<scenario>").
"""

import json
import os

import openai
from openai import OpenAI

BASE = os.environ["FLOODGATE_LLM_BASE_URL"]
PREFIX = os.environ["FLOODGATE_LLM_TENANT"]


def client(scenario: str) -> OpenAI:
    # No retries: a 429 is what the test looks for.
    return OpenAI(
        base_url=BASE,
        api_key="sk-floodgate-test",
        max_retries=0,
        default_headers={"x-tenant-id": f"{PREFIX}-{scenario}"},
    )


def usage(u) -> dict | None:
    if u is None:
        return None
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens}


out: dict = {"sdk": f"openai-python {openai.__version__}"}
main = client("main")

# A chat completion, not streamed.
r = main.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "Hello from the SDK"}],
    max_tokens=50,
)
out["chat"] = {
    "content": r.choices[0].message.content,
    "finish_reason": r.choices[0].finish_reason,
    "usage": usage(r.usage),
}

# Streamed, the usage not asked for: the gateway asks the upstream, and hides that chunk.
chunks = list(
    main.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Stream from the SDK"}],
        max_tokens=50,
        stream=True,
    )
)
out["stream"] = {
    "text": "".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
    "usage_chunks": sum(1 for c in chunks if c.usage is not None),
    "chunks_without_choices": sum(1 for c in chunks if not c.choices),
}

# Streamed, the usage asked for.
chunks = list(
    main.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Stream with usage"}],
        max_tokens=50,
        stream=True,
        stream_options={"include_usage": True},
    )
)
out["stream_usage"] = {"usage": usage(chunks[-1].usage), "choices_in_last": len(chunks[-1].choices)}

# The responses API, streamed.
events = list(main.responses.create(model="gpt-4.1", input="Respond from the SDK", stream=True))
completed = [e for e in events if e.type == "response.completed"]
out["responses"] = {
    "text": "".join(e.delta for e in events if e.type == "response.output_text.delta"),
    "usage": {
        "input_tokens": completed[0].response.usage.input_tokens,
        "output_tokens": completed[0].response.usage.output_tokens,
    },
}

# Embeddings (the SDK asks for base64 and decodes it).
e = main.embeddings.create(model="text-embedding-3-small", input=["a river", "of stone"])
out["embeddings"] = {"vectors": len(e.data), "dimensions": len(e.data[0].embedding), "prompt_tokens": e.usage.prompt_tokens}

# Capped: more than the budget holds; the answer says what was granted.
raw = client("cap").chat.completions.with_raw_response.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "As long as you can"}],
    max_tokens=100000,
)
parsed = raw.parse()
out["cap"] = {
    "allowance": raw.headers.get("floodgate-allowance"),
    "completion_tokens": parsed.usage.completion_tokens,
    "prompt_tokens": parsed.usage.prompt_tokens,
}

# Spent: a call that uses the budget up, then one refused with 429 and its exact wait.
limited = client("limited")
r = limited.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "Use it all"}],
    max_tokens=1980,
    extra_headers={"x-fake-tokens": "1980"},
)
out["limited"] = {"first_usage": usage(r.usage)}
try:
    limited.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "One more"}])
    out["limited"]["second"] = "allowed"
except openai.RateLimitError as err:
    out["limited"]["second"] = {
        "status": err.status_code,
        "code": err.code,
        "retry_after_ms": err.response.headers.get("retry-after-ms"),
        "retry_after": err.response.headers.get("retry-after"),
    }

# Cut: an upstream that ignores max_tokens; the stream ends at the allowance with an error.
cut = client("cut")
received = ""
try:
    for c in cut.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Do not stop"}],
        max_tokens=20,
        stream=True,
        extra_headers={"x-fake-overshoot": "10", "x-fake-tokens": "1000"},
    ):
        if c.choices:
            received += c.choices[0].delta.content or ""
    out["cut"] = {"raised": None, "words": len(received.split())}
except openai.APIError as err:
    out["cut"] = {"raised": type(err).__name__, "message": err.message, "words": len(received.split())}

print(json.dumps(out))
