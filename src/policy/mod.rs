//! The policy engine: closure rules evaluated against every action before it
//! runs. Every action passes every policy and all violations are collected; a
//! panicking policy is caught and becomes a violation naming the policy.
//!
//! Also here: the declarative `.car/policies/*.toml` rules ([`file`](mod@file)), trace
//! rules enforced at dispatch ([`trace`]), the two classifiers (authority and
//! reversibility, [`classify`]), the tier gate ([`tier`]; its approvals
//! ledger is [`crate::approval::ledger`]) and dispatch-time inspectors
//! ([`inspectors`]).

pub mod classify;
pub mod file;
pub mod inspectors;
mod rulelist;
mod rules;
pub mod tier;
pub mod trace;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rulelist::{Entry, RuleList};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ir::Action;

// The ledger's items, re-exported where the tier gate has always named them.
pub use crate::approval::ledger::{
    ApprovalLedger, ApprovalRecord, ApprovalVerdict, JsonlLedger, LEDGER_KEY_ENV, LatestRecords, LedgerContents,
    LedgerKey, MemoryLedger, fingerprint,
};
pub use classify::{Axes, Flattened, PermissionTier, RiskClassifier, classify_reversibility, evaluate_axes, flatten};
pub use file::{PolicySet, discover_policy_dir, load_policy_set, parse_policy_text};
pub use inspectors::{Inspector, InspectorChain, InspectorDenial, InspectorVerdict};
pub use rulelist::RuleScope;
pub use rules::{DenyCallback, coerce_to_string, deny_tool, deny_tool_callback, deny_tool_param, require_state};
pub use tier::{Decision, PermissionDecision, PermissionGate};
pub use trace::{TraceRule, TraceState};

/// A policy rule: `(action, state) -> Some(reason)` to deny, `None` to pass.
pub type PolicyFn = Arc<dyn Fn(&Action, &Map<String, Value>) -> Option<String> + Send + Sync>;

/// A denial of one action by one policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyViolation {
    /// The policy's name.
    pub policy_name: String,
    /// The denied action.
    pub action_id: String,
    /// Why it was denied (never echoes a secret value).
    pub reason: String,
}

/// `{name, description}` as `list` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyInfo {
    /// The policy's name.
    pub name: String,
    /// Its description.
    pub description: String,
}

/// Registered policies: global ones and per-session scopes, plus the trace
/// rules enforced at dispatch. Clones share the trace (and rate-limit) state.
#[derive(Clone, Default)]
pub struct PolicyEngine {
    global: RuleList,
    sessions: HashMap<String, RuleList>,
    trace_rules: Vec<TraceRule>,
    trace: Arc<Mutex<TraceState>>,
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("global", &self.global.names().collect::<Vec<_>>())
            .field("sessions", &self.sessions.keys().collect::<Vec<_>>())
            .field("trace_rules", &self.trace_rules.iter().map(TraceRule::name).collect::<Vec<_>>())
            .finish()
    }
}

impl PolicyEngine {
    /// An engine with no policies.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a global policy.
    pub fn register(&mut self, name: impl Into<String>, rule: PolicyFn, description: impl Into<String>) {
        self.register_scoped(name, rule, description, RuleScope::Any);
    }

    /// Registers a global policy with a scope the engine uses to skip it for
    /// actions it cannot apply to (see [`RuleScope`]).
    pub fn register_scoped(
        &mut self,
        name: impl Into<String>,
        rule: PolicyFn,
        description: impl Into<String>,
        scope: RuleScope,
    ) {
        self.global.push(Entry { name: name.into(), description: description.into(), rule, scope });
    }

    /// Registers a policy in an open session scope.
    pub fn register_in_session(
        &mut self,
        session_id: &str,
        name: impl Into<String>,
        rule: PolicyFn,
        description: impl Into<String>,
    ) -> crate::Result<()> {
        let scope = self.sessions.get_mut(session_id).ok_or_else(|| unknown_session(session_id))?;
        scope.push(Entry { name: name.into(), description: description.into(), rule, scope: RuleScope::Any });
        Ok(())
    }

    /// Opens a policy scope and returns its id.
    pub fn open_session(&mut self) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        self.sessions.insert(id.clone(), RuleList::default());
        id
    }

    /// Drops a session scope, its policies and its trace; false when it did
    /// not exist.
    pub fn close_session(&mut self, session_id: &str) -> bool {
        if let Ok(mut t) = self.trace.lock() {
            t.reset(Some(session_id));
        }
        self.sessions.remove(session_id).is_some()
    }

    /// True when the session scope is open.
    pub fn has_session(&self, session_id: &str) -> bool {
        self.sessions.contains_key(session_id)
    }

    /// Removes every global policy (and trace rule) of that name; returns the
    /// count (0 is fine).
    pub fn unregister(&mut self, name: &str) -> usize {
        let before = self.trace_rules.len();
        self.trace_rules.retain(|r| r.name() != name);
        self.global.remove_named(name) + (before - self.trace_rules.len())
    }

    /// Removes every policy of that name from a session scope.
    pub fn unregister_in_session(&mut self, session_id: &str, name: &str) -> crate::Result<usize> {
        let scope = self.sessions.get_mut(session_id).ok_or_else(|| unknown_session(session_id))?;
        Ok(scope.remove_named(name))
    }

    /// Global policies in registration order, then the trace rules.
    pub fn list(&self) -> Vec<PolicyInfo> {
        let mut out = self.global.info();
        out.extend(self.trace_rules.iter().map(|r| PolicyInfo { name: r.name(), description: r.describe() }));
        out
    }

    /// A session's own policies in registration order.
    pub fn list_session(&self, session_id: &str) -> crate::Result<Vec<PolicyInfo>> {
        self.sessions.get(session_id).map(RuleList::info).ok_or_else(|| unknown_session(session_id))
    }

    /// Number of global policies (trace rules included).
    pub fn len(&self) -> usize {
        self.global.len() + self.trace_rules.len()
    }

    /// True when no global policy or trace rule is registered.
    pub fn is_empty(&self) -> bool {
        self.global.is_empty() && self.trace_rules.is_empty()
    }

    /// Registers a trace rule, enforced by [`check_dispatch`](Self::check_dispatch).
    pub fn register_trace_rule(&mut self, rule: TraceRule) {
        self.trace_rules.push(rule);
    }

    /// The registered trace rules.
    pub fn trace_rules(&self) -> &[TraceRule] {
        &self.trace_rules
    }

    /// Lowers a policy set onto this engine: its per-action rules become
    /// global policies named by their stable rule names, its trace rules are
    /// enforced at dispatch. Returns the number of rules added.
    pub fn apply_policy_set(&mut self, set: &PolicySet) -> usize {
        let lowered = set.lower();
        let n = lowered.len() + set.trace_rule.len();
        for r in lowered {
            self.register_scoped(r.name, r.rule, r.description, r.scope);
        }
        self.trace_rules.extend(set.trace_rule.iter().cloned());
        n
    }

    /// Loads every `*.toml` of `dir` (sorted) into this engine; returns the
    /// number of rules. A missing directory is `Ok(0)`; a malformed file
    /// fails the whole load (nothing is registered) naming the file and key.
    pub fn load_policy_dir(&mut self, dir: &Path) -> crate::Result<usize> {
        let files = file::load_policy_files(dir)?;
        Ok(files.iter().map(|(_, set)| self.apply_policy_set(set)).sum())
    }

    /// Trace rules evaluated at dispatch of a `tool_call` (what already ran
    /// in this session, or in the session-less scope when `session_id` is
    /// `None`). Returns violations named `trace_rule:<tool>`. An admitted
    /// dispatch counts as having run from this moment.
    pub fn check_dispatch(&self, action: &Action, session_id: Option<&str>) -> Vec<PolicyViolation> {
        match self.trace.lock() {
            Ok(mut t) => t.admit(&self.trace_rules, action, session_id),
            Err(_) => vec![PolicyViolation {
                policy_name: "trace_rule".into(),
                action_id: action.id.clone(),
                reason: "trace state unavailable; dispatch denied".into(),
            }],
        }
    }

    /// Records that a `tool_call` was dispatched and whether it succeeded
    /// (feeds trace rules).
    pub fn record_dispatch(&self, action: &Action, session_id: Option<&str>, succeeded: bool) {
        if let Ok(mut t) = self.trace.lock() {
            t.record(action, session_id, succeeded);
        }
    }

    /// Forgets what ran in one trace scope (e.g. the session-less scope at
    /// the start of a new proposal).
    pub fn reset_trace(&self, session_id: Option<&str>) {
        if let Ok(mut t) = self.trace.lock() {
            t.reset(session_id);
        }
    }

    /// Checks an action against every global policy.
    pub fn check(&self, action: &Action, state: &Map<String, Value>) -> Vec<PolicyViolation> {
        let mut out = Vec::new();
        self.global.run(action, state, &mut out);
        out
    }

    /// Checks an action against every global policy and, when given, every
    /// policy of the session scope. An unknown session id is a violation
    /// (fail closed), not a silent pass.
    pub fn check_in_session(
        &self,
        action: &Action,
        state: &Map<String, Value>,
        session_id: Option<&str>,
    ) -> Vec<PolicyViolation> {
        let mut out = self.check(action, state);
        if let Some(sid) = session_id {
            match self.sessions.get(sid) {
                Some(scope) => scope.run(action, state, &mut out),
                None => out.push(PolicyViolation {
                    policy_name: "session".into(),
                    action_id: action.id.clone(),
                    reason: format!("unknown policy session `{sid}`"),
                }),
            }
        }
        out
    }
}

fn unknown_session(id: &str) -> crate::Error {
    crate::Error::not_found("unknown_session", format!("unknown policy session `{id}`"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn collects_every_violation_and_catches_panics() {
        let mut e = PolicyEngine::new();
        e.register("no_x", deny_tool("x"), "deny x");
        e.register("boom", Arc::new(|_: &Action, _: &Map<String, Value>| panic!("bad policy")), "panics");
        e.register("no_rm", deny_tool_param("x", "cmd", "rm -rf"), "");
        let mut a = Action::tool_call("x");
        a.parameters.insert("cmd".into(), json!("sudo rm -rf /"));
        let v = e.check(&a, &Map::new());
        let names: Vec<_> = v.iter().map(|v| v.policy_name.as_str()).collect();
        assert_eq!(names, ["no_x", "boom", "no_rm"]);
        assert!(v[1].reason.contains("panicked"));
        let other = e.check(&Action::tool_call("y"), &Map::new());
        assert_eq!(other.len(), 1, "only the panicking policy fires on another tool");
    }

    #[test]
    fn sessions_and_unregister() {
        let mut e = PolicyEngine::new();
        e.register("p", deny_tool("x"), "");
        e.register("p", deny_tool("y"), "");
        let s = e.open_session();
        e.register_in_session(&s, "sp", deny_tool("z"), "").unwrap();
        let z = Action::tool_call("z");
        assert!(e.check(&z, &Map::new()).is_empty());
        assert_eq!(e.check_in_session(&z, &Map::new(), Some(&s)).len(), 1);
        assert_eq!(e.check_in_session(&z, &Map::new(), Some("nope")).len(), 1);
        assert_eq!(e.unregister("p"), 2);
        assert_eq!(e.unregister("p"), 0);
        assert!(e.close_session(&s));
        assert!(!e.close_session(&s));
        assert!(e.register_in_session(&s, "sp", deny_tool("z"), "").is_err());
    }
}
