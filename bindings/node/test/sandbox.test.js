// The sandbox under `shell` through the Node binding (issue #26).
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const car = require('..');
const { CarRuntime } = car;

// A scratch directory with `root/.car` and `outside`, removed after `body`.
async function inWorkspace(body) {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-sandbox-'));
  try {
    const root = path.join(base, 'root');
    const outside = path.join(base, 'outside');
    fs.mkdirSync(path.join(root, '.car'), { recursive: true });
    fs.mkdirSync(outside);
    await body({ root, outside });
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
  }
}

async function shell(rt, command, timeoutMs) {
  const parameters = { command };
  if (timeoutMs !== undefined) parameters.timeout_ms = timeoutMs; // the shell's own (the sandbox's) timeout
  const p = { id: 'p', actions: [{ id: 's', type: 'tool_call', tool: 'shell', parameters, max_retries: 0 }] };
  const out = JSON.parse(await car.executeProposal(rt, p, () => ({ host: true })));
  return out.results[0];
}

test('shell runs under workspace-write by default', () => inWorkspace(async ({ root, outside }) => {
  const rt = new CarRuntime();
  await rt.registerShellTool(root);
  let r = await shell(rt, 'echo in > inside.txt');
  assert.strictEqual(r.status, 'succeeded', JSON.stringify(r));
  assert.strictEqual(fs.readFileSync(path.join(root, 'inside.txt'), 'utf8'), 'in\n');
  const target = path.join(outside, 'escape.txt');
  r = await shell(rt, `echo out > ${target}`);
  assert.strictEqual(r.status, 'failed', JSON.stringify(r));
  assert.match(r.error, /Permission denied/);
  assert.ok(!fs.existsSync(target));
  process.env.CAR_NODE_SANDBOX_SECRET = 'hunter2';
  try {
    r = await shell(rt, 'echo "[$CAR_NODE_SANDBOX_SECRET]"');
    assert.strictEqual(r.status, 'succeeded', JSON.stringify(r));
    assert.strictEqual(r.output.stdout, '[]\n');
  } finally {
    delete process.env.CAR_NODE_SANDBOX_SECRET;
  }
}));

test('a host loopback server is refused with network off and reached through loopback_ports', async () => {
  const net = require('node:net');
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'car-node-sandbox-'));
  const srv = net.createServer((c) => {
    let buf = '';
    c.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        c.write(`echo:${buf.slice(0, i + 1)}`);
        buf = buf.slice(i + 1);
      }
    });
    c.on('error', () => {});
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = srv.address();
    const cmd = `python3 -c "import socket; s=socket.create_connection(('127.0.0.1',${port}),timeout=5); s.sendall(b'ping\\n'); print(s.makefile().readline().strip())"`;
    const rt = new CarRuntime();
    await rt.registerShellTool(base);
    let r = await shell(rt, cmd); // workspace-write: network off
    assert.strictEqual(r.status, 'failed', JSON.stringify(r));
    assert.match(r.error, /Permission denied|Network is unreachable/);
    await rt.setPermissions({ sandbox: { default: 'fwd', profiles: { fwd: { network: 'loopback', loopback_ports: [port] } } } });
    r = await shell(rt, cmd);
    assert.strictEqual(r.status, 'succeeded', JSON.stringify(r));
    assert.strictEqual(r.output.stdout, 'echo:ping\n');
  } finally {
    srv.close();
    fs.rmSync(base, { recursive: true, force: true });
  }
});

function gone(pid) {
  let stat;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return true;
  }
  return stat.slice(stat.lastIndexOf(')') + 1).trim().startsWith('Z');
}

test('symlinks, own files, background processes and fork loops are bounded', () => inWorkspace(async ({ root, outside }) => {
  const perms = path.join(root, '.car', 'permissions.toml');
  fs.writeFileSync(perms, "# the operator's\n");
  const victim = path.join(outside, 'victim.txt');
  fs.writeFileSync(victim, 'original\n');
  fs.symlinkSync(victim, path.join(root, 'link'));
  const rt = new CarRuntime();
  await rt.registerShellTool(root);
  let r = await shell(rt, 'echo pwned > link');
  assert.strictEqual(r.status, 'failed', JSON.stringify(r));
  assert.match(r.error, /Permission denied/);
  assert.strictEqual(fs.readFileSync(victim, 'utf8'), 'original\n');
  // Spelled so no text check sees `.car`: the kernel refuses it.
  for (const cmd of ['d=.ca; echo evil >> ${d}r/permissions.toml', 'd=.ca; rm -f ${d}r/permissions.toml']) {
    r = await shell(rt, cmd);
    assert.strictEqual(r.status, 'failed', `${cmd}: ${JSON.stringify(r)}`);
  }
  assert.strictEqual(fs.readFileSync(perms, 'utf8'), "# the operator's\n");
  r = await shell(rt, 'sleep 60 & echo $! > bg.pid; sleep 60', 1000);
  assert.strictEqual(r.status, 'failed', JSON.stringify(r));
  assert.match(r.error, /^sandbox timeout:/);
  const pid = fs.readFileSync(path.join(root, 'bg.pid'), 'utf8').trim();
  assert.ok(gone(pid), `sleep ${pid} was left behind`);
  await rt.setPermissions({ sandbox: { default: 'small', profiles: { small: { limits: { processes: 16 } } } } });
  r = await shell(rt, 'i=0; while [ $i -lt 200 ]; do sleep 2 & i=$((i+1)); done; echo $i', 20000);
  assert.strictEqual(r.status, 'failed', JSON.stringify(r));
  assert.match(r.error, /^sandbox limit:/);
  assert.match(r.error, /`processes` limit/);
}));

test('constructs the matcher asks about run harmlessly when allowed', () => inWorkspace(async ({ root, outside }) => {
  const a = path.join(outside, 'arith');
  const b = path.join(outside, 'wrapped');
  const rt = new CarRuntime();
  await rt.registerShellTool(root);
  for (const cmd of [`echo $(( $(echo 1 > ${a}; echo 2) + 1 ))`, `env sh -c 'echo x > ${b}'`, `timeout 5 sh -c 'echo x > ${b}'`]) {
    const r = await shell(rt, cmd);
    assert.ok(['succeeded', 'failed'].includes(r.status), `${cmd} ran: ${JSON.stringify(r)}`);
  }
  assert.ok(!fs.existsSync(a) && !fs.existsSync(b));
}));
