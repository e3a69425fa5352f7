import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CircuitBreaker, FloodgateClient, FloodgateUnavailableError, type BreakerState } from '@floodgate/client';
import { startFloodgate, startSilentServer, type RunningFloodgate } from '@floodgate/testkit';

const CONFIG = `
store: { kind: memory }
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 100
    window: 1h
`;

const OPEN_FOR = 30_000;

/** Asks `probe` until it answers true; fails naming `what` after 30 s (a hang, not a slow machine). */
async function until(what: string, probe: () => boolean): Promise<void> {
  const guard = Date.now() + 30_000;
  while (!probe()) {
    if (Date.now() > guard) throw new Error(`${what}: not seen after 30 s`);
    await new Promise((ok) => setTimeout(ok, 20));
  }
}

// A server started first also loads Node's HTTP client, so that no call below pays for it.
let warm: RunningFloodgate;
before(async () => {
  warm = await startFloodgate(CONFIG);
});
after(async () => {
  await warm.stop();
});

describe('CircuitBreaker, on a clock moved by hand', () => {
  it('opens after failures in a row, refuses, lets one probe go, and a failed probe opens it again', () => {
    let now = 1_000;
    const moves: BreakerState[] = [];
    const breaker = new CircuitBreaker({ consecutiveFailures: 3, openForMs: 5_000 }, () => now, (to) => moves.push(to));
    const call = (): number => {
      const admission = breaker.admit();
      assert.equal(admission.kind, 'call');
      return admission.kind === 'call' ? admission.sent : 0;
    };
    breaker.record(true, call());
    breaker.record(true, call());
    breaker.record(false, call());
    assert.equal(breaker.state, 'closed', 'a success ends the streak');
    for (let i = 0; i < 3; i++) breaker.record(true, call());
    assert.equal(breaker.state, 'open');
    assert.equal(breaker.admit().kind, 'reject');
    assert.equal(breaker.openRemainingMs(), 5_000);

    now += 5_000;
    assert.equal(breaker.admit().kind, 'probe');
    assert.equal(breaker.admit().kind, 'reject', 'one probe at a time');
    breaker.finishProbe(false);
    assert.equal(breaker.state, 'open', 'a failed probe opens it again');
    now += 5_000;
    assert.equal(breaker.admit().kind, 'probe');
    breaker.finishProbe(true);
    assert.equal(breaker.state, 'closed');
    assert.deepEqual(moves, ['open', 'half_open', 'open', 'half_open', 'closed']);
  });

  it('counts as one the failures of calls sent before the streak began, and opens on the failure rate', () => {
    let now = 0;
    const breaker = new CircuitBreaker({ consecutiveFailures: 3, minCalls: 4, failureRate: 0.5 }, () => now);
    // Three calls in flight together, all failing at once: one failure of the streak.
    const sent = [breaker.admit(), breaker.admit(), breaker.admit()];
    now += 100;
    for (const admission of sent) breaker.record(true, admission.kind === 'call' ? admission.sent : 0);
    assert.equal(breaker.state, 'closed');
    // A failure of a call sent since: a streak of 2, but 4 of the window's 4 calls failed.
    breaker.record(true, now);
    assert.equal(breaker.state, 'open', 'the failure rate');
  });

  it('frees half-open for the next call when a probe is abandoned or outlives its timeout', () => {
    let now = 0;
    const breaker = new CircuitBreaker({ consecutiveFailures: 1, openForMs: 1_000, probeTimeoutMs: 500 }, () => now);
    breaker.record(true, now);
    now += 1_000;
    assert.equal(breaker.admit().kind, 'probe');
    breaker.abandonProbe();
    assert.equal(breaker.admit().kind, 'probe', 'abandoned: the next call probes');
    now += 499;
    assert.equal(breaker.admit().kind, 'reject');
    now += 1;
    assert.equal(breaker.admit().kind, 'probe', 'past the probe timeout');
  });

  it('refuses settings out of range, naming them', () => {
    assert.throws(() => new CircuitBreaker({ consecutiveFailures: 0 }), /breaker\.consecutiveFailures must be a whole number ≥ 1, got 0/);
    assert.throws(() => new CircuitBreaker({ failureRate: 0 }), /breaker\.failureRate/);
    assert.throws(() => new CircuitBreaker({ failureRate: 1.5 }), /breaker\.failureRate/);
    assert.throws(() => new CircuitBreaker({ minCalls: 0 }), /breaker\.minCalls/);
    assert.throws(() => new CircuitBreaker({ openForMs: 0 }), /breaker\.openForMs/);
    assert.throws(() => new CircuitBreaker({ windowMs: -1 }), /breaker\.windowMs/);
    assert.throws(
      () => new FloodgateClient({ url: 'http://127.0.0.1:1', breaker: { consecutiveFailures: 0 } }),
      /breaker\.consecutiveFailures/,
    );
  });
});

describe("the client's breaker against a real outage", () => {
  it('a stopped server opens it; the fail mode then decides unsent until a probe finds the server back', async () => {
    const own = await startFloodgate(CONFIG);
    let now = 0;
    try {
      // A deadline far longer than a refused connection takes: the refusal ends each call.
      const client = new FloodgateClient({
        url: own.url,
        deadline: 5_000,
        failMode: 'closed',
        breaker: { consecutiveFailures: 3, openForMs: OPEN_FOR },
        clock: () => now,
      });
      assert.equal((await client.check({ user: 'b' })).status, 200);
      await own.stop();
      for (let n = 1; n <= 3; n++) {
        const d = await client.check({ user: 'b' });
        assert.deepEqual(d.failure, { reason: 'unreachable', mode: 'closed' }, `call ${n}: sent, refused`);
      }
      assert.equal(client.breakerState, 'open', '3 failures in a row');
      const sent = client.stats().calls;
      assert.equal(sent, 4);

      // Open: the fail mode decides at once, nothing is sent.
      const closed = await client.check({ user: 'b' });
      assert.equal(closed.allowed, false);
      assert.equal(closed.status, 0);
      assert.deepEqual(closed.failure, { reason: 'breaker_open', mode: 'closed' });
      assert.equal(closed.retryAfterSeconds, 1);
      const open = await client.check({ user: 'b' }, { failMode: 'open' });
      assert.equal(open.allowed, true);
      assert.deepEqual(open.failure, { reason: 'breaker_open', mode: 'open' });
      // A call without a fail mode throws, and is not retried: the breaker decides when to try again.
      let attempts = 0;
      await assert.rejects(
        client.retry(
          () => {
            attempts += 1;
            return client.report({ user: 'b' });
          },
          { backoff: { base: 1 } },
        ),
        (error: unknown) => {
          assert.ok(error instanceof FloodgateUnavailableError);
          assert.equal(error.reason, 'breaker_open');
          assert.match(error.message, /circuit breaker is open/);
          return true;
        },
      );
      assert.equal(attempts, 1);
      const stats = client.stats();
      assert.equal(stats.calls, sent, 'nothing sent while open');
      assert.equal(stats.failures.breaker_open, 3);
      assert.equal(stats.failures.unreachable, 3);
      assert.deepEqual([stats.failedClosed, stats.failedOpen, stats.breakerOpened], [4, 1, 1]);

      // The server is back on its port; the breaker sends nothing until its open time is over.
      await own.restart();
      assert.deepEqual((await client.check({ user: 'b' })).failure, { reason: 'breaker_open', mode: 'closed' });
      assert.equal(client.stats().calls, sent);
      now += OPEN_FOR;
      const probe = await client.check({ user: 'b' });
      assert.deepEqual([probe.status, probe.failure], [200, null], 'the probe, answered by the server');
      assert.equal(client.breakerState, 'closed');
      assert.equal((await client.check({ user: 'b' })).status, 200, 'closed: calls are sent again');
      const after = client.stats();
      assert.deepEqual([after.breakerOpened, after.breakerHalfOpened, after.breakerClosed], [1, 1, 1]);
      assert.equal(after.calls, sent + 2);
    } finally {
      await own.stop();
    }
  });

  it('a black-holed server opens it by deadlines, and one probe goes at a time', async () => {
    const silent = await startSilentServer();
    const port = Number(new URL(silent.url).port);
    let back: RunningFloodgate | undefined;
    let now = 0;
    try {
      const client = new FloodgateClient({
        url: silent.url,
        deadline: 1_000,
        breaker: { consecutiveFailures: 3, openForMs: OPEN_FOR },
        clock: () => now,
      });
      // Nothing answers: each call ends at its deadline, a failure.
      for (let n = 1; n <= 3; n++) {
        const d = await client.check({ user: 'h' });
        assert.equal(d.allowed, true);
        assert.deepEqual(d.failure, { reason: 'deadline', mode: 'open' }, `call ${n}`);
      }
      assert.equal(client.breakerState, 'open');
      await until('the three calls\' requests', () => silent.requests() === 3);

      // Open: decided at once, and the black hole sees nothing more.
      const d = await client.check({ user: 'h' });
      assert.deepEqual(d.failure, { reason: 'breaker_open', mode: 'open' });
      assert.equal(client.stats().calls, 3);
      assert.equal(silent.requests(), 3);

      // Half-open: one probe goes; a call meanwhile is decided at once. The probe meets the hole
      // and the breaker opens again.
      now += OPEN_FOR;
      const probe = client.check({ user: 'h' });
      await until('the probe\'s request', () => silent.requests() === 4);
      const meanwhile = await client.check({ user: 'h' });
      assert.deepEqual(meanwhile.failure, { reason: 'breaker_open', mode: 'open' });
      assert.deepEqual((await probe).failure, { reason: 'deadline', mode: 'open' });
      assert.equal(client.breakerState, 'open', 'a failed probe opens it again');
      assert.equal(silent.requests(), 4, 'one probe, no other call');

      // The hole is gone and the server listens on its port: the next probe closes the breaker.
      await silent.close();
      back = await startFloodgate(CONFIG, { port });
      now += OPEN_FOR;
      const closing = await client.check({ user: 'h' }, { deadline: 10_000 });
      assert.deepEqual([closing.status, closing.failure], [200, null]);
      assert.equal(client.breakerState, 'closed');
      const stats = client.stats();
      assert.deepEqual([stats.breakerOpened, stats.breakerHalfOpened, stats.breakerClosed], [2, 2, 1]);
      assert.deepEqual([stats.calls, stats.failures.deadline, stats.failures.breaker_open], [5, 4, 2]);
      assert.equal(stats.failedOpen, 6);
    } finally {
      await silent.close().catch(() => {});
      await back?.stop();
    }
  });
});
