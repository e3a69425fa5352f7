import type { CallOptions, Decision, Descriptors, FloodgateClient } from './client.js';

/** Options of {@link Sessions}. */
export interface SessionOptions {
  /** Descriptors sent with every step (e.g. `{tenant: 't1'}`). `session` is set by `step`. */
  descriptors?: Descriptors;
  /** Options of every step's check (deadline, fail mode). */
  call?: Omit<CallOptions, 'cost'>;
}

/** One agent step: allowed or not, and how many steps are left. */
export interface Step {
  allowed: boolean;
  /** Steps left in the session's budget (the most restrictive rule); null when none applied. */
  remaining: number | null;
  decision: Decision;
}

/**
 * Agent step budgets: `step(id)` is a check with the descriptor `session: id`, which a rule keyed
 * on `[session]` counts — `algorithm: budget` (e.g. `limit: 50`, `ttl: 24h`: 50 steps, never
 * refilled, gone a day after the session's first step).
 */
export class Sessions {
  constructor(
    private readonly client: FloodgateClient,
    private readonly options: SessionOptions = {},
  ) {}

  /** Spends `cost` (default 1) steps of session `id`'s budget, or says it is spent. */
  async step(id: string, cost = 1): Promise<Step> {
    if (typeof id !== 'string' || id === '') {
      throw new TypeError('session.step: the session id must be a non-empty string');
    }
    const decision = await this.client.check(
      { ...this.options.descriptors, session: id },
      { ...this.options.call, cost },
    );
    const remaining = decision.limits.length === 0 ? null : Math.min(...decision.limits.map((l) => l.remaining));
    return { allowed: decision.allowed, remaining, decision };
  }
}
