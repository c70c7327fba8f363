'use strict';
// Host hooks and canUseTool (`rt.setPermissionHooks`): JS functions, sync or
// returning a Promise, take part in the permission chain; a throw, a rejected
// Promise or an unrecognised answer denies; a substituted input is checked by
// later layers and is what the tool receives.
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

const PLAN = {
  actions: [{ id: 's', type: 'tool_call', tool: 'shell', parameters: { command: 'ls' }, failure_behavior: 'skip' }],
};

async function shellRuntime(config) {
  const rt = new car.CarRuntime();
  await rt.registerTool('shell');
  if (config !== undefined) await rt.setPermissions(config);
  return rt;
}

async function run(rt, plan = PLAN) {
  const seen = [];
  const out = JSON.parse(
    await car.executeProposal(rt, plan, (callJson) => {
      seen.push(JSON.parse(callJson).params);
      return {};
    }),
  );
  return { result: out.results[0], seen };
}

test('a hook returning deny refuses and the tool never runs', async () => {
  const rt = await shellRuntime();
  const calls = [];
  rt.setPermissionHooks([(tool, input) => {
    calls.push([tool, input]);
    return 'deny';
  }]);
  const { result, seen } = await run(rt);
  assert.equal(result.status, 'rejected', JSON.stringify(result));
  assert.deepEqual(seen, []);
  assert.deepEqual(calls, [['shell', { command: 'ls' }]]);
});

test('a throwing hook, a rejected Promise or an unrecognised answer denies', async () => {
  const bad = [
    () => { throw new Error('boom'); },
    () => Promise.reject(new Error('boom')),
    () => 'yes',
    () => 1,
    () => ({ modifiedInput: 'x' }),
    () => ({ verdict: 'allow' }),
    () => () => 'allow',
    () => 10n,
  ];
  for (const hook of bad) {
    const rt = await shellRuntime();
    rt.setPermissionHooks([hook]);
    const { result, seen } = await run(rt);
    assert.equal(result.status, 'rejected', `${hook}: ${JSON.stringify(result)}`);
    assert.deepEqual(seen, []);
  }
  const rt = await shellRuntime();
  rt.setPermissionHooks([], () => { throw new Error('boom'); });
  const { result, seen } = await run(rt);
  assert.equal(result.status, 'rejected', JSON.stringify(result));
  assert.deepEqual(seen, []);
});

test('a passing or allowing hook lets the call run', async () => {
  for (const answer of [undefined, null, 'allow']) {
    const rt = await shellRuntime();
    rt.setPermissionHooks([() => answer]);
    const { result, seen } = await run(rt);
    assert.equal(result.status, 'succeeded', JSON.stringify(result));
    assert.deepEqual(seen, [{ command: 'ls' }]);
  }
});

test('a Promise hook works', async () => {
  let rt = await shellRuntime();
  rt.setPermissionHooks([async () => {
    await new Promise((r) => setTimeout(r, 10));
    return 'deny';
  }]);
  let { result, seen } = await run(rt);
  assert.equal(result.status, 'rejected', JSON.stringify(result));
  assert.deepEqual(seen, []);

  rt = await shellRuntime();
  rt.setPermissionHooks([async () => ({ modifiedInput: { command: 'echo async' } })]);
  ({ result, seen } = await run(rt));
  assert.equal(result.status, 'succeeded', JSON.stringify(result));
  assert.deepEqual(seen, [{ command: 'echo async' }]);
});

test('a substituted input reaches the tool', async () => {
  const rt = await shellRuntime();
  rt.setPermissionHooks([() => ({ modifiedInput: { command: 'echo safe' } })]);
  const { result, seen } = await run(rt);
  assert.equal(result.status, 'succeeded', JSON.stringify(result));
  assert.deepEqual(seen, [{ command: 'echo safe' }]);
});

test('a deny rule sees the substituted input', async () => {
  const rt = await shellRuntime({ shell: { deny: ['touch **'] }, preset: 'open' });
  rt.setPermissionHooks([() => ({ modifiedInput: { command: 'touch x' } })]);
  let { result, seen } = await run(rt);
  assert.equal(result.status, 'rejected', JSON.stringify(result));
  assert.deepEqual(seen, []);
  // Without the substitution the same call runs.
  rt.setPermissionHooks([]);
  ({ result, seen } = await run(rt));
  assert.equal(result.status, 'succeeded', JSON.stringify(result));
});

test('canUseTool allow overrides needs_approval', async () => {
  const config = { tools: [{ name: 'deploy', description: '', parameters: { type: 'object' }, needs_approval: true }] };
  const plan = { actions: [{ id: 'd', type: 'tool_call', tool: 'deploy', parameters: {}, failure_behavior: 'skip' }] };
  const rt = new car.CarRuntime();
  await rt.registerTool('deploy');
  await rt.setPermissions(config);
  let { result, seen } = await run(rt, plan);
  assert.equal(result.status, 'rejected', JSON.stringify(result));
  assert.deepEqual(seen, []);

  rt.setPermissionHooks([], (tool) => (tool === 'deploy' ? 'allow' : undefined));
  ({ result, seen } = await run(rt, plan));
  assert.equal(result.status, 'succeeded', JSON.stringify(result));
  assert.deepEqual(seen, [{}]);

  // 'ask' is not a canUseTool answer: it denies.
  rt.setPermissionHooks([], async () => 'ask');
  ({ result } = await run(rt, plan));
  assert.equal(result.status, 'rejected', JSON.stringify(result));
});

test('a hook may call back into the runtime; chains of actions still run', async () => {
  const rt = await shellRuntime();
  rt.stateSet('mode', '"open"');
  rt.setPermissionHooks([() => (JSON.parse(rt.stateGet('mode')) === 'locked' ? 'deny' : undefined)]);
  const plan = {
    actions: Array.from({ length: 5 }, (_, i) => ({
      id: `a${i}`, type: 'tool_call', tool: 'shell', parameters: { command: `echo ${i}` },
      failure_behavior: 'skip', ...(i > 0 ? { depends_on: [`a${i - 1}`] } : {}),
    })),
  };
  const seen = [];
  const out = JSON.parse(await car.executeProposal(rt, plan, async (callJson) => {
    seen.push(JSON.parse(callJson).params.command);
    await new Promise((r) => setImmediate(r));
    return {};
  }));
  assert.deepEqual(out.results.map((r) => r.status), ['succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded']);
  assert.deepEqual(seen, ['echo 0', 'echo 1', 'echo 2', 'echo 3', 'echo 4']);
  rt.stateSet('mode', '"locked"');
  const { result } = await run(rt);
  assert.equal(result.status, 'rejected', JSON.stringify(result));
});

test('setPermissionHooks checks its arguments', () => {
  const rt = new car.CarRuntime();
  assert.throws(() => rt.setPermissionHooks(['x']), { code: 'invalid_argument' });
  assert.throws(() => rt.setPermissionHooks([], 'x'), { code: 'invalid_argument' });
});
