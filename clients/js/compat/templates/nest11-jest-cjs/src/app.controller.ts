import { Controller, Get, Post, UseGuards } from '@nestjs/common';
import { Throttle, ThrottlerGuard } from '@nestjs/throttler';
import { FloodgateGuard, RateLimit } from '@floodgate/nestjs';

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

  @Post('login')
  @Throttle({ default: { limit: 2, ttl: 10_000, blockDuration: 120_000 } })
  login() {
    return { token: '…' };
  }
}
