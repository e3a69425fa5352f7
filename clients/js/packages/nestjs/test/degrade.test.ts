import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Controller, Module, Post, Req } from '@nestjs/common';
import { FloodgateModule, degradedModel, floodgateDecision } from '@floodgate/nestjs';
import { startFloodgate, type RunningFloodgate } from '@floodgate/testkit';
import { send, startApp, type App } from './support.js';

// Per tenant and month: free 2 calls then the small model, enterprise 2 calls then refused.
const CONFIG = `
store: { kind: memory }
rules:
  - name: monthly-calls
    match: { route: "POST /chat" }
    key: [tenant]
    algorithm: fixed_window
    window: 30d
    limit: { by: plan, values: { free: 2, enterprise: 2 } }
    overage:
      free: { degrade_to: gpt-4o-mini }
      enterprise: deny
`;

@Controller()
class ChatController {
  @Post('chat')
  chat(@Req() req: object) {
    return { model: degradedModel(req, 'gpt-4o'), checked: floodgateDecision(req) !== undefined };
  }
}


let floodgate: RunningFloodgate;
let app: App;
before(async () => {
  floodgate = await startFloodgate(CONFIG);
  @Module({
    imports: [
      FloodgateModule.forRoot({
        url: floodgate.url,
        deadline: 1000,
        descriptors: (ctx) => {
          const req = ctx.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>();
          return { plan: req.headers['x-plan'] ?? 'free' };
        },
      }),
    ],
    controllers: [ChatController],
  })
  class AppModule {}
  app = await startApp(AppModule);
});
after(async () => {
  await app.close();
  await floodgate.stop();
});

const chat = (tenant: string, plan: string): RequestInit => ({
  method: 'POST',
  headers: { 'x-tenant-id': tenant, 'x-plan': plan },
});

describe('degradedModel', () => {
  it('keeps the requested model within the plan, then switches to degrade_to past it', async () => {
    const answers = await send(`${app.url}/chat`, 4, chat('t-free', 'free'));
    assert.deepEqual(answers.map((a) => a.status), [201, 201, 201, 201]);
    assert.deepEqual(
      answers.map((a) => JSON.parse(a.body).model),
      ['gpt-4o', 'gpt-4o', 'gpt-4o-mini', 'gpt-4o-mini'],
    );
    assert.equal(answers[2]!.headers.get('floodgate-degrade'), 'gpt-4o-mini', 'the header passed through');
    assert.equal(JSON.parse(answers[0]!.body).checked, true);
  });

  it('refuses a plan whose overage denies, and never degrades it', async () => {
    const answers = await send(`${app.url}/chat`, 3, chat('t-ent', 'enterprise'));
    assert.deepEqual(answers.map((a) => a.status), [201, 201, 429]);
    assert.deepEqual(answers.slice(0, 2).map((a) => JSON.parse(a.body).model), ['gpt-4o', 'gpt-4o']);
  });
});
