import { SetMetadata } from '@nestjs/common';
import type { RateLimitOptions } from './options.js';

/** Metadata key of `@RateLimit()`. */
export const RATE_LIMIT_KEY = 'floodgate:rate-limit';
/** Metadata key of `@SkipRateLimit()`. */
export const SKIP_RATE_LIMIT_KEY = 'floodgate:skip';

/**
 * Says how the guard checks a controller's or a handler's requests: a `rule` descriptor, the
 * route's own descriptors, a cost. A handler's `@RateLimit()` wins over its controller's.
 */
export const RateLimit = (options: RateLimitOptions = {}) => SetMetadata(RATE_LIMIT_KEY, options);

/** The guard lets this controller's or handler's requests through unchecked. */
export const SkipRateLimit = () => SetMetadata(SKIP_RATE_LIMIT_KEY, true);
