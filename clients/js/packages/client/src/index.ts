export {
  FloodgateClient,
  errorCode,
  type Call,
  type CallOptions,
  type Costs,
  type ReserveOptions,
  type SettleOptions,
  type Settled,
  type Usage,
  type PreviousPeriod,
  type ClientStats,
  type Decision,
  type Descriptors,
  type FailMode,
  type FailureEvent,
  type FloodgateClientOptions,
  type LimitStatus,
  type Stated,
} from './client.js';
export {
  FloodgateProblemError,
  FloodgateUnavailableError,
  RateLimitedError,
  ReservationNotFoundError,
  ReservationSettledError,
  StatedLimitError,
  TimeoutError,
  type FailureReason,
  type StatedField,
} from './errors.js';
export { CircuitBreaker, type Admission, type BreakerOptions, type BreakerState } from './breaker.js';
export { RetryBudget, type RetryBudgetOptions } from './budget.js';
export { retry, retryAfterOf, surelyDidNotRun, outcomeUnknown, type RetryOptions } from './retry.js';
export { withTimeout, timeouts, DEFAULT_TIERS, type Tier, type Timed } from './timeouts.js';
export { Sessions, type SessionOptions, type Step } from './session.js';
export {
  describeRequest,
  problemFor,
  RATE_LIMITED_TYPE,
  type IdentityOptions,
  type IncomingLike,
  type RateLimitProblem,
} from './incoming.js';
export { releaseOnEnd, type EndEvent, type OutgoingLike } from './outgoing.js';
