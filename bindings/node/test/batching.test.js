'use strict';
// Tool calls travel to JS and back in batches (src/port.rs): answers must
// reach the right action whatever mix of sync values, JSON text, Promises and
// throws a batch holds; long chains must not recurse; per-attempt timeouts
// still apply (and keep Node alive while only the engine's timer is pending);
// a tool may run a whole nested proposal on the same runtime.
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

const byId = (out) => Object.fromEntries(out.results.map((r) => [r.action_id, r]));

// A proposal runs on the JS thread, or on a tokio worker when its text is
// larger than 32 KiB (unknown fields are ignored, so padding moves it there).
const MODES = {
  'JS thread': (p) => p,
  worker: (p) => ({ ...p, padding: 'x'.repeat(40 * 1024) }),
};

for (const [mode, wrap] of Object.entries(MODES)) test(`a batch of mixed answers reaches the right actions (${mode})`, async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('t');
  const n = 200;
  const actions = Array.from({ length: n }, (_, i) => ({ id: `a${i}`, type: 'tool_call', tool: 't', parameters: { i }, failure_behavior: 'skip' }));
  let batches = 0;
  let last = -1;
  const out = JSON.parse(await car.executeProposal(rt, wrap({ actions }), (callJson) => {
    const { i } = JSON.parse(callJson).params;
    if (i <= last) batches += 1;
    last = i;
    switch (i % 5) {
      case 0: return { i };
      case 1: return JSON.stringify({ i });
      case 2: return new Promise((r) => setTimeout(() => r({ i }), i % 7));
      case 3: throw new Error(`boom ${i}`);
      default: return Promise.reject(new Error(`late boom ${i}`));
    }
  }));
  const r = byId(out);
  for (let i = 0; i < n; i += 1) {
    if (i % 5 < 3) assert.deepEqual(r[`a${i}`].output, { i }, `a${i}`);
    else assert.match(r[`a${i}`].error, new RegExp(`boom ${i}$`), `a${i}`);
  }
  assert.equal(out.cost.tool_calls, n);
  assert.equal(batches, 0, 'calls arrive in dispatch order');
});

test('a 5,000-action chain of synchronous tools completes with each output', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('inc');
  const n = 5000;
  const actions = Array.from({ length: n }, (_, i) => ({ id: `c${i}`, type: 'tool_call', tool: 'inc', parameters: { i }, dependencies: i ? [`c${i - 1}`] : [] }));
  const order = [];
  const out = JSON.parse(await car.executeProposal(rt, { actions }, (c) => { const { i } = JSON.parse(c).params; order.push(i); return i + 1; }));
  assert.equal(out.results.length, n);
  assert.ok(out.results.every((x) => x.status === 'succeeded'));
  assert.equal(byId(out)[`c${n - 1}`].output, n);
  assert.deepEqual(order, Array.from({ length: n }, (_, i) => i));
});

for (const [mode, wrap] of Object.entries(MODES)) test(`timeout_ms applies per attempt to a JS tool that never answers (${mode})`, async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('hang');
  const attempts = [];
  // Nothing but the engine's timer is pending during the first attempt: the
  // runtime must keep Node alive until it fires.
  const out = JSON.parse(await car.executeProposal(rt, wrap({
    actions: [{ id: 'h', type: 'tool_call', tool: 'hang', timeout_ms: 250, failure_behavior: 'retry', max_retries: 2 }],
  }), (c) => {
    const { attempt, timeout_ms: t } = JSON.parse(c);
    attempts.push([attempt, t]);
    return attempt === 1 ? new Promise(() => {}) : { attempt };
  }));
  assert.deepEqual(attempts, [[1, 250], [2, 250]]);
  assert.equal(out.results[0].status, 'succeeded');
  assert.deepEqual(out.results[0].output, { attempt: 2 });
  assert.equal(out.cost.retries, 1);

  const failed = JSON.parse(await car.executeProposal(rt, wrap({
    actions: [{ id: 'h', type: 'tool_call', tool: 'hang', timeout_ms: 20 }],
  }), () => new Promise(() => {})));
  assert.equal(failed.results[0].status, 'failed');
  assert.match(failed.results[0].error, /timed out after 20 ms/);
});

for (const [mode, wrap] of Object.entries(MODES)) test(`a tool runs a nested proposal on the same runtime (${mode})`, async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('outer');
  await rt.registerTool('inner');
  const tool = async (c) => {
    const call = JSON.parse(c);
    if (call.tool === 'inner') return { depth: call.params.depth };
    const nested = JSON.parse(await car.executeProposal(rt, wrap({
      actions: [{ id: 'n', type: 'tool_call', tool: 'inner', parameters: { depth: 2 } }],
    }), tool));
    rt.stateSet('nested_ran', 'true');
    return { inner: nested.results[0].output };
  };
  const out = JSON.parse(await car.executeProposal(rt, wrap({ actions: [{ id: 'o', type: 'tool_call', tool: 'outer' }] }), tool));
  assert.deepEqual(out.results[0].output, { inner: { depth: 2 } });
  assert.equal(rt.stateGet('nested_ran'), 'true');
});

for (const [mode, wrap] of Object.entries(MODES)) test(`an answer JSON cannot carry fails only its own action (${mode})`, async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('t');
  const out = JSON.parse(await car.executeProposal(rt, wrap({
    actions: [
      { id: 'big', type: 'tool_call', tool: 't', parameters: { k: 'big' }, failure_behavior: 'skip' },
      { id: 'ok', type: 'tool_call', tool: 't', parameters: { k: 'ok' } },
      { id: 'nothing', type: 'tool_call', tool: 't', parameters: { k: 'nothing' } },
    ],
  }), (c) => {
    const { k } = JSON.parse(c).params;
    if (k === 'big') return { n: 10n };
    if (k === 'nothing') return undefined;
    return 'plain words, not JSON';
  }));
  const r = byId(out);
  assert.equal(r.big.status, 'skipped');
  assert.match(r.big.error, /BigInt/);
  assert.equal(r.ok.output, 'plain words, not JSON');
  assert.equal(r.nothing.output, null);
});

test('a proposal error rejects with its code; a bad toolFn is refused', async () => {
  const rt = new car.CarRuntime();
  await assert.rejects(car.executeProposal(rt, '{"actions": 3}', () => 1), (e) => typeof e.code === 'string' && !e.message.startsWith('['));
  await assert.rejects(car.executeProposal(rt, { actions: [] }, 'not a function'), (e) => e.code === 'invalid_argument');
  assert.equal(JSON.parse(await car.executeProposal(rt, { actions: [] }, () => 1)).results.length, 0);
});

for (const [mode, wrap] of Object.entries(MODES)) test(`built-in tools finish on the blocking pool while the event loop runs; JS tools follow them (${mode})`, async () => {
  const fs = require('node:fs');
  const os = require('node:os');
  const path = require('node:path');
  // `shell` is not a published built-in: a grep through files of ~3 MB
  // each is the built-in's slow work. A loop blocked for all of it would
  // tick once afterwards (an overdue interval runs once), and once more at
  // most while the JS tool after it answers; three ticks need it to turn
  // during the grep. How long a grep takes depends on the machine (a file
  // was 25 ms on one, 6 ms on another): the files double until the run
  // takes 60 ms, long enough for a dozen ticks of a loop that turns.
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-batch-'));
  fs.writeFileSync(path.join(root, 'filler.txt'), `${'x'.repeat(60)}\n`.repeat(48000));
  fs.writeFileSync(path.join(root, 'big.txt'), `${'x'.repeat(60)}\n`.repeat(48000) + 'needle 1\n');
  const rt = new car.CarRuntime();
  await rt.registerAgentBasics(root);
  await rt.registerTool('after');
  let grep;
  for (let files = 1; ; files *= 2) {
    // A pattern of its own each time: a read-only built-in's result is
    // cached for the same parameters.
    grep = { id: 's', type: 'tool_call', tool: 'grep_files', parameters: { pattern: `needle [0-9]+|zq${files}zq`, path: '.' } };
    // More names for one filler file (hard links: no more disk).
    for (let k = 2; k < files; k += 1) {
      const f = path.join(root, `filler${k}.txt`);
      if (!fs.existsSync(f)) fs.linkSync(path.join(root, 'filler.txt'), f);
    }
    let ticks = 0;
    const timer = setInterval(() => { ticks += 1; }, 5);
    const started = Date.now();
    const out = JSON.parse(await car.executeProposal(rt, wrap({
      actions: [grep, { id: 'j', type: 'tool_call', tool: 'after', dependencies: ['s'] }],
    }), (c) => ({ saw: JSON.parse(c).action_id })));
    const took = Date.now() - started;
    clearInterval(timer);
    const r = byId(out);
    assert.deepEqual(r.s.output.matches.map((m) => m.text), ['needle 1']);
    assert.deepEqual(r.j.output, { saw: 'j' });
    if (took < 60 && files < 64) continue;
    assert.ok(ticks >= 3, `the event loop ran while the built-in grepped ${files} files (${ticks} ticks in ${took} ms)`);
    break;
  }
  // Nothing but the blocking pool is pending here: the proposal keeps Node alive.
  const again = JSON.parse(await car.executeProposal(rt, wrap({ actions: [grep] }), () => '{}'));
  assert.equal(again.results[0].output.matches.length, 1);
  fs.rmSync(root, { recursive: true });
});

test('a large proposal runs off the JS thread: the event loop keeps turning', async () => {
  const rt = new car.CarRuntime();
  const n = 20000;
  const actions = Array.from({ length: n }, (_, i) => ({ id: `w${i}`, type: 'state_write', parameters: { key: `k${i}`, value: i } }));
  let ticks = 0;
  const timer = setInterval(() => { ticks += 1; }, 1);
  const out = JSON.parse(await car.executeProposal(rt, { actions }, () => '{}'));
  clearInterval(timer);
  assert.equal(out.results.length, n);
  assert.equal(JSON.parse(rt.stateGet(`k${n - 1}`)), n - 1);
  assert.ok(ticks > 0, `the event loop ran while ${n} actions executed (${ticks} ticks)`);
});

test('concurrent proposals in both modes with chains, Promises and timed-out attempts keep every answer with its action', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('t');
  const runs = [];
  for (let k = 0; k < 60; k += 1) {
    const n = k % 2 ? 100 : 5;
    const actions = Array.from({ length: n }, (_, i) => ({
      id: `a${i}`, type: 'tool_call', tool: 't', parameters: { i, k },
      dependencies: i % 3 === 2 ? [`a${i - 1}`] : [],
      timeout_ms: 1000, failure_behavior: 'retry', max_retries: 2,
    }));
    const proposal = { id: `p${k}`, actions };
    runs.push(car.executeProposal(rt, k % 4 === 1 ? MODES.worker(proposal) : proposal, (c) => {
      const { params: { i, k: kk }, attempt } = JSON.parse(c);
      if (i % 17 === 0 && attempt === 1) return new Promise(() => {}); // times out, then retried
      if (i % 5 === 0) return new Promise((r) => setTimeout(() => r({ i, kk, attempt }), i % 3));
      return { i, kk, attempt };
    }).then((text) => ({ k, out: JSON.parse(text) })));
  }
  for (const { k, out } of await Promise.all(runs)) {
    assert.equal(out.proposal_id, `p${k}`);
    for (const r of out.results) {
      const i = Number(r.action_id.slice(1));
      assert.equal(r.status, 'succeeded', `p${k}/${r.action_id}: ${r.error}`);
      assert.deepEqual(r.output, { i, kk: k, attempt: i % 17 === 0 ? 2 : 1 });
    }
  }
});
