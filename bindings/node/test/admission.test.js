'use strict';
// The admission conformance corpus (tests/conformance/admission/cases.json)
// through the Node binding's public API, set up case by case as the Rust
// runner (tests/admission_conformance.rs) does: stub tools, policies, policy
// files, a ledger, the admission document, an approvals directory (unless
// `approvals: false`) and an approver; then per action the status and the
// deciding layer (the newest AdmissionDecided event of the action outside the
// compensation stage), what became of compensations, and cost counters.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const car = require('..');

const CORPUS = JSON.parse(
  fs.readFileSync(path.resolve(__dirname, '..', '..', '..', 'tests', 'conformance', 'admission', 'cases.json'), 'utf8'),
);

function stub(callJson) {
  const call = JSON.parse(callJson);
  if (call.params && call.params.fail === true) throw new Error('stub failure');
  return { ok: true };
}

async function runtimeFor(c, dir) {
  const rt = new car.CarRuntime();
  for (const t of [...CORPUS.tools, ...(c.extra_tools || [])]) await rt.registerToolSchema(t);
  for (const p of c.policies || []) {
    await rt.registerPolicy(p.name, p.rule, p.target ?? null, p.key ?? null, p.pattern ?? null, p.value_json ?? null);
  }
  if (c.policy_files) {
    const pd = path.join(dir, 'policies');
    fs.mkdirSync(pd);
    for (const [name, text] of Object.entries(c.policy_files)) fs.writeFileSync(path.join(pd, name), text);
    await rt.loadPolicies(pd);
  }
  const config = { ...c.config };
  if (c.ledger) {
    const file = path.join(dir, 'ledger.jsonl');
    fs.writeFileSync(file, c.ledger.map((l) => `${JSON.stringify(l)}\n`).join(''));
    config.ledger_path = file;
  }
  const approvals = c.approvals === false ? null : path.join(dir, 'approvals');
  await rt.setPermissions(JSON.stringify(config), approvals);
  if (c.approver) {
    const mode = c.approver;
    rt.onApproval((eventJson) => {
      const ev = JSON.parse(eventJson);
      if (ev.event !== 'pending') return;
      if (mode === 'approve') rt.approvalResolve(ev.key, 'allow', 'conformance approver');
      else if (mode === 'deny') rt.approvalResolve(ev.key, 'deny', 'conformance approver');
      // "timeout": never answers
    });
  }
  return rt;
}

function layerOf(events, actionId) {
  // Newest first: the first event of the action outside the compensation stage.
  const e = events.find((e) => e.action_id === actionId && e.data.stage !== 'compensation');
  return (e && e.data.layer) || 'none';
}

function compensationOf(r) {
  if (r.compensated === true) return 'compensated';
  if (typeof r.compensation_error === 'string') return 'refused';
  return 'none';
}

test('the admission corpus is substantial', () => {
  assert.ok(CORPUS.cases.length >= 40, `${CORPUS.cases.length} cases`);
});

for (const c of CORPUS.cases) {
  test(`admission: ${c.name}`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-admission-'));
    try {
      const rt = await runtimeFor(c, dir);
      const result = JSON.parse(await car.executeProposal(rt, JSON.stringify(c.proposal), stub));
      const eventsText = await rt.eventQuery({ kinds: ['AdmissionDecided'] });
      const events = JSON.parse(eventsText).events;
      const got = result.results.map((r) => [r.action_id, r.status, layerOf(events, r.action_id)]);
      const want = c.expected.map((e) => [e.id, e.status, e.layer]);
      assert.deepEqual(got, want, JSON.stringify(result.results));
      for (const [id, what] of Object.entries(c.compensation || {})) {
        const r = result.results.find((r) => r.action_id === id);
        assert.equal(compensationOf(r), what, JSON.stringify(r));
      }
      for (const [k, v] of Object.entries(c.cost || {})) assert.equal(result.cost[k], v, JSON.stringify(result.cost));
      // Every verdict is recorded, without the parameter values.
      for (const secret of ['rm -rf victim', 'evil.test']) assert.ok(!eventsText.includes(secret), secret);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}
