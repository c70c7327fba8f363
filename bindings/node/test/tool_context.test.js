'use strict';
// ModelRetry: a tool says the model called it wrongly. The result tells the
// model, the engine never retries it, and a call chain gets two.
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

test('ModelRetry is reported, not retried, bounded to 2 per call chain', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('search');
  let calls = 0;
  const tool = (callJson) => {
    calls += 1;
    const { params } = JSON.parse(callJson);
    if (params.q.includes('AND')) throw new car.ModelRetry('use plain keywords');
    return { hits: 1 };
  };
  const run = async (q, id) => JSON.parse(await car.executeProposal(rt, { id, actions: [
    { id: 's', type: 'tool_call', tool: 'search', parameters: { q }, failure_behavior: 'retry', max_retries: 3 },
  ] }, tool)).results[0];
  const first = await run('a AND b', 'm1');
  assert.equal(first.status, 'failed');
  assert.equal(first.error, 'model retry (1 of 2): use plain keywords');
  assert.equal(calls, 1, 'never retried by the engine');
  assert.match((await run('a AND c', 'm2')).error, /^model retry \(2 of 2\): /);
  assert.match((await run('a AND d', 'm3')).error, /^model retry limit reached/);
  assert.equal((await run('plain', 'm4')).status, 'succeeded');
  assert.match((await run('a AND e', 'm5')).error, /^model retry \(1 of 2\): /, 'a success starts the chain again');
  const e = new car.ModelRetry('x');
  assert.ok(e instanceof Error && e.modelRetry === true && e.name === 'ModelRetry');
});

test('a tool logs into the event log through its call (toolLog)', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('fetch');
  await car.executeProposal(rt, { id: 'logs', actions: [{ id: 'f', type: 'tool_call', tool: 'fetch' }] }, (callJson) => {
    rt.toolLog(callJson, 'info', 'fetching', { url: 'https://example.test' });
    rt.toolLog(JSON.parse(callJson), 'warn', 'as an object too');
    return 'ok';
  });
  const logs = JSON.parse(await rt.eventQuery({ kinds: ['ToolLog'] })).events;
  assert.deepEqual(logs.map((e) => e.data.level).sort(), ['info', 'warn']);
  const info = logs.find((e) => e.data.level === 'info');
  assert.equal(info.action_id, 'f');
  assert.deepEqual(info.data.data, { url: 'https://example.test' });
  assert.throws(() => rt.toolLog({ request_id: 'req-1' }, 'loud', 'm'), (e) => e instanceof car.CarInputError && /level/.test(e.message));
});


test('a tool past its deadline is told it was given up on (toolCancelled)', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('slow');
  let waited = -1;
  const out = JSON.parse(await car.executeProposal(rt, { id: 'dl', actions: [
    { id: 's', type: 'tool_call', tool: 'slow', timeout_ms: 40, failure_behavior: 'skip' }] }, (callJson) => {
    assert.ok(JSON.parse(callJson).deadline);
    assert.equal(rt.toolCancelled(callJson), false, 'not yet');
    const start = Date.now();
    // The tool's own work, checking between steps whether it is still wanted.
    return new Promise((resolve) => {
      const step = () => {
        if (rt.toolCancelled(callJson) || Date.now() - start > 3000) {
          waited = Date.now() - start;
          resolve('late');
        } else setTimeout(step, 5);
      };
      step();
    });
  }));
  assert.match(out.results[0].error, /timed out/);
  for (let i = 0; i < 300 && waited < 0; i += 1) await new Promise((r) => setTimeout(r, 10));
  assert.ok(waited >= 0 && waited < 2000, `waited ${waited} ms`);
  assert.equal(rt.toolCancelled({ request_id: 'r' }), false);
});

test('a synchronous tool that answers after its deadline is timed out, not taken', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('busy');
  const out = JSON.parse(await car.executeProposal(rt, { id: 'busy', actions: [
    { id: 'b', type: 'tool_call', tool: 'busy', timeout_ms: 30, failure_behavior: 'skip' }] }, (callJson) => {
    const start = Date.now();
    while (Date.now() - start < 80) { /* keeps the thread past the deadline */ }
    return 'too late';
  }));
  assert.equal(out.results[0].status, 'skipped');
  assert.match(out.results[0].error, /timed out/);
});
