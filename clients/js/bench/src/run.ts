/**
 * The NestJS guard's added latency, in one run: the same minimal app with no guard, with
 * @nestjs/throttler (in-memory), with @nestjs/throttler on FloodgateThrottlerStorage, with
 * FloodgateGuard, and with FloodgateGuard on a client sending with `fetch`, each in its own process, loaded in turn for `seconds` per round, over `rounds`
 * rounds in alternating order; Floodgate is the release binary (FLOODGATE_BIN) started here.
 * At one connection the load is this process's own closed loop timed to the microsecond
 * (`sequential.ts`); at more, autocannon's (whole milliseconds).
 *
 * `node dist/run.js [seconds per round] [rounds] [connections] [curve]`
 *
 * `FLOODGATE_BENCH_VARIANTS=throttler-memory,guard` runs only those; `FLOODGATE_BENCH_PROFILE=<dir>`
 * starts each app with `--cpu-prof` writing its profile there on exit.
 */
import { fork, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { freePort } from '@floodgate/testkit';
import { sequential } from './sequential.js';

const seconds = Number(process.argv[2] ?? 10);
const rounds = Number(process.argv[3] ?? 2);
const connections = Number(process.argv[4] ?? 64);
const ALL = ['none', 'throttler-memory', 'throttler-floodgate', 'guard', 'guard-fetch'] as const;
// `curve` (argv[5]): each variant's rounds back to back (a time curve under sustained load), not alternating.
const curve = process.argv[5] === 'curve';
const VARIANTS = (process.env.FLOODGATE_BENCH_VARIANTS?.split(',') ?? [...ALL]).map((v) => {
  if (!(ALL as readonly string[]).includes(v)) throw new Error(`unknown variant ${v}: ${ALL.join(', ')}`);
  return v;
});
const profile = process.env.FLOODGATE_BENCH_PROFILE;

const binary = process.env.FLOODGATE_BIN;
if (binary === undefined) throw new Error('set FLOODGATE_BIN to a release floodgate binary');
const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');
console.log(`${new Date().toISOString()} node ${process.version}, ${seconds} s × ${rounds} rounds at ${connections} connection(s); load average ${load()}`);

const dir = mkdtempSync(join(tmpdir(), 'floodgate-bench-'));
const config = join(dir, 'bench.yaml');
// The throttler's template rules as the built-in policy has them (examples/throttler.yaml), with
// bounds above the bench's limit; and the guard's rule. Limits far above the load: all allowed.
writeFileSync(
  config,
  `store: { kind: memory }
headers: both
descriptors: [throttler_key, throttler_expiry]
rules:
  - name: throttler
    key: [throttler_key]
    algorithm: sliding_log
    limit: { from: request, max: 1000000000 }
    window: { from: request, max: 30d }
    block_for: { from: request, max: 30d }
  - name: throttler-expiry
    key: [throttler_expiry]
    algorithm: budget
    limit: 1000000000000
    ttl: { from: request, max: 30d }
  - name: per-ip
    match: { route: "GET /hello" }
    key: [ip]
    algorithm: sliding_window
    limit: 1000000000
    window: 60s
`,
);
const port = await freePort();
const server = spawn(binary, ['serve', '--config', config, '--http', `127.0.0.1:${port}`, '--grpc', `127.0.0.1:${await freePort()}`, '--no-watch'], {
  stdio: 'ignore',
});
const url = `http://127.0.0.1:${port}`;
for (let i = 0; ; i++) {
  try {
    if ((await fetch(`${url}/healthz`)).ok) break;
  } catch {
    if (i > 200) throw new Error('floodgate did not start');
    await new Promise((ok) => setTimeout(ok, 50));
  }
}

/** CPU time (ms, user + system) a process has used so far: Linux's /proc; NaN elsewhere. */
function cpuMs(pid: number | undefined): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime, stime in ticks of 1/100 s
  } catch {
    return NaN;
  }
}

const apps = new Map<string, { port: number; pid: number | undefined; stop: () => Promise<void> }>();
for (const variant of VARIANTS) {
  const appPort = await freePort();
  const execArgv = profile === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${profile}`, `--cpu-prof-name=${variant}.cpuprofile`];
  const child = fork(new URL('./app.js', import.meta.url), [variant, url, String(appPort)], { stdio: 'ignore', execArgv });
  await new Promise<void>((ok, fail) => {
    child.once('message', () => ok());
    child.once('exit', (code) => fail(new Error(`${variant} exited with ${code}`)));
  });
  // SIGTERM lets a profiled app write its profile (app.js exits on it).
  const stop = () => new Promise<void>((ok) => child.once('exit', () => ok()).kill('SIGTERM'));
  apps.set(variant, { port: appPort, pid: child.pid, stop });
}

type Row = {
  variant: string;
  round: number;
  rps: number;
  mean: number;
  p50: number;
  p99: number;
  p999: number;
  non2xx: number;
  errors: number;
  /** CPU per request (µs) of the app's process and of the Floodgate server's, over the window. */
  appCpu: number;
  serverCpu: number;
};
const rows: Row[] = [];
const schedule: [number, string][] = [];
if (curve) {
  for (const variant of VARIANTS) for (let round = 0; round < rounds; round++) schedule.push([round, variant]);
} else {
  for (let round = 0; round < rounds; round++) {
    for (const variant of round % 2 === 0 ? VARIANTS : [...VARIANTS].reverse()) schedule.push([round, variant]);
  }
}
const ms = (v: number) => v.toFixed(connections === 1 ? 3 : 1);
for (const [round, variant] of schedule) {
  const app = apps.get(variant)!;
  let row: Row;
  let cpu: { app: number; server: number; requests: number };
  if (connections === 1) {
    const w = await sequential(app.port, '/hello', seconds, !curve || round === 0 ? 1 : 0, () => [cpuMs(app.pid), cpuMs(server.pid)]);
    cpu = { app: w.cpu[0] ?? NaN, server: w.cpu[1] ?? NaN, requests: w.requests };
    row = { variant, round, rps: w.rps, mean: w.mean, p50: w.p50, p99: w.p99, p999: w.p999, non2xx: w.non2xx, errors: 0, appCpu: NaN, serverCpu: NaN };
  } else {
    const target = `http://127.0.0.1:${app.port}/hello`;
    if (!curve || round === 0) await autocannon({ url: target, connections, duration: 1 }); // warm-up
    const before = [cpuMs(app.pid), cpuMs(server.pid)];
    const r = await autocannon({ url: target, connections, duration: seconds });
    cpu = { app: cpuMs(app.pid) - before[0]!, server: cpuMs(server.pid) - before[1]!, requests: r.requests.total };
    row = { variant, round, rps: r.requests.average, mean: r.latency.average, p50: r.latency.p50, p99: r.latency.p99, p999: NaN, non2xx: r.non2xx, errors: r.errors + r.timeouts, appCpu: NaN, serverCpu: NaN };
  }
  row.appCpu = (cpu.app * 1000) / cpu.requests;
  row.serverCpu = (cpu.server * 1000) / cpu.requests;
  rows.push(row);
  console.log(
    `${variant.padEnd(20)} round ${round}: ${row.rps.toFixed(0)} req/s, mean ${ms(row.mean)} ms, p50 ${ms(row.p50)} ms, p99 ${ms(row.p99)} ms` +
      `${Number.isNaN(row.p999) ? '' : `, p99.9 ${ms(row.p999)} ms`}, non-2xx ${row.non2xx}, errors ${row.errors}, ` +
      `CPU per request: app ${row.appCpu.toFixed(0)} µs, server ${row.serverCpu.toFixed(0)} µs`,
  );
}

console.log(`\nload average ${load()}`);
console.log('variant               req/s    mean     p50     p99   p99.9  mean added  p50 added  p99 added  app CPU/req  server CPU/req   (ms, µs; mean of rounds)');
const mean = (v: string, f: (r: Row) => number) => {
  const rs = rows.filter((r) => r.variant === v);
  return rs.reduce((s, r) => s + f(r), 0) / rs.length;
};
// Added latency is against the unguarded app, when it ran.
const base = VARIANTS.includes('none')
  ? { mean: mean('none', (r) => r.mean), p50: mean('none', (r) => r.p50), p99: mean('none', (r) => r.p99) }
  : { mean: NaN, p50: NaN, p99: NaN };
const col = (v: number, width: number) => (Number.isNaN(v) ? '-' : ms(v)).padStart(width);
for (const v of VARIANTS) {
  const m = { mean: mean(v, (r) => r.mean), p50: mean(v, (r) => r.p50), p99: mean(v, (r) => r.p99), p999: mean(v, (r) => r.p999) };
  console.log(
    `${v.padEnd(20)}${mean(v, (r) => r.rps).toFixed(0).padStart(6)}${col(m.mean, 8)}${col(m.p50, 8)}${col(m.p99, 8)}${col(m.p999, 8)}` +
      `${col(m.mean - base.mean, 12)}${col(m.p50 - base.p50, 11)}${col(m.p99 - base.p99, 11)}` +
      `${mean(v, (r) => r.appCpu).toFixed(0).padStart(13)}${mean(v, (r) => r.serverCpu).toFixed(0).padStart(16)}`,
  );
}
for (const app of apps.values()) await app.stop();
server.kill('SIGKILL');
rmSync(dir, { recursive: true, force: true });
if (profile !== undefined) console.log(`profiles in ${profile}`);
