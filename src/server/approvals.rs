//! Ask approvals on the wire: the daemon's one approvals store
//! ([`ApprovalStore`], `$CAR_HOME/approvals.jsonl`) shared by every session,
//! and what people see of it.
//!
//! - Before a `proposal.submit` runs, the daemon registers the plan items of
//!   its asks ([`Approvals::expect`]); when the admission stage's `approval`
//!   layer asks the store, every connection subscribed with `host.subscribe`
//!   gets `host.event {type: "approval.requested", approval}` (the plan item,
//!   parameters with protected values masked, `approval::view`), and the
//!   dashboard's live stream and the webhooks get the same document.
//! - `host.approvals` lists the pending ones, `host.approval` reads one with
//!   its history, `host.resolve_approval` decides one with a scope (`once`,
//!   `session`, `always`) and a reason. The reviewer is the connection's
//!   (`car-server:<role>:<principal>`), never the request's; a connection
//!   cannot approve an action of its own proposal unless the daemon allows
//!   self-approval.
//! - The store decides everything else (first closing wins, the deadline is a
//!   deny); the stage applies the outcome. This module decides nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;

use super::conn::Outbox;
use super::rpc::{self, RpcError};
use crate::admission::SessionState;
use crate::approval::{ApprovalDecision, ApprovalEvent, ApprovalStore, ResolvedBy};
use crate::ir::ActionProposal;
use crate::store::ApprovalBackend;

/// The JSON-RPC code of a proposal refused because an approval was denied
/// or timed out (`websocket-protocol.md`).
pub(crate) const APPROVAL_DENIED: i64 = -32003;

/// The store's tool name of tier escalations (`tier:<fingerprint>`).
pub(crate) const TIER_TOOL: &str = "tier";

/// How many approvals (with their history) stay readable.
const KEPT: usize = 4096;

/// One submission waiting on an approval.
#[derive(Clone)]
struct Submitter {
    /// The submitting connection's principal (self-approval is judged on it).
    principal: String,
    /// Its connection session id (to forget it when the submission ends).
    conn: String,
    /// The submitting runtime's session answers (`session` scope).
    answers: Arc<SessionState>,
    /// The policy session the proposal runs in.
    policy_session: Option<String>,
}

struct Entry {
    view: Map<String, Value>,
    submitters: Vec<Submitter>,
    history: Vec<Value>,
    /// `pending`, `allowed`, `denied`, `timed_out`, or `expected` (registered,
    /// not asked yet).
    status: &'static str,
    /// The reviewer's details of a resolution in flight, by the reason
    /// text stored with it.
    deciding: Vec<(String, Value)>,
    /// For a tier escalation: the operation's fingerprint and required tier
    /// (an approval is recorded on the tier ledger).
    tier: Option<(String, String)>,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    order: Vec<String>,
    subscribers: HashMap<String, Outbox>,
    /// Open dashboard streams and configured webhooks: approvers too.
    other_approvers: usize,
    callback: Option<u64>,
}

/// The daemon's approvals.
pub(crate) struct Approvals {
    /// Where approvals are asked, resolved and waited for: the local store,
    /// or a backend shared with other daemons (`--store postgres://...`).
    backend: Arc<dyn ApprovalBackend>,
    /// The local store (`$CAR_HOME/approvals.jsonl`) when `backend` is it.
    local: Option<Arc<ApprovalStore>>,
    /// The directory of the `always` rules (`$CAR_HOME`).
    rules_dir: PathBuf,
    allow_self: bool,
    /// The tier ledger, for approved escalations.
    ledger: Option<Arc<crate::store::ledger::SharedLedger>>,
    state: Mutex<State>,
    /// Every approval event as the JSON document people see (dashboard,
    /// webhooks).
    live: broadcast::Sender<Value>,
}

/// Who is deciding.
pub(crate) struct Reviewer<'a> {
    pub(crate) principal: &'a str,
    pub(crate) reviewer: &'a str,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A decision's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Once,
    Session,
    Always,
}

impl Scope {
    fn parse(v: Option<&Value>) -> Result<Scope, RpcError> {
        match v {
            None | Some(Value::Null) => Ok(Scope::Once),
            Some(Value::String(s)) => match s.as_str() {
                "once" => Ok(Scope::Once),
                "session" => Ok(Scope::Session),
                "always" => Ok(Scope::Always),
                other => {
                    Err(RpcError::invalid_params(format!("scope must be `once`, `session` or `always`, not `{other}`")))
                }
            },
            Some(_) => Err(RpcError::invalid_params("scope must be a string (`once`, `session` or `always`)")),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
            Scope::Always => "always",
        }
    }
}

/// A decision as parsed from `host.resolve_approval` (or the dashboard).
pub(crate) struct DecisionRequest {
    pub(crate) approval_id: String,
    pub(crate) allow: bool,
    pub(crate) scope: Scope,
    pub(crate) reason: String,
}

impl DecisionRequest {
    /// `{approval_id, resolution: approve | deny, scope?, reason?}`; a
    /// `reviewer` is refused (the server stamps it).
    pub(crate) fn parse(p: &Value) -> Result<DecisionRequest, RpcError> {
        let o = p.as_object().ok_or_else(|| RpcError::invalid_params("params must be an object"))?;
        if o.contains_key("reviewer") {
            return Err(RpcError::invalid_params("reviewer is stamped by the server; do not send one"));
        }
        let approval_id = match o.get("approval_id") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            None | Some(Value::Null) => return Err(RpcError::invalid_params("approval_id is required")),
            Some(_) => return Err(RpcError::invalid_params("approval_id must be a non-empty string")),
        };
        let allow = match o.get("resolution").and_then(Value::as_str) {
            Some("approve" | "allow") => true,
            Some("deny" | "reject") => false,
            Some(other) => {
                return Err(RpcError::invalid_params(format!("resolution must be `approve` or `deny`, not `{other}`")));
            }
            None => return Err(RpcError::invalid_params("resolution is required (`approve` or `deny`)")),
        };
        let scope = Scope::parse(o.get("scope"))?;
        let reason = match o.get("reason") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(RpcError::invalid_params("reason must be a string")),
        };
        Ok(DecisionRequest { approval_id, allow, scope, reason })
    }
}

fn status_of(r: &crate::approval::Resolution) -> &'static str {
    match (r.by, r.decision) {
        (ResolvedBy::Timeout, _) => "timed_out",
        (_, ApprovalDecision::Allow) => "allowed",
        (_, ApprovalDecision::Deny) => "denied",
    }
}

impl Approvals {
    /// The approvals of the store in `dir` (`approvals.jsonl`).
    pub(crate) fn open(
        dir: &Path,
        allow_self: bool,
        ledger: Option<Arc<crate::store::ledger::SharedLedger>>,
    ) -> crate::Result<Arc<Approvals>> {
        let store = Arc::new(ApprovalStore::open(dir)?);
        let (live, _) = broadcast::channel(1024);
        Ok(Arc::new(Approvals {
            backend: store.clone(),
            local: Some(store),
            rules_dir: dir.to_path_buf(),
            allow_self,
            ledger,
            state: Mutex::new(State::default()),
            live,
        }))
    }

    /// The approvals of a backend shared with other daemons, with the
    /// `always` rules of `rules_dir`. Every request and resolution of any
    /// daemon of the backend reaches this one's approvers (the backend's
    /// notifications, followed for as long as this lives).
    pub(crate) fn open_shared(
        backend: Arc<dyn ApprovalBackend>,
        rules_dir: &Path,
        allow_self: bool,
        ledger: Option<Arc<crate::store::ledger::SharedLedger>>,
    ) -> Arc<Approvals> {
        let (live, _) = broadcast::channel(1024);
        let mut rx = backend.subscribe();
        let me = Arc::new(Approvals {
            backend,
            local: None,
            rules_dir: rules_dir.to_path_buf(),
            allow_self,
            ledger,
            state: Mutex::new(State::default()),
            live,
        });
        let weak = Arc::downgrade(&me);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                loop {
                    match rx.recv().await {
                        Ok(ev) => match weak.upgrade() {
                            Some(a) => a.on_store_event(&ev),
                            None => return,
                        },
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            eprintln!("car-server: approvals: {n} notifications of the shared store were missed");
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
        }
        me
    }

    /// A tier escalation as an approval: `row` is the `needs_approval`
    /// decision of `permission.evaluate` for one action of `proposal`. Waits
    /// until it closes (the deadline is a deny); an allow has been recorded
    /// on the tier ledger by the reviewer when this returns.
    pub(crate) async fn escalation(
        &self,
        proposal: &ActionProposal,
        row: &Value,
        submitter: (&str, &str),
        answers: Arc<SessionState>,
        deadline: DateTime<Utc>,
    ) -> Result<(String, crate::approval::Resolution), RpcError> {
        let fp = row.get("fingerprint").and_then(Value::as_str).unwrap_or_default().to_string();
        let required = row.get("required").and_then(Value::as_str).unwrap_or_default().to_string();
        let action_id = row.get("action_id").and_then(Value::as_str).unwrap_or_default();
        let action = proposal.actions.iter().find(|a| a.id == action_id);
        let tool = action.and_then(|a| a.tool.clone()).unwrap_or_else(|| "tier".into());
        // The ledger's fingerprint holds the parameter values: the approval
        // is keyed by its digest, so no value reaches the approvers.
        let digest = crate::canonical::digest(&json!(fp));
        let item = json!({
            "approval_key": crate::approval::approval_key(TIER_TOOL, &digest), "action_id": action_id, "tool": tool,
            "type": action.map(|a| a.action_type.as_str()), "kind": "tier_escalation", "layer": "tier",
            "reason": row.get("reason"), "required_tier": required, "granted_tier": row.get("granted"),
        });
        let keys = self.expect(proposal, &[item], submitter, answers, None);
        let key = keys.first().cloned().unwrap_or_default();
        if let Some(e) = lock(&self.state).entries.get_mut(&key) {
            e.tier = Some((fp.clone(), required));
        }
        let ticket = self.backend.request(None, TIER_TOOL, &digest, Some(deadline)).await.map_err(RpcError::from)?;
        let r = match ticket {
            crate::approval::Ticket::Resolved(r) => r,
            crate::approval::Ticket::Pending(p) => {
                self.backend.wait(&p.key, Some(deadline)).await.map_err(RpcError::from)?
            }
        };
        self.done(&keys, submitter.1);
        Ok((key, r))
    }

    /// The daemon's approvals for a session's runtime: the local store, or
    /// else the shared backend (with the daemon's `always` rules).
    pub(crate) fn for_session(
        &self,
    ) -> (Option<Arc<crate::gate::ApprovalStore>>, Option<crate::admission::SharedApprovals>) {
        match &self.local {
            Some(store) => (Some(store.clone()), None),
            None => (
                None,
                Some(crate::admission::SharedApprovals {
                    backend: self.backend.clone(),
                    rules_dir: self.rules_dir.clone(),
                }),
            ),
        }
    }

    /// True while someone can approve (the store then holds asks). With a
    /// shared backend always: an approver on any daemon of the store can.
    pub(crate) fn attached(&self) -> bool {
        self.local.is_none() || lock(&self.state).callback.is_some()
    }

    /// A subscription to every approval event (the dashboard's stream).
    pub(crate) fn live(&self) -> broadcast::Receiver<Value> {
        self.live.subscribe()
    }

    /// Attaches the store callback while anyone can approve, detaches it when
    /// nobody can (then an ask is refused at once, `approval_required`).
    fn sync_attached(self: &Arc<Self>, st: &mut State) {
        // A shared backend's notifications are followed from the start.
        let Some(store) = &self.local else { return };
        let wanted = !st.subscribers.is_empty() || st.other_approvers > 0;
        match (wanted, st.callback) {
            (true, None) => {
                let me = Arc::downgrade(self);
                st.callback = Some(store.on_event(Arc::new(move |ev: &ApprovalEvent| {
                    if let Some(me) = me.upgrade() {
                        me.on_store_event(ev);
                    }
                })));
            }
            (false, Some(id)) => {
                store.remove_callback(id);
                st.callback = None;
            }
            _ => {}
        }
    }

    /// An approver other than a WebSocket subscriber (a dashboard stream, a
    /// webhook) comes or goes.
    pub(crate) fn attach_other(self: &Arc<Self>, delta: isize) {
        let mut st = lock(&self.state);
        st.other_approvers = st.other_approvers.saturating_add_signed(delta);
        self.sync_attached(&mut st);
    }

    /// `host.subscribe`: this connection gets `host.event` notifications.
    pub(crate) fn subscribe(self: &Arc<Self>, conn: &str, out: Outbox) -> Value {
        let mut st = lock(&self.state);
        st.subscribers.insert(conn.to_string(), out);
        self.sync_attached(&mut st);
        json!({"subscribed": true, "events": ["approval.requested", "approval.resolved"], "approvers": st.subscribers.len()})
    }

    /// `host.unsubscribe` (also at disconnect and re-auth).
    pub(crate) fn unsubscribe(self: &Arc<Self>, conn: &str) -> bool {
        let mut st = lock(&self.state);
        let was = st.subscribers.remove(conn).is_some();
        self.sync_attached(&mut st);
        was
    }

    /// Registers the ask items of a submission before it runs, so the
    /// notification carries the plan item. Returns the approval ids.
    fn expect(
        &self,
        proposal: &ActionProposal,
        items: &[Value],
        submitter: (&str, &str),
        answers: Arc<SessionState>,
        policy_session: Option<&str>,
    ) -> Vec<String> {
        let mut keys = Vec::new();
        let mut st = lock(&self.state);
        for item in items {
            let Some(key) = item.get("approval_key").and_then(Value::as_str) else { continue };
            let action = proposal.actions.iter().find(|a| item.get("action_id").and_then(Value::as_str) == Some(&a.id));
            let mut view = Map::new();
            view.insert("approval_id".into(), json!(key));
            view.insert("proposal_id".into(), json!(proposal.id));
            view.insert("source".into(), json!(proposal.source));
            for k in [
                "action_id",
                "tool",
                "type",
                "kind",
                "risk",
                "layer",
                "rule",
                "reason",
                "preview",
                "required_tier",
                "granted_tier",
            ] {
                if let Some(v) = item.get(k).filter(|v| !v.is_null()) {
                    view.insert(k.into(), v.clone());
                }
            }
            if let Some(a) = action {
                if !view.contains_key("preview")
                    && let Some(p) = crate::approval::view::file_write_preview(
                        a.tool.as_deref().unwrap_or_default(),
                        &crate::approval::view::masked_parameters(&a.parameters),
                    )
                {
                    view.insert("preview".into(), p);
                }
                view.insert(
                    "parameters".into(),
                    Value::Object(crate::approval::view::masked_parameters(&a.parameters)),
                );
                view.insert("parameter_keys".into(), json!(a.parameters.keys().collect::<Vec<_>>()));
            }
            view.insert("submitted_by".into(), json!(submitter.0));
            let sub = Submitter {
                principal: submitter.0.to_string(),
                conn: submitter.1.to_string(),
                answers: answers.clone(),
                policy_session: policy_session.map(str::to_string),
            };
            let fresh = !st.entries.contains_key(key);
            let e = st.entries.entry(key.to_string()).or_insert_with(|| Entry {
                view: Map::new(),
                submitters: Vec::new(),
                history: Vec::new(),
                status: "expected",
                deciding: Vec::new(),
                tier: None,
            });
            if e.status != "pending" {
                // A new round of the same key (a later call of the same input).
                e.view = view;
                e.status = "expected";
            }
            e.submitters.push(sub);
            if fresh {
                st.order.push(key.to_string());
            }
            keys.push(key.to_string());
        }
        Self::evict(&mut st);
        keys
    }

    fn evict(st: &mut State) {
        while st.order.len() > KEPT {
            let Some(pos) = st.order.iter().position(|k| st.entries.get(k).is_none_or(|e| e.status != "pending"))
            else {
                break;
            };
            let k = st.order.remove(pos);
            st.entries.remove(&k);
        }
    }

    /// Before a submission runs on `rt` (any door: a WebSocket connection,
    /// an MCP endpoint session): the plan items of its asks, so that the
    /// approvers see each request with its action, parameters and layer.
    /// Only while someone can approve (otherwise an ask is refused at once).
    /// Returns `(approval key, action id)` per ask; hand the keys to
    /// [`Approvals::done`] when the submission ends.
    pub(crate) fn expect_asks(
        &self,
        rt: &crate::api::runtime::CarRuntime,
        proposal: &ActionProposal,
        submitter: (&str, &str),
        policy_session: Option<&str>,
    ) -> Vec<(String, String)> {
        if !self.attached() {
            return Vec::new();
        }
        match rt.plan_items(proposal, policy_session, None) {
            Ok((items, asks, _)) if !asks.is_empty() => {
                let answers = rt.runtime().admission_stage().session_state().clone();
                let keys = self.expect(proposal, &items, submitter, answers, policy_session);
                keys.into_iter()
                    .zip(items.iter().filter(|i| i.get("approval_key").is_some()))
                    .map(|(k, i)| (k, i["action_id"].as_str().unwrap_or_default().to_string()))
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// A submission ended: it no longer waits on these approvals.
    pub(crate) fn done(&self, keys: &[String], conn: &str) {
        let mut st = lock(&self.state);
        for k in keys {
            if let Some(e) = st.entries.get_mut(k) {
                if let Some(i) = e.submitters.iter().position(|s| s.conn == conn) {
                    e.submitters.remove(i);
                }
                if e.status == "expected" && e.submitters.is_empty() {
                    // Never asked (an `always` rule or a session answer decided it).
                    e.status = "not_asked";
                }
            }
        }
    }

    /// The status of an approval, for the submit's outcome.
    pub(crate) fn status(&self, key: &str) -> Option<&'static str> {
        lock(&self.state).entries.get(key).map(|e| e.status)
    }

    fn on_store_event(&self, ev: &ApprovalEvent) {
        let (note, doc, subscribers) = {
            let mut st = lock(&self.state);
            let (note, doc) = match ev {
                ApprovalEvent::Pending(p) => {
                    let fresh = !st.entries.contains_key(&p.key);
                    let e = st.entries.entry(p.key.clone()).or_insert_with(|| {
                        let mut view = Map::new();
                        view.insert("approval_id".into(), json!(p.key));
                        view.insert("tool".into(), json!(p.tool));
                        Entry {
                            view,
                            submitters: Vec::new(),
                            history: Vec::new(),
                            status: "expected",
                            deciding: Vec::new(),
                            tier: None,
                        }
                    });
                    if e.status == "pending" {
                        // Joined by another request: announced once.
                        return;
                    }
                    e.status = "pending";
                    e.view.insert("requested_at".into(), json!(p.requested_at));
                    e.view.insert("deadline".into(), json!(p.deadline));
                    e.view.insert("input_digest".into(), json!(p.input_digest));
                    e.history.push(json!({"event": "requested", "at": p.requested_at, "by": e.view.get("submitted_by"), "deadline": p.deadline}));
                    let mut approval = e.view.clone();
                    approval.insert("status".into(), json!("pending"));
                    if fresh {
                        st.order.push(p.key.clone());
                    }
                    let doc = json!({"type": "approval.requested", "approval": approval});
                    (rpc::notification("host.event", doc.clone()).to_string(), doc)
                }
                ApprovalEvent::Resolved(r) => {
                    let Some(e) = st.entries.get_mut(&r.key) else { return };
                    if e.status != "pending" && e.status != "expected" {
                        return;
                    }
                    e.status = status_of(r);
                    let meta = e.deciding.iter().find(|(reason, _)| *reason == r.reason).map(|(_, m)| m.clone());
                    let mut row = json!({"event": e.status, "decision": r.decision.as_str(), "at": r.at,
                        "by": match r.by { ResolvedBy::Host => "reviewer", ResolvedBy::Timeout => "timeout" }});
                    match meta {
                        Some(Value::Object(m)) => row.as_object_mut().into_iter().for_each(|o| o.extend(m.clone())),
                        _ => row["reason"] = json!(r.reason),
                    }
                    e.history.push(row.clone());
                    let mut doc = json!({"type": "approval.resolved", "approval_id": r.key, "status": e.status});
                    if let (Some(d), Some(o)) = (doc.as_object_mut(), row.as_object()) {
                        for k in ["decision", "reviewer", "scope", "reason", "at"] {
                            if let Some(v) = o.get(k) {
                                d.insert(k.into(), v.clone());
                            }
                        }
                    }
                    (rpc::notification("host.event", doc.clone()).to_string(), doc)
                }
            };
            (note, doc, st.subscribers.values().cloned().collect::<Vec<_>>())
        };
        for out in subscribers {
            let _ = out.send(Message::text(note.clone()));
        }
        let _ = self.live.send(doc);
    }

    /// One approval as people see it, with its status.
    fn approval_doc(e: &Entry) -> Value {
        let mut v = e.view.clone();
        v.insert("status".into(), json!(e.status));
        Value::Object(v)
    }

    /// `host.approvals`: the pending approvals, oldest first.
    pub(crate) async fn pending(&self) -> Result<Value, RpcError> {
        let pending = self.backend.pending().await.map_err(RpcError::from)?;
        let st = lock(&self.state);
        let list: Vec<Value> = pending
            .iter()
            .map(|p| match st.entries.get(&p.key) {
                Some(e) => {
                    let mut d = Self::approval_doc(e);
                    d["status"] = json!("pending");
                    d["requested_at"] = json!(p.requested_at);
                    d["deadline"] = json!(p.deadline);
                    d
                }
                None => json!({"approval_id": p.key, "tool": p.tool, "status": "pending",
                               "requested_at": p.requested_at, "deadline": p.deadline}),
            })
            .collect();
        Ok(json!({"count": list.len(), "approvals": list}))
    }

    /// `host.approval`: one approval with its history (oldest first).
    pub(crate) fn get(&self, approval_id: &str) -> Result<Value, RpcError> {
        let st = lock(&self.state);
        let e = st
            .entries
            .get(approval_id)
            .ok_or_else(|| RpcError::invalid_params(format!("no approval `{approval_id}` is known to this daemon")))?;
        Ok(json!({"approval": Self::approval_doc(e), "history": e.history}))
    }

    /// Recent approvals, newest first (the dashboard's list of decided ones).
    pub(crate) fn recent(&self, limit: usize) -> Value {
        let st = lock(&self.state);
        let list: Vec<Value> =
            st.order.iter().rev().filter_map(|k| st.entries.get(k)).take(limit).map(Self::approval_doc).collect();
        json!({"approvals": list})
    }

    /// `host.resolve_approval` (and the dashboard's decision).
    pub(crate) async fn resolve(&self, me: &Reviewer<'_>, d: &DecisionRequest) -> Result<Value, RpcError> {
        let key = d.approval_id.as_str();
        // Known pending here (asked here, or announced by the shared store),
        // else asked of the store.
        let known = lock(&self.state).entries.get(key).is_some_and(|e| e.status == "pending");
        let open = match known {
            true => None,
            false => self.backend.pending().await.map_err(RpcError::from)?.into_iter().find(|p| p.key == key),
        };
        let (tool, submitters, tier) = {
            let st = lock(&self.state);
            let e = st.entries.get(key);
            if e.is_none_or(|e| e.status != "pending") && open.is_none() {
                let closed = e.map(|e| e.status).unwrap_or("unknown");
                return Err(RpcError::internal(format!(
                    "approval `{key}` is not pending ({closed}); nothing was decided"
                ))
                .with_data(json!({"code": "approval_not_pending", "approval_id": key, "status": closed})));
            }
            let tool = e
                .and_then(|e| e.view.get("tool").and_then(Value::as_str).map(str::to_string))
                .or_else(|| open.as_ref().map(|p| p.tool.clone()))
                .unwrap_or_else(|| key.split(':').next().unwrap_or_default().to_string());
            (tool, e.map(|e| e.submitters.clone()).unwrap_or_default(), e.and_then(|e| e.tier.clone()))
        };
        if tier.is_none() && key.starts_with(&format!("{TIER_TOOL}:")) {
            // Asked on another daemon of a shared store (or before a
            // restart): the operation it would approve (its fingerprint,
            // which holds the parameter values) is known only where it was
            // asked, so nothing could be recorded for it here.
            return Err(RpcError::internal(format!(
                "tier escalation `{key}` was not asked on this daemon; decide it on the daemon that asked (only it knows the operation to record)"
            ))
            .with_data(json!({"code": "approval_elsewhere", "approval_id": key})));
        }
        if tier.is_some() && d.scope != Scope::Once {
            return Err(RpcError::invalid_params(
                "a tier escalation is approved for its operation only: scope must be `once`",
            ));
        }
        if d.allow && !self.allow_self && submitters.iter().any(|s| s.principal == me.principal) {
            return Err(RpcError::internal(format!(
                "self-approval refused: approval `{key}` is for a proposal of this connection's own principal `{}`; another reviewer must approve it",
                me.principal
            ))
            .with_data(json!({"code": "self_approval", "approval_id": key})));
        }
        let verb = if d.allow { "approved" } else { "denied" };
        let why = if d.reason.is_empty() { String::new() } else { format!(": {}", d.reason) };
        let stored = format!("{verb} by {} (scope {}){why}", me.reviewer, d.scope.as_str());
        let meta = json!({"reviewer": me.reviewer, "scope": d.scope.as_str(), "reason": d.reason});
        if let Some(e) = lock(&self.state).entries.get_mut(key) {
            e.deciding.push((stored.clone(), meta));
        }
        // An approved escalation is a tier-ledger approval by this reviewer,
        // recorded before the waiting submission learns of it.
        if let (Some((fp, required)), true) = (&tier, d.allow) {
            let ledger = self.ledger.as_ref().ok_or_else(|| {
                RpcError::internal("no approvals ledger is configured: a tier escalation cannot be approved")
            })?;
            let tier = crate::policy::PermissionTier::parse(required)
                .ok_or_else(|| RpcError::internal(format!("escalation `{key}` names an unknown tier `{required}`")))?;
            let evidence = Some(Value::String(format!("approval `{key}`")));
            let rec = crate::policy::ApprovalRecord::new(fp, tier, true, me.reviewer, &d.reason, evidence)?;
            ledger.append(&rec).await.map_err(RpcError::from)?;
        }
        let decision = if d.allow { ApprovalDecision::Allow } else { ApprovalDecision::Deny };
        let outcome = self.backend.resolve(key, decision, &stored).await.map_err(RpcError::from);
        if let Ok(o) = &outcome
            && o.applied
        {
            // Applied here: announced now (a shared backend's own
            // notification of it arrives later and finds it closed).
            self.on_store_event(&ApprovalEvent::Resolved(o.resolution.clone()));
        }
        if let Some(e) = lock(&self.state).entries.get_mut(key) {
            e.deciding.retain(|(r, _)| *r != stored);
        }
        let outcome = outcome?;
        if outcome.applied {
            match d.scope {
                Scope::Once => {}
                Scope::Session => {
                    for s in &submitters {
                        s.answers.remember(s.policy_session.as_deref(), &tool, d.allow, &stored);
                    }
                }
                Scope::Always => {
                    // In the shared store when it keeps rules (every daemon
                    // then answers by it), else beside this daemon's approvals.
                    let rule = crate::approval::rules::always_rule_of(&tool, d.allow, me.reviewer, &d.reason);
                    if !self.backend.persist_always(&rule).await.map_err(RpcError::from)? {
                        let path = crate::approval::rules::rules_path_of(
                            &self.rules_dir.join(crate::approval::APPROVALS_FILE),
                        );
                        crate::gate::PolicyStore::persist(&crate::gate::FilePolicyStore::open(&path), rule)
                            .map_err(RpcError::from)?;
                    }
                }
            }
        }
        Ok(json!({
            "approval_id": key,
            "decision": outcome.resolution.decision.as_str(),
            "status": status_of(&outcome.resolution),
            "applied": outcome.applied,
            "scope": d.scope.as_str(),
            "reviewer": me.reviewer,
        }))
    }
}
