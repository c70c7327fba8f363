// The ES module entry point: real named exports of everything lib.js (the
// CommonJS entry) exports, so `import { normalizeProposal } from 'car-runtime'`
// works under "type": "module". test/esm.test.js checks the two lists match.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const car = require('./lib.js');

export default car;
export const {
  CarRuntime,
  CarError,
  CarInputError,
  CarConfigError,
  CarNotFoundError,
  CarRuntimeError,
  TerminalToolError,
  executeProposal,
  executeProposalObj,
  registerToolHandler,
  unregisterToolHandler,
  approvalResolve,
  approvalResolveObj,
  approvalsPending,
  approvalsPendingObj,
  clientVersion,
  compilePermissionPreset,
  compilePermissionPresetObj,
  equivalent,
  evaluatePermission,
  evaluatePermissionObj,
  matchShellCommand,
  normalizeProposal,
  normalizeProposalObj,
  optimize,
  optimizeObj,
  permissionClassify,
  permissionClassifyObj,
  permissionEvaluate,
  permissionEvaluateObj,
  planBuild,
  planBuildObj,
  planDecide,
  planDecideObj,
  protocolVersion,
  rankProposals,
  rankProposalsObj,
  simulate,
  simulateObj,
  simulateMonteCarlo,
  simulateMonteCarloObj,
  simulateWithPredictions,
  toolsetHash,
  transactionCheck,
  transactionCheckObj,
  transactionCheckWithPredictions,
  verify,
  verifyObj,
} = car;
