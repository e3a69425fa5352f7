/**
 * A circuit breaker: the state machine of Floodgate's own breakers (the store's and the gateway's,
 * `floodgate::breaker` in Rust), so that every client opens, probes and closes by the same rules.
 *
 * - **closed**: calls go through; their outcomes are counted over a sliding `windowMs` (in ten
 *   buckets). `consecutiveFailures` failures with no success between them open it, as does a share
 *   of failures of `failureRate` once `minCalls` were made in the window. A failure counts toward
 *   the streak only if its call was sent once the streak had begun: the calls in flight together
 *   when one stall made them all fail are one failure, not hundreds.
 * - **open** for `openForMs`: every call is refused at once.
 * - **half_open**: exactly one call goes through as a probe while the others are refused. Its
 *   success closes the breaker, its failure opens it for another `openForMs`. A probe that takes
 *   longer than `probeTimeoutMs` (hung, or its caller gone) no longer holds half-open.
 *
 * Time comes from `clock` (milliseconds, monotonic), so every transition is tested by hand.
 */

/** Where a breaker is. */
export type BreakerState = 'closed' | 'open' | 'half_open';

/** When a breaker opens and how it comes back. */
export interface BreakerOptions {
  /** Failures in a row that open it. Default 10. */
  consecutiveFailures?: number;
  /** The share of failed calls over `windowMs` that opens it, above 0 and at most 1. Default 0.5. */
  failureRate?: number;
  /** The fewest calls in the window for the rate to count. Default 20. */
  minCalls?: number;
  /** How far back calls are counted (ms). Default 10 000. */
  windowMs?: number;
  /** How long it stays open before one probe (ms). Default 2 000. */
  openForMs?: number;
  /** How long a probe may take before another call probes instead (ms). Default 1 000. */
  probeTimeoutMs?: number;
}

/** What a call may do: go through (reporting with `record`), go as the probe, or not go. */
export type Admission = { kind: 'call'; sent: number } | { kind: 'probe' } | { kind: 'reject' };

const BUCKETS = 10;

/** The monotonic process clock, in milliseconds. */
export const processClock = (): number => performance.now();

function whole(value: number, min: number, field: string): number {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${field} must be a whole number ≥ ${min}, got ${value}`);
  }
  return value;
}

function positive(value: number, field: string): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new RangeError(`${field} must be a positive number of milliseconds, got ${value}`);
  }
  return value;
}

/** The state machine (see the module's documentation). */
export class CircuitBreaker {
  readonly consecutiveFailures: number;
  readonly failureRate: number;
  readonly minCalls: number;
  readonly windowMs: number;
  readonly openForMs: number;
  readonly probeTimeoutMs: number;
  private current: BreakerState = 'closed';
  private openedAt = 0;
  /** When the probe in flight started; null when none is. */
  private probeStarted: number | null = null;
  private streak = 0;
  /** When the streak's first failure was seen; null when there is no streak. */
  private streakSince: number | null = null;
  private readonly buckets = Array.from({ length: BUCKETS }, () => ({ span: -1, calls: 0, failures: 0 }));

  /**
   * A closed breaker. Settings out of range throw a `RangeError` naming them
   * (`breaker.consecutiveFailures must be a whole number ≥ 1, got 0`).
   */
  constructor(
    options: BreakerOptions = {},
    private readonly clock: () => number = processClock,
    private readonly onChange?: (to: BreakerState) => void,
  ) {
    this.consecutiveFailures = whole(options.consecutiveFailures ?? 10, 1, 'breaker.consecutiveFailures');
    this.minCalls = whole(options.minCalls ?? 20, 1, 'breaker.minCalls');
    const rate = options.failureRate ?? 0.5;
    if (!(rate > 0 && rate <= 1)) {
      throw new RangeError(`breaker.failureRate must be above 0 and at most 1, got ${rate}`);
    }
    this.failureRate = rate;
    this.windowMs = positive(options.windowMs ?? 10_000, 'breaker.windowMs');
    this.openForMs = positive(options.openForMs ?? 2_000, 'breaker.openForMs');
    this.probeTimeoutMs = positive(options.probeTimeoutMs ?? 1_000, 'breaker.probeTimeoutMs');
  }

  /** Where it is now. */
  get state(): BreakerState {
    return this.current;
  }

  /** While open: how long until the probe may go (0 once it may); null when not open. */
  openRemainingMs(): number | null {
    if (this.current !== 'open') return null;
    return Math.max(0, this.openedAt + this.openForMs - this.clock());
  }

  /** Whether a call may go now. */
  admit(): Admission {
    const now = this.clock();
    switch (this.current) {
      case 'closed':
        return { kind: 'call', sent: now };
      case 'open':
        if (now < this.openedAt + this.openForMs) return { kind: 'reject' };
        this.probeStarted = now;
        this.move('half_open');
        return { kind: 'probe' };
      case 'half_open':
        if (this.probeStarted === null || now >= this.probeStarted + this.probeTimeoutMs) {
          this.probeStarted = now;
          return { kind: 'probe' };
        }
        return { kind: 'reject' };
    }
  }

  /** Counts the outcome of a closed-state call sent at `sent` (from its admission). */
  record(failed: boolean, sent: number): void {
    const now = this.clock();
    const spanLength = Math.max(this.windowMs / BUCKETS, 1e-3);
    const span = Math.floor(now / spanLength);
    const bucket = this.buckets[span % BUCKETS]!;
    if (bucket.span !== span) Object.assign(bucket, { span, calls: 0, failures: 0 });
    bucket.calls += 1;
    if (!failed) {
      this.streak = 0;
      this.streakSince = null;
      return;
    }
    bucket.failures += 1;
    if (this.streakSince === null) {
      this.streakSince = now;
      this.streak = 1;
    } else if (sent >= this.streakSince) {
      this.streak += 1;
    }
    let calls = 0;
    let failures = 0;
    for (const b of this.buckets) {
      if (b.span >= 0 && b.span <= span && span - b.span < BUCKETS) {
        calls += b.calls;
        failures += b.failures;
      }
    }
    const tripped =
      (calls >= this.minCalls && failures >= this.failureRate * calls) || this.streak >= this.consecutiveFailures;
    if (tripped && this.current === 'closed') {
      this.openedAt = now;
      this.move('open');
    }
  }

  /** The probe's outcome: closed again, or open for another `openForMs`. */
  finishProbe(succeeded: boolean): void {
    this.probeStarted = null;
    this.streak = 0;
    this.streakSince = null;
    if (this.current !== 'half_open') return;
    if (succeeded) {
      for (const b of this.buckets) Object.assign(b, { calls: 0, failures: 0 });
      this.move('closed');
    } else {
      this.openedAt = this.clock();
      this.move('open');
    }
  }

  /** The probe ended with no outcome (its caller gave up): the next call may probe at once. */
  abandonProbe(): void {
    this.probeStarted = null;
  }

  private move(to: BreakerState): void {
    this.current = to;
    this.onChange?.(to);
  }
}
