import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FloodgateClient, FloodgateProblemError, StatedLimitError, type Stated } from '@floodgate/client';
import { startFloodgate, type RunningFloodgate } from '@floodgate/testkit';

const T0 = 1_800_000_000_000;

// The built-in policy (no --config) has the template rule `throttler`: key [throttler_key], a
// sliding log whose limit, window and block duration every request states (limit ≤ 100000).
let server: RunningFloodgate;
before(async () => {
  server = await startFloodgate(null, { manualClockMs: T0 });
});
after(async () => {
  await server.stop();
});

const clock = () => {
  if (server.clock === null) throw new Error('started without a manual clock');
  return server.clock;
};

describe('stated limits against the real server', () => {
  it('a check states its limit, window and penalty box; the box refuses for exactly its length', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 5000 });
    const stated: Stated = { limit: 2, windowMs: 10_000, blockForMs: 30_000 };
    const key = { throttler_key: 'stated-box' };
    const one = await client.check(key, { stated });
    const two = await client.check(key, { stated });
    assert.deepEqual([one.allowed, two.allowed], [true, true]);
    assert.deepEqual([one.limits[0]?.limit, one.limits[0]?.remaining, two.limits[0]?.remaining], [2, 1, 0]);
    const boxed = await client.check(key, { stated });
    assert.deepEqual([boxed.allowed, boxed.status, boxed.retryAfterMs], [false, 429, 30_000]);
    const peeked = await client.peek(key, { stated });
    assert.deepEqual([peeked.allowed, peeked.retryAfterMs], [false, 30_000], 'a peek sees the box and moves nothing');
    await clock().advance(29_999);
    assert.equal((await client.check(key, { stated })).retryAfterMs, 1, 'still boxed a millisecond before its end');
    await clock().advance(1);
    const afresh = await client.check(key, { stated });
    assert.deepEqual([afresh.allowed, afresh.limits[0]?.remaining], [true, 1], 'the box ended and the count starts afresh');
  });

  it('two statements for one key count apart; a report counts past the limit and never denies', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 5000 });
    const key = { throttler_key: 'stated-two' };
    await client.check(key, { stated: { limit: 1, windowMs: 60_000 } });
    const other = await client.check(key, { stated: { limit: 5, windowMs: 60_000 } });
    assert.deepEqual([other.allowed, other.limits[0]?.remaining], [true, 4], 'limit 5 has its own counter');
    const reported = await client.report(key, { stated: { limit: 1, windowMs: 60_000 } });
    assert.equal(reported.allowed, true);
    assert.equal((await client.peek(key, { stated: { limit: 1, windowMs: 60_000 } })).allowed, false);
  });

  it('a value above the rule\'s bound is the server\'s 422, naming the field and the bound', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 5000, failMode: 'open' });
    await assert.rejects(client.check({ throttler_key: 'k' }, { stated: { limit: 100_001, windowMs: 1000 } }), (error: unknown) => {
      assert.ok(error instanceof FloodgateProblemError);
      assert.equal(error.status, 422);
      assert.match(error.detail, /limit/);
      assert.match(error.detail, /100000/);
      return true;
    });
  });

  it('refuses, before sending, anything but whole numbers in range: a StatedLimitError naming the field', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 5000 });
    const bad: [Stated, string, RegExp][] = [
      [{ limit: 0 }, 'limit', /stated\.limit must be a whole number ≥ 1, got 0/],
      [{ limit: 2.5 }, 'limit', /stated\.limit must be a whole number ≥ 1, got 2\.5/],
      [{ windowMs: 0 }, 'windowMs', /stated\.windowMs must be a whole number ≥ 1/],
      [{ windowMs: Number.NaN }, 'windowMs', /got NaN/],
      [{ windowMs: Infinity }, 'windowMs', /got Infinity/],
      [{ blockForMs: -1 }, 'blockForMs', /stated\.blockForMs must be a whole number ≥ 0, got -1/],
      [{ limit: '5' as unknown as number }, 'limit', /got "5"/],
      [{ window: 1000 } as Stated, 'window', /stated\.window is not a field of stated/],
      [{ toString: 1 } as unknown as Stated, 'toString', /is not a field/],
    ];
    for (const [stated, field, message] of bad) {
      for (const call of [
        () => client.check({ throttler_key: 'k' }, { stated }),
        () => client.peek({ throttler_key: 'k' }, { stated }),
        () => client.report({ throttler_key: 'k' }, { stated }),
      ]) {
        await assert.rejects(call, (error: unknown) => {
          assert.ok(error instanceof StatedLimitError, `${JSON.stringify(stated)}: ${String(error)}`);
          assert.ok(error instanceof RangeError);
          assert.equal(error.field, field);
          assert.match(error.message, message);
          return true;
        });
      }
    }
    assert.equal(client.stats().calls, 0, 'nothing was sent');
    const zeroBox = await client.check({ throttler_key: 'k-zero-box' }, { stated: { limit: 1, windowMs: 1000, blockForMs: 0 } });
    assert.equal(zeroBox.allowed, true, 'a block of 0 is no box, and allowed');
  });
});

describe('stated limits with auth clients', () => {
  it('need the state_limits scope: a 403 problem without it', async () => {
    process.env.FG_JS_TEST_CHECKER = 'checker-token-0123456789';
    process.env.FG_JS_TEST_STATER = 'stater-token-0123456789ab';
    const own = await startFloodgate(`
store: { kind: memory }
descriptors: [throttler_key]
auth:
  clients:
    - name: checker
      token_env: FG_JS_TEST_CHECKER
      scopes: [check]
    - name: stater
      token_env: FG_JS_TEST_STATER
      scopes: [check, state_limits]
rules:
  - name: throttle
    key: [throttler_key]
    algorithm: sliding_log
    limit: { from: request, max: 10 }
    window: { from: request, max: 1h }
`);
    try {
      const stated = { limit: 3, windowMs: 60_000 };
      const checker = new FloodgateClient({ url: own.url, deadline: 5000, headers: { authorization: 'Bearer checker-token-0123456789' } });
      await assert.rejects(checker.check({ throttler_key: 'k' }, { stated }), (error: unknown) => {
        assert.ok(error instanceof FloodgateProblemError);
        assert.equal(error.status, 403);
        assert.match(error.detail, /state_limits/);
        return true;
      });
      const stater = new FloodgateClient({ url: own.url, deadline: 5000, headers: { authorization: 'Bearer stater-token-0123456789ab' } });
      const allowed = await stater.check({ throttler_key: 'k' }, { stated });
      assert.deepEqual([allowed.allowed, allowed.limits[0]?.limit, allowed.limits[0]?.remaining], [true, 3, 2]);
    } finally {
      await own.stop();
    }
  });
});
