// The first-party fetch tool `http_fetch` through the Node binding, against an
// HTTP server on loopback that the test starts.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const http = require('node:http');
const car = require('..');
const { CarRuntime } = car;

function startServer() {
  const seen = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      seen.push({ method: req.method, url: req.url, headers: req.headers, body });
      if (req.url === '/ok') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('hello from node');
      } else if (req.url === '/to-ok') {
        res.writeHead(302, { location: '/ok' });
        res.end();
      } else if (req.url === '/to-private') {
        res.writeHead(302, { location: 'http://10.0.0.1/' });
        res.end();
      } else if (req.url === '/echo') {
        res.writeHead(200);
        res.end(body);
      } else {
        res.writeHead(404);
        res.end('missing');
      }
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, seen, port: server.address().port })));
}

async function runtime(config) {
  const rt = new CarRuntime();
  await rt.registerFetchTool();
  await rt.setPermissions(config);
  return rt;
}

async function fetchOnce(rt, parameters) {
  const p = { id: 'p', actions: [{ id: 'f', type: 'tool_call', tool: 'http_fetch', parameters, max_retries: 0 }] };
  return JSON.parse(await car.executeProposal(rt, p, () => ({ host: true }))).results[0];
}

test('http_fetch reaches an allowlisted loopback address and follows checked redirects', async () => {
  const { server, seen, port } = await startServer();
  try {
    const rt = await runtime({ inspectors: { egress_allowlist: ['127.0.0.1'] } });
    let r = await fetchOnce(rt, { url: `http://127.0.0.1:${port}/ok` });
    assert.strictEqual(r.status, 'succeeded', JSON.stringify(r));
    assert.strictEqual(r.output.status, 200);
    assert.strictEqual(r.output.body, 'hello from node');
    assert.strictEqual(seen[0].headers.host, `127.0.0.1:${port}`);
    r = await fetchOnce(rt, { url: `http://127.0.0.1:${port}/echo`, method: 'POST', body: 'ping', headers: { 'x-a': 'b' } });
    assert.strictEqual(r.output.body, 'ping', JSON.stringify(r));
    assert.strictEqual(seen[1].headers['x-a'], 'b');
    r = await fetchOnce(rt, { url: `http://127.0.0.1:${port}/to-ok` });
    assert.deepStrictEqual(r.output.redirects, [`http://127.0.0.1:${port}/ok`]);
    r = await fetchOnce(rt, { url: `http://127.0.0.1:${port}/to-private` });
    assert.strictEqual(r.status, 'failed', JSON.stringify(r));
    assert.match(r.error, /refused `http:\/\/10\.0\.0\.1\/`/);
  } finally {
    server.close();
  }
});

test('http_fetch refuses internal addresses in any spelling before connecting', async () => {
  const { server, seen, port } = await startServer();
  try {
    const rt = await runtime({});
    for (const host of ['127.0.0.1', 'localhost', '2130706433', '0x7f.1', '[::ffff:7f00:1]', '[::1]']) {
      const r = await fetchOnce(rt, { url: `http://${host}:${port}/ok` });
      assert.strictEqual(r.status, 'failed', `${host}: ${JSON.stringify(r)}`);
      assert.match(r.error, /refused .*loopback/, host);
    }
    const r = await fetchOnce(rt, { url: 'http://169.254.169.254/latest/meta-data/' });
    assert.match(r.error, /cloud metadata address/);
    assert.deepStrictEqual(seen, []);
  } finally {
    server.close();
  }
});
