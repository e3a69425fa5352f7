import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FloodgateClient } from '@floodgate/client';
import { startFloodgate, type RunningFloodgate } from '@floodgate/testkit';
import { appModule } from '../src/app.js';

const CONFIG = `
store: { kind: memory }
descriptors: [rule, throttler, throttler_key, throttler_limit, throttler_ttl]
rules:
  - name: chat
    match: { rule: chat }
    key: [ip]
    algorithm: fixed_window
    limit: 2
    window: 60s
  - name: throttler-default
    match: { throttler: default }
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

describe('Floodgate in a NestJS 12 app (ES modules)', () => {
  it('one copy of each package: import and require give the same classes', () => {
    const require = createRequire(import.meta.url);
    assert.equal(require('@floodgate/client').FloodgateClient, FloodgateClient);
    assert.equal(require('@floodgate/nestjs').FloodgateClient, FloodgateClient);
  });

  it('POST /chat: the Floodgate guard lets 2 through, then answers 429 problem+json', async () => {
    const statuses = [];
    for (let i = 0; i < 3; i++) {
      const answer = await fetch(`${url}/chat`, { method: 'POST' });
      statuses.push(answer.status);
      if (answer.status === 429) {
        assert.match(answer.headers.get('content-type') ?? '', /^application\/problem\+json/);
        assert.ok(Number(answer.headers.get('retry-after')) >= 1);
        assert.equal(((await answer.json()) as { type: string }).type, 'https://floodgate.dev/problems/rate-limited');
      } else {
        assert.ok(((await answer.json()) as { calls: number }).calls >= 1, 'the injected client is the guard\'s');
      }
    }
    assert.deepEqual(statuses, [201, 201, 429]);
  });

  it('GET /items: ThrottlerGuard on FloodgateThrottlerStorage lets 3 through, then answers 429', async () => {
    const answers = [];
    for (let i = 0; i < 4; i++) {
      const answer = await fetch(`${url}/items`);
      await answer.arrayBuffer();
      answers.push([answer.status, answer.headers.get('x-ratelimit-remaining')]);
    }
    assert.deepEqual(answers.slice(0, 3), [[200, '2'], [200, '1'], [200, '0']]);
    assert.equal(answers[3]![0], 429);
  });
});
