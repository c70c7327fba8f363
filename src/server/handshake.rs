//! `server.handshake` negotiation, the method table, `capabilities.list` and
//! `server.schema`. Pure functions of their input.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::rpc::{CAPABILITY_MISMATCH, RpcError, VERSION_MISMATCH};

/// The wire protocol version this daemon speaks (exactly).
pub const PROTOCOL_VERSION: u64 = crate::api::PROTOCOL_VERSION as u64;

/// Capabilities this daemon can negotiate.
///
/// The two identity capabilities describe the shapes of `infer` and
/// `models.*` results; this daemon has neither method (they answer `-32601`),
/// so no reply of it can contradict them, and bundled v3 clients, which
/// require both, can connect.
pub const SUPPORTED_CAPABILITIES: &[&str] = &["infer.model-identity.v1", "models.catalog-identity.v1"];

/// The longest echoed `client_version`.
pub const CLIENT_VERSION_MAX: usize = 64;

/// Validates a handshake and returns its reply.
pub fn negotiate(params: &Value) -> Result<Value, RpcError> {
    let requested = params.get("protocol_version");
    let version = requested.and_then(Value::as_u64);
    match (requested, version) {
        (None | Some(Value::Null), _) => {
            return Err(RpcError::new(
                VERSION_MISMATCH,
                format!("protocol version mismatch: protocol_version is required (server speaks {PROTOCOL_VERSION})"),
            ));
        }
        (Some(v), None) => {
            return Err(RpcError::new(
                VERSION_MISMATCH,
                format!(
                    "protocol version mismatch: protocol_version must be an integer, got {v} (server speaks {PROTOCOL_VERSION})"
                ),
            ));
        }
        (_, Some(v)) if v != PROTOCOL_VERSION => {
            return Err(RpcError::new(
                VERSION_MISMATCH,
                format!("protocol version mismatch: client speaks {v}, server speaks {PROTOCOL_VERSION}"),
            ));
        }
        _ => {}
    }
    let required = capability_list(params, "required_capabilities")?;
    let optional = capability_list(params, "optional_capabilities")?;
    let unsupported: Vec<&str> =
        required.iter().map(String::as_str).filter(|c| !SUPPORTED_CAPABILITIES.contains(c)).collect();
    if !unsupported.is_empty() {
        return Err(RpcError::new(
            CAPABILITY_MISMATCH,
            format!("protocol capability mismatch: unsupported required capabilities: {}", unsupported.join(", ")),
        )
        .with_data(json!({"unsupported": unsupported, "supported": SUPPORTED_CAPABILITIES})));
    }
    let negotiated: BTreeSet<&str> = required
        .iter()
        .chain(optional.iter())
        .map(String::as_str)
        .filter(|c| SUPPORTED_CAPABILITIES.contains(c))
        .collect();
    let client_version = match params.get("client_version") {
        Some(Value::String(s)) if !s.is_empty() => s.chars().take(CLIENT_VERSION_MAX).collect(),
        _ => "unknown".to_string(),
    };
    Ok(json!({
        "protocol_version": PROTOCOL_VERSION,
        "server_version": crate::VERSION,
        "client_protocol_version": PROTOCOL_VERSION,
        "client_version": client_version,
        "negotiated_capabilities": negotiated,
    }))
}

fn capability_list(params: &Value, field: &str) -> Result<Vec<String>, RpcError> {
    let bad = || {
        RpcError::new(
            CAPABILITY_MISMATCH,
            format!("protocol capability mismatch: {field} must be an array of non-empty strings"),
        )
    };
    match params.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| match i {
                Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                _ => Err(bad()),
            })
            .collect(),
        Some(_) => Err(bad()),
    }
}

/// One row of the method table: name, role, params, result.
pub struct MethodSpec {
    /// The method name.
    pub method: &'static str,
    /// The role a caller needs: [`AGENT`] (any authenticated connection),
    /// [`OWNER`] (any, acting on its own session's resources) or
    /// [`OPERATOR`] (a connection that may decide; see docs/server.md).
    pub role: &'static str,
    /// The params shape.
    pub params: &'static str,
    /// The result shape.
    pub result: &'static str,
}

/// Callable by every authenticated connection.
pub const AGENT: &str = "agent";
/// Callable by every authenticated connection, on its own resources only.
pub const OWNER: &str = "owner";
/// Callable only by a connection that may decide (an operator when no host
/// token is configured, else a host).
pub const OPERATOR: &str = "operator";

/// The methods that decide for the daemon: approvals, the permission tier,
/// supervision, a session's admission document.
const DECIDING: &[&str] = &[
    "admission.configure",
    "host.approval",
    "host.approvals",
    "host.resolve_approval",
    "host.subscribe",
    "host.unsubscribe",
    "permission.approve",
    "permission.reject",
    "permission.set_tier",
    "supervision.decide",
    "supervision.pending",
    "supervision.subscribe",
    "supervision.unsubscribe",
];

/// The methods that act on resources of the caller's own session.
const OWNED: &[&str] = &[
    "policy.unregister",
    "proposal.resume",
    "proposal.suspended",
    "session.policy.close",
    "tools.cancel",
    "tools.unregister",
];

const fn eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn member(list: &[&str], method: &str) -> bool {
    let mut i = 0;
    while i < list.len() {
        if eq(list[i], method) {
            return true;
        }
        i += 1;
    }
    false
}

const fn m(method: &'static str, params: &'static str, result: &'static str) -> MethodSpec {
    let role = if member(DECIDING, method) {
        OPERATOR
    } else if member(OWNED, method) {
        OWNER
    } else {
        AGENT
    };
    MethodSpec { method, role, params, result }
}

/// Every method this daemon answers, sorted by name.
pub const METHODS: &[MethodSpec] = &[
    m("admission.configure", "{config: the admission document}", "the document in force"),
    m("admission.get", "{}", "the document in force"),
    m("capabilities.list", "{}", "{caller_role, count, methods: [{method, role}]}"),
    m("events.chain.enable", "{}", "{ok: true}"),
    m("events.chain.verify", "{}", "{verified: n} | {tampered_at: i}"),
    m("events.clear", "{}", "{removed, stats}"),
    m("events.cost_by_agent", "{}", "[{agent, calls, tokens_in, tokens_out, cost_usd}]"),
    m("events.count", "{}", "number"),
    m("events.query", "{kinds?, action_id?, proposal_id?, since?, until?, data_matches?, limit?}", "{count, events}"),
    m("events.retention", "{policy?: {max_events?, max_age_secs?}}", "{policy, removed?}"),
    m("events.stats", "{}", "{kind: count}"),
    m("events.truncate", "{max_events?, max_age_secs?}", "{removed, remaining}"),
    m("host.approval", "{approval_id}", "{approval, history}"),
    m("host.approvals", "{}", "{count, approvals}"),
    m(
        "host.resolve_approval",
        "{approval_id, resolution: approve | deny, scope?: once | session | always, reason?}",
        "{approval_id, decision, status, applied, scope, reviewer}",
    ),
    m("host.subscribe", "{}", "{subscribed: true, events, approvers}"),
    m("host.unsubscribe", "{}", "{subscribed: false, was_subscribed}"),
    m("metrics.summary", "{}", "{proposals, actions, success_rate, error_rate, latency_ms, approvals, cost_usd, ...}"),
    m(
        "permission.approve",
        "{fingerprint, required_tier, reason?, evidence?} | {action, reason?, evidence?}",
        "ApprovalRecord",
    ),
    m("permission.classify", "{proposal}", "{classifications, declared_rollback_contract}"),
    m("permission.evaluate", "{proposal}", "{decisions}"),
    m("permission.get_tier", "{}", "{granted_tier}"),
    m("permission.pending", "{proposal}", "{pending}"),
    m(
        "permission.reject",
        "{fingerprint, required_tier, reason?, evidence?} | {action, reason?, evidence?}",
        "ApprovalRecord",
    ),
    m("permission.set_tier", "{tier}", "{granted_tier}"),
    m("policy.list", "{session_id?}", "{policies: [{name, description}], scope}"),
    m("policy.register", "{name, rule, target?, key?, pattern?, value?, session_id?}", "{registered, scope}"),
    m("policy.unregister", "{name, session_id?}", "{unregistered, removed, scope}"),
    m("proposal.apply", "{plan_id}", "ProposalResult"),
    m("proposal.plan", "{proposal, session_id?, scope?}", "{plan_id, proposal_id, items, counts}"),
    m("proposal.resume", "{id, session_id?}", "ProposalResult (status: suspended again while an approval is pending)"),
    m("proposal.submit", "{proposal, session_id?, scope?}", "ProposalResult"),
    m("proposal.suspended", "{}", "{suspended: [{id, proposal_id, owner, pending, waiting, created_at, ...}]}"),
    m("runs.complete", "{run_id, outcome: {status, summary?, ...}}", "{run_id, ok}"),
    m("runs.get_trace", "{run_id}", "{run, events}"),
    m("runs.list", "{agent_id?, status?, limit?}", "{count, runs}"),
    m(
        "runs.record_model_turn",
        "{run_id, turn_index?, assistant_text?, requested_tool_calls?, model_id?, token_usage?, duration_ms?}",
        "{run_id, turn_index, ok}",
    ),
    m("runs.start", "{intent, agent_id?, agent_name?, outcome_description?, idempotency_key?}", "{run_id, agent_id}"),
    m(
        "runs.subscribe",
        "{run_id?}",
        "{subscribed: true, run_id}; then runs.trace.event {run_id, agent_id, kind, record, timestamp}",
    ),
    m("runs.unsubscribe", "{}", "{subscribed: false, was_subscribed}"),
    m(
        "server.handshake",
        "{protocol_version, client_version?, required_capabilities?, optional_capabilities?}",
        "{protocol_version, server_version, client_protocol_version, client_version, negotiated_capabilities}",
    ),
    m("server.schema", "{}", "{schema, digest, digest_algorithm, car_version}"),
    m(
        "session.auth",
        "{token} | {token, agent_id} | {host_token}",
        "{ok: true, auth_enabled, role?: agent | host, agent_id?}",
    ),
    m("session.clear_halt", "{}", "{cleared, halted: false}"),
    m(
        "session.init",
        "{client_id, tools?, policies?, admission?, strict_fields?}",
        "{session_id, tools_registered, policies_registered}",
    ),
    m("session.policy.close", "{session_id}", "{closed}"),
    m("session.policy.open", "{}", "{session_id}"),
    m("state.exists", "{key, tenant_id?}", "bool"),
    m("state.get", "{key, tenant_id?}", "value | null"),
    m("state.keys", "{tenant_id?}", "string[]"),
    m("state.set", "{key, value?, tenant_id?}", "\"ok\""),
    m("state.snapshot", "{tenant_id?}", "{key: value}"),
    m("supervision.decide", "{intent_id, decision: {kind: allow | deny | escalate, reason?}}", "{decided: true}"),
    m("supervision.pending", "{}", "{intents}"),
    m(
        "supervision.subscribe",
        "{filter?: {tools?, sessions?, min_reversibility?}}",
        "{subscribed: true, decision_timeout_ms, supervisors}",
    ),
    m("supervision.unsubscribe", "{}", "{subscribed: false, was_subscribed}"),
    m("tools.cancel", "{handle}", "{cancelled}"),
    m("tools.list", "{}", "{tools, count}"),
    m("tools.log", "{request_id, level, message, data?}", "{logged: true}"),
    m("tools.poll", "{handle}", "ToolPollResult | null"),
    m("tools.register", "ToolDefinition[]", "number"),
    m("tools.stream.push", "{request_id, chunk | chunks}", "{accepted}"),
    m("tools.stream.subscribe", "{}", "{subscribed: true}"),
    m("tools.unregister", "{name}", "{unregistered, removed}"),
    m("verify", "{proposal, initial_state?}", "VerificationResult"),
    m(
        "verify.monte_carlo",
        "{proposal, initial_state?, tool_success_rates?, goal?, config?: {trials?, seed?, default_success_rate?, retry_attempts?}}",
        "MonteCarloResult",
    ),
];

/// Server → client frames, for the schema.
const SERVER_TO_CLIENT: &[(&str, &str, &str)] = &[
    (
        "tools.execute",
        "request",
        "{action_id, tool, parameters, timeout_ms, attempt, request_id, session_id?, deadline?, detached?, cwd?, isolation?}",
    ),
    ("tools.cancel", "notification", "{request_id, action_id, reason}"),
    ("tools.stream.event", "notification", "{handle, chunk}"),
    (
        "host.event",
        "notification",
        "{type: approval.requested, approval} | {type: approval.resolved, approval_id, status, decision, reviewer?, scope?, reason?, at}",
    ),
    (
        "supervision.intent",
        "notification",
        "{id, proposal_id, source, session_id, reversibility, created_at, actions: [{id, action_type, tool?, reversibility, parameter_keys, parameters_digest}]}",
    ),
];

/// True when this daemon answers `method`.
pub fn is_known(method: &str) -> bool {
    spec(method).is_some()
}

/// The table row of `method`.
pub fn spec(method: &str) -> Option<&'static MethodSpec> {
    METHODS.binary_search_by(|s| s.method.cmp(method)).ok().map(|i| &METHODS[i])
}

/// `capabilities.list` for a caller of `caller_role`: the methods it may
/// call (the `operator` rows only when it may decide).
pub fn capabilities_list(caller_role: &str, may_decide: bool) -> Value {
    let methods: Vec<Value> = METHODS
        .iter()
        .filter(|s| s.role != OPERATOR || may_decide)
        .map(|s| json!({"method": s.method, "role": s.role}))
        .collect();
    json!({"caller_role": caller_role, "count": methods.len(), "methods": methods})
}

static SCHEMA: LazyLock<(Value, String)> = LazyLock::new(|| {
    let methods: Vec<Value> = METHODS
        .iter()
        .map(|s| json!({"method": s.method, "role": s.role, "params": s.params, "result": s.result}))
        .collect();
    let server: Vec<Value> = SERVER_TO_CLIENT
        .iter()
        .map(|(method, kind, params)| json!({"method": method, "kind": kind, "params": params}))
        .collect();
    let schema = json!({
        "protocol_version": PROTOCOL_VERSION,
        "capabilities": SUPPORTED_CAPABILITIES,
        "methods": methods,
        "server_to_client": server,
    });
    let canonical = serde_jcs::to_vec(&schema).unwrap_or_default();
    (schema, hex::encode(Sha256::digest(&canonical)))
});

/// `server.schema`: the wire schema and the SHA-256 of its JCS form.
pub fn server_schema() -> Value {
    let (schema, digest) = &*SCHEMA;
    json!({"schema": schema, "digest": digest, "digest_algorithm": "sha256", "car_version": crate::VERSION})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        assert!(METHODS.windows(2).all(|w| w[0].method < w[1].method));
        assert!(is_known("proposal.submit"));
        assert!(!is_known("infer"));
    }

    #[test]
    fn exact_version() {
        assert_eq!(negotiate(&json!({})).unwrap_err().code, VERSION_MISMATCH);
        assert_eq!(negotiate(&json!({"protocol_version": "3"})).unwrap_err().code, VERSION_MISMATCH);
        assert_eq!(negotiate(&json!({"protocol_version": 2})).unwrap_err().code, VERSION_MISMATCH);
        assert_eq!(negotiate(&json!({"protocol_version": 3.5})).unwrap_err().code, VERSION_MISMATCH);
        let e = negotiate(&json!({"protocol_version": 4})).unwrap_err();
        assert!(e.message.starts_with("protocol version mismatch:"), "{}", e.message);
        assert_eq!(negotiate(&json!({"protocol_version": 3})).unwrap()["client_version"], "unknown");
    }

    #[test]
    fn capabilities() {
        let e = negotiate(&json!({"protocol_version": 3, "required_capabilities": ["x.v1"]})).unwrap_err();
        assert_eq!(e.code, CAPABILITY_MISMATCH);
        assert!(e.message.starts_with("protocol capability mismatch:") && e.message.contains("x.v1"));
        let e = negotiate(&json!({"protocol_version": 3, "optional_capabilities": [""]})).unwrap_err();
        assert_eq!(e.code, CAPABILITY_MISMATCH);
        let e = negotiate(&json!({"protocol_version": 3, "required_capabilities": "x"})).unwrap_err();
        assert_eq!(e.code, CAPABILITY_MISMATCH);
        let r = negotiate(&json!({
            "protocol_version": 3,
            "client_version": "x".repeat(100),
            "required_capabilities": ["models.catalog-identity.v1", "infer.model-identity.v1", "models.catalog-identity.v1"],
            "optional_capabilities": ["nope.v1", "infer.model-identity.v1"],
        }))
        .unwrap();
        assert_eq!(r["negotiated_capabilities"], json!(["infer.model-identity.v1", "models.catalog-identity.v1"]));
        assert_eq!(r["client_version"].as_str().unwrap().len(), 64);
        assert_eq!(r["protocol_version"], 3);
        assert_eq!(r["client_protocol_version"], 3);
    }

    #[test]
    fn schema_digest_is_stable() {
        let a = server_schema();
        assert_eq!(a["digest"].as_str().unwrap().len(), 64);
        let canonical = serde_jcs::to_vec(&a["schema"]).unwrap();
        assert_eq!(a["digest"], hex::encode(Sha256::digest(&canonical)));
        assert_eq!(capabilities_list("operator", true)["count"], METHODS.len());
    }

    #[test]
    fn roles_of_the_deciding_methods() {
        for d in DECIDING {
            assert_eq!(spec(d).map(|s| s.role), Some(OPERATOR), "{d}");
        }
        for o in OWNED {
            assert_eq!(spec(o).map(|s| s.role), Some(OWNER), "{o}");
        }
        assert_eq!(spec("proposal.submit").unwrap().role, AGENT);
        let agent = capabilities_list("agent", false);
        assert_eq!(agent["caller_role"], "agent");
        let rows = agent["methods"].as_array().unwrap();
        assert_eq!(rows.len(), METHODS.len() - DECIDING.len());
        assert!(rows.iter().all(|r| r["role"] != OPERATOR));
    }
}
