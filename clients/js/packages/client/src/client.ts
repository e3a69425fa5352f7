import { Sessions, type SessionOptions } from './session.js';
import { FloodgateProblemError, FloodgateUnavailableError, type FailureReason } from './errors.js';

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
   * The `fetch` to use. Default: the global one (Node's, which keeps connections alive). Pass
   * one bound to your own dispatcher to tune pooling.
   */
  fetch?: typeof fetch;
  /** Called once for every call that got no verdict, with why and what was decided. */
  onFailure?: (event: FailureEvent) => void;
}

/** Options of one call. */
export interface CallOptions {
  /** The cost of the request, a whole number ≥ 1. Default 1. */
  cost?: number;
  /** The deadline of this call (ms), instead of the client's. */
  deadline?: number;
  /** The fail mode of this call, instead of the client's. */
  failMode?: FailMode;
  /** An Envoy domain whose policy applies instead of the native rules. */
  domain?: string;
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

/** A call that got no verdict: why, and what the fail mode decided. */
export interface FailureEvent {
  reason: FailureReason;
  /** The mode that decided (`report` has none: it throws). */
  mode: FailMode | null;
  /** Which call failed. */
  call: 'check' | 'peek' | 'report';
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
}

/** What a client counted since it was made. */
export interface ClientStats {
  /** Calls made (check, peek, report). */
  calls: number;
  /** Checks and peeks allowed by `failMode: 'open'`. */
  failedOpen: number;
  /** Checks and peeks denied by `failMode: 'closed'`. */
  failedClosed: number;
  /** Calls without a verdict, by reason. */
  failures: Record<FailureReason, number>;
}

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

/**
 * A client of Floodgate's HTTP API (`/v1/check`, `/v1/peek`, `/v1/report`).
 *
 * Every call has a deadline; a check or peek that gets no verdict (service down, late, or failing)
 * is decided by the fail mode and counted ({@link FloodgateClient.stats}). Connections are kept
 * alive (Node's `fetch`).
 */
export class FloodgateClient {
  readonly url: string;
  readonly deadline: number;
  readonly failMode: FailMode;
  private readonly failClosedRetryAfterMs: number;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;
  private readonly onFailure: ((event: FailureEvent) => void) | undefined;
  private defaultSessions: Sessions | undefined;
  private readonly counters: ClientStats = {
    calls: 0,
    failedOpen: 0,
    failedClosed: 0,
    failures: { unreachable: 0, deadline: 0, server_error: 0 },
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
    this.headers = { 'content-type': 'application/json', ...options.headers };
    this.fetchImpl = options.fetch ?? globalThis.fetch;
    this.onFailure = options.onFailure;
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
      const response = await this.fetchImpl(`${this.url}/healthz`, {
        headers: this.headers,
        signal: AbortSignal.timeout(timeoutMs),
      });
      await response.arrayBuffer();
      return response.ok;
    } catch {
      return false;
    }
  }

  /** Counters since the client was made (a copy). */
  stats(): ClientStats {
    return { ...this.counters, failures: { ...this.counters.failures } };
  }

  private async decide(call: 'check' | 'peek', descriptors: Descriptors, options: CallOptions): Promise<Decision> {
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
    };
  }

  private count(call: FailureEvent['call'], reason: FailureReason, mode: FailMode | null, error: unknown): void {
    this.counters.failures[reason] += 1;
    if (mode === 'open') this.counters.failedOpen += 1;
    if (mode === 'closed') this.counters.failedClosed += 1;
    this.onFailure?.({ reason, mode, call, error });
  }

  private async call(
    call: 'check' | 'peek' | 'report',
    descriptors: Descriptors,
    options: CallOptions,
  ): Promise<{ decision: Decision } | { reason: FailureReason; error: FloodgateUnavailableError }> {
    const body: { descriptors: Descriptors; cost?: number; domain?: string } = { descriptors };
    if (options.cost !== undefined) body.cost = validateCost(options.cost);
    if (options.domain !== undefined) body.domain = options.domain;
    const deadline = options.deadline === undefined ? this.deadline : validateDeadline(options.deadline, call);
    this.counters.calls += 1;

    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), deadline);
    const onAbort = (): void => controller.abort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const response = await this.fetchImpl(`${this.url}/v1/${call}`, {
        method: 'POST',
        headers: this.headers,
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      const text = await response.text();
      return { decision: this.render(response, text) };
    } catch (error) {
      if (error instanceof FloodgateProblemError) throw error;
      if (error instanceof FloodgateUnavailableError) return { reason: error.reason, error };
      if (controller.signal.aborted) {
        const late = new FloodgateUnavailableError('deadline', `floodgate gave no answer to ${call} within ${deadline} ms`, {
          cause: error,
          code: 'ETIMEDOUT',
        });
        return { reason: 'deadline', error: late };
      }
      const code = errorCode(error);
      const down = new FloodgateUnavailableError(
        'unreachable',
        `floodgate at ${this.url} is unreachable (${code ?? String(error)})`,
        code === undefined ? { cause: error } : { cause: error, code },
      );
      return { reason: 'unreachable', error: down };
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
    }
  }

  private render(response: Response, text: string): Decision {
    const status = response.status;
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    if ((status === 200 || status === 429) && isVerdict(body)) {
      const headers: Record<string, string> = {};
      response.headers.forEach((value, name) => {
        if (passedHeader(name)) headers[name] = value;
      });
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
      };
    }
    if (status >= 400 && status < 500 && status !== 429 && typeof body === 'object' && body !== null) {
      const problem = body as { type?: unknown; title?: unknown; detail?: unknown };
      throw new FloodgateProblemError(
        status,
        String(problem.type ?? 'about:blank'),
        String(problem.title ?? response.statusText),
        String(problem.detail ?? text),
      );
    }
    throw new FloodgateUnavailableError('server_error', `floodgate answered ${status} without a verdict: ${text.slice(0, 200)}`);
  }
}
