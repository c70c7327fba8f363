// Worktree and readonly isolation through the Node binding (issue #23).
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const car = require('..');
const { CarRuntime } = car;

const git = (dir, ...args) => execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8' });

function repo() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-wt-'));
  git(d, 'init', '-q', '-b', 'main');
  git(d, 'config', 'user.email', 't@example.com');
  git(d, 'config', 'user.name', 't');
  fs.writeFileSync(path.join(d, 'a.txt'), 'one\n');
  git(d, 'add', '-A');
  git(d, 'commit', '-q', '-m', 'first');
  return d;
}

async function runtime(root, isolation) {
  const rt = new CarRuntime();
  await rt.registerAgentBasics(root);
  rt.registerTool('probe');
  await rt.setPermissions({ isolation });
  return rt;
}

test('a worktree run gives a Node tool the tree as cwd and returns the patch', async () => {
  const d = repo();
  try {
    const rt = await runtime(d, { kind: 'worktree' });
    const seen = [];
    const out = JSON.parse(await car.executeProposal(rt, {
      id: 'p',
      actions: [
        { id: 'w', type: 'tool_call', tool: 'write_file', parameters: { path: 'a.txt', content: 'two\n' } },
        { id: 'x', type: 'tool_call', tool: 'probe', parameters: {} },
      ],
    }, (callJson) => {
      const call = JSON.parse(callJson);
      seen.push(call);
      fs.writeFileSync(path.join(call.cwd, 'from_node.txt'), 'js\n');
      return {};
    }));
    assert.deepStrictEqual(out.results.map((r) => r.status), ['succeeded', 'succeeded'], JSON.stringify(out));
    assert.ok(seen[0].cwd.includes('car-worktrees'), seen[0].cwd);
    assert.strictEqual(seen[0].isolation.kind, 'worktree');
    const [patch] = out.artifacts;
    assert.strictEqual(patch.kind, 'patch');
    assert.deepStrictEqual([...patch.files].sort(), ['a.txt', 'from_node.txt']);
    assert.ok(patch.patch.includes('+two') && patch.patch.includes('+js'));
    assert.strictEqual(fs.readFileSync(path.join(d, 'a.txt'), 'utf8'), 'one\n');
    assert.strictEqual(git(d, 'status', '--porcelain'), '');
    assert.ok(!fs.existsSync(seen[0].cwd), 'the tree is removed');
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('worktree isolation outside a repository is a CarConfigError and runs nothing', async () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-nogit-'));
  try {
    const rt = await runtime(d, { kind: 'worktree' });
    let called = 0;
    await assert.rejects(
      car.executeProposal(rt, { id: 'p', actions: [{ id: 'x', type: 'tool_call', tool: 'probe', parameters: {} }] },
        () => { called += 1; return {}; }),
      (e) => e instanceof car.CarConfigError && e.code === 'isolation_not_git',
    );
    assert.strictEqual(called, 0);
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('readonly isolation denies writes', async () => {
  const d = repo();
  try {
    const rt = await runtime(d, 'readonly');
    const out = JSON.parse(await car.executeProposal(rt, {
      id: 'p',
      actions: [
        { id: 'r', type: 'tool_call', tool: 'read_file', parameters: { path: 'a.txt' } },
        { id: 'w', type: 'tool_call', tool: 'write_file', parameters: { path: 'a.txt', content: 'x' }, failure_behavior: 'skip' },
      ],
    }, () => ({})));
    assert.deepStrictEqual(out.results.map((r) => r.status), ['succeeded', 'rejected']);
    assert.strictEqual(fs.readFileSync(path.join(d, 'a.txt'), 'utf8'), 'one\n');
    await assert.rejects(rt.setPermissions({ isolation: 'container' }), car.CarConfigError);
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
});
