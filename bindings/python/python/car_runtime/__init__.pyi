"""Type stubs of car_runtime: in-process bindings of the car-runtime crate.

Arguments named ``*_json`` take JSON text or a JSON-serialisable value (dict,
list, ...). Document results are JSON text (``json.loads`` them). Errors are
``CarError`` subclasses carrying ``.code`` (a stable snake_case string),
``.message``, ``.family`` and ``.details`` (a dict); they pickle.

Typed results: the ``*_obj`` methods return the parsed documents, typed with
the ``TypedDict``s below (``ProposalResult``, ``ActionResult``, ...). The
``*_async`` methods never block the event loop; an ``async def`` tool is
awaited (on the caller's loop under an ``*_async`` call).
"""

from typing import Any, Awaitable, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union

from ._types import (
    Action as Action,
    ActionProposal as ActionProposal,
    ActionResult as ActionResult,
    ActionStatus as ActionStatus,
    CostSummary as CostSummary,
    PolicyInfo,
    ProposalResult as ProposalResult,
    ToolCall as ToolCall,
    ToolSchema as ToolSchema,
    VerificationIssue as VerificationIssue,
    VerificationResult as VerificationResult,
    EventQueryResult,
)

_JsonArg = Union[str, Dict[str, Any], List[Any], int, float, bool, None]
_ProposalArg = Union[str, ActionProposal, Dict[str, Any]]
_ToolFn = Union[Callable[[str], Any], Callable[[str, str], Any]]
"""`tool_fn(call_json)` (a ToolCall as JSON text) or `tool_fn(tool, params_json)`; returns
the result (JSON text or a JSON-serialisable value) or an awaitable of it (`async def`)."""
_HookAnswer = Union[None, Literal["allow", "deny", "ask"], Dict[str, Any]]
"""None (pass), "allow", "deny", "ask", or {"modified_input": {...}}; anything else denies."""
_CanUseToolAnswer = Union[None, Literal["allow", "deny"], Dict[str, Any]]
"""None (pass), "allow", "deny", or {"modified_input": {...}}; anything else denies."""
_HookFn = Callable[[str, Dict[str, Any]], Union[_HookAnswer, Awaitable[_HookAnswer]]]
_CanUseToolFn = Callable[[str, Dict[str, Any]], Union[_CanUseToolAnswer, Awaitable[_CanUseToolAnswer]]]

__version__: str

__all__ = [
    "Action",
    "ActionProposal",
    "ActionResult",
    "ActionStatus",
    "CostSummary",
    "ProposalResult",
    "ToolCall",
    "ToolSchema",
    "VerificationIssue",
    "VerificationResult",
    "CarConfigError",
    "CarRuntime",
    "execute",
    "execute_async",
    "execute_obj",
    "register_tool_handler",
    "unregister_tool_handler",
    "CarError",
    "CarInputError",
    "CarNotFoundError",
    "CarRuntimeError",
    "TerminalToolError",
    "ModelRetry",
    "__version__",
    "client_version",
    "plan_decide",
    "plan_build",
    "approvals_pending",
    "approval_resolve",
    "compile_permission_preset",
    "equivalent",
    "evaluate_permission",
    "match_shell_command",
    "normalize_proposal",
    "normalize_proposal_obj",
    "optimize",
    "optimize_obj",
    "permission_classify",
    "permission_evaluate",
    "protocol_version",
    "simulate",
    "simulate_obj",
    "toolset_hash",
    "transaction_check",
    "transaction_check_obj",
    "verify",
    "verify_obj",
    "rank_proposals",
    "simulate_monte_carlo",
    "simulate_with_predictions",
    "transaction_check_with_predictions",
]

class CarError(Exception):
    """Base of every car-runtime error."""
    code: str
    message: str
    family: str
    details: Dict[str, Any]
    def __init__(
        self,
        message: str = "",
        code: str = "internal_error",
        family: Optional[str] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> None: ...
    def __reduce__(self) -> Tuple[Any, ...]: ...

class CarInputError(CarError):
    """A bad input document or argument."""

class CarConfigError(CarError):
    """A configuration problem (policy file, tool definition, preset)."""

class CarNotFoundError(CarError):
    """A lookup of something that does not exist."""

class CarRuntimeError(CarError):
    """A failure while executing."""

class TerminalToolError(Exception):
    """Raised by a tool: stop retries, abort and roll back the proposal."""

class ModelRetry(Exception):
    """Raised by a tool: the model called it wrongly; the message tells it how
    to correct the call. Reported in the result as ``model retry (n of 2):
    <message>``, never retried by the engine, bounded to 2 per call chain."""

class CarRuntime:
    """One in-process runtime: its own state, tools, policies and event log."""

    def __init__(self) -> None: ...
    def register_tool(self, name: str) -> None:
        """Registers a tool with no parameter schema."""
    def register_tool_schema(self, schema_json: _JsonArg) -> None:
        """Registers a ToolSchema; parameters are validated before dispatch."""
    def list_tools(self) -> str:
        """The tools as JSON text, sorted by name, each with `source`."""
    def unregister_tool(self, name: str) -> int:
        """Removes a tool; the count removed (0 is not an error)."""
    def register_agent_basics(self, root: Optional[str] = None) -> None:
        """Registers the published built-in tools (read_file, write_file, edit_file, list_dir,
        find_files, grep_files, calculate), run in-process and confined to `root`; not `shell`."""
    def register_shell_tool(self, root: Optional[str] = None) -> None:
        """The built-in tools and `shell`, run in `root` under the admission document's sandbox
        (`workspace-write` by default: no network, writes only under the root, a scrubbed environment)."""
    def register_fetch_tool(self) -> None:
        """The first-party fetch tool `http_fetch` (risk `network`): the host and every address it resolves
        to are checked against the domain rules and `inspectors.egress_allowlist` before connecting, and each
        redirect the same way; loopback, private, link-local and metadata addresses need an allowlist entry."""
    def set_permissions(self, config_json: Optional[_JsonArg] = None, approvals_dir: Optional[str] = None) -> None:
        """Configures the admission stage from the admission configuration document
        (the core's AdmissionConfig; None removes every layer but the tier); asks go through the
        approvals store. A malformed document raises naming the bad key and changes nothing."""
    def set_permission_hooks(
        self, hooks: Optional[Sequence[_HookFn]] = None, can_use_tool: Optional[_CanUseToolFn] = None
    ) -> None:
        """Registers host hooks (run after the document's declarative hooks) and `can_use_tool`,
        replacing earlier ones. Each is called as `f(tool_name, input)` during admission, sync or
        `async def`; `{"modified_input": {...}}` substitutes the input later layers check and the
        tool receives. A raise or any other answer denies."""
    def on_approval(self, callback: Callable[[str], Any]) -> int:
        """Attaches an approver notified of every approval event (JSON text); an ask then waits for it."""
    def remove_approval_callback(self, id: int) -> bool: ...
    def approvals_pending(self) -> str:
        """`{"pending": [...]}` of the runtime's approvals store."""
    def approval_resolve(self, key: str, decision: str, reason: str = "") -> str:
        """Resolves an approval; anything but `allow` is a deny. The resolution in force, with `applied`."""
    def register_policy(
        self,
        name: str,
        rule: str,
        target: Optional[str] = None,
        key: Optional[str] = None,
        pattern: Optional[str] = None,
        value_json: Optional[_JsonArg] = None,
        session_id: Optional[str] = None,
    ) -> None:
        """Registers `deny_tool`, `deny_tool_param` or `require_state`."""
    def unregister_policy(self, name: str, session_id: Optional[str] = None) -> int:
        """Removes every policy of that name; the count."""
    def list_policies(self, session_id: Optional[str] = None) -> str:
        """`[{name, description}]` in registration order, as JSON text."""
    def load_policies(self, dir: str) -> int:
        """Loads the `*.toml` policy files of `dir`; the number of rules."""
    def open_session(self) -> str:
        """Opens a policy scope; its id."""
    def close_session(self, session_id: str) -> bool:
        """Closes a policy scope; False when it was not open."""
    def state_set(self, key: str, value_json: _JsonArg, tenant: Optional[str] = None) -> None: ...
    def state_get(self, key: str, tenant: Optional[str] = None) -> str:
        """The value as JSON text; "null" when absent."""
    def state_exists(self, key: str, tenant: Optional[str] = None) -> bool: ...
    def state_keys(self, tenant: Optional[str] = None) -> List[str]: ...
    def state_snapshot(self, tenant: Optional[str] = None) -> str: ...
    def set_strict_fields(self, strict: bool) -> None:
        """Strict mode: a proposal with a field the IR does not know is refused
        (CarInputError, code ``unknown_field``) instead of run without it."""
    def strict_fields(self) -> bool:
        """True in strict mode."""
    def verify_proposal(self, proposal_json: _ProposalArg) -> str:
        """Verifies against this runtime's state and tool schemas (a
        ``warning`` for each unknown field)."""
    def admission_config(self) -> str:
        """The admission configuration document in force, as JSON text."""
        ...
    def mcp_status(self) -> str:
        """The MCP servers of the document's `mcp` section, as JSON text: contract hashes, pin refusals, drift reports."""
        ...
    def proposal_plan(
        self, proposal_json: _ProposalArg, session_id: Optional[str] = None, scope_json: Optional[_JsonArg] = None
    ) -> str:
        """The plan of a proposal before anything runs: JSON text {plan_id, proposal_id, items, counts}."""
        ...
    def proposal_decide(
        self, plan_id: str, action_id: str, decision: str, scope: str = "once", reason: str = ""
    ) -> str:
        """Decides one `ask` item of a plan (allow/deny; scope once or session)."""
        ...
    def proposal_apply(self, plan_id: str, tool_fn: _ToolFn) -> str:
        """Runs a plan after its decisions; the plan is used up."""
        ...
    def execute_proposal(
        self,
        proposal_json: _ProposalArg,
        tool_fn: _ToolFn,
        session_id: Optional[str] = None,
        scope_json: Optional[_JsonArg] = None,
    ) -> str:
        """Executes; `tool_fn(call_json)` or `tool_fn(tool, params_json)` returns the result."""
    def submit_proposal(self, proposal_json: _ProposalArg, session_id: Optional[str] = None) -> str:
        """Executes with the handler from `register_tool_handler`."""
    def resume_proposal(self, suspension_id: str, tool_fn: _ToolFn) -> str:
        """Resumes a suspended proposal (`on_ask = "suspend"`): what had not run runs, once."""
    def suspended_proposals(self) -> str:
        """`{suspended: [{id, proposal_id, pending, waiting, ...}]}`, oldest first."""
    def simulate_monte_carlo(
        self,
        proposal_json: _ProposalArg,
        initial_state_json: Optional[_JsonArg] = None,
        tool_success_rates_json: Optional[_JsonArg] = None,
        goal_json: Optional[_JsonArg] = None,
        config_json: Optional[_JsonArg] = None,
    ) -> str:
        """Monte Carlo with rates from this runtime's event log where none is given."""
    def event_count(self) -> int: ...
    def event_query(self, query_json: Optional[_JsonArg] = None) -> str:
        """`{count, events}` newest first."""
    def enable_event_log_hash_chaining(self) -> None: ...
    def verify_event_log_chain(self) -> str:
        """`{"verified": n}` or `{"tampered_at": i}`."""
    def event_retention(self, policy_json: Optional[_JsonArg] = None) -> str:
        """Gets (no argument) or sets `{max_events?, max_age_secs?}`: `{policy}` or `{policy, removed}`."""
    def events_truncate(self, params_json: _JsonArg) -> str:
        """Removes events beyond `{max_events?, max_age_secs?}` once: `{removed, remaining}`."""
    def event_cost_by_agent(self) -> str:
        """`[{agent, calls, tokens_in, tokens_out, cost_usd}]` from the runs' model turns."""
    def metrics_summary(self) -> str:
        """The operational rollup of the events held (rates, latency, approvals, cost)."""
    def set_runs_dir(self, dir: Optional[str] = None) -> None:
        """Keeps run traces as `<dir>/<run_id>.json`; `None`: in memory only."""
    def runs_start(self, params_json: _JsonArg) -> str:
        """`{intent, agent_id?, agent_name?, outcome_description?, idempotency_key?}` -> `{run_id, agent_id}`."""
    def runs_record_model_turn(self, params_json: _JsonArg) -> str:
        """`{run_id, turn_index?, assistant_text?, requested_tool_calls?, model_id?, token_usage?, duration_ms?}`."""
    def runs_complete(self, params_json: _JsonArg) -> str:
        """`{run_id, outcome: {status, summary?, ...}}` -> `{run_id, ok}`."""
    def runs_list(self, params_json: Optional[_JsonArg] = None) -> str:
        """`{count, runs}` newest first; filters `{agent_id?, status?, limit?}`."""
    def runs_get_trace(self, params_json: _JsonArg) -> str:
        """`{run, events}` of `{run_id}`."""
    def tool_log(self, call: _JsonArg, level: str, message: str, data: Any = None) -> None: ...
    def tool_cancelled(self, call: _JsonArg) -> bool: ...
    def tool_poll(self, handle: str) -> Optional[str]: ...
    def tool_cancel(self, handle: str) -> bool: ...
    def permission_get_tier(self) -> str: ...
    def permission_set_tier(self, tier: str) -> str:
        """Sets the granted tier and turns the tier layer on: an action above it (and every
        `full_access` action) refuses the proposal unless the approvals ledger approves it."""

    # -- parsed results (the documents above as dicts/lists) --------------
    def list_tools_obj(self) -> List[ToolSchema]: ...
    def list_policies_obj(self, session_id: Optional[str] = None) -> List[PolicyInfo]: ...
    def state_get_obj(self, key: str, tenant: Optional[str] = None) -> Any: ...
    def state_snapshot_obj(self, tenant: Optional[str] = None) -> Dict[str, Any]: ...
    def event_query_obj(self, query_json: Optional[_JsonArg] = None) -> EventQueryResult: ...
    def verify_proposal_obj(self, proposal_json: _ProposalArg) -> VerificationResult: ...
    def proposal_plan_obj(
        self, proposal_json: _ProposalArg, session_id: Optional[str] = None, scope_json: Optional[_JsonArg] = None
    ) -> Dict[str, Any]: ...
    def proposal_apply_obj(self, plan_id: str, tool_fn: _ToolFn) -> ProposalResult: ...
    def execute_proposal_obj(
        self,
        proposal_json: _ProposalArg,
        tool_fn: _ToolFn,
        session_id: Optional[str] = None,
        scope_json: Optional[_JsonArg] = None,
    ) -> ProposalResult: ...
    def submit_proposal_obj(self, proposal_json: _ProposalArg, session_id: Optional[str] = None) -> ProposalResult: ...
    def resume_proposal_obj(self, suspension_id: str, tool_fn: _ToolFn) -> ProposalResult: ...
    def suspended_proposals_obj(self) -> Dict[str, Any]: ...
    # -- awaitable variants (run in a worker thread; never block the loop) -
    async def execute_proposal_async(
        self,
        proposal_json: _ProposalArg,
        tool_fn: _ToolFn,
        session_id: Optional[str] = None,
        scope_json: Optional[_JsonArg] = None,
    ) -> str:
        """`execute_proposal` awaited; an `async def` tool runs on this event loop."""
    async def execute_proposal_obj_async(
        self,
        proposal_json: _ProposalArg,
        tool_fn: _ToolFn,
        session_id: Optional[str] = None,
        scope_json: Optional[_JsonArg] = None,
    ) -> ProposalResult: ...
    async def submit_proposal_async(self, proposal_json: _ProposalArg, session_id: Optional[str] = None) -> str: ...
    async def submit_proposal_obj_async(
        self, proposal_json: _ProposalArg, session_id: Optional[str] = None
    ) -> ProposalResult: ...
    async def proposal_apply_async(self, plan_id: str, tool_fn: _ToolFn) -> str: ...
    async def resume_proposal_async(self, suspension_id: str, tool_fn: _ToolFn) -> str: ...
    async def resume_proposal_obj_async(self, suspension_id: str, tool_fn: _ToolFn) -> ProposalResult: ...
    async def proposal_plan_async(
        self, proposal_json: _ProposalArg, session_id: Optional[str] = None, scope_json: Optional[_JsonArg] = None
    ) -> str: ...
    async def verify_proposal_async(self, proposal_json: _ProposalArg) -> str: ...
    async def simulate_monte_carlo_async(
        self,
        proposal_json: _ProposalArg,
        initial_state_json: Optional[_JsonArg] = None,
        tool_success_rates_json: Optional[_JsonArg] = None,
        goal_json: Optional[_JsonArg] = None,
        config_json: Optional[_JsonArg] = None,
    ) -> str: ...

def register_tool_handler(fn: _ToolFn) -> None:
    """Sets the handler `CarRuntime.submit_proposal` uses."""
def unregister_tool_handler() -> None: ...
def execute(proposal_json: _ProposalArg, tool_names: List[str], tool_fn: _ToolFn) -> str:
    """Executes on a fresh runtime with these tools registered."""
def verify(
    proposal_json: _ProposalArg,
    initial_state_json: Optional[_JsonArg] = None,
    tool_names: Optional[List[str]] = None,
    max_actions: Optional[int] = None,
    tool_schemas_json: Optional[_JsonArg] = None,
) -> str: ...
def simulate(proposal_json: _ProposalArg, initial_state_json: Optional[_JsonArg] = None) -> str: ...
def optimize(proposal_json: _ProposalArg) -> str: ...
def equivalent(p1_json: _JsonArg, p2_json: _JsonArg, test_states_json: Optional[_JsonArg] = None) -> bool: ...
def transaction_check(
    proposal_json: _ProposalArg, versions_json: Optional[_JsonArg] = None, state_json: Optional[_JsonArg] = None
) -> str: ...
def simulate_monte_carlo(
    proposal_json: _ProposalArg,
    initial_state_json: Optional[_JsonArg] = None,
    tool_success_rates_json: Optional[_JsonArg] = None,
    goal_json: Optional[_JsonArg] = None,
    config_json: Optional[_JsonArg] = None,
) -> str:
    """`{trials, seed, p_goal_reached, goal_underivable_conditions, p_all_effects_landed, tool_calls,
    actions_executed, state_distribution, action_outcomes, success_rates}`."""
def rank_proposals(candidates_json: _JsonArg, tools: Optional[List[str]] = None, cost_weight: Optional[float] = None) -> str:
    """`[ScoredProposal]`, best first."""
def simulate_with_predictions(
    proposal_json: _ProposalArg, predictions_json: _JsonArg, min_accuracy: float, initial_state_json: Optional[_JsonArg] = None
) -> str: ...
def transaction_check_with_predictions(
    proposal_json: _ProposalArg,
    predictions_json: _JsonArg,
    versions_json: Optional[_JsonArg] = None,
    state_json: Optional[_JsonArg] = None,
) -> str: ...
def permission_classify(proposal_json: _ProposalArg) -> str: ...
def permission_evaluate(proposal_json: _ProposalArg, granted_tier: str, ledger_path: Optional[str] = None) -> str: ...
def match_shell_command(command: str, rules_json: _JsonArg) -> str:
    """"allow", "ask" or "deny"."""
def evaluate_permission(chain_json: _JsonArg, tool_json: _JsonArg, input_json: _JsonArg) -> str: ...
def toolset_hash(tools_json: _JsonArg) -> str: ...
def compile_permission_preset(name: str) -> str: ...
def plan_build(calls_json: _JsonArg, operations_json: _JsonArg, options_json: Optional[_JsonArg] = None) -> str: ...
def plan_decide(plan_json: _JsonArg, item_id: str, decision_json: _JsonArg, options_json: Optional[_JsonArg] = None) -> str: ...
def approvals_pending(state_dir: str) -> str: ...
def approval_resolve(state_dir: str, key: str, decision: str, reason: str = "") -> str: ...
def normalize_proposal(proposal_json: _ProposalArg) -> str: ...
def protocol_version() -> int: ...
async def execute_async(proposal_json: _ProposalArg, tool_names: List[str], tool_fn: _ToolFn) -> str:
    """`execute` in a worker thread; never blocks the event loop."""
def execute_obj(proposal_json: _ProposalArg, tool_names: List[str], tool_fn: _ToolFn) -> ProposalResult: ...
def verify_obj(
    proposal_json: _ProposalArg,
    initial_state_json: Optional[_JsonArg] = None,
    tool_names: Optional[List[str]] = None,
    max_actions: Optional[int] = None,
    tool_schemas_json: Optional[_JsonArg] = None,
) -> VerificationResult: ...
def simulate_obj(proposal_json: _ProposalArg, initial_state_json: Optional[_JsonArg] = None) -> Dict[str, Any]: ...
def optimize_obj(proposal_json: _ProposalArg) -> ActionProposal: ...
def normalize_proposal_obj(proposal_json: _ProposalArg) -> ActionProposal: ...
def transaction_check_obj(
    proposal_json: _ProposalArg, versions_json: Optional[_JsonArg] = None, state_json: Optional[_JsonArg] = None
) -> Dict[str, Any]: ...
def client_version() -> str: ...
