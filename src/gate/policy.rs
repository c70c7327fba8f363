//! The gate's policy input: a per-item decision function, a declarative rule
//! table, and the writable policy store that `always`-scoped decisions persist to.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::plan::{Decision, PlanItem, RiskClass, ToolKind};
use crate::{Error, Result};

/// What a policy says about one plan item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyDecision {
    /// `allow`, `ask` or `deny` (`pending` is read as `ask`).
    pub decision: Decision,
    /// The rule, layer or subscriber that decided.
    pub decided_by: String,
    /// Why (the denial reason of a deny).
    #[serde(default)]
    pub reason: String,
}

impl PolicyDecision {
    /// A decision with its decider and reason.
    pub fn new(decision: Decision, decided_by: impl Into<String>, reason: impl Into<String>) -> Self {
        PolicyDecision { decision, decided_by: decided_by.into(), reason: reason.into() }
    }

    /// A decision from a verdict spelled `allow`, `ask` or `deny` (e.g. the
    /// permission chain's). Anything else is uncertain and becomes `ask`
    /// (which the read precheck turns into a deny): never an allow.
    pub fn from_verdict(verdict: &str, decided_by: impl Into<String>, reason: impl Into<String>) -> Self {
        let decision = match verdict {
            "allow" => Decision::Allow,
            "deny" => Decision::Deny,
            _ => Decision::Ask,
        };
        PolicyDecision::new(decision, decided_by, reason)
    }
}

/// The policy evaluated for every plan item, one item at a time.
///
/// The permission chain plugs in here: its verdict maps to `decision`, its
/// deciding layer to `decided_by` and its reason to `reason`.
pub trait ItemPolicy {
    /// Decides one item; the item carries its snapshot fields and input.
    fn decide(&self, item: &PlanItem) -> PolicyDecision;
}

impl<F: Fn(&PlanItem) -> PolicyDecision> ItemPolicy for F {
    fn decide(&self, item: &PlanItem) -> PolicyDecision {
        self(item)
    }
}

/// A declarative gate rule: every `match` field set must match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateRule {
    /// The rule name, reported as `decided_by`.
    pub name: String,
    /// The provider to match, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The operation to match, when set.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "tool")]
    pub operation_name: Option<String>,
    /// The kind to match, when set. `data_source` also matches interactive
    /// items (they share the read precheck path); `interactive` matches only them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    /// The risk class to match, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<RiskClass>,
    /// `allow`, `ask` or `deny`.
    pub decision: Decision,
    /// Why; reported as the item's reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl GateRule {
    /// True when every set match field matches `item`.
    pub fn matches(&self, item: &PlanItem) -> bool {
        self.provider.as_ref().is_none_or(|p| *p == item.provider)
            && self.operation_name.as_ref().is_none_or(|o| *o == item.operation_name)
            && self
                .kind
                .is_none_or(|k| k == item.kind || (k == ToolKind::DataSource && item.kind == ToolKind::Interactive))
            && self.risk.is_none_or(|r| r == item.risk)
    }
}

/// Folds matching rules: the strictest decision wins (deny > ask > allow);
/// among equally strict rules the first in order decides.
pub(crate) fn strictest<'a>(rules: impl IntoIterator<Item = &'a GateRule>, item: &PlanItem) -> Option<&'a GateRule> {
    let mut best: Option<&GateRule> = None;
    for r in rules.into_iter().filter(|r| r.matches(item)) {
        if best.is_none_or(|b| r.decision.strictness() > b.decision.strictness()) {
            best = Some(r);
        }
    }
    best
}

/// An ordered table of gate rules with defaults for unmatched items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleTable {
    /// The rules.
    #[serde(default)]
    pub rules: Vec<GateRule>,
    /// Decision for a resource item no rule matches; default `ask`.
    #[serde(default = "default_resource")]
    pub default_resource: Decision,
    /// Decision for a data_source or interactive item no rule matches;
    /// default `allow` (the spec's default for reads).
    #[serde(default = "default_read")]
    pub default_read: Decision,
}

fn default_resource() -> Decision {
    Decision::Ask
}

fn default_read() -> Decision {
    Decision::Allow
}

impl Default for RuleTable {
    fn default() -> Self {
        RuleTable { rules: Vec::new(), default_resource: Decision::Ask, default_read: Decision::Allow }
    }
}

impl RuleTable {
    /// A table of `rules` with the default defaults.
    pub fn new(rules: Vec<GateRule>) -> Self {
        RuleTable { rules, ..RuleTable::default() }
    }
}

impl ItemPolicy for RuleTable {
    fn decide(&self, item: &PlanItem) -> PolicyDecision {
        if let Some(rule) = strictest(&self.rules, item) {
            let reason = if rule.reason.is_empty() {
                format!("rule `{}` decided {}", rule.name, rule.decision.as_str())
            } else {
                rule.reason.clone()
            };
            return PolicyDecision::new(rule.decision, rule.name.clone(), reason);
        }
        let d = if item.kind == ToolKind::Resource { self.default_resource } else { self.default_read };
        PolicyDecision::new(d, "default", format!("no rule matched; default {}", d.as_str()))
    }
}

/// Where `always`-scoped decisions persist as policy rules.
pub trait PolicyStore: Send + Sync {
    /// The persisted rules, oldest first.
    fn rules(&self) -> Result<Vec<GateRule>>;
    /// True when [`PolicyStore::persist`] can durably write.
    fn writable(&self) -> bool;
    /// Durably appends a rule.
    fn persist(&self, rule: GateRule) -> Result<()>;
}

/// A policy store in an append-only JSON-lines file, one [`GateRule`] a line.
#[derive(Debug)]
pub struct FilePolicyStore {
    path: PathBuf,
    writable: bool,
    lock: Mutex<()>,
}

impl FilePolicyStore {
    /// A writable store at `path` (created on first write).
    pub fn open(path: impl AsRef<Path>) -> Self {
        FilePolicyStore { path: path.as_ref().to_path_buf(), writable: true, lock: Mutex::new(()) }
    }

    /// A read-only store at `path`: `always` decisions are refused.
    pub fn open_read_only(path: impl AsRef<Path>) -> Self {
        FilePolicyStore { path: path.as_ref().to_path_buf(), writable: false, lock: Mutex::new(()) }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl PolicyStore for FilePolicyStore {
    fn rules(&self) -> Result<Vec<GateRule>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(Error::runtime(
                    "policy_store_io",
                    format!("cannot read policy store `{}`: {e}", self.path.display()),
                ));
            }
        };
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let rule: GateRule = serde_json::from_str(line).map_err(|e| {
                Error::config(
                    "invalid_policy_store",
                    format!("policy store `{}` line {}: {e}", self.path.display(), i + 1),
                    json!({"file": self.path.display().to_string(), "line": i + 1}),
                )
            })?;
            out.push(rule);
        }
        Ok(out)
    }

    fn writable(&self) -> bool {
        self.writable
    }

    fn persist(&self, rule: GateRule) -> Result<()> {
        if !self.writable {
            return Err(always_refused(&format!("policy store `{}` is read-only", self.path.display())));
        }
        let _guard = self.lock.lock().map_err(|_| Error::runtime("policy_store_io", "policy store lock poisoned"))?;
        let line = serde_json::to_string(&rule).map_err(|e| Error::runtime("policy_store_io", e.to_string()))?;
        append_line(&self.path, &line).map_err(|e| {
            Error::runtime("policy_store_io", format!("cannot write policy store `{}`: {e}", self.path.display()))
        })
    }
}

/// The distinct error of an `always` decision that cannot be persisted.
pub(crate) fn always_refused(why: &str) -> Error {
    Error::config(
        "always_scope_unavailable",
        format!("scope `always` needs a writable policy store: {why}"),
        json!({"scope": "always"}),
    )
}

/// Appends one line (with its newline) in a single write, creating the
/// parent directory and the file when missing, then syncs it.
pub(crate) fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    f.write_all(buf.as_bytes())?;
    f.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::plan::{Call, OperationSpec};
    use serde_json::json;

    fn item(kind: ToolKind, risk: RiskClass) -> PlanItem {
        let spec = OperationSpec::new("p", "op", kind, risk);
        PlanItem::from_call("t.0".into(), &Call::new("c", "p", "op", json!({})), Some(&spec))
    }

    fn rule(name: &str, kind: Option<ToolKind>, decision: Decision) -> GateRule {
        GateRule {
            name: name.into(),
            provider: None,
            operation_name: None,
            kind,
            risk: None,
            decision,
            reason: String::new(),
        }
    }

    #[test]
    fn the_strictest_matching_rule_wins_and_data_source_rules_cover_interactive() {
        let table = RuleTable::new(vec![
            rule("allow-all", None, Decision::Allow),
            rule("ask-reads", Some(ToolKind::DataSource), Decision::Ask),
            rule("deny-resources", Some(ToolKind::Resource), Decision::Deny),
        ]);
        assert_eq!(table.decide(&item(ToolKind::Resource, RiskClass::Write)).decided_by, "deny-resources");
        assert_eq!(table.decide(&item(ToolKind::DataSource, RiskClass::Read)).decided_by, "ask-reads");
        assert_eq!(table.decide(&item(ToolKind::Interactive, RiskClass::Undeclared)).decided_by, "ask-reads");
        let only_interactive = rule("x", Some(ToolKind::Interactive), Decision::Deny);
        assert!(!only_interactive.matches(&item(ToolKind::DataSource, RiskClass::Read)));
    }

    #[test]
    fn unknown_verdicts_are_never_allow() {
        assert_eq!(PolicyDecision::from_verdict("allow", "x", "").decision, Decision::Allow);
        assert_eq!(PolicyDecision::from_verdict("deny", "x", "").decision, Decision::Deny);
        assert_eq!(PolicyDecision::from_verdict("Allow", "x", "").decision, Decision::Ask);
        assert_eq!(PolicyDecision::from_verdict("", "x", "").decision, Decision::Ask);
    }
}
