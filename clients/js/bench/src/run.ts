/**
 * The NestJS guard's added latency, in one run: the same minimal app with no guard, with
 * @nestjs/throttler (in-memory), with @nestjs/throttler on FloodgateThrottlerStorage, and with
 * FloodgateGuard, each in its own process, loaded in turn by autocannon (64 connections by default) for
 * `seconds` per round, over `rounds` rounds in alternating order; Floodgate is the release
 * binary (FLOODGATE_BIN) started here.
 *
 * `node dist/run.js [seconds per round] [rounds] [connections] [curve]`
 */
import { fork, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { freePort } from '@floodgate/testkit';

const seconds = Number(process.argv[2] ?? 10);
const rounds = Number(process.argv[3] ?? 2);
const connections = Number(process.argv[4] ?? 64);
const ALL = ['none', 'throttler-memory', 'throttler-floodgate', 'guard'] as const;
// `curve` (argv[5]): each variant's rounds back to back (a time curve under sustained load), not alternating.
const curve = process.argv[5] === 'curve';
// FLOODGATE_BENCH_VARIANTS=throttler-memory,guard runs only those.
const VARIANTS = (process.env.FLOODGATE_BENCH_VARIANTS?.split(',') ?? [...ALL]).map((v) => {
  if (!(ALL as readonly string[]).includes(v)) throw new Error(`unknown variant ${v}: ${ALL.join(', ')}`);
  return v;
});

const binary = process.env.FLOODGATE_BIN;
if (binary === undefined) throw new Error('set FLOODGATE_BIN to a release floodgate binary');
const dir = mkdtempSync(join(tmpdir(), 'floodgate-bench-'));
const config = join(dir, 'bench.yaml');
writeFileSync(
  config,
  `store: { kind: memory }
headers: both
descriptors: [throttler, throttler_key, throttler_limit, throttler_ttl]
rules:
  - name: throttler
    match: { throttler: default }
    key: [throttler_key]
    algorithm: fixed_window
    limit: 1000000000
    window: 60s
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

const apps = new Map<string, { port: number; kill: () => void }>();
for (const variant of VARIANTS) {
  const appPort = await freePort();
  const child = fork(new URL('./app.js', import.meta.url), [variant, url, String(appPort)], { stdio: 'ignore' });
  await new Promise<void>((ok, fail) => {
    child.once('message', () => ok());
    child.once('exit', (code) => fail(new Error(`${variant} exited with ${code}`)));
  });
  apps.set(variant, { port: appPort, kill: () => child.kill('SIGKILL') });
}

type Row = { variant: string; round: number; rps: number; p50: number; p99: number; non2xx: number; errors: number };
const rows: Row[] = [];
const schedule: [number, string][] = [];
if (curve) {
  for (const variant of VARIANTS) for (let round = 0; round < rounds; round++) schedule.push([round, variant]);
} else {
  for (let round = 0; round < rounds; round++) {
    for (const variant of round % 2 === 0 ? VARIANTS : [...VARIANTS].reverse()) schedule.push([round, variant]);
  }
}
for (const [round, variant] of schedule) {
  {
    const target = `http://127.0.0.1:${apps.get(variant)!.port}/hello`;
    if (!curve || round === 0) await autocannon({ url: target, connections, duration: 1 }); // warm-up
    const r = await autocannon({ url: target, connections, duration: seconds });
    rows.push({ variant, round, rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, errors: r.errors + r.timeouts });
    console.log(`${variant.padEnd(20)} round ${round}: ${r.requests.average.toFixed(0)} req/s, p50 ${r.latency.p50} ms, p99 ${r.latency.p99} ms, non-2xx ${r.non2xx}, errors ${r.errors + r.timeouts}`);
  }
}

console.log('\nvariant               req/s (mean of rounds)  p50 ms  p99 ms  p50 added  p99 added');
const mean = (v: string, f: (r: Row) => number) => {
  const rs = rows.filter((r) => r.variant === v);
  return rs.reduce((s, r) => s + f(r), 0) / rs.length;
};
// Added latency is against the unguarded app, when it ran.
const base = VARIANTS.includes('none') ? { p50: mean('none', (r) => r.p50), p99: mean('none', (r) => r.p99) } : { p50: NaN, p99: NaN };
for (const v of VARIANTS) {
  const p50 = mean(v, (r) => r.p50);
  const p99 = mean(v, (r) => r.p99);
  console.log(
    `${v.padEnd(20)}  ${mean(v, (r) => r.rps).toFixed(0).padStart(10)}  ${p50.toFixed(1).padStart(14)}  ${p99.toFixed(1).padStart(6)}  ${Number.isNaN(base.p50) ? '        -' : (p50 - base.p50).toFixed(1).padStart(9)}  ${Number.isNaN(base.p99) ? '        -' : (p99 - base.p99).toFixed(1).padStart(9)}`,
  );
}
for (const app of apps.values()) app.kill();
server.kill('SIGKILL');
