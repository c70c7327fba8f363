'use strict';
// The plan/apply gate and approvals through the Node binding.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const car = require('..');

const OPS = [
  { operation_name: 'write_file', kind: 'resource', risk: 'write' },
  { operation_name: 'read_file', kind: 'data_source', risk: 'read' },
];

test('planBuild decides per item; planDecide applies a decision', () => {
  const out = JSON.parse(car.planBuild([
    { call_id: 'c1', operation_name: 'write_file', input: { path: 'a' } },
    { call_id: 'c2', operation_name: 'read_file', input: { path: 'a' } },
  ], OPS));
  assert.deepEqual(out.plan.items.map((i) => i.decision), ['ask', 'allow']);
  const d = JSON.parse(car.planDecide(out.plan, out.plan.items[0].id, { decision: 'deny', reason: 'not now' }));
  assert.equal(d.item.decision, 'deny');
});

test('approvals: empty store, unknown key refused with a code', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'car-approvals-'));
  assert.deepEqual(JSON.parse(car.approvalsPending(dir)).pending, []);
  assert.throws(() => car.approvalResolve(dir, 'write_file:nope', 'allow'), (e) => typeof e.code === 'string' && e.code !== 'GenericFailure');
});
