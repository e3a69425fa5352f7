import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Controller, Get, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { Throttle, ThrottlerGuard, ThrottlerModule, type ThrottlerStorage } from '@nestjs/throttler';
import { FloodgateThrottlerStorage } from '@floodgate/nestjs';
import { startFloodgate, type RunningFloodgate } from '@floodgate/testkit';
import { send, startApp } from './support.js';

const CONFIG = `
store: { kind: memory }
descriptors: [throttler, throttler_key, throttler_limit, throttler_ttl]
rules:
  - name: throttler-default
    match: { throttler: default, throttler_limit: "3" }
    key: [throttler_key]
    algorithm: fixed_window
    limit: 3
    window: 60s
  - name: throttler-strict
    match: { throttler: default, throttler_limit: "1" }
    key: [throttler_key]
    algorithm: fixed_window
    limit: 1
    window: 60s
  - name: throttler-short
    match: { throttler: short }
    key: [throttler_key]
    algorithm: fixed_window
    limit: 2
    window: 1s
  - name: throttler-5
    match: { throttler_ttl: "30000" }
    key: [throttler_key]
    algorithm: fixed_window
    limit: 2
    window: 30s
`;

let floodgate: RunningFloodgate;
before(async () => {
  floodgate = await startFloodgate(CONFIG);
});
after(async () => {
  await floodgate.stop();
});

// The type checker holds the storage to @nestjs/throttler's own interface.
const asStorage = (s: FloodgateThrottlerStorage): ThrottlerStorage => s;

describe('FloodgateThrottlerStorage: the increment contract of @nestjs/throttler 6', () => {
  it('counts hits, then blocks with the time to wait; a denied hit consumes nothing', async () => {
    const storage = asStorage(new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 1000 }));
    const records = [];
    for (let i = 0; i < 5; i++) records.push(await storage.increment('k-contract', 60_000, 3, 60_000, 'default'));
    assert.deepEqual(records.map((r) => r.totalHits), [1, 2, 3, 4, 4]);
    assert.deepEqual(records.map((r) => r.isBlocked), [false, false, false, true, true]);
    for (const r of records) assert.ok(r.timeToExpire > 0 && r.timeToExpire <= 60, `timeToExpire ${r.timeToExpire}`);
    assert.equal(records[0]!.timeToBlockExpire, 0);
    assert.ok(records[3]!.timeToBlockExpire >= 1 && records[3]!.timeToBlockExpire <= 60);
    const other = await storage.increment('k-other', 60_000, 3, 60_000, 'default');
    assert.equal(other.totalHits, 1, 'keys are counted apart');
  });

  it('expires: blocked until timeToBlockExpire, then counting from one again', async () => {
    const storage = new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 1000 });
    // The rule's windows are one second long: three hits sent on a busy machine may straddle a
    // window's end, and then the third counts in a new window. Each attempt takes a fresh key,
    // until the third hit lands in the window of the first two and is blocked.
    let blocked;
    let key = '';
    for (let attempt = 0; attempt < 20 && !blocked?.isBlocked; attempt++) {
      key = `k-expiry-${attempt}`;
      await storage.increment(key, 1000, 2, 1000, 'short');
      await storage.increment(key, 1000, 2, 1000, 'short');
      blocked = await storage.increment(key, 1000, 2, 1000, 'short');
    }
    assert.equal(blocked?.isBlocked, true);
    assert.equal(blocked?.timeToBlockExpire, 1);
    // Any time past the block's end will do: the next hit counts from one in a later window.
    await new Promise((ok) => setTimeout(ok, (blocked?.timeToBlockExpire ?? 1) * 1000 + 50));
    const again = await storage.increment(key, 1000, 2, 1000, 'short');
    assert.deepEqual([again.isBlocked, again.totalHits], [false, 1]);
  });

  it('refuses to enforce what @Throttle() did not say: no rule with that limit, or a penalty box', async () => {
    const storage = new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 1000 });
    await assert.rejects(storage.increment('k', 60_000, 7, 60_000, 'default'), /no Floodgate rule with limit 7 applies to throttler "default"/);
    await assert.rejects(storage.increment('k', 60_000, 3, 120_000, 'default'), /blockDuration 120000 ms > ttl 60000 ms/);
  });

  it('fails open or closed when Floodgate is down', async () => {
    const own = await startFloodgate(CONFIG);
    await own.stop();
    const open = new FloodgateThrottlerStorage({ url: own.url, deadline: 200, failMode: 'open' });
    const closed = new FloodgateThrottlerStorage({ url: own.url, deadline: 200, failMode: 'closed' });
    assert.equal((await open.increment('k', 60_000, 3, 60_000, 'default')).isBlocked, false);
    const shut = await closed.increment('k', 60_000, 3, 60_000, 'default');
    assert.deepEqual([shut.isBlocked, shut.timeToBlockExpire], [true, 1]);
    assert.equal(closed.client.stats().failedClosed, 1);
  });
});

/** `ThrottlerStorage` of `@nestjs/throttler` 5, as it declares it. */
interface ThrottlerStorage5 {
  increment(key: string, ttl: number): Promise<{ totalHits: number; timeToExpire: number }>;
}

describe('FloodgateThrottlerStorage: the increment contract of @nestjs/throttler 5', () => {
  it('counts the hits in the rule matching the ttl; a denied hit is more than any limit, to wait timeToExpire', async () => {
    const storage: ThrottlerStorage5 = new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 1000 });
    const records = [];
    for (let i = 0; i < 3; i++) records.push(await storage.increment('k5', 30_000));
    assert.deepEqual(records.map((r) => r.totalHits), [1, 2, Number.MAX_SAFE_INTEGER]);
    for (const r of records) assert.ok(r.timeToExpire >= 1 && r.timeToExpire <= 30, `timeToExpire ${r.timeToExpire}`);
    assert.equal((await storage.increment('k5-other', 30_000)).totalHits, 1, 'keys are counted apart');
  });

  it('says which rule to add when none matches the ttl', async () => {
    const storage: ThrottlerStorage5 = new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 1000 });
    await assert.rejects(storage.increment('k5', 12_345), /no Floodgate rule applies to a throttler with ttl 12345 ms/);
  });
});

describe('@Throttle() in a real Nest app, switched to Floodgate with one line', () => {
  @Controller()
  class Api {
    @Get('items')
    items() {
      return [];
    }

    @Get('strict')
    @Throttle({ default: { limit: 1, ttl: 60_000 } })
    strict() {
      return 'one';
    }
  }

  function appModule() {
    @Module({
      imports: [
        ThrottlerModule.forRoot({
          throttlers: [{ ttl: 60_000, limit: 3 }],
          storage: new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 1000 }),
        }),
      ],
      controllers: [Api],
      providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
    })
    class AppModule {}
    return AppModule;
  }

  it('3 requests pass with the throttler headers, the 4th is a 429 with Retry-After; two instances share the count', async () => {
    const one = await startApp(appModule());
    const two = await startApp(appModule());
    try {
      const statuses = [];
      const remaining = [];
      let retryAfter: string | null = null;
      for (let i = 0; i < 4; i++) {
        const [a] = await send(`${i % 2 === 0 ? one.url : two.url}/items`, 1);
        statuses.push(a!.status);
        remaining.push(a!.headers.get('x-ratelimit-remaining'));
        if (a!.status === 429) retryAfter = a!.headers.get('retry-after');
      }
      assert.deepEqual(statuses, [200, 200, 200, 429]);
      assert.deepEqual(remaining.slice(0, 3), ['2', '1', '0']);
      assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= 60, `Retry-After ${retryAfter}`);
      const strict = await send(`${one.url}/strict`, 2);
      assert.deepEqual(strict.map((a) => a.status), [200, 429], '@Throttle() override: limit 1');
    } finally {
      await one.close();
      await two.close();
    }
  });
});
