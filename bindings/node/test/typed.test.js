'use strict';
// The parsed (`*Obj`) variants beside the JSON-text results.
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

const P = { actions: [{ id: 'a', type: 'tool_call', tool: 't', parameters: { x: 1 } }] };

test('runtime *Obj methods equal the parsed JSON text', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('t');
  rt.stateSet('k', [1, 2]);
  const text = JSON.parse(await car.executeProposal(rt, P, () => ({ ok: 1 })));
  const obj = await car.executeProposalObj(rt, P, () => ({ ok: 1 }));
  assert.deepEqual(obj.results[0].output, text.results[0].output);
  assert.equal(obj.results[0].status, 'succeeded');
  assert.deepEqual(Object.keys(obj).sort(), Object.keys(text).sort());
  assert.deepEqual(await rt.verifyProposalObj(P), JSON.parse(await rt.verifyProposal(P)));
  assert.deepEqual(await rt.listToolsObj(), JSON.parse(await rt.listTools()));
  assert.deepEqual(await rt.listPoliciesObj(), []);
  assert.equal((await rt.eventQueryObj({})).count, await rt.eventCount());
  assert.deepEqual(await rt.verifyEventLogChainObj(), JSON.parse(await rt.verifyEventLogChain()));
  assert.deepEqual(rt.stateGetObj('k'), [1, 2]);
  assert.equal(rt.stateGetObj('absent'), null);
  assert.deepEqual(rt.stateSnapshotObj(), { k: [1, 2] });
  assert.equal(typeof rt.admissionConfigObj(), 'object');
  const plan = rt.proposalPlanObj(P);
  assert.equal(typeof plan.plan_id, 'string');
  const applied = await rt.proposalApplyObj(plan.plan_id, () => 5);
  assert.equal(applied.results[0].output, 5);
  car.registerToolHandler(() => 6);
  try {
    assert.equal((await rt.submitProposalObj(P)).results[0].output, 6);
  } finally {
    car.unregisterToolHandler();
  }
});

test('standalone *Obj functions equal the parsed JSON text', () => {
  assert.deepEqual(car.verifyObj(P, null, ['t']), JSON.parse(car.verify(P, null, ['t'])));
  assert.equal(car.normalizeProposalObj(P).actions[0].failure_behavior, 'abort');
  assert.deepEqual(car.optimizeObj(P).actions, JSON.parse(car.optimize(P)).actions);
  assert.equal(car.transactionCheckObj(P).consistent, true);
  assert.deepEqual(car.permissionClassifyObj(P), JSON.parse(car.permissionClassify(P)));
  const w = { actions: [{ type: 'state_write', parameters: { key: 'a', value: 2 } }] };
  assert.deepEqual(car.simulateObj(w), JSON.parse(car.simulate(w)));
  assert.throws(() => car.verifyObj('{'), (e) => e instanceof car.CarInputError);
});

test('the tool call has the documented ToolCall fields', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('t');
  let call;
  await car.executeProposal(rt, P, (c) => {
    call = JSON.parse(c);
    return null;
  });
  assert.deepEqual(Object.keys(call).sort(), ['action_id', 'attempt', 'params', 'request_id', 'session_id', 'timeout_ms', 'tool']);
  assert.equal(call.attempt, 1);
});

test('the README example of errors, ES modules and types runs as written', () => {
  const fs = require('node:fs');
  const path = require('node:path');
  const { execFileSync } = require('node:child_process');
  const text = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
  const m = /## Errors, ES modules and types\n[\s\S]*?```js\n([\s\S]*?)```/.exec(text);
  assert.ok(m, 'the README has the example');
  // Run inside the package, where `require('car-runtime')` is the package itself.
  const out = execFileSync(process.execPath, ['-e', m[1]], { cwd: path.join(__dirname, '..'), encoding: 'utf8' });
  assert.equal(out, 'succeeded\ntrue invalid_json\n');
});
