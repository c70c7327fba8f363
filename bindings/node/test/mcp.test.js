'use strict';
// The admission document's `mcp` section from Node: the tools of a real MCP
// server (examples/mcp_upstream.rs, over stdio) are imported with source
// `mcp`, validated against their input schema, admitted like every tool and
// never reach the host's callback.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const car = require('..');

const triple = process.env.CARGO_BUILD_TARGET || 'x86_64-unknown-linux-gnu';
const upstream = path.join(__dirname, '..', '..', '..', 'target', triple, 'debug', 'examples', 'mcp_upstream');

const one = (tool, parameters = {}) => ({ id: 'p', actions: [{ id: 'a', type: 'tool_call', tool, parameters }] });

test('an mcp section imports and governs the tools of an MCP server', async () => {
  assert.ok(fs.existsSync(upstream), `${upstream}: build with cargo build --all-targets --all-features`);
  const rt = new car.CarRuntime();
  await rt.setPermissions({ deny: [{ tool: 'up_fail' }], mcp: { servers: { t: { command: upstream, prefix: 'up_' } } } });
  const tools = JSON.parse(await rt.listTools());
  assert.ok(tools.some((t) => t.name === 'up_echo' && t.source === 'mcp'));
  const host = [];
  const run = async (tool, params) =>
    JSON.parse(await car.executeProposal(rt, one(tool, params), (c) => { host.push(c); return {}; })).results[0];
  let r = await run('up_echo', { text: 'from node' });
  assert.equal(r.status, 'succeeded', JSON.stringify(r));
  assert.equal(r.output, 'from node');
  assert.deepEqual((await run('up_add', { a: 4, b: 5 })).output, { sum: 9 });
  assert.equal((await run('up_fail')).status, 'rejected');
  assert.notEqual((await run('up_echo', { text: 3 })).status, 'succeeded');
  assert.deepEqual(host, []);
  // The drift report and contract hashes, from Node.
  const status = rt.mcpStatusObj();
  const t = status.servers.t;
  assert.equal(t.connections, 1);
  assert.match(t.toolset_hash, /^[0-9a-f]{64}$/);
  assert.deepEqual(t.drift, []);
  const echo = t.tools.find((x) => x.name === 'up_echo');
  assert.equal(echo.accepted_hash, echo.current_hash);
  assert.equal(echo.refused, false);
});
