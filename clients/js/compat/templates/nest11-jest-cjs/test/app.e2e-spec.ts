import { Test, TestingModule } from '@nestjs/testing';
import { INestApplication } from '@nestjs/common';
import request from 'supertest';
import { App } from 'supertest/types';
import { startFloodgate, RunningFloodgate } from '@floodgate/testkit';
import { AppModule } from './../src/app.module';

const CONFIG = `
store: { kind: memory }
descriptors: [rule, throttler, throttler_key, throttler_limit, throttler_ttl]
rules:
  - name: chat
    match: { rule: chat }
    key: [ip]
    algorithm: fixed_window
    limit: 2
    window: 60s
  - name: throttler-default
    match: { throttler: default }
    key: [throttler_key]
    algorithm: fixed_window
    limit: 3
    window: 60s
`;

describe('Floodgate in a NestJS 11 app (e2e)', () => {
  let floodgate: RunningFloodgate;
  let app: INestApplication<App>;

  beforeAll(async () => {
    floodgate = await startFloodgate(CONFIG);
    process.env.FLOODGATE_URL = floodgate.url;
    const moduleFixture: TestingModule = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleFixture.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app.close();
    await floodgate.stop();
  });

  it('POST /chat: the Floodgate guard lets 2 through, then answers 429 problem+json', async () => {
    const server = app.getHttpServer();
    await request(server).post('/chat').expect(201).expect('x-ratelimit-remaining', '1');
    await request(server).post('/chat').expect(201).expect('x-ratelimit-remaining', '0');
    const denied = await request(server).post('/chat').expect(429);
    expect(denied.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(Number(denied.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(denied.body.type).toBe('https://floodgate.dev/problems/rate-limited');
  });

  it('GET /items: ThrottlerGuard on FloodgateThrottlerStorage lets 3 through, then answers 429', async () => {
    const server = app.getHttpServer();
    for (const remaining of ['2', '1', '0']) {
      await request(server).get('/items').expect(200).expect('x-ratelimit-remaining', remaining);
    }
    const denied = await request(server).get('/items').expect(429);
    expect(Number(denied.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  });
});
