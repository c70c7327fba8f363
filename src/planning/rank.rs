//! Ranking candidate proposals by verification and cost
//! (the spec's "CostSummary, CostTarget, CostBudget").
//!
//! `score = validity * (1 - cost_weight) + cost_efficiency * cost_weight`,
//! `cost_weight` clamped to `[0, 1]`; an invalid candidate scores 0.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::ir::{ActionProposal, ActionType, Severity};
use crate::verify::{self, VerifyOptions};

/// The soft scoring target (spec defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CostTarget {
    /// Tool calls a candidate may make at full efficiency.
    pub target_tool_calls: u64,
    /// Wall time a candidate may take at full efficiency (not estimable
    /// before execution; carried for the shape, unused by the score).
    pub target_duration_ms: f64,
    /// Actions a candidate may have at full efficiency.
    pub target_actions: u64,
    /// Weight of cost against validity, `[0, 1]`.
    pub cost_weight: f64,
}

impl Default for CostTarget {
    fn default() -> Self {
        CostTarget { target_tool_calls: 5, target_duration_ms: 5000.0, target_actions: 10, cost_weight: 0.2 }
    }
}

/// One scored candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredProposal {
    /// Position in the input.
    pub index: usize,
    /// The blended score.
    pub score: f64,
    /// 0 when invalid; else `max(0.1, 1 - 0.25 * warnings)`.
    pub validity: f64,
    /// Mean of the tool-call and action efficiencies, each
    /// `min(1, target / actual)`.
    pub cost_efficiency: f64,
    /// Verification errors.
    pub error_count: usize,
    /// Verification warnings.
    pub warning_count: usize,
    /// Actions.
    pub action_count: usize,
    /// `tool_call` actions.
    pub tool_call_count: usize,
    /// Execution levels.
    pub parallelism_levels: usize,
    /// Verification verdict.
    pub valid: bool,
    /// Distinct keys the candidate writes.
    pub state_keys_written: usize,
    /// Some unordered writers share a key.
    pub has_write_conflicts: bool,
    /// `ceil(bytes of the candidate's compact JSON / 4)`.
    pub token_estimate: u64,
    /// `score / token_estimate`.
    pub quality_per_token: f64,
}

fn efficiency(actual: usize, target: u64) -> f64 {
    if actual as u64 <= target { 1.0 } else { target as f64 / actual as f64 }
}

/// Scores each candidate against `tool_names` (when given, calls to other
/// tools are errors) and sorts by score, highest first (ties keep input order).
pub fn rank_proposals(
    candidates: &[ActionProposal],
    tool_names: Option<&[String]>,
    cost_weight: Option<f64>,
    target: &CostTarget,
) -> Vec<ScoredProposal> {
    let w = cost_weight.unwrap_or(target.cost_weight);
    let w = if w.is_nan() { target.cost_weight } else { w.clamp(0.0, 1.0) };
    let mut out: Vec<ScoredProposal> = candidates
        .iter()
        .enumerate()
        .map(|(index, p)| {
            let opts = VerifyOptions { tool_names: tool_names.map(<[String]>::to_vec), ..Default::default() };
            let v = verify::verify(p, &opts);
            let error_count = v.issues.iter().filter(|i| i.severity == Severity::Error).count();
            let warning_count = v.issues.iter().filter(|i| i.severity == Severity::Warning).count();
            let validity = if v.valid { (1.0 - 0.25 * warning_count as f64).max(0.1) } else { 0.0 };
            let tool_call_count = p.actions.iter().filter(|a| a.action_type == ActionType::ToolCall).count();
            let cost_efficiency = (efficiency(tool_call_count, target.target_tool_calls)
                + efficiency(p.actions.len(), target.target_actions))
                / 2.0;
            let score = if v.valid { validity * (1.0 - w) + cost_efficiency * w } else { 0.0 };
            let written: HashSet<&str> = p.actions.iter().flat_map(crate::dag::Dag::writes).collect();
            let bytes = serde_json::to_vec(p).map(|b| b.len()).unwrap_or(0) as u64;
            let token_estimate = bytes.div_ceil(4).max(1);
            ScoredProposal {
                index,
                score,
                validity,
                cost_efficiency,
                error_count,
                warning_count,
                action_count: p.actions.len(),
                tool_call_count,
                parallelism_levels: v.execution_levels.len(),
                valid: v.valid,
                state_keys_written: written.len(),
                has_write_conflicts: !v.conflicts.is_empty(),
                token_estimate,
                quality_per_token: score / token_estimate as f64,
            }
        })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    out
}
