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

test('the code unions of lib.d.ts name every code the Rust sources raise, in its family', () => {
  const fs = require('node:fs');
  const path = require('node:path');
  const root = path.join(__dirname, '..', '..', '..');
  const dts = fs.readFileSync(path.join(__dirname, '..', 'lib.d.ts'), 'utf8');
  const union = (name) => {
    const m = new RegExp(`export type ${name} =([^;]*);`).exec(dts);
    assert.ok(m, name);
    return new Set([...m[1].matchAll(/'([a-z_0-9]+)'/g)].map((x) => x[1]));
  };
  const families = {
    config: union('CarConfigErrorCode'),
    not_found: union('CarNotFoundErrorCode'),
    runtime: union('CarRuntimeErrorCode'),
  };
  const files = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.rs')) files.push(p);
    }
  };
  walk(path.join(root, 'src'));
  walk(path.join(__dirname, '..', 'src'));
  const missing = [];
  let seen = 0;
  for (const f of files) {
    // Codes raised by unit tests (after the file's #[cfg(test)]) are not API.
    const text = fs.readFileSync(f, 'utf8').split('#[cfg(test)]')[0];
    for (const m of text.matchAll(/Error::(config|not_found|runtime)\(\s*"([a-z_0-9]+)"/g)) {
      seen += 1;
      if (!families[m[1]].has(m[2])) missing.push(`${m[1]}:${m[2]} (${path.relative(root, f)})`);
    }
  }
  assert.ok(seen > 20, `only ${seen} raises found: the scan is broken`);
  assert.deepEqual(missing, []);
});
