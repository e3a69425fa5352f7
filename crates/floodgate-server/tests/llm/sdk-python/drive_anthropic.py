"""The Anthropic Python SDK against Floodgate's LLM gateway (an `llm: {api: anthropic}` route): each
scenario of tests/llm/anthropic_sdk.rs, its results printed as one JSON object for the Rust test to
check against the gateway's budgets.

Environment: FLOODGATE_LLM_BASE_URL (the gateway's /v1; the SDK adds /v1 itself) and
FLOODGATE_LLM_TENANT (a prefix: each scenario is its own tenant, "<prefix>-<scenario>").
"""

import json
import os

import anthropic
from anthropic import Anthropic

BASE = os.environ["FLOODGATE_LLM_BASE_URL"].removesuffix("/v1")
PREFIX = os.environ["FLOODGATE_LLM_TENANT"]
MODEL = "claude-sonnet-4-5"


def client(scenario: str) -> Anthropic:
    # No retries: a 429 is what the test looks for.
    return Anthropic(
        base_url=BASE,
        api_key="sk-ant-floodgate-test",
        max_retries=0,
        default_headers={"x-tenant-id": f"{PREFIX}-{scenario}"},
    )


def usage(u) -> dict:
    return {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens}


def say(text: str) -> list:
    return [{"role": "user", "content": text}]


out: dict = {"sdk": f"anthropic-python {anthropic.__version__}"}
main = client("main")

# A message, not streamed.
m = main.messages.create(model=MODEL, max_tokens=50, messages=say("Hello from the SDK"))
out["message"] = {"text": m.content[0].text, "stop_reason": m.stop_reason, "usage": usage(m.usage)}

# Streamed with the SDK's helper: the text as it flows, the final message's usage.
with main.messages.stream(model=MODEL, max_tokens=50, messages=say("Stream from the SDK")) as s:
    text = "".join(s.text_stream)
    final = s.get_final_message()
out["stream"] = {"text": text, "usage": usage(final.usage), "stop_reason": final.stop_reason}

# Streamed raw: every event, in order.
events = list(main.messages.create(model=MODEL, max_tokens=50, messages=say("Raw events"), stream=True))
out["events"] = [e.type for e in events]

# count_tokens: proxied, not metered.
out["count_tokens"] = main.messages.count_tokens(model=MODEL, messages=say("Count me")).input_tokens

# Capped: more than the budget holds; the answer says what was granted.
raw = client("cap").messages.with_raw_response.create(
    model=MODEL, max_tokens=20000, messages=say("As long as you can")
)
parsed = raw.parse()
out["cap"] = {
    "allowance": raw.headers.get("floodgate-allowance"),
    "output_tokens": parsed.usage.output_tokens,
    "input_tokens": parsed.usage.input_tokens,
    "stop_reason": parsed.stop_reason,
}

# Spent: a call that uses the budget up, then one refused with 429 and its exact wait.
limited = client("limited")
m = limited.messages.create(
    model=MODEL, max_tokens=1980, messages=say("Use it all"), extra_headers={"x-fake-tokens": "1980"}
)
out["limited"] = {"first_usage": usage(m.usage)}
try:
    limited.messages.create(model=MODEL, max_tokens=100, messages=say("One more"))
    out["limited"]["second"] = "allowed"
except anthropic.RateLimitError as err:
    out["limited"]["second"] = {
        "status": err.status_code,
        "type": err.body["error"]["type"],
        "retry_after_ms": err.response.headers.get("retry-after-ms"),
        "retry_after": err.response.headers.get("retry-after"),
    }

# Cut: an upstream that ignores max_tokens; the stream ends at the allowance with an error event.
received = ""
try:
    with client("cut").messages.stream(
        model=MODEL,
        max_tokens=20,
        messages=say("Do not stop"),
        extra_headers={"x-fake-overshoot": "10", "x-fake-tokens": "1000"},
    ) as s:
        for piece in s.text_stream:
            received += piece
    out["cut"] = {"raised": None, "words": len(received.split())}
except anthropic.APIError as err:
    out["cut"] = {"raised": type(err).__name__, "message": str(err), "words": len(received.split())}

print(json.dumps(out))
