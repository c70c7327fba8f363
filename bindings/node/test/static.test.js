'use strict';
// The stateless functions through the Node binding.
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

const DEPLOY = {
  id: 'p1',
  actions: [
    { id: 'test', type: 'tool_call', tool: 'run_tests', expected_effects: { tests_passed: true } },
    {
      id: 'deploy', type: 'tool_call', tool: 'deploy', parameters: { env: 'prod' },
      preconditions: [{ key: 'tests_passed', operator: 'eq', value: true }],
      state_dependencies: ['tests_passed'], expected_effects: { deployed: true },
    },
  ],
};

test('verify orders the DAG from text or objects', () => {
  for (const arg of [DEPLOY, JSON.stringify(DEPLOY)]) {
    const r = JSON.parse(car.verify(arg));
    assert.equal(r.valid, true);
    assert.deepEqual(r.execution_levels, [['test'], ['deploy']]);
  }
  const r = JSON.parse(car.verify(DEPLOY, null, ['run_tests']));
  assert.equal(r.valid, false);
});

test('simulate skips a blocked action; verify applies it', () => {
  const gated = { actions: [DEPLOY.actions[1]] };
  assert.deepEqual(JSON.parse(car.simulate(gated)), {});
  assert.equal(JSON.parse(car.simulate(gated, { tests_passed: true })).deployed, true);
  assert.equal(JSON.parse(car.verify(gated)).simulated_state.deployed, true);
});

test('answers with non-ASCII text come back intact (ASCII answers are handed over as Latin-1)', () => {
  const key = 'clé ✓ 𝄞 \u0001 "q"';
  const p = { id: 'u', actions: [{ id: 'w', type: 'state_write', parameters: { key, value: 'ü' } }] };
  assert.deepEqual(JSON.parse(car.simulate(p)), { [key]: 'ü' });
  assert.equal(JSON.parse(car.optimize(p)).actions[0].parameters.key, key);
  assert.deepEqual(JSON.parse(car.verify(p)).simulated_state, { [key]: 'ü' });
  const ascii = car.optimize({ id: 'a', actions: [{ id: 'w', type: 'state_write', parameters: { key: 'k', value: 1 } }] });
  assert.equal(JSON.parse(ascii).actions[0].parameters.key, 'k');
});

test('a proposal given as text is read whole, whatever its characters', () => {
  // Text is read in one pass sized from its UTF-16 length: every width of
  // UTF-8 (1 to 4 bytes), at every position, long and short.
  const chars = ['a', 'é', '—', '𝄞', '\u0001', '"'];
  for (const n of [1, 7, 33, 5000]) {
    for (const c of chars) {
      const key = `k${c.repeat(n)}`;
      const text = JSON.stringify({ id: 't', actions: [{ id: 'w', type: 'state_write', parameters: { key, value: c } }] });
      assert.deepEqual(JSON.parse(car.simulate(text)), { [key]: c });
      assert.deepEqual(JSON.parse(car.verify(text)).simulated_state, { [key]: c });
      assert.equal(JSON.parse(car.optimize(text)).actions[0].parameters.key, key);
      assert.equal(JSON.parse(car.transactionCheck(text)).consistent, true);
    }
  }
  // A lone surrogate in the text becomes U+FFFD, as in every other string
  // argument.
  const lone = `{"actions":[{"id":"w","type":"state_write","parameters":{"key":"k","value":"a\ud800b"}}]}`;
  assert.deepEqual(JSON.parse(car.simulate(lone)), { k: 'a\ufffdb' });
  assert.equal(JSON.parse(car.normalizeProposal(lone)).actions[0].parameters.value, 'a\ufffdb');
  // Not text: serialised, as before.
  assert.throws(() => car.simulate(undefined), /cannot be represented/);
  assert.deepEqual(JSON.parse(car.simulate({ actions: [] })), {});
});

test('large answers (handed to V8 in place, as external strings) are whole and outlive many calls', () => {
  const actions = [];
  for (let i = 0; i < 1500; i++) {
    actions.push({ id: `a${i}`, type: 'tool_call', tool: `t${i % 7}`, parameters: { n: i, s: 'x'.repeat(i % 40) } });
  }
  const text = JSON.stringify({ id: 'big', timestamp: '2026-01-02T03:04:05Z', actions });
  const first = car.optimize(text);
  assert.ok(first.length > 64 * 1024, `answer of ${first.length} characters`);
  const parsed = JSON.parse(first);
  assert.equal(parsed.actions.length, 1500);
  assert.equal(parsed.actions[1499].parameters.s, 'x'.repeat(1499 % 40));
  // Many answers, most dropped at once: each is collected and freed on its
  // own while the kept ones stay intact.
  const kept = [];
  for (let round = 0; round < 60; round++) {
    const answer = car.optimize(text);
    if (round % 10 === 0) kept.push(answer);
    const verified = JSON.parse(car.verify(text));
    assert.equal(verified.valid, true);
  }
  // Not all ASCII: handed over as UTF-16 units.
  const wide = JSON.stringify({ id: 'w', timestamp: '2026-01-02T03:04:05Z', actions: actions.map((a, i) => ({ ...a, tool: `t${i % 7}é𝄞—` })) });
  const answer = car.optimize(wide);
  assert.ok(answer.length > 64 * 1024);
  // Every action whole, wherever its non-ASCII characters fall against
  // the 32-byte chunks the widening runs in.
  JSON.parse(answer).actions.forEach((a, i) => {
    assert.equal(a.tool, `t${i % 7}é𝄞—`);
    assert.equal(a.parameters.s, 'x'.repeat(i % 40));
  });
  assert.equal(answer, car.optimize(wide));
  const checks = JSON.parse(car.verify(text)).evidence.checks;
  assert.ok(checks.some((c) => c.cannot_verify.includes('\u2014')), 'the em dash of a check survives');
  const filler = [];
  for (let i = 0; i < 200; i++) filler.push('y'.repeat(100000) + i);
  for (const answer of kept) assert.equal(answer, first);
  assert.equal(filler.length, 200);
});

test('optimize, equivalent, transactionCheck', () => {
  const out = JSON.parse(car.optimize({ actions: [{ id: 'a', type: 'tool_call', tool: 'x', state_dependencies: ['nobody'] }] }));
  assert.deepEqual(out.actions[0].state_dependencies, []);
  assert.equal(car.equivalent(DEPLOY, DEPLOY), true);
  const r = JSON.parse(car.transactionCheck({ actions: [{ id: 'a', type: 'tool_call', tool: 'x', assumptions: [{ key: 'k', read_version: 1 }] }] }, { k: 3 }));
  assert.equal(r.consistent, false);
  assert.equal(r.conflicts[0].kind, 'stale_assumption');
});

test('permission classification, shell matching, dry run, hashes, presets', () => {
  const c = JSON.parse(car.permissionClassify(DEPLOY));
  assert.equal(c.classifications.length, 2);
  const d = JSON.parse(car.permissionEvaluate(DEPLOY, 'sandbox_edit'));
  assert.equal(d.decisions.length, 2);
  const rules = { allow: ['ls *'], deny: ['rm -rf *'] };
  assert.equal(car.matchShellCommand('ls -la', rules), 'allow');
  assert.equal(car.matchShellCommand('ls && rm -rf /', rules), 'deny');
  assert.equal(car.matchShellCommand('', rules), 'ask');
  const e = JSON.parse(car.evaluatePermission({ preset: 'strict' }, { name: 'rm_tree', risk: 'destructive' }, {}));
  assert.equal(e.verdict, 'deny');
  const h = car.toolsetHash([{ name: 'a', description: 'd', parameters: { type: 'object' } }]);
  assert.match(h, /^[0-9a-f]{64}$/);
  assert.deepEqual(JSON.parse(car.compilePermissionPreset('open')), { deny: [], ask: [] });
  assert.throws(() => car.compilePermissionPreset('lenient'), (err) => typeof err.code === 'string');
});

test('large answers dropped in a loop are collected as they pile up, not held until V8 fills its own heap', () => {
  // An answer handed over as an external string is a small header in V8's
  // heap: unless its size is reported as external memory, V8 does not
  // collect such answers while its own heap stays small, and a loop of calls
  // holds every answer it dropped (about 340 MB here for 300 MB of answers).
  const actions = [];
  for (let i = 0; i < 3000; i++) actions.push({ id: `a${i}`, type: 'tool_call', tool: `t${i % 9}`, expected_effects: { [`k${i}`]: i } });
  const text = JSON.stringify({ id: 'm', timestamp: '2026-01-02T03:04:05Z', actions });
  // verify's answer holds an em dash: handed over as UTF-16, two bytes a unit.
  const bytes = 2 * car.verify(text).length;
  assert.ok(bytes > 2 * 64 * 1024, `answer of ${bytes} bytes`);
  const calls = 400;
  const before = process.memoryUsage().rss;
  for (let i = 0; i < calls; i++) car.verify(text);
  const grew = process.memoryUsage().rss - before;
  assert.ok(grew < (calls * bytes) / 2, `resident memory grew by ${grew} bytes over ${calls} answers of ${bytes} bytes dropped`);
});
