import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { createServer, type Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import {
  FloodgateClient,
  FloodgateProblemError,
  FloodgateUnavailableError,
  ReservationNotFoundError,
  ReservationSettledError,
  releaseOnEnd,
} from '@floodgate/client';
import { HANG_GUARD, refusingUrl, startFloodgate, watchReleases, type RunningFloodgate } from '@floodgate/testkit';

const CONFIG = `
store: { kind: memory }
descriptors: [stream]
rules:
  - name: tenant-requests
    key: [tenant]
    algorithm: fixed_window
    limit: 100
    window: 1h
  - name: tenant-tokens
    key: [tenant]
    algorithm: fixed_window
    limit: 10000
    window: 1h
    cost: tokens
  - name: streams
    key: [stream]
    algorithm: concurrency
    limit: 1
    lease: 1h
`;

let server: RunningFloodgate;
let client: FloodgateClient;
before(async () => {
  server = await startFloodgate(CONFIG);
  client = new FloodgateClient({ url: server.url, deadline: 2000 });
});
after(async () => {
  await server.stop();
});

async function used(rule: string, tenant: string): Promise<number> {
  return (await client.usage(rule, { tenant })).used;
}

describe('reserve, commit, release and usage against the real server', () => {
  it('costs count each dimension in its own rule, on check, peek and report', async () => {
    const d = await client.check({ tenant: 'costs' }, { costs: { requests: 1, tokens: 1200 } });
    assert.equal(d.allowed, true);
    assert.equal(await used('tenant-requests', 'costs'), 1);
    assert.equal(await used('tenant-tokens', 'costs'), 1200);
    const peeked = await client.peek({ tenant: 'costs' }, { costs: { requests: 1, tokens: 9000 } });
    assert.equal(peeked.allowed, false, '1200 + 9000 tokens exceed 10 000');
    assert.equal(await used('tenant-tokens', 'costs'), 1200, 'a peek consumes nothing');
    await client.report({ tenant: 'costs' }, { costs: { tokens: 300 } });
    assert.equal(await used('tenant-tokens', 'costs'), 1500);
    assert.equal(await used('tenant-requests', 'costs'), 1);
    await assert.rejects(client.check({ tenant: 'x' }, { cost: 1, costs: { requests: 1 } }), /cost or costs, not both/);
    await assert.rejects(client.check({ tenant: 'x' }, { costs: { tokens: -1 } }), /costs\.tokens must be a whole number/);
  });

  it('reserve holds the estimate; commit refunds what was reserved beyond the actual', async () => {
    const r = await client.reserve({ tenant: 'commit' }, { costs: { requests: 1, tokens: 4300 }, ttl: '2m' });
    assert.equal(r.allowed, true);
    assert.match(r.reservation ?? '', /^[0-9a-f]{32}$/);
    assert.ok(r.expiresAtMs !== null && r.expiresAtMs > Date.now() && r.expiresAtMs <= Date.now() + 121_000);
    assert.equal(await used('tenant-tokens', 'commit'), 4300, 'the estimate is held');
    const settled = await client.commit(r.reservation!, { tokens: 812 });
    assert.equal(settled.state, 'committed');
    assert.deepEqual(settled.refunded, { tokens: 3488 });
    assert.deepEqual(settled.charged, { requests: 1, tokens: 812 });
    assert.equal(await used('tenant-tokens', 'commit'), 812, 'the over-reservation is given back');
    assert.equal(await used('tenant-requests', 'commit'), 1, 'a dimension left out stays as reserved');

    const again = await client.commit(r.reservation!, { tokens: 812 });
    assert.deepEqual(again, settled, 'the same commit answers the same');
    assert.equal(await used('tenant-tokens', 'commit'), 812, 'and charges nothing more');
  });

  it('release gives everything back', async () => {
    const r = await client.reserve({ tenant: 'release' }, { costs: { requests: 1, tokens: 5000 } });
    assert.equal(await used('tenant-tokens', 'release'), 5000);
    const released = await client.release(r.reservation!);
    assert.equal(released.state, 'released');
    assert.equal(await used('tenant-tokens', 'release'), 0);
    assert.equal(await used('tenant-requests', 'release'), 0);
    assert.deepEqual(await client.release(r.reservation!), released, 'a release again answers the same');
  });

  it('a denied reserve holds nothing and has no id', async () => {
    const r = await client.reserve({ tenant: 'denied' }, { costs: { requests: 1, tokens: 9000 } });
    assert.equal(r.allowed, true);
    const denied = await client.reserve({ tenant: 'denied' }, { costs: { requests: 1, tokens: 2000 } });
    assert.equal(denied.allowed, false);
    assert.equal(denied.status, 429);
    assert.equal(denied.reservation, null);
    assert.ok(denied.retryAfterMs !== null && denied.retryAfterMs > 0);
    assert.equal(await used('tenant-tokens', 'denied'), 9000);
  });

  it('404 for an unknown id, 409 for one settled otherwise, as typed errors', async () => {
    await assert.rejects(client.commit('0123456789abcdef0123456789abcdef', { tokens: 1 }), (error: unknown) => {
      assert.ok(error instanceof ReservationNotFoundError);
      assert.ok(error instanceof FloodgateProblemError);
      assert.equal(error.status, 404);
      return true;
    });
    await assert.rejects(client.release('0123456789abcdef0123456789abcdef'), ReservationNotFoundError);
    const r = await client.reserve({ tenant: 'conflict' }, { costs: { requests: 1, tokens: 100 } });
    await client.commit(r.reservation!, { tokens: 50 });
    await assert.rejects(client.commit(r.reservation!, { tokens: 60 }), (error: unknown) => {
      assert.ok(error instanceof ReservationSettledError);
      assert.equal(error.status, 409);
      assert.equal(error.type, 'https://floodgate.dev/problems/reservation-settled');
      return true;
    });
    await assert.rejects(client.release(r.reservation!), ReservationSettledError, 'a release after a commit');
    await assert.rejects(client.commit(''), /non-empty string/);
  });

  it("a check that took concurrency permits carries the id that release frees them with", async () => {
    const first = await client.check({ stream: 's1' });
    assert.equal(first.allowed, true);
    assert.match(first.reservation ?? '', /^[0-9a-f]{32}$/);
    assert.equal((await client.check({ stream: 's1' })).allowed, false, 'the one permit is held');
    const released = await client.release(first.reservation!);
    assert.deepEqual(released.refunded, {});
    assert.equal((await client.check({ stream: 's1' })).allowed, true, 'the permit is free again');
  });

  it('usage reads a counter without consuming; an unknown rule or a missing descriptor is a problem', async () => {
    await client.check({ tenant: 'usage' }, { costs: { requests: 3, tokens: 10 } });
    const u = await client.usage('tenant-requests', { tenant: 'usage' });
    assert.deepEqual([u.rule, u.limit, u.used, u.remaining], ['tenant-requests', 100, 3, 97]);
    assert.ok(u.periodStart !== null && u.periodEnd !== null && u.periodEnd - u.periodStart === 3_600_000);
    assert.equal(u.previous, null, 'a window keeps no previous period');
    assert.equal((await client.usage('tenant-requests', { tenant: 'usage' })).used, 3);
    await assert.rejects(client.usage('nope', { tenant: 'usage' }), (e: unknown) => e instanceof FloodgateProblemError && e.status === 404);
    await assert.rejects(client.usage('tenant-requests', {}), (e: unknown) => e instanceof FloodgateProblemError && e.status === 422);
  });
});

describe('releaseOnEnd: a check\'s permits freed when the response ends', () => {
  /** A response: an emitter of `finish`, `close` and `error`, as Node's `ServerResponse` is. */
  class Response extends EventEmitter {
    writableFinished = false;
    destroyed = false;
  }

  it('on the first of finish, close or error, exactly once', HANG_GUARD, async (t) => {
    const own = new FloodgateClient({ url: server.url, deadline: 2000 });
    const releases = watchReleases(own, t.signal);
    for (const [i, first] of (['finish', 'close', 'error'] as const).entries()) {
      const stream = `ended-by-${first}`;
      const d = await own.check({ stream });
      assert.ok(d.allowed && d.reservation !== null);
      assert.equal((await own.check({ stream })).allowed, false, 'the one permit is held');
      const response = new Response();
      response.on('error', () => {}); // the app's own handler
      releaseOnEnd(own, d.reservation, response);
      assert.equal(releases.ids.length, i, 'nothing released before the end');
      response.emit(first, first === 'error' ? new Error('reset') : undefined);
      for (const then of ['finish', 'close', 'error'] as const) response.emit(then, then === 'error' ? new Error('late') : undefined);
      assert.equal(releases.ids.length, i + 1, 'released once, whatever followed');
      await releases.answered(i + 1);
      assert.equal((await own.check({ stream })).allowed, true, 'the permit is free again');
    }
  });

  it('at once when the response has already ended; an error nobody else handles is still thrown', HANG_GUARD, async (t) => {
    const own = new FloodgateClient({ url: server.url, deadline: 2000 });
    const releases = watchReleases(own, t.signal);
    const done = await own.check({ stream: 'already-sent' });
    const sent = Object.assign(new Response(), { writableFinished: true });
    releaseOnEnd(own, done.reservation!, sent);
    assert.deepEqual(releases.ids, [done.reservation]);

    const failing = await own.check({ stream: 'unhandled-error' });
    const response = new Response();
    releaseOnEnd(own, failing.reservation!, response);
    assert.throws(() => response.emit('error', new Error('boom')), /boom/);
    assert.deepEqual(releases.ids, [done.reservation, failing.reservation]);
    await releases.answered(2);
    assert.equal((await own.check({ stream: 'already-sent' })).allowed, true);
    assert.equal((await own.check({ stream: 'unhandled-error' })).allowed, true);
  });
});

describe('commit and release are retried: they are idempotent', () => {
  it('a commit whose first answer was lost is retried and settles once', async () => {
    // A proxy that forwards every request, but drops the connection instead of the first
    // commit's answer: the commit ran, its caller never heard.
    let dropped = 0;
    const proxy: Server = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const upstream = await fetch(`${server.url}${req.url}`, {
        method: req.method!,
        headers: { 'content-type': 'application/json' },
        ...(req.method === 'POST' ? { body: Buffer.concat(chunks) } : {}),
      });
      const text = await upstream.text();
      if (req.url === '/v1/commit' && dropped === 0) {
        dropped += 1;
        res.socket?.destroy();
        return;
      }
      res.writeHead(upstream.status, { 'content-type': 'application/json' }).end(text);
    });
    await new Promise<void>((ok) => proxy.listen(0, '127.0.0.1', ok));
    const port = (proxy.address() as { port: number }).port;
    try {
      const viaProxy = new FloodgateClient({ url: `http://127.0.0.1:${port}`, deadline: 2000 });
      const r = await viaProxy.reserve({ tenant: 'retried' }, { costs: { requests: 1, tokens: 1000 } });
      const settled = await viaProxy.commit(r.reservation!, { tokens: 100 });
      assert.equal(dropped, 1, 'the first answer was lost');
      assert.deepEqual(settled.refunded, { tokens: 900 });
      assert.equal(await used('tenant-tokens', 'retried'), 100, 'refunded once, not twice');
    } finally {
      proxy.closeAllConnections();
      await new Promise<void>((ok) => proxy.close(() => ok()));
    }
  });

  it('gives up after its attempts with FloodgateUnavailableError, counted', async () => {
    const down = new FloodgateClient({ url: await refusingUrl(), deadline: 200 });
    await assert.rejects(down.release('0123456789abcdef0123456789abcdef', { attempts: 2 }), FloodgateUnavailableError);
    assert.equal(down.stats().calls, 3, 'the first attempt and two retries');
    assert.equal(down.stats().failures.unreachable, 1);
  });
});
