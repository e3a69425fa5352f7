// The Anthropic Node SDK against Floodgate's LLM gateway (an `llm: {api: anthropic}` route): each
// scenario of tests/llm/anthropic_sdk.rs, its results printed as one JSON object for the Rust test
// to check against the gateway's budgets.
//
// Environment: FLOODGATE_LLM_BASE_URL (the gateway's /v1; the SDK adds /v1 itself) and
// FLOODGATE_LLM_TENANT (a prefix: each scenario is its own tenant, "<prefix>-<scenario>").

import Anthropic from "@anthropic-ai/sdk";
import { readFileSync } from "node:fs";

const BASE = process.env.FLOODGATE_LLM_BASE_URL.replace(/\/v1$/, "");
const PREFIX = process.env.FLOODGATE_LLM_TENANT;
const MODEL = "claude-sonnet-4-5";
const version = JSON.parse(
  readFileSync(new URL("./node_modules/@anthropic-ai/sdk/package.json", import.meta.url)),
).version;

// No retries: a 429 is what the test looks for.
const client = (scenario) =>
  new Anthropic({
    baseURL: BASE,
    apiKey: "sk-ant-floodgate-test",
    maxRetries: 0,
    defaultHeaders: { "x-tenant-id": `${PREFIX}-${scenario}` },
  });
const usage = (u) => ({ input_tokens: u.input_tokens, output_tokens: u.output_tokens });
const say = (text) => [{ role: "user", content: text }];
const header = (headers, name) =>
  typeof headers?.get === "function" ? headers.get(name) : (headers?.[name] ?? null);

const out = { sdk: `anthropic-node ${version}` };
const main = client("main");

// A message, not streamed.
let m = await main.messages.create({ model: MODEL, max_tokens: 50, messages: say("Hello from the SDK") });
out.message = { text: m.content[0].text, stop_reason: m.stop_reason, usage: usage(m.usage) };

// Streamed with the SDK's helper: the text as it flows, the final message's usage.
let text = "";
const helper = main.messages.stream({ model: MODEL, max_tokens: 50, messages: say("Stream from the SDK") });
helper.on("text", (piece) => {
  text += piece;
});
const final = await helper.finalMessage();
out.stream = { text, usage: usage(final.usage), stop_reason: final.stop_reason };

// Streamed raw: every event, in order.
const events = [];
for await (const e of await main.messages.create({
  model: MODEL,
  max_tokens: 50,
  messages: say("Raw events"),
  stream: true,
})) {
  events.push(e.type);
}
out.events = events;

// count_tokens: proxied, not metered.
out.count_tokens = (await main.messages.countTokens({ model: MODEL, messages: say("Count me") })).input_tokens;

// Capped: more than the budget holds; the answer says what was granted.
const { data: capped, response } = await client("cap")
  .messages.create({ model: MODEL, max_tokens: 20000, messages: say("As long as you can") })
  .withResponse();
out.cap = {
  allowance: response.headers.get("floodgate-allowance"),
  output_tokens: capped.usage.output_tokens,
  input_tokens: capped.usage.input_tokens,
  stop_reason: capped.stop_reason,
};

// Spent: a call that uses the budget up, then one refused with 429 and its exact wait.
const limited = client("limited");
m = await limited.messages.create(
  { model: MODEL, max_tokens: 1980, messages: say("Use it all") },
  { headers: { "x-fake-tokens": "1980" } },
);
out.limited = { first_usage: usage(m.usage) };
try {
  await limited.messages.create({ model: MODEL, max_tokens: 100, messages: say("One more") });
  out.limited.second = "allowed";
} catch (err) {
  if (!(err instanceof Anthropic.RateLimitError)) throw err;
  out.limited.second = {
    status: err.status,
    type: err.error?.error?.type,
    retry_after_ms: header(err.headers, "retry-after-ms"),
    retry_after: header(err.headers, "retry-after"),
  };
}

// Cut: an upstream that ignores max_tokens; the stream ends at the allowance with an error event.
let received = "";
try {
  const stream = await client("cut").messages.create(
    { model: MODEL, max_tokens: 20, messages: say("Do not stop"), stream: true },
    { headers: { "x-fake-overshoot": "10", "x-fake-tokens": "1000" } },
  );
  for await (const e of stream) {
    if (e.type === "content_block_delta" && e.delta.type === "text_delta") received += e.delta.text;
  }
  out.cut = { raised: null, words: received.split(/\s+/).filter(Boolean).length };
} catch (err) {
  if (!(err instanceof Anthropic.APIError)) throw err;
  out.cut = { raised: err.constructor.name, message: String(err.message), words: received.split(/\s+/).filter(Boolean).length };
}

console.log(JSON.stringify(out));
