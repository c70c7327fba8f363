// Types of the package entry point: the native addon's declarations
// (index.d.ts, generated from the Rust doc comments) plus the JS shims.
export * from './index';
import { CarRuntime } from './index';

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
    proposalApply(planId: string, toolFn: (callJson: string) => string | Promise<string> | unknown): Promise<string>;
  }
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
 * throwing `TerminalToolError` is a terminal failure. For a detached action it also receives
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

/** Executes a proposal; resolves to the ProposalResult as JSON text. */
export declare function executeProposal(
  rt: CarRuntime,
  proposalJson: string | object,
  toolFn: ToolFn,
  sessionId?: string | null,
  scopeJson?: string | object | null,
): Promise<string>;

/** Sets the handler `submitProposal` uses. */
export declare function registerToolHandler(fn: ToolFn): void;

/** Removes the handler. */
export declare function unregisterToolHandler(): void;
