import { Inject, Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import {
  FloodgateClient,
  describeRequest,
  releaseOnEnd,
  type Decision,
  type IncomingLike,
  type OutgoingLike,
} from '@floodgate/client';
import { RATE_LIMIT_KEY, SKIP_RATE_LIMIT_KEY } from './decorators.js';
import { DECISION_KEY } from './degrade.js';
import { FloodgateRateLimitException, PROBLEM_CONTENT_TYPE } from './exception.js';
import { FLOODGATE_OPTIONS, type FloodgateModuleOptions, type RateLimitOptions } from './options.js';

interface ResponseLike extends OutgoingLike {
  setHeader(name: string, value: string): unknown;
  locals?: Record<string, unknown>;
}

/**
 * Checks each HTTP request against Floodgate: descriptors from the request (`method`, `route`,
 * `ip`, `user`, `tenant`), the module's and the route's `@RateLimit()`; the rate-limit headers on
 * the response; a {@link FloodgateRateLimitException} (429) when denied. Concurrency permits an
 * allowed check took are released when the response ends (`finish`, `close` or `error`, once).
 * Other contexts (RPC, WebSocket) pass through.
 */
@Injectable()
export class FloodgateGuard implements CanActivate {
  constructor(
    @Inject(FLOODGATE_OPTIONS) private readonly options: FloodgateModuleOptions,
    @Inject(FloodgateClient) private readonly client: FloodgateClient,
    @Inject(Reflector) private readonly reflector: Reflector,
  ) {}

  async canActivate(ctx: ExecutionContext): Promise<boolean> {
    if (ctx.getType() !== 'http') return true;
    const targets = [ctx.getHandler(), ctx.getClass()];
    if (this.reflector.getAllAndOverride<boolean>(SKIP_RATE_LIMIT_KEY, targets) === true) return true;
    const route = this.reflector.getAllAndOverride<RateLimitOptions | undefined>(RATE_LIMIT_KEY, targets) ?? {};
    const http = ctx.switchToHttp();
    const req = http.getRequest<IncomingLike>();
    const res = http.getResponse<ResponseLike>();

    const descriptors = describeRequest(req, this.options.identity);
    if (this.options.descriptors !== undefined) Object.assign(descriptors, await this.options.descriptors(ctx));
    if (route.rule !== undefined) descriptors.rule = route.rule;
    if (route.descriptors !== undefined) Object.assign(descriptors, await route.descriptors(ctx));
    const cost = typeof route.cost === 'function' ? await route.cost(ctx) : route.cost;

    const decision = await this.client.check(descriptors, cost === undefined ? {} : { cost });
    if (res.locals !== undefined) res.locals.floodgate = decision;
    (req as { [DECISION_KEY]?: Decision })[DECISION_KEY] = decision;
    if (decision.allowed) {
      if (decision.reservation !== null) releaseOnEnd(this.client, decision.reservation, res);
      if (this.options.headersOnAllowed ?? true) setHeaders(res, decision.headers);
      return true;
    }
    const denial = new FloodgateRateLimitException(decision);
    setHeaders(res, denial.headers);
    res.setHeader('content-type', PROBLEM_CONTENT_TYPE);
    throw denial;
  }
}

function setHeaders(res: ResponseLike, headers: Decision['headers']): void {
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
}
