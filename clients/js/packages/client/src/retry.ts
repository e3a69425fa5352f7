import type { RetryBudget } from './budget.js';
import { errorCode } from './client.js';

/** Options of {@link retry}. */
export interface RetryOptions {
  /** Retries after the first call (so at most `attempts + 1` calls). Default 2. */
  attempts?: number;
  /** Exponential backoff: the n-th retry waits below `min(max, base × 2^(n-1))` ms. */
  backoff?: { base?: number; max?: number };
  /** `full` (default): a uniformly random wait below the backoff; `none`: exactly the backoff. */
  jitter?: 'full' | 'none';
  /**
   * The call is idempotent: a timeout or a connection lost mid-call (outcome unknown) may be
   * retried. Default false: those are never retried.
   */
  idempotent?: boolean;
  /** A `Retry-After` longer than this (ms) is not waited for: the error is thrown. Default 60 000. */
  maxRetryAfter?: number;
  /** Stops waiting and retrying. */
  signal?: AbortSignal;
  /** Called before each retry with the error and the wait. */
  onRetry?: (info: { attempt: number; delayMs: number; error: unknown }) => void;
  /** Random source in [0, 1), for tests. Default `Math.random`. */
  random?: () => number;
  /**
   * A retry budget asked before each retry: a retry it refuses throws the error at once.
   * {@link FloodgateClient.retry} passes the client's.
   */
  budget?: RetryBudget;
}

/** Errors whose call surely did not run: the connection was refused. */
const NOT_RUN_CODES = new Set(['ECONNREFUSED']);
/** Errors whose outcome is unknown: retried only when the call is idempotent. */
const UNKNOWN_OUTCOME_CODES = new Set(['ETIMEDOUT', 'ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

function statusOf(error: unknown): number | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const e = error as { status?: unknown; statusCode?: unknown; getStatus?: unknown; response?: { status?: unknown } };
  if (typeof e.status === 'number') return e.status;
  if (typeof e.statusCode === 'number') return e.statusCode;
  if (typeof e.getStatus === 'function') {
    const s = (e.getStatus as () => unknown).call(error);
    if (typeof s === 'number') return s;
  }
  if (typeof e.response?.status === 'number') return e.response.status;
  return undefined;
}

function headerOf(error: object, name: string): string | undefined {
  const e = error as { headers?: unknown; response?: { headers?: unknown } };
  for (const headers of [e.headers, e.response?.headers]) {
    if (headers === undefined || headers === null) continue;
    if (typeof (headers as Headers).get === 'function') {
      const v = (headers as Headers).get(name);
      if (v !== null) return v;
    } else if (typeof headers === 'object') {
      for (const [k, v] of Object.entries(headers as Record<string, unknown>)) {
        if (k.toLowerCase() === name && v !== undefined) return String(v);
      }
    }
  }
  return undefined;
}

/**
 * How long the error asks to wait (ms): its `retryAfterMs`, or its `Retry-After` header (seconds
 * or an HTTP date) found on `error.headers` or `error.response.headers`.
 */
export function retryAfterOf(error: unknown, now: number = Date.now()): number | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const ms = (error as { retryAfterMs?: unknown }).retryAfterMs;
  if (typeof ms === 'number' && Number.isFinite(ms) && ms >= 0) return ms;
  const header = headerOf(error, 'retry-after');
  if (header === undefined) return undefined;
  const trimmed = header.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** Whether the error's call surely did not run: a refused connection, or a 429. */
export function surelyDidNotRun(error: unknown): boolean {
  const code = errorCode(error);
  if (code !== undefined && NOT_RUN_CODES.has(code)) return true;
  return statusOf(error) === 429;
}

/** Whether the error leaves the call's outcome unknown (a timeout, a connection lost mid-call). */
export function outcomeUnknown(error: unknown): boolean {
  if (typeof error === 'object' && error !== null) {
    const name = (error as { name?: unknown }).name;
    if (name === 'TimeoutError' || name === 'AbortError') return true;
  }
  const code = errorCode(error);
  return code !== undefined && UNKNOWN_OUTCOME_CODES.has(code);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Calls `fn`, and retries it — at most `attempts` times, with exponential backoff and full
 * jitter — only when its error says the call surely did not run (connection refused, 429), or,
 * when `idempotent` is set, when its outcome is unknown (a timeout, a connection lost mid-call).
 * A `Retry-After` (an error's `retryAfterMs` or header) is honoured: the wait is at least that.
 * Any other error is thrown at once.
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const attempts = options.attempts ?? 2;
  if (!Number.isInteger(attempts) || attempts < 0) {
    throw new RangeError(`retry: attempts must be a whole number ≥ 0, got ${attempts}`);
  }
  const base = options.backoff?.base ?? 100;
  const max = options.backoff?.max ?? 2000;
  const jitter = options.jitter ?? 'full';
  if (jitter !== 'full' && jitter !== 'none') {
    throw new RangeError(`retry: jitter must be 'full' or 'none', got ${JSON.stringify(jitter)}`);
  }
  const maxRetryAfter = options.maxRetryAfter ?? 60_000;
  const random = options.random ?? Math.random;
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (error) {
      const retryable = surelyDidNotRun(error) || (options.idempotent === true && outcomeUnknown(error));
      if (!retryable || attempt >= attempts) throw error;
      const ceiling = Math.min(max, base * 2 ** attempt);
      const backoff = jitter === 'full' ? Math.floor(random() * ceiling) : ceiling;
      const asked = retryAfterOf(error);
      if (asked !== undefined && asked > maxRetryAfter) throw error;
      if (options.budget !== undefined && !options.budget.withdraw()) throw error;
      const delayMs = Math.max(backoff, asked ?? 0);
      options.onRetry?.({ attempt: attempt + 1, delayMs, error });
      await sleep(delayMs, options.signal);
    }
  }
}
