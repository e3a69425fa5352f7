/**
 * A retry budget: retries are allowed at most a share of the calls made lately, so that a service
 * that fails is not sent a second wave of retries on top of its traffic (Finagle's and linkerd's
 * retry budgets).
 */
import { processClock } from './breaker.js';

/** How many retries a budget allows. */
export interface RetryBudgetOptions {
  /** The share of recent calls that may be retried, from 0 to 1. Default 0.1. */
  ratio?: number;
  /**
   * Retries allowed per second of `windowMs` whatever the traffic, so that a quiet client can still
   * retry. Default 1 (10 retries in the default window).
   */
  minPerSecond?: number;
  /** How far back calls and retries are counted (ms). Default 10 000. */
  windowMs?: number;
}

const BUCKETS = 10;

/**
 * The calls and retries of the last `windowMs` (ten buckets), on a clock of milliseconds.
 * `deposit()` for every call sent, retries included; `withdraw()` before a retry: granted while
 * the retries of the window stay within `ratio` × the calls that were not retries, plus
 * `minPerSecond` × the window's seconds.
 */
export class RetryBudget {
  readonly ratio: number;
  readonly minPerSecond: number;
  readonly windowMs: number;
  private granted = 0;
  private refused = 0;
  private readonly buckets = Array.from({ length: BUCKETS }, () => ({ span: -1, calls: 0, retries: 0 }));

  /**
   * A budget of `options`. Settings out of range throw a `RangeError` naming them
   * (`retryBudget.ratio must be from 0 to 1, got 1.5`).
   */
  constructor(
    options: RetryBudgetOptions = {},
    private readonly clock: () => number = processClock,
  ) {
    const ratio = options.ratio ?? 0.1;
    if (!(ratio >= 0 && ratio <= 1)) {
      throw new RangeError(`retryBudget.ratio must be from 0 to 1 (a share of the calls), got ${ratio}`);
    }
    const minPerSecond = options.minPerSecond ?? 1;
    if (!Number.isSafeInteger(minPerSecond) || minPerSecond < 0) {
      throw new RangeError(`retryBudget.minPerSecond must be a whole number ≥ 0, got ${minPerSecond}`);
    }
    const windowMs = options.windowMs ?? 10_000;
    if (!Number.isFinite(windowMs) || windowMs <= 0) {
      throw new RangeError(`retryBudget.windowMs must be a positive number of milliseconds, got ${windowMs}`);
    }
    this.ratio = ratio;
    this.minPerSecond = minPerSecond;
    this.windowMs = windowMs;
  }

  /** A call was sent (a first attempt or a retry). */
  deposit(): void {
    this.current().calls += 1;
  }

  /** Asks for a retry: whether it may be sent. */
  withdraw(): boolean {
    const bucket = this.current();
    let calls = 0;
    let retries = 0;
    for (const b of this.buckets) {
      if (b.span >= 0 && b.span <= bucket.span && bucket.span - b.span < BUCKETS) {
        calls += b.calls;
        retries += b.retries;
      }
    }
    // In millionths, so that 10 % of 30 calls is exactly 3 retries.
    const allowed = Math.round(this.minPerSecond * this.windowMs * 1000) + Math.round(this.ratio * 1e6) * (calls - retries);
    const ok = (retries + 1) * 1e6 <= allowed;
    if (ok) {
      bucket.retries += 1;
      this.granted += 1;
    } else {
      this.refused += 1;
    }
    return ok;
  }

  /** Retries granted and refused since it was made. */
  counts(): { granted: number; refused: number } {
    return { granted: this.granted, refused: this.refused };
  }

  private current(): { span: number; calls: number; retries: number } {
    const span = Math.floor(this.clock() / Math.max(this.windowMs / BUCKETS, 1e-3));
    const bucket = this.buckets[span % BUCKETS]!;
    if (bucket.span !== span) Object.assign(bucket, { span, calls: 0, retries: 0 });
    return bucket;
  }
}
