//! The tier gate: per-action decisions against a granted tier and the tier
//! approvals ledger ([`crate::approval::ledger`]). The gate decides:
//! 1. the latest ledger record for the fingerprint: `approved` → `allow`,
//!    `rejected` → `deny`;
//! 2. otherwise `full_access` always → `needs_approval`;
//! 3. otherwise a required tier above the granted one → `needs_approval`;
//! 4. otherwise `allow`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

use super::classify::{Axes, PermissionTier, RiskClassifier, classify_reversibility_flat, flatten};
use crate::Error;
use crate::approval::ledger::{ApprovalLedger, ApprovalRecord, ApprovalVerdict, fingerprint};
use crate::ir::{Action, Reversibility};

/// A gate decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// May run.
    Allow,
    /// Needs a human approval first.
    NeedsApproval,
    /// May not run.
    Deny,
}

/// One row of `permission_evaluate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionDecision {
    /// The action.
    pub action_id: String,
    /// Its operation's fingerprint.
    pub fingerprint: String,
    /// The decision.
    pub decision: Decision,
    /// The tier the action requires.
    pub required: PermissionTier,
    /// The tier the session is granted.
    pub granted: PermissionTier,
    /// Whether the action can be undone (classified, not enforced).
    pub reversibility: Reversibility,
    /// Why, unless allowed by tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The gate: a classifier plus an optional ledger.
#[derive(Default)]
pub struct PermissionGate {
    classifier: Option<RiskClassifier>,
    ledger: Option<Box<dyn ApprovalLedger>>,
}

impl std::fmt::Debug for PermissionGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermissionGate").field("ledger", &self.ledger.is_some()).finish()
    }
}

impl PermissionGate {
    /// A gate with the default classifier and no ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses this ledger.
    pub fn with_ledger(mut self, ledger: Box<dyn ApprovalLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Uses this classifier.
    pub fn with_classifier(mut self, classifier: RiskClassifier) -> Self {
        self.classifier = Some(classifier);
        self
    }

    /// The authority axis alone: the tier an action requires.
    pub fn required_tier(&self, action: &Action) -> PermissionTier {
        let classifier = self.classifier.as_ref().unwrap_or_else(|| RiskClassifier::shared());
        classifier.classify_flat(&flatten(action))
    }

    /// Both axes of an action from one flattening.
    pub fn axes(&self, action: &Action) -> Axes {
        let f = flatten(action);
        let classifier = self.classifier.as_ref().unwrap_or_else(|| RiskClassifier::shared());
        Axes { required_tier: classifier.classify_flat(&f), reversibility: classify_reversibility_flat(&f) }
    }

    /// Decides one action. A ledger that cannot be read is an error (the
    /// caller must not proceed).
    pub fn evaluate(&self, action: &Action, granted: PermissionTier) -> crate::Result<PermissionDecision> {
        let fp = fingerprint(action);
        let record = match &self.ledger {
            Some(l) => l.latest(&fp)?,
            None => None,
        };
        Ok(self.decide(action, fp, record.as_ref(), granted))
    }

    /// Decides every action, reading the ledger once.
    pub fn evaluate_all(&self, actions: &[Action], granted: PermissionTier) -> crate::Result<Vec<PermissionDecision>> {
        let latest = match &self.ledger {
            Some(l) => l.latest_all()?,
            None => HashMap::new(),
        };
        Ok(self.evaluate_with(actions, granted, &latest))
    }

    /// [`Self::evaluate_all`] against `latest`, the latest record of every
    /// fingerprint (as [`ApprovalLedger::latest_all`] reads it), for callers
    /// that hold the ledger's contents already; this gate's own ledger is
    /// not read.
    pub fn evaluate_with(
        &self,
        actions: &[Action],
        granted: PermissionTier,
        latest: &HashMap<String, ApprovalRecord>,
    ) -> Vec<PermissionDecision> {
        actions
            .iter()
            .map(|a| {
                let fp = fingerprint(a);
                let record = latest.get(&fp);
                self.decide(a, fp, record, granted)
            })
            .collect()
    }

    fn decide(
        &self,
        action: &Action,
        fp: String,
        record: Option<&ApprovalRecord>,
        granted: PermissionTier,
    ) -> PermissionDecision {
        let axes = self.axes(action);
        let required = axes.required_tier;
        let (decision, reason) = match record {
            Some(r) if r.decision == ApprovalVerdict::Approved => (Decision::Allow, None),
            Some(r) => (Decision::Deny, Some(format!("previously rejected by {} ({})", r.reviewer, r.reason))),
            None if required == PermissionTier::FullAccess => (
                Decision::NeedsApproval,
                Some("full_access actions require human approval before execution".to_string()),
            ),
            None if required > granted => (
                Decision::NeedsApproval,
                Some(format!("action requires {required} but session is granted only {granted}")),
            ),
            None => (Decision::Allow, None),
        };
        PermissionDecision {
            action_id: action.id.clone(),
            fingerprint: fp,
            decision,
            required,
            granted,
            reversibility: axes.reversibility,
            reason,
        }
    }

    /// Tier admission of a whole proposal: `Ok(None)` when every action may
    /// run at `granted`, else the refusal reason naming the actions and tiers.
    /// It admits exactly what [`PermissionGate::evaluate`] allows: an action
    /// that `needs_approval` (its required tier exceeds `granted`, or it is
    /// `full_access`, which always needs an approval) is refused unless the
    /// ledger holds an approval of its operation, and a rejected operation is
    /// refused at any tier. A ledger that cannot be read is an error: the
    /// caller must not run.
    pub fn admit_tier(&self, actions: &[Action], granted: PermissionTier) -> crate::Result<Option<String>> {
        Ok(Self::tier_refusal(self.evaluate_all(actions, granted)?, granted))
    }

    /// [`Self::admit_tier`] against `latest` (see [`Self::evaluate_with`]).
    pub fn admit_tier_with(
        &self,
        actions: &[Action],
        granted: PermissionTier,
        latest: &HashMap<String, ApprovalRecord>,
    ) -> Option<String> {
        Self::tier_refusal(self.evaluate_with(actions, granted, latest), granted)
    }

    /// The refusal reason of a proposal whose per-action decisions are
    /// `decisions` (see [`Self::admit_tier`]), `None` when it may run.
    pub fn tier_refusal_of(decisions: Vec<PermissionDecision>, granted: PermissionTier) -> Option<String> {
        Self::tier_refusal(decisions, granted)
    }

    fn tier_refusal(decisions: Vec<PermissionDecision>, granted: PermissionTier) -> Option<String> {
        let mut escalated: Vec<String> = Vec::new();
        let mut unapproved: Vec<String> = Vec::new();
        let mut rejected: Vec<String> = Vec::new();
        for d in decisions {
            match d.decision {
                Decision::Allow => {}
                Decision::Deny => rejected.push(format!(
                    "action `{}` was {}",
                    d.action_id,
                    d.reason.as_deref().unwrap_or("rejected by a reviewer")
                )),
                Decision::NeedsApproval if d.required > granted => {
                    escalated.push(format!("`{}` requires `{}`", d.action_id, d.required));
                }
                Decision::NeedsApproval => unapproved.push(format!("`{}`", d.action_id)),
            }
        }
        if !rejected.is_empty() {
            return Some(format!("refused: {}", rejected.join("; ")));
        }
        let mut parts = Vec::new();
        if !escalated.is_empty() {
            parts.push(format!(
                "permission tier escalated: action {} but the session is granted only `{granted}`",
                escalated.join(", action ")
            ));
        }
        if !unapproved.is_empty() {
            parts.push(format!(
                "approval required: action {} is `full_access`, which always needs an approval",
                unapproved.join(", action ")
            ));
        }
        if parts.is_empty() {
            return None;
        }
        let fix = if escalated.is_empty() {
            "approve the action (permission.approve)"
        } else {
            "raise the tier (permission.set_tier) or approve the action (permission.approve)"
        };
        Some(format!("{}; {fix}", parts.join("; ")))
    }

    /// Records a reviewer's verdict for an action's operation.
    pub fn record(
        &self,
        action: &Action,
        approve: bool,
        reviewer: &str,
        reason: &str,
        evidence: Option<Value>,
    ) -> crate::Result<ApprovalRecord> {
        let ledger =
            self.ledger.as_ref().ok_or_else(|| Error::runtime("no_ledger", "no approvals ledger is configured"))?;
        let rec = self.record_of(action, approve, reviewer, reason, evidence)?;
        ledger.append(&rec)?;
        Ok(rec)
    }

    /// The record of a reviewer's verdict on an action's operation (its
    /// fingerprint and required tier), not yet appended anywhere.
    pub fn record_of(
        &self,
        action: &Action,
        approve: bool,
        reviewer: &str,
        reason: &str,
        evidence: Option<Value>,
    ) -> crate::Result<ApprovalRecord> {
        let required = self.axes(action).required_tier;
        ApprovalRecord::new(&fingerprint(action), required, approve, reviewer, reason, evidence)
    }

    /// Records a verdict for an explicit fingerprint.
    pub fn record_fingerprint(
        &self,
        fingerprint: &str,
        required_tier: PermissionTier,
        approve: bool,
        reviewer: &str,
        reason: &str,
        evidence: Option<Value>,
    ) -> crate::Result<ApprovalRecord> {
        let ledger =
            self.ledger.as_ref().ok_or_else(|| Error::runtime("no_ledger", "no approvals ledger is configured"))?;
        let rec = ApprovalRecord::new(fingerprint, required_tier, approve, reviewer, reason, evidence)?;
        ledger.append(&rec)?;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::ledger::MemoryLedger;
    use serde_json::{Value, json};

    fn act(id: &str, tool: &str, params: Value) -> Action {
        let mut a = Action::tool_call(tool);
        a.id = id.to_string();
        a.parameters = params.as_object().cloned().unwrap_or_default().into();
        a
    }

    #[test]
    fn gate_decisions_and_ledger() {
        let gate = PermissionGate::new().with_ledger(Box::<MemoryLedger>::default());
        let deploy = act("d", "deploy", json!({"target": "prod"}));
        let read = act("r", "read_file", json!({"path": "x"}));
        let d = gate.evaluate(&deploy, PermissionTier::FullAccess).unwrap();
        assert_eq!(d.decision, Decision::NeedsApproval, "full_access always needs approval");
        let r = gate.evaluate(&read, PermissionTier::ReadOnly).unwrap();
        assert_eq!(r.decision, Decision::NeedsApproval);
        assert_eq!(r.reason.as_deref(), Some("action requires sandbox_edit but session is granted only read_only"));
        assert_eq!(gate.evaluate(&read, PermissionTier::SandboxEdit).unwrap().decision, Decision::Allow);
        gate.record(&deploy, false, "bob", "no", None).unwrap();
        let d = gate.evaluate(&deploy, PermissionTier::FullAccess).unwrap();
        assert_eq!(d.decision, Decision::Deny);
        assert_eq!(d.reason.as_deref(), Some("previously rejected by bob (no)"));
        gate.record(&deploy, true, "al", "ok", None).unwrap();
        assert_eq!(gate.evaluate(&deploy, PermissionTier::ReadOnly).unwrap().decision, Decision::Allow, "latest wins");
        assert!(PermissionGate::new().record(&deploy, true, "x", "y", None).is_err());
    }

    #[test]
    fn admit_tier_refuses_above_the_granted_tier_unless_approved() {
        let gate = PermissionGate::new().with_ledger(Box::<MemoryLedger>::default());
        let deploy = act("d", "deploy", json!({"target": "prod"}));
        let read = act("r", "read_file", json!({"path": "x"}));
        let both = [read.clone(), deploy.clone()];
        assert_eq!(gate.admit_tier(std::slice::from_ref(&read), PermissionTier::SandboxEdit).unwrap(), None);
        assert_eq!(
            gate.admit_tier(&both, PermissionTier::SandboxEdit).unwrap().as_deref(),
            Some(
                "permission tier escalated: action `d` requires `full_access` but the session is granted only `sandbox_edit`; raise the tier (permission.set_tier) or approve the action (permission.approve)"
            )
        );
        let r = gate.admit_tier(&both, PermissionTier::ReadOnly).unwrap().unwrap();
        assert!(r.contains("action `r` requires `sandbox_edit`, action `d` requires `full_access`"), "{r}");
        assert_eq!(
            gate.admit_tier(&both, PermissionTier::FullAccess).unwrap().as_deref(),
            Some(
                "approval required: action `d` is `full_access`, which always needs an approval; approve the action (permission.approve)"
            ),
            "granted full_access: admits exactly what evaluate allows"
        );
        for granted in [PermissionTier::ReadOnly, PermissionTier::SandboxEdit, PermissionTier::FullAccess] {
            let allowed = gate.evaluate_all(&both, granted).unwrap().iter().all(|d| d.decision == Decision::Allow);
            assert_eq!(gate.admit_tier(&both, granted).unwrap().is_none(), allowed, "{granted}");
        }
        gate.record(&deploy, true, "al", "ok", None).unwrap();
        assert_eq!(gate.admit_tier(&both, PermissionTier::SandboxEdit).unwrap(), None, "approved");
        assert_eq!(gate.admit_tier(&both, PermissionTier::FullAccess).unwrap(), None, "approved, at full_access too");
        gate.record(&read, false, "bob", "no reads today", None).unwrap();
        assert_eq!(
            gate.admit_tier(&both, PermissionTier::FullAccess).unwrap().as_deref(),
            Some("refused: action `r` was previously rejected by bob (no reads today)"),
            "a rejection refuses at any tier"
        );
    }

    #[test]
    fn evaluate_all_reads_the_ledger_once_and_agrees() {
        let gate = PermissionGate::new().with_ledger(Box::<MemoryLedger>::default());
        let acts = vec![
            act("a", "deploy", json!({"t": 1})),
            act("b", "deploy", json!({"t": 2})),
            act("c", "read_file", json!({})),
        ];
        gate.record(&acts[0], true, "r", "ok", None).unwrap();
        gate.record(&acts[1], true, "r", "ok", None).unwrap();
        gate.record(&acts[1], false, "r", "changed my mind", None).unwrap();
        let all = gate.evaluate_all(&acts, PermissionTier::SandboxEdit).unwrap();
        let one: Vec<_> = acts.iter().map(|a| gate.evaluate(a, PermissionTier::SandboxEdit).unwrap()).collect();
        assert_eq!(all, one);
        let kinds: Vec<_> = all.iter().map(|d| d.decision).collect();
        assert_eq!(kinds, [Decision::Allow, Decision::Deny, Decision::Allow]);
    }
}
