import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { INestApplication } from '@nestjs/common';
import { startFloodgate, type RunningFloodgate } from '@floodgate/testkit';
import { FloodgateClient } from '@floodgate/client';
import { LARGE_MODEL, createApp, tokensOf } from 'nestjs-chat/app';

const CONFIG = readFileSync(new URL('../../floodgate.yaml', import.meta.url), 'utf8');

let floodgate: RunningFloodgate;
let app: INestApplication;
let url: string;
before(async () => {
  floodgate = await startFloodgate(CONFIG);
  // The example's 50 ms deadline, widened for a test machine busy with builds.
  app = await createApp(floodgate.url, 1000);
  await app.listen(0, '127.0.0.1');
  url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
});
after(async () => {
  await app.close();
  await floodgate.stop();
});

const chat = (user: string, tenant: string, body: object = { prompt: 'hi' }, signal?: AbortSignal) =>
  fetch(`${url}/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-user-id': user, 'x-tenant-id': tenant },
    body: JSON.stringify(body),
    ...(signal === undefined ? {} : { signal }),
  });

describe('nestjs-chat', () => {
  it('the twelve requests: ten 200s, then two 429s with Retry-After', async () => {
    const answers = [];
    for (let i = 0; i < 12; i++) answers.push(await chat('alice', 'acme'));
    assert.deepEqual(answers.map((a) => a.status), [200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429]);
    assert.deepEqual(await answers[0]!.json(), {
      answer: 'echo: hi',
      tokens: tokensOf('hi') + tokensOf('echo: hi'),
      model: LARGE_MODEL,
    });
    assert.equal(answers[9]!.headers.get('x-ratelimit-remaining'), '0');
    for (const denied of answers.slice(10)) {
      const retryAfter = Number(denied.headers.get('retry-after'));
      // A sliding window weighs the previous 60 s window in: when the ten requests straddle a
      // window boundary, the earliest pass can be a little over 60 s away (never over two windows).
      assert.ok(retryAfter >= 1 && retryAfter <= 120, `Retry-After ${retryAfter}`);
      const problem = (await denied.json()) as { type: string; retry_after: number; limit: number };
      assert.equal(problem.type, 'https://floodgate.dev/problems/rate-limited');
      assert.equal(problem.retry_after, retryAfter);
      assert.equal(problem.limit, 10);
    }
    assert.equal((await chat('bob', 'acme')).status, 200, 'another user of the tenant still passes');
  });

  it('a free tenant past its 100 calls of the month is switched to the small model', async () => {
    const models = [];
    for (let i = 0; i < 102; i++) {
      const answer = await fetch(`${url}/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-user-id': `member-${i}`, 'x-tenant-id': 'plan-free', 'x-plan': 'free' },
        body: JSON.stringify({ prompt: 'hi' }),
      });
      assert.equal(answer.status, 200);
      models.push(((await answer.json()) as { model: string }).model);
    }
    assert.deepEqual(models.slice(0, 100), Array(100).fill(LARGE_MODEL));
    assert.deepEqual(models.slice(100), ['small-model', 'small-model']);
  });

  it('an agent session has 50 steps, then 429', async () => {
    const statuses = [];
    for (let i = 0; i < 51; i++) {
      const answer = await fetch(`${url}/agent/step`, { method: 'POST', headers: { 'x-session-id': 'run-1' } });
      statuses.push(answer.status);
      if (i === 49) assert.deepEqual(await answer.json(), { remaining: 0 });
    }
    assert.equal(statuses.filter((s) => s === 200).length, 50);
    assert.equal(statuses[50], 429);
    const denied = await fetch(`${url}/agent/step`, { method: 'POST', headers: { 'x-session-id': 'run-1' } });
    // `algorithm: budget`: the spent budget is gone a day after the session's first step.
    assert.ok(Number(denied.headers.get('retry-after')) > 23 * 3600);
    assert.match(denied.headers.get('content-type') ?? '', /^application\/problem\+json/);
    const fresh = await fetch(`${url}/agent/step`, { method: 'POST', headers: { 'x-session-id': 'run-2' } });
    assert.deepEqual(await fresh.json(), { remaining: 49 }, 'each session has its own budget');
  });

  it('a chat reserves the prompt plus max_tokens and commits the tokens the model used', async () => {
    const answer = await chat('carol', 'tokens-1', { prompt: 'hi', max_tokens: 1000 });
    assert.equal(answer.status, 200);
    const { tokens } = (await answer.json()) as { tokens: number };
    assert.equal(tokens, tokensOf('hi') + tokensOf('echo: hi'));
    assert.equal(await usedTokens('tokens-1'), tokens, 'the 1000 reserved beyond the actual went back');
  });

  it('a reservation holds the tokens while the model runs; a cancelled chat releases them', async () => {
    const cancel = new AbortController();
    const slow = chat('dave', 'tokens-2', { prompt: 'slow', max_tokens: 15_000 }, cancel.signal).catch((e: unknown) => e);
    await until(async () => (await usedTokens('tokens-2')) === tokensOf('slow') + 15_000, 'the estimate is held');
    const denied = await chat('erin', 'tokens-2', { prompt: 'hi', max_tokens: 15_000 });
    assert.equal(denied.status, 429, '15 001 held + 15 001 asked exceed the 20 000 tokens an hour');
    assert.ok(Number(denied.headers.get('retry-after')) >= 1);
    cancel.abort();
    assert.ok((await slow) instanceof Error, 'the slow chat was cancelled');
    await until(async () => (await usedTokens('tokens-2')) === 0, 'the cancelled chat released its tokens');
    assert.equal((await chat('erin', 'tokens-2', { prompt: 'hi', max_tokens: 15_000 })).status, 200);
  });
});

async function usedTokens(tenant: string): Promise<number> {
  return (await new FloodgateClient({ url: floodgate.url, deadline: 2000 }).usage('chat-tokens-per-tenant', { tenant })).used;
}

async function until(condition: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!(await condition())) {
    if (Date.now() > deadline) assert.fail(`not within 5 s: ${what}`);
    await new Promise((ok) => setTimeout(ok, 20));
  }
}
