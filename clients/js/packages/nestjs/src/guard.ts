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

/** What a handler's and its controller's decorators say, read once per handler and controller. */
interface RouteMetadata {
  skip: boolean;
  options: RateLimitOptions;
}

/** The options of a check with no cost of its own: one object for every such check. */
const NO_OPTIONS = Object.freeze({});

/**
 * Checks each HTTP request against Floodgate: descriptors from the request (`method`, `route`,
 * `ip`, `user`, `tenant`), the module's and the route's `@RateLimit()`; the rate-limit headers on
 * the response; a {@link FloodgateRateLimitException} (429) when denied. Concurrency permits an
 * allowed check took are released when the response ends (`finish`, `close` or `error`, once).
 * Other contexts (RPC, WebSocket) pass through.
 */
@Injectable()
export class FloodgateGuard implements CanActivate {
  /** Handler → controller → its metadata (decorators are fixed once the app is built). */
  private readonly metadata = new WeakMap<object, WeakMap<object, RouteMetadata>>();

  constructor(
    @Inject(FLOODGATE_OPTIONS) private readonly options: FloodgateModuleOptions,
    @Inject(FloodgateClient) private readonly client: FloodgateClient,
    @Inject(Reflector) private readonly reflector: Reflector,
  ) {}

  async canActivate(ctx: ExecutionContext): Promise<boolean> {
    if (ctx.getType() !== 'http') return true;
    const { skip, options: route } = this.routeMetadata(ctx.getHandler(), ctx.getClass());
    if (skip) return true;
    const http = ctx.switchToHttp();
    const req = http.getRequest<IncomingLike>();
    const res = http.getResponse<ResponseLike>();

    const descriptors = describeRequest(req, this.options.identity);
    if (this.options.descriptors !== undefined) Object.assign(descriptors, await this.options.descriptors(ctx));
    if (route.rule !== undefined) descriptors.rule = route.rule;
    if (route.descriptors !== undefined) Object.assign(descriptors, await route.descriptors(ctx));
    const cost = typeof route.cost === 'function' ? await route.cost(ctx) : route.cost;

    const decision = await this.client.check(descriptors, cost === undefined ? NO_OPTIONS : { cost });
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

  private routeMetadata(handler: object, controller: object): RouteMetadata {
    let byController = this.metadata.get(handler);
    if (byController === undefined) {
      byController = new WeakMap();
      this.metadata.set(handler, byController);
    }
    let found = byController.get(controller);
    if (found === undefined) {
      const targets = [handler as () => void, controller as () => void];
      found = {
        skip: this.reflector.getAllAndOverride<boolean>(SKIP_RATE_LIMIT_KEY, targets) === true,
        options: this.reflector.getAllAndOverride<RateLimitOptions | undefined>(RATE_LIMIT_KEY, targets) ?? {},
      };
      byController.set(controller, found);
    }
    return found;
  }
}

function setHeaders(res: ResponseLike, headers: Decision['headers']): void {
  for (const name in headers) res.setHeader(name, headers[name]!);
}
