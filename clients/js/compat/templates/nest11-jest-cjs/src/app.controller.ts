import { Controller, Get, Post, UseGuards } from '@nestjs/common';
import { ThrottlerGuard } from '@nestjs/throttler';
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
}
