/**
 * The minimal Nest app of the benchmark, in one of five variants (argv[2]): `none` (no guard),
 * `throttler-memory` (@nestjs/throttler, in-memory storage), `throttler-floodgate`
 * (@nestjs/throttler on FloodgateThrottlerStorage), `guard` (FloodgateGuard), `guard-fetch`
 * (FloodgateGuard on a client that sends with Node's `fetch`, as the client did before it had a
 * keep-alive agent of its own). argv[3] is the Floodgate URL, argv[4] the port. Limits are far
 * above the load: every request is allowed.
 */
import 'reflect-metadata';
import { Controller, Get, Module, type DynamicModule, type Provider } from '@nestjs/common';
import { APP_FILTER, APP_GUARD, NestFactory } from '@nestjs/core';
import { ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler';
import {
  FLOODGATE_OPTIONS,
  FloodgateClient,
  FloodgateGuard,
  FloodgateModule,
  FloodgateRateLimitFilter,
  FloodgateThrottlerStorage,
} from '@floodgate/nestjs';

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
  case 'guard-fetch':
    // What FloodgateModule.forRoot provides, with the client sending through `fetch`.
    providers.push(
      { provide: FLOODGATE_OPTIONS, useValue: { url, deadline: 1000 } },
      { provide: FloodgateClient, useValue: new FloodgateClient({ url, deadline: 1000, fetch: globalThis.fetch }) },
      FloodgateGuard,
      { provide: APP_GUARD, useExisting: FloodgateGuard },
      { provide: APP_FILTER, useClass: FloodgateRateLimitFilter },
    );
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
