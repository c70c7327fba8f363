'use strict';
// Unknown fields: verify warns of each (path and suggestion); strict mode
// refuses the proposal with CarInputError `unknown_field` and runs nothing.
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

const PLAN = {
  actions: [
    { id: 'a', type: 'tool_call', tool: 't' },
    { id: 'b', type: 'tool_call', tool: 't', dependecies: ['a'] },
  ],
};

const unknownWarnings = (r) =>
  r.issues.filter((i) => i.severity === 'warning' && i.message.startsWith('unknown field'));

test('verify warns with the path and the field meant', async () => {
  const rt = new car.CarRuntime();
  for (const r of [JSON.parse(car.verify(JSON.stringify(PLAN))), await rt.verifyProposalObj(PLAN)]) {
    const w = unknownWarnings(r);
    assert.equal(w.length, 1);
    assert.equal(w[0].action_id, 'b');
    assert.equal(w[0].message, 'unknown field `dependecies` at actions[1].dependecies (ignored); did you mean `dependencies`?');
  }
  // Warnings leave a proposal valid.
  assert.equal(JSON.parse(car.verify(JSON.stringify(PLAN))).valid, true);
});

test('strict mode refuses with a CarInputError and runs nothing', async () => {
  const rt = new car.CarRuntime();
  await rt.registerToolSchema({ name: 't', parameters: { type: 'object' } });
  const ran = [];
  const tool = (c) => { ran.push(c); return {}; };
  assert.equal(rt.strictFields(), false);
  await car.executeProposal(rt, JSON.stringify(PLAN), tool);
  assert.equal(ran.length, 2);
  rt.setStrictFields(true);
  assert.equal(rt.strictFields(), true);
  for (const call of [
    () => car.executeProposal(rt, JSON.stringify(PLAN), tool),
    () => rt.verifyProposal(PLAN),
    async () => rt.proposalPlan(PLAN),
  ]) {
    await assert.rejects(call, (e) => {
      assert.ok(e instanceof car.CarInputError, String(e));
      assert.equal(e.code, 'unknown_field');
      assert.deepEqual(e.details, { path: 'actions[1].dependecies', field: 'dependecies' });
      assert.match(e.message, /did you mean `dependencies`/);
      return true;
    });
  }
  assert.equal(ran.length, 2, 'nothing ran in strict mode');
});
