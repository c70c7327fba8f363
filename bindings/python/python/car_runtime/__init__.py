"""car-runtime: validate, verify, simulate, authorize and execute batches of
actions proposed by AI models (the Agent IR), in-process.

Every function forwards to the Rust crate's JSON facade. Arguments whose
name ends in ``_json`` accept JSON text or a plain dict/list.
"""

import json as _json
from typing import Any, List, Optional

from . import _native
from ._aio import in_thread as _in_thread
from ._errors import (
    CarConfigError,
    CarError,
    CarInputError,
    CarNotFoundError,
    CarRuntimeError,
    ModelRetry,
    TerminalToolError,
)
from ._types import (  # noqa: F401
    Action,
    ActionProposal,
    ActionResult,
    ActionStatus,
    CostSummary,
    ProposalResult,
    ToolCall,
    ToolSchema,
    VerificationIssue,
    VerificationResult,
)
from ._native import (  # noqa: F401
    execute,
    register_tool_handler,
    unregister_tool_handler,
    client_version,
    plan_decide,
    plan_build,
    approvals_pending,
    approval_resolve,
    compile_permission_preset,
    equivalent,
    evaluate_permission,
    match_shell_command,
    normalize_proposal,
    optimize,
    permission_classify,
    permission_evaluate,
    protocol_version,
    rank_proposals,
    simulate,
    simulate_monte_carlo,
    simulate_with_predictions,
    toolset_hash,
    transaction_check,
    transaction_check_with_predictions,
    verify,
)

__version__ = client_version()


class CarRuntime(_native.NativeCarRuntime):
    """One in-process runtime: its own state, tools, policies and event log.

    Beside the published methods (JSON text results): ``*_obj`` variants that
    return the parsed document (dict/list), and ``*_async`` variants of the
    long calls that run in a worker thread and never block the event loop;
    an ``async def`` tool is then awaited on the caller's loop.
    """

    __module__ = "car_runtime"
    __slots__ = ()

    # -- parsed results ---------------------------------------------------
    def list_tools_obj(self) -> Any:
        return _json.loads(self.list_tools())

    def list_policies_obj(self, session_id: Optional[str] = None) -> Any:
        return _json.loads(self.list_policies(session_id))

    def state_get_obj(self, key: str, tenant: Optional[str] = None) -> Any:
        return _json.loads(self.state_get(key, tenant))

    def state_snapshot_obj(self, tenant: Optional[str] = None) -> Any:
        return _json.loads(self.state_snapshot(tenant))

    def event_query_obj(self, query_json: Any = None) -> Any:
        return _json.loads(self.event_query(query_json))

    def verify_proposal_obj(self, proposal_json: Any) -> Any:
        return _json.loads(self.verify_proposal(proposal_json))

    def proposal_plan_obj(self, proposal_json: Any, session_id: Optional[str] = None, scope_json: Any = None) -> Any:
        return _json.loads(self.proposal_plan(proposal_json, session_id, scope_json))

    def proposal_apply_obj(self, plan_id: str, tool_fn: Any) -> Any:
        return _json.loads(self.proposal_apply(plan_id, tool_fn))

    def execute_proposal_obj(
        self, proposal_json: Any, tool_fn: Any, session_id: Optional[str] = None, scope_json: Any = None
    ) -> Any:
        return _json.loads(self.execute_proposal(proposal_json, tool_fn, session_id, scope_json))

    def submit_proposal_obj(self, proposal_json: Any, session_id: Optional[str] = None) -> Any:
        return _json.loads(self.submit_proposal(proposal_json, session_id))

    def resume_proposal_obj(self, suspension_id: str, tool_fn: Any) -> Any:
        return _json.loads(self.resume_proposal(suspension_id, tool_fn))

    def suspended_proposals_obj(self) -> Any:
        return _json.loads(self.suspended_proposals())

    # -- awaitable variants -----------------------------------------------
    async def execute_proposal_async(
        self, proposal_json: Any, tool_fn: Any, session_id: Optional[str] = None, scope_json: Any = None
    ) -> str:
        return await _in_thread(self.execute_proposal, proposal_json, tool_fn, session_id, scope_json)

    async def execute_proposal_obj_async(
        self, proposal_json: Any, tool_fn: Any, session_id: Optional[str] = None, scope_json: Any = None
    ) -> Any:
        return _json.loads(await self.execute_proposal_async(proposal_json, tool_fn, session_id, scope_json))

    async def submit_proposal_async(self, proposal_json: Any, session_id: Optional[str] = None) -> str:
        return await _in_thread(self.submit_proposal, proposal_json, session_id)

    async def submit_proposal_obj_async(self, proposal_json: Any, session_id: Optional[str] = None) -> Any:
        return _json.loads(await self.submit_proposal_async(proposal_json, session_id))

    async def proposal_apply_async(self, plan_id: str, tool_fn: Any) -> str:
        return await _in_thread(self.proposal_apply, plan_id, tool_fn)

    async def resume_proposal_async(self, suspension_id: str, tool_fn: Any) -> str:
        return await _in_thread(self.resume_proposal, suspension_id, tool_fn)

    async def resume_proposal_obj_async(self, suspension_id: str, tool_fn: Any) -> Any:
        return _json.loads(await self.resume_proposal_async(suspension_id, tool_fn))

    async def proposal_plan_async(
        self, proposal_json: Any, session_id: Optional[str] = None, scope_json: Any = None
    ) -> str:
        return await _in_thread(self.proposal_plan, proposal_json, session_id, scope_json)

    async def verify_proposal_async(self, proposal_json: Any) -> str:
        return await _in_thread(self.verify_proposal, proposal_json)

    async def simulate_monte_carlo_async(
        self,
        proposal_json: Any,
        initial_state_json: Any = None,
        tool_success_rates_json: Any = None,
        goal_json: Any = None,
        config_json: Any = None,
    ) -> str:
        return await _in_thread(
            self.simulate_monte_carlo, proposal_json, initial_state_json, tool_success_rates_json, goal_json, config_json
        )


async def execute_async(proposal_json: Any, tool_names: List[str], tool_fn: Any) -> str:
    """``execute`` in a worker thread: a fresh runtime per call; never blocks the loop."""
    return await _in_thread(execute, proposal_json, tool_names, tool_fn)


def verify_obj(
    proposal_json: Any,
    initial_state_json: Any = None,
    tool_names: Optional[List[str]] = None,
    max_actions: Optional[int] = None,
    tool_schemas_json: Any = None,
) -> Any:
    """``verify``, the result parsed."""
    return _json.loads(verify(proposal_json, initial_state_json, tool_names, max_actions, tool_schemas_json))


def simulate_obj(proposal_json: Any, initial_state_json: Any = None) -> Any:
    """``simulate``, the final state parsed."""
    return _json.loads(simulate(proposal_json, initial_state_json))


def optimize_obj(proposal_json: Any) -> Any:
    """``optimize``, the proposal parsed."""
    return _json.loads(optimize(proposal_json))


def normalize_proposal_obj(proposal_json: Any) -> Any:
    """``normalize_proposal``, the proposal parsed."""
    return _json.loads(normalize_proposal(proposal_json))


def transaction_check_obj(proposal_json: Any, versions_json: Any = None, state_json: Any = None) -> Any:
    """``transaction_check``, the result parsed."""
    return _json.loads(transaction_check(proposal_json, versions_json, state_json))


def execute_obj(proposal_json: Any, tool_names: List[str], tool_fn: Any) -> Any:
    """``execute``, the ProposalResult parsed."""
    return _json.loads(execute(proposal_json, tool_names, tool_fn))


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
