//! The event log: what the runtime did, in order, queryable, with retention
//! and opt-in SHA-256 hash chaining.
//!
//! Only `ProposalReceived` carries raw parameters (the proposal itself);
//! per-action outcome events carry `params_digest`, the lowercase hex SHA-256
//! of the RFC 8785 (JCS) canonical form of the action's `parameters`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::ir::{ActionProposal, json_eq};
use crate::{Error, Result};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// A proposal was submitted; carries the proposal with raw parameters.
    ProposalReceived,
    /// An action was refused before running (admission or precondition).
    ActionRejected,
    /// An attempt of an action started.
    ActionExecuting,
    /// An action succeeded.
    ActionSucceeded,
    /// An action failed (its final attempt).
    ActionFailed,
    /// A failed attempt will be retried.
    ActionRetrying,
    /// An action was never attempted.
    ActionSkipped,
    /// A state key changed.
    StateChanged,
    /// A policy denied an action.
    PolicyViolation,
    /// An aborted proposal's state writes were restored.
    StateRolledBack,
    /// A compensation ran and succeeded.
    CompensationSucceeded,
    /// A compensation ran and failed.
    CompensationFailed,
    /// A detached tool was started.
    ToolStarted,
    /// A proposal finished; carries its cost and whether it aborted.
    ProposalCompleted,
    /// The admission stage decided an action (verdict, deciding layer and
    /// rule, required and granted tier; never parameter values).
    AdmissionDecided,
    /// A command ran through the subprocess executor (`shell` or a
    /// subprocess tool): its sandbox profile and how it ended.
    SandboxRun,
    /// A run started (`runs_start`): its id, agent and intent.
    RunStarted,
    /// A run recorded a model turn: model, token usage, tool call names.
    RunModelTurn,
    /// A run completed with its outcome.
    RunCompleted,
    /// A proposal suspended on ask approvals (`crate::checkpoint`): its
    /// suspension id, the pending approvals and its cost so far.
    ProposalSuspended,
    /// A suspended proposal was resumed (its suspension id).
    ProposalResumed,
    /// A sweeper rolled back the state writes of a run whose runner died
    /// (`Runtime::sweep`): its journal id, the keys restored and not.
    ProposalSwept,
    /// A tool wrote to its context's log (`log(level, msg, data?)`,
    /// [`crate::api::runtime::CarRuntime::tool_log`]): its tool, request id,
    /// level, message and data.
    ToolLog,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 23] = [
        EventKind::ProposalReceived,
        EventKind::ActionRejected,
        EventKind::ActionExecuting,
        EventKind::ActionSucceeded,
        EventKind::ActionFailed,
        EventKind::ActionRetrying,
        EventKind::ActionSkipped,
        EventKind::StateChanged,
        EventKind::PolicyViolation,
        EventKind::StateRolledBack,
        EventKind::CompensationSucceeded,
        EventKind::CompensationFailed,
        EventKind::ToolStarted,
        EventKind::ProposalCompleted,
        EventKind::AdmissionDecided,
        EventKind::SandboxRun,
        EventKind::RunStarted,
        EventKind::RunModelTurn,
        EventKind::RunCompleted,
        EventKind::ProposalSuspended,
        EventKind::ProposalResumed,
        EventKind::ProposalSwept,
        EventKind::ToolLog,
    ];

    /// The wire spelling (`ActionSucceeded`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::ProposalReceived => "ProposalReceived",
            EventKind::ActionRejected => "ActionRejected",
            EventKind::ActionExecuting => "ActionExecuting",
            EventKind::ActionSucceeded => "ActionSucceeded",
            EventKind::ActionFailed => "ActionFailed",
            EventKind::ActionRetrying => "ActionRetrying",
            EventKind::ActionSkipped => "ActionSkipped",
            EventKind::StateChanged => "StateChanged",
            EventKind::PolicyViolation => "PolicyViolation",
            EventKind::StateRolledBack => "StateRolledBack",
            EventKind::CompensationSucceeded => "CompensationSucceeded",
            EventKind::CompensationFailed => "CompensationFailed",
            EventKind::ToolStarted => "ToolStarted",
            EventKind::ProposalCompleted => "ProposalCompleted",
            EventKind::AdmissionDecided => "AdmissionDecided",
            EventKind::SandboxRun => "SandboxRun",
            EventKind::RunStarted => "RunStarted",
            EventKind::RunModelTurn => "RunModelTurn",
            EventKind::RunCompleted => "RunCompleted",
            EventKind::ProposalSuspended => "ProposalSuspended",
            EventKind::ProposalResumed => "ProposalResumed",
            EventKind::ProposalSwept => "ProposalSwept",
            EventKind::ToolLog => "ToolLog",
        }
    }

    /// Parses a wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Which per-action record an [`ActionEvent`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionPhase {
    /// An attempt started.
    Executing,
    /// The action succeeded.
    Succeeded,
    /// The action failed.
    Failed,
    /// A failed attempt will be retried.
    Retrying,
}

/// Per-action event data, rendered lazily from the proposal it belongs to
/// (so recording one costs no JSON building on the hot path).
///
/// The log keeps every record it holds, three or more an action, so the
/// record is small (48 bytes): what most records lack (an error, a cache
/// hit) is boxed in [`ActionDetail`].
#[derive(Debug, Clone)]
pub struct ActionEvent {
    /// The record.
    pub phase: ActionPhase,
    /// A terminal failure.
    pub terminal: bool,
    /// 1-based attempt (the next attempt for `Retrying`).
    pub attempt: u32,
    /// The proposal.
    pub proposal: Arc<ActionProposal>,
    /// Index of the action in the proposal.
    pub index: usize,
    /// Wall time of the action so far.
    pub duration_ms: Option<f64>,
    /// The error, its class and the cache the result came from, when any
    /// ([`ActionDetail::boxed`]).
    pub detail: Option<Box<ActionDetail>>,
}

/// What an [`ActionEvent`] rarely has.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActionDetail {
    /// The error (failed) or previous error (retrying).
    pub error: Option<String>,
    /// The normalized error class.
    pub error_class: Option<&'static str>,
    /// Served from a cache: `idempotency` or `ttl`.
    pub cached: Option<&'static str>,
}

impl ActionDetail {
    /// The detail of these parts; `None` when there is none.
    pub fn boxed(
        error: Option<String>,
        error_class: Option<&'static str>,
        cached: Option<&'static str>,
    ) -> Option<Box<Self>> {
        (error.is_some() || error_class.is_some() || cached.is_some())
            .then(|| Box::new(ActionDetail { error, error_class, cached }))
    }
}

impl ActionEvent {
    /// The error (failed) or previous error (retrying).
    pub fn error(&self) -> Option<&str> {
        self.detail.as_ref()?.error.as_deref()
    }

    /// The normalized error class.
    pub fn error_class(&self) -> Option<&'static str> {
        self.detail.as_ref()?.error_class
    }

    /// Served from a cache: `idempotency` or `ttl`.
    pub fn cached(&self) -> Option<&'static str> {
        self.detail.as_ref()?.cached
    }

    /// [`ActionEvent::to_value`]'s RFC 8785 text, written straight from the
    /// record; `false` when it would not read back exactly.
    fn write_canonical(&self, out: &mut Vec<u8>) -> bool {
        let Some(a) = self.proposal.actions.get(self.index) else {
            out.extend_from_slice(b"null");
            return true;
        };
        let ended = matches!(self.phase, ActionPhase::Succeeded | ActionPhase::Failed);
        let mut m = crate::canonical::Members::new(out);
        if self.phase != ActionPhase::Retrying {
            m.str("action_type", a.action_type.as_str());
        }
        m.value("attempt", &Value::from(self.attempt));
        if let Some(c) = self.cached() {
            m.str("cached", c);
        }
        if let Some(d) = self.duration_ms {
            m.value("duration_ms", &json!(d));
        }
        if self.phase == ActionPhase::Failed {
            m.opt_str("error", self.error());
        }
        if matches!(self.phase, ActionPhase::Failed | ActionPhase::Retrying) {
            m.opt_str("error_class", self.error_class());
        }
        if ended {
            m.object("expected_effects", &a.expected_effects);
            m.str("params_digest", &params_digest(&a.parameters));
        }
        if self.phase == ActionPhase::Retrying {
            m.opt_str("previous_error", self.error());
        }
        if self.phase == ActionPhase::Failed {
            m.bool("terminal", self.terminal);
        }
        m.opt_str("tool", a.tool.as_deref());
        let exact = m.exact;
        m.end();
        exact
    }

    fn to_value(&self) -> Value {
        let Some(a) = self.proposal.actions.get(self.index) else { return Value::Null };
        let mut m = Map::new();
        if self.phase != ActionPhase::Retrying {
            m.insert("action_type".into(), Value::String(a.action_type.as_str().into()));
        }
        m.insert("tool".into(), a.tool.clone().map_or(Value::Null, Value::String));
        m.insert("attempt".into(), Value::from(self.attempt));
        if matches!(self.phase, ActionPhase::Succeeded | ActionPhase::Failed) {
            m.insert("params_digest".into(), Value::String(params_digest(&a.parameters)));
            m.insert("expected_effects".into(), a.expected_effects.to_value());
        }
        match self.phase {
            ActionPhase::Failed => {
                m.insert("error".into(), self.error().map_or(Value::Null, Value::from));
                m.insert("error_class".into(), self.error_class().map_or(Value::Null, Value::from));
                m.insert("terminal".into(), Value::Bool(self.terminal));
            }
            ActionPhase::Retrying => {
                m.insert("previous_error".into(), self.error().map_or(Value::Null, Value::from));
                m.insert("error_class".into(), self.error_class().map_or(Value::Null, Value::from));
            }
            _ => {}
        }
        if let Some(d) = self.duration_ms {
            m.insert("duration_ms".into(), json!(d));
        }
        if let Some(c) = self.cached() {
            m.insert("cached".into(), Value::String(c.into()));
        }
        Value::Object(m)
    }
}

/// An event's payload; the proposal of `ProposalReceived` and per-action
/// records are rendered lazily.
#[derive(Debug, Clone)]
pub enum EventData {
    /// A JSON object.
    Value(Box<Value>),
    /// The submitted proposal, serialized on demand.
    Proposal(Arc<ActionProposal>),
    /// A per-action record.
    Action(ActionEvent),
    /// A state change made by an action, rendered from the action itself:
    /// a `state_write` (`effect: None`) or its `effect`-th expected effect.
    ActionState {
        /// The proposal.
        proposal: Arc<ActionProposal>,
        /// Index of the action.
        index: usize,
        /// Index into the action's `expected_effects`, for a tool's effect.
        effect: Option<usize>,
        /// The tenant, when scoped.
        tenant: Option<Arc<str>>,
        /// The key's new version.
        version: u64,
    },
    /// An admission decision, rendered on demand.
    Admission(Box<AdmissionData>),
    /// A proposal's completion, rendered on demand.
    Completed(Box<CompletedData>),
}

/// The data of a `ProposalCompleted` event: `{aborted, cost,
/// cancelled_tools?}` (the tools a cancelled run left running, when any).
/// Kept typed: a long-lived runtime's log holds one a proposal, and as a
/// JSON value it was about a kilobyte.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedData {
    /// The proposal aborted.
    pub aborted: bool,
    /// What it cost.
    pub cost: crate::ir::CostSummary,
    /// `{action_id, tool, handle}` of each tool left running; empty when none.
    pub cancelled_tools: Vec<Value>,
}

impl CompletedData {
    /// [`CompletedData::to_value`]'s RFC 8785 text, written straight from
    /// the record; `false` when it would not read back exactly.
    fn write_canonical(&self, out: &mut Vec<u8>) -> bool {
        let mut m = crate::canonical::Members::new(out);
        m.bool("aborted", self.aborted);
        if !self.cancelled_tools.is_empty() {
            m.exact &= self.cancelled_tools.iter().all(crate::canonical::reads_back);
            m.list("cancelled_tools", &self.cancelled_tools, |out, v| crate::canonical::write_canonical(v, out));
        }
        // Every field named: one added to the summary does not compile
        // until it is written here too.
        let crate::ir::CostSummary {
            tool_calls,
            actions_executed,
            actions_rejected,
            actions_skipped,
            total_duration_ms,
            retries,
        } = &self.cost;
        let mut cost = crate::canonical::Members::new(m.raw("cost"));
        cost.value("actions_executed", &Value::from(*actions_executed));
        cost.value("actions_rejected", &Value::from(*actions_rejected));
        cost.value("actions_skipped", &Value::from(*actions_skipped));
        cost.value("retries", &Value::from(*retries));
        cost.value("tool_calls", &Value::from(*tool_calls));
        cost.value("total_duration_ms", &Value::from(*total_duration_ms));
        let cost_exact = cost.exact;
        cost.end();
        let exact = m.exact && cost_exact;
        m.end();
        exact
    }

    fn to_value(&self) -> Value {
        let mut m = Map::with_capacity(3);
        m.insert("aborted".into(), Value::Bool(self.aborted));
        m.insert("cost".into(), serde_json::to_value(&self.cost).unwrap_or(Value::Null));
        if !self.cancelled_tools.is_empty() {
            m.insert("cancelled_tools".into(), Value::Array(self.cancelled_tools.clone()));
        }
        Value::Object(m)
    }
}

/// The data of an `AdmissionDecided` event: `{verdict, layer, rule?, reason,
/// required_tier?, granted_tier?, tool, stage}`. Never parameter values.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionData {
    /// `allow`, `ask` or `deny`.
    pub verdict: &'static str,
    /// The deciding layer.
    pub layer: &'static str,
    /// The matched rule, as the operator wrote it.
    pub rule: Option<Value>,
    /// Why.
    pub reason: String,
    /// The tier the action requires.
    pub required_tier: Option<&'static str>,
    /// The granted tier.
    pub granted_tier: Option<&'static str>,
    /// The tool of a tool call.
    pub tool: Option<String>,
    /// Where: `admission`, `approval`, `dispatch`, `compensation`.
    pub stage: &'static str,
    /// An ask turned into a deny by the data_source/interactive precheck.
    pub downgraded_from_ask: bool,
}

impl AdmissionData {
    /// [`AdmissionData::to_value`]'s RFC 8785 text, written straight from
    /// the record; `false` when it would not read back exactly.
    fn write_canonical(&self, out: &mut Vec<u8>) -> bool {
        let mut m = crate::canonical::Members::new(out);
        if self.downgraded_from_ask {
            m.bool("downgraded_from_ask", true);
        }
        if let Some(t) = self.granted_tier {
            m.str("granted_tier", t);
        }
        m.str("layer", self.layer);
        m.str("reason", &self.reason);
        if let Some(t) = self.required_tier {
            m.str("required_tier", t);
        }
        if let Some(r) = &self.rule {
            m.value("rule", r);
        }
        m.str("stage", self.stage);
        m.opt_str("tool", self.tool.as_deref());
        m.str("verdict", self.verdict);
        let exact = m.exact;
        m.end();
        exact
    }

    fn to_value(&self) -> Value {
        let mut m = Map::with_capacity(8);
        let s = |x: &'static str| Value::String(x.into());
        m.insert("verdict".into(), s(self.verdict));
        m.insert("layer".into(), s(self.layer));
        if let Some(r) = &self.rule {
            m.insert("rule".into(), r.clone());
        }
        m.insert("reason".into(), Value::String(self.reason.clone()));
        if let Some(t) = self.required_tier {
            m.insert("required_tier".into(), s(t));
        }
        if let Some(t) = self.granted_tier {
            m.insert("granted_tier".into(), s(t));
        }
        m.insert("tool".into(), self.tool.clone().map_or(Value::Null, Value::String));
        m.insert("stage".into(), s(self.stage));
        if self.downgraded_from_ask {
            m.insert("downgraded_from_ask".into(), Value::Bool(true));
        }
        Value::Object(m)
    }
}

/// The key and new value (`None` for a delete) of the state change an
/// [`EventData::ActionState`] stands for: the `effect`-th expected effect of
/// the action, or its `state_write`. `None` when the proposal has no such
/// action or effect.
fn action_state(proposal: &ActionProposal, index: usize, effect: Option<usize>) -> Option<(&str, Option<&Value>)> {
    static NULL: Value = Value::Null;
    let a = proposal.actions.get(index)?;
    Some(match effect {
        Some(e) => {
            let (k, v) = a.expected_effects.iter().nth(e)?;
            (k.as_str(), Some(v))
        }
        None => {
            let delete = a.param("delete").and_then(Value::as_bool) == Some(true);
            (a.state_write_key().unwrap_or_default(), (!delete).then(|| a.param("value").unwrap_or(&NULL)))
        }
    })
}

/// A state record `{key, tenant, version, op, value?}` as a value.
fn state_value(key: &str, tenant: Option<&str>, version: u64, value: Option<&Value>) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), Value::String(key.into()));
    m.insert("tenant".into(), tenant.map_or(Value::Null, |t| Value::String(t.into())));
    m.insert("version".into(), Value::from(version));
    match value {
        Some(v) => {
            m.insert("op".into(), Value::String("set".into()));
            m.insert("value".into(), v.clone());
        }
        None => {
            m.insert("op".into(), Value::String("delete".into()));
        }
    }
    Value::Object(m)
}

/// A state record `{key, op, tenant, value?, version}` in RFC 8785 form
/// ([`state_value`]'s); `false` when it would not read back exactly.
fn write_state(out: &mut Vec<u8>, key: &str, tenant: Option<&str>, version: u64, value: Option<&Value>) -> bool {
    let mut m = crate::canonical::Members::new(out);
    m.str("key", key);
    m.str("op", if value.is_some() { "set" } else { "delete" });
    m.opt_str("tenant", tenant);
    if let Some(v) = value {
        m.value("value", v);
    }
    m.value("version", &Value::from(version));
    let exact = m.exact;
    m.end();
    exact
}

impl EventData {
    /// The payload as JSON.
    pub fn to_value(&self) -> Value {
        match self {
            EventData::Value(v) => (**v).clone(),
            EventData::Proposal(p) => serde_json::to_value(&**p).unwrap_or(Value::Null),
            EventData::Action(a) => a.to_value(),
            EventData::ActionState { proposal, index, effect, tenant, version } => {
                match action_state(proposal, *index, *effect) {
                    Some((key, value)) => state_value(key, tenant.as_deref(), *version, value),
                    None => Value::Null,
                }
            }
            EventData::Admission(a) => a.to_value(),
            EventData::Completed(c) => c.to_value(),
        }
    }

    /// Appends the RFC 8785 text of [`EventData::to_value`] to `out`, the
    /// proposal, per-action, admission and state records straight from the
    /// record.
    /// Returns the payload as a value when that text would not read back as
    /// it (a number the canonical form changes, see
    /// [`crate::canonical::reads_back`]), for a writer that keeps it exact.
    pub(crate) fn write_canonical(&self, out: &mut Vec<u8>) -> Option<Value> {
        let exact = match self {
            EventData::Action(a) => a.write_canonical(out),
            EventData::Admission(a) => a.write_canonical(out),
            EventData::Completed(c) => c.write_canonical(out),
            EventData::ActionState { proposal, index, effect, tenant, version } => {
                match action_state(proposal, *index, *effect) {
                    Some((key, value)) => write_state(out, key, tenant.as_deref(), *version, value),
                    None => {
                        out.extend_from_slice(b"null");
                        true
                    }
                }
            }
            EventData::Value(v) => {
                crate::canonical::write_canonical(v, out);
                crate::canonical::reads_back(v)
            }
            EventData::Proposal(p) => crate::ir::write::proposal_canonical(p, out),
        };
        (!exact).then(|| self.to_value())
    }

    fn field(&self, key: &str) -> Option<Value> {
        match self {
            EventData::Value(v) => v.get(key).cloned(),
            _ => self.to_value().get(key).cloned(),
        }
    }
}

/// One record of the log.
#[derive(Debug, Clone)]
pub struct Event {
    /// Sequence number, increasing from 1 over the runtime's life.
    pub id: u64,
    /// What happened.
    pub kind: EventKind,
    /// When.
    pub timestamp: DateTime<Utc>,
    /// The proposal, when any.
    pub proposal_id: Option<Arc<str>>,
    /// The action, when any.
    pub action_id: Option<Arc<str>>,
    /// The payload.
    pub data: EventData,
    /// The hash chain's link, when chaining is on (boxed: a log without
    /// chaining holds one word for it; [`Event::hash`], [`Event::prev_hash`]).
    pub chain: Option<Box<ChainLink>>,
}

/// An event's place in the hash chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainLink {
    /// Hash of the previous chained event; `None` for the first.
    pub prev_hash: Option<String>,
    /// This event's hash; `None` for a link not yet (or no longer) hashed.
    pub hash: Option<String>,
}

impl ChainLink {
    /// The link of these hashes; `None` when both are absent.
    pub fn boxed(prev_hash: Option<String>, hash: Option<String>) -> Option<Box<Self>> {
        (prev_hash.is_some() || hash.is_some()).then(|| Box::new(ChainLink { prev_hash, hash }))
    }
}

impl Event {
    /// Hash of the previous chained event (chaining on).
    pub fn prev_hash(&self) -> Option<&str> {
        self.chain.as_ref()?.prev_hash.as_deref()
    }

    /// This event's hash (chaining on).
    pub fn hash(&self) -> Option<&str> {
        self.chain.as_ref()?.hash.as_deref()
    }

    /// `{id, kind, timestamp, proposal_id, action_id, data, prev_hash?, hash?}`.
    pub fn to_json(&self) -> Value {
        let mut m = self.content();
        if let Some(h) = self.hash() {
            m.insert("hash".into(), Value::from(h));
        }
        Value::Object(m)
    }

    /// Everything the hash covers: the record plus `prev_hash`.
    fn content(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), Value::from(self.id));
        m.insert("kind".into(), Value::String(self.kind.as_str().into()));
        m.insert("timestamp".into(), json!(self.timestamp));
        m.insert("proposal_id".into(), self.proposal_id.as_deref().map_or(Value::Null, |p| Value::String(p.into())));
        m.insert("action_id".into(), self.action_id.as_deref().map_or(Value::Null, |a| Value::String(a.into())));
        m.insert("data".into(), self.data.to_value());
        if let Some(p) = self.prev_hash() {
            m.insert("prev_hash".into(), Value::from(p));
        }
        m
    }

    /// The chain hash: SHA-256 of the JCS form of the content, hex
    /// (written straight from the event, [`Event::write_canonical`]).
    fn compute_hash(&self) -> String {
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with(|b| {
            let mut b = b.borrow_mut();
            b.clear();
            let mut data = Vec::with_capacity(256);
            self.data.write_canonical(&mut data);
            let mut ts = Vec::with_capacity(40);
            write_timestamp(&mut ts, &self.timestamp);
            self.write_canonical(self.id, self.prev_hash(), &data, &ts, &mut b);
            crate::canonical::sha256_hex(&b)
        })
    }

    /// Appends the RFC 8785 form of the content `{action_id, data, id, kind,
    /// prev_hash?, proposal_id, timestamp}` (members in code-unit order) of
    /// this event as record `id` linked to `prev`, with its `data` already
    /// in RFC 8785 form ([`EventData::write_canonical`]) and its timestamp
    /// as JSON text: byte for byte the canonicalisation of [`Event::to_json`]
    /// without `hash`.
    pub(crate) fn write_canonical(&self, id: u64, prev: Option<&str>, data: &[u8], timestamp: &[u8], c: &mut Vec<u8>) {
        fn string(out: &mut Vec<u8>, v: Option<&str>) {
            match v {
                Some(v) => crate::canonical::write_str(out, v),
                None => out.extend_from_slice(b"null"),
            }
        }
        c.extend_from_slice(br#"{"action_id":"#);
        string(c, self.action_id.as_deref());
        c.extend_from_slice(br#","data":"#);
        c.extend_from_slice(data);
        c.extend_from_slice(br#","id":"#);
        // As a JSON number is canonicalised (past 2^53, the nearest double).
        crate::canonical::write_u64(c, id);
        c.extend_from_slice(br#","kind":"#);
        string(c, Some(self.kind.as_str()));
        if prev.is_some() {
            c.extend_from_slice(br#","prev_hash":"#);
            string(c, prev);
        }
        c.extend_from_slice(br#","proposal_id":"#);
        string(c, self.proposal_id.as_deref());
        c.extend_from_slice(br#","timestamp":"#);
        c.extend_from_slice(timestamp);
        c.push(b'}');
    }
}

/// Appends `t` as JSON text, exactly as its `Serialize` writes it (RFC 3339,
/// `Z`, the fraction in 0, 3, 6 or 9 digits as needed), without the
/// formatting machinery for the years 0 to 9999; any other (and a leap
/// second) through `Serialize`.
pub(crate) fn write_timestamp(out: &mut Vec<u8>, t: &DateTime<Utc>) {
    use chrono::{Datelike, Timelike};
    let (year, nanos) = (t.year(), t.nanosecond());
    let Ok(year) = u32::try_from(year) else {
        let _ = serde_json::to_writer(&mut *out, t);
        return;
    };
    if year > 9999 || nanos >= 1_000_000_000 {
        let _ = serde_json::to_writer(&mut *out, t);
        return;
    }
    fn digits(out: &mut Vec<u8>, v: u32, n: u32) {
        for i in (0..n).rev() {
            out.push(b'0' + ((v / 10u32.pow(i)) % 10) as u8);
        }
    }
    out.push(b'"');
    digits(out, year, 4);
    out.push(b'-');
    digits(out, t.month(), 2);
    out.push(b'-');
    digits(out, t.day(), 2);
    out.push(b'T');
    digits(out, t.hour(), 2);
    out.push(b':');
    digits(out, t.minute(), 2);
    out.push(b':');
    digits(out, t.second(), 2);
    if nanos != 0 {
        out.push(b'.');
        if nanos % 1_000_000 == 0 {
            digits(out, nanos / 1_000_000, 3);
        } else if nanos % 1_000 == 0 {
            digits(out, nanos / 1_000, 6);
        } else {
            digits(out, nanos, 9);
        }
    }
    out.extend_from_slice(b"Z\"");
}

/// The current UTC time, as `Utc::now()`, for the log's hot path: the
/// calendar date of the current day is computed once per thread and day,
/// so a read costs the clock and a time-of-day split.
pub(crate) fn wall_now() -> DateTime<Utc> {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => from_unix(d.as_secs(), d.subsec_nanos()),
        Err(_) => Utc::now(),
    }
}

/// `DateTime::from_timestamp(secs, nanos)` for times after the epoch, with
/// the date of the last day seen on this thread cached.
fn from_unix(secs: u64, nanos: u32) -> DateTime<Utc> {
    use std::cell::Cell;
    thread_local! {
        static DAY: Cell<Option<(u64, chrono::NaiveDate)>> = const { Cell::new(None) };
    }
    let day = secs / 86_400;
    let tod = (secs % 86_400) as u32;
    let date = DAY.with(|c| match c.get() {
        Some((d, date)) if d == day => Some(date),
        _ => {
            let date =
                i64::try_from(day * 86_400).ok().and_then(|s| DateTime::from_timestamp(s, 0)).map(|t| t.date_naive());
            if let Some(date) = date {
                c.set(Some((day, date)));
            }
            date
        }
    });
    match (date, chrono::NaiveTime::from_num_seconds_from_midnight_opt(tod, nanos)) {
        (Some(date), Some(time)) => date.and_time(time).and_utc(),
        _ => i64::try_from(secs).ok().and_then(|s| DateTime::from_timestamp(s, nanos)).unwrap_or_default(),
    }
}

/// Lowercase hex SHA-256 of the RFC 8785 canonical form of `value`.
pub fn params_digest<'a, M>(value: &'a M) -> String
where
    M: Serialize + ?Sized,
    &'a M: IntoIterator<Item = (&'a String, &'a Value)>,
{
    crate::canonical::sha256_hex(&crate::canonical::canonical_object(value))
}

/// `{max_events?, max_age_secs?}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RetentionPolicy {
    /// Keep at most this many events (the newest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_events: Option<usize>,
    /// Drop events older than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_secs: Option<u64>,
}

/// A query; conditions are AND-ed.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EventQuery {
    /// Kinds to include (any of).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Only this action.
    #[serde(default)]
    pub action_id: Option<String>,
    /// Only this proposal.
    #[serde(default)]
    pub proposal_id: Option<String>,
    /// At or after (inclusive).
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
    /// Before (exclusive).
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
    /// `data[k] == v` for each entry.
    #[serde(default)]
    pub data_matches: Map<String, Value>,
    /// At most this many, newest first; 0 = all.
    #[serde(default)]
    pub limit: usize,
}

/// The outcome of verifying a hash chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainVerification {
    /// Every chained event checked out; the count of chained events.
    Verified(usize),
    /// The index (in the log as given) of the first event that does not.
    TamperedAt(usize),
}

impl ChainVerification {
    /// `{"verified": n}` or `{"tampered_at": i}`.
    pub fn to_json(self) -> Value {
        match self {
            ChainVerification::Verified(n) => json!({"verified": n}),
            ChainVerification::TamperedAt(i) => json!({"tampered_at": i}),
        }
    }
}

/// Verifies a sequence of events: each chained event's hash matches its
/// content and links to the previous chained event; once chaining has started
/// every later event must be chained.
pub fn verify_chain(events: &[Event]) -> ChainVerification {
    let mut prev: Option<&str> = None;
    let mut started = false;
    let mut n = 0;
    for (i, e) in events.iter().enumerate() {
        let Some(h) = e.hash() else {
            if started {
                return ChainVerification::TamperedAt(i);
            }
            continue;
        };
        if started && e.prev_hash() != prev {
            return ChainVerification::TamperedAt(i);
        }
        if e.compute_hash() != h {
            return ChainVerification::TamperedAt(i);
        }
        started = true;
        prev = Some(h);
        n += 1;
    }
    ChainVerification::Verified(n)
}

/// Events a chunk of the in-memory log holds (about 56 KiB of them).
const CHUNK: usize = 256;

/// The log's events, oldest first, in chunks of [`CHUNK`] that are never
/// moved once allocated: a growing log allocates one more chunk where one
/// contiguous buffer would, at each doubling, copy every event it holds
/// (tens of megabytes, in the middle of some action, for a runtime that has
/// recorded a few hundred thousand events).
#[derive(Debug, Default)]
struct Chunks {
    chunks: VecDeque<VecDeque<Event>>,
    len: usize,
}

impl Chunks {
    fn len(&self) -> usize {
        self.len
    }

    fn push_back(&mut self, e: Event) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < CHUNK => last.push_back(e),
            _ => {
                // The first chunk grows as it fills (a runtime that records
                // a few events does not hold a whole chunk); later ones
                // are made whole.
                let mut chunk = VecDeque::with_capacity(if self.chunks.is_empty() { 0 } else { CHUNK });
                chunk.push_back(e);
                self.chunks.push_back(chunk);
            }
        }
        self.len += 1;
    }

    fn front(&self) -> Option<&Event> {
        self.chunks.front().and_then(VecDeque::front)
    }

    fn back(&self) -> Option<&Event> {
        self.chunks.back().and_then(VecDeque::back)
    }

    fn pop_front(&mut self) -> Option<Event> {
        let first = self.chunks.front_mut()?;
        let e = first.pop_front();
        if first.is_empty() {
            self.chunks.pop_front();
        }
        if e.is_some() {
            self.len -= 1;
        }
        e
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = &Event> {
        self.chunks.iter().flat_map(VecDeque::iter)
    }

    fn clear(&mut self) {
        self.chunks.clear();
        self.len = 0;
    }
}

#[derive(Debug, Default)]
struct LogInner {
    events: Chunks,
    next_id: u64,
    retention: RetentionPolicy,
    chaining: bool,
    last_hash: Option<String>,
    /// Where every event is also recorded (the durable audit log), when
    /// attached.
    sink: Option<Arc<dyn EventSink>>,
    /// The wall clock read beside the monotonic one, for the events stamped
    /// with a monotonic time already read ([`EventLog::append_at`]).
    base: Option<WallBase>,
}

/// A wall-clock reading and the monotonic reading taken beside it: a time
/// read on the monotonic clock (an action's start or end, read for its
/// duration) gives its wall time without reading the clock again. Read
/// again once it is [`REBASE`] old, so the wall clock's adjustments are
/// followed within that.
#[derive(Debug, Clone, Copy)]
struct WallBase {
    mono: std::time::Instant,
    /// The wall clock's time since the Unix epoch.
    unix: std::time::Duration,
}

/// How long a [`WallBase`] is used.
const REBASE: std::time::Duration = std::time::Duration::from_secs(1);

impl WallBase {
    /// Both clocks now; `None` when the wall clock is before 1970.
    fn read() -> Option<WallBase> {
        let mono = std::time::Instant::now();
        let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(WallBase { mono, unix })
    }

    /// How far `at` is from this pairing: `Ok(after)` or `Err(before)`.
    fn offset(&self, at: std::time::Instant) -> Result<std::time::Duration, std::time::Duration> {
        at.checked_duration_since(self.mono).ok_or_else(|| self.mono.duration_since(at))
    }

    /// The wall time at this offset from the pairing (no division).
    fn wall_at(&self, offset: Result<std::time::Duration, std::time::Duration>) -> DateTime<Utc> {
        let t = match offset {
            Ok(after) => self.unix.checked_add(after),
            Err(before) => Some(self.unix.saturating_sub(before)),
        };
        t.map_or_else(Utc::now, |t| from_unix(t.as_secs(), t.subsec_nanos()))
    }

    /// The wall time of the monotonic time `at`, when `at` is within
    /// [`REBASE`] of this pairing (the two monotonic times compared once:
    /// an event is stamped this way two or three times an action).
    fn wall_near(&self, at: std::time::Instant) -> Option<DateTime<Utc>> {
        let offset = self.offset(at);
        let (Ok(d) | Err(d)) = offset;
        (d < REBASE).then(|| self.wall_at(offset))
    }

    /// The wall time of the monotonic time `at`, however far from this
    /// pairing.
    fn wall(&self, at: std::time::Instant) -> DateTime<Utc> {
        self.wall_at(self.offset(at))
    }
}

impl LogInner {
    /// The next event's time: the wall clock now, or the wall time of the
    /// monotonic time `at`. Never before the last event's by less than
    /// [`REBASE`]: an `at` read before another task appended, or the two
    /// clocks' drift within a pairing, does not make the log's times
    /// decrease; a wall clock set back by more does.
    fn stamp(&mut self, at: Option<std::time::Instant>) -> DateTime<Utc> {
        let t = match at {
            None => wall_now(),
            Some(at) => match self.base.and_then(|b| b.wall_near(at)) {
                Some(t) => t,
                None => {
                    self.base = WallBase::read();
                    self.base.map_or_else(wall_now, |b| b.wall(at))
                }
            },
        };
        match self.events.back() {
            Some(last) if last.timestamp > t && (last.timestamp - t).to_std().is_ok_and(|d| d < REBASE) => {
                last.timestamp
            }
            _ => t,
        }
    }

    fn apply_retention(&mut self, now: DateTime<Utc>) -> usize {
        let before = self.events.len();
        if let Some(max) = self.retention.max_events {
            while self.events.len() > max {
                self.events.pop_front();
            }
        }
        if let Some(age) = self.retention.max_age_secs {
            let cutoff = now - chrono::Duration::seconds(i64::try_from(age).unwrap_or(i64::MAX / 1000));
            while self.events.front().is_some_and(|e| e.timestamp < cutoff) {
                self.events.pop_front();
            }
        }
        before - self.events.len()
    }
}

/// Where a log also records its events: the durable audit log (a file,
/// [`crate::store::file::AuditFile`], or a database).
pub trait EventSink: Send + Sync + std::fmt::Debug {
    /// Records one event (called in log order, under the log's lock: keep it
    /// short or hand the event off).
    fn record(&self, event: &Event);
    /// A ticket resolving once everything recorded so far is durable;
    /// `None` when it already is.
    fn durable(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        None
    }
    /// Writes what it holds queued, without waiting for durability, when
    /// that takes no wait (called by a front end with nothing else to do,
    /// so that a later [`EventSink::durable`] finds less left). Nothing by
    /// default.
    fn write_behind(&self) {}
}

impl EventSink for crate::store::file::AuditFile {
    fn record(&self, event: &Event) {
        crate::store::file::AuditFile::record(self, event);
    }
    fn durable(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        Some(crate::store::file::AuditFile::durable(self))
    }
    fn write_behind(&self) {
        crate::store::file::AuditFile::write_behind(self);
    }
}

/// The append-only (modulo retention and `clear`) event log.
#[derive(Debug, Default)]
pub struct EventLog {
    inner: Mutex<LogInner>,
}

impl EventLog {
    /// An empty log with no retention and chaining off.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty log with this retention.
    pub fn with_retention(retention: RetentionPolicy) -> Self {
        EventLog { inner: Mutex::new(LogInner { retention, ..LogInner::default() }) }
    }

    /// Appends an event; returns its id.
    pub fn append(
        &self,
        kind: EventKind,
        proposal_id: Option<&Arc<str>>,
        action_id: Option<&Arc<str>>,
        data: EventData,
    ) -> u64 {
        self.append_stamped(kind, proposal_id, action_id, data).0
    }

    /// Appends an event; returns its id and timestamp (so a record made
    /// together with the event can carry the same time without reading the
    /// clock again). The timestamp is read under the log's lock and never
    /// before the last event's unless the wall clock was set back (by more
    /// than a second).
    pub fn append_stamped(
        &self,
        kind: EventKind,
        proposal_id: Option<&Arc<str>>,
        action_id: Option<&Arc<str>>,
        data: EventData,
    ) -> (u64, DateTime<Utc>) {
        self.append_at(kind, proposal_id, action_id, data, None)
    }

    /// [`EventLog::append_stamped`] for an event that happened at `at`,
    /// when given: a monotonic time the caller has read already (an
    /// action's start or end), whose wall time comes from the log's last
    /// pairing of the two clocks (at most a second old) instead of another
    /// clock reading, and is never before the last event's.
    pub(crate) fn append_at(
        &self,
        kind: EventKind,
        proposal_id: Option<&Arc<str>>,
        action_id: Option<&Arc<str>>,
        data: EventData,
        at: Option<std::time::Instant>,
    ) -> (u64, DateTime<Utc>) {
        let Ok(mut log) = self.inner.lock() else { return (0, wall_now()) };
        log.next_id += 1;
        let timestamp = log.stamp(at);
        let mut e = Event {
            id: log.next_id,
            kind,
            timestamp,
            proposal_id: proposal_id.cloned(),
            action_id: action_id.cloned(),
            data,
            chain: None,
        };
        if log.chaining {
            e.chain = Some(Box::new(ChainLink { prev_hash: log.last_hash.take(), hash: None }));
            let h = e.compute_hash();
            log.last_hash = Some(h.clone());
            if let Some(link) = &mut e.chain {
                link.hash = Some(h);
            }
        }
        if let Some(sink) = &log.sink {
            sink.record(&e);
        }
        let now = e.timestamp;
        let id = e.id;
        log.events.push_back(e);
        if log.retention.max_events.is_some() || log.retention.max_age_secs.is_some() {
            log.apply_retention(now);
        }
        (id, now)
    }

    /// Appends an event whose data is a JSON value.
    pub fn record(&self, kind: EventKind, proposal_id: Option<&Arc<str>>, action_id: Option<&str>, data: Value) -> u64 {
        let aid: Option<Arc<str>> = action_id.map(Arc::from);
        self.append(kind, proposal_id, aid.as_ref(), EventData::Value(Box::new(data)))
    }

    /// Number of events held.
    pub fn count(&self) -> usize {
        self.inner.lock().map(|l| l.events.len()).unwrap_or(0)
    }

    /// A copy of every event held, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.inner
            .lock()
            .map(|l| {
                let mut v = Vec::with_capacity(l.events.len());
                v.extend(l.events.iter().cloned());
                v
            })
            .unwrap_or_default()
    }

    /// Events matching the query, newest first.
    pub fn query(&self, q: &EventQuery) -> Result<Vec<Event>> {
        let mut kinds = Vec::with_capacity(q.kinds.len());
        for k in &q.kinds {
            kinds.push(
                EventKind::parse(k)
                    .ok_or_else(|| Error::invalid_argument("kinds", format!("unknown event kind `{k}`")))?,
            );
        }
        let log =
            self.inner.lock().map_err(|_| Error::runtime("event_log_poisoned", "the event log lock was poisoned"))?;
        let mut out = Vec::new();
        for e in log.events.iter().rev() {
            if !kinds.is_empty() && !kinds.contains(&e.kind) {
                continue;
            }
            if q.action_id.as_deref().is_some_and(|a| e.action_id.as_deref() != Some(a)) {
                continue;
            }
            if q.proposal_id.as_deref().is_some_and(|p| e.proposal_id.as_deref() != Some(p)) {
                continue;
            }
            if q.since.is_some_and(|s| e.timestamp < s) || q.until.is_some_and(|u| e.timestamp >= u) {
                continue;
            }
            if !q.data_matches.iter().all(|(k, v)| e.data.field(k).is_some_and(|d| json_eq(&d, v))) {
                continue;
            }
            out.push(e.clone());
            if q.limit > 0 && out.len() >= q.limit {
                break;
            }
        }
        Ok(out)
    }

    /// Event counts by kind (kinds with none omitted), sorted by kind name.
    pub fn stats(&self) -> Map<String, Value> {
        let Ok(log) = self.inner.lock() else { return Map::new() };
        stats_of(log.events.iter())
    }

    /// Removes every event; returns how many and their counts by kind.
    pub fn clear(&self) -> (usize, Map<String, Value>) {
        let Ok(mut log) = self.inner.lock() else { return (0, Map::new()) };
        let stats = stats_of(log.events.iter());
        let n = log.events.len();
        log.events.clear();
        (n, stats)
    }

    /// The retention policy.
    pub fn retention(&self) -> RetentionPolicy {
        self.inner.lock().map(|l| l.retention.clone()).unwrap_or_default()
    }

    /// Sets the retention policy and applies it now; returns events removed.
    pub fn set_retention(&self, policy: RetentionPolicy) -> usize {
        let Ok(mut log) = self.inner.lock() else { return 0 };
        log.retention = policy;
        log.apply_retention(Utc::now())
    }

    /// Applies `policy` once (the installed policy stays); returns events removed.
    pub fn truncate(&self, policy: &RetentionPolicy) -> usize {
        let Ok(mut log) = self.inner.lock() else { return 0 };
        let installed = std::mem::replace(&mut log.retention, policy.clone());
        let removed = log.apply_retention(Utc::now());
        log.retention = installed;
        removed
    }

    /// Turns hash chaining on for every later event (idempotent).
    pub fn enable_chaining(&self) {
        if let Ok(mut log) = self.inner.lock() {
            log.chaining = true;
        }
    }

    /// Appends every later event to `file` too (the durable audit log of a
    /// daemon or `car run`; see [`crate::store::file`]). Replaces an
    /// earlier attachment.
    pub fn attach_file(&self, file: Arc<crate::store::file::AuditFile>) {
        self.attach_sink(file);
    }

    /// Records every later event in `sink` too. Replaces an earlier one.
    pub fn attach_sink(&self, sink: Arc<dyn EventSink>) {
        if let Ok(mut log) = self.inner.lock() {
            log.sink = Some(sink);
        }
    }

    /// Resolves once every event recorded so far is durable in the
    /// attached sink (at once without one, or when the sink writes through).
    pub async fn sink_durable(&self) {
        // Not under the log's lock: the sink may write and sync right here.
        let sink = self.inner.lock().ok().and_then(|l| l.sink.clone());
        if let Some(rx) = sink.and_then(|s| s.durable()) {
            let _ = rx.await;
        }
    }

    /// True when chaining is on.
    pub fn chaining(&self) -> bool {
        self.inner.lock().map(|l| l.chaining).unwrap_or(false)
    }

    /// Verifies the chain of the events held.
    pub fn verify_chain(&self) -> ChainVerification {
        verify_chain(&self.events())
    }
}

fn stats_of<'a>(events: impl Iterator<Item = &'a Event>) -> Map<String, Value> {
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    for e in events {
        *counts.entry(e.kind.as_str()).or_default() += 1;
    }
    counts.into_iter().map(|(k, v)| (k.to_string(), Value::from(v))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;

    #[test]
    fn fast_clock_matches_chrono() {
        for secs in [0u64, 1, 86_399, 86_400, 86_401, 951_782_400, 1_700_000_000, 4_102_444_799, 4_102_444_800] {
            for nanos in [0u32, 1, 999_999_999] {
                let want = DateTime::from_timestamp(secs as i64, nanos).unwrap();
                assert_eq!(from_unix(secs, nanos), want, "{secs}.{nanos}");
                // Twice: the second read uses the cached day.
                assert_eq!(from_unix(secs, nanos), want, "{secs}.{nanos} cached");
            }
        }
        let (a, b, c) = (Utc::now(), wall_now(), Utc::now());
        assert!(a <= b && b <= c);
    }

    /// A monotonic time within a second of the pairing gets the pairing's
    /// wall time plus (or minus) the distance, to the nanosecond; one a
    /// second or more away is left to a new pairing.
    #[test]
    fn a_pairing_turns_nearby_monotonic_times_into_wall_times() {
        use std::time::Duration;
        let b = WallBase::read().unwrap();
        let expect = |wall: Duration| DateTime::from_timestamp(wall.as_secs() as i64, wall.subsec_nanos()).unwrap();
        for d in [0, 1, 999, 1_000_000, 500_000_000, 999_999_999].map(Duration::from_nanos) {
            assert_eq!(b.wall_near(b.mono + d), Some(expect(b.unix + d)), "{d:?} after");
            assert_eq!(b.wall(b.mono + d), expect(b.unix + d), "{d:?} after");
            if let Some(at) = b.mono.checked_sub(d) {
                assert_eq!(b.wall_near(at), Some(expect(b.unix - d)), "{d:?} before");
                assert_eq!(b.wall(at), expect(b.unix - d), "{d:?} before");
            }
        }
        for d in [1_000_000_000, 1_000_000_001, 86_400_000_000_000].map(Duration::from_nanos) {
            assert_eq!(b.wall_near(b.mono + d), None, "{d:?} after");
            assert_eq!(b.wall(b.mono + d), expect(b.unix + d), "{d:?} after");
            if let Some(at) = b.mono.checked_sub(d) {
                assert_eq!(b.wall_near(at), None, "{d:?} before");
            }
        }
    }

    #[test]
    fn a_time_already_read_is_stamped_with_its_wall_time() {
        let log = EventLog::new();
        let before = Utc::now();
        let at = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(100));
        // The log pairs the clocks now, 100 ms after `at`: the event still
        // carries the time `at` was read, not the time it was appended (a
        // pairing read late only moves it later, by as long as the reads
        // were apart).
        let (_, t) =
            log.append_at(EventKind::ActionExecuting, None, None, EventData::Value(Box::new(json!({}))), Some(at));
        let after = Utc::now();
        let ms = |d: chrono::TimeDelta| d.num_milliseconds();
        assert!(ms(t - before) >= -5 && ms(after - t) >= 50, "{t}: read after {before}, appended before {after}");
        // A later time on the same pairing: the difference of the readings.
        let later = at + std::time::Duration::from_millis(7);
        let (_, t2) =
            log.append_at(EventKind::ActionSucceeded, None, None, EventData::Value(Box::new(json!({}))), Some(later));
        assert_eq!((t2 - t).num_microseconds(), Some(7_000));
        assert!(log.events().iter().all(|e| e.timestamp <= after));
    }

    #[test]
    fn times_read_before_a_later_event_do_not_make_the_log_go_back() {
        let log = EventLog::new();
        // Another task's reading, appended after an event of this one.
        let early = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (_, first) = log.append_stamped(EventKind::StateChanged, None, None, EventData::Value(Box::new(json!({}))));
        let (_, second) =
            log.append_at(EventKind::ActionExecuting, None, None, EventData::Value(Box::new(json!({}))), Some(early));
        assert_eq!(second, first);
        // Generated: readings taken in one order and appended in another.
        let mut readings: Vec<std::time::Instant> = (0..64).map(|_| std::time::Instant::now()).collect();
        readings.reverse();
        for (i, at) in readings.into_iter().enumerate() {
            if i % 3 == 0 {
                log.append_stamped(EventKind::StateChanged, None, None, EventData::Value(Box::new(json!({}))));
            }
            log.append_at(EventKind::ActionSucceeded, None, None, EventData::Value(Box::new(json!({}))), Some(at));
        }
        let times: Vec<_> = log.events().iter().map(|e| e.timestamp).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    }

    #[test]
    fn the_log_keeps_order_and_retention_across_its_chunks() {
        let log = EventLog::new();
        let n = CHUNK * 3 + 7;
        for i in 0..n {
            log.record(EventKind::StateChanged, None, None, json!({"i": i}));
        }
        let ids = |log: &EventLog| log.events().iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!(log.count(), n);
        assert_eq!(ids(&log), (1..=n as u64).collect::<Vec<_>>());
        // Newest first, across chunk boundaries.
        let q = EventQuery { limit: CHUNK + 2, ..EventQuery::default() };
        let newest: Vec<u64> = log.query(&q).unwrap().iter().map(|e| e.id).collect();
        assert_eq!(newest, (n as u64 - CHUNK as u64 - 1..=n as u64).rev().collect::<Vec<_>>());
        // Retention drops from the front, through whole chunks and into one.
        let keep = CHUNK + 3;
        assert_eq!(log.set_retention(RetentionPolicy { max_events: Some(keep), max_age_secs: None }), n - keep);
        assert_eq!(log.count(), keep);
        assert_eq!(ids(&log), ((n - keep + 1) as u64..=n as u64).collect::<Vec<_>>());
        // Appends go on after a trimmed front.
        log.record(EventKind::StateChanged, None, None, json!({}));
        assert_eq!(log.count(), keep);
        assert_eq!(log.events().last().map(|e| e.id), Some(n as u64 + 1));
        assert_eq!(log.stats()["StateChanged"], json!(keep));
        let (cleared, _) = log.clear();
        assert_eq!((cleared, log.count(), log.events().len()), (keep, 0, 0));
        log.record(EventKind::StateChanged, None, None, json!({}));
        assert_eq!(log.count(), 1);
    }

    #[test]
    fn chain_detects_tampering_and_retention() {
        let log = EventLog::new();
        log.record(EventKind::StateChanged, None, None, json!({"key": "a"}));
        log.enable_chaining();
        for i in 0..4 {
            log.record(EventKind::StateChanged, None, None, json!({"key": i}));
        }
        assert_eq!(log.verify_chain(), ChainVerification::Verified(4));
        let mut evs = log.events();
        evs[3].data = EventData::Value(Box::new(json!({"key": 99})));
        assert_eq!(verify_chain(&evs), ChainVerification::TamperedAt(3));
        let mut evs = log.events();
        evs.remove(2);
        assert_eq!(verify_chain(&evs), ChainVerification::TamperedAt(2));
        assert_eq!(log.set_retention(RetentionPolicy { max_events: Some(2), max_age_secs: None }), 3);
        assert_eq!(log.count(), 2);
        assert_eq!(log.verify_chain(), ChainVerification::Verified(2));
    }

    proptest::proptest! {
        /// The chain hash written straight from the event is the SHA-256 of
        /// the canonical form of its content (what a verifier recomputes
        /// from the record), for any data, ids and link.
        #[test]
        fn the_direct_hash_is_that_of_the_canonical_content(
            data in crate::canonical::tests::any_json(),
            pid in proptest::option::of("\\PC{0,8}"),
            aid in proptest::option::of("[a-z\"\\\u{1}\u{7f}é😀]{0,6}"),
            prev in proptest::option::of("[0-9a-f]{64}"),
            id in 0u64..u64::MAX,
        ) {
            let e = Event {
                id,
                kind: EventKind::ActionSucceeded,
                timestamp: wall_now(),
                proposal_id: pid.map(|p| Arc::from(p.as_str())),
                action_id: aid.map(|a| Arc::from(a.as_str())),
                data: EventData::Value(Box::new(data)),
                chain: ChainLink::boxed(prev, None),
            };
            let expected = crate::canonical::sha256_hex(&crate::canonical::canonical_object(&e.content()));
            proptest::prop_assert_eq!(e.compute_hash(), expected);
        }

        /// Every typed record written straight to its RFC 8785 text is the
        /// canonical text of its value, and says rightly whether that text
        /// reads back as the value.
        #[test]
        fn typed_records_write_the_canonical_text_of_their_value(
            effects in proptest::collection::vec(("[a-z\u{e000}😀]{0,4}", crate::canonical::tests::any_json()), 0..4),
            params in crate::canonical::tests::any_json(),
            value in crate::canonical::tests::any_json(),
            text in proptest::option::of("\\PC{0,6}"),
            attempt in 0u32..u32::MAX,
            duration in proptest::option::of(proptest::prop_oneof![proptest::num::f64::ANY, proptest::strategy::Just(2.0), proptest::strategy::Just(-0.0)]),
            flags in 0u8..=255,
            version in proptest::prop_oneof![0u64..10, proptest::num::u64::ANY],
            state_write in proptest::bool::ANY,
        ) {
            let effects: serde_json::Map<String, Value> = effects.into_iter().collect();
            let mut action = json!({"id": "a", "type": "tool_call", "tool": text.clone().unwrap_or_else(|| "t".into()),
                                    "expected_effects": effects});
            if state_write {
                action = json!({"id": "a", "type": "state_write",
                                "parameters": {"key": text.clone().unwrap_or_default(), "value": value.clone(), "delete": flags & 64 != 0}});
            } else if let Value::Object(p) = &params {
                action["parameters"] = Value::Object(p.clone());
            }
            let proposal = Arc::new(crate::api::parse_proposal(&json!({"id": "p", "actions": [action]}).to_string()).unwrap());
            let phases = [ActionPhase::Executing, ActionPhase::Succeeded, ActionPhase::Failed, ActionPhase::Retrying];
            let mut datas: Vec<EventData> = phases
                .iter()
                .map(|&phase| EventData::Action(ActionEvent {
                    phase,
                    proposal: proposal.clone(),
                    index: usize::from(flags & 1),
                    attempt,
                    duration_ms: duration,
                    detail: ActionDetail::boxed(text.clone(), (flags & 2 != 0).then_some("timeout"), (flags & 8 != 0).then_some("ttl")),
                    terminal: flags & 4 != 0,
                }))
                .collect();
            datas.push(EventData::Admission(Box::new(AdmissionData {
                verdict: "ask",
                layer: "tier",
                rule: (flags & 16 != 0).then(|| value.clone()),
                reason: text.clone().unwrap_or_default(),
                required_tier: (flags & 32 != 0).then_some("full_access"),
                granted_tier: (flags & 64 != 0).then_some("read_only"),
                tool: text.clone(),
                stage: "admission",
                downgraded_from_ask: flags & 128 != 0,
            })));
            for effect in [None, Some(0), Some(7)] {
                datas.push(EventData::ActionState { proposal: proposal.clone(), index: usize::from(flags & 1), effect,
                                                    tenant: text.as_deref().map(Arc::from), version });
            }
            datas.push(EventData::Completed(Box::new(CompletedData {
                aborted: flags & 2 != 0,
                cost: crate::ir::CostSummary {
                    tool_calls: version,
                    actions_executed: u64::from(attempt),
                    actions_rejected: u64::from(flags),
                    actions_skipped: version / 3,
                    total_duration_ms: duration.unwrap_or(0.5),
                    retries: u64::from(flags & 7),
                },
                cancelled_tools: if flags & 1 != 0 { vec![value.clone(), json!({"action_id": "a", "tool": text, "handle": "h"})] } else { Vec::new() },
            })));
            datas.push(EventData::Value(Box::new(value.clone())));
            for d in datas {
                let v = d.to_value();
                let mut out = Vec::new();
                let plain = d.write_canonical(&mut out);
                proptest::prop_assert_eq!(std::str::from_utf8(&out).unwrap(), crate::canonical::canonical_string(&v));
                let back: Value = serde_json::from_slice(&out).unwrap();
                // Told exact, it is; else the value comes back for the writer.
                match plain {
                    None => proptest::prop_assert_eq!(back, v),
                    Some(p) => proptest::prop_assert_eq!(p, v),
                }
            }
        }

        /// A timestamp written directly is what its `Serialize` writes.
        #[test]
        fn timestamps_are_written_as_serde_writes_them(
            secs in -62_167_219_200i64..253_402_300_800,
            nanos in proptest::prop_oneof![0u32..1_000_000_000, (0u32..1000).prop_map(|n| n * 1_000_000), (0u32..1_000_000).prop_map(|n| n * 1000)],
        ) {
            let t = DateTime::from_timestamp(secs, nanos).unwrap();
            let mut out = Vec::new();
            write_timestamp(&mut out, &t);
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&t).unwrap());
        }
    }

    #[test]
    fn a_plain_record_is_written_once_as_its_exact_canonical_text() {
        let p = Arc::new(
            crate::api::parse_proposal(
                r#"{"id": "p", "actions": [{"id": "a", "type": "tool_call", "tool": "t", "parameters": {"n": 1.5},
                    "expected_effects": {"k": [1, "x"]}}]}"#,
            )
            .unwrap(),
        );
        let mut e = ActionEvent {
            phase: ActionPhase::Succeeded,
            proposal: p,
            index: 0,
            attempt: 1,
            duration_ms: Some(0.25),
            detail: None,
            terminal: false,
        };
        let mut out = Vec::new();
        assert_eq!(EventData::Action(e.clone()).write_canonical(&mut out), None);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(r#"{"action_type":"tool_call","attempt":1,"duration_ms":0.25,"expected_effects":{"k":[1,"x"]},"params_digest":""#), "{text}");
        // A duration the canonical form would turn into an integer: the
        // value comes back for the line.
        e.duration_ms = Some(3.0);
        let d = EventData::Action(e);
        assert_eq!(d.write_canonical(&mut Vec::new()), Some(d.to_value()));
    }

    #[test]
    fn timestamps_outside_four_digit_years_and_leap_seconds_are_written_as_serde_writes_them() {
        let leap =
            chrono::NaiveDate::from_ymd_opt(2016, 12, 31).unwrap().and_hms_nano_opt(23, 59, 59, 1_500_000_000).unwrap();
        for t in [
            leap.and_utc(),
            DateTime::from_timestamp(-62_167_219_201, 5).unwrap(),
            DateTime::from_timestamp(253_402_300_800, 120_000_000).unwrap(),
            DateTime::<Utc>::MIN_UTC,
            DateTime::<Utc>::MAX_UTC,
            DateTime::from_timestamp(0, 0).unwrap(),
        ] {
            let mut out = Vec::new();
            write_timestamp(&mut out, &t);
            assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&t).unwrap());
        }
    }
}
