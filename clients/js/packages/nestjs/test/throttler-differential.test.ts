/**
 * FloodgateThrottlerStorage against @nestjs/throttler's own in-memory storage
 * (`ThrottlerStorageService`), on the same clock: the real server on a manual clock (no
 * configuration: the built-in policy's template rules), the in-memory storage under mocked timers,
 * both started at T0 and moved together. Seeded random sequences of increments — several
 * throttlers, routes with their own `@Throttle()` overrides, trackers, block durations of 0,
 * shorter, equal and longer than the ttl — and clock moves (small, large, and exactly on, just
 * before and just after the instants where a hit expires, a period ends or a box ends) are applied
 * to both, and every answer is compared in what the guard reads of it: `isBlocked`; `totalHits`
 * and `timeToExpire` when not blocked (then both `timeToBlockExpire` ≤ 0); `timeToBlockExpire`
 * when blocked. Each increment goes through one of two storage instances at random (two app
 * instances sharing the count against one in-memory storage).
 *
 * `FLOODGATE_DIFF_SEQUENCES=n` runs n sequences (default 200); `FLOODGATE_DIFF_SEED=s` runs only
 * sequence s, as a failure prints it.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it, mock } from 'node:test';
import { ThrottlerStorageService } from '@nestjs/throttler';
import { FloodgateThrottlerStorage, type ThrottlerStorageRecord } from '@floodgate/nestjs';
import { startFloodgate, type ManualClock, type RunningFloodgate } from '@floodgate/testkit';

const T0 = 1_800_000_000_000;
const SEQUENCES = Number(process.env.FLOODGATE_DIFF_SEQUENCES ?? 200);
const ONLY_SEED = process.env.FLOODGATE_DIFF_SEED === undefined ? undefined : Number(process.env.FLOODGATE_DIFF_SEED);
const STEPS = 40;

/** mulberry32: a small seeded generator, the same sequence on every machine. */
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

interface Limits {
  limit: number;
  ttl: number;
  blockDuration: number;
}

/** What the guard of @nestjs/throttler 6 reads of an answer; null when both agree on it. */
function disagreement(memory: ThrottlerStorageRecord, floodgate: ThrottlerStorageRecord): string | null {
  if (memory.isBlocked !== floodgate.isBlocked) return 'isBlocked';
  if (memory.isBlocked) {
    return memory.timeToBlockExpire === floodgate.timeToBlockExpire ? null : 'timeToBlockExpire';
  }
  if (memory.totalHits !== floodgate.totalHits) return 'totalHits';
  if (memory.timeToExpire !== floodgate.timeToExpire) return 'timeToExpire';
  if (!(memory.timeToBlockExpire <= 0 && floodgate.timeToBlockExpire <= 0)) return 'timeToBlockExpire (not blocked)';
  return null;
}

/** The in-memory storage's internals: the instants where its answers may change. */
interface MemoryInternals {
  storage: Map<string, { expiresAt: number; blockExpiresAt: number; isBlocked: boolean }>;
  hitExpirations: Map<string, Map<string, number[]>>;
}

function boundaries(memory: ThrottlerStorageService, now: number): number[] {
  const internals = memory as unknown as MemoryInternals;
  const out: number[] = [];
  for (const record of internals.storage.values()) {
    out.push(record.expiresAt);
    if (record.isBlocked) out.push(record.blockExpiresAt);
  }
  for (const byName of internals.hitExpirations.values()) for (const hits of byName.values()) out.push(...hits);
  return out.filter((t) => t > now);
}

const TTLS = [1, 500, 999, 1000, 1001, 1500, 2000, 3000, 10_000, 60_000];

function pickLimits(next: () => number): Limits {
  const pick = <T>(list: T[]): T => list[Math.floor(next() * list.length)]!;
  const ttl = pick(TTLS);
  const limit = 1 + Math.floor(next() * 4);
  const block = pick(['none', 'shorter', 'equal', 'longer', 'longer', 'other'] as const);
  const blockDuration =
    block === 'none'
      ? 0
      : block === 'shorter'
        ? Math.max(1, Math.floor(next() * ttl))
        : block === 'equal'
          ? ttl
          : block === 'longer'
            ? ttl + 1 + Math.floor(next() * 3 * ttl)
            : pick([1, 999, 1000, 2500, 7000]);
  return { limit, ttl, blockDuration };
}

let server: RunningFloodgate;
let clock: ManualClock;
before(async () => {
  server = await startFloodgate(null, { manualClockMs: T0 });
  clock = server.clock!;
  mock.timers.enable({ apis: ['Date', 'setTimeout', 'setInterval'], now: T0 });
});
after(async () => {
  mock.timers.reset();
  await server.stop();
});

/** Moves both clocks by `ms`. */
async function advance(ms: number): Promise<void> {
  if (ms === 0) return;
  mock.timers.tick(ms);
  const now = await clock.advance(ms);
  assert.equal(now, Date.now(), 'the two clocks moved together');
}

/** What the sequences exercised, so that a change to the generator cannot quietly stop testing a case. */
interface Coverage {
  increments: number;
  /** Denials by a throttler with no box, a box shorter than its ttl, equal, longer. */
  deniedNoBox: number;
  deniedShorterBox: number;
  deniedEqualBox: number;
  deniedLongerBox: number;
  /** Hits let through on a key that was boxed before (the box ended, the count restarted). */
  afterABox: number;
  /** Increments made right after the clock was moved exactly onto an edge (a hit's expiry, a period's or a box's end). */
  onAnEdge: number;
  /** Increments through each instance. */
  byInstance: number[];
}

async function sequence(seed: number, instances: FloodgateThrottlerStorage[], coverage: Coverage): Promise<void> {
  const next = random(seed);
  const boxed = new Set<string>();
  let onEdge = false;
  const pick = <T>(list: T[]): T => list[Math.floor(next() * list.length)]!;
  const memory = new ThrottlerStorageService();
  const log: string[] = [`seed ${seed}, starting at T0 + ${Date.now() - T0} ms`];
  try {
    const names = ['default', 'short', 'long'].slice(0, 1 + Math.floor(next() * 3));
    const throttlers = new Map(names.map((name) => [name, pickLimits(next)]));
    const routes = ['a', 'b', 'c'].slice(0, 1 + Math.floor(next() * 3)).map((route) => {
      // A route's @Throttle() overrides some throttlers' limit, ttl or block duration.
      const overrides = new Map<string, Limits>();
      for (const name of names) if (next() < 0.5) overrides.set(name, pickLimits(next));
      return { route, overrides };
    });
    const trackers = ['10.0.0.1', '10.0.0.2', '10.0.0.3'].slice(0, 1 + Math.floor(next() * 3));
    for (const [name, l] of throttlers) log.push(`throttler ${name}: ${JSON.stringify(l)}`);
    for (const r of routes) for (const [name, l] of r.overrides) log.push(`route ${r.route} overrides ${name}: ${JSON.stringify(l)}`);

    for (let step = 0; step < STEPS; step++) {
      const roll = next();
      if (roll < 0.6) {
        // A request: the guard increments each throttler in turn and stops at the first that blocks.
        const { route, overrides } = pick(routes);
        const tracker = pick(trackers);
        for (const name of names) {
          const { limit, ttl, blockDuration } = overrides.get(name) ?? throttlers.get(name)!;
          const key = `s${seed}:${route}:${name}:${tracker}`;
          const instance = Math.floor(next() * instances.length);
          const mem = await memory.increment(key, ttl, limit, blockDuration, name);
          const fg = await instances[instance]!.increment(key, ttl, limit, blockDuration, name);
          const call = `increment(${key}, ttl ${ttl}, limit ${limit}, block ${blockDuration}, ${name}) via instance ${instance}`;
          log.push(`  ${call}\n      memory   ${JSON.stringify(mem)}\n      floodgate ${JSON.stringify(fg)}`);
          const differs = disagreement(mem, fg);
          if (differs !== null) throw new Error(`${differs} differs at step ${step}`);
          coverage.increments += 1;
          coverage.byInstance[instance]! += 1;
          if (onEdge) coverage.onAnEdge += 1;
          if (mem.isBlocked) {
            if (blockDuration <= 0) coverage.deniedNoBox += 1;
            else if (blockDuration < ttl) coverage.deniedShorterBox += 1;
            else if (blockDuration === ttl) coverage.deniedEqualBox += 1;
            else coverage.deniedLongerBox += 1;
            if (blockDuration > 0) boxed.add(key);
            break;
          }
          if (boxed.delete(key)) coverage.afterABox += 1;
        }
      } else {
        const now = Date.now();
        const edges = boundaries(memory, now);
        let to: number;
        const kind = next();
        onEdge = false;
        if (kind < 0.55 && edges.length > 0) {
          const delta = pick([-1, 0, 0, 1]);
          onEdge = delta === 0;
          to = pick(edges) + delta;
        } else if (kind < 0.85) to = now + 1 + Math.floor(next() * 1500);
        else to = now + Math.floor(next() * 3 * pick(TTLS));
        const ms = Math.max(0, to - now);
        log.push(`advance ${ms} ms (to T0 + ${now + ms - T0})`);
        await advance(ms);
      }
    }
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    throw new Error(`differential sequence ${seed} failed: ${detail}\n(run it alone with FLOODGATE_DIFF_SEED=${seed})\n${log.join('\n')}`);
  } finally {
    memory.onApplicationShutdown();
  }
}

describe('FloodgateThrottlerStorage answers as @nestjs/throttler 6\'s in-memory storage', () => {
  it(`on ${ONLY_SEED === undefined ? SEQUENCES : 1} seeded random sequences, step by step, two app instances sharing the count`, async (t) => {
    const instances = [0, 1].map(() => new FloodgateThrottlerStorage({ url: server.url, deadline: 10_000, breaker: false }));
    const seeds = ONLY_SEED === undefined ? Array.from({ length: SEQUENCES }, (_, i) => i + 1) : [ONLY_SEED];
    const coverage: Coverage = {
      increments: 0,
      deniedNoBox: 0,
      deniedShorterBox: 0,
      deniedEqualBox: 0,
      deniedLongerBox: 0,
      afterABox: 0,
      onAnEdge: 0,
      byInstance: [0, 0],
    };
    for (const seed of seeds) await sequence(seed, instances, coverage);
    t.diagnostic(`coverage: ${JSON.stringify(coverage)}`);
    for (const storage of instances) {
      const stats = storage.client.stats();
      assert.equal(stats.failedOpen + stats.failedClosed, 0, 'every answer was the server\'s');
    }
    if (seeds.length >= 100) {
      for (const [what, count] of Object.entries(coverage)) {
        const counts = Array.isArray(count) ? count : [count];
        assert.ok(counts.every((c) => c >= 20), `the sequences exercised ${what} at least 20 times: ${JSON.stringify(count)}`);
      }
    }
  });
});
