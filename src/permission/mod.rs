//! Tool contracts, the layered permission chain, presets and shell command
//! matching (`tools-and-permissions.md`, `shell-matching.md`).
//!
//! Everything here is pure: no I/O, no clock, no async.

pub mod chain;
pub mod preset;
pub mod shell;
pub mod tool;

pub use chain::{
    Advisory, CanUseDecision, CanUseTool, CanUseToolFn, DecidedBy, FETCH_TOOL, Hook, HookDecision, HookFn, OneOrMany,
    PermissionChain, PermissionConfig, PermissionEvaluation, RiskClass, RuleSpec, StaticHook, canonical_host,
    evaluate_permission, host_ip, ip_host, is_subdomain, url_host,
};
pub use preset::{CompiledPreset, Preset, compile_permission_preset};
pub use shell::{ShellRules, match_shell_command};
pub use tool::{
    Executor, Risk, ToolDefinition, ToolKind, Toolset, is_valid_tool_name, toolset_hash, validate_tool_name,
};

use serde::{Deserialize, Serialize};

/// The three verdicts, ordered from least to most strict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The call is dispatched.
    Allow,
    /// The call waits for an approval.
    Ask,
    /// The call never executes.
    Deny,
}

impl Verdict {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}
