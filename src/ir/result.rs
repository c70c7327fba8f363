//! Results of execution: ActionResult, ProposalResult, cost accounting.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Where an action is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionStatus {
    /// Proposed, not yet validated.
    Proposed,
    /// Passed admission.
    Validated,
    /// Refused before running; nothing ran.
    Rejected,
    /// Running.
    Executing,
    /// Ran and succeeded.
    Succeeded,
    /// Ran and failed.
    Failed,
    /// Never attempted.
    Skipped,
}

impl ActionStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Proposed => "proposed",
            ActionStatus::Validated => "validated",
            ActionStatus::Rejected => "rejected",
            ActionStatus::Executing => "executing",
            ActionStatus::Succeeded => "succeeded",
            ActionStatus::Failed => "failed",
            ActionStatus::Skipped => "skipped",
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The outcome of one action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionResult {
    /// The action.
    pub action_id: String,
    /// Final status.
    pub status: ActionStatus,
    /// The tool's output, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The error or warning, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Key → `StateMutation` wire value (`{"op":"set","value":…}` / `{"op":"delete"}`).
    #[serde(default)]
    pub state_changes: Map<String, Value>,
    /// Wall time spent, when the action ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// When the result was recorded.
    pub timestamp: chrono::DateTime<chrono::Utc>,
    /// The enclosing state transaction was restored. Omitted when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub rolled_back: bool,
    /// The tool returned a terminal failure. Omitted when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub terminal: bool,
    /// The action's compensation ran successfully after an abort. Omitted when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub compensated: bool,
    /// The compensation's error, when it ran and failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation_error: Option<String>,
}

impl ActionResult {
    /// A result with this status and nothing else.
    pub fn new(action_id: impl Into<String>, status: ActionStatus) -> Self {
        ActionResult {
            action_id: action_id.into(),
            status,
            output: None,
            error: None,
            state_changes: Map::new(),
            duration_ms: None,
            timestamp: crate::events::wall_now(),
            rolled_back: false,
            terminal: false,
            compensated: false,
            compensation_error: None,
        }
    }
}

/// A typed state change: set (including to `null`) or delete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum StateMutation {
    /// Set the key to the value (which may be `null`).
    Set {
        /// The new value.
        value: Value,
    },
    /// Remove the key.
    Delete,
}

impl StateMutation {
    /// The wire value.
    pub fn to_value(&self) -> Value {
        match self {
            StateMutation::Set { value } => serde_json::json!({"op": "set", "value": value}),
            StateMutation::Delete => serde_json::json!({"op": "delete"}),
        }
    }
}

/// Post-execution accounting.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CostSummary {
    /// Tool invocations (attempts included).
    #[serde(default)]
    pub tool_calls: u64,
    /// Actions that ran: succeeded plus failed.
    #[serde(default)]
    pub actions_executed: u64,
    /// Actions refused before running. Absent in summaries of older runtimes.
    #[serde(default)]
    pub actions_rejected: u64,
    /// Actions never attempted.
    #[serde(default)]
    pub actions_skipped: u64,
    /// Total wall time.
    #[serde(default)]
    pub total_duration_ms: f64,
    /// Retries performed.
    #[serde(default)]
    pub retries: u64,
}

/// The soft scoring target used to rank candidate proposals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostTarget {
    /// Default 5.
    #[serde(default = "d_tool_calls")]
    pub target_tool_calls: u64,
    /// Default 5000.0.
    #[serde(default = "d_duration")]
    pub target_duration_ms: f64,
    /// Default 10.
    #[serde(default = "d_actions")]
    pub target_actions: u64,
    /// In [0, 1]; default 0.2.
    #[serde(default = "d_weight")]
    pub cost_weight: f64,
}

fn d_tool_calls() -> u64 {
    5
}
fn d_duration() -> f64 {
    5000.0
}
fn d_actions() -> u64 {
    10
}
fn d_weight() -> f64 {
    0.2
}

impl Default for CostTarget {
    fn default() -> Self {
        CostTarget {
            target_tool_calls: d_tool_calls(),
            target_duration_ms: d_duration(),
            target_actions: d_actions(),
            cost_weight: d_weight(),
        }
    }
}

impl CostTarget {
    /// `success_likelihood * (1 - cost_weight) + cost_efficiency * cost_weight`,
    /// with `cost_weight` clamped to [0, 1].
    pub fn score(&self, success_likelihood: f64, cost_efficiency: f64) -> f64 {
        let w = self.cost_weight.clamp(0.0, 1.0);
        success_likelihood * (1.0 - w) + cost_efficiency * w
    }
}

/// The hard budget: proposals exceeding it are rejected at verification.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CostBudget {
    /// Maximum number of actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_actions: Option<u64>,
    /// Maximum number of tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u64>,
    /// Maximum total duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_ms: Option<f64>,
}

/// What `proposal.submit` / `executeProposal` / `execute_proposal` return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalResult {
    /// The proposal.
    pub proposal_id: String,
    /// One result per action, in proposal order.
    pub results: Vec<ActionResult>,
    /// The accounting.
    pub cost: CostSummary,
}

/// How a tool failure is classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolFailureClassification {
    /// Follows the action's failure behavior.
    #[default]
    Ordinary,
    /// Stops retries, aborts and rolls back the proposal.
    Terminal,
}

/// A typed failure returned by a tool executor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolFailure {
    /// The message.
    pub message: String,
    /// Ordinary unless the tool said otherwise; never inferred from the text.
    #[serde(default)]
    pub classification: ToolFailureClassification,
}

impl ToolFailure {
    /// An ordinary failure.
    pub fn ordinary(message: impl Into<String>) -> Self {
        ToolFailure { message: message.into(), classification: ToolFailureClassification::Ordinary }
    }

    /// A terminal failure.
    pub fn terminal(message: impl Into<String>) -> Self {
        ToolFailure { message: message.into(), classification: ToolFailureClassification::Terminal }
    }

    /// True when terminal.
    pub fn is_terminal(&self) -> bool {
        self.classification == ToolFailureClassification::Terminal
    }
}

impl From<String> for ToolFailure {
    fn from(message: String) -> Self {
        ToolFailure::ordinary(message)
    }
}

impl From<&str> for ToolFailure {
    fn from(message: &str) -> Self {
        ToolFailure::ordinary(message)
    }
}

impl std::fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
