'use strict';
// Suspended proposals (on_ask: "suspend"): an ask nobody answered settles the
// proposal as `suspended`; resumeProposal runs the rest exactly once, from a
// new runtime over the same approvals directory too (a restarted process).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const car = require('..');

const RELEASE = {
  id: 'rel',
  actions: [
    { id: 'build', type: 'tool_call', tool: 'build' },
    { id: 'gate', type: 'tool_call', tool: 'gate', parameters: { env: 'prod' }, dependencies: ['build'] },
    { id: 'notify', type: 'tool_call', tool: 'notify', dependencies: ['gate'] },
  ],
};

async function runtime(dir) {
  const rt = new car.CarRuntime();
  for (const t of ['build', 'gate', 'notify']) await rt.registerTool(t);
  await rt.setPermissions({ ask: [{ tool: 'gate' }], on_ask: 'suspend' }, dir);
  return rt;
}

const statuses = (out) => Object.fromEntries(out.results.map((r) => [r.action_id, r.status]));

test('suspend, then resume in a new runtime: each action runs once', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-suspend-'));
  const ran = [];
  const tool = (callJson) => {
    const c = JSON.parse(callJson);
    ran.push(c.tool);
    return { ok: c.tool };
  };
  const out = await car.executeProposalObj(await runtime(dir), RELEASE, tool);
  assert.equal(out.status, 'suspended');
  assert.deepEqual(statuses(out), { build: 'succeeded', gate: 'proposed', notify: 'proposed' });
  const { id, pending } = out.suspension;

  const rt = await runtime(dir); // a restarted process
  assert.deepEqual((await rt.suspendedProposalsObj()).suspended.map((s) => s.id), [id]);
  const again = await rt.resumeProposalObj(id, tool);
  assert.equal(again.status, 'suspended');
  await rt.approvalResolve(pending[0].approval_key, 'allow', 'reviewed');
  const done = await rt.resumeProposalObj(id, tool);
  assert.equal(done.status, undefined);
  assert.deepEqual(statuses(done), { build: 'succeeded', gate: 'succeeded', notify: 'succeeded' });
  assert.deepEqual(ran, ['build', 'gate', 'notify']);

  await assert.rejects(rt.resumeProposal(id, tool), (e) => e instanceof car.CarNotFoundError && e.code === 'suspension_not_found');
  await assert.rejects(rt.resumeProposal(42, tool), (e) => e.code === 'invalid_argument');
  await assert.rejects(rt.resumeProposal('../x', tool), (e) => e.code === 'invalid_argument');
});
