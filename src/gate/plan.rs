//! Plans and plan items: the data model of `plan-apply-gate.md`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::preview::RenderTree;

/// What an operation does (the permission chain's own type, so the gate
/// and admission cannot drift).
pub use crate::permission::ToolKind;

/// Declared risk class of an operation (`tools-and-permissions.md`): the
/// permission chain's own type, so the gate and the rules cannot drift.
pub use crate::permission::RiskClass;

/// Which producer built a plan item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProducerCategory {
    /// A tool call (the default).
    #[default]
    Tool,
    /// A slash command call.
    SlashCommand,
}

/// The decision of a plan item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Not decided yet.
    #[default]
    Pending,
    /// Applied without further interaction.
    Allow,
    /// Blocked until a client decision arrives.
    Ask,
    /// Never executed; the model sees a synthesized denial result.
    Deny,
}

impl Decision {
    /// The snake_case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Pending => "pending",
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }

    /// Strictness rank: allow < pending/ask < deny. Pending counts as ask
    /// (undecided is never allow).
    pub(crate) fn strictness(self) -> u8 {
        match self {
            Decision::Allow => 0,
            Decision::Pending | Decision::Ask => 1,
            Decision::Deny => 2,
        }
    }
}

/// One call proposed by the model, as the gate receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The model's id of the call (the tool_use id).
    pub call_id: String,
    /// The provider serving the operation; default "".
    #[serde(default)]
    pub provider: String,
    /// The operation (tool or slash command) name.
    #[serde(alias = "tool", alias = "name")]
    pub operation_name: String,
    /// The parsed arguments; default `{}`.
    #[serde(default = "empty_object", alias = "arguments", alias = "parameters")]
    pub input: Value,
    /// Which producer category made the call; default `tool`.
    #[serde(default)]
    pub producer_category: ProducerCategory,
}

impl Call {
    /// A tool call of `operation_name` on `provider` with `input`.
    pub fn new(
        call_id: impl Into<String>,
        provider: impl Into<String>,
        operation_name: impl Into<String>,
        input: Value,
    ) -> Self {
        Call {
            call_id: call_id.into(),
            provider: provider.into(),
            operation_name: operation_name.into(),
            input,
            producer_category: ProducerCategory::Tool,
        }
    }
}

/// What the provider advertises about an operation (its ToolSchema or
/// SlashCommandSpec): the source of the snapshot fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationSpec {
    /// The provider; default "".
    #[serde(default)]
    pub provider: String,
    /// The operation name.
    #[serde(alias = "tool", alias = "name")]
    pub operation_name: String,
    /// The kind; default `resource` (fail closed).
    #[serde(default)]
    pub kind: ToolKind,
    /// The risk class; default `undeclared`.
    #[serde(default)]
    pub risk: RiskClass,
    /// Human-readable description; default "".
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

impl OperationSpec {
    /// A spec with the given kind and risk, no description or schema.
    pub fn new(
        provider: impl Into<String>,
        operation_name: impl Into<String>,
        kind: ToolKind,
        risk: RiskClass,
    ) -> Self {
        OperationSpec {
            provider: provider.into(),
            operation_name: operation_name.into(),
            kind,
            risk,
            description: String::new(),
            parameters: None,
        }
    }
}

/// Looks up the spec of an operation at plan time.
pub trait OperationCatalog {
    /// The current spec of `(provider, operation_name)`, if known.
    fn lookup(&self, provider: &str, operation_name: &str) -> Option<OperationSpec>;
}

impl OperationCatalog for [OperationSpec] {
    fn lookup(&self, provider: &str, operation_name: &str) -> Option<OperationSpec> {
        self.iter().find(|s| s.provider == provider && s.operation_name == operation_name).cloned()
    }
}

impl OperationCatalog for Vec<OperationSpec> {
    fn lookup(&self, provider: &str, operation_name: &str) -> Option<OperationSpec> {
        self.as_slice().lookup(provider, operation_name)
    }
}

/// A catalog indexed by `(provider, operation_name)`: constant-time lookups
/// for large batches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperationIndex {
    specs: std::collections::HashMap<(String, String), OperationSpec>,
}

impl OperationIndex {
    /// Indexes `specs`; a later spec of the same pair replaces an earlier one.
    pub fn new(specs: impl IntoIterator<Item = OperationSpec>) -> Self {
        OperationIndex {
            specs: specs.into_iter().map(|s| ((s.provider.clone(), s.operation_name.clone()), s)).collect(),
        }
    }

    /// Adds or replaces a spec (plans already built keep their snapshots).
    pub fn insert(&mut self, spec: OperationSpec) {
        self.specs.insert((spec.provider.clone(), spec.operation_name.clone()), spec);
    }
}

impl OperationCatalog for OperationIndex {
    fn lookup(&self, provider: &str, operation_name: &str) -> Option<OperationSpec> {
        self.specs.get(&(provider.to_string(), operation_name.to_string())).cloned()
    }
}

/// One gated call of a plan. `kind`, `risk`, `description` and `preview` are
/// snapshots taken at plan time and never re-resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanItem {
    /// Unique id of the item (`<turn_id>.<index>`).
    pub id: String,
    /// The model's call id.
    pub call_id: String,
    /// The provider.
    pub provider: String,
    /// The operation name.
    pub operation_name: String,
    /// The parsed arguments as the model sent them.
    pub input: Value,
    /// The decision.
    #[serde(default)]
    pub decision: Decision,
    /// Name of the policy rule, layer or subscriber that produced the decision.
    #[serde(default)]
    pub decided_by: String,
    /// Snapshot: the kind.
    #[serde(default)]
    pub kind: ToolKind,
    /// Snapshot: the risk class.
    #[serde(default)]
    pub risk: RiskClass,
    /// Snapshot: the description.
    #[serde(default)]
    pub description: String,
    /// Snapshot: the dry-run preview, resource items only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<RenderTree>,
    /// Which producer built the item.
    #[serde(default)]
    pub producer_category: ProducerCategory,
    /// Why the item got its decision (the denial reason of a deny).
    #[serde(default)]
    pub reason: String,
    /// True when an `ask` on a data_source or interactive item was turned
    /// into this `deny`.
    #[serde(default)]
    pub downgraded_from_ask: bool,
    /// The arguments to execute instead of `input`, when a decision corrected them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrected_input: Option<Value>,
    /// Snapshot: the JSON Schema of the arguments, used to validate corrections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

impl PlanItem {
    /// The arguments the item executes with: the corrected input when set.
    pub fn effective_input(&self) -> &Value {
        self.corrected_input.as_ref().unwrap_or(&self.input)
    }

    /// True when the item may execute now.
    pub fn is_allowed(&self) -> bool {
        self.decision == Decision::Allow
    }

    pub(crate) fn from_call(id: String, call: &Call, spec: Option<&OperationSpec>) -> Self {
        PlanItem {
            id,
            call_id: call.call_id.clone(),
            provider: call.provider.clone(),
            operation_name: call.operation_name.clone(),
            input: call.input.clone(),
            decision: Decision::Pending,
            decided_by: String::new(),
            kind: spec.map(|s| s.kind).unwrap_or_default(),
            risk: spec.map(|s| s.risk).unwrap_or_default(),
            description: spec.map(|s| s.description.clone()).unwrap_or_default(),
            preview: None,
            producer_category: call.producer_category,
            reason: String::new(),
            downgraded_from_ask: false,
            corrected_input: None,
            parameters: spec.and_then(|s| s.parameters.clone()),
        }
    }

    /// The call this item was built from (with the effective input).
    pub fn to_call(&self) -> Call {
        Call {
            call_id: self.call_id.clone(),
            provider: self.provider.clone(),
            operation_name: self.operation_name.clone(),
            input: self.effective_input().clone(),
            producer_category: self.producer_category,
        }
    }
}

/// Why a turn was ended by the circuit breaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakerTrip {
    /// Always `denial_circuit_open`: the turn's status.
    pub status: String,
    /// `consecutive` or `window`: which condition tripped.
    pub condition: String,
    /// The denial count that tripped it.
    pub denials: u32,
    /// A human-readable explanation.
    pub message: String,
}

/// The plan of one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The turn.
    pub turn_id: String,
    /// One item per call, in call order.
    pub items: Vec<PlanItem>,
    /// Set when the denial circuit breaker ended the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerTrip>,
}

impl Plan {
    /// The item with `id`.
    pub fn item(&self, id: &str) -> Option<&PlanItem> {
        self.items.iter().find(|i| i.id == id)
    }

    /// Items still waiting for a client decision.
    pub fn awaiting_decision(&self) -> impl Iterator<Item = &PlanItem> {
        self.items.iter().filter(|i| matches!(i.decision, Decision::Ask | Decision::Pending))
    }

    /// True when the breaker ended the turn.
    pub fn turn_ended(&self) -> bool {
        self.breaker.is_some()
    }
}

pub(crate) fn empty_object() -> Value {
    Value::Object(Map::new())
}
