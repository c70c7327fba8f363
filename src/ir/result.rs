//! Results of execution: ActionResult, ProposalResult, cost accounting.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::object::SCAN_MAX;

/// Where an action is in its lifecycle.
///
/// `#[non_exhaustive]`: statuses may be added, so a `match` outside this
/// crate needs a wildcard arm; one naming every status does not compile:
///
/// ```compile_fail,E0004
/// use car_runtime::ir::ActionStatus;
///
/// fn done(s: ActionStatus) -> bool {
///     match s {
///         ActionStatus::Proposed | ActionStatus::Validated | ActionStatus::Executing => false,
///         ActionStatus::Rejected | ActionStatus::Succeeded | ActionStatus::Failed | ActionStatus::Skipped => true,
///     }
/// }
/// ```
///
/// ```
/// use car_runtime::ir::ActionStatus;
///
/// fn done(s: ActionStatus) -> bool {
///     match s {
///         ActionStatus::Proposed | ActionStatus::Validated | ActionStatus::Executing => false,
///         ActionStatus::Rejected | ActionStatus::Succeeded | ActionStatus::Failed | ActionStatus::Skipped => true,
///         _ => false,
///     }
/// }
/// assert!(done(ActionStatus::Skipped));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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

/// Writes `n` as `width` decimal digits into `out`.
fn put_digits(out: &mut [u8], mut n: u32) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// A result timestamp exactly as chrono writes it (`2026-11-30T03:38:53.160829285Z`,
/// the fraction in 0, 3, 6 or 9 digits), without going through `fmt`: every
/// action result carries one, and chrono's formatter cost more than the rest
/// of the result together. Years outside 0..=9999 and leap seconds return
/// `None` (chrono's own path writes those).
fn timestamp_text(t: &chrono::DateTime<chrono::Utc>) -> Option<([u8; 30], usize)> {
    use chrono::{Datelike, Timelike};
    let t = t.naive_utc();
    let (year, nano) = (t.year(), t.nanosecond());
    if !(0..=9999).contains(&year) || nano >= 1_000_000_000 {
        return None;
    }
    let mut buf = *b"0000-00-00T00:00:00.000000000Z";
    put_digits(&mut buf[0..4], year as u32);
    put_digits(&mut buf[5..7], t.month());
    put_digits(&mut buf[8..10], t.day());
    put_digits(&mut buf[11..13], t.hour());
    put_digits(&mut buf[14..16], t.minute());
    put_digits(&mut buf[17..19], t.second());
    let end = if nano == 0 {
        19
    } else if nano % 1_000_000 == 0 {
        put_digits(&mut buf[20..23], nano / 1_000_000);
        23
    } else if nano % 1_000 == 0 {
        put_digits(&mut buf[20..26], nano / 1_000);
        26
    } else {
        put_digits(&mut buf[20..29], nano);
        29
    };
    buf[end] = b'Z';
    Some((buf, end + 1))
}

fn serialize_timestamp<S: serde::Serializer>(t: &chrono::DateTime<chrono::Utc>, s: S) -> Result<S::Ok, S::Error> {
    match timestamp_text(t) {
        Some((buf, len)) => s.serialize_str(std::str::from_utf8(&buf[..len]).map_err(serde::ser::Error::custom)?),
        None => t.serialize(s),
    }
}

/// Appends the decimal digits of `n` to `out` without the formatting
/// machinery (for text built once per call on hot paths).
pub(crate) use write::uint as push_decimal;

/// Direct JSON writing for [`ProposalResult::to_json_string`]: the same
/// bytes serde_json's compact serializer writes, without its per-call
/// machinery (keys are literals, strings that need no escape are copied).
mod write {
    // The JSON primitives, shared with the IR's other direct writers.
    pub(crate) use super::super::write::{f64, list, object, str, uint, value};

    /// Result timestamps as [`super::timestamp_text`] writes them; actions
    /// finishing within the same second share the date-and-time part, so it
    /// is rendered once per second and only the fraction per result.
    #[derive(Default)]
    pub(super) struct Timestamps {
        second: Option<(i64, String)>,
    }

    impl Timestamps {
        pub(super) fn write(&mut self, out: &mut String, t: &chrono::DateTime<chrono::Utc>) {
            let secs = t.timestamp();
            let nano = t.timestamp_subsec_nanos();
            if nano < 1_000_000_000 {
                if !matches!(&self.second, Some((s, _)) if *s == secs) {
                    self.second = super::timestamp_text(t)
                        .and_then(|(buf, _)| std::str::from_utf8(&buf[..19]).ok().map(|p| (secs, p.to_string())));
                }
                if let Some((_, prefix)) = &self.second {
                    out.push('"');
                    out.push_str(prefix);
                    let (value, digits) = if nano == 0 {
                        (0, 0)
                    } else if nano.is_multiple_of(1_000_000) {
                        (nano / 1_000_000, 3)
                    } else if nano.is_multiple_of(1_000) {
                        (nano / 1_000, 6)
                    } else {
                        (nano, 9)
                    };
                    if digits > 0 {
                        out.push('.');
                        let mut buf = [b'0'; 9];
                        super::put_digits(&mut buf[..digits], value);
                        for &b in &buf[..digits] {
                            out.push(char::from(b));
                        }
                    }
                    out.push_str("Z\"");
                    return;
                }
            }
            out.push_str(&serde_json::to_string(t).unwrap_or_else(|_| "null".into()));
        }
    }
}

/// The outcome of one action.
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`ActionResult::new`] and sets the public fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
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
    /// Key → the change the action made to it, in the order made; on the
    /// wire an object of `{"op":"set","value":…}` / `{"op":"delete"}`.
    #[serde(default)]
    pub state_changes: StateChanges,
    /// Wall time spent, when the action ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// When the result was recorded.
    #[serde(serialize_with = "serialize_timestamp")]
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
            state_changes: StateChanges::new(),
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
///
/// `#[non_exhaustive]`: kinds of change may be added, so a `match` outside
/// this crate needs a wildcard arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
#[non_exhaustive]
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

    /// The wire value, written as serde_json writes it.
    fn write(&self, out: &mut String) {
        match self {
            StateMutation::Set { value } => {
                out.push_str("{\"op\":\"set\",\"value\":");
                write::value(out, value);
                out.push('}');
            }
            StateMutation::Delete => out.push_str("{\"op\":\"delete\"}"),
        }
    }
}

/// The state changes of one action ([`ActionResult::state_changes`]): key →
/// [`StateMutation`], in the order they were made, each key once.
///
/// A vector of entries rather than a hash map: an action changes one key
/// (a `state_write`) or its few expected effects, and a result is made for
/// every action, so a hash table and a JSON object per change cost more
/// than the changes themselves. Looking a key up scans the entries.
/// Serialises as the JSON object `{key: {"op": "set", "value": …} |
/// {"op": "delete"}}`; compares equal to another with the same entries in
/// any order.
#[derive(Clone, Default)]
pub struct StateChanges {
    entries: Vec<(String, StateMutation)>,
}

impl StateChanges {
    /// No changes (allocates nothing).
    pub const fn new() -> Self {
        StateChanges { entries: Vec::new() }
    }

    /// No changes, with room for `n`.
    pub fn with_capacity(n: usize) -> Self {
        StateChanges { entries: Vec::with_capacity(n) }
    }

    /// The number of keys changed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no key changed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The change made to `key`.
    pub fn get(&self, key: &str) -> Option<&StateMutation> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, m)| m)
    }

    /// True when `key` changed.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Records `change` to `key`, replacing an earlier change to it in
    /// place; returns the earlier one.
    pub fn insert(&mut self, key: impl Into<String>, change: StateMutation) -> Option<StateMutation> {
        let key = key.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some((_, m)) => Some(std::mem::replace(m, change)),
            None => {
                self.entries.push((key, change));
                None
            }
        }
    }

    /// Appends a change to a key the caller knows is not there yet (one
    /// write per key of an action: its `state_write` key or its expected
    /// effects, whose keys are unique).
    pub(crate) fn push_new(&mut self, key: String, change: StateMutation) {
        debug_assert!(!self.contains_key(&key), "state change to `{key}` recorded twice");
        self.entries.push((key, change));
    }

    /// Forgets every change.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The changes, in the order made.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&String, &StateMutation)> {
        self.entries.iter().map(|(k, m)| (k, m))
    }

    /// The keys changed, in the order made.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &String> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The changes as the wire's JSON object.
    pub fn to_value(&self) -> Value {
        Value::Object(self.entries.iter().map(|(k, m)| (k.clone(), m.to_value())).collect())
    }

    /// Writes the wire's JSON object, as serde_json writes it.
    fn write(&self, out: &mut String) {
        write::object(out, self.iter(), |out, m| m.write(out));
    }

    /// These changes in order, a later change to a key replacing the
    /// earlier in its place (as [`Self::insert`] and a JSON object read).
    fn from_pairs(pairs: impl IntoIterator<Item = (String, StateMutation)>) -> Self {
        StateChanges { entries: super::object::fold_repeats(pairs.into_iter().collect()) }
    }
}

impl std::ops::Index<&str> for StateChanges {
    type Output = StateMutation;

    /// The change made to `key`; panics when there is none (as a map's index).
    fn index(&self, key: &str) -> &StateMutation {
        self.get(key).unwrap_or_else(|| panic!("no state change to key `{key}`"))
    }
}

impl PartialEq for StateChanges {
    fn eq(&self, other: &Self) -> bool {
        super::object::same_entries(&self.entries, &other.entries)
    }
}

impl std::fmt::Debug for StateChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.entries.iter().map(|(k, m)| (k, m))).finish()
    }
}

impl FromIterator<(String, StateMutation)> for StateChanges {
    /// Later changes to a key replace earlier ones (in the earlier's place).
    fn from_iter<I: IntoIterator<Item = (String, StateMutation)>>(iter: I) -> Self {
        StateChanges::from_pairs(iter)
    }
}

impl Serialize for StateChanges {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (k, m) in &self.entries {
            map.serialize_entry(k, m)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for StateChanges {
    /// A JSON object of wire changes; a repeated key keeps the last (as a
    /// map does).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Changes;
        impl<'de> serde::de::Visitor<'de> for Changes {
            type Value = StateChanges;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of state changes ({\"op\": \"set\", \"value\": …} or {\"op\": \"delete\"})")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut access: A) -> Result<StateChanges, A::Error> {
                let mut pairs = Vec::with_capacity(access.size_hint().unwrap_or(0).min(SCAN_MAX));
                while let Some(pair) = access.next_entry::<String, StateMutation>()? {
                    pairs.push(pair);
                }
                Ok(StateChanges::from_pairs(pairs))
            }
        }
        deserializer.deserialize_map(Changes)
    }
}

/// Post-execution accounting.
///
/// `#[non_exhaustive]`: counters may be added; the runtime produces it, and
/// code outside this crate starts from `CostSummary::default()`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
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
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// starts from `CostTarget::default()` and the `with_*` setters.
///
/// ```
/// use car_runtime::ir::CostTarget;
///
/// let t = CostTarget::default().with_target_tool_calls(2).with_cost_weight(0.5);
/// assert_eq!((t.target_tool_calls, t.target_actions, t.cost_weight), (2, 10, 0.5));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
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

    /// The same target with this `target_tool_calls`.
    #[must_use]
    pub fn with_target_tool_calls(mut self, n: u64) -> Self {
        self.target_tool_calls = n;
        self
    }

    /// The same target with this `target_duration_ms`.
    #[must_use]
    pub fn with_target_duration_ms(mut self, ms: f64) -> Self {
        self.target_duration_ms = ms;
        self
    }

    /// The same target with this `target_actions`.
    #[must_use]
    pub fn with_target_actions(mut self, n: u64) -> Self {
        self.target_actions = n;
        self
    }

    /// The same target with this `cost_weight` (clamped to [0, 1] when scoring).
    #[must_use]
    pub fn with_cost_weight(mut self, weight: f64) -> Self {
        self.cost_weight = weight;
        self
    }
}

/// The hard budget: proposals exceeding it are rejected at verification.
///
/// `#[non_exhaustive]`: limits may be added, so code outside this crate
/// starts from `CostBudget::default()` (no limit) and the `with_*` setters;
/// neither a struct literal nor `..CostBudget::default()` compiles there:
///
/// ```compile_fail,E0639
/// use car_runtime::ir::CostBudget;
///
/// let b = CostBudget { max_actions: Some(10), max_tool_calls: None, max_duration_ms: None };
/// ```
///
/// ```
/// use car_runtime::ir::CostBudget;
///
/// let b = CostBudget::default().with_max_actions(10).with_max_tool_calls(4);
/// assert_eq!(serde_json::to_value(&b).unwrap(), serde_json::json!({"max_actions": 10, "max_tool_calls": 4}));
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
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

impl CostBudget {
    /// The same budget, allowing at most `n` actions.
    #[must_use]
    pub fn with_max_actions(mut self, n: u64) -> Self {
        self.max_actions = Some(n);
        self
    }

    /// The same budget, allowing at most `n` tool calls.
    #[must_use]
    pub fn with_max_tool_calls(mut self, n: u64) -> Self {
        self.max_tool_calls = Some(n);
        self
    }

    /// The same budget, allowing at most `ms` milliseconds in total.
    #[must_use]
    pub fn with_max_duration_ms(mut self, ms: f64) -> Self {
        self.max_duration_ms = Some(ms);
        self
    }
}

/// What `proposal.submit` / `executeProposal` / `execute_proposal` return.
///
/// `#[non_exhaustive]`: fields may be added; the runtime produces it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProposalResult {
    /// The proposal.
    pub proposal_id: String,
    /// One result per action, in proposal order.
    pub results: Vec<ActionResult>,
    /// The accounting.
    pub cost: CostSummary,
    /// What the run produced beside its results: under worktree isolation
    /// one `{kind: "patch", base, files, bytes, patch?, truncated?,
    /// worktree?}` (`crate::isolation`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Value>,
    /// `"suspended"` when the proposal suspended on an ask approval
    /// (`on_ask = "suspend"`); absent when it ran to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Of a suspended proposal: `{id, pending: [{action_id, tool,
    /// approval_key}], waiting: [action ids]}`; resume it by `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Value>,
}

impl ActionResult {
    /// Appends this result as JSON, exactly as its `Serialize` writes it.
    fn write_json(&self, out: &mut String, stamps: &mut write::Timestamps) {
        out.push_str("{\"action_id\":");
        write::str(out, &self.action_id);
        out.push_str(",\"status\":\"");
        out.push_str(self.status.as_str());
        out.push('"');
        if let Some(v) = &self.output {
            out.push_str(",\"output\":");
            write::value(out, v);
        }
        if let Some(e) = &self.error {
            out.push_str(",\"error\":");
            write::str(out, e);
        }
        out.push_str(",\"state_changes\":");
        self.state_changes.write(out);
        if let Some(d) = self.duration_ms {
            out.push_str(",\"duration_ms\":");
            write::f64(out, d);
        }
        out.push_str(",\"timestamp\":");
        stamps.write(out, &self.timestamp);
        if self.rolled_back {
            out.push_str(",\"rolled_back\":true");
        }
        if self.terminal {
            out.push_str(",\"terminal\":true");
        }
        if self.compensated {
            out.push_str(",\"compensated\":true");
        }
        if let Some(e) = &self.compensation_error {
            out.push_str(",\"compensation_error\":");
            write::str(out, e);
        }
        out.push('}');
    }
}

impl ProposalResult {
    /// The result as JSON text: byte for byte what `serde_json::to_string`
    /// writes, at a fraction of the cost (no serializer state per field,
    /// literal keys, plain strings copied without a per-byte escape pass)
    /// and into one buffer sized up front, so a 10,000-action result is not
    /// re-grown (and copied) a dozen times on the way.
    pub fn to_json_string(&self) -> String {
        self.json_text(self.results.len(), &self.results)
    }

    /// [`Self::to_json_string`], consuming the result: each action's result
    /// is dropped as soon as it is written, while its memory is still in
    /// cache (on a 10,000-action result, dropping them all afterwards reads
    /// every one from memory a second time).
    pub fn into_json_string(mut self) -> String {
        let results = std::mem::take(&mut self.results);
        self.json_text(results.len(), results)
    }

    /// The text with `results` (this result's, borrowed or taken) in place
    /// of `self.results`.
    fn json_text<R: std::borrow::Borrow<ActionResult>>(
        &self,
        n: usize,
        results: impl IntoIterator<Item = R>,
    ) -> String {
        /// Typical size of one action result (a state write's is ~190 bytes).
        const PER_RESULT: usize = 200;
        let mut out = String::with_capacity(256 + self.proposal_id.len() + n * PER_RESULT);
        out.push_str("{\"proposal_id\":");
        write::str(&mut out, &self.proposal_id);
        out.push_str(",\"results\":");
        let mut stamps = write::Timestamps::default();
        write::list(&mut out, results, |out, r| r.borrow().write_json(out, &mut stamps));
        let c = &self.cost;
        let _ = write!(
            out,
            ",\"cost\":{{\"tool_calls\":{},\"actions_executed\":{},\"actions_rejected\":{},\"actions_skipped\":{},\"total_duration_ms\":",
            c.tool_calls, c.actions_executed, c.actions_rejected, c.actions_skipped
        );
        write::f64(&mut out, c.total_duration_ms);
        let _ = write!(out, ",\"retries\":{}}}", c.retries);
        if !self.artifacts.is_empty() {
            out.push_str(",\"artifacts\":");
            write::value(&mut out, &Value::Array(self.artifacts.clone()));
        }
        if let Some(st) = &self.status {
            out.push_str(",\"status\":");
            write::str(&mut out, st);
        }
        if let Some(v) = &self.suspension {
            out.push_str(",\"suspension\":");
            write::value(&mut out, v);
        }
        out.push('}');
        out
    }
}

/// How a tool failure is classified.
///
/// `#[non_exhaustive]`: classifications may be added, so a `match` outside
/// this crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolFailureClassification {
    /// Follows the action's failure behavior.
    #[default]
    Ordinary,
    /// Stops retries, aborts and rolls back the proposal.
    Terminal,
    /// A model-recoverable failure (the spec's `ModelRetry`): the model
    /// called the tool wrongly and can correct the call. Reported in the
    /// result for the model; never retried by the engine (the same call
    /// fails the same way); bounded to 2 per call chain
    /// ([`crate::engine::MODEL_RETRY_LIMIT`]).
    ModelRetry,
}

/// A typed failure returned by a tool executor.
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`ToolFailure::new`], [`ToolFailure::ordinary`],
/// [`ToolFailure::terminal`] or [`ToolFailure::model_retry`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolFailure {
    /// The message.
    pub message: String,
    /// Ordinary unless the tool said otherwise; never inferred from the text.
    #[serde(default)]
    pub classification: ToolFailureClassification,
}

impl ToolFailure {
    /// A failure with this message and classification.
    pub fn new(message: impl Into<String>, classification: ToolFailureClassification) -> Self {
        ToolFailure { message: message.into(), classification }
    }

    /// An ordinary failure.
    pub fn ordinary(message: impl Into<String>) -> Self {
        ToolFailure { message: message.into(), classification: ToolFailureClassification::Ordinary }
    }

    /// A terminal failure.
    pub fn terminal(message: impl Into<String>) -> Self {
        ToolFailure { message: message.into(), classification: ToolFailureClassification::Terminal }
    }

    /// A model-recoverable failure: the message tells the model how to
    /// correct its call.
    pub fn model_retry(message: impl Into<String>) -> Self {
        ToolFailure { message: message.into(), classification: ToolFailureClassification::ModelRetry }
    }

    /// True for a model-recoverable failure.
    pub fn is_model_retry(&self) -> bool {
        self.classification == ToolFailureClassification::ModelRetry
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, NaiveDate, Utc};

    fn ours(t: &DateTime<Utc>) -> String {
        let mut out = Vec::new();
        serialize_timestamp(t, &mut serde_json::Serializer::new(&mut out)).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_builders_build_what_the_struct_literals_build() {
        let b = CostBudget::default().with_max_actions(10).with_max_tool_calls(4).with_max_duration_ms(1.5);
        let literal = CostBudget { max_actions: Some(10), max_tool_calls: Some(4), max_duration_ms: Some(1.5) };
        assert_eq!(b, literal);
        assert_eq!(serde_json::to_value(&b).unwrap(), serde_json::to_value(&literal).unwrap());
        assert_eq!(
            CostBudget::default().with_max_actions(2),
            CostBudget { max_actions: Some(2), ..CostBudget::default() }
        );

        let t = CostTarget::default()
            .with_target_tool_calls(1)
            .with_target_duration_ms(20.0)
            .with_target_actions(3)
            .with_cost_weight(0.5);
        let literal =
            CostTarget { target_tool_calls: 1, target_duration_ms: 20.0, target_actions: 3, cost_weight: 0.5 };
        assert_eq!(t, literal);
        assert_eq!(serde_json::to_value(&t).unwrap(), serde_json::to_value(&literal).unwrap());
        assert_eq!(
            CostTarget::default().with_cost_weight(1.0),
            CostTarget { cost_weight: 1.0, ..CostTarget::default() }
        );

        for c in [
            ToolFailureClassification::Ordinary,
            ToolFailureClassification::Terminal,
            ToolFailureClassification::ModelRetry,
        ] {
            assert_eq!(ToolFailure::new("m", c), ToolFailure { message: "m".into(), classification: c });
        }
        assert_eq!(ToolFailure::ordinary("m"), ToolFailure::new("m", ToolFailureClassification::Ordinary));
        assert_eq!(ToolFailure::terminal("m"), ToolFailure::new("m", ToolFailureClassification::Terminal));
        assert_eq!(ToolFailure::model_retry("m"), ToolFailure::new("m", ToolFailureClassification::ModelRetry));
    }

    #[test]
    fn timestamps_are_written_exactly_as_chrono_writes_them() {
        let mut cases: Vec<DateTime<Utc>> = Vec::new();
        for secs in [0i64, 1, 59, 86_399, 951_782_400, 1_796_000_000, 253_402_300_799, -62_167_219_200, -1] {
            for nanos in [0u32, 1, 999, 1_000, 5_000_000, 123_000_000, 123_456_000, 123_456_789, 999_999_999] {
                cases.push(DateTime::from_timestamp(secs, nanos).unwrap());
            }
        }
        // Outside 0..=9999 and a leap second: chrono's own path.
        cases.push(DateTime::from_timestamp(253_402_300_800, 7).unwrap());
        cases.push(DateTime::from_timestamp(-62_167_219_201, 0).unwrap());
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31).unwrap().and_hms_nano_opt(23, 59, 59, 1_250_000_000).unwrap();
        cases.push(leap.and_utc());
        cases.push(Utc::now());
        for t in &cases {
            assert_eq!(ours(t), serde_json::to_string(t).unwrap(), "{t:?}");
        }
        let r = ActionResult::new("a", ActionStatus::Succeeded);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["timestamp"], serde_json::to_value(r.timestamp).unwrap());
        let back: ActionResult = serde_json::from_value(v).unwrap();
        assert_eq!(back.timestamp, r.timestamp);
    }

    #[test]
    fn state_changes_read_and_write_the_wire_objects() {
        let text = r#"{"b":{"op":"set","value":[1,{"x":null}]},"a":{"op":"delete"},"n":{"op":"set","value":null}}"#;
        let c: StateChanges = serde_json::from_str(text).unwrap();
        assert_eq!(c.keys().collect::<Vec<_>>(), ["b", "a", "n"]);
        assert_eq!(c["a"], StateMutation::Delete);
        assert_eq!(c.get("n"), Some(&StateMutation::Set { value: Value::Null }));
        assert_eq!(c.get("z"), None);
        // Written back as it was read, by serde and by the direct writer.
        assert_eq!(serde_json::to_string(&c).unwrap(), text);
        let mut direct = String::new();
        c.write(&mut direct);
        assert_eq!(direct, text);
        assert_eq!(c.to_value(), serde_json::from_str::<Value>(text).unwrap());
        // A change to a key already changed replaces it in its place.
        let mut d = c.clone();
        assert_eq!(d.insert("b", StateMutation::Delete), Some(c["b"].clone()));
        assert_eq!(d.keys().collect::<Vec<_>>(), ["b", "a", "n"]);
        assert_eq!(d.len(), 3);
        // Equal whatever the order; not equal with a change differing.
        let reordered: StateChanges = [("n", &c["n"]), ("a", &c["a"]), ("b", &c["b"])]
            .into_iter()
            .map(|(k, m)| (k.to_string(), m.clone()))
            .collect();
        assert_eq!(reordered, c);
        assert_ne!(d, c);
        // A repeated key keeps the last (as a map read does); a change that
        // is not one is refused.
        let twice: StateChanges = serde_json::from_str(r#"{"k":{"op":"delete"},"k":{"op":"set","value":2}}"#).unwrap();
        assert_eq!(twice.len(), 1);
        assert_eq!(twice["k"], StateMutation::Set { value: serde_json::json!(2) });
        for bad in [r#"{"k":{"op":"rename"}}"#, r#"{"k":1}"#, "[]"] {
            assert!(serde_json::from_str::<StateChanges>(bad).is_err(), "{bad}");
        }
        // Past the scanned few, through an index: the same outcome, read
        // from pairs or from JSON text with repeated keys.
        let many: Vec<(String, StateMutation)> =
            (0..80).map(|n| (format!("k{}", n % 30), StateMutation::Set { value: Value::from(n) })).collect();
        let mut scanned = StateChanges::new();
        for (k, m) in many.clone() {
            scanned.insert(k, m);
        }
        let text = format!(
            "{{{}}}",
            many.iter().map(|(k, m)| format!("\"{k}\":{}", m.to_value())).collect::<Vec<_>>().join(",")
        );
        for indexed in [StateChanges::from_pairs(many), serde_json::from_str(&text).unwrap()] {
            assert_eq!(indexed.len(), 30);
            assert_eq!(indexed.iter().collect::<Vec<_>>(), scanned.iter().collect::<Vec<_>>());
            assert_eq!(indexed["k5"], StateMutation::Set { value: Value::from(65) });
        }
        let mut e = c;
        e.clear();
        assert!(e.is_empty() && serde_json::to_string(&e).unwrap() == "{}");
    }

    #[test]
    fn to_json_string_writes_exactly_what_serde_json_writes() {
        let odd = "quote \" backslash \\ newline \n tab \t nul \u{0} bell \u{7} del \u{7f} é 😀 </script>";
        let mut results =
            vec![ActionResult::new("a", ActionStatus::Succeeded), ActionResult::new(odd, ActionStatus::Failed)];
        let mut full = ActionResult::new("w\"1", ActionStatus::Skipped);
        full.output = Some(serde_json::json!({
            "n": null, "t": true, "f": false, "i": -7, "u": 18446744073709551615u64, "x": 1.5e-7, "y": 1e300,
            "z": 0.1, "s": odd, odd: [1, [2, {}], [], "x"], "e": {}
        }));
        full.error = Some(odd.to_string());
        full.state_changes.insert("k0", StateMutation::Set { value: serde_json::json!(0) });
        full.state_changes.insert(odd, StateMutation::Delete);
        full.state_changes
            .insert("obj", StateMutation::Set { value: serde_json::json!({"b": [1, {"a": null}], "a": odd}) });
        full.duration_ms = Some(0.010285);
        full.rolled_back = true;
        full.terminal = true;
        full.compensated = true;
        full.compensation_error = Some("undo \r failed".into());
        results.push(full);
        for (d, out) in
            [(f64::NAN, Value::Null), (f64::INFINITY, Value::String(String::new())), (-0.0, serde_json::json!([]))]
        {
            let mut r = ActionResult::new("d", ActionStatus::Rejected);
            r.duration_ms = Some(d);
            r.output = Some(out);
            results.push(r);
        }
        for status in [ActionStatus::Proposed, ActionStatus::Validated, ActionStatus::Executing] {
            results.push(ActionResult::new("", status));
        }
        // Results within one second share the rendered date and time.
        for (secs, nanos) in [
            (1_796_000_000, 0),
            (1_796_000_000, 5_000_000),
            (1_796_000_000, 123_456_000),
            (1_796_000_000, 1),
            (1_796_000_001, 999_999_999),
            (1_796_000_000, 7),
            (-1, 0),
            (951_782_400, 120_000_000),
        ] {
            let mut r = ActionResult::new("t", ActionStatus::Succeeded);
            r.timestamp = DateTime::from_timestamp(secs, nanos).unwrap();
            results.push(r);
        }
        let mut far = ActionResult::new("far", ActionStatus::Succeeded);
        far.timestamp = DateTime::from_timestamp(253_402_300_800, 7).unwrap();
        results.push(far);
        let mut leap = ActionResult::new("leap", ActionStatus::Succeeded);
        leap.timestamp = NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_nano_opt(23, 59, 59, 1_250_000_000)
            .unwrap()
            .and_utc();
        results.push(leap);
        for (id, results, total) in [("p1", results, 12.25), (odd, Vec::new(), f64::NAN), ("", Vec::new(), 0.0)] {
            let p = ProposalResult {
                proposal_id: id.to_string(),
                results,
                cost: CostSummary {
                    tool_calls: 3,
                    actions_executed: u64::MAX,
                    actions_rejected: 0,
                    actions_skipped: 11,
                    total_duration_ms: total,
                    retries: 2,
                },
                artifacts: Vec::new(),
                status: None,
                suspension: None,
            };
            assert_eq!(p.to_json_string(), serde_json::to_string(&p).unwrap());
            let mut with = p.clone();
            with.artifacts.push(serde_json::json!({"kind": "patch", "files": ["a b", odd], "patch": odd, "bytes": 3}));
            assert_eq!(with.to_json_string(), serde_json::to_string(&with).unwrap());
            with.status = Some("suspended".into());
            with.suspension = Some(serde_json::json!({"id": odd, "pending": [{"action_id": "a"}], "waiting": []}));
            assert_eq!(with.to_json_string(), serde_json::to_string(&with).unwrap());
            // Consuming the result writes the same text.
            let serde = serde_json::to_string(&with).unwrap();
            assert_eq!(with.into_json_string(), serde);
        }
    }
}
