import { CircuitBreaker, processClock, type BreakerOptions, type BreakerState } from './breaker.js';
import { RetryBudget, type RetryBudgetOptions } from './budget.js';
import { retry, type RetryOptions } from './retry.js';
import { Sessions, type SessionOptions } from './session.js';
import { DeadlineExceeded, FetchTransport, NodeTransport, type Answer, type Transport } from './transport.js';
import type { Agent } from 'node:http';
import {
  FloodgateProblemError,
  FloodgateUnavailableError,
  ReservationNotFoundError,
  ReservationSettledError,
  StatedLimitError,
  type FailureReason,
  type StatedField,
} from './errors.js';

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The typed error of a problem+json answer: 404 not-found, 409 reservation-settled, or any other. */
function problemError(status: number, body: object, text: string): FloodgateProblemError {
  const problem = body as { type?: unknown; title?: unknown; detail?: unknown };
  const type = String(problem.type ?? 'about:blank');
  const title = String(problem.title ?? status);
  const detail = String(problem.detail ?? text);
  if (status === 404 && type === ReservationNotFoundError.TYPE) return new ReservationNotFoundError(status, type, title, detail);
  if (status === 409 && type === ReservationSettledError.TYPE) return new ReservationSettledError(status, type, title, detail);
  return new FloodgateProblemError(status, type, title, detail);
}

/** What to decide when Floodgate gives no verdict in time: let the request pass, or deny it. */
export type FailMode = 'open' | 'closed';

/** Descriptor name → value, e.g. `{user: 'u1', tenant: 't1', route: 'POST /chat'}`. */
export type Descriptors = Record<string, string>;

/** Options of a {@link FloodgateClient}. */
export interface FloodgateClientOptions {
  /** The server's base URL, e.g. `http://127.0.0.1:8080`. */
  url: string;
  /** How long a call may take, in milliseconds, before the fail mode decides. Default 50. */
  deadline?: number;
  /** What a check decides when the service is down, late or failing. Default `open`. */
  failMode?: FailMode;
  /** `Retry-After` (ms) of a request denied by `failMode: 'closed'`. Default 1000. */
  failClosedRetryAfterMs?: number;
  /** Headers sent with every call (e.g. `authorization`). */
  headers?: Record<string, string>;
  /**
   * The agent of Node's HTTP client that pools the connections. Default: one of the client's own
   * that keeps them alive (reusing the most recent first, closing one idle for 30 s). Pass an
   * `http.Agent` (`https.Agent` for an https URL) to tune pooling (`maxSockets`…).
   */
  agent?: Agent;
  /**
   * A `fetch` to send the calls with instead of Node's HTTP client (e.g. one bound to an undici
   * dispatcher of your own, or a test double). Slower than the default: Node's `fetch` costs
   * about three times the CPU per call.
   */
  fetch?: typeof fetch;
  /** Called once for every call that got no verdict, with why and what was decided. */
  onFailure?: (event: FailureEvent) => void;
  /**
   * The circuit breaker, on by default: after 10 failures in a row (no answer, a deadline missed,
   * a 5xx), or half the calls of 10 s once 20 were made, it opens, and for `openForMs` (2 s) calls
   * are not sent — the fail mode decides at once (`reason: 'breaker_open'`); then one probe is
   * sent, whose success closes it and whose failure opens it again. `false` turns it off.
   */
  breaker?: BreakerOptions | false;
  /**
   * The retry budget of {@link FloodgateClient.retry} and of the retries of `commit` and
   * `release`, on by default: at most `ratio` (10 %) of the calls of the last `windowMs` (10 s),
   * plus `minPerSecond` (1) a second. `false` turns it off.
   */
  retryBudget?: RetryBudgetOptions | false;
  /** The clock of the breaker's open time and the budget's window (ms, monotonic), for tests. */
  clock?: () => number;
}

/** Cost per dimension, e.g. `{requests: 1, tokens: 1200}`: each rule counts its own (`cost:`). */
export type Costs = Record<string, number>;

/**
 * Limits the caller states for the rules that take them from the request (`limit: {from:
 * request, max: …}` in the server's configuration): a `@Throttle()`'s limit, ttl and block
 * duration, an Envoy route's override. Each field is optional; a rule takes what it lets requests
 * state, within its bounds (a value above one is refused by the server, 422). A stated (limit,
 * window) other than the rule's own counts on a counter of its own.
 */
export interface Stated {
  /** The limit, a whole number ≥ 1. */
  limit?: number;
  /** The window (a budget's ttl), in milliseconds: a whole number ≥ 1. */
  windowMs?: number;
  /** The penalty box after a denial, in milliseconds: a whole number ≥ 0 (0: none). */
  blockForMs?: number;
}

/** Options of one call. */
export interface CallOptions {
  /** The cost of the request, a whole number ≥ 1. Default 1. Not with `costs`. */
  cost?: number;
  /**
   * The cost per dimension (at most 16, each a whole number ≥ 0, at least one ≥ 1), e.g.
   * `{requests: 1, tokens: 1200}`: a rule with `cost: tokens` counts the tokens, the others the
   * requests. Not with `cost`.
   */
  costs?: Costs;
  /** The deadline of this call (ms), instead of the client's. */
  deadline?: number;
  /** The fail mode of this call, instead of the client's. */
  failMode?: FailMode;
  /** An Envoy domain whose policy applies instead of the native rules. */
  domain?: string;
  /**
   * Limits stated for the rules that take them from the request; checked before sending (a
   * {@link StatedLimitError} for anything but whole numbers in range). Not on `reserve`.
   */
  stated?: Stated;
  /** Aborts the call (counted as a deadline failure). */
  signal?: AbortSignal;
}

/** One limit that applied, as the server reports it. */
export interface LimitStatus {
  name: string;
  limit: number;
  remaining: number;
  resetAfterMs: number;
  retryAfterMs: number | null;
  allowed: boolean;
  /** `allowed`, `denied`, `shadow_denied`, `tagged`, `error_allowed` or `error_denied`. */
  outcome: string;
}

/** The client's calls. */
export type Call = 'check' | 'peek' | 'report' | 'reserve' | 'commit' | 'release' | 'usage';

/** A call that got no verdict: why, and what the fail mode decided. */
export interface FailureEvent {
  reason: FailureReason;
  /** The mode that decided (`report` has none: it throws). */
  mode: FailMode | null;
  /** Which call failed. */
  call: Call;
  error: unknown;
}

/** Floodgate's answer to a check or peek, or what the fail mode decided in its place. */
export interface Decision {
  allowed: boolean;
  /** 200 or 429 from the server; 0 when the fail mode decided. */
  status: number;
  /** When denied: how long until the same request can pass (ms). */
  retryAfterMs: number | null;
  /** `Retry-After` in seconds (rounded up, at least 1) when denied, else null. */
  retryAfterSeconds: number | null;
  limits: LimitStatus[];
  /**
   * The headers to pass on to your own response: `RateLimit-Policy`, `RateLimit`,
   * `X-RateLimit-*`, `Retry-After`, `floodgate-*` — whatever the server's `headers:` style sends.
   * Names are lowercase.
   */
  headers: Record<string, string>;
  /** Set when the fail mode decided because the service gave no verdict. */
  failure: { reason: FailureReason; mode: FailMode } | null;
  /**
   * The reservation's id: of an allowed {@link FloodgateClient.reserve}, or of a check that took
   * concurrency permits (the `floodgate-reservation` header; {@link FloodgateClient.release} frees
   * them). Null otherwise, and when the fail mode decided.
   */
  reservation: string | null;
  /** When an allowed reserve's reservation expires unsettled (ms since the Unix epoch), else null. */
  expiresAtMs: number | null;
  /**
   * The model to switch to: set on an allowed verdict when the request's plan is over its limit
   * and its `overage` degrades (`degrade_to`, also sent as the `floodgate-degrade` header); null
   * otherwise, and when the fail mode decided.
   */
  degradeTo: string | null;
}

/**
 * Options of {@link FloodgateClient.reserve}: a check's but `stated` (a reservation settles on the
 * rules' own counters), plus how long the reservation is held.
 */
export interface ReserveOptions extends Omit<CallOptions, 'stated'> {
  /** How long the reservation is held unsettled, e.g. `'2m'` (server default `5m`, at most `24h`). */
  ttl?: string;
}

/** Options of a commit, a release or a usage read. */
export interface SettleOptions {
  /** The deadline of each attempt (ms), instead of the client's. */
  deadline?: number;
  /**
   * Retries after the first attempt when it got no answer (refused, late, reset, 5xx). Commit and
   * release are idempotent on the server, so a retry of one whose outcome is unknown settles
   * nothing twice. Default 2. Not used by `usage`.
   */
  attempts?: number;
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** What a commit or a release did; a retry of it answers the same. Each is dimension → amount. */
export interface Settled {
  reservation: string;
  state: 'committed' | 'released';
  /** What was reserved. */
  reserved: Costs;
  /** What stays charged. */
  charged: Costs;
  /** What was given back. */
  refunded: Costs;
  /** What the actual cost exceeded the reservation by, charged on top. */
  excess: Costs;
}

/** One rule's counter for a key, now (`GET /v1/usage`). */
export interface Usage {
  rule: string;
  limit: number;
  used: number;
  remaining: number;
  /** Start of the current window or period (ms since the Unix epoch); null for buckets and concurrency. */
  periodStart: number | null;
  /** Its end (exclusive); null for buckets and concurrency. */
  periodEnd: number | null;
  /** Until the counter is fully replenished with no further traffic (ms). */
  resetAfterMs: number;
  /** For a quota: what the key counted in the calendar period before the current one; null for the other algorithms. */
  previous: PreviousPeriod | null;
}

/** What a quota's key counted in the calendar period before the current one (`GET /v1/usage`'s `previous`). */
export interface PreviousPeriod {
  /** The count, exactly as kept (not capped at the limit). */
  used: number;
  /** Start of that period (ms since the Unix epoch). */
  periodStart: number;
  /** Its end (exclusive): the current period's start. */
  periodEnd: number;
}

/** What a client counted since it was made. */
export interface ClientStats {
  /** Calls sent (a call the open breaker refused is not). */
  calls: number;
  /** Checks, peeks and reserves allowed by `failMode: 'open'`. */
  failedOpen: number;
  /** Checks, peeks and reserves denied by `failMode: 'closed'`. */
  failedClosed: number;
  /** Calls without a verdict, by reason (`breaker_open`: refused by the breaker, not sent). */
  failures: Record<FailureReason, number>;
  /** Times the breaker opened (after failures, or after a failed probe). */
  breakerOpened: number;
  /** Times it went half-open to send a probe. */
  breakerHalfOpened: number;
  /** Times a probe's success closed it. */
  breakerClosed: number;
  /** Retries the retry budget granted. */
  retries: number;
  /** Retries the retry budget refused (the error was thrown instead). */
  retriesRefused: number;
}

/** A call the breaker let through: report whether it failed, or that its caller gave up. */
interface Pass {
  finish(failed: boolean): void;
  abandon(): void;
}

const FREE_PASS: Pass = { finish: () => {}, abandon: () => {} };

const PASSED_HEADERS = new Set(['retry-after', 'ratelimit', 'ratelimit-policy']);

function passedHeader(name: string): boolean {
  return PASSED_HEADERS.has(name) || name.startsWith('x-ratelimit-') || name.startsWith('floodgate-');
}

interface WireLimit {
  name: string;
  limit: number;
  remaining: number;
  reset_after_ms: number;
  retry_after_ms: number | null;
  allowed: boolean;
  outcome: string;
}

interface WireVerdict {
  allowed: boolean;
  reservation?: string;
  expires_at_ms?: number;
  degrade_to?: string;
  retry_after_ms: number | null;
  limits: WireLimit[];
}

function isVerdict(body: unknown): body is WireVerdict {
  return (
    typeof body === 'object' &&
    body !== null &&
    typeof (body as WireVerdict).allowed === 'boolean' &&
    Array.isArray((body as WireVerdict).limits)
  );
}

/** A usage's `previous` as the server sends it (`{used, period_start, period_end}` or null). */
function previousPeriod(value: unknown): PreviousPeriod | null {
  if (typeof value !== 'object' || value === null) return null;
  const p = value as { used?: unknown; period_start?: unknown; period_end?: unknown };
  if (typeof p.used !== 'number' || typeof p.period_start !== 'number' || typeof p.period_end !== 'number') return null;
  return { used: p.used, periodStart: p.period_start, periodEnd: p.period_end };
}

/** The network error's code (`ECONNREFUSED`, `ECONNRESET`…), looked for along the cause chain. */
export function errorCode(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

function validateDeadline(deadline: number, where: string): number {
  if (!Number.isFinite(deadline) || deadline <= 0) {
    throw new RangeError(`${where}: deadline must be a positive number of milliseconds, got ${deadline}`);
  }
  return deadline;
}

function validateFailMode(mode: string, where: string): FailMode {
  if (mode !== 'open' && mode !== 'closed') {
    throw new RangeError(`${where}: failMode must be 'open' or 'closed', got ${JSON.stringify(mode)}`);
  }
  return mode;
}

function validateCost(cost: number): number {
  if (!Number.isSafeInteger(cost) || cost < 1) {
    throw new RangeError(`cost must be a whole number ≥ 1, got ${cost}`);
  }
  return cost;
}

function validateCosts(costs: Costs, where: string): Costs {
  if (typeof costs !== 'object' || costs === null || Array.isArray(costs)) {
    throw new TypeError(`${where}: costs must be an object of dimension → whole number`);
  }
  for (const [dimension, amount] of Object.entries(costs)) {
    if (!Number.isSafeInteger(amount) || amount < 0) {
      throw new RangeError(`${where}: costs.${dimension} must be a whole number ≥ 0, got ${amount}`);
    }
  }
  return costs;
}

/** The wire form of `stated` (`{limit, window_ms, block_for_ms}`), each field checked. */
interface WireStated {
  limit?: number;
  window_ms?: number;
  block_for_ms?: number;
}

const STATED_FIELDS: Record<StatedField, { wire: keyof WireStated; least: number }> = {
  limit: { wire: 'limit', least: 1 },
  windowMs: { wire: 'window_ms', least: 1 },
  blockForMs: { wire: 'block_for_ms', least: 0 },
};

function validateStated(stated: Stated, where: string): WireStated {
  if (typeof stated !== 'object' || stated === null || Array.isArray(stated)) {
    throw new StatedLimitError('stated', stated, `${where}: stated must be an object of limit, windowMs and blockForMs`);
  }
  const wire: WireStated = {};
  for (const [field, value] of Object.entries(stated)) {
    if (value === undefined) continue;
    const spec = Object.hasOwn(STATED_FIELDS, field) ? STATED_FIELDS[field as StatedField] : undefined;
    if (spec === undefined) {
      throw new StatedLimitError(field, value, `${where}: stated.${field} is not a field of stated (limit, windowMs, blockForMs)`);
    }
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < spec.least) {
      throw new StatedLimitError(
        field,
        value,
        `${where}: stated.${field} must be a whole number ≥ ${spec.least}, got ${typeof value === 'number' ? value : JSON.stringify(value)}`,
      );
    }
    wire[spec.wire] = value;
  }
  return wire;
}

function validateId(id: string, where: string): string {
  if (typeof id !== 'string' || id === '') {
    throw new TypeError(`${where}: the reservation id must be a non-empty string`);
  }
  return id;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A client of Floodgate's HTTP API (`/v1/check`, `/v1/peek`, `/v1/report`…).
 *
 * Every call has a deadline; a check or peek that gets no verdict (service down, late, or failing)
 * is decided by the fail mode and counted ({@link FloodgateClient.stats}). A circuit breaker stops
 * sending calls to a service that keeps failing, and a retry budget bounds the retries.
 * Connections are kept alive (Node's HTTP client on a keep-alive agent).
 */
export class FloodgateClient {
  readonly url: string;
  readonly deadline: number;
  readonly failMode: FailMode;
  private readonly failClosedRetryAfterMs: number;
  private readonly transport: Transport;
  /** `/v1/check`, `/v1/peek`…: the paths of the decision calls, made once. */
  private readonly paths: Record<'check' | 'peek' | 'report' | 'reserve', string> = {
    check: '/v1/check',
    peek: '/v1/peek',
    report: '/v1/report',
    reserve: '/v1/reserve',
  };
  private readonly onFailure: ((event: FailureEvent) => void) | undefined;
  private defaultSessions: Sessions | undefined;
  /** The circuit breaker; null when turned off. */
  private readonly breaker: CircuitBreaker | null;
  /** The retry budget; null when turned off. */
  readonly retryBudget: RetryBudget | null;
  private readonly counters = {
    calls: 0,
    failedOpen: 0,
    failedClosed: 0,
    failures: { unreachable: 0, deadline: 0, server_error: 0, breaker_open: 0 } as Record<FailureReason, number>,
    breakerOpened: 0,
    breakerHalfOpened: 0,
    breakerClosed: 0,
  };

  constructor(options: FloodgateClientOptions) {
    if (typeof options?.url !== 'string' || options.url === '') {
      throw new TypeError('FloodgateClient: url is required, e.g. http://127.0.0.1:8080');
    }
    let parsed: URL;
    try {
      parsed = new URL(options.url);
    } catch {
      throw new TypeError(`FloodgateClient: url ${JSON.stringify(options.url)} is not a URL`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
      throw new TypeError(`FloodgateClient: url must be http:// or https://, got ${parsed.protocol}`);
    }
    this.url = options.url.replace(/\/+$/, '');
    this.deadline = validateDeadline(options.deadline ?? 50, 'FloodgateClient');
    this.failMode = validateFailMode(options.failMode ?? 'open', 'FloodgateClient');
    this.failClosedRetryAfterMs = options.failClosedRetryAfterMs ?? 1000;
    const headers = { 'content-type': 'application/json', ...options.headers };
    if (options.fetch !== undefined && options.agent !== undefined) {
      throw new TypeError('FloodgateClient: give fetch or agent, not both');
    }
    this.transport =
      options.fetch === undefined
        ? new NodeTransport(parsed, headers, options.agent)
        : new FetchTransport(this.url, headers, options.fetch);
    this.onFailure = options.onFailure;
    const clock = options.clock ?? processClock;
    this.breaker =
      options.breaker === false
        ? null
        : new CircuitBreaker(options.breaker ?? {}, clock, (to) => {
            if (to === 'open') this.counters.breakerOpened += 1;
            if (to === 'half_open') this.counters.breakerHalfOpened += 1;
            if (to === 'closed') this.counters.breakerClosed += 1;
          });
    this.retryBudget = options.retryBudget === false ? null : new RetryBudget(options.retryBudget ?? {}, clock);
  }

  /** Where the circuit breaker is; null when the client has none (`breaker: false`). */
  get breakerState(): BreakerState | null {
    return this.breaker?.state ?? null;
  }

  /**
   * {@link retry} with the client's retry budget: a retry the budget refuses throws the error of
   * the attempt it would have repeated. A call the open breaker refused is not retried.
   */
  retry<T>(fn: (attempt: number) => Promise<T>, options: Omit<RetryOptions, 'budget'> = {}): Promise<T> {
    return retry(fn, this.retryBudget === null ? options : { ...options, budget: this.retryBudget });
  }

  /** Checks a request: consumes `cost` from every rule that applies when all allow. */
  check(descriptors: Descriptors, options: CallOptions = {}): Promise<Decision> {
    return this.decide('check', descriptors, options);
  }

  /** What `check` would answer, consuming nothing. */
  peek(descriptors: Descriptors, options: CallOptions = {}): Promise<Decision> {
    return this.decide('peek', descriptors, options);
  }

  /**
   * Consumes `cost` after the fact (e.g. tokens known once a response is done); never denies.
   * Throws {@link FloodgateUnavailableError} when the service gave no answer (with
   * `code: 'ECONNREFUSED'` when it surely did not run, so {@link retry} may retry it).
   */
  async report(descriptors: Descriptors, options: Omit<CallOptions, 'failMode'> = {}): Promise<Decision> {
    const outcome = await this.call('report', descriptors, options);
    if ('decision' in outcome) return outcome.decision;
    this.count('report', outcome.reason, null, outcome.error);
    throw outcome.error;
  }

  /**
   * Reserves an estimate (e.g. the prompt's tokens plus `max_tokens`) before a call whose cost is
   * known only at its end: decided as a check (all-or-nothing, same fail mode); when allowed,
   * `decision.reservation` is the id to {@link commit} the actual cost with, or {@link release}.
   * Unsettled past `ttl`, it stays charged its estimate. When the fail mode decided, there is no
   * reservation (`reservation: null`): nothing to settle.
   */
  reserve(descriptors: Descriptors, options: ReserveOptions = {}): Promise<Decision> {
    return this.decide('reserve', descriptors, options);
  }

  /**
   * Charges a reservation's actual cost: per dimension, what was reserved beyond it is given
   * back, what exceeds it is charged on top (never denied); a dimension left out stays as
   * reserved; concurrency permits are freed. Idempotent on the server: the same commit again
   * answers the same and charges nothing more, so a call that got no answer (refused, late,
   * reset, 5xx) is retried up to `attempts` times. Throws {@link ReservationNotFoundError} (404)
   * for an id the server does not know, {@link ReservationSettledError} (409) for one released,
   * committed with other costs, or expired; {@link FloodgateUnavailableError} when no attempt got
   * an answer.
   */
  async commit(reservation: string, costs?: Costs, options: SettleOptions = {}): Promise<Settled> {
    const body: { reservation: string; costs?: Costs } = { reservation: validateId(reservation, 'commit') };
    if (costs !== undefined) body.costs = validateCosts(costs, 'commit');
    return this.settle('commit', body, options);
  }

  /**
   * Gives a reservation back entirely (concurrency permits included), or frees the permits of a
   * check (its `reservation`; the check's costs stay counted). Idempotent and retried as
   * {@link commit}; 409 after a commit.
   */
  async release(reservation: string, options: SettleOptions = {}): Promise<Settled> {
    return this.settle('release', { reservation: validateId(reservation, 'release') }, options);
  }

  /**
   * What one rule's counter holds now for the descriptors that make its key, consuming nothing.
   * Throws {@link FloodgateProblemError} (404 for an unknown rule, 422 for a missing descriptor),
   * {@link FloodgateUnavailableError} when the service gave no answer (not retried).
   */
  async usage(rule: string, descriptors: Descriptors, options: Omit<SettleOptions, 'attempts'> = {}): Promise<Usage> {
    if (typeof rule !== 'string' || rule === '') throw new TypeError('usage: the rule must be a non-empty string');
    if ('rule' in descriptors) throw new TypeError('usage: no descriptor may be named `rule` (it is the rule parameter)');
    const query = new URLSearchParams({ rule, ...descriptors });
    const { status, text } = await this.send('usage', 'GET', `/v1/usage?${query}`, undefined, options);
    const body = parse(text) as Record<string, unknown> | undefined;
    if (status === 200 && typeof body?.used === 'number') {
      return {
        rule: String(body.rule),
        limit: body.limit as number,
        used: body.used,
        remaining: body.remaining as number,
        periodStart: (body.period_start as number | null) ?? null,
        periodEnd: (body.period_end as number | null) ?? null,
        resetAfterMs: body.reset_after_ms as number,
        previous: previousPeriod(body.previous),
      };
    }
    throw this.failed('usage', status, text, body);
  }

  /**
   * Agent step budgets with no extra descriptors: `client.session.step(id)` checks
   * `{session: id}` (see {@link Sessions}).
   */
  get session(): Sessions {
    return (this.defaultSessions ??= new Sessions(this));
  }

  /** Agent step budgets whose steps carry `options.descriptors` too (e.g. the tenant). */
  sessions(options: SessionOptions): Sessions {
    return new Sessions(this, options);
  }

  /**
   * Opens a connection ahead of the first call (`GET /healthz`, up to `timeoutMs`, default 2 s,
   * not counted). The first `fetch` of a process loads Node's HTTP client and connects, which can
   * take longer than a tight deadline: call this at startup. Resolves `true` when the server
   * answered healthy, `false` otherwise (it never throws: the fail mode covers an outage later).
   */
  async warmup(timeoutMs = 2000): Promise<boolean> {
    try {
      const answer = await this.transport.send('GET', '/healthz', undefined, timeoutMs);
      return answer.status >= 200 && answer.status < 300;
    } catch {
      return false;
    }
  }

  /** Counters since the client was made (a copy). */
  stats(): ClientStats {
    const budget = this.retryBudget?.counts() ?? { granted: 0, refused: 0 };
    return {
      ...this.counters,
      failures: { ...this.counters.failures },
      retries: budget.granted,
      retriesRefused: budget.refused,
    };
  }

  /**
   * Whether the breaker lets a call go: a pass to report its outcome with. Throws the
   * `breaker_open` error of a call it refuses.
   */
  private admit(call: Call): Pass {
    const breaker = this.breaker;
    if (breaker === null) return FREE_PASS;
    const admission = breaker.admit();
    if (admission.kind === 'probe') {
      return { finish: (failed) => breaker.finishProbe(!failed), abandon: () => breaker.abandonProbe() };
    }
    if (admission.kind === 'call') {
      return { finish: (failed) => breaker.record(failed, admission.sent), abandon: () => {} };
    }
    const left = breaker.openRemainingMs();
    throw new FloodgateUnavailableError(
      'breaker_open',
      left === null
        ? `the circuit breaker is half-open and another call is its probe: ${call} not sent`
        : `the circuit breaker is open after failed calls: ${call} not sent; the next call probes in ${Math.ceil(left)} ms`,
    );
  }

  private async settle(call: 'commit' | 'release', body: object, options: SettleOptions): Promise<Settled> {
    const attempts = options.attempts ?? 2;
    if (!Number.isInteger(attempts) || attempts < 0) {
      throw new RangeError(`${call}: attempts must be a whole number ≥ 0, got ${attempts}`);
    }
    for (let attempt = 0; ; attempt++) {
      try {
        const { status, text } = await this.send(call, 'POST', `/v1/${call}`, JSON.stringify(body), options);
        const parsed = parse(text) as Settled | undefined;
        if (status === 200 && typeof parsed?.state === 'string') return parsed;
        throw this.failed(call, status, text, parsed);
      } catch (error) {
        if (
          !(error instanceof FloodgateUnavailableError) ||
          attempt >= attempts ||
          options.signal?.aborted ||
          error.reason === 'breaker_open' ||
          (this.retryBudget !== null && !this.retryBudget.withdraw())
        ) {
          if (error instanceof FloodgateUnavailableError) this.count(call, error.reason, null, error);
          throw error;
        }
        await sleep(Math.min(1000, 25 * 2 ** attempt), options.signal);
      }
    }
  }

  /** One request with the deadline; the status and the text, or a FloodgateUnavailableError. */
  private async send(
    call: Call,
    method: 'GET' | 'POST',
    path: string,
    body: string | undefined,
    options: { deadline?: number; signal?: AbortSignal },
  ): Promise<Answer> {
    const deadline = options.deadline === undefined ? this.deadline : validateDeadline(options.deadline, call);
    const pass = this.admit(call);
    this.counters.calls += 1;
    this.retryBudget?.deposit();
    try {
      const answer = await this.transport.send(method, path, body, deadline, options.signal);
      pass.finish(answer.status >= 500);
      return answer;
    } catch (error) {
      if (options.signal?.aborted) pass.abandon();
      else pass.finish(true);
      throw this.unavailable(call, deadline, error, options.signal);
    }
  }

  /** Why a request got no answer: its deadline (or its caller's abort), or the network. */
  private unavailable(call: Call, deadline: number, error: unknown, signal: AbortSignal | undefined): FloodgateUnavailableError {
    if (error instanceof DeadlineExceeded || signal?.aborted === true) {
      return new FloodgateUnavailableError('deadline', `floodgate gave no answer to ${call} within ${deadline} ms`, {
        cause: error,
        code: 'ETIMEDOUT',
      });
    }
    const code = errorCode(error);
    return new FloodgateUnavailableError(
      'unreachable',
      `floodgate at ${this.url} is unreachable (${code ?? String(error)})`,
      code === undefined ? { cause: error } : { cause: error, code },
    );
  }

  /** The error for an answer that is no result: a problem (4xx) or an outage (5xx, garbage). */
  private failed(call: Call, status: number, text: string, body: unknown): Error {
    if (status >= 400 && status < 500 && status !== 429 && typeof body === 'object' && body !== null) {
      return problemError(status, body, text);
    }
    return new FloodgateUnavailableError('server_error', `floodgate answered ${call} with ${status}: ${text.slice(0, 200)}`);
  }

  private async decide(
    call: 'check' | 'peek' | 'reserve',
    descriptors: Descriptors,
    options: CallOptions | ReserveOptions,
  ): Promise<Decision> {
    const mode = options.failMode === undefined ? this.failMode : validateFailMode(options.failMode, call);
    const outcome = await this.call(call, descriptors, options);
    if ('decision' in outcome) return outcome.decision;
    this.count(call, outcome.reason, mode, outcome.error);
    const allowed = mode === 'open';
    const retryAfterMs = allowed ? null : this.failClosedRetryAfterMs;
    const retryAfterSeconds = retryAfterMs === null ? null : Math.max(1, Math.ceil(retryAfterMs / 1000));
    return {
      allowed,
      status: 0,
      retryAfterMs,
      retryAfterSeconds,
      limits: [],
      headers: retryAfterSeconds === null ? {} : { 'retry-after': String(retryAfterSeconds) },
      failure: { reason: outcome.reason, mode },
      reservation: null,
      expiresAtMs: null,
      degradeTo: null,
    };
  }

  private count(call: FailureEvent['call'], reason: FailureReason, mode: FailMode | null, error: unknown): void {
    this.counters.failures[reason] += 1;
    if (mode === 'open') this.counters.failedOpen += 1;
    if (mode === 'closed') this.counters.failedClosed += 1;
    this.onFailure?.({ reason, mode, call, error });
  }

  private async call(
    call: 'check' | 'peek' | 'report' | 'reserve',
    descriptors: Descriptors,
    options: ReserveOptions & { stated?: Stated },
  ): Promise<{ decision: Decision } | { reason: FailureReason; error: FloodgateUnavailableError }> {
    const body: {
      descriptors: Descriptors;
      cost?: number;
      costs?: Costs;
      domain?: string;
      ttl?: string;
      stated?: WireStated;
    } = { descriptors };
    if (options.cost !== undefined && options.costs !== undefined) {
      throw new TypeError(`${call}: give cost or costs, not both`);
    }
    if (options.cost !== undefined) body.cost = validateCost(options.cost);
    if (options.costs !== undefined) body.costs = validateCosts(options.costs, call);
    if (options.domain !== undefined) body.domain = options.domain;
    if (options.ttl !== undefined) body.ttl = options.ttl;
    if (options.stated !== undefined) body.stated = validateStated(options.stated, call);
    const deadline = options.deadline === undefined ? this.deadline : validateDeadline(options.deadline, call);
    let pass: Pass;
    try {
      pass = this.admit(call);
    } catch (error) {
      if (error instanceof FloodgateUnavailableError) return { reason: error.reason, error };
      throw error;
    }
    this.counters.calls += 1;
    this.retryBudget?.deposit();

    let answer: Answer;
    try {
      answer = await this.transport.send('POST', this.paths[call], JSON.stringify(body), deadline, options.signal);
    } catch (error) {
      if (options.signal?.aborted) pass.abandon();
      else pass.finish(true);
      const down = this.unavailable(call, deadline, error, options.signal);
      return { reason: down.reason, error: down };
    }
    pass.finish(answer.status >= 500);
    try {
      return { decision: this.render(answer) };
    } catch (error) {
      if (error instanceof FloodgateUnavailableError) return { reason: error.reason, error };
      throw error;
    }
  }

  private render(answer: Answer): Decision {
    const { status, text } = answer;
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    if ((status === 200 || status === 429) && isVerdict(body)) {
      const headers: Record<string, string> = {};
      for (const name in answer.headers) {
        const value = answer.headers[name];
        if (value !== undefined && passedHeader(name)) headers[name] = Array.isArray(value) ? value.join(', ') : value;
      }
      const retryAfterMs = body.allowed ? null : body.retry_after_ms;
      const retryAfterSeconds =
        retryAfterMs === null ? null : Math.max(1, Math.ceil(retryAfterMs / 1000));
      return {
        allowed: body.allowed,
        status,
        retryAfterMs,
        retryAfterSeconds,
        limits: body.limits.map((l) => ({
          name: l.name,
          limit: l.limit,
          remaining: l.remaining,
          resetAfterMs: l.reset_after_ms,
          retryAfterMs: l.retry_after_ms,
          allowed: l.allowed,
          outcome: l.outcome,
        })),
        headers,
        failure: null,
        reservation: body.allowed ? (body.reservation ?? headers['floodgate-reservation'] ?? null) : null,
        expiresAtMs: body.allowed ? (body.expires_at_ms ?? null) : null,
        degradeTo: body.allowed ? (body.degrade_to ?? headers['floodgate-degrade'] ?? null) : null,
      };
    }
    if (status >= 400 && status < 500 && status !== 429 && typeof body === 'object' && body !== null) {
      throw problemError(status, body, text);
    }
    throw new FloodgateUnavailableError('server_error', `floodgate answered ${status} without a verdict: ${text.slice(0, 200)}`);
  }
}
