export {
  FloodgateClient,
  errorCode,
  type CallOptions,
  type ClientStats,
  type Decision,
  type Descriptors,
  type FailMode,
  type FailureEvent,
  type FloodgateClientOptions,
  type LimitStatus,
} from './client.js';
export {
  FloodgateProblemError,
  FloodgateUnavailableError,
  RateLimitedError,
  TimeoutError,
  type FailureReason,
} from './errors.js';
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
