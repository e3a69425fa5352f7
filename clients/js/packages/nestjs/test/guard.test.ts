import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Controller, Get, Injectable, Module, Post, Query, Req, Res, UseGuards } from '@nestjs/common';
import {
  FloodgateClient,
  FloodgateGuard,
  FloodgateModule,
  RateLimit,
  SkipRateLimit,
  type FloodgateModuleOptions,
} from '@floodgate/nestjs';
import {
  HANG_GUARD,
  deferred,
  startFloodgate,
  startSilentServer,
  watchReleases,
  type Deferred,
  type RunningFloodgate,
} from '@floodgate/testkit';
import { send, startApp, type App } from './support.js';

const CONFIG = `
store: { kind: memory }
descriptors: [rule]
headers: both
rules:
  - name: chat-per-user
    match: { route: "POST /chat" }
    key: [user]
    algorithm: fixed_window
    limit: 3
    window: 60s
  - name: chat-per-tenant
    match: { route: "POST /chat" }
    key: [tenant]
    algorithm: fixed_window
    limit: 5
    window: 1h
  - name: reads-per-ip
    match: { method: GET }
    key: [ip, route]
    algorithm: fixed_window
    limit: 2
    window: 60s
  - name: expensive
    match: { rule: expensive }
    key: [user]
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

@Controller()
class ChatController {
  @Post('chat')
  chat(@Req() req: { res: { locals: { floodgate?: unknown } } }) {
    return { ok: true, checked: req.res.locals.floodgate !== undefined };
  }

  @Get('health')
  @SkipRateLimit()
  health() {
    return 'up';
  }

  @Get('things')
  things() {
    return [];
  }

  @Post('generate')
  @RateLimit({ rule: 'expensive', cost: () => 4 })
  generate() {
    return 'done';
  }
}

function appModule(options: FloodgateModuleOptions & { guard?: 'global' | 'per-controller' }) {
  @Module({ imports: [FloodgateModule.forRoot(options)], controllers: [ChatController] })
  class AppModule {}
  return AppModule;
}

/** A stand-in for authentication: `Authorization: Bearer <user>:<tenant>` becomes `req.user`. */
function authenticate(app: { use: (fn: unknown) => void }) {
  app.use((req: { headers: Record<string, string>; user?: unknown }, _res: unknown, next: () => void) => {
    const token = req.headers.authorization?.replace(/^Bearer /, '');
    if (token !== undefined) {
      const [id, tenantId] = token.split(':');
      req.user = { id, tenantId };
    }
    next();
  });
}

const post = (headers: Record<string, string>): RequestInit => ({ method: 'POST', headers });

let floodgate: RunningFloodgate;
let app: App;
before(async () => {
  floodgate = await startFloodgate(CONFIG);
  app = await startApp(appModule({ url: floodgate.url, deadline: 1000 }), authenticate as never);
});
after(async () => {
  await app.close();
  await floodgate.stop();
});

describe('the global guard', () => {
  it('passes the rate-limit headers on allowed responses, then answers 429 problem+json with Retry-After', async () => {
    const answers = await send(`${app.url}/chat`, 4, post({ 'x-user-id': 'u1', 'x-tenant-id': 'ta' }));
    assert.deepEqual(answers.map((a) => a.status), [201, 201, 201, 429]);
    assert.deepEqual(answers.slice(0, 3).map((a) => a.headers.get('x-ratelimit-remaining')), ['2', '1', '0']);
    assert.match(answers[0]!.headers.get('ratelimit-policy') ?? '', /"chat-per-user";q=3;w=60/);
    assert.equal(JSON.parse(answers[0]!.body).checked, true, 'the decision is on res.locals');
    const denied = answers[3]!;
    const retryAfter = Number(denied.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
    assert.match(denied.headers.get('content-type') ?? '', /^application\/problem\+json/);
    assert.equal(denied.headers.get('x-ratelimit-remaining'), '0');
    const problem = JSON.parse(denied.body);
    assert.equal(problem.type, 'https://floodgate.dev/problems/rate-limited');
    assert.equal(problem.status, 429);
    assert.equal(problem.retry_after, retryAfter);
    assert.equal(problem.limit, 3);
    assert.equal(problem.remaining, 0);
    assert.ok(problem.reset > Date.now() / 1000);
  });

  it('@SkipRateLimit() routes are never checked; the others are', async () => {
    const skipped = await send(`${app.url}/health`, 5);
    assert.deepEqual(skipped.map((a) => a.status), [200, 200, 200, 200, 200]);
    assert.equal(skipped[0]!.headers.get('x-ratelimit-limit'), null, 'no check, no headers');
    const checked = await send(`${app.url}/things`, 3);
    assert.deepEqual(checked.map((a) => a.status), [200, 200, 429]);
  });

  it('takes user and tenant from req.user when present, never from headers then', async () => {
    const answers = [];
    for (const spoof of ['a', 'b', 'c', 'd']) {
      const [a] = await send(`${app.url}/chat`, 1, post({ authorization: 'Bearer real-user:tb', 'x-user-id': spoof }));
      answers.push(a!.status);
    }
    assert.deepEqual(answers, [201, 201, 201, 429], 'counted under req.user.id whatever x-user-id says');
  });

  it('@RateLimit({rule, cost}) sends the rule descriptor and the cost', async () => {
    const answers = await send(`${app.url}/generate`, 3, post({ 'x-user-id': 'gen' }));
    assert.deepEqual(answers.map((a) => a.status), [201, 201, 429], '4 + 4 of 10, then 12 > 10');
  });

  it('counts a tenant across two app instances', async () => {
    const second = await startApp(appModule({ url: floodgate.url, deadline: 1000 }));
    try {
      const statuses = [];
      for (let i = 0; i < 6; i++) {
        const target = i % 2 === 0 ? app.url : second.url;
        const [a] = await send(`${target}/chat`, 1, post({ 'x-user-id': `member-${i}`, 'x-tenant-id': 'shared' }));
        statuses.push(a!.status);
      }
      assert.deepEqual(statuses, [201, 201, 201, 201, 201, 429], 'tenant limit 5 over both instances');
    } finally {
      await second.close();
    }
  });
});

describe('fail modes with the service stopped or silent', () => {
  it('fails open or closed, each decided within the deadline', async () => {
    const own = await startFloodgate(CONFIG);
    const open = await startApp(appModule({ url: own.url, deadline: 500, failMode: 'open' }));
    const closed = await startApp(appModule({ url: own.url, deadline: 500, failMode: 'closed' }));
    try {
      assert.equal((await send(`${closed.url}/chat`, 1, post({ 'x-user-id': 'f' })))[0]!.status, 201);
      await own.stop();
      const [allowed] = await send(`${open.url}/chat`, 1, post({ 'x-user-id': 'f' }));
      assert.equal(allowed!.status, 201);
      assert.ok(allowed!.ms < 500, `fail open took ${allowed!.ms.toFixed(0)} ms`);
      const [denied] = await send(`${closed.url}/chat`, 1, post({ 'x-user-id': 'f' }));
      assert.equal(denied!.status, 429);
      assert.equal(denied!.headers.get('retry-after'), '1');
      assert.ok(denied!.ms < 500, `fail closed took ${denied!.ms.toFixed(0)} ms`);
    } finally {
      await open.close();
      await closed.close();
      await own.stop();
    }
  });

  it('decides at the deadline when the service accepts connections and never answers', async () => {
    const silent = await startSilentServer();
    const late = await startApp(appModule({ url: silent.url, deadline: 150, failMode: 'closed' }));
    try {
      const [denied] = await send(`${late.url}/chat`, 1, post({ 'x-user-id': 's' }));
      assert.equal(denied!.status, 429);
      assert.ok(denied!.ms >= 140 && denied!.ms < 600, `decided after ${denied!.ms.toFixed(0)} ms`);
    } finally {
      await late.close();
      await silent.close();
    }
  });
});

describe('per-controller guard and forRootAsync', () => {
  @Controller('guarded')
  @UseGuards(FloodgateGuard)
  class Guarded {
    @Get()
    get() {
      return 'g';
    }
  }

  @Controller('open')
  class Open {
    @Get()
    get() {
      return 'o';
    }
  }

  @Injectable()
  class Settings {
    readonly floodgateUrl = floodgate.url;
  }

  @Module({ providers: [Settings], exports: [Settings] })
  class SettingsModule {}

  it('checks only the controllers that use the guard; options from a factory', async () => {
    @Module({
      imports: [
        FloodgateModule.forRootAsync({
          imports: [SettingsModule],
          inject: [Settings],
          useFactory: (settings: Settings) => ({ url: settings.floodgateUrl, deadline: 1000 }),
          guard: 'per-controller',
        }),
      ],
      controllers: [Guarded, Open],
    })
    class PerController {}
    const own = await startApp(PerController);
    try {
      assert.deepEqual((await send(`${own.url}/open`, 4)).map((a) => a.status), [200, 200, 200, 200]);
      assert.deepEqual((await send(`${own.url}/guarded`, 3)).map((a) => a.status), [200, 200, 429]);
    } finally {
      await own.close();
    }
  });

  it('injects the client', async () => {
    @Injectable()
    class UsesClient {
      constructor(readonly client: FloodgateClient) {}
    }
    @Module({ imports: [FloodgateModule.forRoot({ url: floodgate.url, guard: 'per-controller' })], providers: [UsesClient] })
    class WithClient {}
    const { NestFactory } = await import('@nestjs/core');
    const ctx = await NestFactory.createApplicationContext(WithClient, { logger: false });
    const client = ctx.get(UsesClient).client;
    assert.ok(client instanceof FloodgateClient);
    assert.equal(client.url, floodgate.url);
    await ctx.close();
  });

  it('refuses bad options at startup with what is wrong', () => {
    assert.throws(() => FloodgateModule.forRoot({ url: 'not a url' }), /is not a URL/);
    assert.throws(() => FloodgateModule.forRoot({ url: floodgate.url, deadline: -1 }), /deadline must be a positive/);
    assert.throws(
      () => FloodgateModule.forRoot({ url: floodgate.url, guard: 'everywhere' as 'global' }),
      /guard must be 'global' or 'per-controller'/,
    );
  });
});

describe('concurrency permits', () => {
  /** A request the handler holds open: it says when it got in, waits for `go`, and sees `closed`. */
  interface Held {
    entered: Deferred;
    go: Deferred;
    closed: Deferred;
  }
  const held = new Map<string, Held>();
  const hold = (name: string, signal: AbortSignal): Held => {
    const h = { entered: deferred(signal), go: deferred(signal), closed: deferred(signal) };
    held.set(name, h);
    return h;
  };

  @Controller()
  class Work {
    @Post('work')
    @RateLimit({ rule: 'in-flight' })
    async work(@Query('hold') name: string | undefined, @Res({ passthrough: true }) res: { once(e: 'close', f: () => void): void }) {
      const h = name === undefined ? undefined : held.get(name);
      res.once('close', () => h?.closed.resolve());
      h?.entered.resolve();
      await h?.go.promise;
      return 'done';
    }
  }

  it('are released when the response ends: a limit of 1 admits the next request at once', HANG_GUARD, async (t) => {
    @Module({ imports: [FloodgateModule.forRoot({ url: floodgate.url, deadline: 1000 })], controllers: [Work] })
    class WorkModule {}
    let releases!: ReturnType<typeof watchReleases>;
    const own = await startApp(WorkModule, (nest) => {
      releases = watchReleases(nest.get(FloodgateClient), t.signal);
    });
    const init = post({ 'x-user-id': 'worker' });
    try {
      // Ended by `finish`: the response was sent.
      const a = hold('a', t.signal);
      const first = fetch(`${own.url}/work?hold=a`, init);
      await a.entered.promise;
      const [busy] = await send(`${own.url}/work`, 1, init);
      assert.equal(busy!.status, 429, 'the held request has the only permit');
      assert.deepEqual(releases.ids, [], 'nothing released while the response is open');
      a.go.resolve();
      const sent = await first;
      assert.equal(sent.status, 201);
      assert.equal(await sent.text(), 'done');
      await releases.answered(1);
      const [next] = await send(`${own.url}/work`, 1, init);
      assert.equal(next!.status, 201, 'admitted once the previous response ended');
      await a.closed.promise; // `close` follows `finish`: no second release
      await releases.answered(2);
      assert.equal(releases.ids.length, 2);
      assert.equal(new Set(releases.ids).size, 2, 'each permit released exactly once');

      // Ended by `close`: the client went away before an answer.
      const b = hold('b', t.signal);
      const gone = new AbortController();
      const abandoned = fetch(`${own.url}/work?hold=b`, { ...init, signal: gone.signal }).catch(() => undefined);
      await b.entered.promise;
      assert.equal((await send(`${own.url}/work`, 1, init))[0]!.status, 429);
      gone.abort();
      await abandoned;
      await b.closed.promise;
      await releases.answered(3);
      b.go.resolve();
      const [after] = await send(`${own.url}/work`, 1, init);
      assert.equal(after!.status, 201, 'admitted once the abandoned response closed');
      await releases.answered(4);
      assert.equal(new Set(releases.ids).size, 4, 'each permit released exactly once');
    } finally {
      await own.close();
    }
  });
});
