import { Test, TestingModule } from '@nestjs/testing';
import { INestApplication } from '@nestjs/common';
import request from 'supertest';
import { App } from 'supertest/types';
import { startFloodgate, ManualClock, RunningFloodgate } from '@floodgate/testkit';
import { AppModule } from './../src/app.module';

// Floodgate with no configuration: its built-in policy has the rule of POST /chat (10 a minute per
// user) and the two template rules that serve every throttler, whatever its @Throttle() says. Its
// clock is the test's to move.
describe('Floodgate in a NestJS 11 app (e2e), on the server\'s built-in policy', () => {
  let floodgate: RunningFloodgate;
  let clock: ManualClock;
  let app: INestApplication<App>;

  beforeAll(async () => {
    floodgate = await startFloodgate(null, { manualClockMs: 1_800_000_000_000 });
    clock = floodgate.clock!;
    process.env.FLOODGATE_URL = floodgate.url;
    const moduleFixture: TestingModule = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleFixture.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app.close();
    await floodgate.stop();
  });

  it('POST /chat: the Floodgate guard lets 10 through, then answers 429 problem+json', async () => {
    const server = app.getHttpServer();
    for (let i = 9; i >= 0; i--) {
      await request(server).post('/chat').set('x-user-id', 'u1').expect(201).expect('x-ratelimit-remaining', String(i));
    }
    const denied = await request(server).post('/chat').set('x-user-id', 'u1').expect(429);
    expect(denied.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(Number(denied.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(denied.body.type).toBe('https://floodgate.dev/problems/rate-limited');
    await request(server).post('/chat').set('x-user-id', 'u2').expect(201);
  });

  it('GET /items: ThrottlerGuard on FloodgateThrottlerStorage lets 3 through, then answers 429', async () => {
    const server = app.getHttpServer();
    for (const remaining of ['2', '1', '0']) {
      await request(server).get('/items').expect(200).expect('x-ratelimit-remaining', remaining).expect('x-ratelimit-reset', '60');
    }
    await request(server).get('/items').expect(429).expect('retry-after', '60');
  });

  it('@Throttle() overrides count with their own limit and ttl; a blockDuration longer than ttl boxes the key', async () => {
    const server = app.getHttpServer();
    for (const remaining of ['4', '3', '2', '1', '0']) {
      await request(server).get('/search').expect(200).expect('x-ratelimit-limit', '5').expect('x-ratelimit-remaining', remaining);
    }
    await request(server).get('/search').expect(429).expect('retry-after', '10');

    await request(server).post('/login').expect(201).expect('x-ratelimit-remaining', '1');
    await request(server).post('/login').expect(201).expect('x-ratelimit-remaining', '0');
    await request(server).post('/login').expect(429).expect('retry-after', '120');
    await clock.advance(60_000); // the ttl is long past; the box holds
    await request(server).post('/login').expect(429).expect('retry-after', '60');
    await clock.advance(60_000);
    await request(server).post('/login').expect(201).expect('x-ratelimit-remaining', '1');
    await request(server).get('/search').expect(200).expect('x-ratelimit-remaining', '4');
  });
});
