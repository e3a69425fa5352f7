import 'reflect-metadata';
import * as assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { startFloodgate, RunningFloodgate } from '@floodgate/testkit';
import { appModule } from '../src/app.module';

// @nestjs/throttler 5 tells the storage neither the throttler's name nor its limit: the rule
// matches the throttler's ttl.
const CONFIG = `
store: { kind: memory }
descriptors: [rule, throttler_key, throttler_ttl]
rules:
  - name: chat
    match: { rule: chat }
    key: [ip]
    algorithm: fixed_window
    limit: 2
    window: 60s
  - name: throttler-60s
    match: { throttler_ttl: "60000" }
    key: [throttler_key]
    algorithm: fixed_window
    limit: 3
    window: 60s
`;

let floodgate: RunningFloodgate;
let app: INestApplication;
let url: string;
before(async () => {
  floodgate = await startFloodgate(CONFIG);
  app = await NestFactory.create(appModule(floodgate.url), { logger: false });
  await app.listen(0, '127.0.0.1');
  url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
});
after(async () => {
  await app.close();
  await floodgate.stop();
});

describe('Floodgate in a NestJS 10 app with @nestjs/throttler 5', () => {
  it('POST /chat: the Floodgate guard lets 2 through, then answers 429 problem+json', async () => {
    const statuses = [];
    for (let i = 0; i < 3; i++) {
      const answer = await fetch(`${url}/chat`, { method: 'POST' });
      statuses.push(answer.status);
      const body = (await answer.json()) as { type?: string };
      if (answer.status === 429) assert.equal(body.type, 'https://floodgate.dev/problems/rate-limited');
    }
    assert.deepEqual(statuses, [201, 201, 429]);
  });

  it('GET /items: ThrottlerGuard on FloodgateThrottlerStorage lets 3 through, then answers 429 with Retry-After', async () => {
    const answers = [];
    for (let i = 0; i < 4; i++) {
      const answer = await fetch(`${url}/items`);
      await answer.arrayBuffer();
      answers.push([answer.status, answer.headers.get('x-ratelimit-remaining'), answer.headers.get('retry-after')]);
    }
    assert.deepEqual(answers.slice(0, 3).map((a) => a.slice(0, 2)), [[200, '2'], [200, '1'], [200, '0']]);
    assert.equal(answers[3]![0], 429);
    assert.ok(Number(answers[3]![2]) >= 1 && Number(answers[3]![2]) <= 60, `Retry-After ${answers[3]![2]}`);
  });
});
