import {
  FloodgateClient,
  FloodgateProblemError,
  FloodgateUnavailableError,
  type Decision,
  type FloodgateClientOptions,
} from '@floodgate/client';

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

/** Settings of {@link FloodgateThrottlerStorage} beside its client's. */
export interface ThrottlerStorageSettings {
  /**
   * `@nestjs/throttler` 5 only, which keeps its limit to itself: hits are counted up to this many
   * per key and ttl (the limit stated with each hit), so it must be above every throttler's limit
   * and at most the template rule's `limit.max`. Default 100000, the built-in policy's bound.
   */
  maxCountedHits?: number;
}

/** Options of {@link FloodgateThrottlerStorage}: a client's, or a client; and its settings. */
export type FloodgateThrottlerStorageOptions = (FloodgateClientOptions | { client: FloodgateClient }) & ThrottlerStorageSettings;

/** The descriptor of the template rule that counts hits (`throttler` in the built-in policy). */
const HITS = 'throttler_key';
/** The descriptor of the template rule that keeps the reset time (`throttler-expiry`). */
const PERIOD = 'throttler_expiry';

/**
 * The server does not serve a throttler as it states itself: its configuration lacks the template
 * rules (`examples/throttler.yaml`), or their bounds are below what the throttler states, or the
 * client lacks the `state_limits` scope. Thrown rather than enforcing something other than what
 * `@Throttle()` says; `cause` is the server's problem (`FloodgateProblemError`) when it refused.
 */
export class ThrottlerTemplateError extends Error {
  override readonly name = 'ThrottlerTemplateError';
  /** The descriptor the server did not serve: `throttler_key` or `throttler_expiry`. */
  readonly descriptor: string;

  constructor(descriptor: string, message: string, options: { cause?: unknown } = {}) {
    super(message, options);
    this.descriptor = descriptor;
  }
}

const TEMPLATE_HINT =
  'The server needs the template rules, each taking its values from requests (the built-in policy has ' +
  'them; a configuration of your own, those of @floodgate/nestjs/examples/throttler.yaml), and with ' +
  '`auth:`, a client with the state_limits scope';

/** A refusal of the server (422, 403) said as what the throttler needs of its configuration. */
function refused(error: unknown, descriptor: string, what: string): unknown {
  if (!(error instanceof FloodgateProblemError)) return error;
  return new ThrottlerTemplateError(
    descriptor,
    `FloodgateThrottlerStorage: the server refused ${what} (${error.status}: ${error.detail}). ${TEMPLATE_HINT}`,
    { cause: error },
  );
}

/**
 * `@nestjs/throttler`'s storage on Floodgate: `ThrottlerModule.forRoot({throttlers, storage: new
 * FloodgateThrottlerStorage({url})})`, and every `@Throttle()` counts in Floodgate, shared by all
 * instances of the app, with no rule per throttler: each hit states its limit, ttl and block
 * duration to two template rules, which the server's built-in policy has (and
 * `examples/throttler.yaml` holds for a configuration of your own).
 *
 * `increment(key, ttl, limit, blockDuration, throttlerName)` (`@nestjs/throttler` 6) sends, at
 * once, a check of `{throttler_key: <name>:<key>}` stating `{limit, windowMs: ttl, blockForMs:
 * blockDuration}` — a sliding log: each hit counts for `ttl`, the hit that would exceed the limit
 * is denied and, with a `blockDuration`, boxes the key for exactly that long (longer or shorter
 * than `ttl`), after which it counts afresh — and a report of `{throttler_expiry: <name>:<key>}`
 * stating `{windowMs: ttl}`, a budget whose reset time is the throttler's `timeToExpire` (a period
 * started by a hit and restarted by the first hit at or after its end). It answers as the
 * in-memory `ThrottlerStorageService` does, in every field its guard reads (a differential test
 * holds them equal): `isBlocked`; `totalHits` (`limit - remaining`) and `timeToExpire` when not
 * blocked; `timeToBlockExpire` (the exact `Retry-After`, in seconds) when blocked. While blocked,
 * `totalHits` is `limit + 1` (the in-memory storage's goes down as earlier hits expire) and
 * `timeToExpire` is the period's; not blocked, `timeToBlockExpire` is 0.
 *
 * `increment(key, ttl)` (`@nestjs/throttler` 5, which blocks when `totalHits` exceeds its own
 * limit) counts every hit for `ttl` (a check of `{throttler_key: key}` stating `{limit:
 * maxCountedHits, windowMs: ttl}`) and answers `timeToExpire` as throttler 5's own storage does:
 * whole seconds rounded down of a period that restarts when less than a second of it is left (a
 * report of `{throttler_expiry: key}` stating `{windowMs: ttl - 999}`; 0 when `ttl` < 1000).
 *
 * `limit`, `ttl` and `blockDuration` must be whole milliseconds, `limit` and `ttl` at least 1:
 * anything else throws `StatedLimitError` (a `blockDuration` ≤ 0 is no box, as for the
 * throttler). When Floodgate gives no verdict in time, the client's fail mode decides: `open` lets
 * the hit through (`totalHits` 0), `closed` blocks it for `failClosedRetryAfterMs`. A report that
 * gets no answer leaves `timeToExpire` at the ttl's seconds (counted in `client.stats()`).
 */
export class FloodgateThrottlerStorage {
  readonly client: FloodgateClient;
  private readonly maxCountedHits: number;
  /** `<name>:` of each throttler name seen, the name escaped (`:` never appears in it). */
  private readonly prefixes = new Map<string, string>();

  constructor(options: FloodgateThrottlerStorageOptions) {
    const { maxCountedHits, ...rest } = options;
    this.client = 'client' in rest ? rest.client : new FloodgateClient(rest);
    this.maxCountedHits = maxCountedHits ?? 100_000;
    if (!Number.isSafeInteger(this.maxCountedHits) || this.maxCountedHits < 1) {
      throw new RangeError(`FloodgateThrottlerStorage: maxCountedHits must be a whole number ≥ 1, got ${maxCountedHits}`);
    }
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
      return this.incrementCounting(key, ttl);
    }
    const id = this.prefix(throttlerName) + key;
    const [checked, reported] = await Promise.allSettled([
      this.client.check({ [HITS]: id }, { stated: { limit, windowMs: ttl, blockForMs: blockDuration > 0 ? blockDuration : 0 } }),
      this.client.report({ [PERIOD]: id }, { stated: { windowMs: ttl } }),
    ]);
    const what = `throttler "${throttlerName}" (limit ${limit}, ttl ${ttl} ms, blockDuration ${blockDuration} ms)`;
    if (checked.status === 'rejected') throw refused(checked.reason, HITS, what);
    const decision = checked.value;
    if (decision.failure !== null) {
      return decision.allowed
        ? { totalHits: 0, timeToExpire: Math.ceil(ttl / 1000), isBlocked: false, timeToBlockExpire: 0 }
        : { totalHits: limit + 1, timeToExpire: Math.ceil(ttl / 1000), isBlocked: true, timeToBlockExpire: decision.retryAfterSeconds ?? 1 };
    }
    const timeToExpire = periodSeconds(reported, ttl, what);
    if (!decision.allowed) {
      return { totalHits: limit + 1, timeToExpire, isBlocked: true, timeToBlockExpire: Math.ceil((decision.retryAfterMs ?? 1000) / 1000) };
    }
    const rule = decision.limits.find((l) => l.limit === limit);
    if (rule === undefined) {
      throw new ThrottlerTemplateError(
        HITS,
        `FloodgateThrottlerStorage: no Floodgate rule counted ${what} with its limit ` +
          `(rules that applied: ${decision.limits.map((l) => `${l.name} (limit ${l.limit})`).join(', ') || 'none'}). ${TEMPLATE_HINT}`,
      );
    }
    return { totalHits: limit - rule.remaining, timeToExpire, isBlocked: false, timeToBlockExpire: 0 };
  }

  /**
   * `increment(key, ttl)` of `@nestjs/throttler` 5: every hit counts for `ttl`, and its guard
   * compares `totalHits` with its limit.
   */
  private async incrementCounting(key: string, ttl: number): Promise<ThrottlerStorageRecord> {
    const [checked, reported] = await Promise.allSettled([
      this.client.check({ [HITS]: key }, { stated: { limit: this.maxCountedHits, windowMs: ttl } }),
      // Throttler 5's period restarts once less than a second of it is left, and it answers the
      // seconds left rounded down: a period 999 ms shorter, rounded up, is the same to the ms.
      ttl > 999 ? this.client.report({ [PERIOD]: key }, { stated: { windowMs: ttl - 999 } }) : Promise.resolve(null),
    ]);
    const what = `a throttler with ttl ${ttl} ms (@nestjs/throttler 5, counted up to ${this.maxCountedHits} hits)`;
    if (checked.status === 'rejected') throw refused(checked.reason, HITS, what);
    const decision = checked.value;
    const blocked = (retryAfterSeconds: number): ThrottlerStorageRecord => ({
      totalHits: Number.MAX_SAFE_INTEGER,
      timeToExpire: retryAfterSeconds,
      isBlocked: true,
      timeToBlockExpire: retryAfterSeconds,
    });
    if (decision.failure !== null) {
      return decision.allowed
        ? { totalHits: 0, timeToExpire: Math.floor(ttl / 1000), isBlocked: false, timeToBlockExpire: 0 }
        : blocked(decision.retryAfterSeconds ?? 1);
    }
    const timeToExpire = ttl > 999 ? periodSeconds(reported, ttl - 999, what) : 0;
    if (!decision.allowed) return blocked(Math.max(1, timeToExpire));
    const rule = decision.limits.find((l) => l.limit === this.maxCountedHits);
    if (rule === undefined) {
      throw new ThrottlerTemplateError(
        HITS,
        `FloodgateThrottlerStorage: no Floodgate rule counted ${what} ` +
          `(rules that applied: ${decision.limits.map((l) => `${l.name} (limit ${l.limit})`).join(', ') || 'none'}). ${TEMPLATE_HINT}`,
      );
    }
    return { totalHits: this.maxCountedHits - rule.remaining, timeToExpire, isBlocked: false, timeToBlockExpire: 0 };
  }

  private prefix(throttlerName: string): string {
    let prefix = this.prefixes.get(throttlerName);
    if (prefix === undefined) {
      prefix = `${encodeURIComponent(throttlerName)}:`;
      this.prefixes.set(throttlerName, prefix);
    }
    return prefix;
  }
}

/**
 * The seconds left of the period a report answered (its budget's reset time, rounded up); the
 * period's own length when the report got no answer (counted by the client). A report no rule
 * counted, or one the server refused, is thrown: the configuration lacks the template.
 */
function periodSeconds(reported: PromiseSettledResult<Decision | null>, periodMs: number, what: string): number {
  if (reported.status === 'rejected') {
    if (reported.reason instanceof FloodgateUnavailableError) return Math.ceil(periodMs / 1000);
    throw refused(reported.reason, PERIOD, `the reset time of ${what}`);
  }
  const rule = reported.value?.limits[0];
  if (rule === undefined) {
    throw new ThrottlerTemplateError(
      PERIOD,
      `FloodgateThrottlerStorage: no Floodgate rule counted ${PERIOD}, which keeps the reset time of ${what}. ${TEMPLATE_HINT}`,
    );
  }
  return Math.ceil(rule.resetAfterMs / 1000);
}
