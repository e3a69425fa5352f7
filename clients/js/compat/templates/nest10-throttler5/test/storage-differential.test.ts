/**
 * FloodgateThrottlerStorage against @nestjs/throttler 5's own in-memory storage, on one clock: the
 * real server on a manual clock (its built-in policy), the in-memory storage under mocked timers
 * (it forgets each hit with a timer), both started at T0 and moved together. Seeded random
 * sequences of `increment(key, ttl)` and clock moves (small, large, and on, just before and just
 * after the instants where a hit expires or a period is restarted) are applied to both, and both
 * fields throttler 5 reads are compared at every step: `totalHits` and `timeToExpire`.
 */
import 'reflect-metadata';
import * as assert from 'node:assert/strict';
import { after, before, describe, it, mock } from 'node:test';
import { ThrottlerStorageService } from '@nestjs/throttler';
import { FloodgateThrottlerStorage } from '@floodgate/nestjs';
import { startFloodgate, ManualClock, RunningFloodgate } from '@floodgate/testkit';

const T0 = 1_800_000_000_000;
const SEQUENCES = 60;
const STEPS = 30;
const TTLS = [1, 500, 999, 1000, 1001, 1500, 2000, 5000, 60_000];

function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let floodgate: RunningFloodgate;
let clock: ManualClock;
before(async () => {
  floodgate = await startFloodgate(null, { manualClockMs: T0 });
  clock = floodgate.clock;
  mock.timers.enable({ apis: ['Date', 'setTimeout', 'setInterval'], now: T0 });
});
after(async () => {
  mock.timers.reset();
  await floodgate.stop();
});

describe('FloodgateThrottlerStorage answers as @nestjs/throttler 5\'s in-memory storage', () => {
  it(`on ${SEQUENCES} seeded random sequences, step by step`, async () => {
    const storage = new FloodgateThrottlerStorage({ url: floodgate.url, deadline: 10_000, breaker: false });
    for (let seed = 1; seed <= SEQUENCES; seed++) {
      const next = random(seed);
      const pick = <T>(list: T[]): T => list[Math.floor(next() * list.length)];
      const memory = new ThrottlerStorageService();
      const keys = ['a', 'b', 'c'].slice(0, 1 + Math.floor(next() * 3)).map((k) => ({ key: `s${seed}:${k}`, ttl: pick(TTLS) }));
      const edges: number[] = [];
      const log = [`seed ${seed}: ${JSON.stringify(keys)}`];
      try {
        for (let step = 0; step < STEPS; step++) {
          if (next() < 0.6) {
            const { key, ttl } = pick(keys);
            const mem = await memory.increment(key, ttl);
            const fg = await storage.increment(key, ttl);
            log.push(`increment(${key}, ${ttl}): memory ${JSON.stringify(mem)}, floodgate ${JSON.stringify(fg)}`);
            assert.deepEqual([fg.totalHits, fg.timeToExpire], [mem.totalHits, mem.timeToExpire]);
            const expiresAt = (memory.storage[key] as { expiresAt: number }).expiresAt;
            edges.push(Date.now() + ttl, expiresAt, expiresAt - 1000, expiresAt - 999);
          } else {
            const now = Date.now();
            const ahead = edges.filter((t) => t > now);
            const to = ahead.length > 0 && next() < 0.6 ? pick(ahead) + pick([-1, 0, 0, 1]) : now + Math.floor(next() * 2 * pick(TTLS));
            const ms = Math.max(0, to - now);
            log.push(`advance ${ms} ms`);
            if (ms > 0) {
              mock.timers.tick(ms);
              assert.equal(await clock.advance(ms), Date.now());
            }
          }
        }
      } catch (error) {
        throw new Error(`sequence ${seed} differs: ${(error as Error).message}\n${log.join('\n')}`);
      } finally {
        memory.onApplicationShutdown();
      }
    }
  });
});
