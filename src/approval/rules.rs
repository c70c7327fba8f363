//! `always`-scoped approval decisions: rules every front end of the host
//! reads.
//!
//! A decision made with scope `always` (over the wire, in the dashboard, by
//! `proposal_decide`) is persisted as a [`GateRule`] matching the tool (the
//! `(provider, operation_name)` scope of `plan-apply-gate.md`, whatever the
//! input) in [`ALWAYS_RULES_FILE`], next to the approvals store's file in
//! its directory. The admission stage's `approval` layer reads it before it
//! asks anyone: a rule answers an `ask` only, so an always-allow never lifts
//! a deny of any earlier layer. Every runtime whose admission document names
//! the same `approvals_dir` (the CLI, the bindings, the daemon's sessions)
//! reads the same file.

use std::path::{Path, PathBuf};

use crate::Result;
use crate::gate::{Decision, FilePolicyStore, GateRule, PolicyStore};

/// The file of `always` rules under an approvals directory.
pub const ALWAYS_RULES_FILE: &str = "always-rules.jsonl";

/// The `always` rules file of the approvals store whose file is `store_file`
/// (`<dir>/approvals.jsonl` → `<dir>/always-rules.jsonl`).
pub fn rules_path_of(store_file: &Path) -> PathBuf {
    store_file.parent().unwrap_or_else(|| Path::new("")).join(ALWAYS_RULES_FILE)
}

/// The name of the rule an `always` decision on `tool` persists.
pub fn rule_name(tool: &str) -> String {
    format!("always:{tool}")
}

/// Persists an `always` decision on `tool` by `reviewer`.
pub fn persist_always(path: &Path, tool: &str, allow: bool, reviewer: &str, reason: &str) -> Result<GateRule> {
    let rule = always_rule_of(tool, allow, reviewer, reason);
    FilePolicyStore::open(path).persist(rule.clone())?;
    Ok(rule)
}

/// The rule an `always` decision on `tool` by `reviewer` makes.
pub fn always_rule_of(tool: &str, allow: bool, reviewer: &str, reason: &str) -> GateRule {
    let verdict = if allow { "allowed" } else { "denied" };
    let why = if reason.is_empty() { String::new() } else { format!(": {reason}") };
    GateRule {
        name: rule_name(tool),
        provider: None,
        operation_name: Some(tool.to_string()),
        kind: None,
        risk: None,
        decision: if allow { Decision::Allow } else { Decision::Deny },
        reason: format!("`{tool}` was always {verdict} by {reviewer}{why}"),
    }
}

/// The rule in force for `tool`: the latest `always` rule naming it (a
/// later decision replaces an earlier one). An unreadable or malformed file
/// is an error (the caller fails closed).
pub fn always_rule(path: &Path, tool: &str) -> Result<Option<GateRule>> {
    if !path.exists() {
        return Ok(None);
    }
    let rules = FilePolicyStore::open_read_only(path).rules()?;
    Ok(rules.into_iter().rev().find(|r| r.provider.is_none() && r.operation_name.as_deref() == Some(tool)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_rule_for_a_tool_wins_and_other_tools_are_untouched() {
        let dir = std::env::temp_dir().join(format!("car-always-{}", uuid::Uuid::new_v4()));
        let path = dir.join(ALWAYS_RULES_FILE);
        assert!(always_rule(&path, "deploy").unwrap().is_none());
        persist_always(&path, "deploy", true, "r1", "fine").unwrap();
        persist_always(&path, "deploy", false, "r2", "").unwrap();
        let r = always_rule(&path, "deploy").unwrap().unwrap();
        assert_eq!(r.decision, Decision::Deny);
        assert!(r.reason.contains("by r2"), "{}", r.reason);
        assert!(always_rule(&path, "other").unwrap().is_none());
        std::fs::write(&path, "not json\n").unwrap();
        assert!(always_rule(&path, "deploy").is_err());
        std::fs::remove_dir_all(dir).ok();
    }
}
