/**
 * Floodgate for Express: `floodgate()` checks every request it sees against a Floodgate server,
 * passes the rate-limit headers on, and answers a denied request with 429, `Retry-After` and a
 * problem+json body.
 */
import {
  FloodgateClient,
  describeRequest,
  problemFor,
  releaseOnEnd,
  type Decision,
  type Descriptors,
  type FailMode,
  type IdentityOptions,
} from '@floodgate/client';
import type { NextFunction, Request, RequestHandler, Response } from 'express';

/** Options of {@link floodgate}. */
export interface FloodgateMiddlewareOptions {
  /** The server's base URL (a client is made for it), or… */
  url?: string;
  /** …a client to share between middlewares. */
  client?: FloodgateClient;
  /** How long a check may take (ms) before the fail mode decides. Default 50. */
  deadline?: number;
  /** What to decide when Floodgate gives no verdict in time. Default `open`. */
  failMode?: FailMode;
  /** Where `user` and `tenant` come from (`req.user`, else headers). */
  identity?: IdentityOptions;
  /**
   * Sent as the descriptor `rule`, so that rules can `match: { rule: <name> }` this middleware's
   * requests only.
   */
  rule?: string;
  /** Descriptors of your own, added to (and overriding) the defaults. */
  descriptors?: (req: Request) => Descriptors | Promise<Descriptors>;
  /** The cost of a request. Default 1. */
  cost?: number | ((req: Request) => number);
  /** Requests to let through unchecked (e.g. health probes). */
  skip?: (req: Request) => boolean;
  /** Pass the rate-limit headers on allowed responses too. Default true. */
  headersOnAllowed?: boolean;
}

/** The options of a check with no cost of its own: one object for every such check. */
const NO_OPTIONS = Object.freeze({});

/** The decision of the request, for handlers after the middleware. */
export function decisionOf(res: Response): Decision | undefined {
  return (res.locals as { floodgate?: Decision }).floodgate;
}

/**
 * The middleware. Mounted on a route (`app.post('/chat', floodgate(), handler)`), the `route`
 * descriptor is that route's template (`POST /chat`); mounted with `app.use`, no route has
 * matched yet, so there is no `route` descriptor unless `descriptors` adds one. Concurrency
 * permits an allowed check took are released when the response ends (`finish`, `close` or
 * `error`, once).
 */
export function floodgate(options: FloodgateMiddlewareOptions): RequestHandler {
  const client = clientOf(options);
  const headersOnAllowed = options.headersOnAllowed ?? true;
  return async (req: Request, res: Response, next: NextFunction) => {
    try {
      if (options.skip?.(req) === true) return next();
      const descriptors = describeRequest(req, options.identity);
      if (options.rule !== undefined) descriptors.rule = options.rule;
      if (options.descriptors !== undefined) Object.assign(descriptors, await options.descriptors(req));
      const cost = typeof options.cost === 'function' ? options.cost(req) : options.cost;
      const decision = await client.check(descriptors, cost === undefined ? NO_OPTIONS : { cost });
      (res.locals as { floodgate?: Decision }).floodgate = decision;
      if (decision.allowed) {
        if (decision.reservation !== null) releaseOnEnd(client, decision.reservation, res);
        if (headersOnAllowed) res.set(decision.headers);
        return next();
      }
      const problem = problemFor(decision);
      res.set(decision.headers);
      res.set('retry-after', String(problem.retry_after));
      res.status(429).type('application/problem+json').send(JSON.stringify(problem));
    } catch (error) {
      next(error);
    }
  };
}

function clientOf(options: FloodgateMiddlewareOptions): FloodgateClient {
  if (options.client !== undefined) {
    if (options.url !== undefined || options.deadline !== undefined || options.failMode !== undefined) {
      throw new TypeError('floodgate(): give either a client, or url/deadline/failMode to make one, not both');
    }
    return options.client;
  }
  if (options.url === undefined) throw new TypeError('floodgate(): url (or client) is required');
  const clientOptions: ConstructorParameters<typeof FloodgateClient>[0] = { url: options.url };
  if (options.deadline !== undefined) clientOptions.deadline = options.deadline;
  if (options.failMode !== undefined) clientOptions.failMode = options.failMode;
  return new FloodgateClient(clientOptions);
}
