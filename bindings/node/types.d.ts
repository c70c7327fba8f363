// TypeScript shapes of the Agent IR and of the documents car-runtime returns
// (docs: /work/shared/spec/agent-ir-spec.md). Results are JSON text in the
// published API; `JSON.parse` them as these types, or call the `*Obj`
// variants, which return them parsed.

export type ActionType = 'tool_call' | 'state_write' | 'state_read' | 'assertion';
export type FailureBehavior = 'abort' | 'retry' | 'skip';
export type Reversibility = 'reversible' | 'compensable' | 'irreversible';
export type InvocationMode = 'one_shot' | 'streaming' | 'long_running';
export type ActionStatus = 'proposed' | 'validated' | 'rejected' | 'executing' | 'succeeded' | 'failed' | 'skipped';
export type Severity = 'error' | 'warning' | 'info';
export type EvidenceTier = 'decision_procedure' | 'heuristic' | 'sampled';
export type PermissionTier = 'read_only' | 'sandbox_edit' | 'full_access';
export type Verdict = 'allow' | 'ask' | 'deny';
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export interface Precondition {
  key: string;
  operator?: 'eq' | 'neq' | 'gt' | 'lt' | 'gte' | 'lte' | 'exists' | 'not_exists' | 'contains';
  value?: unknown;
  description?: string;
}

export interface StateAssumption {
  key: string;
  expected_value?: unknown;
  read_version?: number;
}

export type Compensation =
  | { type: 'tool'; tool: string; parameters?: Record<string, unknown> }
  | { type: 'action_ref'; action_id: string };

/** One action of an ActionProposal. Unknown fields are accepted and ignored. */
export interface Action {
  id?: string;
  type: ActionType;
  tool?: string;
  parameters?: Record<string, unknown>;
  preconditions?: Precondition[];
  expected_effects?: Record<string, unknown>;
  state_dependencies?: string[];
  read_set?: string[];
  write_set?: string[];
  assumptions?: StateAssumption[];
  invocation_mode?: InvocationMode;
  reversibility?: Reversibility;
  compensation?: Compensation;
  idempotent?: boolean;
  max_retries?: number;
  failure_behavior?: FailureBehavior;
  timeout_ms?: number;
  metadata?: Record<string, unknown>;
}

/** A batch of actions proposed by a model (the Agent IR). */
export interface ActionProposal {
  id?: string;
  source?: string;
  timestamp?: string;
  actions: Action[];
  context?: Record<string, unknown>;
}

/** A proposal argument: JSON text or the proposal itself. */
export type ProposalInput = string | ActionProposal;

export interface CostSummary {
  tool_calls: number;
  actions_executed: number;
  actions_rejected?: number;
  actions_skipped: number;
  total_duration_ms: number;
  retries: number;
}

/** The outcome of one action. */
export interface ActionResult {
  action_id: string;
  status: ActionStatus;
  output?: unknown;
  error?: string | null;
  state_changes?: Record<string, { op: 'set'; value: unknown } | { op: 'delete' } | unknown>;
  duration_ms?: number | null;
  timestamp?: string;
  /** Present (true) only when the enclosing state transaction was restored. */
  rolled_back?: boolean;
  /** Present (true) only when the tool failed terminally. */
  terminal?: boolean;
}

/** What `executeProposal` / `submitProposal` resolve to (parsed). */
export interface ProposalResult {
  proposal_id: string;
  results: ActionResult[];
  cost: CostSummary;
  /** Under worktree isolation: one `{kind: "patch", base, files, bytes, patch?, truncated?, worktree?}`. */
  artifacts?: Array<Record<string, unknown>>;
  /** `"suspended"` when the proposal suspended on an ask approval (`on_ask: "suspend"`). */
  status?: 'suspended';
  /** Of a suspended proposal; resume it with `rt.resumeProposal(suspension.id, toolFn)`. */
  suspension?: {
    id: string;
    pending: Array<{ action_id: string; tool?: string; approval_key: string }>;
    waiting: string[];
  };
}

/** What a tool function receives as JSON text (`JSON.parse(callJson) as ToolCall`). */
export interface ToolCall {
  tool: string;
  params: Record<string, unknown>;
  action_id: string;
  request_id: string;
  timeout_ms: number | null;
  session_id: string | null;
  /** 1-based. */
  attempt: number;
  /** Under worktree isolation: where to work, inside the tree. */
  cwd?: string;
  /** The proposal's declared isolation, when not `"none"`. */
  isolation?: unknown;
}

export interface VerificationIssue {
  action_id?: string | null;
  severity: Severity;
  message: string;
  tier?: EvidenceTier;
}

/** What `verify` / `verifyProposal` return (parsed). */
export interface VerificationResult {
  valid: boolean;
  issues: VerificationIssue[];
  simulated_state?: Record<string, unknown>;
  execution_levels?: string[][];
  conflicts?: unknown[];
  [extra: string]: unknown;
}

export interface ToolSchema {
  name: string;
  source?: 'builtin' | 'user_defined' | 'subprocess' | 'mcp';
  description?: string;
  parameters?: Record<string, unknown>;
  returns?: Record<string, unknown>;
  idempotent?: boolean;
  cache_ttl_secs?: number;
  rate_limit?: { max_calls: number; interval_secs: number };
  [extra: string]: unknown;
}

export interface PolicyInfo {
  name: string;
  description: string;
}

export interface EventQueryResult {
  count: number;
  events: Array<Record<string, unknown>>;
}

export interface TransactionCheckResult {
  consistent: boolean;
  conflicts: Array<{ kind: string; key: string; actions: string[]; explanation: string; resolution: string }>;
}

/** `{"verified": n}` or `{"tampered_at": i}`. */
export type ChainVerification = { verified: number } | { tampered_at: number };
