import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import express, { type Express } from 'express';
import { FloodgateClient } from '@floodgate/client';
import { decisionOf, floodgate } from '@floodgate/express';
import {
  HANG_GUARD,
  deferred,
  startFloodgate,
  startSilentServer,
  watchReleases,
  type Deferred,
  type RunningFloodgate,
} from '@floodgate/testkit';

const CONFIG = `
store: { kind: memory }
descriptors: [rule]
headers: both
rules:
  - name: chat-per-user
    match: { route: "POST /chat" }
    key: [user]
    algorithm: fixed_window
    limit: 2
    window: 60s
  - name: uploads
    match: { rule: uploads }
    key: [tenant]
    algorithm: fixed_window
    limit: 10
    window: 60s
  - name: in-flight
    match: { rule: in-flight }
    key: [user]
    algorithm: concurrency
    limit: 1
    lease: 1h
`;

async function listen(app: Express): Promise<{ url: string; close: () => Promise<void> }> {
  const server = app.listen(0, '127.0.0.1');
  await new Promise<void>((ok) => server.once('listening', () => ok()));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  };
}

async function statuses(url: string, count: number, init: RequestInit): Promise<Response[]> {
  const out = [];
  for (let i = 0; i < count; i++) {
    const r = await fetch(url, init);
    await r.arrayBuffer().catch(() => undefined);
    out.push(r);
  }
  return out;
}

/** A request the handler holds open: it says when it got in, waits for `go`, and sees `closed`. */
interface Held {
  entered: Deferred;
  go: Deferred;
  closed: Deferred;
}

let server: RunningFloodgate;
before(async () => {
  server = await startFloodgate(CONFIG);
});
after(async () => {
  await server.stop();
});

describe('floodgate() middleware', () => {
  it('on a route: the route template, headers on allowed responses, then 429 problem+json', async () => {
    const app = express();
    app.post('/chat', floodgate({ url: server.url, deadline: 1000 }), (_req, res) => {
      res.json({ remaining: decisionOf(res)?.limits[0]?.remaining });
    });
    const http = await listen(app);
    try {
      const init = { method: 'POST', headers: { 'x-user-id': 'e1' } };
      const first = await fetch(`${http.url}/chat`, init);
      assert.equal(first.status, 200);
      assert.deepEqual(await first.json(), { remaining: 1 });
      assert.equal(first.headers.get('x-ratelimit-limit'), '2');
      await statuses(`${http.url}/chat`, 1, init);
      const denied = await fetch(`${http.url}/chat`, init);
      assert.equal(denied.status, 429);
      assert.match(denied.headers.get('content-type') ?? '', /^application\/problem\+json/);
      const problem = (await denied.json()) as { type: string; retry_after: number; limit: number };
      assert.equal(problem.type, 'https://floodgate.dev/problems/rate-limited');
      assert.equal(String(problem.retry_after), denied.headers.get('retry-after'));
      assert.equal(problem.limit, 2);
    } finally {
      await http.close();
    }
  });

  it('app.use with a shared client, a rule, a cost, req.user, and skip', async () => {
    const client = new FloodgateClient({ url: server.url, deadline: 1000 });
    const app = express();
    app.use((req, _res, next) => {
      const tenant = req.get('authorization')?.replace('Bearer ', '');
      if (tenant !== undefined) (req as { user?: unknown }).user = { id: 'someone', tenantId: tenant };
      next();
    });
    app.use(floodgate({ client, rule: 'uploads', cost: (req) => Number(req.get('x-files') ?? 1), skip: (req) => req.path === '/healthz' }));
    app.get('/healthz', (_req, res) => res.send('up'));
    app.post('/upload', (_req, res) => res.send('stored'));
    const http = await listen(app);
    try {
      const init = { method: 'POST', headers: { authorization: 'Bearer acme', 'x-tenant-id': 'spoofed', 'x-files': '4' } };
      const answers = await statuses(`${http.url}/upload`, 3, init);
      assert.deepEqual(answers.map((a) => a.status), [200, 200, 429], 'tenant from req.user, 4 + 4 of 10');
      const probes = await statuses(`${http.url}/healthz`, 3, {});
      assert.deepEqual(probes.map((a) => a.status), [200, 200, 200]);
      assert.equal(probes[0]!.headers.get('x-ratelimit-limit'), null);
    } finally {
      await http.close();
    }
  });

  it('fails closed within the deadline when Floodgate does not answer; open lets it through', async () => {
    const silent = await startSilentServer();
    const app = express();
    app.post('/closed', floodgate({ url: silent.url, deadline: 100, failMode: 'closed' }), (_req, res) => res.send('x'));
    app.post('/open', floodgate({ url: silent.url, deadline: 100, failMode: 'open' }), (_req, res) => res.send('x'));
    const http = await listen(app);
    try {
      const started = performance.now();
      const closed = await fetch(`${http.url}/closed`, { method: 'POST' });
      const took = performance.now() - started;
      assert.equal(closed.status, 429);
      assert.equal(closed.headers.get('retry-after'), '1');
      // Not before the deadline (a timer never fires early); how late on a busy machine is not asserted.
      assert.ok(took >= 95, `decided after ${took.toFixed(0)} ms`);
      assert.equal((await fetch(`${http.url}/open`, { method: 'POST' })).status, 200);
    } finally {
      await http.close();
      await silent.close();
    }
  });

  it('hands a request Floodgate refuses as malformed to the error handler', async () => {
    const app = express();
    app.post('/x', floodgate({ url: server.url, deadline: 1000, rule: 'uploads', cost: 11 }), (_req, res) => res.send('x'));
    app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).send(error.name);
    });
    const http = await listen(app);
    try {
      const answer = await fetch(`${http.url}/x`, { method: 'POST', headers: { 'x-tenant-id': 't' } });
      assert.equal(answer.status, 500);
      assert.equal(await answer.text(), 'FloodgateProblemError');
    } finally {
      await http.close();
    }
  });

  it('refuses contradictory options', () => {
    assert.throws(() => floodgate({}), /url \(or client\) is required/);
    assert.throws(
      () => floodgate({ client: new FloodgateClient({ url: server.url }), url: server.url }),
      /either a client, or url/,
    );
  });

  it('releases the permits of a concurrency rule when the response ends: a limit of 1 admits the next request at once', HANG_GUARD, async (t) => {
    const client = new FloodgateClient({ url: server.url, deadline: 1000 });
    const releases = watchReleases(client, t.signal);
    const held = new Map<string, Held>();
    const app = express();
    app.get('/work', floodgate({ client, rule: 'in-flight' }), async (req, res) => {
      const hold = held.get(String(req.query.hold));
      res.once('close', () => hold?.closed.resolve());
      hold?.entered.resolve();
      await hold?.go.promise;
      if (!res.destroyed) res.send('done');
    });
    const http = await listen(app);
    const hold = (name: string): Held => {
      const h = { entered: deferred(t.signal), go: deferred(t.signal), closed: deferred(t.signal) };
      held.set(name, h);
      return h;
    };
    const init = { headers: { 'x-user-id': 'worker' } };
    try {
      // Ended by `finish`: the response was sent.
      const a = hold('a');
      const first = fetch(`${http.url}/work?hold=a`, init);
      await a.entered.promise;
      const busy = await fetch(`${http.url}/work`, init);
      assert.equal(busy.status, 429, 'the held request has the only permit');
      await busy.arrayBuffer();
      assert.deepEqual(releases.ids, [], 'nothing released while the response is open');
      a.go.resolve();
      const sent = await first;
      assert.equal(sent.status, 200);
      assert.equal(await sent.text(), 'done');
      await releases.answered(1);
      const next = await fetch(`${http.url}/work`, init);
      assert.equal(next.status, 200, 'admitted once the previous response ended');
      await next.arrayBuffer();
      await a.closed.promise; // `close` follows `finish`: no second release
      await releases.answered(2);
      assert.equal(releases.ids.length, 2);
      assert.equal(new Set(releases.ids).size, 2, 'each permit released exactly once');

      // Ended by `close`: the client went away before an answer.
      const b = hold('b');
      const gone = new AbortController();
      const abandoned = fetch(`${http.url}/work?hold=b`, { ...init, signal: gone.signal }).catch(() => undefined);
      await b.entered.promise;
      const busyAgain = await fetch(`${http.url}/work`, init);
      assert.equal(busyAgain.status, 429);
      await busyAgain.arrayBuffer();
      gone.abort();
      await abandoned;
      await b.closed.promise;
      await releases.answered(3);
      b.go.resolve();
      const after = await fetch(`${http.url}/work`, init);
      assert.equal(after.status, 200, 'admitted once the abandoned response closed');
      await after.arrayBuffer();
      await releases.answered(4);
      assert.equal(new Set(releases.ids).size, 4, 'each permit released exactly once');
      assert.equal(client.stats().failures.server_error + client.stats().failures.unreachable, 0);
    } finally {
      await http.close();
    }
  });
});
