// Types of the package entry point: the native addon's declarations
// (index.d.ts, generated from the Rust doc comments) plus the JS shims.
export * from './index';
import { CarRuntime } from './index';

declare module './index' {
  interface CarRuntime {
    /** Executes with the handler from `registerToolHandler`; rejects with `.code === 'no_tool_handler'` when none is set. */
    submitProposal(proposalJson: string | object, sessionId?: string | null): Promise<string>;
  }
}

/** A tool callback: receives the call JSON text
 * `{"tool","params","action_id","request_id","timeout_ms","session_id","attempt"}` and returns
 * (or resolves to) the result as JSON text or a plain value. Throwing fails the action;
 * throwing `TerminalToolError` is a terminal failure. */
export type ToolFn = (callJson: string) => unknown | Promise<unknown>;

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
