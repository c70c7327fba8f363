"""car-runtime: validate, verify, simulate, authorize and execute batches of
actions proposed by AI models (the Agent IR), in-process.

Every function forwards to the Rust crate's JSON facade. Arguments whose
name ends in ``_json`` accept JSON text or a plain dict/list.
"""

from ._native import (  # noqa: F401
    CarConfigError,
    CarRuntime,
    execute,
    register_tool_handler,
    unregister_tool_handler,
    CarError,
    CarInputError,
    CarNotFoundError,
    CarRuntimeError,
    TerminalToolError,
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
    simulate,
    toolset_hash,
    transaction_check,
    verify,
)

__version__ = client_version()

__all__ = [
    "CarConfigError",
    "CarRuntime",
    "execute",
    "register_tool_handler",
    "unregister_tool_handler",
    "CarError",
    "CarInputError",
    "CarNotFoundError",
    "CarRuntimeError",
    "TerminalToolError",
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
    "optimize",
    "permission_classify",
    "permission_evaluate",
    "protocol_version",
    "simulate",
    "toolset_hash",
    "transaction_check",
    "verify",
]
