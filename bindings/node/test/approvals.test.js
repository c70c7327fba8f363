'use strict';
// Live approvals: an approver attached with onApproval is told of each
// pending approval and answers with approvalResolve; the held action runs
// (allow) or is rejected with the reason (anything else); an unanswered one
// is denied at its deadline; detached, an ask is rejected naming the key.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const car = require('..');

const deploy = (n) => ({ id: 'p', actions: [{ id: 'd', type: 'tool_call', tool: 'deploy', parameters: { n } }] });

async function runtime(extra = {}) {
  const rt = new car.CarRuntime();
  await rt.registerTool('deploy');
  await rt.setPermissions({ ask: [{ tool: 'deploy' }], ...extra }, fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-approvals-')));
  return rt;
}

test('an approver callback allows and denies held actions', async () => {
  const rt = await runtime();
  const answers = [['allow', 'reviewed'], ['deny', 'not during the freeze'], ['maybe', 'unclear']];
  const events = [];
  const id = rt.onApproval((eventJson) => {
    const ev = JSON.parse(eventJson);
    events.push(ev);
    if (ev.event === 'pending') {
      const [decision, reason] = answers.shift();
      rt.approvalResolve(ev.key, decision, reason);
    }
  });
  const ran = [];
  let out = JSON.parse(await car.executeProposal(rt, deploy(1), (c) => { ran.push(c); return {}; }));
  assert.equal(out.results[0].status, 'succeeded');
  for (const [n, reason] of [[2, 'not during the freeze'], [3, 'unclear']]) {
    out = JSON.parse(await car.executeProposal(rt, deploy(n), (c) => { ran.push(c); return {}; }));
    assert.equal(out.results[0].status, 'rejected');
    assert.ok(out.results[0].error.includes('was denied') && out.results[0].error.includes(reason), out.results[0].error);
  }
  assert.equal(ran.length, 1);
  assert.deepEqual(events.filter((e) => e.event === 'pending').map((e) => e.tool), ['deploy', 'deploy', 'deploy']);
  assert.deepEqual(JSON.parse(await rt.approvalsPending()).pending, []);

  assert.equal(rt.removeApprovalCallback(id), true);
  assert.equal(rt.removeApprovalCallback(id), false);
  out = JSON.parse(await car.executeProposal(rt, deploy(4), () => ({})));
  const key = JSON.parse(await rt.approvalsPending()).pending[0].key;
  assert.equal(out.results[0].status, 'rejected');
  assert.ok(out.results[0].error.includes(key));
});

test('an unanswered approval is denied at its deadline; a late answer does not apply', async () => {
  const rt = await runtime({ approval_timeout_ms: 150 });
  const keys = [];
  rt.onApproval((eventJson) => {
    const ev = JSON.parse(eventJson);
    if (ev.event === 'pending') keys.push(ev.key);
  });
  const out = JSON.parse(await car.executeProposal(rt, deploy(1), () => ({})));
  assert.equal(out.results[0].status, 'rejected');
  assert.ok(out.results[0].error.includes('deadline passed'), out.results[0].error);
  const late = JSON.parse(await rt.approvalResolve(keys[0], 'allow', 'late'));
  assert.equal(late.applied, false);
  assert.equal(late.by, 'timeout');
});

test('the approvals methods need an approvals store', async () => {
  const rt = new car.CarRuntime();
  await assert.rejects(rt.approvalsPending(), (e) => e.code === 'approvals_not_configured');
});
