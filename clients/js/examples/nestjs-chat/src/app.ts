import 'reflect-metadata';
import { Body, Controller, Get, Headers, HttpCode, HttpException, Injectable, Module, Post, Req, Res } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { INestApplication } from '@nestjs/common';
import { FloodgateClient, retry, withTimeout, type Decision } from '@floodgate/client';
import { FloodgateModule, FloodgateRateLimitException, SkipRateLimit, degradedModel } from '@floodgate/nestjs';

/** A rough token count: a token is about four characters of English text. */
export function tokensOf(text: string): number {
  return Math.ceil(text.length / 4);
}

/** What the model answered and the tokens it used (prompt and completion), as providers report it. */
export interface Completion {
  text: string;
  tokens: number;
}

/**
 * The model behind the API; a real app calls its LLM provider here. This one echoes the prompt;
 * the prompt `slow` answers only after 30 s (or when aborted), to show a cancelled call.
 */
@Injectable()
export class Model {
  async complete(prompt: string, maxTokens: number, signal: AbortSignal): Promise<Completion> {
    if (prompt === 'slow') {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, 30_000);
        signal.addEventListener('abort', () => {
          clearTimeout(timer);
          reject(signal.reason);
        }, { once: true });
      });
    }
    if (signal.aborted) throw signal.reason;
    const text = `echo: ${prompt}`.slice(0, maxTokens * 4);
    return { text, tokens: tokensOf(prompt) + tokensOf(text) };
  }
}

/** The model a chat asks for, and the one a plan over its monthly quota switches to. */
export const LARGE_MODEL = 'large-model';

/** `max_tokens` when the body gives none. */
export const DEFAULT_MAX_TOKENS = 256;

interface ResponseLike {
  setHeader(name: string, value: string): void;
  on(event: 'close', listener: () => void): void;
  writableFinished: boolean;
}

@Controller()
export class ChatController {
  constructor(
    private readonly model: Model,
    private readonly floodgate: FloodgateClient,
  ) {}

  /**
   * Limited by the global guard: `chat-per-user` (10/min) and `chat-per-tenant` (1000/h). Then
   * the tenant's tokens (`chat-tokens-per-tenant`): the prompt's tokens plus `max_tokens` are
   * reserved before the model runs, the tokens it really used are committed after (the rest goes
   * back), and a call cancelled by its client releases the reservation. A tenant whose plan is
   * over its monthly quota (`monthly-plan`) is answered by the model the verdict degrades to.
   */
  @Post('chat')
  @HttpCode(200)
  async chat(
    @Body() body: { prompt?: string; max_tokens?: number },
    @Headers('x-tenant-id') tenant: string | undefined,
    @Req() req: object,
    @Res({ passthrough: true }) res: ResponseLike,
  ) {
    const model = degradedModel(req, LARGE_MODEL);
    const prompt = body?.prompt ?? '';
    const maxTokens = body?.max_tokens ?? DEFAULT_MAX_TOKENS;
    if (!Number.isSafeInteger(maxTokens) || maxTokens < 1) {
      throw new HttpException({ title: 'Bad Request', status: 400, detail: 'max_tokens must be a whole number ≥ 1' }, 400);
    }
    const held = await this.floodgate.reserve(
      { tenant: tenant ?? 'anonymous' },
      { costs: { tokens: tokensOf(prompt) + maxTokens }, ttl: '2m' },
    );
    if (!held.allowed) throw deny(held, res);
    // The client hung up before the answer: stop the model and give the tokens back.
    const cancel = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) cancel.abort(new Error('the client closed the connection'));
    });
    let completion: Completion;
    try {
      // Retried only when the model surely did not run (connection refused, 429); a timeout is not.
      completion = await retry(
        () => withTimeout((signal) => this.model.complete(prompt, maxTokens, AbortSignal.any([signal, cancel.signal])), 'standard'),
        { attempts: 2, jitter: 'full', signal: cancel.signal },
      );
    } catch (error) {
      // No answer, so no tokens used: release (null when the fail mode allowed without Floodgate).
      if (held.reservation !== null) await this.floodgate.release(held.reservation);
      if (cancel.signal.aborted) throw new HttpException({ title: 'Client Closed Request', status: 499 }, 499);
      throw error;
    }
    if (held.reservation !== null) await this.floodgate.commit(held.reservation, { tokens: completion.tokens });
    return { answer: completion.text, tokens: completion.tokens, model };
  }

  /** One step of an agent session: 50 steps per session (`agent-steps`). */
  @Post('agent/step')
  @HttpCode(200)
  @SkipRateLimit()
  async step(
    @Headers('x-session-id') session: string | undefined,
    @Res({ passthrough: true }) res: { setHeader(name: string, value: string): void },
  ) {
    if (session === undefined || session === '') {
      throw new HttpException({ title: 'Bad Request', status: 400, detail: 'the x-session-id header is required' }, 400);
    }
    const step = await this.floodgate.session.step(session);
    if (!step.allowed) throw deny(step.decision, res);
    return { remaining: step.remaining };
  }

  @Get('healthz')
  @SkipRateLimit()
  health() {
    return 'ok';
  }
}

/** The same 429 as the guard's: problem+json, Retry-After and the rate-limit headers. */
function deny(decision: Decision, res: { setHeader(name: string, value: string): void }): FloodgateRateLimitException {
  const denial = new FloodgateRateLimitException(decision);
  for (const [name, value] of Object.entries(denial.headers)) res.setHeader(name, value);
  res.setHeader('content-type', 'application/problem+json; charset=utf-8');
  return denial;
}

export function appModule(floodgateUrl: string, deadline = 50) {
  @Module({
    imports: [
      FloodgateModule.forRoot({
        url: floodgateUrl,
        deadline,
        failMode: 'open',
        // The tenant's plan, as the authentication in front of the app sets it.
        descriptors: (ctx) => {
          const plan = ctx.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers['x-plan'];
          return { plan: plan ?? 'free' };
        },
      }),
    ],
    controllers: [ChatController],
    providers: [Model],
  })
  class AppModule {}
  return AppModule;
}

/** The app, not yet listening. */
export async function createApp(floodgateUrl: string, deadline?: number): Promise<INestApplication> {
  return NestFactory.create(appModule(floodgateUrl, deadline), { logger: ['error', 'warn'] });
}
