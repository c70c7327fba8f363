//! The method dispatcher: each method is a thin call into the facade
//! ([`crate::api::call`] for stateless methods, the connection's
//! [`crate::api::runtime::CarRuntime`] for stateful ones).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Config;
use super::conn::{Conn, Params};
use super::executor::WsToolExecutor;
use super::handshake;
use super::rpc::RpcError;
use futures::FutureExt;

use crate::ir::{ActionProposal, ActionResult, ActionStatus, CostSummary, FailureBehavior, ProposalResult};

type R = Result<Value, RpcError>;

/// A handler's answer: a value, or a result already written as JSON text
/// (a proposal's result, written directly rather than built as a value and
/// then written).
pub(crate) enum Answer {
    Value(Value),
    Text(String),
}

impl Answer {
    fn into_value(self) -> R {
        match self {
            Answer::Value(v) => Ok(v),
            Answer::Text(t) => parse(&t),
        }
    }
}

/// The reason every action of a proposal submitted to a halted session carries.
pub(crate) const HALTED: &str = "session halted after a terminal tool failure; reconnect or call session.clear_halt";

/// The deadline of `proposal.submit`'s execution: the flat deadline, raised
/// to the proposal's own budgets: the sum over actions of `timeout_ms` (the
/// tool budget when undeclared) times its attempts, plus the transport grace.
/// While a supervisor is subscribed, a supervision park (a layer of the
/// admission stage, inside the execution) adds the supervision decision
/// timeout.
pub(crate) fn submit_deadline(config: &Config, p: &ActionProposal, supervised: bool) -> Duration {
    let park = if supervised { config.supervision_timeout } else { Duration::ZERO };
    let mut total = config.submit_grace.saturating_add(park);
    for a in &p.actions {
        let budget = a.timeout_ms.map(Duration::from_millis).unwrap_or(config.tool_timeout);
        let attempts = if a.failure_behavior == FailureBehavior::Retry { a.max_retries.saturating_add(1) } else { 1 };
        total = total.saturating_add(budget.saturating_mul(attempts));
    }
    total.max(config.handler_timeout)
}

/// Runs one known method under its deadline, a panic answered as `-32603`.
/// `proposal.submit` parses its params first (errors answer at once), is
/// admitted (halt, tier, supervision), then executes under the deadline its
/// parsed proposal derives.
///
/// Each handler's future is boxed where it is made: they are large (the
/// engine's run, the dispatch over every method), and a future held inline
/// is copied whole each time an enclosing future moves (into `guarded`, the
/// deadline, the connection's task): in a daemon serving one client those
/// copies were about a quarter of its instructions (callgrind, 2026-12-06).
pub(crate) async fn run(conn: &Arc<Conn>, method: &str, params: Params) -> Result<Answer, RpcError> {
    let params = match params {
        // Only `proposal.submit` frames are read from their text.
        Params::Submit(s) => return submit(conn, method, Submission::from_read(*s, &conn.rt)?).await,
        Params::Value(v) => v,
    };
    if method == "proposal.submit" {
        return submit(conn, method, Submission::read(&params, &conn.rt)?).await;
    }
    if method == "proposal.resume" {
        let id = req_str(&params, "id")?.to_string();
        let session = opt_str(&params, "session_id")?.map(str::to_string);
        // The deadline derives from the suspended proposal, as a submission's.
        let cp = conn.rt.runtime().checkpoints().get(&id).await.map_err(in_param("id"))?;
        let Some(cp) = cp else {
            return Err(RpcError::invalid_params(format!(
                "id: no suspended proposal `{id}` (never suspended, or already resumed to its end)"
            ))
            .with_data(json!({"code": "suspension_not_found"})));
        };
        if conn.halted.load(Ordering::SeqCst) {
            return reject_all(&cp.proposal, HALTED).map(Answer::Value);
        }
        let deadline = submit_deadline(&conn.config, &cp.proposal, conn.supervisors.has_subscribers());
        return with_deadline(method, deadline, guarded(method, Box::pin(resume(conn, &id, session.as_deref()))))
            .await
            .map(Answer::Value);
    }
    with_deadline(method, conn.config.handler_timeout, guarded(method, Box::pin(dispatch(conn, method, params))))
        .await
        .map(Answer::Value)
}

/// `proposal.submit` of a read submission: admitted (halt, tier,
/// supervision), then executed under the deadline its proposal derives.
async fn submit(conn: &Arc<Conn>, method: &str, submission: Submission) -> Result<Answer, RpcError> {
    if let Some(refused) = guarded(method, Box::pin(admit(conn, &submission))).await? {
        return Ok(Answer::Value(refused));
    }
    let deadline = submit_deadline(&conn.config, &submission.proposal, conn.supervisors.has_subscribers());
    with_deadline(method, deadline, guarded(method, Box::pin(execute(conn, submission)))).await
}

/// Runs a handler, turning a panic in it into an internal error for its call.
pub(crate) async fn guarded<T>(
    method: &str,
    handler: impl std::future::Future<Output = Result<T, RpcError>>,
) -> Result<T, RpcError> {
    std::panic::AssertUnwindSafe(handler)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(RpcError::internal(format!("handler '{method}' failed unexpectedly"))))
}

/// Runs a handler under its deadline: `-32004` when it is abandoned (the
/// handler's future is dropped, which cancels its in-flight callbacks).
pub(crate) async fn with_deadline<T>(
    method: &str,
    deadline: Duration,
    handler: impl std::future::Future<Output = Result<T, RpcError>>,
) -> Result<T, RpcError> {
    match tokio::time::timeout(deadline, handler).await {
        Ok(r) => r,
        Err(_) => Err(RpcError::new(
            super::rpc::HANDLER_DEADLINE,
            format!(
                "handler '{method}' exceeded its {} response deadline; the operation may have committed, read its state before retrying",
                super::executor::human(deadline)
            ),
        )),
    }
}

fn obj(params: &Value) -> Result<&Map<String, Value>, RpcError> {
    params.as_object().ok_or_else(|| RpcError::invalid_params("params must be an object"))
}

fn req_str<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    match obj(params)?.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(RpcError::invalid_params(format!("{name} must be a non-empty string"))),
        None | Some(Value::Null) => Err(RpcError::invalid_params(format!("{name} is required"))),
        Some(_) => Err(RpcError::invalid_params(format!("{name} must be a string"))),
    }
}

fn opt_str<'a>(params: &'a Value, name: &str) -> Result<Option<&'a str>, RpcError> {
    match obj(params)?.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::invalid_params(format!("{name} must be a string"))),
    }
}

fn req<'a>(params: &'a Value, name: &str) -> Result<&'a Value, RpcError> {
    obj(params)?
        .get(name)
        .filter(|v| !v.is_null())
        .ok_or_else(|| RpcError::invalid_params(format!("{name} is required")))
}

/// A proposal param as JSON text: an object or a JSON string.
fn proposal_text(v: &Value) -> Result<String, RpcError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Object(_) => Ok(v.to_string()),
        _ => Err(RpcError::invalid_params("proposal must be an object")),
    }
}

/// Facade JSON text back to a value.
fn parse(text: &str) -> R {
    serde_json::from_str(text).map_err(|e| RpcError::internal(format!("facade returned invalid json: {e}")))
}

/// A facade error raised while reading param `name`.
fn in_param(name: &'static str) -> impl Fn(crate::Error) -> RpcError {
    move |e| match &e {
        crate::Error::Input(crate::error::InputError::InvalidArgument { .. }) => e.into(),
        crate::Error::Input(_) => {
            let data = json!({"code": e.code(), "family": e.family(), "details": e.details()});
            RpcError::invalid_params(format!("{name}: {e}")).with_data(data)
        }
        _ => e.into(),
    }
}

fn scope(session_id: Option<&str>) -> Value {
    match session_id {
        Some(s) => json!({"session_id": s}),
        None => json!("global"),
    }
}

/// Runs one known method.
pub(crate) async fn dispatch(conn: &Arc<Conn>, method: &str, params: Value) -> R {
    let rt = &conn.rt;
    let p = &params;
    match method {
        "capabilities.list" => {
            let role = conn.role().map_or("operator", |r| r.as_str());
            Ok(handshake::capabilities_list(role, conn.may_decide()))
        }
        "server.schema" => Ok(handshake::server_schema()),
        "session.init" => session_init(conn, p),
        "session.clear_halt" => {
            let was = conn.halted.swap(false, Ordering::SeqCst);
            Ok(json!({"cleared": was, "halted": false}))
        }
        "session.policy.open" => Ok(json!({"session_id": rt.open_session()?})),
        "session.policy.close" => Ok(json!({"closed": rt.close_session(req_str(p, "session_id")?)?})),
        "tools.register" => {
            let defs = match p {
                Value::Array(defs) => defs,
                _ => match req(p, "tools")? {
                    Value::Array(defs) => defs,
                    _ => return Err(RpcError::invalid_params("tools must be an array of tool definitions")),
                },
            };
            register_tools(conn, defs).map(Value::from)
        }
        "tools.list" => {
            let tools = parse(&rt.list_tools())?;
            let count = tools.as_array().map_or(0, Vec::len);
            Ok(json!({"tools": tools, "count": count}))
        }
        "tools.unregister" => {
            let name = req_str(p, "name")?;
            Ok(json!({"unregistered": name, "removed": rt.unregister_tool(name)}))
        }
        "tools.poll" => match rt.tool_poll(req_str(p, "handle")?) {
            Some(t) => parse(&t),
            None => Ok(Value::Null),
        },
        "tools.cancel" => Ok(json!({"cancelled": rt.tool_cancel(req_str(p, "handle")?)})),
        "tools.stream.push" => stream_push(conn, p).await,
        "tools.log" => {
            let id = req_str(p, "request_id")?;
            let Some((tool, action_id)) = conn.call_of(id) else {
                return Err(RpcError::invalid_params(format!(
                    "no tool call `{id}` is in flight on this connection (a log belongs to a call being served)"
                ))
                .with_data(json!({"code": "call_not_in_flight", "request_id": id})));
            };
            let data = obj(p)?.get("data").cloned();
            let call =
                crate::api::runtime::ToolLogEntry { request_id: id, tool: Some(&tool), action_id: Some(&action_id) };
            rt.tool_log_entry(call, req_str(p, "level")?, req_str(p, "message")?, data)
                .map_err(|e| RpcError::invalid_params(e.to_string()))?;
            Ok(json!({"logged": true}))
        }
        "tools.stream.subscribe" => {
            conn.subscribe_tool_stream();
            Ok(json!({"subscribed": true}))
        }
        "proposal.plan" => {
            let text = proposal_text(req(p, "proposal")?)?;
            let scope = match obj(p)?.get("scope") {
                None | Some(Value::Null) => None,
                Some(s @ Value::Object(_)) => Some(s.to_string()),
                Some(_) => return Err(RpcError::invalid_params("scope must be an object")),
            };
            parse(&rt.proposal_plan(&text, opt_str(p, "session_id")?, scope.as_deref()).map_err(in_param("proposal"))?)
        }
        "proposal.apply" => {
            let (proposal, session, scope) = rt.proposal_take(req_str(p, "plan_id")?).map_err(|e| {
                if e.code() == "plan_not_found" { RpcError::invalid_params(e.to_string()) } else { e.into() }
            })?;
            let submission = Submission { proposal, session, scope };
            match admit(conn, &submission).await? {
                Some(refused) => Ok(refused),
                None => execute(conn, submission).await.and_then(Answer::into_value),
            }
        }
        "proposal.suspended" => {
            parse(&rt.suspended_proposals(resume_owner(conn).as_deref()).await.map_err(RpcError::from)?)
        }
        "verify" => {
            let proposal = req(p, "proposal")?.clone();
            let state = match obj(p)?.get("initial_state") {
                Some(s) if !s.is_null() => s.clone(),
                _ => parse(&rt.state_snapshot(None)?)?,
            };
            let schemas = parse(&rt.list_tools())?;
            let args = json!({"proposal": proposal, "initial_state": state, "tool_schemas": schemas});
            crate::api::call("verify", &args).map_err(in_param("proposal"))
        }
        "verify.monte_carlo" => {
            // As `verify`: the daemon's state when no initial state is given;
            // rates not given come from this daemon's event log.
            let mut args = obj(p)?.clone();
            if args.get("initial_state").is_none_or(Value::is_null) {
                args.insert("initial_state".into(), parse(&rt.state_snapshot(None)?)?);
            }
            crate::api::planning::monte_carlo_call(&Value::Object(args), rt.tool_history())
                .map_err(in_param("proposal"))
        }
        "policy.register" => {
            let name = req_str(p, "name")?;
            let rule = req_str(p, "rule")?;
            let session = opt_str(p, "session_id")?;
            register_policy(conn, p, name, rule, session)?;
            Ok(json!({"registered": name, "scope": scope(session)}))
        }
        "policy.unregister" => {
            let name = req_str(p, "name")?;
            let session = opt_str(p, "session_id")?;
            protect_policy(conn, name, session, "removed")?;
            let removed = rt.unregister_policy(name, session)?;
            Ok(json!({"unregistered": name, "removed": removed, "scope": scope(session)}))
        }
        "policy.list" => {
            let session = opt_str(p, "session_id")?;
            Ok(json!({"policies": parse(&rt.list_policies(session)?)?, "scope": scope(session)}))
        }
        "state.get" | "state.set" | "state.exists" | "state.keys" | "state.snapshot"
            if let Some(shared) = rt.runtime().shared_state() =>
        {
            shared_state_call(&shared, method, p).await
        }
        "state.get" => parse(&rt.state_get(req_str(p, "key")?, opt_str(p, "tenant_id")?)?),
        "state.set" => {
            let key = req_str(p, "key")?;
            let value = obj(p)?.get("value").cloned().unwrap_or(Value::Null);
            rt.state_set(key, &value.to_string(), opt_str(p, "tenant_id")?)?;
            Ok(json!("ok"))
        }
        "state.exists" => Ok(json!(rt.state_exists(req_str(p, "key")?, opt_str(p, "tenant_id")?)?)),
        "state.keys" => Ok(json!(rt.state_keys(opt_str(p, "tenant_id")?)?)),
        "state.snapshot" => parse(&rt.state_snapshot(opt_str(p, "tenant_id")?)?),
        "events.count" => Ok(json!(rt.event_count())),
        "events.truncate" => parse(&rt.events_truncate(&p.to_string()).map_err(in_param("params"))?),
        "events.cost_by_agent" => parse(&rt.event_cost_by_agent()),
        "metrics.summary" => parse(&rt.metrics_summary()),
        // An agent's runs are its own: the server assigns its identity, and
        // it lists and reads only its runs.
        "runs.start" => parse(&rt.runs_start_as(&p.to_string(), own_agent(conn).as_deref())?),
        "runs.record_model_turn" => parse(&rt.runs_record_model_turn(&p.to_string())?),
        "runs.complete" => parse(&rt.runs_complete(&p.to_string())?),
        "runs.list" => parse(&rt.runs_list_as(Some(&p.to_string()), own_agent(conn).as_deref())?),
        "runs.get_trace" => parse(&rt.runs_get_trace_as(&p.to_string(), own_agent(conn).as_deref())?),
        "runs.subscribe" => {
            let run_id = opt_str(p, "run_id")?.map(str::to_string);
            conn.subscribe_runs(run_id.clone(), own_agent(conn));
            Ok(json!({"subscribed": true, "run_id": run_id}))
        }
        "runs.unsubscribe" => Ok(json!({"subscribed": false, "was_subscribed": conn.unsubscribe_runs()})),
        "events.stats" => parse(&rt.event_stats()),
        "events.query" if obj(p)?.get("store").is_some_and(|v| v != &Value::Bool(false)) => store_query(conn, p).await,
        "events.query" => parse(&rt.event_query(&Value::Object(obj(p)?.clone()).to_string())?),
        "events.chain.verify" if obj(p)?.get("store").is_some_and(|v| v != &Value::Bool(false)) => {
            Ok(store_events(conn)?.verify().await.map_err(RpcError::from)?.to_json())
        }
        "events.clear" => parse(&rt.event_clear()),
        "events.retention" => {
            let policy = obj(p)?.get("policy").filter(|v| !v.is_null()).map(Value::to_string);
            parse(&rt.event_retention(policy.as_deref()).map_err(in_param("policy"))?)
        }
        "events.chain.enable" => {
            rt.enable_event_log_hash_chaining();
            Ok(json!({"ok": true}))
        }
        "events.chain.verify" => parse(&rt.verify_event_log_chain()),
        "admission.configure" => {
            configure_admission(conn, req(p, "config")?)?;
            parse(&rt.admission_config())
        }
        "admission.get" => parse(&rt.admission_config()),
        "permission.get_tier" => Ok(json!({"granted_tier": rt.permission_get_tier()})),
        "permission.set_tier" => Ok(json!({"granted_tier": rt.permission_set_tier(req_str(p, "tier")?)?})),
        "permission.classify" => {
            let args = json!({"proposal": req(p, "proposal")?});
            crate::api::call("permission_classify", &args).map_err(in_param("proposal"))
        }
        "permission.evaluate" => evaluate(conn, p).await,
        "permission.pending" => {
            let decisions = evaluate(conn, p).await?;
            let pending: Vec<Value> = decisions
                .get("decisions")
                .and_then(Value::as_array)
                .map(|rows| rows.iter().filter(|r| r["decision"] == "needs_approval").cloned().collect())
                .unwrap_or_default();
            Ok(json!({"pending": pending}))
        }
        "supervision.subscribe" => {
            obj(p)?;
            conn.supervisors.subscribe(&conn.session_id, conn.outbox(), p)
        }
        "supervision.unsubscribe" => {
            let was = conn.supervisors.unsubscribe(&conn.session_id);
            Ok(json!({"subscribed": false, "was_subscribed": was}))
        }
        "supervision.pending" => conn.supervisors.pending(&conn.session_id),
        "supervision.decide" => {
            let (principal, reviewer) = (conn.principal(), conn.reviewer());
            let me = super::supervision::Decider {
                conn: &conn.session_id,
                principal: &principal,
                reviewer: &reviewer,
                allow_self: conn.config.allow_self_approval,
            };
            conn.supervisors.decide(&me, p)
        }
        "host.subscribe" => {
            obj(p)?;
            Ok(approvals_of(conn)?.subscribe(&conn.session_id, conn.outbox()))
        }
        "host.unsubscribe" => {
            let was = approvals_of(conn)?.unsubscribe(&conn.session_id);
            Ok(json!({"subscribed": false, "was_subscribed": was}))
        }
        "host.approvals" => approvals_of(conn)?.pending().await,
        "host.approval" => approvals_of(conn)?.get(req_str(p, "approval_id")?),
        "host.resolve_approval" => {
            let d = super::approvals::DecisionRequest::parse(p)?;
            let (principal, reviewer) = (conn.principal(), conn.reviewer());
            approvals_of(conn)?
                .resolve(&super::approvals::Reviewer { principal: &principal, reviewer: &reviewer }, &d)
                .await
        }
        "permission.approve" => record_approval(conn, p, true).await,
        "permission.reject" => record_approval(conn, p, false).await,
        other => Err(RpcError::unknown_method(other)),
    }
}

/// The shared store's event log, for an operator or host connection
/// (`events.query {store: true}`, `events.chain.verify {store: true}`):
/// every daemon's events, not only this connection's. An agent reads only
/// its own session's log.
fn store_events(conn: &Conn) -> Result<Arc<dyn crate::store::EventBackend>, RpcError> {
    if !matches!(conn.role(), Some(super::conn::Role::Operator | super::conn::Role::Host)) {
        return Err(RpcError::internal("forbidden: only an operator or host connection reads the shared event log")
            .with_data(json!({"code": "forbidden"})));
    }
    conn.config.shared_store.as_ref().map(|s| s.events.clone()).ok_or_else(|| {
        RpcError::invalid_params("store: this daemon has no shared store (start it with --store postgres://...)")
            .with_data(json!({"code": "store_not_configured"}))
    })
}

/// `events.query {store: true, ...}`: the shared store's events matching
/// the query (every daemon's), newest first.
async fn store_query(conn: &Conn, p: &Value) -> R {
    let backend = store_events(conn)?;
    let mut q = obj(p)?.clone();
    if q.remove("store") != Some(Value::Bool(true)) {
        return Err(RpcError::invalid_params("store must be a boolean"));
    }
    let query: crate::events::EventQuery =
        serde_json::from_value(Value::Object(q)).map_err(|e| RpcError::invalid_params(format!("query: {e}")))?;
    let events: Vec<Value> = backend.query(&query).await.map_err(RpcError::from)?.iter().map(|e| e.to_json()).collect();
    Ok(json!({"count": events.len(), "events": events, "source": "store"}))
}

/// An agent connection's agent id (its runs are its own); `None` for the
/// operator and the host.
fn own_agent(conn: &Conn) -> Option<String> {
    conn.identity().filter(|i| i.role == super::conn::Role::Agent).and_then(|i| i.agent_id)
}

/// The daemon's approvals, or a clear error when it runs without a store.
fn approvals_of(conn: &Conn) -> Result<&Arc<super::approvals::Approvals>, RpcError> {
    conn.approvals.as_ref().ok_or_else(|| {
        RpcError::internal("approvals_not_configured: this daemon has no approvals store (no state root)")
            .with_data(json!({"code": "approvals_not_configured"}))
    })
}

/// `permission.evaluate` against the session's tier and the daemon's
/// approvals ledger (brought up to date first when it is shared).
async fn evaluate(conn: &Conn, p: &Value) -> R {
    let proposal = req(p, "proposal")?;
    let proposal = crate::ir::parse_proposal(&proposal.to_string()).map_err(in_param("proposal"))?;
    let granted = crate::policy::PermissionTier::parse(&conn.rt.permission_get_tier())
        .ok_or_else(|| RpcError::internal("the connection's tier is unknown"))?;
    let latest = match &conn.daemon().ledger {
        Some(l) => {
            let _ = l.refresh().await;
            l.latest_shared()?
        }
        None => {
            if conn.config.ledger_path.is_some() {
                daemon_ledger(conn)?;
            }
            Default::default()
        }
    };
    let rows = crate::policy::PermissionGate::new().evaluate_with(&proposal.actions, granted, &latest);
    Ok(json!({ "decisions": rows }))
}

/// Refuses to remove or shadow a global policy loaded from the policy
/// directory: the operator's file policies are not changed over the wire.
fn protect_policy(conn: &Conn, name: &str, session: Option<&str>, verb: &str) -> Result<(), RpcError> {
    if session.is_none() && conn.protected_policies.iter().any(|n| n == name) {
        return Err(RpcError::internal(format!(
            "forbidden: policy `{name}` was loaded from the daemon's policy directory and cannot be {verb} over the wire"
        ))
        .with_data(json!({"code": "protected_policy", "name": name})));
    }
    Ok(())
}

/// `permission.approve` / `permission.reject`: a ledger record (in the
/// daemon's ledger, and with `--store` in the one every daemon reads); the
/// reviewer is stamped by the server (`car-server:<role>:<principal>`); a
/// client-given one is refused.
async fn record_approval(conn: &Conn, p: &Value, approve: bool) -> R {
    if obj(p)?.contains_key("reviewer") {
        return Err(RpcError::invalid_params("reviewer is stamped by the server; do not send one"));
    }
    let ledger = daemon_ledger(conn)?;
    let reviewer = conn.reviewer();
    let reason = opt_str(p, "reason")?.unwrap_or("");
    let evidence = match obj(p)?.get("evidence") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Value::String(s.clone())),
        Some(other) => Some(Value::String(other.to_string())),
    };
    let rec = match obj(p)?.get("action").filter(|a| !a.is_null()) {
        Some(action) => {
            if !action.is_object() {
                return Err(RpcError::invalid_params("action must be an object"));
            }
            let action: crate::ir::Action =
                crate::ir::from_json_str(&action.to_string()).map_err(in_param("action"))?;
            crate::policy::PermissionGate::new().record_of(&action, approve, &reviewer, reason, evidence)?
        }
        None => {
            let fp = req_str(p, "fingerprint")?;
            let tier = req_str(p, "required_tier")?;
            let tier = crate::policy::PermissionTier::parse(tier)
                .ok_or_else(|| RpcError::invalid_params(format!("required_tier: unknown permission tier `{tier}`")))?;
            crate::policy::ApprovalRecord::new(fp, tier, approve, &reviewer, reason, evidence)?
        }
    };
    ledger.append(&rec).await?;
    serde_json::to_value(&rec).map_err(|e| RpcError::internal(e.to_string()))
}

/// `tools.stream.push {request_id, chunk | chunks}`: the chunks of one of
/// this connection's detached calls. Every chunk is checked before any is
/// taken; a stream that is not open (never opened, ended, or cancelled) is
/// `stream_not_open`.
async fn stream_push(conn: &Conn, p: &Value) -> R {
    let id = req_str(p, "request_id")?;
    let raw: Vec<Value> = match (obj(p)?.get("chunk"), obj(p)?.get("chunks")) {
        (Some(c), None) => vec![c.clone()],
        (None, Some(Value::Array(cs))) => cs.clone(),
        (None, Some(_)) => return Err(RpcError::invalid_params("chunks must be an array")),
        _ => return Err(RpcError::invalid_params("give exactly one of `chunk` and `chunks`")),
    };
    let mut chunks = Vec::with_capacity(raw.len());
    for (i, c) in raw.into_iter().enumerate() {
        chunks.push(serde_json::from_value::<crate::ir::ToolStreamChunk>(c).map_err(|e| {
            RpcError::invalid_params(format!(
                "chunks[{i}]: {e} (a chunk is {{kind: text, text}}, {{kind: data, data}}, {{kind: progress, fraction, message?}}, {{kind: done, result?}} or {{kind: error, message}})"
            ))
        })?);
    }
    match conn.push_stream(id, chunks).await {
        Some(taken) => Ok(json!({"accepted": taken})),
        None => Err(RpcError::invalid_params(format!("no open stream `{id}`: never opened, ended, or cancelled"))
            .with_data(json!({"code": "stream_not_open", "request_id": id}))),
    }
}

/// The daemon's tier ledger, or why there is none (a key that could not be
/// read is reported again, naming the file).
fn daemon_ledger(conn: &Conn) -> Result<&Arc<crate::store::ledger::SharedLedger>, RpcError> {
    if let Some(l) = &conn.daemon().ledger {
        return Ok(l);
    }
    match &conn.config.ledger_path {
        Some(p) => match crate::policy::JsonlLedger::open(p, conn.config.ledger_key_path.as_deref()) {
            Err(e) => Err(e.into()),
            Ok(_) => Err(RpcError::internal("the approvals ledger was disabled at start-up")),
        },
        None => Err(RpcError::internal("no approvals ledger is configured")),
    }
}

fn register_tools(conn: &Conn, defs: &[Value]) -> Result<u64, RpcError> {
    let mut texts = Vec::with_capacity(defs.len());
    for (i, d) in defs.iter().enumerate() {
        if !d.is_object() {
            return Err(RpcError::invalid_params(format!("tools[{i}] must be a tool definition object")));
        }
        if d.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(RpcError::invalid_params(format!("tools[{i}].name is required")));
        }
        texts.push(d.to_string());
    }
    for (i, t) in texts.iter().enumerate() {
        conn.rt.register_tool_schema(t).map_err(|e| {
            let data = json!({"code": e.code(), "family": e.family(), "details": e.details()});
            match e {
                crate::Error::Input(_) => RpcError::invalid_params(format!("tools[{i}]: {e}")).with_data(data),
                other => other.into(),
            }
        })?;
    }
    Ok(texts.len() as u64)
}

fn register_policy(conn: &Conn, p: &Value, name: &str, rule: &str, session: Option<&str>) -> Result<(), RpcError> {
    protect_policy(conn, name, session, "shadowed")?;
    let value = obj(p)?.get("value").map(Value::to_string);
    conn.rt.register_policy(
        name,
        rule,
        opt_str(p, "target")?,
        opt_str(p, "key")?,
        opt_str(p, "pattern")?,
        value.as_deref(),
        session,
    )?;
    Ok(())
}

fn session_init(conn: &Conn, p: &Value) -> R {
    // client_id first: nothing is registered without it.
    req_str(p, "client_id")?;
    let tools = match obj(p)?.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => t.clone(),
        Some(_) => return Err(RpcError::invalid_params("tools must be an array of tool definitions")),
    };
    let policies = match obj(p)?.get("policies") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => t.clone(),
        Some(_) => return Err(RpcError::invalid_params("policies must be an array of policy definitions")),
    };
    for (i, pol) in policies.iter().enumerate() {
        for field in ["name", "rule"] {
            if pol.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(RpcError::invalid_params(format!("policies[{i}].{field} is required")));
            }
        }
    }
    let admission = obj(p)?.get("admission").filter(|v| !v.is_null()).cloned();
    let strict = match obj(p)?.get("strict_fields") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(RpcError::invalid_params("strict_fields must be a boolean")),
    };
    if let Some(config) = &admission {
        // Checked before anything is registered: a bad document changes nothing.
        crate::admission::AdmissionConfig::from_value(config.clone())
            .map_err(|e| RpcError::invalid_params(format!("admission: {e}")))?;
    }
    let tools_registered = register_tools(conn, &tools)?;
    if let Some(config) = &admission {
        configure_admission(conn, config)?;
    }
    if let Some(s) = strict {
        conn.rt.set_strict_fields(s);
    }
    for (i, pol) in policies.iter().enumerate() {
        let (name, rule) = (req_str(pol, "name")?, req_str(pol, "rule")?);
        register_policy(conn, pol, name, rule, opt_str(pol, "session_id")?)
            .map_err(|e| RpcError { message: format!("{} (policies[{i}])", e.message), ..e })?;
    }
    Ok(json!({
        "session_id": conn.session_id,
        "tools_registered": tools_registered,
        "policies_registered": policies.len(),
    }))
}

/// A proposal refused as a whole: every action `rejected` with the reason.
fn reject_all(proposal: &ActionProposal, reason: &str) -> R {
    let results = proposal
        .actions
        .iter()
        .map(|a| {
            let mut r = ActionResult::new(a.id.clone(), ActionStatus::Rejected);
            r.error = Some(reason.to_string());
            r
        })
        .collect();
    let result = ProposalResult {
        proposal_id: proposal.id.clone(),
        results,
        cost: CostSummary { actions_rejected: proposal.actions.len() as u64, ..CostSummary::default() },
        artifacts: Vec::new(),
        status: None,
        suspension: None,
    };
    serde_json::to_value(&result).map_err(|e| RpcError::internal(e.to_string()))
}

/// The params of `proposal.submit`, read once.
struct Submission {
    proposal: ActionProposal,
    session: Option<String>,
    scope: Option<String>,
}

impl Submission {
    fn read(p: &Value, rt: &crate::api::runtime::CarRuntime) -> Result<Submission, RpcError> {
        // The proposal parser refuses a repeated key in any object (the
        // frame's rule), as it does for every front end.
        let text = proposal_text(req(p, "proposal")?)?;
        let session = opt_str(p, "session_id")?.map(str::to_string);
        let scope = match obj(p)?.get("scope") {
            None | Some(Value::Null) => None,
            Some(s @ Value::Object(_)) => Some(s.to_string()),
            Some(_) => return Err(RpcError::invalid_params("scope must be an object")),
        };
        let proposal = crate::api::parse_proposal(&text).map_err(in_param("proposal"))?;
        // A session in strict mode (`session.init {strict_fields: true}`)
        // refuses a field the IR does not know.
        rt.check_strict_fields(&text).map_err(in_param("proposal"))?;
        Ok(Submission { proposal, session, scope })
    }

    /// A submission read from its frame's text (its proposal parsed there).
    fn from_read(read: super::conn::ReadSubmit, rt: &crate::api::runtime::CarRuntime) -> Result<Submission, RpcError> {
        let super::conn::ReadSubmit { frame, proposal } = read;
        rt.check_strict_fields(&frame.proposal).map_err(in_param("proposal"))?;
        Ok(Submission { proposal, session: frame.session_id, scope: None })
    }
}

/// Keys of the admission document only the operator sets (never over the
/// wire): the granted tier has `permission.set_tier`, and the ledger and
/// approvals files are the daemon's own.
const OPERATOR_KEYS: [&str; 9] = [
    "tier",
    "ledger_path",
    "ledger_key_path",
    "ledger_unauthenticated",
    "approvals_dir",
    "allow_protected_writes",
    "sandbox",
    "mcp",
    "isolation",
];

/// `admission.configure` / `session.init {admission}`: the session's
/// admission document (`docs/admission.md`). The session keeps its tier and
/// the daemon's ledger; a bad document changes nothing.
fn configure_admission(conn: &Conn, config: &Value) -> Result<(), RpcError> {
    let o =
        config.as_object().ok_or_else(|| RpcError::invalid_params("config must be an admission document object"))?;
    if let Some(k) = OPERATOR_KEYS.iter().find(|k| o.contains_key(**k)) {
        return Err(RpcError::invalid_params(format!(
            "config.{k} cannot be set over the wire (the operator sets it; the tier has permission.set_tier)"
        )));
    }
    // Every error here is the document's: invalid params, naming the key.
    conn.rt
        .set_permissions(Some(&config.to_string()), None)
        .map_err(|e| RpcError::invalid_params(format!("config: {e}")))?;
    Ok(())
}

/// Admission of a submission: `Some(result)` when it is refused as a whole
/// (a halted session), `None` to execute it. Everything else (the tier
/// without this connection's own approvals, supervision, policies, the
/// session's admission document) is the connection runtime's one admission
/// stage.
async fn admit(conn: &Arc<Conn>, sub: &Submission) -> Result<Option<Value>, RpcError> {
    let proposal = &sub.proposal;
    if conn.halted.load(Ordering::SeqCst) {
        return reject_all(proposal, HALTED).map(Some);
    }
    // The tier (with this connection's own approvals discounted) and
    // supervision are layers of the connection's admission stage
    // (`Conn::sync_admission_identity`), so every path that runs a proposal
    // passes them. While someone can approve, a tier escalation waits for an
    // approval first (recorded on the ledger, so the stage then admits it).
    if let Some(a) = conn.approvals.as_ref().filter(|a| a.attached()) {
        let stage = conn.rt.runtime().admission_stage();
        stage.refresh_ledger().await;
        if stage.tier_decisions(&proposal.actions).iter().any(|(refused, _)| *refused) {
            return escalations(conn, a, sub, stage.approval_timeout()).await;
        }
    }
    Ok(None)
}

/// The escalated actions of a submission the tier layer refuses, each
/// waiting for its approval: `None` when every one was approved (the stage
/// decides again), else the `-32003` refusal. An operation the ledger
/// rejected, or a ledger that cannot be read, is left to the stage.
async fn escalations(
    conn: &Arc<Conn>,
    a: &Arc<super::approvals::Approvals>,
    sub: &Submission,
    timeout: chrono::Duration,
) -> Result<Option<Value>, RpcError> {
    let proposal = serde_json::to_value(&sub.proposal).map_err(|e| RpcError::internal(e.to_string()))?;
    let decisions = evaluate(conn, &json!({ "proposal": proposal })).await?;
    let rows: Vec<Value> = decisions.get("decisions").and_then(Value::as_array).cloned().unwrap_or_default();
    if rows.iter().any(|r| r["decision"] == "deny") {
        return Ok(None);
    }
    let wanted: Vec<&Value> = rows.iter().filter(|r| r["decision"] == "needs_approval").collect();
    if wanted.is_empty() {
        return Ok(None);
    }
    let deadline = chrono::Utc::now() + timeout;
    let answers = conn.rt.runtime().admission_stage().session_state().clone();
    let principal = conn.principal();
    let waits = wanted
        .iter()
        .map(|row| a.escalation(&sub.proposal, row, (&principal, &conn.session_id), answers.clone(), deadline));
    let mut refused = Vec::new();
    for (row, outcome) in wanted.iter().zip(futures::future::join_all(waits).await) {
        let (key, r) = outcome?;
        if r.decision != crate::approval::ApprovalDecision::Allow {
            let status = if r.by == crate::approval::ResolvedBy::Timeout { "timed_out" } else { "denied" };
            refused.push((json!({"approval_id": key, "action_id": row["action_id"], "status": status}), r.reason));
        }
    }
    let Some((first, why)) = refused.first() else { return Ok(None) };
    let reason = format!(
        "permission tier escalated: action `{}` needed approval `{}`, which was {}: {why}",
        first["action_id"].as_str().unwrap_or_default(),
        first["approval_id"].as_str().unwrap_or_default(),
        if first["status"] == "timed_out" { "not given in time" } else { "denied" },
    );
    let result = reject_all(&sub.proposal, &reason)?;
    let timed_out = refused.iter().all(|(r, _)| r["status"] == "timed_out");
    Err(RpcError::new(super::approvals::APPROVAL_DENIED, format!("Approval denied or timed out: {reason}")).with_data(
        json!({
            "code": if timed_out { "approval_timeout" } else { "approval_denied" },
            "approvals": refused.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>(),
            "result": result,
        }),
    ))
}

/// Executes an admitted submission (its proposal parsed once, at
/// [`Submission::read`]); a terminal tool failure halts the session. The
/// result is written as JSON text directly.
async fn execute(conn: &Arc<Conn>, sub: Submission) -> Result<Answer, RpcError> {
    let Submission { proposal, session, scope, .. } = sub;
    let session = session.as_deref();
    // The asks' plan items, for the approvers' notification (only while
    // someone can approve: otherwise an ask is refused at once).
    let expected = match &conn.approvals {
        Some(a) => a.expect_asks(&conn.rt, &proposal, (&conn.principal(), &conn.session_id), session),
        None => Vec::new(),
    };
    let executor = Arc::new(WsToolExecutor { conn: conn.clone() });
    let listed = super::activity::Listing::of(&proposal);
    let owner = conn.principal();
    let out = conn.rt.execute_parsed_as(proposal, executor, session, scope.as_deref(), Some(&owner)).await;
    let asked: Vec<String> = expected.iter().map(|(k, _)| k.clone()).collect();
    let refused = approval_refusals(conn, &expected, out.as_ref().ok());
    if let Some(a) = &conn.approvals {
        a.done(&asked, &conn.session_id);
    }
    conn.daemon().activity.submitted(&conn.session_id, owner, listed, out.as_ref().map_err(|e| e.to_string()), asked);
    let out = out.map_err(in_param("proposal"))?;
    if out.results.iter().any(|r| r.terminal) {
        conn.halted.store(true, Ordering::SeqCst);
    }
    match refused {
        None => Ok(Answer::Text(out.into_json_string())),
        Some((message, code, approvals)) => {
            let value = serde_json::to_value(&out)
                .map_err(|e| RpcError::internal(format!("result is not serialisable: {e}")))?;
            Err(RpcError::new(super::approvals::APPROVAL_DENIED, message)
                .with_data(json!({"code": code, "approvals": approvals, "result": value})))
        }
    }
}

/// `state.*` on a daemon whose state lives in the shared store
/// (`--shared-state`): the same params and results, read and written there.
async fn shared_state_call(shared: &Arc<dyn crate::store::StateBackend>, method: &str, p: &Value) -> R {
    let tenant = opt_str(p, "tenant_id")?;
    if let Some(t) = tenant {
        crate::state::Scope::tenant(t).map_err(RpcError::from)?;
    }
    match method {
        "state.get" => Ok(shared.get(tenant, req_str(p, "key")?).await?.value.unwrap_or(Value::Null)),
        "state.exists" => Ok(json!(shared.get(tenant, req_str(p, "key")?).await?.value.is_some())),
        "state.set" => {
            let value = obj(p)?.get("value").cloned().unwrap_or(Value::Null);
            shared.put(tenant, req_str(p, "key")?, Some(value), crate::store::Expect::Any).await?;
            Ok(json!("ok"))
        }
        "state.keys" => Ok(json!(shared.keys(tenant).await?)),
        _ => {
            let mut out = serde_json::Map::new();
            for (k, v) in shared.snapshot(tenant).await? {
                if let Some(v) = v.value {
                    out.insert(k, v);
                }
            }
            Ok(Value::Object(out))
        }
    }
}

/// Whose suspended proposals a connection may list and resume: an operator
/// or host any (`None`), anyone else only its own (its principal).
fn resume_owner(conn: &Conn) -> Option<String> {
    match conn.role() {
        Some(super::conn::Role::Operator | super::conn::Role::Host) => None,
        _ => Some(conn.principal()),
    }
}

/// `proposal.resume {id, session_id?}`: resumes a suspended proposal with
/// this connection's tools (`docs/suspend.md`); a terminal tool failure
/// halts the session.
async fn resume(conn: &Arc<Conn>, id: &str, session: Option<&str>) -> R {
    let executor = Arc::new(WsToolExecutor { conn: conn.clone() });
    let owner = resume_owner(conn);
    let out = conn.rt.resume_parsed_as(id, executor, session, owner.as_deref()).await.map_err(|e| {
        let code = e.code();
        let r = RpcError::from(e);
        if code.starts_with("suspension_") { RpcError { code: super::rpc::INVALID_PARAMS, ..r } } else { r }
    })?;
    if out.results.iter().any(|r| r.terminal) {
        conn.halted.store(true, Ordering::SeqCst);
    }
    serde_json::to_value(&out).map_err(|e| RpcError::internal(format!("result is not serialisable: {e}")))
}

/// When an action of the submission was refused because its approval was
/// denied or timed out: the `-32003` message, code and the approvals
/// (`[{approval_id, action_id, status}]`). The result travels in the
/// error's data, every action's own result naming its approval.
fn approval_refusals(
    conn: &Conn,
    expected: &[(String, String)],
    out: Option<&crate::ir::ProposalResult>,
) -> Option<(String, &'static str, Vec<Value>)> {
    let (a, out) = (conn.approvals.as_ref()?, out?);
    let mut hit = Vec::new();
    for (key, action_id) in expected {
        let refusal = out.results.iter().find_map(|r| {
            (r.action_id == *action_id && r.status == crate::ir::ActionStatus::Rejected)
                .then_some(r.error.as_deref())
                .flatten()
                .filter(|e| e.contains(&format!("approval `{key}`")))
        });
        let status = match (a.status(key), refusal) {
            // A shared store's notification of the closing may still be on
            // its way: the refusal itself says how it closed.
            (Some("pending" | "expected") | None, Some(e)) => {
                if e.ends_with("approval deadline passed without a resolution") { "timed_out" } else { "denied" }
            }
            (s, _) => s.unwrap_or("unknown"),
        };
        if refusal.is_some() && matches!(status, "denied" | "timed_out") {
            hit.push(json!({"approval_id": key, "action_id": action_id, "status": status}));
        }
    }
    let first = hit.first()?;
    let timed_out = hit.iter().all(|h| h["status"] == "timed_out");
    let message = format!(
        "Approval denied or timed out: action `{}` needed approval `{}`, which was {}",
        first["action_id"].as_str().unwrap_or_default(),
        first["approval_id"].as_str().unwrap_or_default(),
        if first["status"] == "timed_out" { "not given in time" } else { "denied" },
    );
    Some((message, if timed_out { "approval_timeout" } else { "approval_denied" }, hit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_deadline_from_budgets() {
        let c = Config {
            handler_timeout: Duration::from_secs(10),
            tool_timeout: Duration::from_secs(300),
            submit_grace: Duration::from_secs(15),
            supervision_timeout: Duration::ZERO,
            ..Config::default()
        };
        let p = crate::api::parse_proposal(
            r#"{"actions": [
            {"id": "a", "type": "tool_call", "tool": "t", "timeout_ms": 600000, "failure_behavior": "retry", "max_retries": 2},
            {"id": "b", "type": "tool_call", "tool": "t"}]}"#,
        )
        .unwrap();
        // 600 s × 3 attempts + 300 s + 15 s.
        assert_eq!(submit_deadline(&c, &p, false), Duration::from_secs(1800 + 300 + 15));
        // Never below the flat deadline.
        let short = crate::api::parse_proposal(
            r#"{"actions": [{"id": "a", "type": "tool_call", "tool": "t", "timeout_ms": 10}]}"#,
        )
        .unwrap();
        let c2 = Config { handler_timeout: Duration::from_secs(1800), ..c.clone() };
        assert_eq!(submit_deadline(&c2, &short, false), Duration::from_secs(1800));
        // With a supervisor subscribed, the supervision decision timeout is
        // part of it (the park is inside the execution).
        let c3 = Config { supervision_timeout: Duration::from_secs(60), ..c };
        assert_eq!(submit_deadline(&c3, &p, false), Duration::from_secs(1800 + 300 + 15));
        assert_eq!(submit_deadline(&c3, &p, true), Duration::from_secs(1800 + 300 + 15 + 60));
    }

    #[tokio::test]
    async fn deadline_abandons_the_handler() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(json!(1))
        };
        let e = with_deadline("proposal.submit", Duration::from_millis(20), slow).await.unwrap_err();
        assert_eq!(e.code, super::super::rpc::HANDLER_DEADLINE);
        assert!(
            e.message.starts_with("handler 'proposal.submit' exceeded its 20ms response deadline"),
            "{}",
            e.message
        );
        let fast = async { Ok(json!(2)) };
        assert_eq!(with_deadline("m", Duration::from_secs(1), fast).await.unwrap(), json!(2));
    }

    #[tokio::test]
    async fn panics_become_handler_failures() {
        let boom = async {
            if true {
                panic!("boom");
            }
            Ok(json!(0))
        };
        let e = guarded("m", boom).await.unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (super::super::rpc::INTERNAL_ERROR, "handler 'm' failed unexpectedly")
        );
    }
}
