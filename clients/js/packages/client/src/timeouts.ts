import { TimeoutError } from './errors.js';

/** The named timeout tiers and their defaults: `fast` 5 s, `standard` 30 s, `long` 120 s. */
export const DEFAULT_TIERS = { fast: 5_000, standard: 30_000, long: 120_000 } as const;

/** A tier name, or a number of milliseconds. */
export type Tier = keyof typeof DEFAULT_TIERS | number;

/** Work to time out: a promise, or a function given an `AbortSignal` that fires at the timeout. */
export type Timed<T> = Promise<T> | ((signal: AbortSignal) => Promise<T>);

/** `withTimeout` bound to tiers of your own (`{fast: 2_000}` overrides one, keeps the others). */
export function timeouts(tiers: Partial<Record<keyof typeof DEFAULT_TIERS, number>> = {}) {
  const table: Record<string, number> = { ...DEFAULT_TIERS };
  for (const [name, ms] of Object.entries(tiers)) {
    if (!(name in DEFAULT_TIERS)) {
      throw new RangeError(`timeouts: unknown tier ${JSON.stringify(name)} (fast, standard, long)`);
    }
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms <= 0) {
      throw new RangeError(`timeouts: tier ${name} must be a positive number of milliseconds, got ${ms}`);
    }
    table[name] = ms;
  }
  return function withTimeout<T>(work: Timed<T>, tier: Tier): Promise<T> {
    let name: string;
    let ms: number;
    if (typeof tier === 'number') {
      if (!Number.isFinite(tier) || tier <= 0) {
        throw new RangeError(`withTimeout: a timeout must be a positive number of milliseconds, got ${tier}`);
      }
      name = 'custom';
      ms = tier;
    } else {
      const found = table[tier];
      if (found === undefined) {
        throw new RangeError(`withTimeout: unknown tier ${JSON.stringify(tier)} (fast, standard, long)`);
      }
      name = tier;
      ms = found;
    }
    const controller = new AbortController();
    const promise = typeof work === 'function' ? work(controller.signal) : work;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        const error = new TimeoutError(name, ms);
        controller.abort(error);
        reject(error);
      }, ms);
      promise.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  };
}

/**
 * Rejects with a {@link TimeoutError} when `work` has not settled within the tier's time
 * (`fast` 5 s, `standard` 30 s, `long` 120 s, or a number of ms). A function is given an
 * `AbortSignal` that fires then, so the work can stop. A timed-out call's outcome is unknown:
 * {@link retry} does not retry it unless told the call is idempotent.
 */
export const withTimeout = timeouts();
