'use strict';
// CarRuntime through realistic flows: tools, policies, state, execution with
// JS tool callbacks (values, JSON text, Promises), retries, terminal failures,
// re-entrant calls, events and the registered handler.
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

const proposal = (actions, id = 'p1') => ({ id, actions });

test('executeProposal with sync, JSON-text and Promise tools; a tool calls back into the runtime', async () => {
  const rt = new car.CarRuntime();
  await rt.registerToolSchema({ name: 'deploy', parameters: { type: 'object', properties: { env: { type: 'string' } }, required: ['env'] } });
  await rt.registerTool('echo');
  await rt.registerTool('later');
  const calls = [];
  const out = JSON.parse(await car.executeProposal(rt, proposal([
    { id: 'a', type: 'tool_call', tool: 'deploy', parameters: { env: 'staging' } },
    { id: 'b', type: 'tool_call', tool: 'echo', parameters: { x: 1 } },
    { id: 'c', type: 'tool_call', tool: 'later' },
  ]), (callJson) => {
    const call = JSON.parse(callJson);
    calls.push(call);
    if (call.tool === 'deploy') {
      rt.stateSet('seen_by_tool', JSON.stringify(call.params.env)); // re-entrant: no deadlock
      return { deployed: call.params.env };
    }
    if (call.tool === 'echo') return JSON.stringify(call.params);
    return new Promise((resolve) => setTimeout(() => resolve({ done: true }), 10));
  }));
  const byId = Object.fromEntries(out.results.map((r) => [r.action_id, r]));
  assert.deepEqual(byId.a.output, { deployed: 'staging' });
  assert.deepEqual(byId.b.output, { x: 1 });
  assert.deepEqual(byId.c.output, { done: true });
  assert.equal(JSON.parse(rt.stateGet('seen_by_tool')), 'staging');
  for (const k of ['tool', 'params', 'action_id', 'request_id', 'timeout_ms', 'session_id', 'attempt']) assert.ok(k in calls[0], k);
  assert.equal(out.cost.tool_calls, 3);
});

test('a thrown Error fails the action, retries count attempts, TerminalToolError aborts and rolls back', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('flaky');
  await rt.registerTool('fatal');
  const attempts = [];
  const tool = (callJson) => {
    const call = JSON.parse(callJson);
    if (call.tool === 'flaky') {
      attempts.push(call.attempt);
      if (call.attempt < 3) throw new Error('try again');
      return { ok: call.attempt };
    }
    throw new car.TerminalToolError('card was charged twice');
  };
  let out = JSON.parse(await car.executeProposal(rt, proposal([
    { id: 'f', type: 'tool_call', tool: 'flaky', failure_behavior: 'retry', max_retries: 3 },
  ]), tool));
  assert.deepEqual(attempts, [1, 2, 3]);
  assert.equal(out.results[0].status, 'succeeded');
  assert.equal(out.cost.retries, 2);

  rt.stateSet('balance', '10');
  out = JSON.parse(await car.executeProposal(rt, proposal([
    { id: 'w', type: 'state_write', parameters: { key: 'balance', value: 0 } },
    { id: 't', type: 'tool_call', tool: 'fatal', state_dependencies: ['balance'], failure_behavior: 'retry' },
  ], 'p2'), tool));
  const byId = Object.fromEntries(out.results.map((r) => [r.action_id, r]));
  assert.equal(byId.t.status, 'failed');
  assert.equal(byId.t.terminal, true);
  assert.equal(byId.w.rolled_back, true);
  assert.equal(JSON.parse(rt.stateGet('balance')), 10);

  out = JSON.parse(await car.executeProposal(rt, proposal([{ id: 'x', type: 'tool_call', tool: 'flaky', failure_behavior: 'skip' }], 'p3'), () => { throw new Error('fatal: not terminal unless typed'); }));
  assert.equal(out.results[0].terminal, undefined, 'terminality is never inferred from the message');
});

test('policies, sessions, tiers and error codes', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('shell');
  await rt.registerPolicy('no_rm', 'deny_tool_param', 'shell', 'command', 'rm -rf');
  assert.deepEqual(JSON.parse(await rt.listPolicies()).map((p) => p.name), ['no_rm']);
  const sid = await rt.openSession();
  await rt.registerPolicy('no_shell_here', 'deny_tool', 'shell', null, null, null, sid);
  const ran = [];
  const tool = (c) => { ran.push(c); return '{}'; };
  let out = JSON.parse(await car.executeProposal(rt, proposal([{ id: 'a', type: 'tool_call', tool: 'shell', parameters: { command: 'rm -rf /' } }]), tool));
  assert.equal(out.results[0].status, 'rejected');
  out = JSON.parse(await car.executeProposal(rt, proposal([{ id: 'b', type: 'tool_call', tool: 'shell', parameters: { command: 'ls' } }]), tool, sid));
  assert.equal(out.results[0].status, 'rejected');
  assert.equal(ran.length, 0);
  assert.equal(await rt.closeSession(sid), true);
  assert.equal(await rt.unregisterPolicy('no_rm'), 1);
  assert.equal(await rt.unregisterPolicy('no_rm'), 0);
  await assert.rejects(rt.registerPolicy('x', 'allow_everything'), (e) => e.code === 'invalid_argument' && !e.message.startsWith('['));
  await assert.rejects(car.executeProposal(rt, '{not json', tool), (e) => e.code === 'invalid_json');
  assert.equal(await rt.permissionGetTier(), 'sandbox_edit');
  assert.equal(await rt.permissionSetTier('read_only'), 'read_only');
  await assert.rejects(rt.permissionSetTier('root'), (e) => typeof e.code === 'string');
});

test('permissionSetTier("read_only") refuses rm -rf / in-process', async () => {
  // Issue #18: the tier was not enforced by an in-process runtime.
  const rt = new car.CarRuntime();
  await rt.registerTool('shell');
  assert.equal(await rt.permissionSetTier('read_only'), 'read_only');
  const ran = [];
  const out = JSON.parse(await car.executeProposal(rt,
    proposal([{ id: 'a', type: 'tool_call', tool: 'shell', parameters: { command: 'rm -rf /' } }]),
    (c) => { ran.push(c); return { ok: true }; }));
  assert.equal(out.results[0].status, 'rejected', JSON.stringify(out));
  assert.deepEqual(ran, [], 'the tool function was never called');
  const events = JSON.parse(await rt.eventQuery({ kinds: ['AdmissionDecided'] })).events;
  assert.equal(events[0].data.layer, 'tier');
  assert.equal(events[0].data.granted_tier, 'read_only');
});

test('state tenants, events, hash chain, detached handles, tool listing', async () => {
  const rt = new car.CarRuntime();
  rt.stateSet('k', { v: 1 });
  rt.stateSet('k', '2', 'acme');
  assert.deepEqual(JSON.parse(rt.stateGet('k')), { v: 1 });
  assert.equal(JSON.parse(rt.stateGet('k', 'acme')), 2);
  assert.equal(rt.stateGet('missing'), 'null');
  assert.deepEqual(rt.stateKeys(), ['k']);
  assert.equal(rt.stateExists('k', 'other'), false);
  assert.deepEqual(JSON.parse(rt.stateSnapshot('acme')), { k: 2 });
  const before = await rt.eventCount();
  await rt.enableEventLogHashChaining();
  await rt.registerTool('t');
  await car.executeProposal(rt, proposal([{ id: 'a', type: 'tool_call', tool: 't' }]), () => 1);
  const q = JSON.parse(await rt.eventQuery({ action_id: 'a' }));
  assert.ok(q.count > 0 && q.count === q.events.length);
  assert.deepEqual(JSON.parse(await rt.verifyEventLogChain()), { verified: (await rt.eventCount()) - before });
  assert.equal(await rt.toolPoll('nope'), null);
  assert.equal(await rt.toolCancel('nope'), false);
  const tools = JSON.parse(await rt.listTools());
  assert.deepEqual(tools.map((t) => [t.name, t.source]), [['t', 'user_defined']]);
  assert.equal(await rt.unregisterTool('t'), 1);
});

test('verifyProposal and the registered handler', async () => {
  const rt = new car.CarRuntime();
  const p = proposal([{ id: 'd', type: 'tool_call', tool: 'echo', preconditions: [{ key: 'ready', value: true }] }]);
  assert.equal(JSON.parse(await rt.verifyProposal(p)).valid, false);
  await rt.registerTool('echo');
  car.unregisterToolHandler();
  await assert.rejects(rt.submitProposal(p), (e) => e.code === 'no_tool_handler');
  car.registerToolHandler(async (c) => JSON.parse(c).params);
  rt.stateSet('ready', 'true');
  const out = JSON.parse(await rt.submitProposal(proposal([{ id: 'e', type: 'tool_call', tool: 'echo', parameters: { y: 2 } }])));
  assert.deepEqual(out.results[0].output, { y: 2 });
  car.unregisterToolHandler();
});

test('async methods do not block the event loop', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('slow');
  let ticks = 0;
  const timer = setInterval(() => { ticks += 1; }, 1);
  await car.executeProposal(rt, proposal(Array.from({ length: 5 }, (_, i) => ({ id: `a${i}`, type: 'tool_call', tool: 'slow' }))),
    () => new Promise((r) => setTimeout(() => r(1), 50)));
  clearInterval(timer);
  assert.ok(ticks > 0, `event loop ticked ${ticks} times`);
});

test('registerAgentBasics runs built-ins in-process; setPermissions asks through durable approvals', async () => {
  const fs = require('node:fs');
  const os = require('node:os');
  const path = require('node:path');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-'));
  const work = path.join(tmp, 'work');
  fs.mkdirSync(work);
  fs.writeFileSync(path.join(work, 'notes.txt'), 'hello\n');
  const rt = new car.CarRuntime();
  await rt.registerAgentBasics(work);
  const host = [];
  let out = JSON.parse(await car.executeProposal(rt, proposal([{ id: 'r', type: 'tool_call', tool: 'read_file', parameters: { path: 'notes.txt' } }]), (c) => { host.push(c); return '{}'; }));
  assert.equal(out.results[0].output.content, 'hello\n');
  assert.equal(host.length, 0);
  // The published built-ins: `shell` is not among them.
  assert.deepEqual(JSON.parse(await rt.listTools()).map((t) => t.name),
    ['calculate', 'edit_file', 'find_files', 'grep_files', 'list_dir', 'read_file', 'write_file']);
  // A host `shell` (risk execute) asks under the standard preset.
  await rt.registerTool('shell');
  const approvals = path.join(tmp, 'approvals');
  await rt.setPermissions({ preset: 'standard' }, approvals);
  const call = proposal([{ id: 's', type: 'tool_call', tool: 'shell', parameters: { command: 'echo hi' } }]);
  const shell = (c) => { host.push(JSON.parse(c).params); return { stdout: 'hi\n' }; };
  out = JSON.parse(await car.executeProposal(rt, call, shell));
  assert.equal(out.results[0].status, 'rejected');
  assert.equal(host.length, 0);
  const key = JSON.parse(car.approvalsPending(approvals)).pending[0].key;
  assert.ok(out.results[0].error.includes(key));
  car.approvalResolve(approvals, key, 'allow', 'ok');
  out = JSON.parse(await car.executeProposal(rt, call, shell));
  assert.equal(out.results[0].status, 'succeeded');
  assert.deepEqual(host, [{ command: 'echo hi' }]);
  await assert.rejects(rt.setPermissions({ preset: 'lenient' }), (e) => typeof e.code === 'string');
  await rt.setPermissions(null);
});

test('1,000 concurrent executeProposal calls complete with correct results', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('work');
  const runs = Array.from({ length: 1000 }, (_, i) => car.executeProposal(rt,
    proposal([{ id: 'a', type: 'tool_call', tool: 'work', parameters: { i } }], `p${i}`),
    async (c) => ({ i: JSON.parse(c).params.i })));
  const outs = (await Promise.all(runs)).map((o) => JSON.parse(o));
  outs.forEach((o, i) => {
    assert.equal(o.proposal_id, `p${i}`);
    assert.deepEqual(o.results[0].output, { i });
  });
});
