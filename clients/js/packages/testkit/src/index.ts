/**
 * Test helpers for Floodgate's TypeScript packages: the real `floodgate` binary started on a free
 * loopback port with a temporary configuration (or the built-in one), optionally on a manual clock
 * that the test moves, and a TCP listener that accepts connections and never answers (a service
 * that is up but late).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/** The repository root: five levels above this file (`clients/js/packages/testkit/dist`). */
const REPO = resolve(__dirname, '../../../../..');

/**
 * The `floodgate` binary: `$FLOODGATE_BIN`, else `target/debug/floodgate` of this repository.
 * Missing, it is an error that says how to build it: these tests never skip.
 */
export function floodgateBinary(): string {
  const path = process.env.FLOODGATE_BIN ?? join(REPO, 'target', 'debug', 'floodgate');
  if (!existsSync(path)) {
    throw new Error(
      `the floodgate binary is missing at ${path}: build it with \`cargo build -p floodgate-server\` ` +
        '(or set FLOODGATE_BIN to one)',
    );
  }
  return path;
}

/** A free loopback TCP port (bound, then released). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((ok, fail) => server.listen(0, '127.0.0.1', ok).once('error', fail));
  const address = server.address();
  await new Promise<void>((ok) => server.close(() => ok()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/**
 * The memory store's clock of a server started with `manualClockMs` (`--manual-clock`): time stands
 * still until the test moves it (`POST /admin/clock`). Each call answers the server's time after it.
 */
export interface ManualClock {
  /** The server's time now (ms since the Unix epoch). */
  now(): Promise<number>;
  /** Moves the time forward by `ms` (≥ 0). */
  advance(ms: number): Promise<number>;
  /** Sets the time to `ms` since the Unix epoch (never backwards). */
  set(ms: number): Promise<number>;
}

/** Options of {@link startFloodgate}. */
export interface StartOptions {
  /** Listen on this port (e.g. where another service listened) instead of a free one. */
  port?: number;
  /**
   * Start the memory store's clock at this time (ms since the Unix epoch), moved only by
   * {@link RunningFloodgate.clock}. A restart starts it at this time again.
   */
  manualClockMs?: number;
}

/** A running `floodgate serve`. */
export interface RunningFloodgate {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  port: number;
  /** The manual clock, when started with `manualClockMs`; null on the process clock. */
  clock: ManualClock | null;
  /** Stops the server (SIGKILL) and waits for it to exit; the port then refuses connections. */
  stop(): Promise<void>;
  /** Starts it again on the same port and configuration (a fresh memory store). */
  restart(): Promise<void>;
}

/** The {@link ManualClock} of the server at `url`. */
function manualClock(url: string): ManualClock {
  const move = async (body: object | undefined): Promise<number> => {
    const init: RequestInit =
      body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
    const answer = await fetch(`${url}/admin/clock`, init);
    const text = await answer.text();
    if (!answer.ok) throw new Error(`/admin/clock answered ${answer.status}: ${text}`);
    return (JSON.parse(text) as { now_ms: number }).now_ms;
  };
  return {
    now: () => move(undefined),
    advance: (ms) => move({ advance_ms: ms }),
    set: (ms) => move({ set_ms: ms }),
  };
}

/**
 * Starts the real `floodgate serve` with `config` (YAML), or with no `--config` when it is null
 * (the built-in example policy), on a free port (or on `options.port`), and waits until
 * `/healthz` answers.
 */
export async function startFloodgate(config: string | null, options: StartOptions = {}): Promise<RunningFloodgate> {
  const binary = floodgateBinary();
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-js-'));
  const args = ['serve'];
  if (config !== null) {
    const path = join(dir, 'floodgate.yaml');
    writeFileSync(path, config);
    args.push('--config', path);
  }
  if (options.manualClockMs !== undefined) args.push('--manual-clock', String(options.manualClockMs));
  const port = options.port ?? (await freePort());
  const grpc = await freePort();
  const url = `http://127.0.0.1:${port}`;
  args.push('--http', `127.0.0.1:${port}`, '--grpc', `127.0.0.1:${grpc}`, '--no-watch');
  let child: ChildProcess | undefined;
  let stderr = '';

  const launch = async (): Promise<void> => {
    stderr = '';
    const started = spawn(binary, args, {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, RUST_LOG: 'warn' },
    });
    child = started;
    started.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const until = Date.now() + 15_000;
    for (;;) {
      if (started.exitCode !== null) {
        throw new Error(`floodgate exited with ${started.exitCode} at start:\n${stderr}`);
      }
      try {
        const answer = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(500) });
        if (answer.ok) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > until) throw new Error(`floodgate did not become healthy on ${url} in 15 s:\n${stderr}`);
      await new Promise((ok) => setTimeout(ok, 50));
    }
  };

  const stop = async (): Promise<void> => {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise<void>((ok) => running.once('exit', () => ok()));
    running.kill('SIGKILL');
    await exited;
  };

  await launch();
  process.once('exit', () => {
    child?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    url,
    port,
    clock: options.manualClockMs === undefined ? null : manualClock(url),
    stop,
    restart: async () => {
      await stop();
      await launch();
    },
  };
}

/** A TCP listener that accepts connections, reads, and never answers. */
export interface SilentServer {
  url: string;
  /** Connections accepted so far (Node's `fetch` may open one ahead of its next request). */
  accepted(): number;
  /** HTTP requests received so far (request lines read), none of them answered. */
  requests(): number;
  close(): Promise<void>;
}

/** Starts a {@link SilentServer} on a free loopback port. */
export async function startSilentServer(): Promise<SilentServer> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  let requests = 0;
  const server: Server = createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on('data', (chunk: Buffer) => {
      requests += chunk.toString('latin1').split(' HTTP/1.1\r\n').length - 1;
    });
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((ok, fail) => server.listen(0, '127.0.0.1', ok).once('error', fail));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return {
    url: `http://127.0.0.1:${address.port}`,
    accepted: () => accepted,
    requests: () => requests,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((ok) => server.close(() => ok()));
    },
  };
}

/** A port on which nothing listens (connections are refused). */
export async function refusingUrl(): Promise<string> {
  return `http://127.0.0.1:${await freePort()}`;
}

/** The releases a client made, watched (see {@link watchReleases}). */
export interface ReleaseWatch {
  /** The reservation ids released so far, in the order the calls were made. */
  readonly ids: string[];
  /** Resolves once `count` releases have been made and answered (or failed). */
  answered(count: number): Promise<void>;
}

/**
 * Watches `client.release`: every call is recorded when it is made, and {@link ReleaseWatch.answered}
 * waits for the answers, so a test waits on the release itself rather than on a clock. Waits
 * reject when `signal` aborts (give it the test's `t.signal`, with {@link HANG_GUARD}).
 */
export function watchReleases<C extends { release(reservation: string, ...rest: any[]): Promise<unknown> }>(
  client: C,
  signal?: AbortSignal,
): ReleaseWatch {
  const ids: string[] = [];
  const waiting: { count: number; done: Deferred }[] = [];
  let settled = 0;
  const release = client.release.bind(client);
  client.release = (reservation: string, ...rest: unknown[]) => {
    ids.push(reservation);
    const answer = release(reservation, ...rest);
    const done = (): void => {
      settled += 1;
      for (const waiter of waiting.filter((w) => w.count <= settled)) {
        waiting.splice(waiting.indexOf(waiter), 1);
        waiter.done.resolve();
      }
    };
    answer.then(done, done);
    return answer;
  };
  return {
    ids,
    answered: (count) => {
      if (count <= settled) return Promise.resolve();
      const done = deferred(signal);
      waiting.push({ count, done });
      return done.promise;
    },
  };
}

/** Something a test waits on and another part of it makes happen. */
export interface Deferred {
  promise: Promise<void>;
  resolve(): void;
}

/**
 * A {@link Deferred}: a promise and what resolves it. It rejects when `signal` aborts, so that a
 * test whose event never comes fails at its {@link HANG_GUARD} and cleans up rather than hangs.
 */
export function deferred(signal?: AbortSignal): Deferred {
  let resolve!: () => void;
  let reject!: (reason: unknown) => void;
  const promise = new Promise<void>((ok, fail) => {
    resolve = ok;
    reject = fail;
  });
  promise.catch(() => {}); // a rejection nobody awaits is no unhandled rejection
  if (signal !== undefined) {
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  }
  return { promise, resolve };
}

/**
 * Options of a test that waits on events (`it(name, HANG_GUARD, async (t) => …)`, its waits given
 * `t.signal`): when one never comes, the test fails after a minute instead of hanging the suite.
 * It says nothing about how fast anything is.
 */
export const HANG_GUARD = { timeout: 60_000 } as const;
