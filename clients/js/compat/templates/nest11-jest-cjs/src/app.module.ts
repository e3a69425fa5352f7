import { Module } from '@nestjs/common';
import { ThrottlerModule } from '@nestjs/throttler';
import { FloodgateModule, FloodgateThrottlerStorage } from '@floodgate/nestjs';
import { ChatController, ItemsController } from './app.controller';

const floodgateUrl = () => process.env.FLOODGATE_URL ?? 'http://127.0.0.1:8080';

@Module({
  imports: [
    FloodgateModule.forRootAsync({
      guard: 'per-controller',
      useFactory: () => ({ url: floodgateUrl(), deadline: 1000 }),
    }),
    ThrottlerModule.forRootAsync({
      useFactory: () => ({
        throttlers: [{ ttl: 60_000, limit: 3 }],
        storage: new FloodgateThrottlerStorage({ url: floodgateUrl(), deadline: 1000 }),
      }),
    }),
  ],
  controllers: [ChatController, ItemsController],
})
export class AppModule {}
