'use strict';
// Real ESM named exports: under "type": "module", `import { x } from 'car-runtime'`
// gives every function and class the CommonJS entry exports.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

const pkgDir = path.resolve(__dirname, '..');

test('every public export is a named ES module export, through the exports map', () => {
  const cjs = require('..');
  const names = Object.keys(cjs).filter((n) => !n.startsWith('_') && n !== 'JsCarRuntime');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'car-esm-'));
  try {
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'esm-probe', type: 'module' }));
    fs.mkdirSync(path.join(dir, 'node_modules'));
    fs.symlinkSync(pkgDir, path.join(dir, 'node_modules', 'car-runtime'), 'dir');
    const src = `
import * as ns from 'car-runtime';
import car, { normalizeProposal, CarRuntime, CarInputError, executeProposalObj, verifyObj } from 'car-runtime';
const want = ${JSON.stringify(names)};
const missing = want.filter((n) => !(n in ns) || ns[n] === undefined);
if (missing.length) throw new Error('not named exports: ' + missing.join(', '));
const extra = Object.keys(ns).filter((n) => n !== 'default' && !want.includes(n));
if (extra.length) throw new Error('not in the CommonJS entry: ' + extra.join(', '));
if (car.normalizeProposal !== normalizeProposal) throw new Error('default export differs');
const p = JSON.parse(normalizeProposal({ actions: [{ type: 'tool_call', tool: 'x' }] }));
if (p.actions[0].failure_behavior !== 'abort') throw new Error('normalizeProposal');
try { normalizeProposal('{'); throw new Error('no throw'); } catch (e) { if (!(e instanceof CarInputError)) throw e; }
const rt = new CarRuntime();
await rt.registerTool('x');
const out = await executeProposalObj(rt, { actions: [{ id: 'a', type: 'tool_call', tool: 'x' }] }, async () => ({ ok: 1 }));
if (out.results[0].output.ok !== 1) throw new Error('executeProposalObj');
if (verifyObj({ actions: [] }).valid !== true) throw new Error('verifyObj');
console.log('esm ok ' + want.length);
`;
    fs.writeFileSync(path.join(dir, 'main.js'), src);
    const out = execFileSync(process.execPath, ['main.js'], { cwd: dir, encoding: 'utf8' });
    assert.match(out, /^esm ok \d+/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
