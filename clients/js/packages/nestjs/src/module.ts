import { Inject, Module, type DynamicModule, type OnApplicationBootstrap, type Provider } from '@nestjs/common';
import { APP_FILTER, APP_GUARD } from '@nestjs/core';
import { FloodgateClient, type FloodgateClientOptions } from '@floodgate/client';
import { FloodgateRateLimitFilter } from './exception.js';
import { FloodgateGuard } from './guard.js';
import {
  FLOODGATE_OPTIONS,
  type FloodgateModuleAsyncOptions,
  type FloodgateModuleOptions,
  type GuardScope,
} from './options.js';

function clientFor(options: FloodgateModuleOptions): FloodgateClient {
  const clientOptions: FloodgateClientOptions = { url: options.url };
  if (options.deadline !== undefined) clientOptions.deadline = options.deadline;
  if (options.failMode !== undefined) clientOptions.failMode = options.failMode;
  if (options.headers !== undefined) clientOptions.headers = options.headers;
  return new FloodgateClient(clientOptions);
}

function scopeOf(guard: GuardScope | undefined): GuardScope {
  const scope = guard ?? 'global';
  if (scope !== 'global' && scope !== 'per-controller') {
    throw new TypeError(`FloodgateModule: guard must be 'global' or 'per-controller', got ${JSON.stringify(scope)}`);
  }
  return scope;
}

function providers(scope: GuardScope): Provider[] {
  const list: Provider[] = [
    { provide: FloodgateClient, useFactory: clientFor, inject: [FLOODGATE_OPTIONS] },
    FloodgateGuard,
    { provide: APP_FILTER, useClass: FloodgateRateLimitFilter },
  ];
  if (scope === 'global') list.push({ provide: APP_GUARD, useExisting: FloodgateGuard });
  return list;
}

/**
 * Floodgate in a Nest app: a {@link FloodgateClient} to inject, and the {@link FloodgateGuard} —
 * on every route (`guard: 'global'`, the default) or where `@UseGuards(FloodgateGuard)` puts it
 * (`guard: 'per-controller'`), and {@link FloodgateRateLimitFilter}, which sends its 429s. The
 * module is global: import it once, in the root module.
 */
@Module({})
export class FloodgateModule implements OnApplicationBootstrap {
  constructor(@Inject(FloodgateClient) private readonly client: FloodgateClient) {}

  /** Connects to Floodgate before the first request (see `FloodgateClient.warmup`). */
  async onApplicationBootstrap(): Promise<void> {
    await this.client.warmup();
  }

  static forRoot(options: FloodgateModuleOptions & { guard?: GuardScope }): DynamicModule {
    const scope = scopeOf(options.guard);
    const { guard: _guard, ...rest } = options;
    clientFor(rest); // checks url, deadline and failMode now, at startup
    return {
      module: FloodgateModule,
      global: true,
      providers: [{ provide: FLOODGATE_OPTIONS, useValue: rest }, ...providers(scope)],
      exports: [FLOODGATE_OPTIONS, FloodgateClient, FloodgateGuard],
    };
  }

  static forRootAsync(options: FloodgateModuleAsyncOptions): DynamicModule {
    const scope = scopeOf(options.guard);
    return {
      module: FloodgateModule,
      global: true,
      imports: options.imports ?? [],
      providers: [
        { provide: FLOODGATE_OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] },
        ...providers(scope),
      ],
      exports: [FLOODGATE_OPTIONS, FloodgateClient, FloodgateGuard],
    };
  }
}
