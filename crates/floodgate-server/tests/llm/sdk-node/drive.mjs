// The OpenAI Node SDK against Floodgate's LLM gateway: each scenario of tests/llm/sdk.rs, its
// results printed as one JSON object for the Rust test to check against the gateway's budgets.
//
// Environment: FLOODGATE_LLM_BASE_URL (the gateway's /v1) and FLOODGATE_LLM_TENANT (a prefix: each
// scenario is its own tenant, "<prefix>-<scenario>").

import OpenAI from "openai";
import { VERSION as version } from "openai/version";

const BASE = process.env.FLOODGATE_LLM_BASE_URL;
const PREFIX = process.env.FLOODGATE_LLM_TENANT;

// No retries: a 429 is what the test looks for.
const client = (scenario) =>
  new OpenAI({
    baseURL: BASE,
    apiKey: "sk-floodgate-test",
    maxRetries: 0,
    defaultHeaders: { "x-tenant-id": `${PREFIX}-${scenario}` },
  });

const usage = (u) => (u ? { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens } : null);

const out = { sdk: `openai-node ${version}` };
const main = client("main");

// A chat completion, not streamed.
let r = await main.chat.completions.create({
  model: "gpt-4o-mini",
  messages: [{ role: "user", content: "Hello from the SDK" }],
  max_tokens: 50,
});
out.chat = { content: r.choices[0].message.content, finish_reason: r.choices[0].finish_reason, usage: usage(r.usage) };

// Streamed, the usage not asked for: the gateway asks the upstream, and hides that chunk.
let chunks = [];
for await (const c of await main.chat.completions.create({
  model: "gpt-4o-mini",
  messages: [{ role: "user", content: "Stream from the SDK" }],
  max_tokens: 50,
  stream: true,
})) {
  chunks.push(c);
}
out.stream = {
  text: chunks.map((c) => (c.choices.length ? c.choices[0].delta.content ?? "" : "")).join(""),
  usage_chunks: chunks.filter((c) => c.usage != null).length,
  chunks_without_choices: chunks.filter((c) => c.choices.length === 0).length,
};

// Streamed, the usage asked for.
chunks = [];
for await (const c of await main.chat.completions.create({
  model: "gpt-4o-mini",
  messages: [{ role: "user", content: "Stream with usage" }],
  max_tokens: 50,
  stream: true,
  stream_options: { include_usage: true },
})) {
  chunks.push(c);
}
const last = chunks[chunks.length - 1];
out.stream_usage = { usage: usage(last.usage), choices_in_last: last.choices.length };

// The responses API, streamed.
const events = [];
for await (const e of await main.responses.create({ model: "gpt-4.1", input: "Respond from the SDK", stream: true })) {
  events.push(e);
}
const completed = events.find((e) => e.type === "response.completed");
out.responses = {
  text: events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join(""),
  usage: { input_tokens: completed.response.usage.input_tokens, output_tokens: completed.response.usage.output_tokens },
};

// Embeddings (the SDK asks for base64 and decodes it).
const e = await main.embeddings.create({ model: "text-embedding-3-small", input: ["a river", "of stone"] });
out.embeddings = { vectors: e.data.length, dimensions: e.data[0].embedding.length, prompt_tokens: e.usage.prompt_tokens };

// Capped: more than the budget holds; the answer says what was granted.
const { data: capped, response: raw } = await client("cap")
  .chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "As long as you can" }],
    max_tokens: 100000,
  })
  .withResponse();
out.cap = {
  allowance: raw.headers.get("floodgate-allowance"),
  completion_tokens: capped.usage.completion_tokens,
  prompt_tokens: capped.usage.prompt_tokens,
};

// Spent: a call that uses the budget up, then one refused with 429 and its exact wait.
const limited = client("limited");
r = await limited.chat.completions.create(
  { model: "gpt-4o-mini", messages: [{ role: "user", content: "Use it all" }], max_tokens: 1980 },
  { headers: { "x-fake-tokens": "1980" } },
);
out.limited = { first_usage: usage(r.usage) };
try {
  await limited.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "One more" }] });
  out.limited.second = "allowed";
} catch (err) {
  if (!(err instanceof OpenAI.RateLimitError)) throw err;
  out.limited.second = {
    status: err.status,
    code: err.code,
    retry_after_ms: err.headers.get("retry-after-ms"),
    retry_after: err.headers.get("retry-after"),
  };
}

// Cut: an upstream that ignores max_tokens; the stream ends at the allowance with an error.
let received = "";
try {
  for await (const c of await client("cut").chat.completions.create(
    {
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "Do not stop" }],
      max_tokens: 20,
      stream: true,
    },
    { headers: { "x-fake-overshoot": "10", "x-fake-tokens": "1000" } },
  )) {
    if (c.choices.length) received += c.choices[0].delta.content ?? "";
  }
  out.cut = { raised: null, words: received.split(" ").filter(Boolean).length };
} catch (err) {
  if (!(err instanceof OpenAI.APIError)) throw err;
  out.cut = { raised: err.constructor.name, message: err.message, words: received.split(" ").filter(Boolean).length };
}

console.log(JSON.stringify(out));
