import type { Decision, Descriptors } from './client.js';

/**
 * Where the user and tenant of an incoming request come from: the authenticated `req.user` when
 * present (the first of its fields that is set), else request headers. Headers are sent by the
 * client: trust them only behind a gateway that sets them after authentication.
 */
export interface IdentityOptions {
  /** Fields of `req.user` holding the user id, first set wins. Default `['id', 'sub']`. */
  userFields?: string[];
  /** Fields of `req.user` holding the tenant id. Default `['tenantId', 'tenant']`. */
  tenantFields?: string[];
  /** Header holding the user id when there is no `req.user`; `false` for none. Default `x-user-id`. */
  userHeader?: string | false;
  /** Header holding the tenant id when there is no `req.user`; `false` for none. Default `x-tenant-id`. */
  tenantHeader?: string | false;
}

/** The parts of an incoming request (Express's or Node's) that descriptors are made of. */
export interface IncomingLike {
  method?: string;
  headers: Record<string, string | string[] | undefined>;
  ip?: string;
  socket?: { remoteAddress?: string };
  user?: unknown;
  baseUrl?: string;
  route?: { path?: unknown };
}

function field(user: unknown, names: string[]): string | undefined {
  if (typeof user !== 'object' || user === null) return undefined;
  for (const name of names) {
    const value = (user as Record<string, unknown>)[name];
    if (typeof value === 'string' && value !== '') return value;
    if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  }
  return undefined;
}

function header(req: IncomingLike, name: string | false): string | undefined {
  if (name === false) return undefined;
  const value = req.headers[name.toLowerCase()];
  const first = Array.isArray(value) ? value[0] : value;
  return first === undefined || first === '' ? undefined : first;
}

/**
 * The default descriptors of an incoming request: `method`, `route` (`POST /chat`: the matched
 * route's template, never the raw URL; absent when no route matched yet), `ip`, and `user` and
 * `tenant` as {@link IdentityOptions} say.
 */
export function describeRequest(req: IncomingLike, identity: IdentityOptions = {}): Descriptors {
  const descriptors: Descriptors = {};
  const method = (req.method ?? 'GET').toUpperCase();
  descriptors.method = method;
  if (req.route !== undefined && typeof req.route.path === 'string') {
    descriptors.route = `${method} ${(req.baseUrl ?? '') + req.route.path}`;
  }
  const ip = req.ip ?? req.socket?.remoteAddress;
  if (ip !== undefined) descriptors.ip = ip;
  const hasUser = typeof req.user === 'object' && req.user !== null;
  const user = hasUser
    ? field(req.user, identity.userFields ?? ['id', 'sub'])
    : header(req, identity.userHeader ?? 'x-user-id');
  const tenant = hasUser
    ? field(req.user, identity.tenantFields ?? ['tenantId', 'tenant'])
    : header(req, identity.tenantHeader ?? 'x-tenant-id');
  if (user !== undefined) descriptors.user = user;
  if (tenant !== undefined) descriptors.tenant = tenant;
  return descriptors;
}

/** The `application/problem+json` body of a 429, as Floodgate's own front doors write it. */
export interface RateLimitProblem {
  type: string;
  title: string;
  status: 429;
  detail: string;
  retry_after: number;
  limit?: number;
  remaining?: number;
  reset?: number;
}

/** The problem type of a request denied by a rate limit. */
export const RATE_LIMITED_TYPE = 'https://floodgate.dev/problems/rate-limited';

/**
 * The 429 body for a denied decision: `retry_after` in seconds (at least 1), and the numbers of
 * the denying limit that makes the client wait longest. Never names rules or keys.
 */
export function problemFor(decision: Decision, now: number = Date.now()): RateLimitProblem {
  const retryAfter = decision.retryAfterSeconds ?? Math.max(1, Math.ceil((decision.retryAfterMs ?? 1000) / 1000));
  const unit = retryAfter === 1 ? 'second' : 'seconds';
  const problem: RateLimitProblem = {
    type: RATE_LIMITED_TYPE,
    title: 'Too Many Requests',
    status: 429,
    detail: `Rate limit exceeded; retry in ${retryAfter} ${unit}.`,
    retry_after: retryAfter,
  };
  let denying: Decision['limits'][number] | undefined;
  for (const limit of decision.limits) {
    if (limit.outcome !== 'denied') continue;
    if (denying === undefined || (limit.retryAfterMs ?? 0) > (denying.retryAfterMs ?? 0)) denying = limit;
  }
  if (denying !== undefined) {
    problem.limit = denying.limit;
    problem.remaining = denying.remaining;
    problem.reset = Math.ceil((now + denying.resetAfterMs) / 1000);
  }
  return problem;
}
