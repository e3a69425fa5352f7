import 'reflect-metadata';
import { Controller, Get, Inject, Injectable, Module, Post, UseGuards } from '@nestjs/common';
import { Throttle, ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler';
import { FloodgateClient } from '@floodgate/client';
import { FloodgateGuard, FloodgateModule, FloodgateThrottlerStorage, RateLimit } from '@floodgate/nestjs';

/** Injects the client by the class `@floodgate/client` exports: the one the module provides. */
@Injectable()
export class Usage {
  constructor(@Inject(FloodgateClient) readonly client: FloodgateClient) {}
}

@Controller()
@UseGuards(FloodgateGuard)
export class ChatController {
  constructor(@Inject(Usage) private readonly usage: Usage) {}

  @Post('chat')
  @RateLimit({ rule: 'chat' })
  chat() {
    return { answer: '…', calls: this.usage.client.stats().calls };
  }
}

@Controller()
@UseGuards(ThrottlerGuard)
export class ItemsController {
  @Get('items')
  items() {
    return [];
  }

  @Get('search')
  @Throttle({ default: { limit: 5, ttl: 10_000 }, burst: { limit: 2, ttl: 1_000 } })
  search() {
    return [];
  }

  @Post('login')
  @Throttle({ default: { limit: 2, ttl: 10_000, blockDuration: 120_000 } })
  login() {
    return { token: '…' };
  }
}

export function appModule(floodgateUrl: string) {
  @Module({
    imports: [
      FloodgateModule.forRoot({ url: floodgateUrl, deadline: 1000, guard: 'per-controller' }),
      ThrottlerModule.forRoot({
        throttlers: [
          { ttl: 60_000, limit: 3 },
          { name: 'burst', ttl: 1_000, limit: 100 },
        ],
        storage: new FloodgateThrottlerStorage({ url: floodgateUrl, deadline: 1000 }),
      }),
    ],
    controllers: [ChatController, ItemsController],
    providers: [Usage],
  })
  class AppModule {}
  return AppModule;
}
