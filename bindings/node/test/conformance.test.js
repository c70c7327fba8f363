'use strict';
// A smoke subset of the Rust conformance corpus (tests/conformance) run
// through the Node binding's published functions, with the same expected outputs.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const car = require('..');

const ROOT = path.resolve(__dirname, '..', '..', '..', 'tests', 'conformance');
const METHODS = {
  verify: [car.verify, ['proposal', 'initial_state', 'tool_names', 'max_actions', 'tool_schemas']],
  simulate: [car.simulate, ['proposal', 'initial_state']],
  optimize: [car.optimize, ['proposal']],
  equivalent: [car.equivalent, ['p1', 'p2', 'test_states']],
  transaction_check: [car.transactionCheck, ['proposal', 'versions', 'state']],
  permission_classify: [car.permissionClassify, ['proposal']],
  match_shell_command: [car.matchShellCommand, ['command', 'rules']],
  evaluate_permission: [car.evaluatePermission, ['chain', 'tool', 'input']],
  toolset_hash: [car.toolsetHash, ['tools']],
  compile_permission_preset: [car.compilePermissionPreset, ['name']],
  normalize_proposal: [car.normalizeProposal, ['proposal']],
};

function subset(want, got) {
  if (Array.isArray(want)) return Array.isArray(got) && want.length === got.length && want.every((w, i) => subset(w, got[i]));
  if (want && typeof want === 'object') return got && typeof got === 'object' && Object.keys(want).every((k) => k in got && subset(want[k], got[k]));
  if (typeof want === 'number' && typeof got === 'number') return want === got;
  return want === got;
}

function* walk(dir) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) yield* walk(p);
    else if (e.name.endsWith('.json')) yield p;
  }
}

let ran = 0;
for (const file of walk(ROOT)) {
  for (const c of JSON.parse(fs.readFileSync(file, 'utf8')).cases) {
    const m = METHODS[c.method];
    if (!m) continue;
    const [fn, names] = m;
    const params = c.params || {};
    if (Object.keys(params).some((k) => !names.includes(k)) || params[names[0]] === undefined) continue;
    ran += 1;
    test(`${path.basename(path.dirname(file))}/${path.basename(file)}: ${c.name}`, () => {
      const args = names.map((n) => (n in params ? params[n] : n === 'input' ? {} : null));
      while (args.length && args[args.length - 1] === null) args.pop();
      if ('expected_error' in c) {
        assert.throws(() => fn(...args), (e) => e.code === c.expected_error);
        return;
      }
      let out = fn(...args);
      if (typeof out === 'string') {
        try { out = JSON.parse(out); } catch { /* a plain string result */ }
      }
      if ('expected' in c) assert.ok(subset(c.expected, out) && subset(out, c.expected), JSON.stringify(out));
      else assert.ok(subset(c.expected_subset, out), JSON.stringify(out));
    });
  }
}

test('the smoke subset is substantial', () => assert.ok(ran >= 100, `${ran} cases`));
