'use strict';
// The Node worker of benches/compare.py (a script, not a test): times our Node
// package on the proposal files compare.py wrote, in the same way as its
// Python workers, and prints one JSON object of best times in milliseconds.
// usage: node compare_node.js NODE_PACKAGE_DIR pure REPEATS FILE...
//        node compare_node.js NODE_PACKAGE_DIR exec REPEATS LABEL FILE [LABEL FILE]...
const fs = require('fs');
const path = require('path');

const [dir, kind, repeatsText, ...args] = process.argv.slice(2);
const car = require(path.resolve(dir));
const repeats = Number(repeatsText);

async function bestOf(f) {
  await f(); // warm-up
  let best = Infinity;
  for (let r = 0; r < repeats; r += 1) {
    const t0 = process.hrtime.bigint();
    await f();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return best;
}

(async () => {
  const out = {};
  if (kind === 'pure') {
    for (const file of args) {
      const text = fs.readFileSync(file, 'utf8');
      const n = JSON.parse(text).actions.length;
      const calls = {
        verify: () => car.verify(text, null, null, n),
        simulate: () => car.simulate(text),
        optimize: () => car.optimize(text),
        transaction_check: () => car.transactionCheck(text),
      };
      for (const [name, f] of Object.entries(calls)) out[`${name} ${path.basename(file)}`] = await bestOf(f);
    }
  } else {
    const noop = () => '{}';
    const runtime = async () => {
      const rt = new car.CarRuntime();
      await rt.registerTool('noop');
      return rt;
    };
    for (let i = 0; i < args.length; i += 2) {
      const [label, file] = [args[i], args[i + 1]];
      const text = fs.readFileSync(file, 'utf8');
      const n = JSON.parse(text).actions.length;
      const rt = await runtime();
      const first = JSON.parse(await car.executeProposal(rt, text, noop));
      const done = first.results.filter((x) => x.status === 'succeeded').length;
      if (done !== n) throw new Error(`${label}: ${done} of ${n} actions succeeded`);
      out[`long ${label}`] = await bestOf(() => car.executeProposal(rt, text, noop));
      if (label === '1,000 state_writes' && args.includes('10,000 state_writes')) {
        // Ten runs timed as one sample (compare.py's worker_exec says why).
        const ten = await bestOf(async () => {
          for (let k = 0; k < 10; k += 1) await car.executeProposal(rt, text, noop);
        });
        out[`long ${label} x10`] = ten / 10;
      }
      let best = Infinity;
      for (let r = 0; r < repeats; r += 1) {
        const fresh = await runtime();
        const t0 = process.hrtime.bigint();
        await car.executeProposal(fresh, text, noop);
        best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e6);
      }
      out[`fresh ${label}`] = best;
    }
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
