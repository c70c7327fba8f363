'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

test('versions', () => {
  assert.equal(car.protocolVersion(), 3);
  assert.equal(typeof car.clientVersion(), 'string');
});

test('normalizeProposal fills defaults from JSON text or a plain object', () => {
  for (const arg of ['{"actions":[{"type":"tool_call","tool":"x"}]}', { actions: [{ type: 'tool_call', tool: 'x' }] }]) {
    const p = JSON.parse(car.normalizeProposal(arg));
    const a = p.actions[0];
    assert.equal(p.source, 'unknown');
    assert.equal(p.id.length, 12);
    assert.equal(a.max_retries, 3);
    assert.equal(a.failure_behavior, 'abort');
    assert.equal(a.reversibility, 'irreversible');
  }
});

test('errors carry the stable code', () => {
  assert.throws(
    () => car.normalizeProposal({ actions: [{ type: 'tool_call', tool: 'x', failure_behavior: 'redo' }] }),
    (e) => e instanceof Error && e.code === 'invalid_document' && e.message.includes('actions[0].failure_behavior'),
  );
  assert.throws(() => car.normalizeProposal({ actions: [{ type: 'tool_call' }] }), (e) => e.code === 'missing_field');
});
