import 'reflect-metadata';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';

/** A Nest app on Express, listening on a free loopback port. */
export interface App {
  url: string;
  close(): Promise<void>;
}

export async function startApp(module: unknown, setup?: (app: INestApplication) => void): Promise<App> {
  const app = await NestFactory.create(module as never, { logger: false });
  setup?.(app);
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { url, close: () => app.close() };
}

/** Sends `count` requests one after the other; returns their responses (bodies read). */
export async function send(
  url: string,
  count: number,
  init: RequestInit = {},
): Promise<{ status: number; headers: Headers; body: string; ms: number }[]> {
  const out = [];
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    const response = await fetch(url, init);
    const body = await response.text();
    out.push({ status: response.status, headers: response.headers, body, ms: performance.now() - started });
  }
  return out;
}
