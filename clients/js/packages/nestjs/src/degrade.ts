import type { Decision } from '@floodgate/client';

/** Where {@link FloodgateGuard} leaves its verdict on the request. */
export const DECISION_KEY = 'floodgate';

/** The verdict the guard decided `request` with, if it checked it. */
export function floodgateDecision(request: object): Decision | undefined {
  return (request as { [DECISION_KEY]?: Decision })[DECISION_KEY];
}

/**
 * The model to serve `request` with: the `degrade_to` of the guard's verdict when the request's
 * plan is over its limit and its `overage` switches models (`overage: {free: {degrade_to:
 * gpt-4o-mini}}`), else `requested`.
 *
 * ```ts
 * @Post('chat')
 * chat(@Req() req: Request, @Body() body: { model: string }) {
 *   const model = degradedModel(req, body.model);
 * }
 * ```
 */
export function degradedModel(request: object, requested: string): string {
  return floodgateDecision(request)?.degradeTo ?? requested;
}
