// Types of the package entry point: the native addon's declarations
// (index.d.ts, generated from the Rust doc comments) plus the JS shims.
export * from './index';
export * from './types';
import { CarRuntime } from './index';
import type {
  ActionProposal,
  ChainVerification,
  EventQueryResult,
  PolicyInfo,
  ProposalInput,
  ProposalResult,
  ToolSchema,
  TransactionCheckResult,
  VerificationResult,
} from './types';

declare module './index' {
  interface CarRuntime {
    /** Executes with the handler from `registerToolHandler`; rejects with `.code === 'no_tool_handler'` when none is set. */
    submitProposal(proposalJson: string | object, sessionId?: string | null): Promise<string>;
    /** Registers host hooks (run after the admission document's declarative hooks) and
     * `canUseTool` in the permission chain, replacing earlier ones. Each is called during
     * admission as `f(toolName, input)` and may return a Promise; `{modifiedInput: {...}}`
     * substitutes the input later layers check and the tool receives. A throw, a rejected
     * Promise, any other answer, or no answer within 30 s denies. Throws `invalid_argument`
     * when an argument is not a function. */
    setPermissionHooks(hooks?: readonly PermissionHook[] | null, canUseTool?: CanUseToolFn | null): void;
    /** Runs a plan built by `proposalPlan` after its decisions; the plan is used up. */
    proposalApply(planId: string, toolFn: ToolFn): Promise<string>;
    /** Resumes a suspended proposal (`on_ask: "suspend"`): what had not run goes through
     * admission again and runs, once. Rejects with `.code` `suspension_not_found`,
     * `suspension_claimed` or `suspension_conflict`. */
    resumeProposal(suspensionId: string, toolFn: ToolFn): Promise<string>;

    // Parsed results: the documents themselves instead of their JSON text.
    /** `verifyProposal`, parsed. */
    verifyProposalObj(proposalJson: ProposalInput): Promise<VerificationResult>;
    /** `listTools`, parsed. */
    listToolsObj(): Promise<ToolSchema[]>;
    /** `listPolicies`, parsed. */
    listPoliciesObj(sessionId?: string | null): Promise<PolicyInfo[]>;
    /** `eventQuery`, parsed. */
    eventQueryObj(queryJson?: string | object | null): Promise<EventQueryResult>;
    /** `submitProposal`, parsed. */
    submitProposalObj(proposalJson: ProposalInput, sessionId?: string | null): Promise<ProposalResult>;
    /** `proposalApply`, parsed. */
    proposalApplyObj(planId: string, toolFn: ToolFn): Promise<ProposalResult>;
    /** `resumeProposal`, parsed. */
    resumeProposalObj(suspensionId: string, toolFn: ToolFn): Promise<ProposalResult>;
    /** `suspendedProposals`, parsed. */
    suspendedProposalsObj(): Promise<{ suspended: Array<Record<string, unknown>> }>;
    /** `verifyEventLogChain`, parsed. */
    verifyEventLogChainObj(): Promise<ChainVerification>;
    /** `approvalsPending`, parsed. */
    approvalsPendingObj(): Promise<{ pending: Array<Record<string, unknown>> }>;
    /** `stateGet`, parsed (`null` when absent). */
    stateGetObj(key: string, tenant?: string | null): unknown;
    /** `stateSnapshot`, parsed. */
    stateSnapshotObj(tenant?: string | null): Record<string, unknown>;
    /** `proposalPlan`, parsed: `{plan_id, proposal_id, items, counts}`. */
    proposalPlanObj(
      proposalJson: ProposalInput,
      sessionId?: string | null,
      scopeJson?: string | object | null,
    ): { plan_id: string; proposal_id: string; items: Array<Record<string, unknown>>; counts: Record<string, number> };
    /** `admissionConfig`, parsed. */
    admissionConfigObj(): Record<string, unknown>;
    /** `mcpStatus`, parsed. */
    mcpStatusObj(): Record<string, unknown>;
  }
}

/** The stable codes of `CarInputError` (the input family is closed). */
export type CarInputErrorCode = 'invalid_json' | 'invalid_document' | 'missing_field' | 'unknown_field' | 'invalid_argument';

/** Codes of `CarConfigError` known to this version. */
export type CarConfigErrorCode =
  | 'always_scope_unavailable'
  | 'duplicate_tool'
  | 'invalid_admission_config'
  | 'invalid_ledger'
  | 'invalid_ledger_key'
  | 'ledger_key_required'
  | 'invalid_mcp_config'
  | 'invalid_mcp_tool'
  | 'invalid_permission_hook'
  | 'invalid_permission_rule'
  | 'invalid_policy_store'
  | 'invalid_sandbox_config'
  | 'invalid_shell_pattern'
  | 'invalid_shell_rule_example'
  | 'invalid_subprocess_tool'
  | 'invalid_tool_name'
  | 'invalid_tool_schema'
  | 'isolation_not_git'
  | 'mcp_tool_conflict'
  | 'mcp_unavailable'
  | 'policy_io_error'
  | 'policy_parse_error'
  | 'run_completed'
  | 'suspension_claimed'
  | 'suspension_conflict'
  | 'suspension_not_owned'
  | 'unknown_policy_key'
  | 'unknown_preset'
  | 'unsupported_executor'
  | 'unsupported_schema';

/** Codes of `CarNotFoundError` known to this version. */
export type CarNotFoundErrorCode =
  | 'approval_not_found'
  | 'intent_not_found'
  | 'plan_item_not_found'
  | 'plan_not_found'
  | 'run_not_found'
  | 'suspension_not_found'
  | 'unknown_method'
  | 'unknown_session';

/** Codes of `CarRuntimeError` known to this version. */
export type CarRuntimeErrorCode =
  | 'always_scope_unavailable'
  | 'approval_required'
  | 'approval_store_corrupt'
  | 'approval_store_io'
  | 'approvals_not_configured'
  | 'canonicalization_failed'
  | 'checkpoint_io'
  | 'checkpoint_unreadable'
  | 'checkpoint_unwritable'
  | 'event_file_io_error'
  | 'event_file_tampered'
  | 'event_log_poisoned'
  | 'intent_already_decided'
  | 'intent_expired'
  | 'internal_error'
  | 'invalid_state'
  | 'ledger_io_error'
  | 'lock_poisoned'
  | 'mcp_connect_failed'
  | 'mcp_serve_failed'
  | 'no_ledger'
  | 'no_tool_handler'
  | 'plan_item_not_awaiting_decision'
  | 'policy_store_io'
  | 'preview_failed'
  | 'rate_limiter_poisoned'
  | 'runs_store_io'
  | 'serialization_failed'
  | 'state_poisoned'
  | 'store_schema_newer'
  | 'store_unavailable'
  | 'supervision_unavailable'
  | 'worktree_failed';

/** Every code known to this version. A newer core may add codes to a family
 * (never to the input family); match on `family` or `instanceof` for those. */
export type CarErrorCode = CarInputErrorCode | CarConfigErrorCode | CarNotFoundErrorCode | CarRuntimeErrorCode;

export type CarErrorFamily = 'input' | 'config' | 'not_found' | 'runtime';

export interface CarErrorOptions<C extends string = string> {
  code?: C;
  family?: CarErrorFamily;
  details?: Record<string, unknown>;
  cause?: unknown;
}

/** Base of every error car-runtime throws or rejects with. */
export declare class CarError extends Error {
  /** The stable snake_case code. */
  readonly code: CarErrorCode;
  readonly family: CarErrorFamily;
  /** Structured details (`{argument}`, `{path}`, `{line, column}`, ...); `{}` when none. */
  readonly details: Record<string, unknown>;
  constructor(message: string, options?: CarErrorOptions<CarErrorCode>);
}
/** A bad input document or argument. */
export declare class CarInputError extends CarError {
  readonly code: CarInputErrorCode;
  readonly family: 'input';
  constructor(message: string, options?: CarErrorOptions<CarInputErrorCode>);
}
/** A configuration problem (policy file, tool definition, preset). */
export declare class CarConfigError extends CarError {
  readonly code: CarConfigErrorCode;
  readonly family: 'config';
  constructor(message: string, options?: CarErrorOptions<CarConfigErrorCode>);
}
/** A lookup of something that does not exist. */
export declare class CarNotFoundError extends CarError {
  readonly code: CarNotFoundErrorCode;
  readonly family: 'not_found';
  constructor(message: string, options?: CarErrorOptions<CarNotFoundErrorCode>);
}
/** A failure while executing. */
export declare class CarRuntimeError extends CarError {
  readonly code: CarRuntimeErrorCode;
  readonly family: 'runtime';
  constructor(message: string, options?: CarErrorOptions<CarRuntimeErrorCode>);
}

/** A hook's answer: `undefined`/`null` (pass), `'allow'`, `'deny'`, `'ask'`, or
 * `{modifiedInput: {...}}` (the substituted input). Anything else denies. */
export type HookAnswer = undefined | null | 'allow' | 'deny' | 'ask' | { modifiedInput: Record<string, unknown> };

/** `canUseTool`'s answer: as a hook's, without `'ask'` (which denies). */
export type CanUseToolAnswer = undefined | null | 'allow' | 'deny' | { modifiedInput: Record<string, unknown> };

/** A host permission hook. */
export type PermissionHook = (toolName: string, input: Record<string, unknown>) => HookAnswer | Promise<HookAnswer>;

/** A host `canUseTool`. */
export type CanUseToolFn = (
  toolName: string,
  input: Record<string, unknown>,
) => CanUseToolAnswer | Promise<CanUseToolAnswer>;

/** The second argument of a tool function called for a detached action
 * (`invocation_mode` `"streaming"` or `"long_running"`). */
export interface DetachedCallContext {
  readonly detached: true;
  /** Aborted when `toolCancel(handle)` cancels the call (or the start timed out). */
  readonly signal: AbortSignal;
}

/** One chunk a detached tool yields: a chunk object, a string (a `text` chunk), or any other value (a `data` chunk). */
export type ToolStreamChunk =
  | { kind: 'text'; text: string }
  | { kind: 'data'; data: unknown }
  | { kind: 'progress'; fraction: number; message?: string }
  | { kind: 'done'; result?: unknown }
  | { kind: 'error'; message: string }
  | string
  | unknown;

/** A tool callback: receives the call JSON text
 * `{"tool","params","action_id","request_id","timeout_ms","session_id","attempt"}` and returns
 * (or resolves to) the result as JSON text or a plain value. Throwing fails the action;
 * throwing `TerminalToolError` is a terminal failure, `ModelRetry` a model-recoverable one. For a detached action it also receives
 * `{detached: true, signal}` and may return an async iterable or an iterator of chunks
 * (see README: the iterator's return value is the `done` result; a throw is an `error` chunk). */
export type ToolFn = (
  callJson: string,
  detached?: DetachedCallContext,
) => unknown | Promise<unknown> | AsyncIterable<ToolStreamChunk> | Iterator<ToolStreamChunk>;

/** Thrown by a tool: stop retries, abort and roll back the proposal. */
export declare class TerminalToolError extends Error {
  readonly terminal: true;
  constructor(message: string);
}

/** Thrown by a tool: the model called it wrongly; the message tells it how to correct
 * the call. Reported as `model retry (n of 2): <message>`, never retried by the engine,
 * bounded to 2 per call chain (a policy session's calls of one tool). */
export declare class ModelRetry extends Error {
  readonly modelRetry: true;
  constructor(message: string);
}

/** Executes a proposal; resolves to the ProposalResult as JSON text. */
export declare function executeProposal(
  rt: CarRuntime,
  proposalJson: ProposalInput,
  toolFn: ToolFn,
  sessionId?: string | null,
  scopeJson?: string | object | null,
): Promise<string>;

/** Sets the handler `submitProposal` uses. */
export declare function registerToolHandler(fn: ToolFn): void;

/** Removes the handler. */
export declare function unregisterToolHandler(): void;

/** `executeProposal`, resolving to the parsed ProposalResult. */
export declare function executeProposalObj(
  rt: CarRuntime,
  proposalJson: ProposalInput,
  toolFn: ToolFn,
  sessionId?: string | null,
  scopeJson?: string | object | null,
): Promise<ProposalResult>;

// Typed declarations of the standalone functions (these shadow the generated
// `any` ones of index.d.ts), and their parsed (`*Obj`) variants.
type JsonInput = string | object;
/** Static verification; the VerificationResult as JSON text. */
export declare function verify(
  proposalJson: ProposalInput,
  initialStateJson?: JsonInput | null,
  toolNames?: string[] | null,
  maxActions?: number | null,
  toolSchemasJson?: JsonInput | null,
): string;
export declare function verifyObj(
  proposalJson: ProposalInput,
  initialStateJson?: JsonInput | null,
  toolNames?: string[] | null,
  maxActions?: number | null,
  toolSchemasJson?: JsonInput | null,
): VerificationResult;
export declare function simulate(proposalJson: ProposalInput, initialStateJson?: JsonInput | null): string;
export declare function simulateObj(proposalJson: ProposalInput, initialStateJson?: JsonInput | null): Record<string, unknown>;
export declare function optimize(proposalJson: ProposalInput): string;
export declare function optimizeObj(proposalJson: ProposalInput): ActionProposal;
export declare function normalizeProposal(proposalJson: ProposalInput): string;
export declare function normalizeProposalObj(proposalJson: ProposalInput): ActionProposal;
export declare function transactionCheck(proposalJson: ProposalInput, versionsJson?: JsonInput | null, stateJson?: JsonInput | null): string;
export declare function transactionCheckObj(
  proposalJson: ProposalInput,
  versionsJson?: JsonInput | null,
  stateJson?: JsonInput | null,
): TransactionCheckResult;
export declare function permissionClassify(proposalJson: ProposalInput): string;
export declare function permissionClassifyObj(proposalJson: ProposalInput): {
  classifications: Array<{
    action_id: string;
    tool: string | null;
    required_tier: string;
    reversibility: string;
    missing_compensation: boolean;
  }>;
  declared_rollback_contract: string;
};
export declare function permissionEvaluate(proposalJson: ProposalInput, grantedTier: string, ledgerPath?: string | null): string;
export declare function permissionEvaluateObj(
  proposalJson: ProposalInput,
  grantedTier: string,
  ledgerPath?: string | null,
): Record<string, unknown>;
export declare function simulateMonteCarloObj(
  proposalJson: ProposalInput,
  initialStateJson?: JsonInput | null,
  toolSuccessRatesJson?: JsonInput | null,
  goalJson?: JsonInput | null,
  configJson?: JsonInput | null,
): Record<string, unknown>;
export declare function rankProposalsObj(
  candidatesJson: JsonInput,
  tools?: string[] | null,
  costWeight?: number | null,
): Array<Record<string, unknown>>;
export declare function evaluatePermissionObj(chainJson: JsonInput, toolJson: JsonInput, inputJson: JsonInput): Record<string, unknown>;
export declare function planBuildObj(callsJson: JsonInput, operationsJson: JsonInput, optionsJson?: JsonInput | null): Record<string, unknown>;
export declare function planDecideObj(
  planJson: JsonInput,
  itemId: string,
  decisionJson: JsonInput,
  optionsJson?: JsonInput | null,
): Record<string, unknown>;
export declare function approvalsPendingObj(stateDir: string): { pending: Array<Record<string, unknown>> };
export declare function approvalResolveObj(stateDir: string, key: string, decision: string, reason?: string | null): Record<string, unknown>;
export declare function compilePermissionPresetObj(name: string): Record<string, unknown>;
