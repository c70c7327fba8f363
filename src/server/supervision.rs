//! Supervision on the wire: `supervision.subscribe/unsubscribe/pending/decide`
//! and the `supervision.intent` notification, translated to and from the
//! core's [`SupervisionHub`] (one per daemon). Filters, intents (parameter key
//! names and a digest, never values), decisions and the fail-closed decision
//! timeout are the hub's; this module only parses params, forwards intents to
//! the subscribed connection and words the outcome for `proposal.submit`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::conn::Outbox;
use super::rpc::{self, RpcError};
use crate::gate::{IntentOutcome, SupervisionFilter, SupervisionHub, SupervisorDecision, SupervisorVerdict};
use crate::ir::{ActionProposal, Reversibility};

/// How many decided intents stay known, so a late `supervision.decide` on one
/// is answered "already decided" or "expired" rather than "unknown".
const DECIDED_KEPT: usize = 4096;

/// The daemon's supervision: the core hub plus, per subscribed connection,
/// the task forwarding its intents as `supervision.intent` notifications.
pub(crate) struct Supervisors {
    hub: SupervisionHub,
    forwarders: Mutex<HashMap<String, tokio::task::AbortHandle>>,
}

/// How a supervised submission ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Admission {
    /// No supervisor matched, or one allowed it: run it.
    Run,
    /// Refused: every action is rejected with this reason.
    Refuse(String),
}

fn hub_error(e: crate::Error) -> RpcError {
    e.into()
}

/// `filter` of `supervision.subscribe`: absent or null is "everything".
fn parse_filter(v: Option<&Value>) -> Result<SupervisionFilter, RpcError> {
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(SupervisionFilter::default()) };
    let o = v.as_object().ok_or_else(|| RpcError::invalid_params("filter must be an object"))?;
    for k in ["tools", "sessions"] {
        match o.get(k) {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
            Some(_) => return Err(RpcError::invalid_params(format!("filter.{k} must be an array of strings"))),
        }
    }
    if let Some(m) = o.get("min_reversibility").filter(|m| !m.is_null())
        && serde_json::from_value::<Reversibility>(m.clone()).is_err()
    {
        return Err(RpcError::invalid_params(
            "filter.min_reversibility must be `reversible`, `compensable` or `irreversible`",
        ));
    }
    if let Some(k) = o.keys().find(|k| !matches!(k.as_str(), "tools" | "sessions" | "min_reversibility")) {
        return Err(RpcError::invalid_params(format!(
            "filter.{k} is not a filter field (expected tools, sessions, min_reversibility)"
        )));
    }
    let clean: serde_json::Map<String, Value> =
        o.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect();
    serde_json::from_value(Value::Object(clean)).map_err(|e| RpcError::invalid_params(format!("filter: {e}")))
}

/// `decision` of `supervision.decide`.
fn parse_decision(params: &Value) -> Result<SupervisorDecision, RpcError> {
    let d = params
        .get("decision")
        .filter(|d| d.is_object())
        .ok_or_else(|| RpcError::invalid_params("decision is required (an object {kind, reason?})"))?;
    let kind = match d.get("kind").and_then(Value::as_str) {
        Some("allow") => SupervisorVerdict::Allow,
        Some("deny") => SupervisorVerdict::Deny,
        Some("escalate") => SupervisorVerdict::Escalate,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "decision.kind must be `allow`, `deny` or `escalate`, not `{other}`"
            )));
        }
        None => return Err(RpcError::invalid_params("decision.kind is required")),
    };
    let reason = match d.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some(r.clone()),
        Some(_) => return Err(RpcError::invalid_params("decision.reason must be a string")),
    };
    Ok(SupervisorDecision { kind, reason })
}

impl Supervisors {
    pub(crate) fn new(decision_timeout: Duration) -> Self {
        Supervisors { hub: SupervisionHub::new(decision_timeout), forwarders: Mutex::new(HashMap::new()) }
    }

    /// `supervision.subscribe` (again: replaces the filter).
    pub(crate) fn subscribe(&self, conn: &str, out: Outbox, params: &Value) -> Result<Value, RpcError> {
        let filter = parse_filter(params.get("filter"))?;
        let (sub, mut intents) = self.hub.subscribe(conn, filter).map_err(hub_error)?;
        let task = tokio::spawn(async move {
            while let Some(intent) = intents.recv().await {
                let params = serde_json::to_value(&intent).unwrap_or(Value::Null);
                if !out.send(Message::text(rpc::notification("supervision.intent", params).to_string())) {
                    break;
                }
            }
        });
        if let Ok(mut f) = self.forwarders.lock()
            && let Some(old) = f.insert(conn.to_string(), task.abort_handle())
        {
            old.abort();
        }
        serde_json::to_value(sub).map_err(|e| RpcError::internal(e.to_string()))
    }

    /// `supervision.unsubscribe` (also on disconnect): whether it was subscribed.
    pub(crate) fn unsubscribe(&self, conn: &str) -> bool {
        if let Some(t) = self.forwarders.lock().ok().and_then(|mut f| f.remove(conn)) {
            t.abort();
        }
        self.hub.unsubscribe(conn).unwrap_or(false)
    }

    /// `supervision.pending`: the undecided intents announced to this
    /// supervisor, oldest first (only a supervisor lists them).
    pub(crate) fn pending(&self, conn: &str) -> Result<Value, RpcError> {
        if !self.hub.is_subscribed(conn).map_err(hub_error)? {
            return Err(RpcError::internal("not a supervisor: call supervision.subscribe first"));
        }
        let intents = self.hub.pending(Some(conn)).map_err(hub_error)?;
        Ok(json!({ "intents": intents }))
    }

    /// `supervision.decide`: only a subscribed supervisor the intent was
    /// announced to decides, and (unless `allow_self`) not to allow a
    /// proposal of its own principal. The reviewer is `reviewer`, stamped by
    /// the server; a client-given one is refused.
    pub(crate) fn decide(&self, me: &Decider<'_>, params: &Value) -> Result<Value, RpcError> {
        let id = match params.get("intent_id") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            None | Some(Value::Null) => return Err(RpcError::invalid_params("intent_id is required")),
            Some(_) => return Err(RpcError::invalid_params("intent_id must be a non-empty string")),
        };
        if params.get("reviewer").is_some() {
            return Err(RpcError::invalid_params("reviewer is stamped by the server; do not send one"));
        }
        let decision = parse_decision(params)?;
        if !self.hub.is_subscribed(me.conn).map_err(hub_error)? {
            return Err(RpcError::internal("not a supervisor: call supervision.subscribe first"));
        }
        let mine = self.hub.pending(Some(me.conn)).map_err(hub_error)?;
        match mine.iter().find(|i| i.id == id) {
            Some(intent) => {
                if !me.allow_self
                    && decision.kind == SupervisorVerdict::Allow
                    && intent.session_id.as_deref() == Some(me.principal)
                {
                    return Err(RpcError::internal(format!(
                        "self-approval refused: intent `{id}` is a proposal of this connection's own principal `{}`; another supervisor must allow it",
                        me.principal
                    ))
                    .with_data(json!({"code": "self_approval"})));
                }
            }
            None => {
                let undecided = self.hub.pending(None).map_err(hub_error)?;
                if undecided.iter().any(|i| i.id == id) {
                    return Err(RpcError::internal(format!(
                        "intent `{id}` was not sent to this supervisor (its filter does not match it)"
                    ))
                    .with_data(json!({"code": "not_addressed"})));
                }
            }
        }
        self.hub.decide(&id, &decision).map_err(hub_error)?;
        Ok(json!({"decided": true, "reviewer": me.reviewer}))
    }

    /// True while some supervisor is subscribed.
    pub(crate) fn has_subscribers(&self) -> bool {
        self.hub.has_subscribers()
    }

    /// Admission of a submitted proposal: parks it when a subscribed
    /// supervisor's filter matches (each action counted as the worse of its
    /// declared and its classified reversibility) and waits for the verdict or
    /// the decision timeout. With no subscriber this is a no-op. A submit
    /// abandoned while parked withdraws its intent.
    pub(crate) async fn admit(&self, proposal: &ActionProposal, session_id: &str) -> Result<Admission, RpcError> {
        if !self.hub.has_subscribers() {
            return Ok(Admission::Run);
        }
        let classified: Vec<Reversibility> =
            proposal.actions.iter().map(crate::policy::classify_reversibility).collect();
        let Some(intent) = self.hub.admit_classified(proposal, Some(session_id), &classified).map_err(hub_error)?
        else {
            return Ok(Admission::Run);
        };
        let _withdraw = Withdraw { hub: &self.hub, id: &intent.id };
        let outcome = self.hub.wait(&intent.id).await.map_err(hub_error)?;
        let _ = self.hub.prune_decided_keep(DECIDED_KEPT);
        Ok(match outcome {
            IntentOutcome::Allowed { .. } => Admission::Run,
            IntentOutcome::Expired => Admission::Refuse(format!(
                "no supervision verdict within {}; refused (fail closed)",
                super::executor::human(self.hub.decision_timeout())
            )),
            other => Admission::Refuse(other.rejection_reason().unwrap_or_else(|| "refused by supervisor".into())),
        })
    }
}

/// Who decides a supervision intent, as the server knows it.
pub(crate) struct Decider<'a> {
    /// The subscriber key (the connection's session id).
    pub(crate) conn: &'a str,
    /// The connection's principal (what intents' `session_id` names).
    pub(crate) principal: &'a str,
    /// The stamped reviewer.
    pub(crate) reviewer: &'a str,
    /// `Config::allow_self_approval`.
    pub(crate) allow_self: bool,
}

/// Withdraws a parked intent whose submit ended or was abandoned (a no-op
/// once it is decided).
struct Withdraw<'a> {
    hub: &'a SupervisionHub,
    id: &'a str,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let _ = self.hub.withdraw(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(rev: &str) -> ActionProposal {
        crate::ir::parse_proposal(&format!(
            r#"{{"id":"p","source":"m","actions":[{{"id":"a","type":"tool_call","tool":"deploy","parameters":{{"b":1,"a":2}},"reversibility":"{rev}"}}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn filters_and_decisions_are_checked() {
        assert_eq!(parse_filter(None).unwrap(), SupervisionFilter::default());
        let f = parse_filter(Some(&json!({"tools": ["deploy"], "min_reversibility": "compensable"}))).unwrap();
        assert_eq!(f.min_reversibility, Some(Reversibility::Compensable));
        for (bad, msg) in [
            (json!([]), "invalid params: filter must be an object"),
            (json!({"tools": "deploy"}), "invalid params: filter.tools must be an array of strings"),
            (json!({"sessions": [1]}), "invalid params: filter.sessions must be an array of strings"),
            (json!({"min_reversibility": "maybe"}), "invalid params: filter.min_reversibility must be"),
            (json!({"tool": ["x"]}), "invalid params: filter.tool is not a filter field"),
        ] {
            let e = parse_filter(Some(&bad)).unwrap_err();
            assert!(e.message.starts_with(msg), "{bad}: {}", e.message);
        }
        for (bad, msg) in [
            (json!({}), "invalid params: decision is required"),
            (json!({"decision": {}}), "invalid params: decision.kind is required"),
            (json!({"decision": {"kind": "ok"}}), "invalid params: decision.kind must be"),
            (json!({"decision": {"kind": "deny", "reason": 3}}), "invalid params: decision.reason must be a string"),
        ] {
            let e = parse_decision(&bad).unwrap_err();
            assert!(e.message.starts_with(msg), "{bad}: {}", e.message);
        }
    }

    fn who(conn: &str) -> Decider<'_> {
        Decider { conn, principal: conn, reviewer: "car-server:operator:boss", allow_self: false }
    }

    #[tokio::test]
    async fn the_hub_parks_and_the_wire_decides() {
        let boss = who("boss");
        let sup = std::sync::Arc::new(Supervisors::new(Duration::from_secs(5)));
        assert_eq!(sup.admit(&proposal("irreversible"), "s1").await.unwrap(), Admission::Run, "no supervisor: no-op");
        let cfg = super::super::Config::default();
        let (tx, mut rx) = Outbox::new(&cfg);
        let r = sup
            .subscribe("boss", tx, &json!({"filter": {"tools": ["deploy"], "min_reversibility": "compensable"}}))
            .unwrap();
        assert_eq!(
            (r["subscribed"].clone(), r["supervisors"].clone(), r["decision_timeout_ms"].clone()),
            (json!(true), json!(1), json!(5000))
        );
        // Declared reversible, but `deploy` classifies as compensable: parked.
        let s = sup.clone();
        let parked = tokio::spawn(async move { s.admit(&proposal("reversible"), "s1").await });
        let Ok(Some(Message::Text(note))) = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await else {
            panic!("no notification")
        };
        let note: Value = serde_json::from_str(note.as_str()).unwrap();
        assert_eq!(note["method"], "supervision.intent");
        let intent = &note["params"];
        assert_eq!(intent["actions"][0]["parameter_keys"], json!(["a", "b"]));
        assert_eq!(intent["reversibility"], "compensable");
        assert_eq!(intent["session_id"], "s1");
        let id = intent["id"].as_str().unwrap().to_string();
        assert_eq!(sup.pending("boss").unwrap()["intents"][0]["id"], id);
        assert!(sup.pending("someone").unwrap_err().message.starts_with("not a supervisor"));
        let e = sup.decide(&boss, &json!({"intent_id": id, "decision": {"kind": "deny"}})).unwrap_err();
        assert_eq!(e.code, rpc::INVALID_PARAMS, "{}", e.message);
        let e =
            sup.decide(&boss, &json!({"intent_id": id, "decision": {"kind": "allow"}, "reviewer": "me"})).unwrap_err();
        assert_eq!(e.code, rpc::INVALID_PARAMS, "{}", e.message);
        let e = sup.decide(&who("other"), &json!({"intent_id": id, "decision": {"kind": "allow"}})).unwrap_err();
        assert!(e.message.starts_with("not a supervisor"), "{}", e.message);
        // A supervisor the intent was not sent to.
        let (tx3, _rx3) = Outbox::new(&cfg);
        sup.subscribe("bystander", tx3, &json!({"filter": {"tools": ["nothing"]}})).unwrap();
        let e = sup.decide(&who("bystander"), &json!({"intent_id": id, "decision": {"kind": "allow"}})).unwrap_err();
        assert!(e.message.contains("was not sent to this supervisor"), "{}", e.message);
        assert!(sup.unsubscribe("bystander"));
        // Its own proposal: not allowed, unless self-approval is on.
        let own = Decider { principal: "s1", ..who("boss") };
        let e = sup.decide(&own, &json!({"intent_id": id, "decision": {"kind": "allow"}})).unwrap_err();
        assert!(e.message.starts_with("self-approval refused"), "{}", e.message);
        let r = sup.decide(&boss, &json!({"intent_id": id, "decision": {"kind": "deny", "reason": "no"}})).unwrap();
        assert_eq!(r["reviewer"], "car-server:operator:boss");
        assert_eq!(parked.await.unwrap().unwrap(), Admission::Refuse("denied by supervisor: no".into()));
        let e = sup.decide(&boss, &json!({"intent_id": id, "decision": {"kind": "allow"}})).unwrap_err();
        assert!(e.message.ends_with("is already decided"), "{}", e.message);
        let e = sup.decide(&boss, &json!({"intent_id": "intent-x", "decision": {"kind": "allow"}})).unwrap_err();
        assert!(e.message.contains("no intent `intent-x`"), "{}", e.message);

        // An abandoned submit withdraws its intent.
        let s = sup.clone();
        let parked = tokio::spawn(async move { s.admit(&proposal("irreversible"), "s1").await });
        let Ok(Some(Message::Text(note))) = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await else {
            panic!("no notification")
        };
        let note: Value = serde_json::from_str(note.as_str()).unwrap();
        parked.abort();
        let _ = parked.await;
        assert!(sup.pending("boss").unwrap()["intents"].as_array().unwrap().is_empty());
        let e =
            sup.decide(&boss, &json!({"intent_id": note["params"]["id"], "decision": {"kind": "allow"}})).unwrap_err();
        assert!(e.message.contains("expired"), "{}", e.message);

        // Below the filter's minimum: unsupervised.
        let (tx2, _rx2) = Outbox::new(&cfg);
        sup.subscribe("boss", tx2, &json!({"filter": {"tools": ["other"]}})).unwrap();
        assert_eq!(sup.admit(&proposal("irreversible"), "s1").await.unwrap(), Admission::Run);
        assert!(sup.unsubscribe("boss"));
        assert!(!sup.unsubscribe("boss"));
    }
}
