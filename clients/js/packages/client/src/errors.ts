/** Why a call to Floodgate got no verdict from it. */
export type FailureReason =
  /** The service could not be reached (connection refused, reset before an answer, DNS). */
  | 'unreachable'
  /** The service did not answer within the call's deadline. */
  | 'deadline'
  /** The service answered with a 5xx (e.g. `503 store-unavailable`) or a body that is no verdict. */
  | 'server_error'
  /** The circuit breaker is open: the service failed lately, so the call was not sent. */
  | 'breaker_open';

/**
 * A problem+json answer from Floodgate to a request it refused as malformed (400, 413, 422: a cost
 * that can never be allowed, too many descriptors…). It is the caller's bug, not an outage, so the
 * fail mode never hides it: it is thrown.
 */
export class FloodgateProblemError extends Error {
  override readonly name: string = 'FloodgateProblemError';
  /** The HTTP status Floodgate answered. */
  readonly status: number;
  /** The problem's `type` URI, e.g. `https://floodgate.dev/problems/never-allowed`. */
  readonly type: string;
  /** The problem's `detail`. */
  readonly detail: string;

  constructor(status: number, type: string, title: string, detail: string) {
    super(`floodgate refused the request (${status} ${title}): ${detail}`);
    this.status = status;
    this.type = type;
    this.detail = detail;
  }
}

/**
 * `404 not-found`: the server does not know this reservation id (never given, or forgotten a
 * while after it expired). Also an unknown rule of `usage`.
 */
export class ReservationNotFoundError extends FloodgateProblemError {
  static readonly TYPE = 'https://floodgate.dev/problems/not-found';
  override readonly name = 'ReservationNotFoundError';
}

/**
 * `409 reservation-settled`: the reservation was released, committed with other costs, or expired
 * (it stays charged its estimate), or it is a check's permits and was committed.
 */
export class ReservationSettledError extends FloodgateProblemError {
  static readonly TYPE = 'https://floodgate.dev/problems/reservation-settled';
  override readonly name = 'ReservationSettledError';
}

/**
 * Floodgate gave no verdict (down, late, or failing, or the circuit breaker is open) and the call
 * has no fail mode to fall back on (`report`, `commit`, `release`, `usage`). `code` is
 * `ECONNREFUSED` when the connection was refused, so that {@link retry} knows the call surely did
 * not run; a call the open breaker refused has no code and is not retried.
 */
export class FloodgateUnavailableError extends Error {
  override readonly name = 'FloodgateUnavailableError';
  /** Why there was no verdict. */
  readonly reason: FailureReason;
  /** `ECONNREFUSED` when the connection was refused, `ETIMEDOUT` after the deadline. */
  readonly code: string | undefined;

  constructor(reason: FailureReason, message: string, options: { cause?: unknown; code?: string } = {}) {
    super(message, { cause: options.cause });
    this.reason = reason;
    this.code = options.code;
  }
}

/**
 * A request Floodgate denied, thrown by helpers that turn a denial into an error (e.g.
 * `session.step` with `throwOnDeny`, or your own code). {@link retry} retries it after
 * `retryAfterMs`: a denied request consumed nothing and surely did not run.
 */
export class RateLimitedError extends Error {
  override readonly name = 'RateLimitedError';
  /** Always 429. */
  readonly status = 429;
  /** How long to wait before the same request can pass, in milliseconds. */
  readonly retryAfterMs: number;

  constructor(retryAfterMs: number, message = `rate limited; retry in ${retryAfterMs} ms`) {
    super(message);
    this.retryAfterMs = retryAfterMs;
  }
}

/** A field of {@link Stated}, as the client names it. */
export type StatedField = 'limit' | 'windowMs' | 'blockForMs';

/**
 * A stated limit the client refuses to send: not a whole number, or below its least value (a
 * limit or window of 0, a negative block), or a field that does not exist. Thrown before anything
 * is sent; nothing is counted. (A value above a rule's bound is the server's to refuse: 422,
 * {@link FloodgateProblemError}.)
 */
export class StatedLimitError extends RangeError {
  override readonly name = 'StatedLimitError';
  /** The field at fault, e.g. `windowMs` (or the unknown name given). */
  readonly field: string;
  /** The value given. */
  readonly value: unknown;

  constructor(field: string, value: unknown, message: string) {
    super(message);
    this.field = field;
    this.value = value;
  }
}

/** Thrown by {@link withTimeout} when a tier's time has passed. Its outcome is unknown. */
export class TimeoutError extends Error {
  override readonly name = 'TimeoutError';
  readonly code = 'ETIMEDOUT';
  /** The tier's name, or `custom` for a number of milliseconds. */
  readonly tier: string;
  /** The time allowed, in milliseconds. */
  readonly timeoutMs: number;

  constructor(tier: string, timeoutMs: number) {
    super(`timed out after ${timeoutMs} ms (tier ${tier})`);
    this.tier = tier;
    this.timeoutMs = timeoutMs;
  }
}
