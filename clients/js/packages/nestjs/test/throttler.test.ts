import 'reflect-metadata';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Controller, Get, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { Throttle, ThrottlerGuard, ThrottlerModule, type ThrottlerStorage } from '@nestjs/throttler';
import { StatedLimitError } from '@floodgate/client';
import { FloodgateThrottlerStorage, ThrottlerTemplateError } from '@floodgate/nestjs';
import { startFloodgate, type ManualClock, type RunningFloodgate } from '@floodgate/testkit';
import { send, startApp } from './support.js';

const T0 = 1_800_000_000_000;

// No configuration: the built-in policy's two template rules serve every throttler.
let floodgate: RunningFloodgate;
let clock: ManualClock;
before(async () => {
  floodgate = await startFloodgate(null, { manualClockMs: T0 });
  clock = floodgate.clock!;
});
after(async () => {
  await floodgate.stop();
});

// The type checker holds the storage to @nestjs/throttler's own interface.
const asStorage = (s: FloodgateThrottlerStorage): ThrottlerStorage => s;
const storage = () => asStorage(new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 5000 }));

describe('FloodgateThrottlerStorage: the increment contract of @nestjs/throttler 6, with no server rules', () => {
  it('counts hits, then blocks for blockDuration (longer than ttl), then counts afresh', async () => {
    const s = storage();
    const records = [];
    for (let i = 0; i < 4; i++) records.push(await s.increment('k-long-box', 10_000, 3, 60_000, 'default'));
    assert.deepEqual(records.map((r) => [r.totalHits, r.isBlocked]), [[1, false], [2, false], [3, false], [4, true]]);
    assert.deepEqual(records.map((r) => r.timeToExpire).slice(0, 3), [10, 10, 10]);
    assert.equal(records[3]!.timeToBlockExpire, 60);
    await clock.advance(30_000); // the hits expired long ago; the box holds
    const still = await s.increment('k-long-box', 10_000, 3, 60_000, 'default');
    assert.deepEqual([still.isBlocked, still.timeToBlockExpire], [true, 30]);
    await clock.advance(30_000);
    const afresh = await s.increment('k-long-box', 10_000, 3, 60_000, 'default');
    assert.deepEqual([afresh.isBlocked, afresh.totalHits, afresh.timeToExpire], [false, 1, 10]);
  });

  it('a box shorter than ttl ends early and forgets the count; no box waits for the oldest hit', async () => {
    const s = storage();
    await s.increment('k-short-box', 60_000, 1, 2_000, 'default');
    const boxed = await s.increment('k-short-box', 60_000, 1, 2_000, 'default');
    assert.deepEqual([boxed.isBlocked, boxed.timeToBlockExpire], [true, 2]);
    await clock.advance(2_000);
    const afresh = await s.increment('k-short-box', 60_000, 1, 2_000, 'default');
    assert.deepEqual([afresh.isBlocked, afresh.totalHits], [false, 1]);

    await s.increment('k-no-box', 5_000, 1, 0, 'default');
    await clock.advance(1_500);
    const denied = await s.increment('k-no-box', 5_000, 1, 0, 'default');
    assert.deepEqual([denied.isBlocked, denied.timeToBlockExpire], [true, 4], 'until the first hit expires, 3.5 s on');
    await clock.advance(3_500);
    assert.equal((await s.increment('k-no-box', 5_000, 1, 0, 'default')).isBlocked, false);
  });

  it('two storage instances (two app instances) share one count', async () => {
    const one = storage();
    const two = storage();
    const a = await one.increment('k-shared', 60_000, 3, 60_000, 'default');
    const b = await two.increment('k-shared', 60_000, 3, 60_000, 'default');
    const c = await one.increment('k-shared', 60_000, 3, 60_000, 'default');
    const d = await two.increment('k-shared', 60_000, 3, 60_000, 'default');
    assert.deepEqual([a, b, c].map((r) => r.totalHits), [1, 2, 3]);
    assert.deepEqual([d.isBlocked, d.timeToBlockExpire], [true, 60]);
    assert.equal((await one.increment('k-shared', 60_000, 3, 60_000, 'default')).isBlocked, true, 'boxed for both');
  });

  it('throttlers count apart, also on one key (a generateKey without the throttler\'s name)', async () => {
    const s = storage();
    await s.increment('k-names', 60_000, 1, 60_000, 'first');
    assert.equal((await s.increment('k-names', 60_000, 1, 60_000, 'first')).isBlocked, true);
    const other = await s.increment('k-names', 60_000, 1, 60_000, 'second');
    assert.deepEqual([other.isBlocked, other.totalHits], [false, 1]);
  });

  it('refuses what Floodgate cannot state: a limit of 0, a ttl of 0, fractions', async () => {
    const s = storage();
    await assert.rejects(s.increment('k', 60_000, 0, 0, 'default'), StatedLimitError);
    await assert.rejects(s.increment('k', 0, 3, 0, 'default'), StatedLimitError);
    await assert.rejects(s.increment('k', 1500.5, 3, 0, 'default'), (e: unknown) => e instanceof StatedLimitError && e.field === 'windowMs');
    assert.equal((await s.increment('k-negative-box', 60_000, 1, -5, 'default')).isBlocked, false, 'blockDuration ≤ 0 is no box');
  });

  it('says what the server lacks when its configuration has no template rules, or bounds too low', async () => {
    const hitsOnly = `
store: { kind: memory }
descriptors: [throttler_key]
rules:
  - name: throttler
    key: [throttler_key]
    algorithm: sliding_log
    limit: { from: request, max: 100 }
    window: { from: request, max: 1d }
    block_for: { from: request, max: 1d }
`;
    const cases: [string, number, string, RegExp][] = [
      ['store: { kind: memory }\nrules: []\n', 3, 'throttler_key', /states a limit, and no rule that applies to it takes one/],
      [hitsOnly, 3, 'throttler_expiry', /states a window, and no rule that applies to it takes one/],
      [hitsOnly, 101, 'throttler_key', /above the rule's bound 100/],
    ];
    for (const [config, limit, descriptor, detail] of cases) {
      const own = await startFloodgate(config);
      try {
        const s = new FloodgateThrottlerStorage({ url: own.url, deadline: 5000 });
        await assert.rejects(s.increment('k', 60_000, limit, 0, 'default'), (e: unknown) => {
          assert.ok(e instanceof ThrottlerTemplateError, String(e));
          assert.equal(e.descriptor, descriptor);
          assert.match(e.message, detail);
          assert.match(e.message, /examples\/throttler\.yaml/);
          assert.equal((e.cause as { status?: number }).status, 422);
          return true;
        });
      } finally {
        await own.stop();
      }
    }
  });

  it('the shipped examples/throttler.yaml serves it, with auth and the state_limits scope', async () => {
    const example = readFileSync(join(__dirname, '../../examples/throttler.yaml'), 'utf8');
    process.env.FG_JS_TEST_NEST_APP = 'nest-app-token-0123456789';
    const config = `store: { kind: memory }\n${example}\nauth:\n  clients:\n    - name: nest-app\n      token_env: FG_JS_TEST_NEST_APP\n      scopes: [check, report, state_limits]\n`;
    const own = await startFloodgate(config);
    try {
      const s = new FloodgateThrottlerStorage({ url: own.url, deadline: 5000, headers: { authorization: 'Bearer nest-app-token-0123456789' } });
      const hits = [];
      for (let i = 0; i < 3; i++) hits.push(await s.increment('k', 60_000, 2, 300_000, 'default'));
      assert.deepEqual(hits.map((h) => [h.totalHits, h.timeToExpire, h.isBlocked]), [[1, 60, false], [2, 60, false], [3, 60, true]]);
      assert.equal(hits[2]!.timeToBlockExpire, 300);
      const anonymous = new FloodgateThrottlerStorage({ url: own.url, deadline: 5000 });
      await assert.rejects(anonymous.increment('k', 60_000, 2, 0, 'default'), (e: unknown) => {
        assert.ok(e instanceof ThrottlerTemplateError);
        assert.equal((e.cause as { status?: number }).status, 401);
        return true;
      });
    } finally {
      await own.stop();
    }
  });

  it('examples/throttler.yaml has the built-in policy\'s template rules, word for word', () => {
    /** The two rules from `- name: throttler` on, without comments and blank lines. */
    const templates = (path: string): string[] => {
      const lines = readFileSync(path, 'utf8').split('\n').map((l) => l.replace(/\s+#.*$/, '').trimEnd());
      const start = lines.findIndex((l) => l.trim() === '- name: throttler');
      const end = lines.findIndex((l, i) => i > start && /^\S/.test(l));
      return lines.slice(start, end === -1 ? undefined : end).filter((l) => l.trim() !== '' && !l.trim().startsWith('#'));
    };
    const shipped = templates(join(__dirname, '../../examples/throttler.yaml'));
    const builtIn = templates(join(__dirname, '../../../../../../crates/floodgate-config/src/example.yaml'));
    assert.equal(shipped.length, 11, 'two rules, six and five lines');
    assert.deepEqual(shipped, builtIn);
  });

  it('fails open or closed when Floodgate is down', async () => {
    const own = await startFloodgate(null);
    await own.stop();
    const open = new FloodgateThrottlerStorage({ url: own.url, deadline: 200, failMode: 'open' });
    const closed = new FloodgateThrottlerStorage({ url: own.url, deadline: 200, failMode: 'closed' });
    assert.deepEqual(await open.increment('k', 60_000, 3, 60_000, 'default'), {
      totalHits: 0,
      timeToExpire: 60,
      isBlocked: false,
      timeToBlockExpire: 0,
    });
    const shut = await closed.increment('k', 60_000, 3, 60_000, 'default');
    assert.deepEqual([shut.isBlocked, shut.timeToBlockExpire], [true, 1]);
    assert.equal(closed.client.stats().failedClosed, 1);
  });
});

/** `ThrottlerStorage` of `@nestjs/throttler` 5, as it declares it. */
interface ThrottlerStorage5 {
  increment(key: string, ttl: number): Promise<{ totalHits: number; timeToExpire: number }>;
}

describe('FloodgateThrottlerStorage: the increment contract of @nestjs/throttler 5, with no server rules', () => {
  it('counts every hit for ttl, past any limit; timeToExpire as throttler 5 rounds it', async () => {
    const s: ThrottlerStorage5 = new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 5000 });
    const records = [];
    for (let i = 0; i < 4; i++) records.push(await s.increment('k5', 30_000));
    assert.deepEqual(records.map((r) => [r.totalHits, r.timeToExpire]), [[1, 30], [2, 30], [3, 30], [4, 30]]);
    await clock.advance(500);
    assert.deepEqual(await s.increment('k5', 30_000), { totalHits: 5, timeToExpire: 29, isBlocked: false, timeToBlockExpire: 0 });
    await clock.advance(29_000); // 500 ms of the period left: throttler 5 starts a new one
    assert.deepEqual(await s.increment('k5', 30_000), { totalHits: 6, timeToExpire: 30, isBlocked: false, timeToBlockExpire: 0 });
    await clock.advance(500); // the first four hits expire
    assert.equal((await s.increment('k5', 30_000)).totalHits, 3);
    assert.equal((await s.increment('k5-other', 30_000)).totalHits, 1, 'keys are counted apart');
    assert.equal((await s.increment('k5-short', 800)).timeToExpire, 0, 'a ttl under a second has 0 s left');
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

    @Get('login')
    @Throttle({ default: { limit: 2, ttl: 10_000, blockDuration: 120_000 } })
    login() {
      return 'in';
    }
  }

  function appModule() {
    @Module({
      imports: [
        ThrottlerModule.forRoot({
          throttlers: [{ ttl: 60_000, limit: 3 }],
          storage: new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 5000 }),
        }),
      ],
      controllers: [Api],
      providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
    })
    class AppModule {}
    return AppModule;
  }

  it('the throttler\'s headers and 429s; @Throttle() overrides and a penalty box; two instances share the count', async () => {
    const one = await startApp(appModule());
    const two = await startApp(appModule());
    try {
      const answers = [];
      for (let i = 0; i < 4; i++) {
        const [a] = await send(`${i % 2 === 0 ? one.url : two.url}/items`, 1);
        answers.push([a!.status, a!.headers.get('x-ratelimit-remaining') ?? a!.headers.get('retry-after')]);
      }
      assert.deepEqual(answers, [[200, '2'], [200, '1'], [200, '0'], [429, '60']]);
      const strict = await send(`${one.url}/strict`, 2);
      assert.deepEqual(strict.map((a) => a.status), [200, 429], '@Throttle() override: limit 1');

      const login = await send(`${one.url}/login`, 3);
      assert.deepEqual(login.map((a) => a.status), [200, 200, 429]);
      assert.equal(login[2]!.headers.get('retry-after'), '120', 'boxed for blockDuration, not ttl');
      await clock.advance(60_000);
      const [boxed] = await send(`${two.url}/login`, 1);
      assert.deepEqual([boxed!.status, boxed!.headers.get('retry-after')], [429, '60']);
      await clock.advance(60_000);
      const [free] = await send(`${two.url}/login`, 1);
      assert.deepEqual([free!.status, free!.headers.get('x-ratelimit-remaining')], [200, '1']);
    } finally {
      await one.close();
      await two.close();
    }
  });
});
