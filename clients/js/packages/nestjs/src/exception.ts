import { HttpException, HttpStatus } from '@nestjs/common';
import type { Decision, RateLimitProblem } from '@floodgate/client';
import { problemFor } from '@floodgate/client';

/**
 * The 429 the guard throws: its response is the problem+json body; the guard has already set
 * `Retry-After`, the rate-limit headers and the problem content type on the response, so Nest's
 * exception filter sends them. A filter of your own can read `decision` and `headers`.
 */
export class FloodgateRateLimitException extends HttpException {
  /** The problem+json body. */
  readonly problem: RateLimitProblem;
  /** The headers of the 429 (lowercase names). */
  readonly headers: Record<string, string>;

  constructor(readonly decision: Decision) {
    const problem = problemFor(decision);
    super(problem, HttpStatus.TOO_MANY_REQUESTS);
    this.problem = problem;
    this.headers = { ...decision.headers, 'retry-after': String(problem.retry_after) };
  }
}
