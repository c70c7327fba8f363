// Run traces, cost by agent, metrics, retention and truncation through the Node binding (issue #23).
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const car = require('..');
const { CarRuntime } = car;

test('a run traces its turns and proposals, kept on disk', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-runs-'));
  try {
    const rt = new CarRuntime();
    rt.registerTool('t');
    await rt.setRunsDir(dir);
    const run = JSON.parse(await rt.runsStart({ intent: 'answer', agent_id: 'node-agent' }));
    assert.strictEqual(run.agent_id, 'node-agent');
    await rt.runsRecordModelTurn({
      run_id: run.run_id, turn_index: 1, assistant_text: 'calling t', model_id: 'm',
      requested_tool_calls: [{ id: '1', name: 't', arguments: {} }],
      token_usage: { input_tokens: 8, output_tokens: 2, cost_usd: 0.25 }, duration_ms: 5,
    });
    await car.executeProposal(rt, { id: 'p1', actions: [{ id: 'a', type: 'tool_call', tool: 't' }] }, () => ({}));
    assert.deepStrictEqual(JSON.parse(await rt.runsComplete({ run_id: run.run_id, outcome: { status: 'success' } })),
      { run_id: run.run_id, ok: true });
    const trace = JSON.parse(await rt.runsGetTrace({ run_id: run.run_id }));
    assert.deepStrictEqual(trace.run.proposals, ['p1']);
    assert.strictEqual(trace.run.turns[0].assistant_text, 'calling t');
    const other = new CarRuntime();
    await other.setRunsDir(dir);
    assert.strictEqual(JSON.parse(await other.runsList()).runs[0].status, 'success');
    assert.deepStrictEqual(JSON.parse(await rt.eventCostByAgent()),
      [{ agent: 'node-agent', calls: 1, tokens_in: 8, tokens_out: 2, cost_usd: 0.25 }]);
    const m = JSON.parse(await rt.metricsSummary());
    assert.strictEqual(m.actions.succeeded, 1);
    assert.deepStrictEqual(JSON.parse(await rt.eventRetention({ max_events: 50 })).policy, { max_events: 50 });
    const cut = JSON.parse(await rt.eventsTruncate({ max_events: 1 }));
    assert.strictEqual(cut.remaining, 1);
    assert.deepStrictEqual(JSON.parse(await rt.eventRetention()).policy, { max_events: 50 });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('bad run requests reject with typed errors', async () => {
  const rt = new CarRuntime();
  await assert.rejects(rt.runsStart({}), (e) => e instanceof car.CarInputError && /intent/.test(e.message));
  await assert.rejects(rt.runsComplete({ run_id: 'nope', outcome: { status: 'done' } }), car.CarNotFoundError);
});
