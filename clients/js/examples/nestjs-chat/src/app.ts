import 'reflect-metadata';
import { Body, Controller, Get, Headers, HttpCode, HttpException, Injectable, Module, Post, Res } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { INestApplication } from '@nestjs/common';
import { FloodgateClient, retry, withTimeout } from '@floodgate/client';
import { FloodgateModule, FloodgateRateLimitException, SkipRateLimit } from '@floodgate/nestjs';

/** The model behind the API; a real app calls its LLM provider here. */
@Injectable()
export class Model {
  async complete(prompt: string, signal: AbortSignal): Promise<string> {
    if (signal.aborted) throw signal.reason;
    return `echo: ${prompt}`;
  }
}

@Controller()
export class ChatController {
  constructor(
    private readonly model: Model,
    private readonly floodgate: FloodgateClient,
  ) {}

  /** Limited by the global guard: `chat-per-user` (10/min) and `chat-per-tenant` (1000/h). */
  @Post('chat')
  @HttpCode(200)
  async chat(@Body() body: { prompt?: string }) {
    const prompt = body?.prompt ?? '';
    // Retried only when the model surely did not run (connection refused, 429); a timeout is not.
    const answer = await retry(() => withTimeout((signal) => this.model.complete(prompt, signal), 'standard'), {
      attempts: 2,
      jitter: 'full',
    });
    return { answer };
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
    if (!step.allowed) {
      // The same 429 as the guard's: problem+json, Retry-After and the rate-limit headers.
      const denial = new FloodgateRateLimitException(step.decision);
      for (const [name, value] of Object.entries(denial.headers)) res.setHeader(name, value);
      res.setHeader('content-type', 'application/problem+json; charset=utf-8');
      throw denial;
    }
    return { remaining: step.remaining };
  }

  @Get('healthz')
  @SkipRateLimit()
  health() {
    return 'ok';
  }
}

export function appModule(floodgateUrl: string, deadline = 50) {
  @Module({
    imports: [FloodgateModule.forRoot({ url: floodgateUrl, deadline, failMode: 'open' })],
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
