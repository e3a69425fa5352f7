import 'reflect-metadata';
import * as assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { startFloodgate, ManualClock, RunningFloodgate } from '@floodgate/testkit';
import { appModule } from '../src/app.module';

// Floodgate with no configuration: its built-in policy has the rule of POST /chat (10 a minute per
// user) and the template rules that count every throttler's hits; @nestjs/throttler 5 tells the
// storage neither the throttler's name nor its limit, and compares the count with its limit itself.
let floodgate: RunningFloodgate;
let clock: ManualClock;
let app: INestApplication;
let url: string;
before(async () => {
  floodgate = await startFloodgate(null, { manualClockMs: 1_800_000_000_000 });
  clock = floodgate.clock;
  app = await NestFactory.create(appModule(floodgate.url), { logger: false });
  await app.listen(0, '127.0.0.1');
  url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
});
after(async () => {
  await app.close();
  await floodgate.stop();
});

async function get(path: string): Promise<[number, string | null, string | null]> {
  const answer = await fetch(`${url}${path}`);
  await answer.arrayBuffer();
  return [answer.status, answer.headers.get('x-ratelimit-remaining'), answer.headers.get('retry-after')];
}

describe('Floodgate in a NestJS 10 app with @nestjs/throttler 5, on the server\'s built-in policy', () => {
  it('POST /chat: the Floodgate guard lets 10 through, then answers 429 problem+json', async () => {
    const statuses = [];
    for (let i = 0; i < 11; i++) {
      const answer = await fetch(`${url}/chat`, { method: 'POST', headers: { 'x-user-id': 'u1' } });
      statuses.push(answer.status);
      const body = (await answer.json()) as { type?: string };
      if (answer.status === 429) assert.equal(body.type, 'https://floodgate.dev/problems/rate-limited');
    }
    assert.deepEqual(statuses, [...Array(10).fill(201), 429]);
  });

  it('GET /items: ThrottlerGuard on FloodgateThrottlerStorage lets 3 through, then 429 with Retry-After; every hit counts', async () => {
    const answers = [];
    for (let i = 0; i < 5; i++) answers.push(await get('/items'));
    assert.deepEqual(answers, [
      [200, '2', null],
      [200, '1', null],
      [200, '0', null],
      [429, null, '60'],
      [429, null, '60'],
    ]);
    await clock.advance(60_000);
    assert.deepEqual(await get('/items'), [200, '2', null], 'all five hits expired together');
  });

  it('@Throttle() overrides count with their own limit and ttl', async () => {
    const answers = [];
    for (let i = 0; i < 6; i++) answers.push(await get('/search'));
    assert.deepEqual(answers.map((a) => a[0]), [200, 200, 200, 200, 200, 429]);
    assert.equal(answers[5][2], '10');
  });
});
