// rate-limiter-flexible's RateLimiterRedis over ioredis (auto-pipelined), driven like Floodgate.
//
// Two modes:
//   node bench.js --port 6379 --decisions 200000 --concurrency 256 --keys 10000
//     a fixed number of decisions that never deny (bench/redis/run: Redis CPU per decision);
//   node bench.js --port 6379 --secs 10 --warmup 1 --concurrency 256 --keys 10000 --limit 100 --window-s 1
//     closed loop for a duration after a warm-up, uniform random keys, a real limit; prints one
//     JSON report with floodgate-bench's throughput field names (bench/run-all puts it beside
//     `floodgate-bench throughput --in-process` on the same Redis).
'use strict';
const Redis = require('ioredis');
const { RateLimiterRedis, RateLimiterRes } = require('rate-limiter-flexible');

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
const port = Number(args.port || 6379);
const concurrency = Number(args.concurrency || 256);
const keys = Number(args.keys || 10000);

function client() {
  return new Redis({ port, host: '127.0.0.1', enableAutoPipelining: true, enableOfflineQueue: true });
}

// bench/redis/run: `decisions` consumes of a limit that never denies.
async function fixedCount(decisions) {
  const redis = client();
  const limiter = new RateLimiterRedis({ storeClient: redis, keyPrefix: 'rlf', points: 1000000000, duration: 60 });
  let next = 0;
  let allowed = 0;
  const started = process.hrtime.bigint();
  async function worker() {
    while (next < decisions) {
      const i = next++;
      try {
        await limiter.consume(`k${i % keys}`, 1);
        allowed++;
      } catch (e) {
        if (e instanceof Error) throw e;
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  console.log(JSON.stringify({ peer: 'rate-limiter-flexible', decisions, allowed, seconds: secs, per_second: decisions / secs }));
  redis.disconnect();
}

function percentile(sorted, q) {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

// bench/run-all: a closed loop for `secs` after `warmup`, latency of every measured decision.
async function timed(secs, warmup, limit, windowS) {
  const redis = client();
  const limiter = new RateLimiterRedis({ storeClient: redis, keyPrefix: `rlf${process.pid}`, points: limit, duration: windowS });
  const now = () => Number(process.hrtime.bigint()) / 1000; // µs
  const started = now();
  const measureFrom = started + warmup * 1e6;
  const end = measureFrom + secs * 1e6;
  const latencies = [];
  const errors = {};
  let allowed = 0;
  let denied = 0;
  async function worker() {
    for (;;) {
      const sent = now();
      if (sent >= end) return;
      const key = `u${Math.floor(Math.random() * keys)}`;
      let outcome;
      try {
        await limiter.consume(key, 1);
        outcome = 'allowed';
      } catch (e) {
        outcome = e instanceof RateLimiterRes ? 'denied' : (e && e.code) || 'redis_error';
      }
      if (sent < measureFrom) continue;
      latencies.push(now() - sent);
      if (outcome === 'allowed') allowed++;
      else if (outcome === 'denied') denied++;
      else errors[outcome] = (errors[outcome] || 0) + 1;
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  const wall = (now() - measureFrom) / 1e6;
  latencies.sort((a, b) => a - b);
  const errorTotal = Object.values(errors).reduce((a, b) => a + b, 0);
  const sent = allowed + denied + errorTotal;
  console.log(
    JSON.stringify({
      scenario: 'throughput',
      target: 'rate-limiter-flexible RateLimiterRedis',
      mode: 'closed',
      concurrency,
      keys,
      distribution: 'uniform',
      limit,
      window_s: windowS,
      duration_s: wall,
      sent,
      decisions_per_sec: sent / wall,
      allowed,
      denied,
      errors: { total: errorTotal, by_kind: errors },
      p50_us: percentile(latencies, 0.5),
      p90_us: percentile(latencies, 0.9),
      p99_us: percentile(latencies, 0.99),
      p999_us: percentile(latencies, 0.999),
      max_us: latencies.length ? latencies[latencies.length - 1] : 0,
    }),
  );
  redis.disconnect();
}

const run = args.secs
  ? timed(Number(args.secs), Number(args.warmup || 1), Number(args.limit || 100), Number(args['window-s'] || 1))
  : fixedCount(Number(args.decisions || 200000));
run.catch((e) => {
  console.error(e);
  process.exit(1);
});
