import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { it } from 'node:test';
import * as client from '@floodgate/client';
import * as express from '@floodgate/express';
import { scenario } from './scenario.cjs';

it('import: @floodgate/client and @floodgate/express check against the real server', async () => {
  await scenario(client, express);
});

it('import and require give one copy of each package', () => {
  const require = createRequire(import.meta.url);
  assert.equal(require('@floodgate/client').FloodgateClient, client.FloodgateClient);
  assert.equal(require('@floodgate/express').floodgate, express.floodgate);
});
