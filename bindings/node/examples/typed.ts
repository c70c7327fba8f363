// A typed program against car-runtime: `tsc --strict` checks it in
// scripts/test (bindings/node/typecheck.sh), which then runs the output.
import {
  CarError,
  CarInputError,
  CarRuntime,
  executeProposalObj,
  normalizeProposalObj,
  verifyObj,
} from 'car-runtime';
import type { ActionProposal, ActionResult, CarErrorCode, ProposalResult, ToolCall } from 'car-runtime';

const proposal: ActionProposal = {
  actions: [
    { id: 'build', type: 'tool_call', tool: 'build' },
    { id: 'ship', type: 'tool_call', tool: 'deploy', parameters: { env: 'staging' }, state_dependencies: [] },
  ],
};

async function tool(callJson: string): Promise<Record<string, unknown>> {
  const call = JSON.parse(callJson) as ToolCall;
  return { tool: call.tool, env: call.params.env ?? null, attempt: call.attempt };
}

function describe(r: ActionResult): string {
  return `${r.action_id}: ${r.status}${r.error ? ` (${r.error})` : ''}`;
}

async function main(): Promise<void> {
  const rt = new CarRuntime();
  await rt.registerTool('build');
  await rt.registerTool('deploy');

  const verdict = verifyObj(proposal, null, ['build', 'deploy']);
  if (!verdict.valid) throw new Error(verdict.issues.map((i) => i.message).join('; '));

  const result: ProposalResult = await executeProposalObj(rt, proposal, tool);
  const lines = result.results.map(describe);
  if (lines.join(',') !== 'build: succeeded,ship: succeeded') throw new Error(lines.join(','));

  const normalized = normalizeProposalObj(proposal);
  console.log(`defaults filled in: failure_behavior=${normalized.actions[0].failure_behavior}`);

  try {
    normalizeProposalObj('{not json');
  } catch (e) {
    if (!(e instanceof CarInputError)) throw e;
    const code: CarErrorCode = e.code;
    console.log(`bad input rejected: ${code} (${e.family})`, e instanceof CarError);
  }
  console.log(lines.join('\n'));
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
