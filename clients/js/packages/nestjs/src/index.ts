export { FloodgateModule } from './module.js';
export { FloodgateGuard } from './guard.js';
export { RateLimit, SkipRateLimit, RATE_LIMIT_KEY, SKIP_RATE_LIMIT_KEY } from './decorators.js';
export { FloodgateRateLimitException, FloodgateRateLimitFilter } from './exception.js';
export { degradedModel, floodgateDecision } from './degrade.js';
export {
  FLOODGATE_OPTIONS,
  type FloodgateModuleOptions,
  type FloodgateModuleAsyncOptions,
  type GuardScope,
  type RateLimitOptions,
} from './options.js';
export {
  FloodgateThrottlerStorage,
  ThrottlerTemplateError,
  type FloodgateThrottlerStorageOptions,
  type ThrottlerStorageRecord,
  type ThrottlerStorageSettings,
} from './throttler-storage.js';
export { FloodgateClient } from '@floodgate/client';
