//! The admission configuration document: one JSON (or TOML) document that
//! describes everything a runtime decides at admission and dispatch.
//!
//! ```json
//! {
//!   "tier": "sandbox_edit",
//!   "ledger_path": "/var/lib/car/tier-approvals.jsonl",
//!   "ledger_key_path": "/etc/car/ledger.key",
//!   "ledger_unauthenticated": false,
//!   "preset": "standard",
//!   "hooks": [{"tool": "fetch", "verdict": "ask"}],
//!   "deny": [{"tool": "shell", "argv": "rm **"}],
//!   "ask": [{"risk": "network"}],
//!   "can_use_tool": {"tool": "deploy", "verdict": "allow"},
//!   "shell": {"allow": ["git status"], "ask": ["git push **"], "deny": ["sudo **"]},
//!   "tools": [{"name": "deploy", "description": "...", "parameters": {}, "risk": "execute"}],
//!   "inspectors": {"egress_allowlist": ["api.example.com"], "repetition_limit": 3},
//!   "approval_timeout_ms": 300000,
//!   "approvals_dir": "/var/lib/car",
//!   "compensate_on_abort": true,
//!   "budget": {"max_actions": 100, "max_tool_calls": 50},
//!   "max_concurrency": 16,
//!   "retry_cap": 5,
//!   "retry_backoff_ms": 50,
//!   "breaker": {"max_consecutive_denials": 3, "max_window_denials": 5, "window_secs": 300},
//!   "sandbox": {"default": "workspace-write", "tools": {"shell": "read-only"}},
//!   "plan_mode": true,
//!   "on_ask": "suspend"
//! }
//! ```
//!
//! Every key is optional; an absent key leaves its layer unconfigured (and so
//! skipped). Unknown keys are errors naming the key. `engine` / `profile`
//! (two chain levels) may replace the flat chain keys, as in
//! `docs/permissions.md`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ir::CostBudget;
use crate::permission::{RuleSpec, StaticHook};
use crate::policy::PermissionTier;

/// The `[shell]` table: argv patterns for the `shell` tool's `command`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellTable {
    /// Commands every segment of which matches one of these are allowed,
    /// once the deny layer found nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Ask rules `{tool: "shell", argv: P}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<String>,
    /// Deny rules `{tool: "shell", argv: P}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Rules with examples (`[[shell.rule]]`: `table`, `pattern`, `match`,
    /// `not_match`): each example is checked when the document loads, and
    /// one that does not come out as its rule says fails the load, naming the
    /// rule and the example. The patterns join the lists above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rule: Vec<crate::permission::shell::ShellRuleSpec>,
}

impl ShellTable {
    fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.ask.is_empty() && self.deny.is_empty() && self.rule.is_empty()
    }

    /// `(allow, ask, deny)`: the lists with the rules' patterns added.
    pub fn lists(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        use crate::permission::shell::ShellTable as T;
        let (mut allow, mut ask, mut deny) = (self.allow.clone(), self.ask.clone(), self.deny.clone());
        for r in &self.rule {
            match r.table {
                T::Allow => allow.push(r.pattern.clone()),
                T::Ask => ask.push(r.pattern.clone()),
                T::Deny => deny.push(r.pattern.clone()),
            }
        }
        (allow, ask, deny)
    }

    /// Checks the rules' examples (`invalid_shell_rule_example` naming the
    /// rule and the example) and every pattern (`invalid_shell_pattern`).
    pub fn check(&self) -> crate::Result<()> {
        crate::permission::ShellRules::with_examples(&self.rule)?;
        let (allow, ask, deny) = self.lists();
        crate::permission::ShellRules::new(&allow, &ask, &deny).map(|_| ())
    }
}

/// Dispatch-time inspectors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectorsConfig {
    /// Hosts (and their subdomains) a call's `url` / `uri` / `endpoint` /
    /// `host` parameter may name; any other host is denied at dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_allowlist: Option<Vec<String>>,
    /// At most this many consecutive calls with the same tool and parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_limit: Option<usize>,
}

impl InspectorsConfig {
    /// True when no inspector is configured.
    pub fn is_empty(&self) -> bool {
        self.egress_allowlist.is_none() && self.repetition_limit.is_none()
    }
}

/// What a run does on an unanswered ask (`on_ask`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnAsk {
    /// Hold the action until the approval closes (the default).
    #[default]
    Wait,
    /// Suspend the proposal with a checkpoint (`crate::checkpoint`).
    Suspend,
}

/// The admission configuration document (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionConfig {
    /// The granted permission tier; setting it turns the tier layer on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<PermissionTier>,
    /// The approvals ledger (JSONL) consulted for tier escalations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_path: Option<String>,
    /// The key file authenticating the ledger's records (HMAC-SHA256, see
    /// `JsonlLedger::with_key`); without it the `CAR_LEDGER_KEY` variable,
    /// else the default key file (`approval::ledger::default_key_path`,
    /// created on first use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_key_path: Option<String>,
    /// Trust unsigned ledger lines: with no key file and no
    /// `CAR_LEDGER_KEY`, the ledger stays unkeyed and every well-formed line
    /// counts (ledgers written before records were signed). Whoever can
    /// write the file can then approve; the default (false) authenticates.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ledger_unauthenticated: bool,
    /// `strict`, `standard` or `open`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Declarative hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<StaticHook>,
    /// Deny rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<RuleSpec>,
    /// Ask rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<RuleSpec>,
    /// A declarative `can_use_tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub can_use_tool: Option<StaticHook>,
    /// `inherit_permissions` of the chain form (kept for the old shape).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inherit_permissions: bool,
    /// Two chain levels instead of the flat keys: `{engine, profile}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Value>,
    /// See `engine`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Value>,
    /// Shell argv rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellTable>,
    /// Tool definitions declaring `risk` / `needs_approval` (the built-in
    /// tools declare their own; any other tool is `undeclared`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Value>,
    /// Dispatch-time inspectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inspectors: Option<InspectorsConfig>,
    /// How long a live approver has to answer an ask (default five minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_ms: Option<u64>,
    /// Where the durable ask approvals live (`approvals.jsonl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals_dir: Option<String>,
    /// Run compensations when a proposal aborts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensate_on_abort: Option<bool>,
    /// A hard cost budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<CostBudget>,
    /// At most this many independent actions in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<usize>,
    /// Lets shell commands name the runtime's own files (`.car/`,
    /// `approvals.jsonl`). Off by default; only the operator sets it (it is
    /// refused over the wire).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_protected_writes: bool,
    /// At most this many retries of one action (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_cap: Option<u32>,
    /// The base of the retry backoff in milliseconds (default 10; 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff_ms: Option<u64>,
    /// The circuit breaker on repeated denials: after
    /// `max_consecutive_denials` (default 3) denials in a row, or
    /// `max_window_denials` (default 5) within `window_secs` (default 300),
    /// in one session, the rest of the proposal is refused (`breaker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<crate::gate::BreakerConfig>,
    /// Sandbox profiles and which tool runs under which (`docs/sandbox.md`).
    /// Only the operator sets it (it is refused over the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::sandbox::SandboxConfig>,
    /// Plan mode (`plan-apply-gate.md`): only the tools that read are
    /// offered and admitted (kind `data_source`, or risk `read`); a call of
    /// any other tool is refused by the `plan` layer. Off by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan_mode: bool,
    /// The environment the proposal's tools see (`crate::isolation`):
    /// `"none"` (default), `"readonly"` (a deny rule for tools declaring
    /// risk `write` or `destructive`), or `{kind = "worktree", ref?,
    /// keep_on_error?, max_kept?}` (a managed git worktree per proposal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<crate::isolation::Isolation>,
    /// What a run does on an ask nobody has answered yet: `"wait"` (the
    /// default) holds the action until the approval closes or its deadline
    /// denies it; `"suspend"` settles the proposal with status `suspended`
    /// and a checkpoint to resume by id (`docs/suspend.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_ask: Option<OnAsk>,
    /// MCP servers as tool sources (`docs/mcp.md`). Only the operator sets
    /// it (it starts programs; it is refused over the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<crate::mcp::McpConfig>,
}

impl AdmissionConfig {
    /// Reads the document from JSON text (`null` or empty text: nothing configured).
    pub fn from_json(text: &str) -> crate::Result<Self> {
        let t = text.trim();
        if t.is_empty() || t == "null" {
            return Ok(AdmissionConfig::default());
        }
        crate::ir::from_json_str(t).map_err(Self::named)
    }

    /// Reads the document from a JSON value.
    pub fn from_value(v: Value) -> crate::Result<Self> {
        if v.is_null() {
            return Ok(AdmissionConfig::default());
        }
        crate::ir::from_value(v).map_err(Self::named)
    }

    /// Reads the document from TOML text (`.car/permissions.toml`).
    /// Errors name the line and the key.
    pub fn from_toml(text: &str) -> crate::Result<Self> {
        toml::from_str(text).map_err(|e| {
            crate::Error::config(
                "invalid_admission_config",
                format!("invalid admission configuration: {}", e.to_string().trim()),
                serde_json::json!({}),
            )
        })
    }

    fn named(e: crate::Error) -> crate::Error {
        crate::Error::config(
            "invalid_admission_config",
            format!("invalid admission configuration: {e}"),
            serde_json::json!({}),
        )
    }

    /// The document as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// True when some permission-chain key (or a tool definition) is present.
    pub fn has_chain(&self) -> bool {
        self.preset.is_some()
            || !self.hooks.is_empty()
            || !self.deny.is_empty()
            || !self.ask.is_empty()
            || self.can_use_tool.is_some()
            || self.engine.is_some()
            || self.profile.is_some()
            || self.shell.as_ref().is_some_and(|s| !s.is_empty())
            // Readonly isolation compiles a deny rule.
            || self.isolation == Some(crate::isolation::Isolation::Readonly)
            // A tool declaring `needs_approval` changes the terminal default.
            || !self.tools.is_empty()
    }

    /// The chain part in the JSON shape `PermissionChain::from_json` reads,
    /// with the `[shell]` deny and ask patterns as argv rules.
    pub(crate) fn chain_json(&self) -> Value {
        if self.engine.is_some() || self.profile.is_some() {
            let mut m = serde_json::Map::new();
            if let Some(e) = &self.engine {
                m.insert("engine".into(), e.clone());
            }
            if let Some(p) = &self.profile {
                m.insert("profile".into(), p.clone());
            }
            return Value::Object(m);
        }
        let argv_rule = |p: &String| RuleSpec {
            tool: Some(crate::permission::OneOrMany::One(super::SHELL_TOOL.to_string())),
            argv: Some(p.clone()),
            ..RuleSpec::default()
        };
        let (_, shell_ask, shell_deny) = self.shell.clone().unwrap_or_default().lists();
        let mut deny: Vec<RuleSpec> = shell_deny.iter().map(argv_rule).collect();
        deny.extend(self.deny.iter().cloned());
        let mut ask: Vec<RuleSpec> = shell_ask.iter().map(argv_rule).collect();
        ask.extend(self.ask.iter().cloned());
        let mut m = serde_json::Map::new();
        if let Some(p) = &self.preset {
            m.insert("preset".into(), Value::String(p.clone()));
        }
        if !self.hooks.is_empty() {
            m.insert("hooks".into(), serde_json::to_value(&self.hooks).unwrap_or_default());
        }
        if !deny.is_empty() {
            m.insert("deny".into(), serde_json::to_value(&deny).unwrap_or_default());
        }
        if !ask.is_empty() {
            m.insert("ask".into(), serde_json::to_value(&ask).unwrap_or_default());
        }
        if let Some(c) = &self.can_use_tool {
            m.insert("can_use_tool".into(), serde_json::to_value(c).unwrap_or_default());
        }
        if self.inherit_permissions {
            m.insert("inherit_permissions".into(), Value::Bool(true));
        }
        Value::Object(m)
    }
}
