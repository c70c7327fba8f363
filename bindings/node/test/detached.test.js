'use strict';
// Detached (streaming / long_running) JS tools: executeProposal returns the
// handle, toolPoll drains chunks until the terminal status (then null), and
// toolCancel cooperatively stops the JS iterator through its AbortSignal.
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// On the JS thread, or on a tokio worker (proposal text over 32 KiB).
const MODES = {
  'JS thread': (p) => p,
  worker: (p) => ({ ...p, padding: 'x'.repeat(40 * 1024) }),
};

async function pollToEnd(rt, handle) {
  const polls = [];
  for (let i = 0; i < 500; i += 1) {
    const text = await rt.toolPoll(handle);
    if (text === null) return polls;
    const p = JSON.parse(text);
    polls.push(p);
    if (p.status !== 'running') {
      assert.equal(await rt.toolPoll(handle), null, 'the terminal status is reported once, then null');
      return polls;
    }
    await sleep(5);
  }
  throw new Error('the detached tool did not finish');
}

async function startOne(rt, tool, mode, fn, params = {}, wrap = (p) => p) {
  const out = JSON.parse(await car.executeProposal(rt, wrap({
    actions: [{ id: 'd', type: 'tool_call', tool, invocation_mode: mode, parameters: params }],
  }), fn));
  assert.equal(out.results[0].status, 'succeeded', JSON.stringify(out.results[0]));
  assert.equal(out.results[0].output.status, 'running');
  return out.results[0].output.tool_handle;
}

for (const [where, wrap] of Object.entries(MODES)) test(`a streaming JS tool (async generator) is polled to completion (${where})`, async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('gen');
  const seen = [];
  const handle = await startOne(rt, 'gen', 'streaming', async function* (callJson, ctx) {
    seen.push({ call: JSON.parse(callJson), ctx });
    yield 'hello';
    await sleep(5);
    yield { kind: 'progress', fraction: 0.5, message: 'half' };
    yield { rows: 2 };
    return { total: 3 };
  }, {}, wrap);
  assert.equal(typeof handle, 'string');
  assert.equal(seen[0].call.tool, 'gen');
  assert.equal(seen[0].ctx.detached, true);
  assert.ok(seen[0].ctx.signal instanceof AbortSignal);
  const polls = await pollToEnd(rt, handle);
  const last = polls[polls.length - 1];
  assert.equal(last.status, 'succeeded');
  assert.equal(last.tool, 'gen');
  assert.equal(last.action_id, 'd');
  assert.deepEqual(last.result, { total: 3 });
  assert.deepEqual(polls.flatMap((p) => p.chunks), [
    { kind: 'text', text: 'hello' },
    { kind: 'progress', fraction: 0.5, message: 'half' },
    { kind: 'data', data: { rows: 2 } },
    { kind: 'done', result: { total: 3 } },
  ]);
});

test('long_running tools: a plain value is the result, a sync iterator streams, a throw fails the stream', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('job');
  let h = await startOne(rt, 'job', 'long_running', async () => ({ finished: true }));
  let last = (await pollToEnd(rt, h)).pop();
  assert.equal(last.status, 'succeeded');
  assert.deepEqual(last.result, { finished: true });

  h = await startOne(rt, 'job', 'streaming', function* () { yield 'a'; yield 'b'; });
  const polls = await pollToEnd(rt, h);
  assert.deepEqual(polls.flatMap((p) => p.chunks), [{ kind: 'text', text: 'a' }, { kind: 'text', text: 'b' }, { kind: 'done' }]);

  h = await startOne(rt, 'job', 'streaming', async function* () { yield 'partial'; throw new Error('disk full'); });
  last = (await pollToEnd(rt, h)).pop();
  assert.equal(last.status, 'failed');
  assert.equal(last.error, 'disk full');

  h = await startOne(rt, 'job', 'streaming', function* () { yield { kind: 'progress', fraction: 'half' }; });
  last = (await pollToEnd(rt, h)).pop();
  assert.equal(last.status, 'failed');
  assert.match(last.error, /invalid stream chunk/);
});

test('a detached tool that throws at start fails its action; TerminalToolError aborts', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('bad');
  let out = JSON.parse(await car.executeProposal(rt, {
    actions: [{ id: 'd', type: 'tool_call', tool: 'bad', invocation_mode: 'streaming' }],
  }, () => { throw new Error('no quota'); }));
  assert.equal(out.results[0].status, 'failed');
  assert.match(out.results[0].error, /no quota/);
  out = JSON.parse(await car.executeProposal(rt, {
    actions: [{ id: 'd', type: 'tool_call', tool: 'bad', invocation_mode: 'long_running', failure_behavior: 'retry' }],
  }, async () => { throw new car.TerminalToolError('never again'); }));
  assert.equal(out.results[0].status, 'failed');
  assert.equal(out.results[0].terminal, true);
});

for (const [where, wrap] of Object.entries(MODES)) test(`toolCancel cooperatively stops a streaming JS tool (${where})`, async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('forever');
  let aborted = false;
  let cleanedUp = false;
  let produced = 0;
  const handle = await startOne(rt, 'forever', 'streaming', async function* (_c, { signal }) {
    signal.addEventListener('abort', () => { aborted = true; });
    try {
      while (!signal.aborted) {
        produced += 1;
        yield { kind: 'progress', fraction: 0.1 };
        await sleep(5);
      }
    } finally {
      cleanedUp = true;
    }
  }, {}, wrap);
  await sleep(30);
  const first = JSON.parse(await rt.toolPoll(handle));
  assert.equal(first.status, 'running');
  assert.ok(first.chunks.length > 0);
  assert.equal(await rt.toolCancel(handle), true);
  assert.equal(await rt.toolCancel(handle), false, 'cancelling twice is a no-op');
  const after = JSON.parse(await rt.toolPoll(handle));
  assert.equal(after.status, 'cancelled');
  assert.equal(await rt.toolPoll(handle), null);
  for (let i = 0; i < 100 && !cleanedUp; i += 1) await sleep(5);
  assert.equal(aborted, true, 'the tool saw its AbortSignal fire');
  assert.equal(cleanedUp, true, 'the generator was returned');
  const stoppedAt = produced;
  await sleep(30);
  assert.equal(produced, stoppedAt, 'the tool produced nothing after the cancel');
});

test('a stream returned for a one_shot call fails that action with a clear message', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('gen');
  const out = JSON.parse(await car.executeProposal(rt, {
    actions: [{ id: 'o', type: 'tool_call', tool: 'gen' }],
  }, async function* () { yield 'x'; }));
  assert.equal(out.results[0].status, 'failed');
  assert.match(out.results[0].error, /returned a stream for a one_shot call/);
});
