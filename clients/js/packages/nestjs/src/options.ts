import type { ExecutionContext, ModuleMetadata } from '@nestjs/common';
import type { Descriptors, FailMode, FloodgateClient, IdentityOptions } from '@floodgate/client';

/** Options of {@link FloodgateModule.forRoot}. */
export interface FloodgateModuleOptions {
  /** The server's base URL, e.g. `http://127.0.0.1:8080`. */
  url: string;
  /** How long a check may take (ms) before the fail mode decides. Default 50. */
  deadline?: number;
  /** What to decide when Floodgate gives no verdict in time. Default `open`. */
  failMode?: FailMode;
  /** Descriptors added to every check (e.g. `(ctx) => ({plan: …})`), before a route's own. */
  descriptors?: (ctx: ExecutionContext) => Descriptors | Promise<Descriptors>;
  /** Where `user` and `tenant` come from (`req.user`, else headers). */
  identity?: IdentityOptions;
  /** Pass the rate-limit headers on allowed responses too. Default true. */
  headersOnAllowed?: boolean;
  /** Headers sent to Floodgate with every call (e.g. `authorization`). */
  headers?: Record<string, string>;
}

/** Where the guard applies. */
export type GuardScope =
  /** On every route of the app (`APP_GUARD`); `@SkipRateLimit()` opts a route out. Default. */
  | 'global'
  /** Only where `@UseGuards(FloodgateGuard)` puts it (a controller or a handler). */
  | 'per-controller';

/** Options of {@link FloodgateModule.forRootAsync}. */
export interface FloodgateModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  useFactory: (...args: any[]) => FloodgateModuleOptions | Promise<FloodgateModuleOptions>;
  inject?: any[];
  /** Where the guard applies (known before the factory runs). Default `global`. */
  guard?: GuardScope;
}

/** Options of `@RateLimit()` on a controller or a handler. */
export interface RateLimitOptions {
  /** Sent as the descriptor `rule`, so that rules can `match: { rule: <name> }`. */
  rule?: string;
  /** Descriptors of this route, added to (and overriding) the module's and the defaults. */
  descriptors?: (ctx: ExecutionContext) => Descriptors | Promise<Descriptors>;
  /** The cost of a request. Default 1. */
  cost?: number | ((ctx: ExecutionContext) => number | Promise<number>);
}

/** Injection token of the module's options. */
export const FLOODGATE_OPTIONS = Symbol('FLOODGATE_OPTIONS');

/** Re-exported so that `@Inject(FloodgateClient)` needs one import. */
export type { FloodgateClient };
