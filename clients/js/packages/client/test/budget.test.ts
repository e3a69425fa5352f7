import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { describe, it } from 'node:test';
import { FloodgateClient, FloodgateUnavailableError, RetryBudget, type RetryBudgetOptions } from '@floodgate/client';
import { refusingUrl } from '@floodgate/testkit';

/** Sends `calls` first attempts, each followed by as many retries as the budget grants (at most `perCall`). */
function drive(budget: RetryBudget, calls: number, perCall: number): number {
  let granted = 0;
  for (let c = 0; c < calls; c++) {
    budget.deposit();
    for (let r = 0; r < perCall && budget.withdraw(); r++) {
      granted += 1;
      budget.deposit();
    }
  }
  return granted;
}

describe('RetryBudget, on a clock moved by hand', () => {
  it('grants retries of at most the ratio of the first calls, plus the floor', () => {
    const budget = new RetryBudget({ ratio: 0.1, minPerSecond: 0 }, () => 0);
    assert.equal(budget.withdraw(), false, 'no calls, no floor: nothing to retry on');
    assert.equal(drive(budget, 9, 2), 0, '9 calls: 0.9 of a retry');
    assert.equal(drive(budget, 1, 2), 1, 'the 10th call earns one');
    assert.equal(drive(budget, 90, 2), 9, '100 calls: 10 retries, the retries themselves earning none');
    const quiet = new RetryBudget({ ratio: 0.1, minPerSecond: 1, windowMs: 10_000 }, () => 0);
    assert.equal(drive(quiet, 1, 100), 10, '1 a second over 10 s, with no traffic to speak of');
  });

  it('forgets calls and retries older than the window', () => {
    let now = 1_000_000;
    const budget = new RetryBudget({ ratio: 0.5, minPerSecond: 0, windowMs: 10_000 }, () => now);
    assert.equal(drive(budget, 4, 1), 2);
    assert.equal(budget.withdraw(), false);
    now += 9_000;
    assert.equal(budget.withdraw(), false, 'still within the window: spent');
    now += 1_000;
    assert.equal(budget.withdraw(), false, 'gone: nothing to retry on');
    assert.equal(drive(budget, 2, 1), 1, 'earned anew');
  });

  it('refuses settings out of range, naming them', () => {
    assert.throws(() => new RetryBudget({ ratio: 1.5 }), /retryBudget\.ratio must be from 0 to 1/);
    assert.throws(() => new RetryBudget({ ratio: -0.1 }), /retryBudget\.ratio/);
    assert.throws(() => new RetryBudget({ minPerSecond: -1 }), /retryBudget\.minPerSecond/);
    assert.throws(() => new RetryBudget({ windowMs: 0 }), /retryBudget\.windowMs/);
    assert.throws(() => new FloodgateClient({ url: 'http://127.0.0.1:1', retryBudget: { ratio: 2 } }), /retryBudget\.ratio/);
  });
});

/** 10 % of the calls, plus 1 a second over a 2 s window: 2 retries with no traffic at all. */
const BUDGET: RetryBudgetOptions = { ratio: 0.1, minPerSecond: 1, windowMs: 2_000 };
/** Calls made in each test, each of which would retry twice. */
const CALLS = 30;
/** What the budget grants over them: the floor of 2, then one per 10 calls. */
const GRANTED = 2 + CALLS / 10;

function client(url: string): FloodgateClient {
  // The budget alone (no breaker that would stop the calls first), its window on a still clock.
  return new FloodgateClient({ url, deadline: 5_000, breaker: false, retryBudget: BUDGET, clock: () => 0 });
}

describe("the client's retry budget against a real outage", () => {
  it('stops the retries of calls to a stopped server at the budget', async () => {
    const floodgate = client(await refusingUrl());
    let attempts = 0;
    for (let c = 0; c < CALLS; c++) {
      await assert.rejects(
        floodgate.retry(
          () => {
            attempts += 1;
            return floodgate.report({ user: 'r' });
          },
          { attempts: 2, backoff: { base: 1 } },
        ),
        { code: 'ECONNREFUSED' },
      );
    }
    assert.equal(attempts, CALLS + GRANTED, 'without the budget: 3 attempts a call, 90 in all');
    const stats = floodgate.stats();
    assert.equal(stats.calls, CALLS + GRANTED);
    assert.equal(stats.retries, GRANTED);
    // Every call asked once and was refused, but the first (granted twice, then out of attempts)
    // and the 10th, 20th, 30th (granted once, then refused).
    assert.equal(stats.retriesRefused, CALLS - 1);
  });

  it('stops the retries of commits answered 503 at the budget, counted by the server', async () => {
    let answered = 0;
    const server = createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        answered += 1;
        response.writeHead(503, { 'content-type': 'application/problem+json' });
        response.end(
          JSON.stringify({
            type: 'https://floodgate.dev/problems/store-unavailable',
            title: 'Store Unavailable',
            status: 503,
            detail: 'the store does not answer',
          }),
        );
      });
    });
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    const address = server.address();
    assert.ok(address !== null && typeof address === 'object');
    try {
      const floodgate = client(`http://127.0.0.1:${address.port}`);
      for (let c = 0; c < CALLS; c++) {
        await assert.rejects(floodgate.commit('0123456789abcdef0123456789abcdef', { tokens: 1 }), (error: unknown) => {
          assert.ok(error instanceof FloodgateUnavailableError);
          assert.equal(error.reason, 'server_error');
          return true;
        });
      }
      assert.equal(answered, CALLS + GRANTED, 'requests the server answered; without the budget, 90');
      assert.equal(floodgate.stats().retries, GRANTED);
      assert.equal(floodgate.stats().failures.server_error, CALLS);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((ok) => server.close(() => ok()));
    }
  });
});
