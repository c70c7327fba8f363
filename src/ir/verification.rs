//! The verification result returned by `verify`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How bad a finding would be.
///
/// `#[non_exhaustive]`: severities may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Severity {
    /// Makes the proposal invalid.
    Error,
    /// Worth knowing; does not invalidate.
    Warning,
    /// Informational.
    Info,
}

impl Severity {
    /// The wire spelling: `error`, `warning` or `info`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// Which kind of check produced a finding. Deliberately not ordered.
///
/// `#[non_exhaustive]`: tiers may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EvidenceTier {
    /// Decides the property over the inputs it was handed.
    DecisionProcedure,
    /// A proxy signal over complete inputs.
    Heuristic,
    /// An exact measurement over incomplete inputs.
    Sampled,
}

impl EvidenceTier {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceTier::DecisionProcedure => "decision_procedure",
            EvidenceTier::Heuristic => "heuristic",
            EvidenceTier::Sampled => "sampled",
        }
    }
}

/// One finding of `verify`.
///
/// `#[non_exhaustive]`: fields may be added; `verify` produces it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VerificationIssue {
    /// The action, or `"proposal"` for proposal-wide findings.
    pub action_id: String,
    /// Severity.
    pub severity: Severity,
    /// What was found.
    pub message: String,
    /// How it was derived. Older daemons omit it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<EvidenceTier>,
}

/// One check of the evidence bundle.
///
/// `#[non_exhaustive]`: fields may be added; `verify` produces it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EvidenceCheck {
    /// Stable check name, e.g. `write_conflicts`.
    pub name: String,
    /// Whether it ran (some need a registry or schemas).
    pub ran: bool,
    /// What it verifies.
    pub verifies: String,
    /// What it cannot verify.
    pub cannot_verify: String,
    /// Number of issues it produced.
    pub findings: u64,
    /// How its findings are derived.
    pub tier: EvidenceTier,
}

/// What the verdict rests on and what it leaves open.
///
/// `#[non_exhaustive]`: fields may be added; `verify` produces it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Evidence {
    /// Every check, ran or not.
    #[serde(default)]
    pub checks: Vec<EvidenceCheck>,
    /// What the verdict assumes.
    #[serde(default)]
    pub assumptions: Vec<String>,
    /// What was not examined.
    #[serde(default)]
    pub untested_regions: Vec<String>,
    /// Risks that remain.
    #[serde(default)]
    pub residual_risks: Vec<String>,
    /// In [0, 1].
    #[serde(default)]
    pub confidence: f64,
}

/// Returned by `verify`.
///
/// `#[non_exhaustive]`: fields may be added; `verify` produces it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VerificationResult {
    /// False iff an issue has severity `error`.
    pub valid: bool,
    /// Flat list of findings.
    #[serde(default)]
    pub issues: Vec<VerificationIssue>,
    /// Post-execution state if the proposal ran with no failures.
    #[serde(default)]
    pub simulated_state: Map<String, Value>,
    /// Layered topological order.
    #[serde(default)]
    pub execution_levels: Vec<Vec<String>>,
    /// `(action_a, action_b, key)`: unordered writers of one key.
    #[serde(default)]
    pub conflicts: Vec<(String, String, String)>,
    /// The evidence bundle.
    #[serde(default)]
    pub evidence: Evidence,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severity_as_str_is_the_wire_spelling() {
        for s in [Severity::Error, Severity::Warning, Severity::Info] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn evidence_tier_as_str_is_the_wire_spelling() {
        for t in [EvidenceTier::DecisionProcedure, EvidenceTier::Heuristic, EvidenceTier::Sampled] {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }
}
