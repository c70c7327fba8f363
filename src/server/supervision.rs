//! Supervision: proposals parked at admission until a subscribed supervisor
//! (another connection) decides. Daemon-wide, fail closed on timeout.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

use super::rpc::{self, RpcError};
use crate::ir::{ActionProposal, Reversibility};

/// A supervisor's verdict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Run the proposal.
    Allow,
    /// Refuse it, with the reason.
    Deny(String),
    /// Refuse it here: it needs a higher authority.
    Escalate(String),
}

#[derive(Debug, Default, Clone)]
struct Filter {
    tools: Option<Vec<String>>,
    sessions: Option<Vec<String>>,
    min_reversibility: Option<Reversibility>,
}

fn rank(r: Reversibility) -> u8 {
    match r {
        Reversibility::Reversible => 0,
        Reversibility::Compensable => 1,
        Reversibility::Irreversible => 2,
    }
}

impl Filter {
    fn parse(v: Option<&Value>) -> Result<Filter, RpcError> {
        let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(Filter::default()) };
        let o = v.as_object().ok_or_else(|| RpcError::invalid_params("filter must be an object"))?;
        let list = |k: &str| -> Result<Option<Vec<String>>, RpcError> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| RpcError::invalid_params(format!("filter.{k} must be an array of strings")))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some(_) => Err(RpcError::invalid_params(format!("filter.{k} must be an array of strings"))),
            }
        };
        let min_reversibility = match o.get("min_reversibility") {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value::<Reversibility>(v.clone()).map_err(|_| {
                RpcError::invalid_params(
                    "filter.min_reversibility must be `reversible`, `compensable` or `irreversible`",
                )
            })?),
        };
        Ok(Filter { tools: list("tools")?, sessions: list("sessions")?, min_reversibility })
    }

    fn matches(&self, intent: &Value, reversibility: Reversibility) -> bool {
        if let Some(tools) = &self.tools {
            let hit = intent["actions"].as_array().is_some_and(|acts| {
                acts.iter().any(|a| a["tool"].as_str().is_some_and(|t| tools.iter().any(|x| x == t)))
            });
            if !hit {
                return false;
            }
        }
        if let Some(sessions) = &self.sessions
            && !intent["session_id"].as_str().is_some_and(|s| sessions.iter().any(|x| x == s))
        {
            return false;
        }
        self.min_reversibility.is_none_or(|m| rank(reversibility) >= rank(m))
    }
}

struct Sub {
    filter: Filter,
    out: mpsc::UnboundedSender<Message>,
}

struct Pending {
    intent: Value,
    reversibility: Reversibility,
    tx: oneshot::Sender<Verdict>,
}

#[derive(Default)]
struct State {
    subs: HashMap<String, Sub>,
    /// Undecided intents, oldest first.
    pending: Vec<(String, Pending)>,
    /// What became of recent intents (for precise errors), bounded.
    finished: VecDeque<(String, &'static str)>,
}

/// The daemon-wide supervision registry.
pub(crate) struct Supervisors {
    state: Mutex<State>,
    /// How long a parked proposal waits for a verdict before failing closed.
    pub(crate) decision_timeout: Duration,
}

const FINISHED_CAP: usize = 4096;

impl Supervisors {
    pub(crate) fn new(decision_timeout: Duration) -> Self {
        Supervisors { state: Mutex::new(State::default()), decision_timeout }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, RpcError> {
        self.state.lock().map_err(|_| RpcError::internal("supervision registry is unavailable"))
    }

    /// True when at least one supervisor is subscribed.
    pub(crate) fn any(&self) -> bool {
        self.state.lock().map(|s| !s.subs.is_empty()).unwrap_or(false)
    }

    /// `supervision.subscribe`.
    pub(crate) fn subscribe(
        &self,
        conn: &str,
        out: mpsc::UnboundedSender<Message>,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let filter = Filter::parse(params.get("filter"))?;
        let mut s = self.lock()?;
        s.subs.insert(conn.to_string(), Sub { filter, out });
        Ok(json!({
            "subscribed": true,
            "decision_timeout_ms": self.decision_timeout.as_millis() as u64,
            "supervisors": s.subs.len(),
        }))
    }

    /// `supervision.unsubscribe` (also on disconnect).
    pub(crate) fn unsubscribe(&self, conn: &str) -> bool {
        self.state.lock().map(|mut s| s.subs.remove(conn).is_some()).unwrap_or(false)
    }

    /// `supervision.pending`: undecided intents oldest first (those matching
    /// the caller's filter when it is a supervisor).
    pub(crate) fn pending(&self, conn: &str) -> Result<Value, RpcError> {
        let s = self.lock()?;
        let filter = s.subs.get(conn).map(|sub| sub.filter.clone());
        let intents: Vec<Value> = s
            .pending
            .iter()
            .filter(|(_, p)| filter.as_ref().is_none_or(|f| f.matches(&p.intent, p.reversibility)))
            .map(|(_, p)| p.intent.clone())
            .collect();
        Ok(json!({ "intents": intents }))
    }

    /// `supervision.decide`.
    pub(crate) fn decide(&self, conn: &str, params: &Value) -> Result<Value, RpcError> {
        let id = match params.get("intent_id") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            None | Some(Value::Null) => return Err(RpcError::invalid_params("intent_id is required")),
            Some(_) => return Err(RpcError::invalid_params("intent_id must be a string")),
        };
        let d = params
            .get("decision")
            .filter(|d| d.is_object())
            .ok_or_else(|| RpcError::invalid_params("decision is required (an object {kind, reason?})"))?;
        let reason = d.get("reason").and_then(Value::as_str).filter(|r| !r.trim().is_empty()).map(str::to_string);
        let verdict = match d.get("kind").and_then(Value::as_str) {
            Some("allow") => Verdict::Allow,
            Some(kind @ ("deny" | "escalate")) => {
                let r = reason
                    .ok_or_else(|| RpcError::invalid_params(format!("decision.reason is required for {kind}")))?;
                if kind == "deny" { Verdict::Deny(r) } else { Verdict::Escalate(r) }
            }
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "decision.kind must be `allow`, `deny` or `escalate`, not `{other}`"
                )));
            }
            None => return Err(RpcError::invalid_params("decision.kind is required")),
        };
        let mut s = self.lock()?;
        if !s.subs.contains_key(conn) {
            return Err(RpcError::internal("not a supervisor: call supervision.subscribe first"));
        }
        let Some(i) = s.pending.iter().position(|(pid, _)| *pid == id) else {
            let why = s.finished.iter().rev().find(|(f, _)| *f == id).map(|(_, w)| *w);
            return Err(RpcError::internal(match why {
                Some(w) => format!("supervision intent `{id}` is {w}"),
                None => format!("unknown supervision intent `{id}`"),
            }));
        };
        let (id, p) = s.pending.remove(i);
        finish(&mut s, id, "already decided");
        let _ = p.tx.send(verdict);
        Ok(json!({"decided": true}))
    }

    /// Parks a proposal when a subscribed supervisor's filter matches it:
    /// notifies the matching supervisors and returns the verdict receiver.
    /// `None` when no supervisor matches (the proposal runs unsupervised).
    pub(crate) fn park(
        &self,
        proposal: &ActionProposal,
        session_id: &str,
        classification: &Value,
    ) -> Option<(String, oneshot::Receiver<Verdict>)> {
        let reversibility = proposal_reversibility(classification);
        let id = format!("intent-{}", uuid::Uuid::new_v4());
        let intent = intent_json(&id, proposal, session_id, reversibility, classification);
        let mut s = self.state.lock().ok()?;
        let targets: Vec<&Sub> = s.subs.values().filter(|sub| sub.filter.matches(&intent, reversibility)).collect();
        if targets.is_empty() {
            return None;
        }
        let note = rpc::notification("supervision.intent", intent.clone()).to_string();
        for t in &targets {
            let _ = t.out.send(Message::text(note.clone()));
        }
        let (tx, rx) = oneshot::channel();
        s.pending.push((id.clone(), Pending { intent, reversibility, tx }));
        Some((id, rx))
    }

    /// Forgets an intent nobody decided (timed out, or its submitter left).
    pub(crate) fn expire(&self, id: &str) {
        if let Ok(mut s) = self.state.lock()
            && let Some(i) = s.pending.iter().position(|(pid, _)| pid == id)
        {
            let (id, _) = s.pending.remove(i);
            finish(&mut s, id, "expired");
        }
    }
}

fn finish(s: &mut State, id: String, what: &'static str) {
    s.finished.push_back((id, what));
    while s.finished.len() > FINISHED_CAP {
        s.finished.pop_front();
    }
}

fn parse_rev(v: &Value) -> Reversibility {
    serde_json::from_value(v.clone()).unwrap_or(Reversibility::Irreversible)
}

/// The least reversible of the classified actions (irreversible when unknown).
fn proposal_reversibility(classification: &Value) -> Reversibility {
    classification["classifications"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| parse_rev(&r["reversibility"]))
                .max_by_key(|r| rank(*r))
                .unwrap_or(Reversibility::Reversible)
        })
        .unwrap_or(Reversibility::Irreversible)
}

fn intent_json(id: &str, p: &ActionProposal, session_id: &str, rev: Reversibility, classification: &Value) -> Value {
    let rows = classification["classifications"].as_array();
    let actions: Vec<Value> = p
        .actions
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut keys: Vec<&String> = a.parameters.keys().collect();
            keys.sort();
            let r = rows.and_then(|rs| rs.get(i)).map(|r| parse_rev(&r["reversibility"])).unwrap_or(a.reversibility);
            json!({
                "id": a.id,
                "action_type": a.action_type,
                "tool": a.tool,
                "reversibility": r.as_str(),
                "parameter_keys": keys,
                "parameters_digest": crate::events::params_digest(&a.parameters),
            })
        })
        .collect();
    json!({
        "id": id,
        "proposal_id": p.id,
        "source": p.source,
        "session_id": session_id,
        "reversibility": rev.as_str(),
        "created_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "actions": actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal() -> ActionProposal {
        crate::ir::parse_proposal(
            r#"{"id":"p","source":"m","actions":[{"id":"a","type":"tool_call","tool":"deploy","parameters":{"b":1,"a":2}}]}"#,
        )
        .unwrap()
    }

    fn classification(rev: &str) -> Value {
        json!({"classifications": [{"action_id": "a", "reversibility": rev}]})
    }

    #[tokio::test]
    async fn park_decide_and_errors() {
        let sup = Supervisors::new(Duration::from_secs(1));
        assert!(sup.park(&proposal(), "s1", &classification("irreversible")).is_none(), "no supervisor: unsupervised");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let r = sup
            .subscribe("boss", tx, &json!({"filter": {"tools": ["deploy"], "min_reversibility": "compensable"}}))
            .unwrap();
        assert_eq!(r["supervisors"], 1);
        assert!(sup.park(&proposal(), "s1", &classification("reversible")).is_none(), "below min_reversibility");
        let (id, verdict) = sup.park(&proposal(), "s1", &classification("irreversible")).unwrap();
        let Some(Message::Text(note)) = rx.recv().await else { panic!() };
        let note: Value = serde_json::from_str(note.as_str()).unwrap();
        assert_eq!(note["method"], "supervision.intent");
        assert_eq!(note["params"]["actions"][0]["parameter_keys"], json!(["a", "b"]));
        assert_eq!(sup.pending("boss").unwrap()["intents"][0]["id"], id);
        let e = sup.decide("boss", &json!({"intent_id": id, "decision": {"kind": "deny"}})).unwrap_err();
        assert_eq!(e.message, "invalid params: decision.reason is required for deny");
        assert!(sup.decide("other", &json!({"intent_id": id, "decision": {"kind": "allow"}})).is_err());
        sup.decide("boss", &json!({"intent_id": id, "decision": {"kind": "deny", "reason": "no"}})).unwrap();
        assert_eq!(verdict.await.unwrap(), Verdict::Deny("no".into()));
        let e = sup.decide("boss", &json!({"intent_id": id, "decision": {"kind": "allow"}})).unwrap_err();
        assert!(e.message.ends_with("is already decided"), "{}", e.message);
        let (id2, _rx2) = sup.park(&proposal(), "s1", &classification("irreversible")).unwrap();
        sup.expire(&id2);
        let e = sup.decide("boss", &json!({"intent_id": id2, "decision": {"kind": "allow"}})).unwrap_err();
        assert!(e.message.ends_with("is expired"), "{}", e.message);
        assert!(sup.unsubscribe("boss"));
        assert!(!sup.unsubscribe("boss"));
    }
}
