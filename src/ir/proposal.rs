//! ActionProposal and Action: what a model proposes.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::Object;

use super::precondition::Precondition;
use super::reversibility::{Compensation, Reversibility};
use super::stream::ToolInvocationMode;

/// 12 lowercase hex characters taken from a fresh UUIDv4.
pub fn short_id() -> String {
    let mut s = uuid::Uuid::new_v4().simple().to_string();
    s.truncate(12);
    s
}

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

pub(super) fn default_source() -> String {
    "unknown".to_string()
}

pub(super) fn default_max_retries() -> u32 {
    3
}

/// A batch of actions submitted in one verify-then-execute round.
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`ActionProposal::new`] and the `with_*` setters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ActionProposal {
    /// 12 hex chars from a UUIDv4 if omitted.
    #[serde(default = "short_id")]
    pub id: String,
    /// Who produced this proposal; default "unknown".
    #[serde(default = "default_source")]
    pub source: String,
    /// The actions.
    #[serde(deserialize_with = "presized_actions")]
    pub actions: Vec<Action>,
    /// When it was produced; default now.
    #[serde(default = "now")]
    pub timestamp: chrono::DateTime<chrono::Utc>,
    /// Freeform, passed through to the event log.
    #[serde(default, deserialize_with = "super::strict::strict_map")]
    pub context: Map<String, Value>,
}

/// The `actions` list, allocated once at the size [`super::parse_proposal`]
/// estimated from the text (or the sequence's own length, when it knows it)
/// instead of doubling from empty: an `Action` is several hundred bytes, so
/// 10,000 of them would otherwise be copied through a dozen reallocations
/// (and fault in twice the memory). Errors are serde's own for a `Vec`.
fn presized_actions<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Action>, D::Error> {
    struct Actions;
    impl<'de> serde::de::Visitor<'de> for Actions {
        type Value = Vec<Action>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Action>, A::Error> {
            /// At most this many slots from an untrusted length.
            const KNOWN_CAP: usize = 4096;
            let hint = super::parse::take_actions_capacity().max(seq.size_hint().unwrap_or(0).min(KNOWN_CAP));
            let mut actions = Vec::with_capacity(hint);
            while let Some(a) = seq.next_element()? {
                actions.push(a);
            }
            super::parse::fit_actions(&mut actions);
            Ok(actions)
        }
    }
    d.deserialize_seq(Actions)
}

impl ActionProposal {
    /// A proposal of these actions with every default filled.
    pub fn new(actions: Vec<Action>) -> Self {
        ActionProposal { id: short_id(), source: default_source(), actions, timestamp: now(), context: Map::new() }
    }

    /// The same proposal with this `id`.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// The same proposal with this `source` (who produced it).
    #[must_use]
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// The same proposal with `action` appended.
    #[must_use]
    pub fn with_action(mut self, action: Action) -> Self {
        self.actions.push(action);
        self
    }

    /// The same proposal with this `timestamp` (when it was produced).
    #[must_use]
    pub fn with_timestamp(mut self, timestamp: chrono::DateTime<chrono::Utc>) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// The same proposal with `context` entry `name` set to `value`.
    #[must_use]
    pub fn with_context(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.context.insert(name.into(), value.into());
        self
    }

    /// The batch's derived rollback contract: the worst declared
    /// reversibility of its actions; an empty batch is `reversible`.
    pub fn rollback_contract(&self) -> Reversibility {
        self.actions.iter().fold(Reversibility::Reversible, |acc, a| acc.worst(a.reversibility))
    }
}

/// What kind of step an action is.
///
/// `#[non_exhaustive]`: kinds may be added, so a `match` outside this crate
/// needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ActionType {
    /// Invoke a registered tool with `parameters`.
    ToolCall,
    /// Set state keys directly (no tool dispatch).
    StateWrite,
    /// Read state keys.
    StateRead,
    /// Check that a state predicate holds; fail the proposal if not.
    Assertion,
}

impl ActionType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionType::ToolCall => "tool_call",
            ActionType::StateWrite => "state_write",
            ActionType::StateRead => "state_read",
            ActionType::Assertion => "assertion",
        }
    }
}

/// What happens when the action's tool errors or a precondition fails.
///
/// `#[non_exhaustive]`: behaviors may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureBehavior {
    /// Stop the proposal; downstream actions are not executed (default).
    #[default]
    Abort,
    /// Retry up to `max_retries` times before aborting.
    Retry,
    /// Mark this action skipped and continue.
    Skip,
}

impl FailureBehavior {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureBehavior::Abort => "abort",
            FailureBehavior::Retry => "retry",
            FailureBehavior::Skip => "skip",
        }
    }
}

/// An assumption about shared state the action did not produce.
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`StateAssumption::new`] and the `with_*` setters.
///
/// ```
/// use car_runtime::ir::StateAssumption;
///
/// let a = StateAssumption::new("balance").with_expected_value(100).with_read_version(7);
/// assert_eq!(serde_json::to_value(&a).unwrap(), serde_json::json!({"key": "balance", "expected_value": 100, "read_version": 7}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StateAssumption {
    /// The state key.
    pub key: String,
    /// The value the action believes the key holds (`null` included).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub expected_value: Option<Value>,
    /// The version of the key the action read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_version: Option<u64>,
}

impl StateAssumption {
    /// An assumption about `key` with no expected value and no read version.
    pub fn new(key: impl Into<String>) -> Self {
        StateAssumption { key: key.into(), expected_value: None, read_version: None }
    }

    /// The same assumption, expecting the key to hold `value` (`null` included).
    #[must_use]
    pub fn with_expected_value(mut self, value: impl Into<Value>) -> Self {
        self.expected_value = Some(value.into());
        self
    }

    /// The same assumption, made at this `read_version` of the key.
    #[must_use]
    pub fn with_read_version(mut self, version: u64) -> Self {
        self.read_version = Some(version);
        self
    }
}

/// A present field becomes `Some`, even when it is JSON `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    super::strict::strict_value(d).map(Some)
}

/// A single unit of agent intent.
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`Action::new`] (or [`Action::tool_call`],
/// [`Action::state_write`], [`Action::state_read`]) and the `with_*`
/// setters; neither a struct literal nor `..Action::new(..)` compiles there:
///
/// ```compile_fail,E0639
/// use car_runtime::ir::{Action, ActionType};
///
/// let a = Action { id: "a".into(), ..Action::new(ActionType::StateRead) };
/// ```
///
/// ```
/// use car_runtime::ir::{Action, FailureBehavior, Operator, Precondition};
///
/// let a = Action::tool_call("deploy")
///     .with_id("prod")
///     .with_param("env", "prod")
///     .with_precondition(Precondition::new("staged", Operator::Eq, true.into()))
///     .with_expected_effect("deployed", true)
///     .with_idempotent(true)
///     .on_failure(FailureBehavior::Retry)
///     .with_max_retries(2);
/// assert_eq!(a.tool.as_deref(), Some("deploy"));
/// assert_eq!(a.effective_write_set(), ["deployed"]);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Action {
    /// Unique within the proposal; 12 hex chars from a UUIDv4 if omitted.
    #[serde(default = "short_id")]
    pub id: String,
    /// The kind of step.
    #[serde(rename = "type")]
    pub action_type: ActionType,
    /// Required when `type == "tool_call"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Passed verbatim to the tool callback.
    #[serde(default)]
    pub parameters: Object,
    /// All must hold before the action runs.
    #[serde(default)]
    pub preconditions: Vec<Precondition>,
    /// Claimed state changes, used to model the action without running it.
    #[serde(default)]
    pub expected_effects: Object,
    /// State keys this action reads; informs DAG ordering.
    #[serde(default)]
    pub state_dependencies: Vec<String>,
    /// Explicit ordering edges: ids of actions that must finish first
    /// (used by published example programs). Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<String>,
    /// Explicit transactional read set.
    #[serde(default)]
    pub read_set: Vec<String>,
    /// Explicit transactional write set.
    #[serde(default)]
    pub write_set: Vec<String>,
    /// Assumptions about shared state.
    #[serde(default)]
    pub assumptions: Vec<StateAssumption>,
    /// How a `tool_call` runs; default `one_shot`.
    #[serde(default)]
    pub invocation_mode: ToolInvocationMode,
    /// The rollback contract; default `irreversible`.
    #[serde(default)]
    pub reversibility: Reversibility,
    /// How to undo the action; omitted when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation: Option<Box<Compensation>>,
    /// Enables result caching and safe retry.
    #[serde(default)]
    pub idempotent: bool,
    /// Only consulted when `failure_behavior == "retry"`; default 3.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Default `abort`.
    #[serde(default)]
    pub failure_behavior: FailureBehavior,
    /// Per-attempt tool-call timeout; unbounded when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Not interpreted by the runtime.
    #[serde(default)]
    pub metadata: Object,
}

impl Action {
    /// An action of this type with every default.
    pub fn new(action_type: ActionType) -> Self {
        Action { id: short_id(), ..Action::blank(action_type) }
    }

    /// [`Action::new`] with an empty `id` (drawing one costs a UUID, which a
    /// parser that reads the id from the text need not pay).
    pub(super) fn blank(action_type: ActionType) -> Self {
        Action {
            id: String::new(),
            action_type,
            tool: None,
            parameters: Object::new(),
            preconditions: Vec::new(),
            expected_effects: Object::new(),
            state_dependencies: Vec::new(),
            dependencies: Vec::new(),
            read_set: Vec::new(),
            write_set: Vec::new(),
            assumptions: Vec::new(),
            invocation_mode: ToolInvocationMode::OneShot,
            reversibility: Reversibility::Irreversible,
            compensation: None,
            idempotent: false,
            max_retries: default_max_retries(),
            failure_behavior: FailureBehavior::Abort,
            timeout_ms: None,
            metadata: Object::new(),
        }
    }

    /// A `tool_call` of `tool` with every default.
    pub fn tool_call(tool: impl Into<String>) -> Self {
        let mut a = Action::new(ActionType::ToolCall);
        a.tool = Some(tool.into());
        a
    }

    /// A `state_write` of `value` at `key` with every default.
    pub fn state_write(key: impl Into<String>, value: impl Into<Value>) -> Self {
        Action::new(ActionType::StateWrite).with_param("key", key.into()).with_param("value", value)
    }

    /// A `state_read` of `key` with every default.
    pub fn state_read(key: impl Into<String>) -> Self {
        Action::new(ActionType::StateRead).with_param("key", key.into())
    }

    /// The same action with this `id`.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// The same action with parameter `name` set to `value`
    /// (`Action::tool_call("deploy").with_param("env", "staging")`).
    #[must_use]
    pub fn with_param(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.parameters.insert(name.into(), value.into());
        self
    }

    /// The same action with these `parameters` (replacing any set before).
    #[must_use]
    pub fn with_parameters(mut self, parameters: impl Into<Object>) -> Self {
        self.parameters = parameters.into();
        self
    }

    /// The same action with this `tool` (the one a `tool_call` invokes).
    #[must_use]
    pub fn with_tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// The same action with `precondition` appended to its `preconditions`.
    #[must_use]
    pub fn with_precondition(mut self, precondition: Precondition) -> Self {
        self.preconditions.push(precondition);
        self
    }

    /// The same action, claiming it sets state `key` to `value` (an
    /// `expected_effects` entry).
    #[must_use]
    pub fn with_expected_effect(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.expected_effects.insert(key.into(), value.into());
        self
    }

    /// The same action, reading state `key` (appended to `state_dependencies`).
    #[must_use]
    pub fn with_state_dependency(mut self, key: impl Into<String>) -> Self {
        self.state_dependencies.push(key.into());
        self
    }

    /// The same action with this explicit transactional `read_set`
    /// (replacing any set before).
    #[must_use]
    pub fn with_read_set<I: IntoIterator<Item = S>, S: Into<String>>(mut self, keys: I) -> Self {
        self.read_set = keys.into_iter().map(Into::into).collect();
        self
    }

    /// The same action with this explicit transactional `write_set`
    /// (replacing any set before).
    #[must_use]
    pub fn with_write_set<I: IntoIterator<Item = S>, S: Into<String>>(mut self, keys: I) -> Self {
        self.write_set = keys.into_iter().map(Into::into).collect();
        self
    }

    /// The same action with `assumption` appended to its `assumptions`.
    #[must_use]
    pub fn with_assumption(mut self, assumption: StateAssumption) -> Self {
        self.assumptions.push(assumption);
        self
    }

    /// The same action with this `invocation_mode`.
    #[must_use]
    pub fn with_invocation_mode(mut self, mode: ToolInvocationMode) -> Self {
        self.invocation_mode = mode;
        self
    }

    /// The same action with this declared `reversibility` (see also
    /// [`Action::compensated_by`]).
    #[must_use]
    pub fn with_reversibility(mut self, reversibility: Reversibility) -> Self {
        self.reversibility = reversibility;
        self
    }

    /// The same action with this `compensation`, its `reversibility`
    /// unchanged ([`Action::compensated_by`] also makes it `compensable`).
    #[must_use]
    pub fn with_compensation(mut self, compensation: Compensation) -> Self {
        self.compensation = Some(Box::new(compensation));
        self
    }

    /// The same action with `idempotent` set to `idempotent`.
    #[must_use]
    pub fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// The same action with `metadata` entry `name` set to `value`.
    #[must_use]
    pub fn with_metadata(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(name.into(), value.into());
        self
    }

    /// The same action, run only after the action `id` (a `dependencies` edge).
    #[must_use]
    pub fn after(mut self, id: impl Into<String>) -> Self {
        self.dependencies.push(id.into());
        self
    }

    /// The same action with this `failure_behavior`.
    #[must_use]
    pub fn on_failure(mut self, behavior: FailureBehavior) -> Self {
        self.failure_behavior = behavior;
        self
    }

    /// The same action with this `timeout_ms`.
    #[must_use]
    pub fn with_timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// The same action with this `max_retries`.
    #[must_use]
    pub fn with_max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// The same action, `compensable` by `compensation`.
    #[must_use]
    pub fn compensated_by(mut self, compensation: Compensation) -> Self {
        self.reversibility = Reversibility::Compensable;
        self.compensation = Some(Box::new(compensation));
        self
    }

    /// `compensable` with no `compensation`: representable but incoherent.
    pub fn missing_required_compensation(&self) -> bool {
        self.reversibility == Reversibility::Compensable && self.compensation.is_none()
    }

    /// The key a `state_write` sets, from its `key` parameter.
    pub fn state_write_key(&self) -> Option<&str> {
        if self.action_type == ActionType::StateWrite { self.param("key").and_then(Value::as_str) } else { None }
    }

    /// One parameter by name (the same as `parameters.get(name)`).
    pub fn param(&self, name: &str) -> Option<&Value> {
        self.parameters.get(name)
    }

    /// The transactional read set: explicit, or `state_dependencies` plus
    /// assumption keys (first occurrence order, no duplicates).
    pub fn effective_read_set(&self) -> Vec<String> {
        if !self.read_set.is_empty() {
            return dedup(self.read_set.iter().map(String::as_str));
        }
        dedup(self.state_dependencies.iter().map(String::as_str).chain(self.assumptions.iter().map(|a| a.key.as_str())))
    }

    /// The transactional write set: explicit, or `expected_effects` keys plus
    /// a `state_write`'s `key` parameter.
    pub fn effective_write_set(&self) -> Vec<String> {
        if !self.write_set.is_empty() {
            return dedup(self.write_set.iter().map(String::as_str));
        }
        dedup(self.expected_effects.keys().map(String::as_str).chain(self.state_write_key()))
    }
}

fn dedup<'a>(items: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items.filter(|k| seen.insert(*k)).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Operator;
    use serde_json::json;

    fn same<T: PartialEq + std::fmt::Debug + Serialize>(built: &T, literal: &T) {
        assert_eq!(built, literal);
        assert_eq!(serde_json::to_value(built).unwrap(), serde_json::to_value(literal).unwrap());
    }

    #[test]
    fn the_builders_build_what_the_struct_literals_build() {
        let pre = Precondition::new("ready", Operator::Eq, json!(true));
        let assumption = StateAssumption::new("balance").with_expected_value(Value::Null).with_read_version(4);
        same(
            &assumption,
            &StateAssumption { key: "balance".into(), expected_value: Some(Value::Null), read_version: Some(4) },
        );
        let undo = Compensation::ActionRef { action_id: "u".into() };
        let built = Action::new(ActionType::ToolCall)
            .with_id("a1")
            .with_tool("deploy")
            .with_parameters(json!({"env": "prod"}).as_object().cloned().unwrap())
            .with_param("force", true)
            .with_precondition(pre.clone())
            .with_expected_effect("deployed", true)
            .with_state_dependency("staged")
            .after("a0")
            .with_read_set(["r"])
            .with_write_set(vec!["w".to_string()])
            .with_assumption(assumption.clone())
            .with_invocation_mode(ToolInvocationMode::Streaming)
            .with_reversibility(Reversibility::Reversible)
            .with_compensation(undo.clone())
            .with_idempotent(true)
            .with_max_retries(7)
            .on_failure(FailureBehavior::Retry)
            .with_timeout_ms(250)
            .with_metadata("owner", "ops");
        let literal = Action {
            id: "a1".into(),
            action_type: ActionType::ToolCall,
            tool: Some("deploy".into()),
            parameters: json!({"env": "prod", "force": true}).as_object().cloned().unwrap().into(),
            preconditions: vec![pre],
            expected_effects: json!({"deployed": true}).as_object().cloned().unwrap().into(),
            state_dependencies: vec!["staged".into()],
            dependencies: vec!["a0".into()],
            read_set: vec!["r".into()],
            write_set: vec!["w".into()],
            assumptions: vec![assumption],
            invocation_mode: ToolInvocationMode::Streaming,
            reversibility: Reversibility::Reversible,
            compensation: Some(Box::new(undo.clone())),
            idempotent: true,
            max_retries: 7,
            failure_behavior: FailureBehavior::Retry,
            timeout_ms: Some(250),
            metadata: json!({"owner": "ops"}).as_object().cloned().unwrap().into(),
        };
        same(&built, &literal);
        // `compensated_by` is `with_reversibility(compensable)` plus `with_compensation`.
        same(
            &Action::new(ActionType::ToolCall).with_id("c").compensated_by(undo.clone()),
            &Action::new(ActionType::ToolCall)
                .with_id("c")
                .with_reversibility(Reversibility::Compensable)
                .with_compensation(undo),
        );

        let t = chrono::DateTime::from_timestamp(1_796_000_000, 5).unwrap();
        let p = ActionProposal::new(vec![built.clone()])
            .with_id("p1")
            .with_source("bot")
            .with_timestamp(t)
            .with_context("run", 3);
        same(
            &p,
            &ActionProposal {
                id: "p1".into(),
                source: "bot".into(),
                actions: vec![built],
                timestamp: t,
                context: json!({"run": 3}).as_object().cloned().unwrap(),
            },
        );
    }
}
