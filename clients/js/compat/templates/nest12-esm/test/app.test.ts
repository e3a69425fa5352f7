import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FloodgateClient } from '@floodgate/client';
import { startFloodgate, type ManualClock, type RunningFloodgate } from '@floodgate/testkit';
import { appModule } from '../src/app.js';

// Floodgate with no configuration: its built-in policy has the rule of POST /chat (10 a minute per
// user) and the two template rules that serve every throttler, whatever its @Throttle() says. Its
// clock is the test's to move.
let floodgate: RunningFloodgate;
let clock: ManualClock;
let app: INestApplication;
let url: string;
before(async () => {
  floodgate = await startFloodgate(null, { manualClockMs: 1_800_000_000_000 });
  clock = floodgate.clock!;
  app = await NestFactory.create(appModule(floodgate.url), { logger: false });
  await app.listen(0, '127.0.0.1');
  url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
});
after(async () => {
  await app.close();
  await floodgate.stop();
});

async function get(path: string, init: RequestInit = {}): Promise<[number, Headers]> {
  const answer = await fetch(`${url}${path}`, init);
  await answer.arrayBuffer();
  return [answer.status, answer.headers];
}

describe('Floodgate in a NestJS 12 app (ES modules), on the server\'s built-in policy', () => {
  it('one copy of each package: import and require give the same classes', () => {
    const require = createRequire(import.meta.url);
    assert.equal(require('@floodgate/client').FloodgateClient, FloodgateClient);
    assert.equal(require('@floodgate/nestjs').FloodgateClient, FloodgateClient);
  });

  it('POST /chat: the Floodgate guard lets 10 through, then answers 429 problem+json', async () => {
    const statuses = [];
    for (let i = 0; i < 11; i++) {
      const answer = await fetch(`${url}/chat`, { method: 'POST', headers: { 'x-user-id': 'u1' } });
      statuses.push(answer.status);
      if (answer.status === 429) {
        assert.match(answer.headers.get('content-type') ?? '', /^application\/problem\+json/);
        assert.ok(Number(answer.headers.get('retry-after')) >= 1);
        assert.equal(((await answer.json()) as { type: string }).type, 'https://floodgate.dev/problems/rate-limited');
      } else {
        assert.ok(((await answer.json()) as { calls: number }).calls >= 1, 'the injected client is the guard\'s');
      }
    }
    assert.deepEqual(statuses, [...Array(10).fill(201), 429]);
  });

  it('GET /items: ThrottlerGuard on FloodgateThrottlerStorage lets 3 through, then answers 429', async () => {
    const answers = [];
    for (let i = 0; i < 4; i++) {
      const [status, headers] = await get('/items');
      answers.push([status, headers.get('x-ratelimit-remaining') ?? headers.get('retry-after')]);
    }
    assert.deepEqual(answers, [[200, '2'], [200, '1'], [200, '0'], [429, '60']]);
  });

  it('@Throttle() overrides of two throttlers; a blockDuration longer than ttl boxes the key', async () => {
    const burst = [];
    for (let i = 0; i < 3; i++) {
      const [status, headers] = await get('/search');
      burst.push([status, headers.get('x-ratelimit-remaining-burst') ?? headers.get('retry-after-burst')]);
    }
    assert.deepEqual(burst, [[200, '1'], [200, '0'], [429, '1']], 'the burst throttler: 2 a second');
    await clock.advance(1_000);
    const [status, headers] = await get('/search');
    assert.deepEqual(
      [status, headers.get('x-ratelimit-remaining'), headers.get('x-ratelimit-remaining-burst')],
      [200, '2', '1'],
      'the burst box ended after its second; the default throttler counted three (burst, of shorter ttl, goes first)',
    );

    const login = [];
    for (let i = 0; i < 3; i++) login.push((await get('/login', { method: 'POST' }))[0]);
    assert.deepEqual(login, [201, 201, 429]);
    await clock.advance(60_000); // the ttl is long past; the box holds
    const [boxed, boxedHeaders] = await get('/login', { method: 'POST' });
    assert.deepEqual([boxed, boxedHeaders.get('retry-after')], [429, '60']);
    await clock.advance(60_000);
    assert.equal((await get('/login', { method: 'POST' }))[0], 201);
  });
});
