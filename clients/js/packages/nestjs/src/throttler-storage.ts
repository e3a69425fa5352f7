import { FloodgateClient, type FloodgateClientOptions } from '@floodgate/client';

/**
 * What `ThrottlerStorage.increment` returns: `@nestjs/throttler` 6 reads all four fields, 5 reads
 * `totalHits` and `timeToExpire`.
 */
export interface ThrottlerStorageRecord {
  totalHits: number;
  timeToExpire: number;
  isBlocked: boolean;
  timeToBlockExpire: number;
}

/** Options of {@link FloodgateThrottlerStorage}: a client's, or a client. */
export type FloodgateThrottlerStorageOptions = FloodgateClientOptions | { client: FloodgateClient };

/**
 * `@nestjs/throttler`'s storage on Floodgate: `ThrottlerModule.forRoot({throttlers, storage: new
 * FloodgateThrottlerStorage({url})})`, and every `@Throttle()` counts in Floodgate, shared by all
 * instances of the app.
 *
 * Each `increment(key, ttl, limit, blockDuration, throttlerName)` is one check with the
 * descriptors `throttler` (the throttler's name), `throttler_key` (the guard's key: route and
 * tracker), `throttler_limit` and `throttler_ttl` (ms). The server's configuration holds the rule
 * that counts them, with the same limit and window, e.g.
 *
 * ```yaml
 * descriptors: [throttler, throttler_key, throttler_limit, throttler_ttl]
 * rules:
 * - name: throttler-default
 *   match: { throttler: default }
 *   key: [throttler_key]
 *   algorithm: fixed_window
 *   limit: 10
 *   window: 60s
 * ```
 *
 * The storage checks that a rule with that `limit` applied, and throws a clear error otherwise
 * (no rule, or a different limit), rather than enforcing something else than `@Throttle()` says.
 *
 * The answer follows the throttler's contract: `totalHits` counts this hit (`limit - remaining`,
 * `limit + 1` when denied), `timeToExpire` is seconds until the rule's window resets, and a denied
 * hit is `isBlocked` with `timeToBlockExpire` = Floodgate's exact `Retry-After` in seconds. A
 * denied hit consumes nothing (Floodgate's all-or-nothing rule), so a key is blocked until the
 * rule grants again: with `blockDuration` equal to `ttl` (the throttler's default) or 0 that is
 * what the in-memory storage does, give or take the algorithm; a `blockDuration` longer than `ttl`
 * (a penalty box) is refused with an error, since no rule expresses it.
 *
 * It implements `ThrottlerStorage` of `@nestjs/throttler` 6 and 5 structurally (this package
 * does not import `@nestjs/throttler`, an optional peer). Throttler 5 calls `increment(key, ttl)`
 * with no limit or name and blocks when `totalHits` exceeds its own limit: the check then sends
 * `throttler_key` and `throttler_ttl` only, so the rule matches `{ throttler_ttl: "60000" }` and
 * must have the throttler's limit (the storage cannot compare them); `totalHits` counts the
 * hits in the rule's window, and a hit Floodgate denies is reported as more than any limit, with
 * `timeToExpire` = Floodgate's `Retry-After` (which throttler 5 sends as its own).
 *
 * When Floodgate gives no verdict in time, the client's fail mode decides: `open` lets the hit
 * through, `closed` blocks it for `failClosedRetryAfterMs`.
 */
export class FloodgateThrottlerStorage {
  readonly client: FloodgateClient;

  constructor(options: FloodgateThrottlerStorageOptions) {
    this.client = 'client' in options ? options.client : new FloodgateClient(options);
  }

  /** `@nestjs/throttler` 6. */
  increment(key: string, ttl: number, limit: number, blockDuration: number, throttlerName: string): Promise<ThrottlerStorageRecord>;
  /** `@nestjs/throttler` 5: no limit, block duration or throttler name. */
  increment(key: string, ttl: number): Promise<ThrottlerStorageRecord>;
  async increment(
    key: string,
    ttl: number,
    limit?: number,
    blockDuration?: number,
    throttlerName?: string,
  ): Promise<ThrottlerStorageRecord> {
    if (limit === undefined || blockDuration === undefined || throttlerName === undefined) {
      return this.incrementUnnamed(key, ttl);
    }
    if (blockDuration > ttl) {
      throw new Error(
        `FloodgateThrottlerStorage: throttler "${throttlerName}" has blockDuration ${blockDuration} ms > ttl ${ttl} ms; ` +
          'Floodgate blocks a key until its rule grants again (blockDuration = ttl); use a longer window or a token bucket instead',
      );
    }
    const decision = await this.client.check({
      throttler: throttlerName,
      throttler_key: key,
      throttler_limit: String(limit),
      throttler_ttl: String(ttl),
    });
    if (decision.failure !== null) {
      return decision.allowed
        ? { totalHits: 0, timeToExpire: Math.ceil(ttl / 1000), isBlocked: false, timeToBlockExpire: 0 }
        : {
            totalHits: limit + 1,
            timeToExpire: Math.ceil(ttl / 1000),
            isBlocked: true,
            timeToBlockExpire: decision.retryAfterSeconds ?? 1,
          };
    }
    const rule = decision.limits.find((l) => l.limit === limit);
    if (rule === undefined) {
      const found = decision.limits.map((l) => `${l.name} (limit ${l.limit})`).join(', ') || 'none';
      throw new Error(
        `FloodgateThrottlerStorage: no Floodgate rule with limit ${limit} applies to throttler "${throttlerName}" ` +
          `(ttl ${ttl} ms); rules that applied: ${found}. Add a rule matching { throttler: ${throttlerName} } ` +
          `keyed on [throttler_key] with limit ${limit} and window ${ttl} ms`,
      );
    }
    const timeToExpire = Math.max(0, Math.ceil(rule.resetAfterMs / 1000));
    if (decision.allowed) {
      return { totalHits: limit - rule.remaining, timeToExpire, isBlocked: false, timeToBlockExpire: 0 };
    }
    return {
      totalHits: limit + 1,
      timeToExpire,
      isBlocked: true,
      timeToBlockExpire: decision.retryAfterSeconds ?? 1,
    };
  }

  /** `increment(key, ttl)` of `@nestjs/throttler` 5, whose guard compares `totalHits` with its limit. */
  private async incrementUnnamed(key: string, ttl: number): Promise<ThrottlerStorageRecord> {
    const decision = await this.client.check({ throttler_key: key, throttler_ttl: String(ttl) });
    const blocked = (retryAfterSeconds: number): ThrottlerStorageRecord => ({
      totalHits: Number.MAX_SAFE_INTEGER,
      timeToExpire: retryAfterSeconds,
      isBlocked: true,
      timeToBlockExpire: retryAfterSeconds,
    });
    if (decision.failure !== null) {
      return decision.allowed
        ? { totalHits: 0, timeToExpire: Math.ceil(ttl / 1000), isBlocked: false, timeToBlockExpire: 0 }
        : blocked(decision.retryAfterSeconds ?? 1);
    }
    if (!decision.allowed) return blocked(decision.retryAfterSeconds ?? 1);
    if (decision.limits.length === 0) {
      throw new Error(
        `FloodgateThrottlerStorage: no Floodgate rule applies to a throttler with ttl ${ttl} ms ` +
          `(@nestjs/throttler 5 names neither the throttler nor its limit). Add a rule matching ` +
          `{ throttler_ttl: "${ttl}" } keyed on [throttler_key] with the throttler's limit and window ${ttl} ms`,
      );
    }
    const tightest = decision.limits.reduce((a, b) => (b.remaining < a.remaining ? b : a));
    return {
      totalHits: tightest.limit - tightest.remaining,
      timeToExpire: Math.max(0, Math.ceil(tightest.resetAfterMs / 1000)),
      isBlocked: false,
      timeToBlockExpire: 0,
    };
  }
}
