'use strict';
// CarError and its per-family subclasses, built from the addon's structured
// error records (never from the message text).
const test = require('node:test');
const assert = require('node:assert/strict');
const car = require('..');

const { CarError, CarInputError, CarConfigError, CarNotFoundError, CarRuntimeError } = car;

test('the error classes are exported and form one hierarchy', () => {
  for (const Cls of [CarInputError, CarConfigError, CarNotFoundError, CarRuntimeError]) {
    const e = new Cls('m', { code: 'x_code', details: { a: 1 } });
    assert.ok(e instanceof CarError && e instanceof Error);
    assert.equal(e.name, Cls.name);
    assert.equal(e.code, 'x_code');
    assert.deepEqual(e.details, { a: 1 });
    assert.equal(e.message, 'm');
  }
  assert.equal(new CarInputError('m').family, 'input');
  assert.equal(new CarConfigError('m').family, 'config');
  assert.equal(new CarNotFoundError('m').family, 'not_found');
  assert.equal(new CarRuntimeError('m').family, 'runtime');
  assert.deepEqual(new CarError('m').details, {});
});

test('a synchronous function throws CarInputError with code, family and details', () => {
  assert.throws(
    () => car.normalizeProposal('{not json'),
    (e) =>
      e instanceof CarInputError &&
      e.code === 'invalid_json' &&
      e.family === 'input' &&
      typeof e.details.line === 'number' &&
      !e.message.startsWith('[') &&
      e.cause === undefined,
  );
  assert.throws(
    () => car.normalizeProposal({ actions: [{ type: 'tool_call' }] }),
    (e) => e instanceof CarInputError && e.code === 'missing_field' && e.details.field !== undefined,
  );
  assert.throws(() => car.compilePermissionPreset('lenient'), (e) => e instanceof CarConfigError && e.family === 'config');
});

test('a message that looks like a code prefix is never parsed into .code', async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('t');
  // The tool's error text travels as an action error, not as a thrown error.
  const out = JSON.parse(await car.executeProposal(rt, { actions: [{ id: 'a', type: 'tool_call', tool: 't' }] }, () => {
    throw new Error('[no_tool_handler] fake');
  }));
  assert.equal(out.results[0].status, 'failed');
  assert.ok(out.results[0].error.includes('[no_tool_handler] fake'));
});

test('async methods reject with the family subclass', async () => {
  const rt = new car.CarRuntime();
  await assert.rejects(rt.registerPolicy('x', 'allow_everything'), (e) => e instanceof CarInputError && e.code === 'invalid_argument');
  await assert.rejects(rt.approvalsPending(), (e) => e instanceof CarRuntimeError && e.code === 'approvals_not_configured');
  await assert.rejects(rt.setPermissions({ preset: 'lenient' }), (e) => e instanceof CarError && typeof e.code === 'string');
  assert.throws(() => rt.proposalDecide('nope', 'a', 'allow'), (e) => e instanceof CarNotFoundError && e.code === 'plan_not_found');
});

test('executeProposal rejects with CarError subclasses (the port path)', async () => {
  const rt = new car.CarRuntime();
  await assert.rejects(car.executeProposal(rt, '{not json', () => 1), (e) => e instanceof CarInputError && e.code === 'invalid_json');
  await assert.rejects(car.executeProposal(rt, { actions: [] }, 'nope'), (e) => e instanceof CarInputError && e.code === 'invalid_argument' && e.details.argument === 'toolFn');
  car.unregisterToolHandler();
  await assert.rejects(rt.submitProposal({ actions: [] }), (e) => e instanceof CarRuntimeError && e.code === 'no_tool_handler');
  assert.throws(() => rt.setPermissionHooks([1]), (e) => e instanceof CarInputError && e.code === 'invalid_argument');
});

test('errors of other origins pass through unchanged', () => {
  // napi's own argument conversion errors are not car errors.
  assert.throws(() => car.matchShellCommand(42, []), (e) => e instanceof Error && !(e instanceof CarError));
});
