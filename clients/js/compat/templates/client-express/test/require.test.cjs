const { it } = require('node:test');
const { scenario } = require('./scenario.cjs');

it('require(): @floodgate/client and @floodgate/express check against the real server', async () => {
  await scenario(require('@floodgate/client'), require('@floodgate/express'));
});
