// The NestJS peer of floodgate-bench (bench/run-all): POST /chat behind @nestjs/throttler's
// ThrottlerGuard, in-memory storage, LIMIT requests per TTL_MS per user, the user taken from the
// x-user-id header (the same contract as Floodgate's crates/floodgate-bench/examples/route_app.rs).
// Listens on 127.0.0.1:$PORT (default 3000).
import 'reflect-metadata';
import { Controller, HttpCode, Injectable, Module, Post } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler';

function envNumber(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value <= 0) {
    console.error(`${name}: expected a positive integer`);
    process.exit(64);
  }
  return value;
}

const LIMIT = envNumber('LIMIT', 10);
const TTL_MS = envNumber('TTL_MS', 60_000);
const PORT = envNumber('PORT', 3000);

/** Tracks users by the x-user-id header instead of the client address. */
@Injectable()
class UserThrottlerGuard extends ThrottlerGuard {
  protected async getTracker(req: Record<string, any>): Promise<string> {
    return String(req.headers['x-user-id'] ?? req.ip);
  }
}

@Controller()
class ChatController {
  @Post('chat')
  @HttpCode(200)
  chat(): { reply: string } {
    return { reply: 'ok' };
  }
}

@Module({
  imports: [ThrottlerModule.forRoot([{ limit: LIMIT, ttl: TTL_MS }])],
  controllers: [ChatController],
  providers: [{ provide: APP_GUARD, useClass: UserThrottlerGuard }],
})
class AppModule {}

async function main(): Promise<void> {
  const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  await app.listen(PORT, '127.0.0.1');
  console.log(`nestjs-throttler listening on http://127.0.0.1:${PORT}/chat (${LIMIT} per ${TTL_MS} ms per user)`);
}

main();
