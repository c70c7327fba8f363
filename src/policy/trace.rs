//! Trace rules: temporal constraints over what has already run in the same
//! proposal or session, evaluated when a `tool_call` is dispatched.
//!
//! A rule names a `tool` and at least one of:
//! - `forbid_after = [tools]`: deny `tool` once any of them has been
//!   dispatched in this scope (e.g. no `http_request` after `read_secret`);
//! - `require_before = [tools]`: deny `tool` until one of them has
//!   succeeded in this scope (e.g. `deploy` only after `run_tests`);
//! - `max_per_session = n`: deny the `n + 1`-th dispatch of `tool`.
//!
//! A dispatch admitted by [`TraceState::admit`] counts as having run from
//! that moment (a concurrent call cannot slip past a `forbid_after` while
//! the first one is still in flight); its outcome is recorded later by
//! [`TraceState::record`].

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::PolicyViolation;
use crate::ir::Action;

/// One temporal rule over the execution trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRule {
    /// The tool the rule governs.
    pub tool: String,
    /// Deny `tool` once any of these has been dispatched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forbid_after: Vec<String>,
    /// Deny `tool` until one of these has succeeded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub require_before: Vec<String>,
    /// Deny `tool` after this many dispatches in the scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_session: Option<u64>,
}

impl TraceRule {
    /// The stable violation name, `trace_rule:<tool>`.
    pub fn name(&self) -> String {
        format!("trace_rule:{}", self.tool)
    }

    /// A one-line description for `list`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.forbid_after.is_empty() {
            parts.push(format!("never after {}", quoted(&self.forbid_after, " or ")));
        }
        if !self.require_before.is_empty() {
            parts.push(format!("only after {} succeeded", quoted(&self.require_before, " or ")));
        }
        if let Some(n) = self.max_per_session {
            parts.push(format!("at most {n} per session"));
        }
        format!("trace rule on `{}`: {}", self.tool, parts.join("; "))
    }
}

fn quoted(items: &[String], sep: &str) -> String {
    items.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(sep)
}

/// What has run in one scope (a session, or the session-less run).
#[derive(Debug, Default, Clone)]
struct Scope {
    /// Dispatches per tool (admitted or recorded).
    started: HashMap<String, u64>,
    /// Tools that have succeeded at least once.
    succeeded: HashSet<String>,
    /// Action ids admitted by `admit` and not yet recorded.
    pending: HashSet<String>,
}

/// The execution trace of every scope of one policy engine.
#[derive(Debug, Default)]
pub struct TraceState {
    scopes: HashMap<Option<String>, Scope>,
}

impl TraceState {
    /// Evaluates `rules` for a dispatch of `action` in `session`; when no rule
    /// denies, records the dispatch as started and returns no violation.
    pub fn admit(&mut self, rules: &[TraceRule], action: &Action, session: Option<&str>) -> Vec<PolicyViolation> {
        let Some(tool) = action.tool.as_deref() else {
            return Vec::new();
        };
        let key = session.map(str::to_string);
        let mut out = Vec::new();
        {
            let empty = Scope::default();
            let scope = self.scopes.get(&key).unwrap_or(&empty);
            for rule in rules.iter().filter(|r| r.tool == tool) {
                if let Some(reason) = violation(rule, scope) {
                    out.push(PolicyViolation { policy_name: rule.name(), action_id: action.id.clone(), reason });
                }
            }
        }
        if out.is_empty() {
            let scope = self.scopes.entry(key).or_default();
            *scope.started.entry(tool.to_string()).or_insert(0) += 1;
            scope.pending.insert(action.id.clone());
        }
        out
    }

    /// Records the outcome of a dispatch. A dispatch that `admit` did not see
    /// is counted as started here.
    pub fn record(&mut self, action: &Action, session: Option<&str>, succeeded: bool) {
        let Some(tool) = action.tool.as_deref() else {
            return;
        };
        let scope = self.scopes.entry(session.map(str::to_string)).or_default();
        if !scope.pending.remove(&action.id) {
            *scope.started.entry(tool.to_string()).or_insert(0) += 1;
        }
        if succeeded {
            scope.succeeded.insert(tool.to_string());
        }
    }

    /// Forgets what ran in one scope.
    pub fn reset(&mut self, session: Option<&str>) {
        self.scopes.remove(&session.map(str::to_string));
    }

    /// How many dispatches of `tool` the scope has seen.
    pub fn dispatch_count(&self, tool: &str, session: Option<&str>) -> u64 {
        self.scopes.get(&session.map(str::to_string)).and_then(|s| s.started.get(tool)).copied().unwrap_or(0)
    }
}

fn violation(rule: &TraceRule, scope: &Scope) -> Option<String> {
    if let Some(prior) = rule.forbid_after.iter().find(|t| scope.started.get(t.as_str()).copied().unwrap_or(0) > 0) {
        return Some(format!("trace rule: `{}` may not run after `{prior}` has run in this session", rule.tool));
    }
    if !rule.require_before.is_empty() && !rule.require_before.iter().any(|t| scope.succeeded.contains(t)) {
        return Some(format!(
            "trace rule: `{}` requires {} to have succeeded first in this session",
            rule.tool,
            quoted(&rule.require_before, " or ")
        ));
    }
    if let Some(max) = rule.max_per_session {
        let ran = scope.started.get(rule.tool.as_str()).copied().unwrap_or(0);
        if ran >= max {
            return Some(format!("trace rule: `{}` may run at most {max} time(s) per session", rule.tool));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(tool: &str) -> TraceRule {
        TraceRule { tool: tool.into(), forbid_after: vec![], require_before: vec![], max_per_session: None }
    }

    fn call(tool: &str, id: &str) -> Action {
        let mut a = Action::tool_call(tool);
        a.id = id.into();
        a
    }

    #[test]
    fn forbid_after_denies_only_once_the_source_ran() {
        let rules = vec![TraceRule { forbid_after: vec!["read_secret".into()], ..rule("http_request") }];
        let mut st = TraceState::default();
        assert!(st.admit(&rules, &call("http_request", "a1"), None).is_empty());
        assert!(st.admit(&rules, &call("read_secret", "a2"), None).is_empty());
        let v = st.admit(&rules, &call("http_request", "a3"), None);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].policy_name, "trace_rule:http_request");
        assert_eq!(v[0].action_id, "a3");
        // Another session has its own trace.
        assert!(st.admit(&rules, &call("http_request", "a3"), Some("s")).is_empty());
        // A failed source still ran.
        st.record(&call("read_secret", "b1"), Some("t"), false);
        assert_eq!(st.admit(&rules, &call("http_request", "b2"), Some("t")).len(), 1);
    }

    #[test]
    fn require_before_needs_a_success() {
        let rules = vec![TraceRule { require_before: vec!["run_tests".into()], ..rule("deploy") }];
        let mut st = TraceState::default();
        assert_eq!(st.admit(&rules, &call("deploy", "d1"), None).len(), 1);
        assert!(st.admit(&rules, &call("run_tests", "t1"), None).is_empty());
        // Admitted but not yet succeeded: still denied.
        assert_eq!(st.admit(&rules, &call("deploy", "d2"), None).len(), 1);
        st.record(&call("run_tests", "t1"), None, false);
        assert_eq!(st.admit(&rules, &call("deploy", "d3"), None).len(), 1);
        st.record(&call("run_tests", "t2"), None, true);
        assert!(st.admit(&rules, &call("deploy", "d4"), None).is_empty());
        st.reset(None);
        assert_eq!(st.admit(&rules, &call("deploy", "d5"), None).len(), 1);
    }

    #[test]
    fn max_per_session_counts_admitted_dispatches_once() {
        let rules = vec![TraceRule { max_per_session: Some(2), ..rule("send") }];
        let mut st = TraceState::default();
        assert!(st.admit(&rules, &call("send", "1"), None).is_empty());
        st.record(&call("send", "1"), None, true);
        assert!(st.admit(&rules, &call("send", "2"), None).is_empty());
        assert_eq!(st.dispatch_count("send", None), 2);
        let v = st.admit(&rules, &call("send", "3"), None);
        assert_eq!(v.len(), 1);
        // A denied dispatch is not counted.
        assert_eq!(st.dispatch_count("send", None), 2);
        let zero = vec![TraceRule { max_per_session: Some(0), ..rule("x") }];
        assert_eq!(st.admit(&zero, &call("x", "x1"), None).len(), 1);
    }
}
