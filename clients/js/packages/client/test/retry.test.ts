import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import {
  FloodgateClient,
  RateLimitedError,
  TimeoutError,
  retry,
  retryAfterOf,
  timeouts,
  withTimeout,
} from '@floodgate/client';
import { refusingUrl, startFloodgate, type RunningFloodgate } from '@floodgate/testkit';

let server: RunningFloodgate;
before(async () => {
  server = await startFloodgate(`
store: { kind: memory }
rules:
  - name: per-second
    key: [user]
    algorithm: fixed_window
    limit: 1
    window: 1s
`);
});
after(async () => {
  await server.stop();
});

describe('retry', () => {
  it('waits out a real 429 from Floodgate for at least its Retry-After, then succeeds', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 1000 });
    await client.check({ user: 'r1' });
    const delays: number[] = [];
    const started = performance.now();
    const decision = await retry(
      async () => {
        const d = await client.check({ user: 'r1' });
        if (!d.allowed) throw new RateLimitedError(d.retryAfterMs ?? 0);
        return d;
      },
      { attempts: 2, backoff: { base: 10 }, onRetry: ({ delayMs }) => delays.push(delayMs) },
    );
    assert.equal(decision.allowed, true);
    assert.equal(delays.length, 1);
    assert.ok((delays[0] ?? 0) >= 1, 'waited the server\'s retry_after_ms');
    assert.ok(performance.now() - started >= (delays[0] ?? 0));
  });

  it('retries a refused connection (it surely did not run) at most `attempts` times', async () => {
    const client = new FloodgateClient({ url: await refusingUrl(), deadline: 200 });
    let calls = 0;
    await assert.rejects(
      retry(
        () => {
          calls += 1;
          return client.report({ user: 'u' });
        },
        { attempts: 2, backoff: { base: 1 } },
      ),
      { code: 'ECONNREFUSED' },
    );
    assert.equal(calls, 3, 'the first call and two retries');
  });

  it('recovers when the service comes back between attempts', async () => {
    const own = await startFloodgate('store: { kind: memory }\nrules: []\n');
    await own.stop();
    const client = new FloodgateClient({ url: own.url, deadline: 500 });
    let calls = 0;
    const answer = await retry(
      async () => {
        calls += 1;
        if (calls === 2) await own.restart();
        return client.report({ user: 'u' });
      },
      { attempts: 2, backoff: { base: 1 } },
    );
    assert.equal(answer.status, 200);
    assert.equal(calls, 2, 'refused once, then answered');
    await own.stop();
  });

  it('never retries a timeout, unless the call is idempotent', async () => {
    let calls = 0;
    const late = () => {
      calls += 1;
      return withTimeout(new Promise<never>(() => {}), 20);
    };
    await assert.rejects(retry(late, { attempts: 2, backoff: { base: 1 } }), TimeoutError);
    assert.equal(calls, 1);
    calls = 0;
    await assert.rejects(retry(late, { attempts: 2, backoff: { base: 1 }, idempotent: true }), TimeoutError);
    assert.equal(calls, 3);
  });

  it('never retries a deadline miss of the client (outcome unknown)', async () => {
    const hung: Server = createServer(() => {});
    await new Promise<void>((ok) => hung.listen(0, '127.0.0.1', ok));
    const port = (hung.address() as { port: number }).port;
    const client = new FloodgateClient({ url: `http://127.0.0.1:${port}`, deadline: 30 });
    let calls = 0;
    await assert.rejects(
      retry(() => {
        calls += 1;
        return client.report({ user: 'u' });
      }),
      { code: 'ETIMEDOUT' },
    );
    assert.equal(calls, 1);
    hung.closeAllConnections();
    hung.close();
  });

  it('throws other errors at once, and a Retry-After above maxRetryAfter', async () => {
    let calls = 0;
    await assert.rejects(
      retry(async () => {
        calls += 1;
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(calls, 1);
    calls = 0;
    await assert.rejects(
      retry(
        async () => {
          calls += 1;
          throw new RateLimitedError(120_000);
        },
        { maxRetryAfter: 60_000 },
      ),
      RateLimitedError,
    );
    assert.equal(calls, 1);
  });

  it('full jitter: each wait is random below the exponential backoff', async () => {
    const delays: number[] = [];
    const draws = [0.5, 0.25];
    await assert.rejects(
      retry(
        async () => {
          throw Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
        },
        {
          attempts: 2,
          backoff: { base: 8, max: 100 },
          random: () => draws.shift() ?? 0,
          onRetry: ({ delayMs }) => delays.push(delayMs),
        },
      ),
    );
    assert.deepEqual(delays, [4, 4], '0.5 × 8, then 0.25 × 16');
  });

  it('reads Retry-After from an error\'s headers (seconds or a date) and a 429 status', async () => {
    assert.equal(retryAfterOf({ status: 429, headers: { 'Retry-After': '3' } }), 3000);
    assert.equal(retryAfterOf({ response: { status: 429, headers: new Headers({ 'retry-after': '2' }) } }), 2000);
    const now = Date.parse('2026-12-02T10:00:00Z');
    assert.equal(retryAfterOf({ headers: { 'retry-after': 'Wed, 02 Dec 2026 10:00:05 GMT' } }, now), 5000);
    let calls = 0;
    const started = performance.now();
    await retry(
      async () => {
        calls += 1;
        if (calls === 1) throw { status: 429, headers: { 'retry-after': '1' } };
        return 'ok';
      },
      { backoff: { base: 1 } },
    );
    assert.ok(performance.now() - started >= 990, 'waited the Retry-After second');
  });

  it('refuses bad options', async () => {
    await assert.rejects(retry(async () => 1, { attempts: -1 }), /attempts must be/);
    await assert.rejects(retry(async () => 1, { jitter: 'half' as 'full' }), /jitter must be/);
  });
});

describe('withTimeout', () => {
  it('has the named tiers 5 s / 30 s / 120 s, and tiers of your own', async () => {
    await assert.rejects(withTimeout(new Promise(() => {}), 10), (e: unknown) => {
      assert.ok(e instanceof TimeoutError);
      assert.equal(e.tier, 'custom');
      return true;
    });
    const quick = timeouts({ fast: 15 });
    const started = performance.now();
    await assert.rejects(quick(new Promise(() => {}), 'fast'), (e: unknown) => {
      assert.ok(e instanceof TimeoutError);
      assert.equal(e.tier, 'fast');
      assert.equal(e.timeoutMs, 15);
      return true;
    });
    assert.ok(performance.now() - started < 1000);
    assert.equal(await withTimeout(Promise.resolve(7), 'fast'), 7);
    assert.throws(() => withTimeout(Promise.resolve(1), 'slowest' as 'fast'), /unknown tier "slowest"/);
    assert.throws(() => timeouts({ quick: 1 } as never), /unknown tier "quick"/);
  });

  it('aborts the work it was given as a function', async () => {
    let aborted = false;
    await assert.rejects(
      withTimeout(
        (signal) =>
          new Promise((_, reject) => {
            signal.addEventListener('abort', () => {
              aborted = true;
              reject(signal.reason);
            });
          }),
        10,
      ),
      TimeoutError,
    );
    assert.equal(aborted, true);
  });
});
