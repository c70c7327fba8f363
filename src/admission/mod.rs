//! The admission stage: the one place that decides whether an action runs.
//!
//! The engine asks this stage about every action it is about to run: the
//! actions of a proposal at admission, every attempt at dispatch, and every
//! compensation (by `tool` or by `action_ref`) before it runs. Front ends do
//! not decide; they build an [`AdmissionConfig`] and hand it over.
//!
//! Layers, in order (an unconfigured layer is skipped; the first refusal
//! wins; `docs/admission.md` has a worked example per layer):
//!
//! | # | layer | where | can yield |
//! |---|---|---|---|
//! | 1 | `validation` | engine | deny (duplicate ids, cycles, unknown dependencies) |
//! | 2 | `budget` | engine | deny (the whole proposal) |
//! | 3 | `tool` | engine | deny (unregistered tool, parameters invalid against its schema) |
//! | 4 | `policy` | engine ([`crate::policy::PolicyEngine`]) | deny |
//! | 5 | `tier` | this stage | deny (the whole proposal, as the daemon does) |
//! | 6 | `supervision` | this stage's supervisor (the daemon's supervisors) | deny (the whole proposal), after a park |
//! | 7 | `plan` (plan mode: only tools that read), `protected`, then the permission chain: `hook`, `deny-rule`, `shell-allow`, `ask-rule`, `can_use_tool`, `default`; an ask for a `data_source` or `interactive` tool is a deny (`downgraded_from_ask`) | this stage | allow, ask, deny |
//! | 8 | `session` | this stage: a `session`-scoped answer for the tool | an ask becomes allow; any non-deny becomes deny |
//! | 9 | `approval` | this stage | an ask becomes allow (approved), deny, or a hold |
//! | 10 | `host` | the engine's admission hook (a Rust host's own check) | allow, deny, hold |
//! | 11 | `breaker` | this stage: N consecutive denials (or M in a window) in a session | deny (the rest of the proposal) |
//! | 12 | `dispatch` | engine, at the action's turn | deny (preconditions, state dependencies) |
//! | 13 | `inspector` | this stage, every attempt | deny |
//! | 14 | `trace` | engine ([`crate::policy::PolicyEngine::check_dispatch`]), at the action's turn | deny |
//!
//! Every decision is an `AdmissionDecided` event (verdict, layer, rule,
//! required and granted tier; never parameter values). A refusal from any
//! layer is a `rejected` result counted in `actions_rejected`.

mod config;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{Value, json};

pub use config::{AdmissionConfig, InspectorsConfig, OnAsk, ShellTable};

use crate::gate::{
    ApprovalDecision, ApprovalStore, BreakerConfig, CircuitBreaker, DEFAULT_APPROVAL_TIMEOUT_MS, Ticket, input_digest,
};
use crate::ir::{Action, ActionType, CostBudget};
use crate::permission::{CanUseToolFn, HookFn, PermissionChain, PermissionConfig, ShellRules, ToolDefinition, Verdict};
use crate::policy::{InspectorChain, JsonlLedger, PermissionGate, PermissionTier};
use crate::{Error, Result};

/// The tool the `[shell]` table governs.
pub const SHELL_TOOL: &str = "shell";

/// The layer names that appear in decisions, events and the conformance corpus.
pub mod layer {
    /// Duplicate ids, cycles, unknown dependencies.
    pub const VALIDATION: &str = "validation";
    /// The cost budget.
    pub const BUDGET: &str = "budget";
    /// An unregistered tool or parameters invalid against its schema.
    pub const TOOL: &str = "tool";
    /// A registered policy or a policy file rule.
    pub const POLICY: &str = "policy";
    /// The permission tier and its approvals ledger.
    pub const TIER: &str = "tier";
    /// An ask approval.
    pub const APPROVAL: &str = "approval";
    /// The engine's host admission hook (supervision, a host check).
    pub const HOST: &str = "host";
    /// Preconditions and state dependencies at dispatch.
    pub const DISPATCH: &str = "dispatch";
    /// A dispatch-time inspector.
    pub const INSPECTOR: &str = "inspector";
    /// A trace rule at dispatch.
    pub const TRACE: &str = "trace";
    /// A shell command naming the runtime's own files (`.car/`, `approvals.jsonl`, `tier-approvals.jsonl`).
    pub const PROTECTED: &str = "protected";
    /// Nothing refused the action (no layer decided anything).
    pub const NONE: &str = "none";
    /// A supervisor's verdict on the whole proposal.
    pub const SUPERVISION: &str = "supervision";
    /// A `session`-scoped answer recorded for the tool.
    pub const SESSION: &str = "session";
    /// The circuit breaker on repeated denials.
    pub const BREAKER: &str = "breaker";
    /// Plan mode: a tool that does not only read.
    pub const PLAN: &str = "plan";

    /// True for a layer that refuses by decision (a rule, a tier, a person,
    /// a supervisor), not because the action itself is malformed or its
    /// conditions do not hold (`validation`, `budget`, `tool`, `dispatch`).
    pub fn is_deciding(layer: &str) -> bool {
        !matches!(layer, VALIDATION | BUDGET | TOOL | DISPATCH | NONE | "")
    }
}

/// One admission decision, as recorded in the event log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// `allow`, `ask` or `deny`.
    pub verdict: Verdict,
    /// The deciding layer (see [`layer`] and the chain's `decided_by`).
    pub layer: &'static str,
    /// The matched rule, when a rule decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<Value>,
    /// Why, in words.
    pub reason: String,
    /// The tier the action requires (when the tier layer is on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_tier: Option<PermissionTier>,
    /// The granted tier (when the tier layer is on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub granted_tier: Option<PermissionTier>,
    /// True when the chain's ask was turned into this deny because the
    /// tool is a `data_source` or `interactive` tool (`plan-apply-gate.md`:
    /// ask is not a meaningful decision for either).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub downgraded_from_ask: bool,
    /// The input a hook or `can_use_tool` substituted: what later layers
    /// checked and what the tool receives. Never recorded.
    #[serde(skip)]
    pub substituted: Option<serde_json::Map<String, Value>>,
}

impl Decision {
    /// A decision by `layer`.
    pub fn new(verdict: Verdict, layer: &'static str, reason: impl Into<String>) -> Self {
        Decision {
            verdict,
            layer,
            rule: None,
            reason: reason.into(),
            required_tier: None,
            granted_tier: None,
            downgraded_from_ask: false,
            substituted: None,
        }
    }

    /// A denial by `layer`.
    pub fn deny(layer: &'static str, reason: impl Into<String>) -> Self {
        Decision::new(Verdict::Deny, layer, reason)
    }

    /// The event data (`stage` says where: admission, approval, dispatch,
    /// compensation), rendered only when the event is read.
    pub fn event_data(&self, tool: Option<&str>, stage: &'static str) -> crate::events::EventData {
        crate::events::EventData::Admission(Box::new(crate::events::AdmissionData {
            verdict: self.verdict.as_str(),
            layer: self.layer,
            rule: self.rule.clone(),
            reason: self.reason.clone(),
            required_tier: self.required_tier.map(PermissionTier::as_str),
            granted_tier: self.granted_tier.map(PermissionTier::as_str),
            tool: tool.map(str::to_string),
            stage,
            downgraded_from_ask: self.downgraded_from_ask,
        }))
    }
}

#[cfg(test)]
thread_local! {
    /// Stages built on this thread ([`AdmissionStage::build`]).
    static BUILDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Stages built on this thread so far (tests count a host's rebuilds).
#[cfg(test)]
pub(crate) fn builds_on_this_thread() -> usize {
    BUILDS.with(std::cell::Cell::get)
}

/// What the stage decides for one action at admission.
pub enum StageVerdict {
    /// Admitted (the decision that admitted it; `None` when no layer of
    /// this stage had anything to say).
    Admit(Option<Decision>),
    /// Refused.
    Refuse(Decision),
    /// An ask waiting for a live approver (see [`Held`]).
    Hold(Decision, Held),
}

/// An action held for an approval.
pub struct Held {
    /// Waits for the decision: settles with `None` (approved) or the
    /// refusal reason.
    pub wait: BoxFuture<'static, Option<String>>,
    /// Instead of waiting (a proposal run to suspend on an ask): asks once
    /// and settles with the decision if it is already made, else with the
    /// key of the pending approval to suspend on. `None`: this hold cannot
    /// suspend and is waited for.
    pub park: Option<BoxFuture<'static, Parked>>,
}

/// What [`Held::park`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parked {
    /// Already decided: `None` approved (the approval is used up), else the
    /// refusal reason.
    Decided(Option<String>),
    /// Still pending: the approval's key.
    Pending(String),
}

impl Held {
    /// A hold that can only be waited for.
    pub fn waiting(wait: BoxFuture<'static, Option<String>>) -> Self {
        Held { wait, park: None }
    }
}

impl std::fmt::Debug for StageVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StageVerdict::Admit(d) => f.debug_tuple("Admit").field(d).finish(),
            StageVerdict::Refuse(d) => f.debug_tuple("Refuse").field(d).finish(),
            StageVerdict::Hold(d, _) => f.debug_tuple("Hold").field(d).finish(),
        }
    }
}

/// The stage's verdict before approvals are consulted (see
/// [`AdmissionStage::preview`]).
enum Judged {
    Admit(Option<Decision>),
    Refuse(Decision),
    /// An ask, with the input an approval is keyed by.
    Ask(Decision, Value),
}

/// A supervisor of whole proposals (the `supervision` layer): given the
/// proposal and its policy session, settles with `None` to let it run or the
/// reason it is refused. It may park the proposal while a person decides; it
/// must settle by its own deadline.
pub type SupervisorFn =
    Arc<dyn Fn(&crate::ir::ActionProposal, Option<&str>) -> BoxFuture<'static, Option<String>> + Send + Sync>;

/// What a runtime remembers for the rest of a session: the answers decided
/// with scope `session` and the circuit breaker's counts. Shared by every
/// stage a runtime builds, so a reconfiguration does not forget them.
#[derive(Debug, Default)]
pub struct SessionState {
    /// `(session, tool)` -> (allow, reason).
    answers: std::sync::Mutex<HashMap<(String, String), (bool, String)>>,
    /// The breaker of each session.
    breakers: std::sync::Mutex<HashMap<String, CircuitBreaker>>,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SessionState {
    /// Remembers a `session`-scoped answer for every later call of `tool` in
    /// `session` (`plan-apply-gate.md`, PlanDecisionScope: the same
    /// operation, whatever its input). An allow answers asks only; a deny
    /// refuses every later call the chain does not deny itself.
    pub fn remember(&self, session: Option<&str>, tool: &str, allow: bool, reason: &str) {
        lock(&self.answers).insert((session.unwrap_or_default().to_string(), tool.to_string()), (allow, reason.into()));
    }

    /// The `session`-scoped answer for `tool` in `session`, if any.
    pub fn answer(&self, session: Option<&str>, tool: &str) -> Option<(bool, String)> {
        let answers = lock(&self.answers);
        if answers.is_empty() {
            return None;
        }
        answers.get(&(session.unwrap_or_default().to_string(), tool.to_string())).cloned()
    }

    /// Forgets the answers and breaker counts of `session`.
    pub fn forget(&self, session: Option<&str>) {
        let s = session.unwrap_or_default();
        lock(&self.answers).retain(|(k, _), _| k != s);
        lock(&self.breakers).remove(s);
    }
}

/// Host parts that take part in admission (bindings and the daemon register
/// them; they are not part of the document and survive its replacement).
#[derive(Clone, Default)]
pub struct HostLayers {
    /// Hooks run after the document's declarative hooks.
    pub hooks: Vec<HookFn>,
    /// The `can_use_tool` slot (wins over the document's).
    pub can_use_tool: Option<CanUseToolFn>,
    /// The supervisor of whole proposals.
    pub supervisor: Option<SupervisorFn>,
    /// Tier approvals recorded by this reviewer do not count (a daemon
    /// connection may not approve its own escalation).
    pub discounted_reviewer: Option<String>,
    /// Session answers and breaker counts.
    pub session: Arc<SessionState>,
    /// The tier layer's approvals ledger when the document names none (a
    /// daemon shares one across its connections). Part of every stage built
    /// while it is attached, so no reconfiguration runs without it.
    pub tier_ledger: Option<crate::store::ledger::TierLedger>,
    /// A shared approvals backend (a daemon's `--store postgres://...`):
    /// when set and the document names no `approvals_dir`, the `approval`
    /// layer asks and waits through it, so an approval granted on any host
    /// of the store applies here.
    pub shared_approvals: Option<SharedApprovals>,
}

/// An approvals backend shared beyond this process, and the directory of
/// the `always` rules that answer its asks.
#[derive(Clone)]
pub struct SharedApprovals {
    /// The backend (request, wait, resolve).
    pub backend: Arc<dyn crate::store::ApprovalBackend>,
    /// The directory whose `always` rules file answers asks before the
    /// backend is asked.
    pub rules_dir: std::path::PathBuf,
}

impl std::fmt::Debug for SharedApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedApprovals").field("rules_dir", &self.rules_dir).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for HostLayers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostLayers")
            .field("hooks", &self.hooks.len())
            .field("can_use_tool", &self.can_use_tool.is_some())
            .field("supervisor", &self.supervisor.is_some())
            .field("discounted_reviewer", &self.discounted_reviewer)
            .field("tier_ledger", &self.tier_ledger.as_ref().map(|l| l.path().to_path_buf()))
            .field("shared_approvals", &self.shared_approvals)
            .finish()
    }
}

/// The composed admission stage of one runtime. Immutable once built; a
/// runtime swaps in a new one when its configuration changes.
pub struct AdmissionStage {
    config: AdmissionConfig,
    tier: Option<PermissionTier>,
    ledger: Option<crate::store::ledger::TierLedger>,
    chain: Option<PermissionChain>,
    defs: HashMap<String, ToolDefinition>,
    approvals: Option<Arc<ApprovalStore>>,
    /// Asks go through this backend instead of `approvals` (see
    /// [`HostLayers::shared_approvals`]).
    shared_approvals: Option<SharedApprovals>,
    approval_timeout: chrono::Duration,
    inspectors: Option<InspectorChain>,
    /// `inspectors.egress_allowlist`, read once (the inspector and the
    /// first-party fetch tool share it).
    egress: Option<crate::policy::inspectors::EgressAllowlist>,
    breaker: Option<BreakerConfig>,
    /// The tools of kind `interactive` (run one at a time).
    interactive: std::collections::HashSet<String>,
    supervisor: Option<SupervisorFn>,
    discounted_reviewer: Option<String>,
    session: Arc<SessionState>,
    /// File names protected beside the fixed ones: the tier ledger's and
    /// its key file's (whatever they are called, wherever they lie).
    protected_names: Vec<String>,
}

impl std::fmt::Debug for AdmissionStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionStage").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Default for AdmissionStage {
    fn default() -> Self {
        AdmissionStage::empty()
    }
}

/// The word of a shell command that names one of the runtime's own files
/// (`.car/`, the approvals files): read by the shell lexer (quotes, escapes,
/// redirection targets, substitutions, nested scripts, globs; see
/// `permission::shell::protected_word`), and by a plain split of the text
/// at blanks, quotes, `=` and the shell's operators as well, which can only
/// find more. A command that only reads them is refused too (fail closed:
/// the matcher cannot tell a read from a write).
fn names_protected_path(cmd: &str, extra: &[String]) -> Option<String> {
    let with_extra: Vec<&str>;
    let names = if extra.is_empty() {
        fixed_protected_names()
    } else {
        with_extra = fixed_protected_names().iter().copied().chain(extra.iter().map(String::as_str)).collect();
        &with_extra[..]
    };
    if let Some(w) = crate::permission::shell::protected_word(cmd, names) {
        return Some(w);
    }
    let is_sep = |c: char| c.is_whitespace() || "'\"`=;&|<>(){}$,".contains(c);
    cmd.split(is_sep).filter(|w| !w.is_empty()).find(|w| names_a_part(w, names)).map(str::to_string)
}

/// The names protected wherever they lie: `.car` and the runtime's own files.
fn fixed_protected_names() -> &'static [&'static str] {
    static NAMES: std::sync::LazyLock<Vec<&str>> = std::sync::LazyLock::new(|| {
        std::iter::once(crate::tools::CONFIG_DIR).chain(crate::tools::PROTECTED_FILE_NAMES.iter().copied()).collect()
    });
    &NAMES
}

/// True when a component of `path` (split at `/` and `\`) is one of
/// `names`, ASCII case-insensitively.
fn names_a_part<S: AsRef<str>>(path: &str, names: &[S]) -> bool {
    path.split(['/', '\\']).any(|part| names.iter().any(|n| part.eq_ignore_ascii_case(n.as_ref())))
}

/// The built-in tools that take a file `path` (their schemas say so),
/// checked against the tier ledger's and its key's names by the
/// `protected` layer.
fn is_file_tool(tool: &str) -> bool {
    static FILE_TOOLS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        crate::tools::builtin_tools()
            .into_iter()
            .filter(|t| t.schema.parameters.pointer("/properties/path").is_some())
            .map(|t| t.schema.name)
            .collect()
    });
    FILE_TOOLS.iter().any(|t| t == tool)
}

/// The file names of the tier ledger and its key, when they are not among
/// the names protected anyway.
fn protected_names_of(ledger: Option<&Path>, key: Option<&str>) -> Vec<String> {
    [ledger, key.map(Path::new)]
        .into_iter()
        .flatten()
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_string))
        .filter(|n| !n.is_empty() && !names_a_part(n, fixed_protected_names()))
        .collect()
}

/// The chain's view of the built-in tools: their declared risk. Made once
/// a process (they are fixed; every stage a daemon builds for a connection
/// starts from them).
fn builtin_definitions() -> HashMap<String, ToolDefinition> {
    static DEFINITIONS: std::sync::LazyLock<HashMap<String, ToolDefinition>> = std::sync::LazyLock::new(|| {
        crate::tools::builtin_tools()
            .into_iter()
            .filter_map(|t| {
                let def = ToolDefinition::from_value(json!({
                    "name": t.schema.name, "description": t.schema.description,
                    "parameters": t.schema.parameters, "risk": t.risk,
                }))
                .ok()?;
                Some((def.name.clone(), def))
            })
            .collect()
    });
    DEFINITIONS.clone()
}

impl AdmissionStage {
    /// Nothing configured: every layer of this stage is skipped.
    pub fn empty() -> Self {
        AdmissionStage {
            config: AdmissionConfig::default(),
            tier: None,
            ledger: None,
            chain: None,
            defs: HashMap::new(),
            approvals: None,
            shared_approvals: None,
            approval_timeout: chrono::Duration::milliseconds(DEFAULT_APPROVAL_TIMEOUT_MS as i64),
            inspectors: None,
            egress: None,
            breaker: None,
            interactive: std::collections::HashSet::new(),
            supervisor: None,
            discounted_reviewer: None,
            session: Arc::new(SessionState::default()),
            protected_names: Vec::new(),
        }
    }

    /// Builds the stage from its document, the host's closures and an
    /// already-open approvals store (else one is opened at
    /// `config.approvals_dir`). Any error leaves nothing built.
    pub fn build(config: AdmissionConfig, host: &HostLayers, approvals: Option<Arc<ApprovalStore>>) -> Result<Self> {
        #[cfg(test)]
        BUILDS.with(|b| b.set(b.get() + 1));
        let mut defs = builtin_definitions();
        for t in &config.tools {
            let def = ToolDefinition::from_value(t.clone())?;
            defs.insert(def.name.clone(), def);
        }
        if let Some(sb) = &config.sandbox {
            sb.check()?;
        }
        for def in defs.values() {
            if def.executor == crate::permission::Executor::Subprocess {
                config.sandbox.clone().unwrap_or_default().for_tool(&def.name, def.sandbox.as_deref())?;
            }
        }
        let approval_timeout_ms = match config.approval_timeout_ms {
            None => DEFAULT_APPROVAL_TIMEOUT_MS,
            Some(0) => {
                return Err(Error::invalid_argument(
                    "approval_timeout_ms",
                    "must be a whole number of milliseconds >= 1, got 0",
                ));
            }
            Some(ms) => ms,
        };
        let host_configured = !host.hooks.is_empty() || host.can_use_tool.is_some();
        let chain = if config.has_chain() || host_configured {
            let json = config.chain_json();
            let mut chain = if json.get("engine").is_some() || json.get("profile").is_some() {
                if host_configured {
                    return Err(Error::invalid_argument(
                        "engine",
                        "host hooks and can_use_tool need the flat chain form, not `engine`/`profile`",
                    ));
                }
                PermissionChain::from_json(&json)?
            } else {
                let mut pc = PermissionConfig::from_value(json)?;
                for h in &host.hooks {
                    pc.hooks.push(crate::permission::Hook::Closure(h.clone()));
                }
                if let Some(c) = &host.can_use_tool {
                    pc.can_use_tool = Some(crate::permission::CanUseTool::Closure(c.clone()));
                }
                PermissionChain::from_config(&pc)?
            };
            if config.isolation == Some(crate::isolation::Isolation::Readonly) {
                chain = chain.with_readonly_isolation();
            }
            if let Some(shell) = &config.shell {
                shell.check()?;
                let (allow, ask, deny) = shell.lists();
                if !allow.is_empty() {
                    chain = chain.with_shell_allow(SHELL_TOOL, ShellRules::new(&allow, &ask, &deny)?);
                }
            }
            Some(chain)
        } else {
            None
        };
        if let Some(c) = config.max_concurrency
            && c == 0
        {
            return Err(Error::invalid_argument("max_concurrency", "must be at least 1"));
        }
        let egress = match config.inspectors.as_ref().and_then(|i| i.egress_allowlist.as_deref()) {
            Some(hosts) => Some(crate::policy::inspectors::EgressAllowlist::new(hosts)?),
            None => None,
        };
        let inspectors = match &config.inspectors {
            Some(i) if !i.is_empty() => {
                let mut chain = InspectorChain::new();
                if let Some(list) = &egress {
                    chain.push_fn("egress_allowlist", crate::policy::inspectors::egress_allowlist(list.clone()));
                }
                if let Some(n) = i.repetition_limit {
                    chain.push_fn("repetition_limit", crate::policy::inspectors::repetition_limit(n));
                }
                Some(chain)
            }
            _ => None,
        };
        // The document's own `approvals_dir` wins over a host's shared backend.
        let shared_approvals = host.shared_approvals.clone().filter(|_| config.approvals_dir.is_none());
        let approvals = match (approvals, &config.approvals_dir) {
            (Some(s), _) => Some(s),
            (None, Some(dir)) => Some(Arc::new(ApprovalStore::open(dir)?)),
            (None, None) => None,
        };
        let unsigned = config.ledger_unauthenticated || crate::approval::ledger::unauthenticated_from_env();
        let ledger = match (&config.ledger_path, &config.ledger_key_path) {
            (Some(p), key) => {
                Some(Arc::new(JsonlLedger::open_with(Path::new(p), key.as_deref().map(Path::new), unsigned)?).into())
            }
            (None, Some(_)) => {
                return Err(crate::Error::config(
                    "invalid_admission_config",
                    "`ledger_key_path` is set without `ledger_path`",
                    serde_json::json!({"key": "ledger_key_path"}),
                ));
            }
            (None, None) if config.ledger_unauthenticated => {
                return Err(crate::Error::config(
                    "invalid_admission_config",
                    "`ledger_unauthenticated` is set without `ledger_path`",
                    serde_json::json!({"key": "ledger_unauthenticated"}),
                ));
            }
            (None, None) => host.tier_ledger.clone(),
        };
        let interactive = defs
            .values()
            .filter(|d| d.kind == crate::permission::ToolKind::Interactive)
            .map(|d| d.name.clone())
            .collect();
        let protected_names = protected_names_of(ledger.as_ref().map(|l| l.path()), config.ledger_key_path.as_deref());
        Ok(AdmissionStage {
            protected_names,
            tier: config.tier,
            ledger,
            chain,
            defs,
            approvals,
            shared_approvals,
            approval_timeout: chrono::Duration::milliseconds(i64::try_from(approval_timeout_ms).unwrap_or(i64::MAX)),
            inspectors,
            egress,
            breaker: config.breaker,
            interactive,
            supervisor: host.supervisor.clone(),
            discounted_reviewer: host.discounted_reviewer.clone(),
            session: host.session.clone(),
            config,
        })
    }

    /// The same stage with another granted tier (the ledger and store kept).
    pub fn with_tier(&self, tier: Option<PermissionTier>) -> Self {
        let mut config = self.config.clone();
        config.tier = tier;
        AdmissionStage {
            config,
            tier,
            ledger: self.ledger.clone(),
            chain: self.chain.clone(),
            defs: self.defs.clone(),
            approvals: self.approvals.clone(),
            shared_approvals: self.shared_approvals.clone(),
            approval_timeout: self.approval_timeout,
            inspectors: self.inspectors.clone(),
            egress: self.egress.clone(),
            breaker: self.breaker,
            interactive: self.interactive.clone(),
            supervisor: self.supervisor.clone(),
            discounted_reviewer: self.discounted_reviewer.clone(),
            session: self.session.clone(),
            protected_names: self.protected_names.clone(),
        }
    }

    /// The document this stage was built from.
    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    /// The granted tier, when the tier layer is on.
    pub fn tier(&self) -> Option<PermissionTier> {
        self.tier
    }

    /// The tier layer's approvals ledger, when one is attached.
    pub fn ledger(&self) -> Option<&crate::store::ledger::TierLedger> {
        self.ledger.as_ref()
    }

    /// Brings a shared tier ledger up to date before a proposal is decided
    /// (nothing for a file or no ledger). A store that cannot be read is
    /// remembered: the tier layer refuses until a refresh succeeds.
    pub async fn refresh_ledger(&self) {
        if let Some(l) = &self.ledger {
            let _ = l.refresh().await;
        }
    }

    /// The approvals store of the `approval` layer.
    pub fn approvals(&self) -> Option<&Arc<ApprovalStore>> {
        self.approvals.as_ref()
    }

    /// How long an approval is waited for (`approval_timeout_ms`).
    pub fn approval_timeout(&self) -> chrono::Duration {
        self.approval_timeout
    }

    /// True when no layer of this stage is configured (admission costs
    /// nothing beyond the engine's own checks).
    pub fn is_empty(&self) -> bool {
        self.tier.is_none()
            && self.chain.is_none()
            && self.inspectors.is_none()
            && self.breaker.is_none()
            && self.supervisor.is_none()
            && !self.config.plan_mode
    }

    /// True when plan mode is on (`plan_mode`).
    pub fn plan_mode(&self) -> bool {
        self.config.plan_mode
    }

    /// The `plan` layer: in plan mode, a call of `tool` is refused unless
    /// the tool only reads: kind `data_source`, or risk `read` and not
    /// `interactive` (an MCP tool declares no kind; its `readOnlyHint` or
    /// the server's `risk` map makes it `read`). An undeclared tool is
    /// refused (fail closed). `None` when plan mode is off or the tool reads.
    pub fn plan_refusal(&self, tool: &str) -> Option<Decision> {
        if !self.config.plan_mode {
            return None;
        }
        let (kind, risk) = match self.defs.get(tool) {
            Some(d) => (d.kind, d.risk),
            None => (crate::permission::ToolKind::Resource, None),
        };
        let reads = kind == crate::permission::ToolKind::DataSource
            || (kind == crate::permission::ToolKind::Resource && risk == Some(crate::permission::Risk::Read));
        if reads {
            return None;
        }
        let what = match (kind, risk) {
            (crate::permission::ToolKind::Interactive, _) => "an interactive tool".to_string(),
            (_, Some(r)) => format!("a tool of risk `{}`", r.as_str()),
            (_, None) => "an undeclared tool".to_string(),
        };
        let mut d = Decision::deny(
            layer::PLAN,
            format!(
                "tool `{tool}` is removed by plan mode: it is {what}, and only tools that read (kind `data_source` or risk `read`) are offered"
            ),
        );
        d.rule = Some(json!({"plan_mode": true}));
        Some(d)
    }

    /// True when the tool list offered to a model includes `tool`: plan
    /// mode does not remove it ([`AdmissionStage::plan_refusal`]).
    pub fn offers(&self, tool: &str) -> bool {
        self.plan_refusal(tool).is_none()
    }

    /// True for a tool declared `kind: "interactive"`: the engine runs such
    /// calls one at a time.
    pub fn is_interactive(&self, tool: &str) -> bool {
        !self.interactive.is_empty() && self.interactive.contains(tool)
    }

    /// The supervisor of whole proposals, when one is attached.
    pub fn supervisor(&self) -> Option<&SupervisorFn> {
        self.supervisor.as_ref()
    }

    /// The reviewer whose tier approvals do not count, when one is set.
    #[cfg(test)]
    pub(crate) fn discounted_reviewer(&self) -> Option<&str> {
        self.discounted_reviewer.as_deref()
    }

    /// The session answers and breaker counts this stage shares.
    pub fn session_state(&self) -> &Arc<SessionState> {
        &self.session
    }

    /// The breaker layer for the decisions of one proposal, in action
    /// order (`refused[i]`: `Some(true)` for an action a deciding layer
    /// refused, `Some(false)` for one admitted so far, `None` for one refused
    /// because it is malformed or its conditions fail, which is no denial
    /// and neither counts nor resets the breaker): the admitted actions after
    /// the denial that trips the breaker get its refusal. The
    /// counts persist across the session's proposals; each proposal is a new
    /// turn (the breaker re-closes, and one more denial trips it again while
    /// the counts are over the thresholds). Empty when the layer is off.
    pub fn breaker_decisions(&self, session: Option<&str>, refused: &[Option<bool>]) -> Vec<Option<Decision>> {
        let Some(config) = self.breaker else {
            return Vec::new();
        };
        let mut breakers = lock(&self.session.breakers);
        let b = breakers.entry(session.unwrap_or_default().to_string()).or_insert_with(|| CircuitBreaker::new(config));
        b.config = config;
        b.begin_turn();
        let now = chrono::Utc::now();
        refused
            .iter()
            .map(|&r| {
                if r != Some(false) {
                    if r == Some(true) {
                        b.record_denial(now);
                    }
                    None
                } else if let Some(trip) = &b.tripped {
                    let mut d = Decision::deny(layer::BREAKER, trip.message.clone());
                    d.rule = Some(json!({"condition": trip.condition, "denials": trip.denials}));
                    Some(d)
                } else {
                    b.record_allow();
                    None
                }
            })
            .collect()
    }

    /// True when a dispatch-time layer of this stage is configured.
    pub fn has_dispatch_layers(&self) -> bool {
        self.inspectors.is_some()
    }

    /// `compensate_on_abort` of the document, when given.
    pub fn compensate_on_abort(&self) -> Option<bool> {
        self.config.compensate_on_abort
    }

    /// The budget of the document, when given.
    pub fn budget(&self) -> Option<&CostBudget> {
        self.config.budget.as_ref()
    }

    /// `max_concurrency` of the document, when given.
    pub fn max_concurrency(&self) -> Option<usize> {
        self.config.max_concurrency
    }

    /// `retry_cap` of the document, when given.
    pub fn retry_cap(&self) -> Option<u32> {
        self.config.retry_cap
    }

    /// `retry_backoff_ms` of the document, when given.
    pub fn retry_backoff_ms(&self) -> Option<u64> {
        self.config.retry_backoff_ms
    }

    /// The chain's view of a tool: its definition, else undeclared.
    pub fn definition(&self, tool: &str) -> ToolDefinition {
        self.defs.get(tool).cloned().unwrap_or_else(|| ToolDefinition::undeclared(tool))
    }

    /// The tier layer for a whole proposal: one entry per action, `Some`
    /// with the refusal when the proposal is refused (every action then
    /// carries it, as the daemon refuses an escalated proposal as a whole),
    /// else the per-action allow decisions. Empty when the layer is off. A
    /// ledger that cannot be read refuses (fail closed).
    pub fn tier_decisions(&self, actions: &[Action]) -> Vec<(bool, Decision)> {
        let Some(granted) = self.tier else {
            return Vec::new();
        };
        let latest = match &self.ledger {
            Some(l) => match l.latest_shared() {
                Ok(latest) => latest,
                Err(e) => {
                    let reason = format!("refused: the approvals ledger cannot be read: {e}");
                    return actions
                        .iter()
                        .map(|_| {
                            let mut d = Decision::deny(layer::TIER, reason.clone());
                            d.granted_tier = Some(granted);
                            (true, d)
                        })
                        .collect();
                }
            },
            None => Default::default(),
        };
        // A reviewer's own approvals do not count for it (self-approval).
        let mut discounted = false;
        let latest = match &self.discounted_reviewer {
            Some(me)
                if latest
                    .values()
                    .any(|r| r.decision == crate::policy::ApprovalVerdict::Approved && &r.reviewer == me) =>
            {
                let mut kept = (*latest).clone();
                kept.retain(|_, r| !(r.decision == crate::policy::ApprovalVerdict::Approved && &r.reviewer == me));
                discounted = true;
                Arc::new(kept)
            }
            _ => latest,
        };
        let gate = PermissionGate::new();
        // The common case first: every action within the tier and none
        // needing an approval, with no per-action ledger lookup when the
        // ledger is empty. Otherwise the gate decides (and words) it.
        let required: Vec<PermissionTier> = actions.iter().map(|a| gate.required_tier(a)).collect();
        let clear = required.iter().zip(actions).all(|(r, a)| {
            let record = if latest.is_empty() { None } else { latest.get(&crate::policy::fingerprint(a)) };
            match record {
                Some(r) => r.decision == crate::policy::ApprovalVerdict::Approved,
                None => *r != PermissionTier::FullAccess && *r <= granted,
            }
        });
        let refusal = if clear {
            None
        } else {
            PermissionGate::tier_refusal_of(gate.evaluate_with(actions, granted, &latest), granted).map(|r| {
                if discounted {
                    format!(
                        "{r} (an approval by this connection does not count for its own proposal: self-approval is off)"
                    )
                } else {
                    r
                }
            })
        };
        required
            .into_iter()
            .map(|req| {
                let mut d = match &refusal {
                    Some(r) => Decision::deny(layer::TIER, r.clone()),
                    None => Decision::new(Verdict::Allow, layer::TIER, "within the granted tier"),
                };
                d.required_tier = Some(req);
                d.granted_tier = Some(granted);
                (refusal.is_some(), d)
            })
            .collect()
    }

    /// What the stage would decide for one action of policy session
    /// `session` now, without consulting or recording approvals (the plan a
    /// host shows before anything runs): the same evaluation as
    /// [`AdmissionStage::decide`] (protected paths, session answers, the
    /// chain, substitution, the precheck's ask-to-deny), with an `ask` left
    /// as `ask`. Returns the decision and the input an approval would be
    /// keyed by; `None` when no layer of the stage judges the action (not a
    /// `tool_call`, or nothing configured that applies).
    pub fn preview(&self, a: &Action, session: Option<&str>) -> Option<(Decision, Value)> {
        match self.judge(a, session) {
            Judged::Admit(None) => None,
            Judged::Admit(Some(d)) | Judged::Refuse(d) => {
                let input = d.substituted.clone().unwrap_or_else(|| a.parameters.to_map());
                Some((d, Value::Object(input)))
            }
            Judged::Ask(d, input) => Some((d, input)),
        }
    }

    /// The `protected` layer alone: a `shell` call whose command names one
    /// of the runtime's own files is refused unless the operator allows it,
    /// and so is a built-in file tool's `path` naming the tier ledger or its
    /// key file (the fixed names the tools refuse themselves). The engine
    /// asks it even when nothing else is configured.
    pub fn protected(&self, a: &Action) -> Option<Decision> {
        if a.action_type != ActionType::ToolCall || self.config.allow_protected_writes {
            return None;
        }
        let tool = a.tool.as_deref()?;
        if tool != SHELL_TOOL {
            if self.protected_names.is_empty() || !is_file_tool(tool) {
                return None;
            }
            let path = a.parameters.get("path").and_then(Value::as_str)?;
            return names_a_part(path, &self.protected_names).then(|| {
                Decision::deny(
                    layer::PROTECTED,
                    format!(
                        "`{tool}` names `{path}`, the approvals ledger or its key; only the operator may allow that (`allow_protected_writes`)"
                    ),
                )
            });
        }
        let word = names_protected_path(a.parameters.get("command").and_then(Value::as_str)?, &self.protected_names)?;
        Some(Decision::deny(
            layer::PROTECTED,
            format!(
                "the shell command names `{word}`, one of the runtime's own files (configuration, policies, approvals); only the operator may allow that (`allow_protected_writes`)"
            ),
        ))
    }

    /// The permission chain, session answers and ask approvals for one
    /// action of policy session `session`.
    pub fn decide(&self, a: &Action, session: Option<&str>) -> StageVerdict {
        self.decide_in(a, session, false)
    }

    /// [`AdmissionStage::decide`] for a run that suspends on asks
    /// (`suspend`): an ask nobody can answer now (no approver attached)
    /// holds the action with the approval's key to suspend on, instead of
    /// refusing it.
    pub fn decide_in(&self, a: &Action, session: Option<&str>, suspend: bool) -> StageVerdict {
        match self.judge(a, session) {
            Judged::Admit(d) => StageVerdict::Admit(d),
            Judged::Refuse(d) => StageVerdict::Refuse(d),
            Judged::Ask(d, input) => self.ask(a.tool.as_deref().unwrap_or_default(), &input, d, suspend),
        }
    }

    /// The side-effect-free part of [`AdmissionStage::decide`], shared with
    /// [`AdmissionStage::preview`] so that a plan and a run cannot disagree.
    fn judge(&self, a: &Action, session: Option<&str>) -> Judged {
        if a.action_type != ActionType::ToolCall {
            return Judged::Admit(None);
        }
        let name = a.tool.as_deref().unwrap_or_default();
        if let Some(d) = self.plan_refusal(name) {
            return Judged::Refuse(d);
        }
        if let Some(d) = self.protected(a) {
            return Judged::Refuse(d);
        }
        let answer = self.session.answer(session, name);
        let Some(chain) = &self.chain else {
            return match answer {
                Some((false, reason)) => Judged::Refuse(Self::session_denial(name, &reason)),
                _ => Judged::Admit(None),
            };
        };
        let undeclared;
        let def = match self.defs.get(name) {
            Some(d) => d,
            None => {
                undeclared = ToolDefinition::undeclared(name);
                &undeclared
            }
        };
        let ev = chain.evaluate_owned(def, a.parameters.to_value());
        let mut d = Decision::new(ev.verdict, ev.decided_by.as_str(), ev.reason);
        d.rule = ev.rule.as_ref().and_then(|r| serde_json::to_value(r).ok());
        if ev.verdict != Verdict::Deny && !ev.input.as_object().is_some_and(|m| *m == a.parameters) {
            // A substituted input: it is what the later layers checked, what
            // an approval is keyed by and what the tool receives. Anything
            // but an object cannot be a tool's parameters (fail closed).
            match ev.input.as_object() {
                Some(m) => d.substituted = Some(m.clone()),
                None => {
                    d.verdict = Verdict::Deny;
                    d.reason = format!(
                        "the permission chain substituted the input of `{name}` ({}) with a non-object; refused",
                        ev.decided_by.as_str()
                    );
                    return Judged::Refuse(d);
                }
            }
        }
        if ev.verdict == Verdict::Deny {
            d.reason = format!("denied by {}: {}", ev.decided_by.as_str(), d.reason);
            return Judged::Refuse(d);
        }
        match answer {
            Some((false, reason)) => {
                let mut s = Self::session_denial(name, &reason);
                s.substituted = None;
                return Judged::Refuse(s);
            }
            Some((true, reason)) if ev.verdict == Verdict::Ask && !def.kind.is_precheck() => {
                let mut s = d;
                s.verdict = Verdict::Allow;
                s.layer = layer::SESSION;
                s.reason = format!("`{name}` was allowed for this session: {reason}");
                return Judged::Admit(Some(s));
            }
            _ => {}
        }
        match ev.verdict {
            Verdict::Allow => Judged::Admit(Some(d)),
            Verdict::Deny => Judged::Refuse(d),
            Verdict::Ask if def.kind.is_precheck() => {
                // `plan-apply-gate.md`: ask is not a decision for a data_source
                // or interactive call; the precheck turns it into a deny and
                // says so.
                d.verdict = Verdict::Deny;
                d.downgraded_from_ask = true;
                d.substituted = None;
                d.reason = format!(
                    "denied: `{name}` is a {} tool, for which an ask ({}: {}) is a deny",
                    def.kind.as_str(),
                    ev.decided_by.as_str(),
                    d.reason
                );
                Judged::Refuse(d)
            }
            Verdict::Ask => Judged::Ask(d, ev.input),
        }
    }

    fn session_denial(name: &str, reason: &str) -> Decision {
        Decision::deny(layer::SESSION, format!("`{name}` was denied for this session: {reason}"))
    }

    /// An ask: an approval already resolved applies; otherwise a pending
    /// approval holds the action (or refuses it without a store).
    fn ask(&self, name: &str, input: &Value, asked: Decision, suspend: bool) -> StageVerdict {
        if let Some(shared) = &self.shared_approvals {
            return self.ask_shared(shared, name, input, asked);
        }
        let Some(store) = &self.approvals else {
            let mut d = asked;
            d.verdict = Verdict::Deny;
            d.reason = format!("approval required for `{name}` ({}); no approvals store is configured", d.reason);
            return StageVerdict::Refuse(d);
        };
        let deadline = chrono::Utc::now() + self.approval_timeout;
        let refuse = |reason: String| {
            let mut d = asked.clone();
            d.verdict = Verdict::Deny;
            d.layer = layer::APPROVAL;
            d.reason = reason;
            StageVerdict::Refuse(d)
        };
        if let Some(v) = Self::always(&crate::approval::rules::rules_path_of(store.path()), name, &asked) {
            return v;
        }
        let digest = match input_digest(input) {
            Ok(d) => d,
            Err(e) => return refuse(e.to_string()),
        };
        let resolved = |r: crate::gate::Resolution| {
            if r.decision != ApprovalDecision::Allow {
                return refuse(format!("approval `{}` was denied: {}", r.key, r.reason));
            }
            let mut d = asked.clone();
            d.verdict = Verdict::Allow;
            d.layer = layer::APPROVAL;
            d.reason = format!("approval `{}` was granted: {}", r.key, r.reason);
            StageVerdict::Admit(Some(d))
        };
        let mut ticket = store.request(name, &digest, Some(deadline));
        // An approver that answered while being notified (a host that decided
        // before the run): asking again uses the answer at admission.
        if let Ok(Ticket::Pending(p)) = &ticket
            && matches!(store.resolution(&p.key), Ok(Some(_)))
        {
            ticket = match store.request(name, &digest, Some(deadline)) {
                Ok(Ticket::Pending(p)) => {
                    return refuse(format!("approval `{}` could not be read back; refused", p.key));
                }
                other => other,
            };
        }
        match ticket {
            Ok(Ticket::Resolved(r)) => resolved(r),
            Ok(Ticket::Pending(p)) => {
                let store = store.clone();
                // The request is recorded already: suspending needs only its key.
                let key = p.key.clone();
                StageVerdict::Hold(
                    asked,
                    Held {
                        wait: Box::pin(async move {
                            match store.wait_pending(&p, Some(deadline)).await {
                                Ok(r) if r.decision == ApprovalDecision::Allow => None,
                                Ok(r) => Some(format!("approval `{}` was denied: {}", r.key, r.reason)),
                                // Fail closed: an approval whose outcome cannot be learnt is a deny.
                                Err(e) => Some(format!("approval `{}` was denied: {e}", p.key)),
                            }
                        }),
                        park: Some(Box::pin(std::future::ready(Parked::Pending(key)))),
                    },
                )
            }
            // Recorded without an approver to answer it now: a run that
            // suspends waits for it in its checkpoint.
            Err(e) if suspend && e.code() == "approval_required" => {
                let reason = e.to_string();
                StageVerdict::Hold(
                    asked,
                    Held {
                        wait: Box::pin(std::future::ready(Some(reason))),
                        park: Some(Box::pin(std::future::ready(Parked::Pending(crate::gate::approval_key(
                            name, &digest,
                        ))))),
                    },
                )
            }
            Err(e) => refuse(e.to_string()),
        }
    }

    /// An `always` decision on this tool answers its asks (and only its
    /// asks: a deny of an earlier layer never reaches here). A rules file
    /// that cannot be read refuses (fail closed). `None`: no rule.
    fn always(rules: &Path, name: &str, asked: &Decision) -> Option<StageVerdict> {
        let mut d = asked.clone();
        d.layer = layer::APPROVAL;
        match crate::approval::rules::always_rule(rules, name) {
            Ok(None) => None,
            Ok(Some(rule)) => {
                d.rule = Some(json!({"name": rule.name, "scope": "always"}));
                d.reason = rule.reason;
                if rule.decision == crate::gate::Decision::Allow {
                    d.verdict = Verdict::Allow;
                    return Some(StageVerdict::Admit(Some(d)));
                }
                d.verdict = Verdict::Deny;
                Some(StageVerdict::Refuse(d))
            }
            Err(e) => {
                d.verdict = Verdict::Deny;
                d.reason = format!("refused: the `always` rules cannot be read: {e}");
                Some(StageVerdict::Refuse(d))
            }
        }
    }

    /// An ask through a shared backend: the action is held while the
    /// backend is asked (an approval already resolved on any host applies,
    /// used up once) and until the approval closes or its deadline denies
    /// it. Every error is a deny.
    fn ask_shared(&self, shared: &SharedApprovals, name: &str, input: &Value, asked: Decision) -> StageVerdict {
        let rules = crate::approval::rules::rules_path_of(&shared.rules_dir.join(crate::gate::APPROVALS_FILE));
        if let Some(v) = Self::always(&rules, name, &asked) {
            return v;
        }
        let digest = match input_digest(input) {
            Ok(d) => d,
            Err(e) => {
                let mut d = asked;
                d.verdict = Verdict::Deny;
                d.layer = layer::APPROVAL;
                d.reason = e.to_string();
                return StageVerdict::Refuse(d);
            }
        };
        let deadline = chrono::Utc::now() + self.approval_timeout;
        let (backend, tool) = (shared.backend.clone(), name.to_string());
        let asking = SharedAsk { backend: backend.clone(), tool, digest, deadline };
        let park = asking.clone().ask();
        StageVerdict::Hold(
            asked,
            Held {
                // Waiting is asking once, then waiting for a pending approval to close.
                wait: Box::pin(async move {
                    match asking.ask().await {
                        Parked::Decided(answer) => answer,
                        Parked::Pending(key) => match backend.wait(&key, Some(deadline)).await {
                            Ok(r) => closed_reason(r),
                            // Fail closed: an approval whose outcome cannot be learnt is a deny.
                            Err(e) => Some(format!("approval `{key}` was denied: {e}")),
                        },
                    }
                }),
                park: Some(Box::pin(park)),
            },
        )
    }
}

/// `None` for an allow, else the denial's reason.
fn closed_reason(r: crate::gate::Resolution) -> Option<String> {
    if r.decision == ApprovalDecision::Allow {
        None
    } else {
        Some(format!("approval `{}` was denied: {}", r.key, r.reason))
    }
}

/// One ask of a shared approvals store.
#[derive(Clone)]
struct SharedAsk {
    backend: Arc<dyn crate::store::ApprovalBackend>,
    tool: String,
    digest: String,
    deadline: chrono::DateTime<chrono::Utc>,
}

impl SharedAsk {
    /// Asks once: an `always` rule of the store, else an approval already
    /// resolved (used up), decides; otherwise the pending approval's key.
    /// Every error is a deny.
    async fn ask(self) -> Parked {
        if let Some(answer) = shared_always(&*self.backend, &self.tool).await {
            return Parked::Decided(answer);
        }
        match self.backend.request(None, &self.tool, &self.digest, Some(self.deadline)).await {
            Ok(Ticket::Resolved(r)) => Parked::Decided(closed_reason(r)),
            Ok(Ticket::Pending(p)) => Parked::Pending(p.key),
            Err(e) => {
                let key = crate::gate::approval_key(&self.tool, &self.digest);
                Parked::Decided(Some(format!("approval `{key}` was denied: {e}")))
            }
        }
    }
}

/// An `always` rule on `tool` of a shared approvals store (every daemon's
/// `always` decisions): `Some(None)` it allows, `Some(Some(reason))` it
/// denies (or the store cannot be read: fail closed), `None` no rule.
async fn shared_always(backend: &dyn crate::store::ApprovalBackend, tool: &str) -> Option<Option<String>> {
    match backend.always_rule(tool).await {
        Ok(None) => None,
        Ok(Some(rule)) if rule.decision == crate::gate::Decision::Allow => Some(None),
        Ok(Some(rule)) => Some(Some(rule.reason)),
        Err(e) => Some(Some(format!("refused: the `always` rules of the shared store cannot be read: {e}"))),
    }
}

impl AdmissionStage {
    /// The egress allowlist (`inspectors.egress_allowlist`), when set.
    pub fn egress(&self) -> Option<&crate::policy::inspectors::EgressAllowlist> {
        self.egress.as_ref()
    }

    /// What the chain's domain rules say about the first-party fetch tool
    /// reaching `host` ([`PermissionChain::domain_refusal`]); `None` with
    /// no chain or no rule naming it.
    pub fn domain_refusal(&self, host: &str, with_ask: bool) -> Option<String> {
        let chain = self.chain.as_ref()?;
        chain.domain_refusal(&self.definition(crate::permission::FETCH_TOOL), host, with_ask)
    }

    /// The dispatch-time inspectors for one attempt of a `tool_call`.
    pub fn dispatch(&self, a: &Action) -> Option<Decision> {
        let inspectors = self.inspectors.as_ref()?;
        if a.action_type != ActionType::ToolCall || inspectors.is_empty() {
            return None;
        }
        let name = a.tool.as_deref().unwrap_or_default();
        inspectors.inspect(name, &a.parameters).err().map(|denial| {
            let mut d = Decision::deny(
                layer::INSPECTOR,
                format!("denied by inspector `{}`: {}", denial.inspector, denial.reason),
            );
            d.rule = Some(Value::String(denial.inspector));
            d
        })
    }
}
