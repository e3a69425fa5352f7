import { Controller, Get, Module, Post, UseGuards } from '@nestjs/common';
import { Throttle, ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler';
import { FloodgateGuard, FloodgateModule, FloodgateThrottlerStorage, RateLimit } from '@floodgate/nestjs';

@Controller()
@UseGuards(FloodgateGuard)
export class ChatController {
  @Post('chat')
  @RateLimit({ rule: 'chat' })
  chat() {
    return { answer: '…' };
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
  @Throttle({ default: { limit: 5, ttl: 10_000 } })
  search() {
    return [];
  }
}

export function appModule(floodgateUrl: string) {
  @Module({
    imports: [
      FloodgateModule.forRoot({ url: floodgateUrl, deadline: 1000, guard: 'per-controller' }),
      ThrottlerModule.forRoot({
        throttlers: [{ ttl: 60_000, limit: 3 }],
        storage: new FloodgateThrottlerStorage({ url: floodgateUrl, deadline: 1000 }),
      }),
    ],
    controllers: [ChatController, ItemsController],
  })
  class AppModule {}
  return AppModule;
}
