import { Catch, HttpException, HttpStatus, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { Decision, RateLimitProblem } from '@floodgate/client';
import { problemFor } from '@floodgate/client';

/**
 * The 429 the guard throws: its response is the problem+json body; the guard has already set
 * `Retry-After`, the rate-limit headers and the problem content type on the response, and
 * {@link FloodgateRateLimitFilter} sends it. A filter of your own can read `decision` and `headers`.
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

/** The parts of an HTTP response (Node's, Express's) the filter writes. */
interface ServerResponseLike {
  headersSent: boolean;
  statusCode: number;
  setHeader(name: string, value: string): unknown;
  end(body?: string): unknown;
}

/** The content type of a 429's body. */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';

/**
 * Sends a {@link FloodgateRateLimitException} as Floodgate's own front doors send a 429: its
 * headers and its problem+json body, with `content-type: application/problem+json` on every
 * NestJS major (the default filter of some would send it as `application/json`). Registered by
 * `FloodgateModule`; a filter of your own on a controller or a handler comes first.
 */
@Catch(FloodgateRateLimitException)
export class FloodgateRateLimitFilter implements ExceptionFilter {
  catch(exception: FloodgateRateLimitException, host: ArgumentsHost): void {
    const res = host.switchToHttp().getResponse<ServerResponseLike>();
    if (res.headersSent) {
      res.end();
      return;
    }
    res.statusCode = exception.getStatus();
    for (const [name, value] of Object.entries(exception.headers)) res.setHeader(name, value);
    res.setHeader('content-type', PROBLEM_CONTENT_TYPE);
    res.end(JSON.stringify(exception.problem));
  }
}
