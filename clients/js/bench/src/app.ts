/**
 * The minimal Nest app of the benchmark, in one of four variants (argv[2]): `none` (no guard),
 * `throttler-memory` (@nestjs/throttler, in-memory storage), `throttler-floodgate`
 * (@nestjs/throttler on FloodgateThrottlerStorage), `guard` (FloodgateGuard). argv[3] is the
 * Floodgate URL, argv[4] the port. Limits are far above the load: every request is allowed.
 */
import 'reflect-metadata';
import { Controller, Get, Module, type DynamicModule, type Provider } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler';
import { FloodgateModule, FloodgateThrottlerStorage } from '@floodgate/nestjs';

const [variant, url, port] = process.argv.slice(2) as [string, string, string];

@Controller()
class Hello {
  @Get('hello')
  hello() {
    return { hello: 'world' };
  }
}

const LIMIT = 1_000_000_000;
const imports: DynamicModule[] = [];
const providers: Provider[] = [];
switch (variant) {
  case 'none':
    break;
  case 'throttler-memory':
    imports.push(ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: LIMIT }] }));
    providers.push({ provide: APP_GUARD, useClass: ThrottlerGuard });
    break;
  case 'throttler-floodgate':
    imports.push(
      ThrottlerModule.forRoot({
        throttlers: [{ ttl: 60_000, limit: LIMIT }],
        storage: new FloodgateThrottlerStorage({ url, deadline: 1000 }),
      }),
    );
    providers.push({ provide: APP_GUARD, useClass: ThrottlerGuard });
    break;
  case 'guard':
    imports.push(FloodgateModule.forRoot({ url, deadline: 1000 }));
    break;
  default:
    throw new Error(`unknown variant ${variant}`);
}

@Module({ imports, providers, controllers: [Hello] })
class AppModule {}

const app = await NestFactory.create(AppModule, { logger: false });
await app.listen(Number(port), '127.0.0.1');
// A clean exit on SIGTERM, so that a profiled run (--cpu-prof) writes its profile.
process.once('SIGTERM', () => process.exit(0));
process.send?.('ready');
