//! ActionProposal and Action: what a model proposes.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

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

fn default_source() -> String {
    "unknown".to_string()
}

fn default_max_retries() -> u32 {
    3
}

/// A batch of actions submitted in one verify-then-execute round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

    /// The batch's derived rollback contract: the worst declared
    /// reversibility of its actions; an empty batch is `reversible`.
    pub fn rollback_contract(&self) -> Reversibility {
        self.actions.iter().fold(Reversibility::Reversible, |acc, a| acc.worst(a.reversibility))
    }
}

/// What kind of step an action is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureBehavior {
    /// Stop the proposal; downstream actions are not executed (default).
    #[default]
    Abort,
    /// Retry up to `max_retries` times before aborting.
    Retry,
    /// Mark this action skipped and continue.
    Skip,
}

/// An assumption about shared state the action did not produce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// A present field becomes `Some`, even when it is JSON `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    super::strict::strict_value(d).map(Some)
}

/// A single unit of agent intent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    #[serde(default, deserialize_with = "super::strict::strict_map")]
    pub parameters: Map<String, Value>,
    /// All must hold before the action runs.
    #[serde(default)]
    pub preconditions: Vec<Precondition>,
    /// Claimed state changes, used to model the action without running it.
    #[serde(default, deserialize_with = "super::strict::strict_map")]
    pub expected_effects: Map<String, Value>,
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
    pub compensation: Option<Compensation>,
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
    #[serde(default, deserialize_with = "super::strict::strict_map")]
    pub metadata: Map<String, Value>,
}

impl Action {
    /// An action of this type with every default.
    pub fn new(action_type: ActionType) -> Self {
        Action {
            id: short_id(),
            action_type,
            tool: None,
            parameters: Map::new(),
            preconditions: Vec::new(),
            expected_effects: Map::new(),
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
            metadata: Map::new(),
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
        self.compensation = Some(compensation);
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

    /// One parameter by name (the same as `parameters.get(name)`). A small
    /// map is scanned instead of hashed: parameters objects usually hold a
    /// handful of members, where a scan beats SipHash.
    pub fn param(&self, name: &str) -> Option<&Value> {
        if self.parameters.len() <= 8 {
            self.parameters.iter().find_map(|(k, v)| (k == name).then_some(v))
        } else {
            self.parameters.get(name)
        }
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
