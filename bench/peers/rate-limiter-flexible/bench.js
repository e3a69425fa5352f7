// rate-limiter-flexible's RateLimiterRedis over ioredis (auto-pipelined), driven like Floodgate's
// store in bench/redis/run: the same key space, the same number of decisions in flight.
//
// node bench.js --port 6379 --decisions 200000 --concurrency 256 --keys 10000
'use strict';
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
const port = Number(args.port || 6379);
const decisions = Number(args.decisions || 200000);
const concurrency = Number(args.concurrency || 256);
const keys = Number(args.keys || 10000);

async function main() {
  const redis = new Redis({ port, host: '127.0.0.1', enableAutoPipelining: true, enableOfflineQueue: true });
  const limiter = new RateLimiterRedis({
    storeClient: redis,
    keyPrefix: 'rlf',
    points: 1000000000,
    duration: 60,
  });
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

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
