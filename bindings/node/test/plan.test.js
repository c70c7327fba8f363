// The plan/apply gate on the execution path through the Node binding.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { CarRuntime } = require('..');

test('plan, decide, apply', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'car-plan-'));
  const rt = new CarRuntime();
  await rt.registerTool('migrate');
  await rt.registerTool('lookup');
  await rt.setPermissions({ ask: [{ tool: 'migrate' }], deny: [{ tool: 'lookup' }], preset: 'open' }, dir);
  assert.deepStrictEqual(JSON.parse(rt.admissionConfig()).deny, [{ tool: 'lookup' }]);
  const calls = [];
  const tool = (callJson) => {
    calls.push(JSON.parse(callJson).params);
    return JSON.stringify({ ok: true });
  };
  const proposal = {
    actions: [
      { id: 'a', type: 'tool_call', tool: 'migrate', parameters: { env: 'a' }, failure_behavior: 'skip' },
      { id: 'b', type: 'tool_call', tool: 'migrate', parameters: { env: 'b' }, failure_behavior: 'skip' },
      { id: 'l', type: 'tool_call', tool: 'lookup', failure_behavior: 'skip' },
    ],
  };
  const plan = JSON.parse(rt.proposalPlan(proposal));
  assert.deepStrictEqual(calls, []);
  const items = Object.fromEntries(plan.items.map((i) => [i.action_id, i]));
  assert.strictEqual(items.a.verdict, 'ask');
  assert.strictEqual(items.l.layer, 'deny-rule');
  // `always` needs an approvals store to keep its rule: without one it is refused.
  const bare = new CarRuntime();
  await bare.registerTool('migrate');
  await bare.setPermissions({ ask: [{ tool: 'migrate' }], preset: 'open' });
  const barePlan = JSON.parse(bare.proposalPlan({ actions: [proposal.actions[0]] }));
  assert.throws(() => bare.proposalDecide(barePlan.plan_id, 'a', 'allow', 'always'), (e) => e.code === 'always_scope_unavailable');
  rt.proposalDecide(plan.plan_id, 'a', 'allow', 'once', 'reviewed');
  rt.proposalDecide(plan.plan_id, 'b', 'deny');
  const out = JSON.parse(await rt.proposalApply(plan.plan_id, tool));
  assert.deepStrictEqual(out.results.map((r) => r.status), ['succeeded', 'rejected', 'rejected']);
  assert.deepStrictEqual(calls, [{ env: 'a' }]);
  await assert.rejects(rt.proposalApply(plan.plan_id, tool));
});
