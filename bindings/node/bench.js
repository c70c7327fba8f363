'use strict';
// Speed of the Node binding (a script, not a test): per-action cost of
// executeProposal with a no-op JS tool, for 10,000 tool calls in one proposal
// (independent and as a chain), 10,000 state_writes (no JS tool), and the
// per-call cost of a one-tool proposal. Each case runs RUNS times after a
// warm-up; the best and the median run are reported (the machine is shared).
// The same proposals through the Rust facade, without Node:
// `cargo bench -p car-runtime-node --bench facade`.
// Usage: node bench.js   (build with `npx napi build --platform --release` first for real figures)
const car = require('.');

const RUNS = Number(process.env.RUNS || 5);

async function time(label, n, fn, unit = 'per action') {
  await fn(); // warm-up
  const per = [];
  for (let r = 0; r < RUNS; r += 1) {
    const t0 = process.hrtime.bigint();
    await fn();
    per.push(Number(process.hrtime.bigint() - t0) / 1000 / n);
  }
  per.sort((a, b) => a - b);
  console.log(`${label}: best ${per[0].toFixed(2)} us, median ${per[per.length >> 1].toFixed(2)} us ${unit}`);
}

(async () => {
  const rt = new car.CarRuntime();
  await rt.registerTool('noop');
  const noop = () => '{}';
  const n = 10000;
  const wide = JSON.stringify({ actions: Array.from({ length: n }, (_, i) => ({ id: `a${i}`, type: 'tool_call', tool: 'noop' })) });
  const chain = JSON.stringify({ actions: Array.from({ length: n }, (_, i) => ({ id: `c${i}`, type: 'tool_call', tool: 'noop', dependencies: i ? [`c${i - 1}`] : [] })) });
  const writes = JSON.stringify({ actions: Array.from({ length: n }, (_, i) => ({ id: `w${i}`, type: 'state_write', parameters: { key: `k${i}`, value: i } })) });
  const one = JSON.stringify({ actions: [{ id: 'a', type: 'tool_call', tool: 'noop' }] });
  await time('10,000 independent tool calls', n, () => car.executeProposal(rt, wide, noop));
  await time('10,000 chained tool calls', n, () => car.executeProposal(rt, chain, noop));
  await time('10,000 state_writes', n, () => car.executeProposal(rt, writes, noop));
  const calls = 2000;
  await time('one-tool proposals, sequential', calls, async () => {
    for (let i = 0; i < calls; i += 1) await car.executeProposal(rt, one, noop);
  }, 'per call');
})();
