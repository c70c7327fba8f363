//! The plan/apply gate and approvals part of the JSON facade.
//!
//! The gate functions are stateless: the session state (`session`-scoped
//! rules and the breaker) travels in and out as JSON, and `always`-scoped
//! decisions persist to a policy store file named by `policy_store`.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::gate::{
    ApprovalDecision, ApprovalStore, BreakerConfig, Call, Decision, FilePolicyStore, Gate, GateRule, GateSession,
    OperationIndex, OperationSpec, Plan, PlanDecision, PolicyStore, RuleTable, approval_key, denial_result,
    input_digest, plan_mode_filter_json,
};
use crate::{Error, Result};

/// Options of [`plan_build`] and [`plan_decide`] (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Options {
    turn_id: Option<String>,
    rules: Vec<GateRule>,
    default_resource: Option<Decision>,
    default_read: Option<Decision>,
    session: Option<GateSession>,
    session_id: Option<String>,
    session_ttl_secs: Option<u64>,
    breaker: Option<BreakerConfig>,
    policy_store: Option<String>,
    policy_store_read_only: bool,
    now: Option<DateTime<Utc>>,
}

fn parse<T: serde::de::DeserializeOwned>(name: &str, v: Value) -> Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." { String::new() } else { format!(" at `{path}`") };
        Error::invalid_argument(name, format!("{}{at}", e.inner()))
    })
}

fn text_arg(name: &str, text: &str) -> Result<Value> {
    crate::ir::from_json_str(text).map_err(|e| Error::invalid_argument(name, e.to_string()))
}

impl Options {
    fn from_value(v: Option<Value>) -> Result<Self> {
        match v {
            None | Some(Value::Null) => Ok(Options::default()),
            Some(v) => parse("options", v),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.now.unwrap_or_else(Utc::now)
    }

    fn session(&mut self, now: DateTime<Utc>) -> GateSession {
        if let Some(s) = self.session.take() {
            return s;
        }
        let mut s = GateSession::new(self.session_id.clone().unwrap_or_else(|| "session".to_string()), now);
        s.ttl_secs = self.session_ttl_secs;
        if let Some(b) = self.breaker {
            s = s.with_breaker(b);
        }
        s
    }

    fn store(&self) -> Option<FilePolicyStore> {
        self.policy_store.as_ref().map(|p| {
            if self.policy_store_read_only { FilePolicyStore::open_read_only(p) } else { FilePolicyStore::open(p) }
        })
    }

    fn table(&self) -> RuleTable {
        let mut t = RuleTable::new(self.rules.clone());
        if let Some(d) = self.default_resource {
            t.default_resource = d;
        }
        if let Some(d) = self.default_read {
            t.default_read = d;
        }
        t
    }
}

fn to_value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

fn plan_build_value(calls: Value, operations: Value, options: Option<Value>) -> Result<Value> {
    let calls: Vec<Call> = parse("calls", calls)?;
    let operations: Vec<OperationSpec> = parse("operations", operations)?;
    let mut opts = Options::from_value(options)?;
    let now = opts.now();
    let mut session = opts.session(now);
    let table = opts.table();
    let store = opts.store();
    let mut gate = Gate::new(&table);
    if let Some(s) = &store {
        gate = gate.with_store(s as &dyn PolicyStore);
    }
    let turn_id = opts.turn_id.clone().unwrap_or_else(|| format!("turn-{}", uuid::Uuid::new_v4().simple()));
    let index = OperationIndex::new(operations);
    let plan = gate.build_plan(&turn_id, &calls, &index, &mut session, now);
    let tool_results: Vec<Value> = plan.items.iter().filter_map(denial_result).collect();
    Ok(json!({"plan": to_value(&plan), "session": to_value(&session), "tool_results": tool_results}))
}

fn plan_decide_value(plan: Value, item_id: &str, decision: Value, options: Option<Value>) -> Result<Value> {
    let mut plan: Plan = parse("plan", plan)?;
    let decision: PlanDecision = parse("decision", decision)?;
    let mut opts = Options::from_value(options)?;
    let now = opts.now();
    let mut session = opts.session(now);
    let table = opts.table();
    let store = opts.store();
    let mut gate = Gate::new(&table);
    if let Some(s) = &store {
        gate = gate.with_store(s as &dyn PolicyStore);
    }
    let item = gate.decide(&mut plan, item_id, &decision, &mut session, now)?;
    Ok(json!({
        "plan": to_value(&plan),
        "item": to_value(&item),
        "session": to_value(&session),
        "tool_result": denial_result(&item),
    }))
}

fn approvals_pending_value(state_dir: &str) -> Result<Value> {
    store_pending_value(&ApprovalStore::open(state_dir)?)
}

/// `{pending: [...]}` of a store.
pub(crate) fn store_pending_value(store: &ApprovalStore) -> Result<Value> {
    Ok(json!({"pending": to_value(&store.pending()?)}))
}

fn approval_resolve_value(state_dir: &str, key: &str, decision: &Value, reason: &str) -> Result<Value> {
    store_resolve_value(&ApprovalStore::open(state_dir)?, key, decision, reason)
}

/// Parses the `decision` text of `approval_resolve`: JSON, else the string itself.
pub(crate) fn decision_value(decision: &str) -> Value {
    serde_json::from_str::<Value>(decision).unwrap_or_else(|_| Value::String(decision.to_string()))
}

/// Resolves `key` in a store: the resolution in force plus `applied`.
pub(crate) fn store_resolve_value(store: &ApprovalStore, key: &str, decision: &Value, reason: &str) -> Result<Value> {
    let outcome = store.resolve(key, ApprovalDecision::normalize(decision), reason)?;
    let mut v = to_value(&outcome.resolution);
    if let Value::Object(m) = &mut v {
        m.insert("applied".into(), Value::Bool(outcome.applied));
    }
    Ok(v)
}

fn approval_key_value(tool: &str, input: &Value) -> Result<Value> {
    let digest = input_digest(input)?;
    Ok(json!({"key": approval_key(tool, &digest), "tool": tool, "input_digest": digest}))
}

/// Builds the plan of a batch of calls (`planBuild`).
///
/// `calls_json`: `[{call_id, provider?, operation_name, input?, producer_category?}]`;
/// `operations_json`: the current specs `[{provider?, operation_name, kind?, risk?,
/// description?, parameters?}]`; `options_json` (optional): `{turn_id?, rules?,
/// default_resource?, default_read?, session?, session_id?, session_ttl_secs?,
/// breaker?, policy_store?, policy_store_read_only?, now?}`.
/// Returns `{plan, session, tool_results}` (the synthesized denial results).
pub fn plan_build(calls_json: &str, operations_json: &str, options_json: Option<&str>) -> Result<String> {
    let options = options_json.map(|o| text_arg("options", o)).transpose()?;
    let v = plan_build_value(text_arg("calls", calls_json)?, text_arg("operations", operations_json)?, options)?;
    Ok(v.to_string())
}

/// Applies a client decision `{decision, corrected_input?, scope?, reason?}` to
/// one item of a plan (`planDecide`). Returns `{plan, item, session, tool_result}`.
pub fn plan_decide(plan_json: &str, item_id: &str, decision_json: &str, options_json: Option<&str>) -> Result<String> {
    let options = options_json.map(|o| text_arg("options", o)).transpose()?;
    let v = plan_decide_value(text_arg("plan", plan_json)?, item_id, text_arg("decision", decision_json)?, options)?;
    Ok(v.to_string())
}

/// The pending approvals of a state directory (`approvalsPending`): `{pending: [...]}`.
pub fn approvals_pending(state_dir: &str) -> Result<String> {
    Ok(approvals_pending_value(state_dir)?.to_string())
}

/// Resolves an approval (`approvalResolve`). `decision` is `allow`, `deny`
/// or a JSON resolution value; anything but an explicit allow is a deny.
/// Returns the resolution in force and `applied` (false when something
/// closed the approval first).
pub fn approval_resolve(state_dir: &str, key: &str, decision: &str, reason: &str) -> Result<String> {
    Ok(approval_resolve_value(state_dir, key, &decision_value(decision), reason)?.to_string())
}

fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str> {
    super::required(params, name)?.as_str().ok_or_else(|| Error::invalid_argument(name, "must be a string"))
}

/// Answers the methods of this area; `None` for any other name.
pub(crate) fn call(method: &str, params: &Value) -> Option<Result<Value>> {
    use super::{json_arg, required};
    let opt = |name: &str| params.get(name).filter(|v| !v.is_null()).cloned();
    Some(match method {
        "plan_build" => (|| {
            let calls = json_arg(required(params, "calls")?)?;
            let operations = params.get("operations").map(json_arg).transpose()?.unwrap_or(json!([]));
            let mut options = match opt("options") {
                Some(o) => json_arg(&o)?,
                None => json!({}),
            };
            // Options may also be given as top-level params.
            if let (Value::Object(o), Value::Object(p)) = (&mut options, params) {
                for (k, v) in p {
                    if !matches!(k.as_str(), "calls" | "operations" | "options") {
                        o.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
            }
            plan_build_value(calls, operations, Some(options))
        })(),
        "plan_decide" => (|| {
            let plan = json_arg(required(params, "plan")?)?;
            let item_id = str_param(params, "item_id")?;
            let decision = json_arg(required(params, "decision")?)?;
            let mut options = match opt("options") {
                Some(o) => json_arg(&o)?,
                None => json!({}),
            };
            if let (Value::Object(o), Value::Object(p)) = (&mut options, params) {
                for (k, v) in p {
                    if !matches!(k.as_str(), "plan" | "item_id" | "decision" | "options") {
                        o.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
            }
            plan_decide_value(plan, item_id, decision, Some(options))
        })(),
        "approvals_pending" => str_param(params, "state_dir").and_then(approvals_pending_value),
        "approval_resolve" => (|| {
            let dir = str_param(params, "state_dir")?;
            let key = str_param(params, "key")?;
            let decision = params.get("decision").cloned().unwrap_or(Value::Null);
            let reason = params.get("reason").and_then(Value::as_str).unwrap_or("");
            approval_resolve_value(dir, key, &decision, reason)
        })(),
        "approval_key" => (|| {
            let tool = str_param(params, "tool")?;
            let input = params.get("input").map(json_arg).transpose()?.unwrap_or(json!({}));
            approval_key_value(tool, &input)
        })(),
        "plan_mode_tools" => (|| {
            let tools = json_arg(required(params, "tools")?)?;
            let Value::Array(tools) = tools else {
                return Err(Error::invalid_argument("tools", "must be an array of tool specs"));
            };
            Ok(Value::Array(plan_mode_filter_json(&tools)))
        })(),
        "denial_result" => (|| {
            let item: crate::gate::PlanItem = parse("item", json_arg(required(params, "item")?)?)?;
            Ok(denial_result(&item).unwrap_or(Value::Null))
        })(),
        _ => return None,
    })
}
