import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  FloodgateClient,
  FloodgateProblemError,
  FloodgateUnavailableError,
  type FailureEvent,
} from '@floodgate/client';
import { refusingUrl, startFloodgate, startSilentServer, type RunningFloodgate } from '@floodgate/testkit';

const CONFIG = `
store: { kind: memory }
headers: both
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 3
    window: 1h
  - name: tokens
    key: [tenant]
    algorithm: fixed_window
    limit: 100
    window: 1h
  - name: steps
    key: [session]
    algorithm: budget
    limit: 2
    ttl: 24h
`;

let server: RunningFloodgate;
before(async () => {
  server = await startFloodgate(CONFIG);
});
after(async () => {
  await server.stop();
});

describe('check, peek, report against the real server', () => {
  it('allows up to the limit, then denies with Retry-After and the rate-limit headers', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 1000 });
    for (let i = 0; i < 3; i++) {
      const d = await client.check({ user: 'alice' });
      assert.equal(d.allowed, true);
      assert.equal(d.status, 200);
      assert.equal(d.limits[0]?.name, 'per-user');
      assert.equal(d.limits[0]?.remaining, 2 - i);
      assert.equal(d.headers['x-ratelimit-remaining'], String(2 - i));
      assert.match(d.headers['ratelimit-policy'] ?? '', /"per-user";q=3;w=3600/);
      assert.equal(d.failure, null);
    }
    const denied = await client.check({ user: 'alice' });
    assert.equal(denied.allowed, false);
    assert.equal(denied.status, 429);
    assert.ok(denied.retryAfterMs !== null && denied.retryAfterMs > 0 && denied.retryAfterMs <= 3_600_000);
    assert.equal(denied.headers['retry-after'], String(denied.retryAfterSeconds));
    assert.equal(client.stats().failures.unreachable, 0);
  });

  it('peek consumes nothing', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 1000 });
    const first = await client.peek({ user: 'bob' });
    const second = await client.peek({ user: 'bob' });
    assert.equal(first.limits[0]?.remaining, second.limits[0]?.remaining);
    const checked = await client.check({ user: 'bob' });
    assert.equal(checked.limits[0]?.remaining, 2);
  });

  it('report consumes a cost after the fact and never denies', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 1000 });
    await client.check({ tenant: 't-report' }, { cost: 40 });
    const reported = await client.report({ tenant: 't-report' }, { cost: 90 });
    assert.equal(reported.allowed, true);
    const peeked = await client.peek({ tenant: 't-report' });
    assert.equal(peeked.allowed, false, 'the reported cost counts: 130 of 100 are used');
  });

  it('a request the server refuses as malformed throws its problem, whatever the fail mode', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 1000, failMode: 'open' });
    await assert.rejects(client.check({ tenant: 't1' }, { cost: 1000 }), (error: unknown) => {
      assert.ok(error instanceof FloodgateProblemError);
      assert.equal(error.status, 422);
      assert.equal(error.type, 'https://floodgate.dev/problems/never-allowed');
      return true;
    });
    await assert.rejects(client.check({ user: 'u' }, { cost: 0 }), /cost must be a whole number/);
  });

  it('session.step spends an agent step budget (a [session] rule)', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 1000 });
    const one = await client.session.step('s-1');
    const two = await client.session.step('s-1');
    const three = await client.session.step('s-1');
    assert.deepEqual([one.allowed, two.allowed, three.allowed], [true, true, false]);
    assert.deepEqual([one.remaining, two.remaining], [1, 0]);
    assert.ok(
      three.decision.retryAfterMs !== null && three.decision.retryAfterMs > 23 * 3_600_000,
      'a spent budget is gone a day after its first step',
    );
    assert.equal((await client.session.step('s-2')).allowed, true, 'another session has its own budget');
    await assert.rejects(client.session.step(''), /non-empty string/);
  });
});

describe('options are checked', () => {
  it('refuses a bad url, deadline or fail mode with what is wrong', () => {
    assert.throws(() => new FloodgateClient({ url: 'nope' }), /is not a URL/);
    assert.throws(() => new FloodgateClient({ url: 'ftp://x' }), /http:\/\/ or https:\/\//);
    assert.throws(() => new FloodgateClient({ url: server.url, deadline: 0 }), /deadline must be a positive/);
    assert.throws(
      () => new FloodgateClient({ url: server.url, failMode: 'maybe' as 'open' }),
      /failMode must be 'open' or 'closed'/,
    );
  });
});

describe('fail modes, with the service down or late', () => {
  it('fails open when the connection is refused, counted and reported', async () => {
    const events: FailureEvent[] = [];
    const client = new FloodgateClient({ url: await refusingUrl(), deadline: 200, onFailure: (e) => events.push(e) });
    const d = await client.check({ user: 'u' });
    assert.equal(d.allowed, true);
    // Decided on the refusal, not on the deadline (how soon is the bench's figure, not the test's).
    assert.deepEqual(d.failure, { reason: 'unreachable', mode: 'open' });
    assert.equal(client.stats().failedOpen, 1);
    assert.equal(client.stats().failures.unreachable, 1);
    assert.equal(events[0]?.reason, 'unreachable');
  });

  it('fails closed when the connection is refused: denied with a Retry-After', async () => {
    const client = new FloodgateClient({ url: await refusingUrl(), deadline: 200, failMode: 'closed' });
    const d = await client.check({ user: 'u' });
    assert.equal(d.allowed, false);
    assert.equal(d.retryAfterSeconds, 1);
    assert.equal(d.headers['retry-after'], '1');
    assert.equal(client.stats().failedClosed, 1);
  });

  it('decides at the deadline when the service accepts and never answers', async () => {
    const silent = await startSilentServer();
    try {
      const client = new FloodgateClient({ url: silent.url, deadline: 100, failMode: 'closed' });
      const started = performance.now();
      const d = await client.check({ user: 'u' });
      const took = performance.now() - started;
      // Not before the deadline (a timer never fires early); how late on a busy machine is not asserted.
      assert.ok(took >= 95, `decided at the deadline (${took.toFixed(0)} ms)`);
      assert.deepEqual(d.failure, { reason: 'deadline', mode: 'closed' });
      assert.equal(client.stats().failures.deadline, 1);
      const open = await client.check({ user: 'u' }, { failMode: 'open', deadline: 50 });
      assert.equal(open.allowed, true);
      assert.ok(silent.accepted() >= 1, 'the listener did accept the connection');
    } finally {
      await silent.close();
    }
  });

  it('fails over the real server stopped, then answers again once it is back', async () => {
    const own = await startFloodgate(CONFIG);
    try {
      const client = new FloodgateClient({ url: own.url, deadline: 300, failMode: 'closed' });
      assert.equal((await client.check({ user: 'carol' }, { deadline: 5000 })).status, 200);
      await own.stop();
      const down = await client.check({ user: 'carol' });
      assert.equal(down.allowed, false);
      assert.equal(down.failure?.mode, 'closed');
      await own.restart();
      assert.equal((await client.check({ user: 'carol' }, { deadline: 5000 })).status, 200);
    } finally {
      await own.stop();
    }
  });

  it('report throws when the service is down, with ECONNREFUSED when it surely did not run', async () => {
    const client = new FloodgateClient({ url: await refusingUrl(), deadline: 200 });
    await assert.rejects(client.report({ tenant: 't' }, { cost: 5 }), (error: unknown) => {
      assert.ok(error instanceof FloodgateUnavailableError);
      assert.equal(error.reason, 'unreachable');
      assert.equal(error.code, 'ECONNREFUSED');
      return true;
    });
    assert.equal(client.stats().failures.unreachable, 1);
    assert.equal(client.stats().failedOpen, 0, 'report has no fail mode');
  });
});
