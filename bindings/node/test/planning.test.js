'use strict';
// Planning functions through the Node binding: translation and the
// original's Node argument orders (the core is tested in Rust).
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

const P = {
  actions: [
    { id: 'a', type: 'tool_call', tool: 't', expected_effects: { x: 1 } },
    { id: 'b', type: 'tool_call', tool: 'u', state_dependencies: ['x'], expected_effects: { y: 2 } },
  ],
};

test('simulateMonteCarlo: defaults, shape, seeded reproducibility', () => {
  const r = JSON.parse(car.simulateMonteCarlo(P));
  assert.equal(r.trials, 1000);
  assert.equal(r.p_goal_reached, null);
  assert.deepEqual(Object.keys(r.tool_calls).sort(), ['max', 'mean', 'min', 'p50', 'p95']);
  assert.deepEqual(r.action_outcomes.map((o) => o.action_id), ['a', 'b']);
  const a = car.simulateMonteCarlo(JSON.stringify(P), null, { t: 0.5, u: 0.5 }, null, { seed: 42, trials: 200 });
  const b = car.simulateMonteCarlo(P, '{}', '{"t":0.5,"u":0.5}', undefined, '{"seed":42,"trials":200}');
  assert.equal(a, b);
  assert.notEqual(a, car.simulateMonteCarlo(P, null, { t: 0.5, u: 0.5 }, null, { seed: 43, trials: 200 }));
});

test('simulateMonteCarlo: goals fail closed on underivable conditions; bad rates are named', () => {
  const goal = { kind: 'any_of', conditions: [{ kind: 'state_predicate', key: 'y', equals: 2 }, { kind: 'command', id: 'c', expect_exit: 0 }] };
  const r = JSON.parse(car.simulateMonteCarlo(P, null, { t: 1, u: 1 }, goal, { trials: 5 }));
  assert.equal(r.p_goal_reached, 1);
  assert.deepEqual(r.goal_underivable_conditions, ['command:c']);
  assert.throws(() => car.simulateMonteCarlo(P, null, { t: -0.1 }), /tool_success_rates\.t/);
});

test('CarRuntime.simulateMonteCarlo derives rates from the event log', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('t');
  await car.executeProposal(rt, { actions: [{ id: 'a', type: 'tool_call', tool: 't' }] }, () => '{}');
  const r = JSON.parse(await rt.simulateMonteCarlo(P, null, { u: 0 }, null, { trials: 10 }));
  const t = r.success_rates.find((x) => x.tool === 't');
  assert.equal(t.source, 'event_log');
  assert.equal(t.successes, 1);
  assert.equal(r.success_rates.find((x) => x.tool === 'u').source, 'given');
});

test('rankProposals, simulateWithPredictions and transactionCheckWithPredictions (Node orders)', () => {
  const bad = { actions: [{ id: 'a', type: 'tool_call', tool: 'nope' }] };
  const ranked = JSON.parse(car.rankProposals([bad, P], ['t', 'u'], 0.5));
  assert.deepEqual(ranked.map((x) => x.index), [1, 0]);
  assert.equal(ranked[1].score, 0);
  // (proposal, initialState, predictions, minAccuracy)
  const s = JSON.parse(car.simulateWithPredictions(P, { z: 0 }, { a: { effects: { x: 5 }, accuracy: 0.9 } }, 0.8));
  assert.deepEqual(s, { x: 5, y: 2, z: 0 });
  // (proposal, versions, state, predictions)
  const two = { actions: [{ id: 'a', type: 'tool_call', tool: 't', expected_effects: { x: 1 } }, { id: 'c', type: 'tool_call', tool: 't' }] };
  const rep = JSON.parse(car.transactionCheckWithPredictions(two, null, null, { c: ['x'] }));
  assert.deepEqual(rep.conflicts.map((c) => c.kind), ['write_write']);
  assert.throws(() => car.transactionCheckWithPredictions(two, null, null, { zz: ['x'] }), /predictions\.zz/);
});
