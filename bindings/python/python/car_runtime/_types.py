"""Typed shapes of the documents car_runtime returns and hands to tools, for
annotations (``TypedDict`` and ``Literal``). They are plain dicts at run time:
``json.loads`` of a JSON-text result, or what the ``*_obj`` methods return.

Fields the runtime omits when empty or default (``terminal``, ``rolled_back``,
``error``, ...) are optional keys.
"""

from typing import Any, Dict, List, Literal, Optional, TypedDict

ActionStatus = Literal["proposed", "validated", "rejected", "executing", "succeeded", "failed", "skipped"]
"""The status of an action in a ProposalResult."""

ActionType = Literal["tool_call", "state_write", "state_read", "assertion"]
FailureBehavior = Literal["abort", "retry", "skip"]
Reversibility = Literal["reversible", "compensable", "irreversible"]
InvocationMode = Literal["one_shot", "streaming", "long_running"]
Severity = Literal["error", "warning", "info"]
PermissionTier = Literal["read_only", "sandbox_edit", "full_access"]
Verdict = Literal["allow", "ask", "deny"]


class Precondition(TypedDict, total=False):
    key: str
    operator: Literal["eq", "neq", "gt", "lt", "gte", "lte", "exists", "not_exists", "contains"]
    value: Any
    description: str


class _ActionRequired(TypedDict):
    type: ActionType


class Action(_ActionRequired, total=False):
    """One action of an ActionProposal (the Agent IR)."""

    id: str
    tool: str
    parameters: Dict[str, Any]
    preconditions: List[Precondition]
    expected_effects: Dict[str, Any]
    state_dependencies: List[str]
    read_set: List[str]
    write_set: List[str]
    assumptions: List[Dict[str, Any]]
    invocation_mode: InvocationMode
    reversibility: Reversibility
    compensation: Dict[str, Any]
    idempotent: bool
    max_retries: int
    failure_behavior: FailureBehavior
    timeout_ms: int
    metadata: Dict[str, Any]


class _ProposalRequired(TypedDict):
    actions: List[Action]


class ActionProposal(_ProposalRequired, total=False):
    """A batch of actions proposed by a model."""

    id: str
    source: str
    timestamp: str
    context: Dict[str, Any]


class CostSummary(TypedDict, total=False):
    tool_calls: int
    actions_executed: int
    actions_rejected: int
    actions_skipped: int
    total_duration_ms: float
    retries: int


class _ActionResultRequired(TypedDict):
    action_id: str
    status: ActionStatus


class ActionResult(_ActionResultRequired, total=False):
    """The outcome of one action."""

    output: Any
    error: Optional[str]
    state_changes: Dict[str, Any]
    duration_ms: Optional[float]
    timestamp: str
    rolled_back: bool
    terminal: bool


class _ProposalResultRequired(TypedDict):
    proposal_id: str
    results: List[ActionResult]


class ProposalResult(_ProposalResultRequired, total=False):
    """What ``execute_proposal`` returns (parsed)."""

    cost: CostSummary
    artifacts: List[Dict[str, Any]]
    """Under worktree isolation: one ``{kind: "patch", base, files, bytes,
    patch?, truncated?, worktree?}``."""
    status: str
    """``"suspended"`` when the proposal suspended on an ask approval
    (``on_ask = "suspend"``); absent when it ran to its end."""
    suspension: Dict[str, Any]
    """Of a suspended proposal: ``{id, pending: [{action_id, tool,
    approval_key}], waiting}``; resume it with ``resume_proposal(id, tool_fn)``."""


class _ToolCallRequired(TypedDict):
    tool: str
    params: Dict[str, Any]
    action_id: str
    request_id: str
    timeout_ms: Optional[int]
    session_id: Optional[str]
    attempt: int


class ToolCall(_ToolCallRequired, total=False):
    """The call a one-argument tool function receives as JSON text
    (``json.loads`` it)."""

    cwd: str
    """Under worktree isolation: where to work, inside the tree."""
    isolation: Any
    """The proposal's declared isolation, when not ``"none"``."""


class _IssueRequired(TypedDict):
    severity: Severity
    message: str


class VerificationIssue(_IssueRequired, total=False):
    action_id: Optional[str]
    tier: Literal["decision_procedure", "heuristic", "sampled"]


class _VerificationRequired(TypedDict):
    valid: bool
    issues: List[VerificationIssue]


class VerificationResult(_VerificationRequired, total=False):
    """What ``verify`` / ``verify_proposal`` return (parsed)."""

    simulated_state: Dict[str, Any]
    execution_levels: List[List[str]]
    conflicts: List[Any]


class ToolSchema(TypedDict, total=False):
    name: str
    source: Literal["builtin", "user_defined", "subprocess", "mcp"]
    description: str
    parameters: Dict[str, Any]
    returns: Dict[str, Any]
    idempotent: bool
    cache_ttl_secs: int
    rate_limit: Dict[str, Any]


class PolicyInfo(TypedDict):
    name: str
    description: str


class EventQueryResult(TypedDict):
    count: int
    events: List[Dict[str, Any]]


__all__ = [
    "Action",
    "ActionProposal",
    "ActionResult",
    "ActionStatus",
    "ActionType",
    "CostSummary",
    "EventQueryResult",
    "FailureBehavior",
    "InvocationMode",
    "PermissionTier",
    "PolicyInfo",
    "Precondition",
    "ProposalResult",
    "Reversibility",
    "Severity",
    "ToolCall",
    "ToolSchema",
    "VerificationIssue",
    "VerificationResult",
    "Verdict",
]
