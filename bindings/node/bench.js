'use strict';
// Speed of the Node binding (a script, not a test): per-action cost of
// executeProposal with a no-op JS tool, for 10,000 tool calls in one proposal
// (independent and as a chain), and the fixed per-call overhead.
// Usage: node bench.js   (build with `npx napi build --platform --release` first for real figures)
const car = require('.');

async function time(label, n, fn) {
  await fn(); // warm-up
  const t0 = process.hrtime.bigint();
  await fn();
  const us = Number(process.hrtime.bigint() - t0) / 1000;
  console.log(`${label}: ${(us / n).toFixed(2)} us per action (${n} actions, ${(us / 1000).toFixed(1)} ms)`);
}

(async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('noop');
  const noop = () => '{}';
  const n = 10000;
  const wide = { actions: Array.from({ length: n }, (_, i) => ({ id: `a${i}`, type: 'tool_call', tool: 'noop' })) };
  const chain = { actions: Array.from({ length: n }, (_, i) => ({ id: `c${i}`, type: 'tool_call', tool: 'noop', dependencies: i ? [`c${i - 1}`] : [] })) };
  const writes = { actions: Array.from({ length: n }, (_, i) => ({ id: `w${i}`, type: 'state_write', parameters: { key: `k${i}`, value: i } })) };
  const one = JSON.stringify({ actions: [{ id: 'a', type: 'tool_call', tool: 'noop' }] });
  await time('independent tool calls', n, () => car.executeProposal(rt, JSON.stringify(wide), noop));
  await time('chained tool calls', n, () => car.executeProposal(rt, JSON.stringify(chain), noop));
  await time('state_write actions', n, () => car.executeProposal(rt, JSON.stringify(writes), noop));
  const calls = 2000;
  await time('one-tool proposals (per call, sequential)', calls, async () => {
    for (let i = 0; i < calls; i += 1) await car.executeProposal(rt, one, noop);
  });
})();
