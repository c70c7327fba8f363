// The ES-module half of check.cjs, run as main.js of a "type": "module"
// package: named imports, a tool call through executeProposalObj.
import { CarRuntime, executeProposalObj, CarError } from 'car-runtime';

const rt = new CarRuntime();
await rt.registerTool('t');
const out = await executeProposalObj(rt, { actions: [{ id: 'a', type: 'tool_call', tool: 't' }] }, async () => 1);
if (out.results[0].output !== 1 || typeof CarError !== 'function') {
  console.error('import { ... } from "car-runtime" failed', JSON.stringify(out));
  process.exit(1);
}
console.log(`npm package on ${process.arch}: import { ... } from "car-runtime" runs a tool`);
