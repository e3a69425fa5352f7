// What each loader's test runs: the packages as `require()` or `import` gave them, a check with the
// client and the middleware in an Express app, both against the real server.
const assert = require('node:assert/strict');
const express = require('express');
const { startFloodgate } = require('@floodgate/testkit');

const CONFIG = `
store: { kind: memory }
descriptors: [rule]
rules:
  - name: per-user
    match: { rule: compat }
    key: [user]
    algorithm: fixed_window
    limit: 2
    window: 60s
`;

async function listen(app) {
  const server = app.listen(0, '127.0.0.1');
  await new Promise((ok) => server.once('listening', ok));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((ok) => (server.closeAllConnections(), server.close(ok))),
  };
}

exports.scenario = async function scenario({ FloodgateClient }, { floodgate }) {
  assert.equal(typeof FloodgateClient, 'function');
  assert.equal(typeof floodgate, 'function');
  const server = await startFloodgate(CONFIG);
  try {
    const client = new FloodgateClient({ url: server.url, deadline: 1000 });
    const checked = await client.check({ rule: 'compat', user: 'direct' });
    assert.deepEqual([checked.allowed, checked.limits[0]?.remaining], [true, 1]);

    const app = express();
    app.get('/chat', floodgate({ client, rule: 'compat' }), (_req, res) => res.send('ok'));
    const http = await listen(app);
    try {
      const statuses = [];
      for (let i = 0; i < 3; i++) {
        const answer = await fetch(`${http.url}/chat`, { headers: { 'x-user-id': 'via-express' } });
        await answer.arrayBuffer();
        statuses.push(answer.status);
      }
      assert.deepEqual(statuses, [200, 200, 429]);
    } finally {
      await http.close();
    }
  } finally {
    await server.stop();
  }
};
