// The sandbox under `shell` through the Node binding (issue #26).
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const car = require('..');
const { CarRuntime } = car;

async function shell(rt, command) {
  const p = { id: 'p', actions: [{ id: 's', type: 'tool_call', tool: 'shell', parameters: { command }, max_retries: 0 }] };
  const out = JSON.parse(await car.executeProposal(rt, p, () => ({ host: true })));
  return out.results[0];
}

test('shell runs under workspace-write by default', async () => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-sandbox-'));
  try {
    const root = path.join(base, 'root');
    const outside = path.join(base, 'outside');
    fs.mkdirSync(root);
    fs.mkdirSync(outside);
    const rt = new CarRuntime();
    await rt.registerShellTool(root);
    let r = await shell(rt, 'echo in > inside.txt');
    assert.strictEqual(r.status, 'succeeded', JSON.stringify(r));
    assert.strictEqual(fs.readFileSync(path.join(root, 'inside.txt'), 'utf8'), 'in\n');
    const target = path.join(outside, 'escape.txt');
    r = await shell(rt, `echo out > ${target}`);
    assert.strictEqual(r.status, 'failed', JSON.stringify(r));
    assert.match(r.error, /Permission denied/);
    assert.ok(!fs.existsSync(target));
    process.env.CAR_NODE_SANDBOX_SECRET = 'hunter2';
    try {
      r = await shell(rt, 'echo "[$CAR_NODE_SANDBOX_SECRET]"');
      assert.strictEqual(r.status, 'succeeded', JSON.stringify(r));
      assert.strictEqual(r.output.stdout, '[]\n');
    } finally {
      delete process.env.CAR_NODE_SANDBOX_SECRET;
    }
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
  }
});
