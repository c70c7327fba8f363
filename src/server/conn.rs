//! One WebSocket connection: the read loop, the auth and handshake gates,
//! concurrent dispatch, response routing and liveness.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::auth::tokens_equal;
use super::handshake;
use super::rpc::{self, AUTH_REQUIRED, Frame, HANDSHAKE_REQUIRED, RpcError};
use super::supervision::Supervisors;
use super::{Config, Daemon, UnauthSlot};
use crate::api::runtime::CarRuntime;

/// What the outcome of a server-initiated request carries back.
pub(crate) type CallbackOutcome = Result<Value, Value>;

/// Chunks a detached call's stream holds before `tools.stream.push` waits.
const STREAM_BUFFER: usize = 64;

/// Who a connection is, from the credential it authenticated with (see
/// docs/server.md, "Roles").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// `session.auth {token, agent_id}` with that agent's token: acts on its
    /// own session, never decides.
    Agent,
    /// `session.auth {token}` with the daemon token (or auth off): decides
    /// unless a host token is configured.
    Operator,
    /// `session.auth {host_token}`: always decides.
    Host,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Operator => "operator",
            Role::Host => "host",
        }
    }
}

/// An authenticated connection's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) role: Role,
    /// The agent id, for [`Role::Agent`].
    pub(crate) agent_id: Option<String>,
}

/// A connection's bounded outbound queue: at most `Config::max_queued_frames`
/// frames and `Config::max_queued_bytes` bytes wait for the writer. A frame
/// that does not fit means the peer is not reading: the queue is marked
/// overflowed and the connection is closed.
///
/// The writer is the connection's own task ([`serve_connection`]), which
/// also reads the frames and runs their handlers: a frame queued while that
/// task runs (a handler's answer, a tool callback) is written before the
/// task sleeps, without waking anything; a frame queued from elsewhere (a
/// notification of another connection's doing) wakes it.
pub(crate) struct Outbox {
    shared: Arc<OutboxShared>,
}

struct OutboxShared {
    queue: Mutex<std::collections::VecDeque<Message>>,
    max_frames: usize,
    bytes: AtomicUsize,
    max_bytes: usize,
    overflowed: AtomicBool,
    /// The receiver is gone: sends fail.
    closed: AtomicBool,
    /// The live [`Outbox`] handles (the receiver reads `None` at zero).
    senders: AtomicUsize,
    /// The receiver's.
    waker: futures::task::AtomicWaker,
}

/// The receiving end of an [`Outbox`] (the connection's writer).
pub(crate) struct OutboxReceiver {
    shared: Arc<OutboxShared>,
}

impl Clone for Outbox {
    fn clone(&self) -> Outbox {
        self.shared.senders.fetch_add(1, Ordering::SeqCst);
        Outbox { shared: self.shared.clone() }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.shared.waker.wake();
        }
    }
}

impl Outbox {
    pub(crate) fn new(config: &Config) -> (Outbox, OutboxReceiver) {
        let shared = Arc::new(OutboxShared {
            queue: Mutex::new(std::collections::VecDeque::new()),
            max_frames: config.max_queued_frames.max(1),
            bytes: AtomicUsize::new(0),
            max_bytes: config.max_queued_bytes.max(1),
            overflowed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            senders: AtomicUsize::new(1),
            waker: futures::task::AtomicWaker::new(),
        });
        (Outbox { shared: shared.clone() }, OutboxReceiver { shared })
    }

    /// Queues a frame; false once the connection is gone or overflowed.
    pub(crate) fn send(&self, m: Message) -> bool {
        let s = &*self.shared;
        if s.overflowed.load(Ordering::SeqCst) || s.closed.load(Ordering::SeqCst) {
            return false;
        }
        let len = m.len();
        let before = s.bytes.fetch_add(len, Ordering::SeqCst);
        if before.saturating_add(len) > s.max_bytes && before > 0 {
            s.bytes.fetch_sub(len, Ordering::SeqCst);
            self.overflowed();
            return false;
        }
        {
            let Ok(mut q) = s.queue.lock() else {
                s.bytes.fetch_sub(len, Ordering::SeqCst);
                return false;
            };
            if q.len() >= s.max_frames {
                drop(q);
                s.bytes.fetch_sub(len, Ordering::SeqCst);
                self.overflowed();
                return false;
            }
            q.push_back(m);
        }
        s.waker.wake();
        true
    }

    fn overflowed(&self) {
        if !self.shared.overflowed.swap(true, Ordering::SeqCst) {
            self.shared.waker.wake();
        }
    }

    /// Whether a frame did not fit (the peer does not read).
    fn is_overflowed(&self) -> bool {
        self.shared.overflowed.load(Ordering::SeqCst)
    }
}

impl OutboxReceiver {
    /// The next queued frame, if any (the writer's byte count is released).
    pub(crate) fn try_recv(&mut self) -> Option<Message> {
        let m = self.shared.queue.lock().ok()?.pop_front()?;
        self.shared.bytes.fetch_sub(m.len(), Ordering::SeqCst);
        Some(m)
    }

    /// Wakes `cx`'s task at the next frame queued (or overflow).
    fn register(&self, cx: &std::task::Context<'_>) {
        self.shared.waker.register(cx.waker());
    }

    /// The next frame; `None` once the queue is empty and every sender gone.
    pub(crate) fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Message>> {
        if let Some(m) = self.try_recv() {
            return std::task::Poll::Ready(Some(m));
        }
        self.shared.waker.register(cx.waker());
        if let Some(m) = self.try_recv() {
            return std::task::Poll::Ready(Some(m));
        }
        if self.shared.senders.load(Ordering::SeqCst) == 0 {
            return std::task::Poll::Ready(None);
        }
        std::task::Poll::Pending
    }

    /// The next frame (see [`OutboxReceiver::poll_recv`]).
    #[cfg(test)]
    pub(crate) async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        if let Ok(mut q) = self.shared.queue.lock() {
            q.clear();
        }
    }
}

/// The state of one connection, shared by its handlers and its executor.
pub(crate) struct Conn {
    pub(crate) config: Arc<Config>,
    pub(crate) rt: CarRuntime,
    /// The daemon-wide supervision registry.
    pub(crate) supervisors: Arc<Supervisors>,
    /// The daemon's ask approvals (its one store), when it has a state root.
    pub(crate) approvals: Option<Arc<super::approvals::Approvals>>,
    /// What every connection shares (the failed-auth table).
    daemon: Arc<Daemon>,
    /// This connection's session id, stamped on `tools.execute`.
    pub(crate) session_id: String,
    /// The peer's address (failed-auth accounting is per IP).
    peer: SocketAddr,
    out: Outbox,
    pending: Mutex<HashMap<String, oneshot::Sender<CallbackOutcome>>>,
    /// Set by a terminal tool failure; cleared by `session.clear_halt`.
    pub(crate) halted: AtomicBool,
    /// `None` until `session.auth` succeeds (and again after one fails).
    identity: Mutex<Option<Identity>>,
    /// Since when the connection is unauthenticated (`None` once it is).
    unauth_since: Mutex<Option<Instant>>,
    /// The daemon's count of unauthenticated connections, held until auth.
    slot: Mutex<UnauthSlot>,
    negotiated: AtomicBool,
    /// The names of the global policies loaded from the policy directory:
    /// never removed or shadowed over the wire.
    pub(crate) protected_policies: Vec<String>,
    /// The `tools.stream.subscribe` forwarder, aborted at teardown.
    stream_forwarder: Mutex<Option<tokio::task::AbortHandle>>,
    /// The tool and action of each callback in flight and each open stream,
    /// by request id (`tools.log`).
    calls: Mutex<HashMap<String, (String, String)>>,
    /// The `runs.subscribe` forwarder, aborted at unsubscribe and teardown.
    runs_forwarder: Mutex<Option<tokio::task::AbortHandle>>,
    /// The open streams of this client's detached tool calls, by request id
    /// (`tools.stream.push`).
    streams: Mutex<HashMap<String, tokio::sync::mpsc::Sender<Pushed>>>,
}

/// A pushed chunk on its way to the stream's reader, with the push's
/// acknowledgement on its last chunk: the reader lets it go (sends or
/// drops it) only when it asks for the next chunk or drops the stream,
/// that is, once it has done with this one (see
/// `executor::WsToolExecutor::execute_stream`).
pub(crate) type Pushed = (crate::ir::ToolStreamChunk, Option<tokio::sync::oneshot::Sender<()>>);

/// A connection's event sink: the daemon's audit log (when it keeps one),
/// and the run trace records (`RunStarted`, `RunModelTurn`, `RunCompleted`)
/// for `runs.subscribe`.
#[derive(Debug)]
struct RunsTap {
    audit: Option<Arc<dyn crate::events::EventSink>>,
    runs: tokio::sync::broadcast::Sender<Arc<crate::events::Event>>,
}

impl crate::events::EventSink for RunsTap {
    fn record(&self, event: &crate::events::Event) {
        use crate::events::EventKind;
        if let Some(a) = &self.audit {
            a.record(event);
        }
        if matches!(event.kind, EventKind::RunStarted | EventKind::RunModelTurn | EventKind::RunCompleted)
            && self.runs.receiver_count() > 0
        {
            let _ = self.runs.send(Arc::new(event.clone()));
        }
    }

    fn durable(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        self.audit.as_ref().and_then(|a| a.durable())
    }
}

/// A session's runtime as the daemon configures it for every client (a
/// WebSocket connection, an MCP endpoint session): the tier layer on
/// (`sandbox_edit`) over the daemon's approvals ledger, the policy
/// directory and the operator's admission document loaded, asks waiting on
/// the daemon's one approvals store. An error refuses the session.
///
/// `definitions` are admission definitions (`{name, risk, ...}`) of tools
/// the session serves itself, added to the operator's document unless it
/// declares the same name (the operator's wins).
pub(crate) fn session_runtime(
    config: &Config,
    daemon: &Daemon,
    definitions: &[Value],
    identity: Option<AdmissionIdentity>,
) -> Result<CarRuntime, String> {
    let rt = CarRuntime::new();
    // The audit log, behind the tap that hands run trace records to the
    // `runs.subscribe` subscribers of every connection.
    rt.runtime()
        .events()
        .attach_sink(Arc::new(RunsTap { audit: config.event_log.clone(), runs: daemon.runs_trace.clone() }));
    rt.runtime().set_rate_backend(Some(daemon.rates.clone()));
    rt.set_checkpoints(daemon.checkpoints.clone());
    if let Some(store) = config.shared_store.as_ref().filter(|_| config.shared_state) {
        rt.runtime().set_shared_state(Some(store.state.clone()));
    }
    rt.runtime().set_checkpoint_lease(config.checkpoint_lease);
    if let Some(dir) = &config.runs_dir {
        rt.set_runs_dir(Some(&dir.to_string_lossy()))
            .map_err(|e| format!("connection refused: runs directory: {e}"))?;
    }
    if let Some(dir) = &config.policy_dir
        && dir.is_dir()
        && let Err(e) = rt.load_policies(&dir.to_string_lossy())
    {
        return Err(format!("connection refused: policy directory `{}`: {e}", dir.display()));
    }
    let mut doc = None;
    if let Some(path) = config.admission_path.as_ref().filter(|p| p.is_file()) {
        let bad = |e: String| format!("connection refused: admission document `{}`: {e}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let d = crate::admission::AdmissionConfig::from_toml(&text).map_err(|e| bad(e.to_string()))?;
        if d.ledger_path.is_some() || d.approvals_dir.is_some() {
            return Err(bad("`ledger_path` and `approvals_dir` are the daemon's own (`$CAR_HOME`)".to_string()));
        }
        doc = Some((d, path.display().to_string()));
    }
    if doc.is_none() && !definitions.is_empty() {
        doc = Some((crate::admission::AdmissionConfig::default(), "(the session's own tools)".to_string()));
    }
    let (document, source) = doc
        .map(|(mut d, from)| {
            let declared: std::collections::HashSet<String> =
                d.tools.iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect();
            d.tools.extend(
                definitions.iter().filter(|t| !declared.contains(t["name"].as_str().unwrap_or_default())).cloned(),
            );
            (d, from)
        })
        .unzip();
    // The daemon's one ask-approvals store: an ask of any session (a
    // WebSocket connection or an MCP endpoint session) waits for an approver
    // (`host.resolve_approval`, the dashboard) instead of being refused.
    let (approvals_store, shared_approvals) = daemon.approvals.as_ref().map(|a| a.for_session()).unwrap_or_default();
    let identity = identity.unwrap_or_default();
    // Admission in one build of the stage: the tier layer on from the start
    // (`sandbox_edit`) reading the daemon's one approvals ledger
    // (websocket-methods.md), the document, the approvals and the identity.
    rt.configure_session(crate::api::runtime::SessionSetup {
        tier: crate::policy::PermissionTier::default(),
        tier_ledger: daemon.ledger.clone().map(Into::into),
        document,
        approvals_store,
        shared_approvals,
        supervisor: identity.supervisor,
        discounted_reviewer: identity.discounted_reviewer,
    })
    .map_err(|e| match &source {
        Some(source) => format!("connection refused: admission document `{source}`: {e}"),
        None => format!("connection refused: admission: {e}"),
    })?;
    Ok(rt)
}

/// Who a session's admission stage acts for ([`admission_identity`]).
#[derive(Default)]
pub(crate) struct AdmissionIdentity {
    /// Parks this principal's proposals for the daemon's supervisors.
    supervisor: Option<crate::admission::SupervisorFn>,
    /// Tier approvals this reviewer recorded do not count.
    discounted_reviewer: Option<String>,
}

impl Conn {
    /// What every connection of the daemon shares.
    pub(crate) fn daemon(&self) -> &Arc<Daemon> {
        &self.daemon
    }

    /// Ends this connection's `host.subscribe` (disconnect, re-auth).
    pub(crate) fn unsubscribe_approver(&self) {
        if let Some(a) = &self.approvals {
            a.unsubscribe(&self.session_id);
        }
    }

    /// The outbound queue (for daemon-wide notifications).
    pub(crate) fn outbox(&self) -> Outbox {
        self.out.clone()
    }

    /// Queues a frame for the writer; false once the connection is gone.
    pub(crate) fn send(&self, v: &Value) -> bool {
        self.send_text(v.to_string())
    }

    /// [`Conn::send`] of a frame already written as JSON text.
    pub(crate) fn send_text(&self, text: String) -> bool {
        self.out.send(Message::text(text))
    }

    /// The authenticated identity, `None` before `session.auth`.
    pub(crate) fn identity(&self) -> Option<Identity> {
        self.identity.lock().ok().and_then(|i| i.clone())
    }

    /// The role, `None` before `session.auth`.
    pub(crate) fn role(&self) -> Option<Role> {
        self.identity().map(|i| i.role)
    }

    /// Whether this connection may decide: approve, reject, set the tier,
    /// supervise. A host always; an operator unless a host token is
    /// configured; an agent never.
    pub(crate) fn may_decide(&self) -> bool {
        match self.role() {
            Some(Role::Host) => true,
            Some(Role::Operator) => self.config.host_token.is_none(),
            Some(Role::Agent) | None => false,
        }
    }

    /// The identity the server assigns this connection for supervision
    /// (what a filter's `sessions` match and an intent's `session_id`
    /// names): `agent:<agent_id>` for an agent, else the connection's
    /// session id. Nothing the client picks (a policy session, a
    /// `session_id` param) enters it.
    pub(crate) fn principal(&self) -> String {
        principal_of(&self.session_id, self.identity().as_ref())
    }

    /// The reviewer stamped on this connection's decisions:
    /// `car-server:<role>:<principal>`.
    pub(crate) fn reviewer(&self) -> String {
        reviewer_of(&self.session_id, self.identity().as_ref())
    }

    fn set_identity(&self, id: Option<Identity>) {
        let authed = id.is_some();
        if let Ok(mut i) = self.identity.lock() {
            *i = id;
        }
        if let Ok(mut u) = self.unauth_since.lock() {
            *u = if authed { None } else { u.or(Some(Instant::now())) };
        }
        if authed && let Ok(mut s) = self.slot.lock() {
            s.release();
        }
        self.daemon.activity.relabel(
            &self.session_id,
            self.principal(),
            self.role().map_or("unauthenticated", Role::as_str).to_string(),
        );
        if let Err(e) = self.sync_admission_identity() {
            // Fail closed: a stage that cannot take the new identity halts
            // the session rather than run with the old one.
            eprintln!("car-server: {}: cannot update admission identity: {e}; session halted", self.session_id);
            self.halted.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// When an unauthenticated connection is closed.
    fn auth_deadline(&self) -> Option<Instant> {
        self.config.token.as_ref()?;
        self.unauth_since.lock().ok().and_then(|u| *u).map(|t| t + self.config.auth_timeout)
    }

    /// `runs.subscribe`: forwards every run record of every connection of
    /// the daemon (`run_id`: of that run; `only_agent`: of that agent's
    /// runs) as a `runs.trace.event` notification until `runs.unsubscribe`
    /// or the end of the connection (best effort: a lagging connection skips
    /// records; `runs.get_trace` is the reliable read). Subscribing again
    /// replaces the filter.
    pub(crate) fn subscribe_runs(&self, run_id: Option<String>, only_agent: Option<String>) {
        let Ok(mut slot) = self.runs_forwarder.lock() else { return };
        if let Some(old) = slot.take() {
            old.abort();
        }
        let mut records = self.daemon.runs_trace.subscribe();
        let out = self.out.clone();
        let task = tokio::spawn(async move {
            use crate::events::EventKind;
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let event = match records.recv().await {
                    Ok(e) => e,
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => break,
                };
                let doc = event.to_json();
                let data = &doc["data"];
                let (rid, agent) = (data["run_id"].as_str(), data["agent_id"].as_str());
                if run_id.as_deref().is_some_and(|want| rid != Some(want))
                    || only_agent.as_deref().is_some_and(|me| agent != Some(me))
                {
                    continue;
                }
                let kind = match event.kind {
                    EventKind::RunStarted => "started",
                    EventKind::RunModelTurn => "turn",
                    _ => "completed",
                };
                let params = json!({"run_id": rid, "agent_id": agent, "kind": kind, "record": data,
                                    "timestamp": doc["timestamp"]});
                if !out.send(Message::text(rpc::notification("runs.trace.event", params).to_string())) {
                    break;
                }
            }
        });
        *slot = Some(task.abort_handle());
    }

    /// `runs.unsubscribe`: whether a subscription was open.
    pub(crate) fn unsubscribe_runs(&self) -> bool {
        let old = self.runs_forwarder.lock().ok().and_then(|mut s| s.take());
        old.map(|t| t.abort()).is_some()
    }

    /// `tools.stream.subscribe`: forwards every detached tool's `{handle,
    /// chunk}` as a `tools.stream.event` notification for the life of the
    /// connection (best effort: a lagging connection skips events; `tools.poll`
    /// is the reliable drain). Subscribing again keeps the one forwarder.
    pub(crate) fn subscribe_tool_stream(&self) {
        let Ok(mut slot) = self.stream_forwarder.lock() else { return };
        if slot.is_some() {
            return;
        }
        let mut events = self.rt.tool_stream_subscribe();
        let out = self.out.clone();
        let task = tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match events.recv().await {
                    Ok(ev) => {
                        let params = serde_json::to_value(&ev).unwrap_or(Value::Null);
                        let note = rpc::notification("tools.stream.event", params).to_string();
                        if !out.send(Message::text(note)) {
                            break;
                        }
                    }
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => break,
                }
            }
        });
        *slot = Some(task.abort_handle());
    }

    /// Registers a pending server-initiated request.
    pub(crate) fn expect(&self, id: &str) -> oneshot::Receiver<CallbackOutcome> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id.to_string(), tx);
        }
        rx
    }

    /// Opens the stream of detached call `id`: the chunks its client pushes.
    pub(crate) fn open_stream(&self, id: &str) -> tokio::sync::mpsc::Receiver<Pushed> {
        let (tx, rx) = tokio::sync::mpsc::channel(STREAM_BUFFER);
        if let Ok(mut s) = self.streams.lock() {
            s.insert(id.to_string(), tx);
        }
        rx
    }

    /// Closes a stream; false when it was not open.
    pub(crate) fn close_stream(&self, id: &str) -> bool {
        self.untrack_call(id);
        self.streams.lock().ok().and_then(|mut s| s.remove(id)).is_some()
    }

    /// Notes a call in flight (or a stream open) for `tools.log`.
    pub(crate) fn track_call(&self, id: &str, tool: &str, action_id: &str) {
        if let Ok(mut c) = self.calls.lock() {
            c.insert(id.to_string(), (tool.to_string(), action_id.to_string()));
        }
    }

    /// The call ended.
    pub(crate) fn untrack_call(&self, id: &str) {
        if let Ok(mut c) = self.calls.lock() {
            c.remove(id);
        }
    }

    /// The tool and action of call `id`, while it is in flight.
    pub(crate) fn call_of(&self, id: &str) -> Option<(String, String)> {
        self.calls.lock().ok()?.get(id).cloned()
    }

    /// `tools.stream.push`: hands the chunks to stream `id` in order (each
    /// waits while the stream's buffer is full); a terminal chunk closes it,
    /// and chunks after it are not taken. Returns how many were taken, once
    /// the stream's reader has done with the last of them (so a
    /// `tools.poll` after the answer sees them), or has dropped the stream.
    pub(crate) async fn push_stream(&self, id: &str, chunks: Vec<crate::ir::ToolStreamChunk>) -> Option<usize> {
        let tx = self.streams.lock().ok()?.get(id).cloned()?;
        let last = chunks.iter().position(|c| c.is_terminal()).unwrap_or(chunks.len().saturating_sub(1));
        let mut taken = 0;
        let mut acked = None;
        for (i, c) in chunks.into_iter().enumerate() {
            let terminal = c.is_terminal();
            let ack = (i == last).then(|| {
                let (ack, seen) = tokio::sync::oneshot::channel();
                acked = Some(seen);
                ack
            });
            if tx.send((c, ack)).await.is_err() {
                acked = None;
                break;
            }
            taken += 1;
            if terminal {
                self.close_stream(id);
                break;
            }
        }
        drop(tx);
        if let Some(seen) = acked {
            // Sent when the reader asks for the next chunk, dropped with the
            // stream: either way it is done with this one.
            let _ = seen.await;
        }
        Some(taken)
    }

    /// Forgets a pending request (given up on).
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(id);
        }
    }

    fn route(&self, id: &Value, outcome: CallbackOutcome) {
        let key = rpc::id_key(id);
        let tx = self.pending.lock().ok().and_then(|mut p| p.remove(&key));
        match tx {
            Some(tx) => {
                let _ = tx.send(outcome);
            }
            // The id is the client's text: escaped before it reaches the log.
            None => eprintln!(
                "car-server: ignoring a response to unknown or abandoned request id {}",
                crate::terminal::shown(&key)
            ),
        }
    }
}

/// The WebSocket read buffer (see `serve_connection`).
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// What the reader does with one call.
enum Step {
    /// Answer now (or nothing for a notification).
    Now(Option<Value>),
    /// Answer when the handler finishes (on its own task), with the
    /// answer frame's text.
    Later(BoxFuture<'static, Option<String>>),
    /// Answer, then close the connection (with this reason).
    Close(Value, String),
}

pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    config: Arc<Config>,
    daemon: Arc<Daemon>,
    slot: UnauthSlot,
) {
    // The hard cap tungstenite enforces (beyond it the connection cannot be
    // kept: the frame is never read). Below it, frames over the configured
    // cap are read, refused with -32600 and the connection stays usable.
    let hard = config.max_frame_bytes.saturating_mul(4).max(1 << 20);
    // tungstenite zero-fills `read_buffer_size` bytes before every socket
    // read (128 KiB by default: a memset larger than the whole submit's
    // work); 8 KiB fits a typical frame, and a larger frame grows the buffer.
    let ws_config = WebSocketConfig::default()
        .max_message_size(Some(hard))
        .max_frame_size(Some(hard))
        .read_buffer_size(READ_BUFFER_BYTES);
    // The upgrade is bounded too (a peer that never completes it holds an
    // unauthenticated slot).
    let upgrade = tokio_tungstenite::accept_async_with_config(stream, Some(ws_config));
    let ws = match tokio::time::timeout(config.auth_timeout, upgrade).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            eprintln!("car-server: {peer}: websocket upgrade failed: {e}");
            return;
        }
        Err(_) => {
            eprintln!("car-server: {peer}: websocket upgrade not completed in time");
            return;
        }
    };
    let (out, outbox) = Outbox::new(&config);
    let conn = match Conn::new(config.clone(), &daemon, peer, out.clone(), slot) {
        Ok(c) => Arc::new(c),
        Err(msg) => {
            eprintln!("car-server: {peer}: {msg}");
            out.send(Message::text(rpc::error_response(&Value::Null, &RpcError::internal(msg.clone())).to_string()));
            out.send(close_frame(CloseCode::Error, &msg));
            drain_and_close(ws, outbox).await;
            return;
        }
    };

    let mut ping = tokio::time::interval(config.ping_interval);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    let gate = Arc::new(Gate::default());
    let mut session = Session {
        conn: conn.clone(),
        ws,
        outbox,
        handlers: FuturesUnordered::new(),
        ping,
        auth_sleep: None,
        last_seen: Instant::now(),
        last_tick: Instant::now(),
        unflushed: false,
        gate: gate.clone(),
    };
    // What everything the task drives is polled with: made once.
    let inner = std::task::Waker::from(gate);
    let close_reason = std::future::poll_fn(|cx| session.poll(cx, &inner)).await;
    let Session { ws, outbox, handlers, .. } = session;

    // Teardown: abandon every handler (their callbacks are cancelled),
    // drop every pending callback waiter, release the session.
    let callbacks = conn.pending.lock().map(|p| p.len()).unwrap_or(0);
    let in_flight = handlers.len();
    drop(handlers);
    conn.supervisors.unsubscribe(&conn.session_id);
    conn.unsubscribe_approver();
    conn.daemon.activity.close(&conn.session_id);
    if let Some(f) = conn.stream_forwarder.lock().ok().and_then(|mut f| f.take()) {
        f.abort();
    }
    conn.unsubscribe_runs();
    if let Ok(mut p) = conn.pending.lock() {
        p.clear();
    }
    // Detached calls of this client end with an error: nobody is left to
    // push. Sent as the stream's reader makes room (a full buffer must not
    // lose it: a stream that just stops would read as succeeded).
    let streams: Vec<_> = conn.streams.lock().map(|mut s| s.drain().collect()).unwrap_or_default();
    for (_, tx) in streams {
        tokio::spawn(async move {
            let message = "the client that ran this tool disconnected".to_string();
            let _ = tx.send((crate::ir::ToolStreamChunk::Error { message }, None)).await;
        });
    }
    if let Ok(mut c) = conn.calls.lock() {
        c.clear();
    }
    if in_flight > 0 || callbacks > 0 {
        eprintln!(
            "car-server: {peer}: connection ended with {in_flight} handler(s) in flight; abandoned them and cancelled {callbacks} tool callback(s)"
        );
    }
    match close_reason {
        // Its queue is full and its socket does not drain: drop it.
        Ended::Overflowed => return,
        Ended::Broken => return,
        Ended::Close(Some((code, reason))) => {
            out.send(close_frame(code, &reason));
        }
        Ended::Close(None) => {
            out.send(Message::Close(None));
        }
    }
    drop(out);
    drop(conn);
    drain_and_close(ws, outbox).await;
}

/// How long teardown waits for the writer to drain before dropping the socket.
const WRITER_DRAIN: Duration = Duration::from_secs(5);

/// Writes what is queued up to and including a close frame, then closes the
/// socket; gives up after [`WRITER_DRAIN`].
async fn drain_and_close(mut ws: WebSocket, mut outbox: OutboxReceiver) {
    let drain = async {
        while let Some(m) = outbox.try_recv() {
            let closing = matches!(m, Message::Close(_));
            if ws.feed(m).await.is_err() {
                return;
            }
            if closing {
                break;
            }
        }
        let _ = ws.flush().await;
        let _ = ws.close(None).await;
    };
    let _ = tokio::time::timeout(WRITER_DRAIN, drain).await;
}

type WebSocket = tokio_tungstenite::WebSocketStream<TcpStream>;

/// The running handlers of one connection, polled by its task.
type Handlers = FuturesUnordered<BoxFuture<'static, ()>>;

/// How a connection's loop ended.
enum Ended {
    /// Send a close frame (with this code and reason) and close.
    Close(Option<(CloseCode, String)>),
    /// The peer does not read its replies: drop the socket.
    Overflowed,
    /// The socket failed: nothing more can be written.
    Broken,
}

/// The waker a connection's task polls everything it drives with (the
/// socket, its handlers, its timers, its outbox). A wake while the task is
/// running (a handler's answer queued, a tool's result routed to the handler
/// waiting for it) only marks it: the task looks again before it sleeps. A
/// wake while it sleeps wakes it. Without this, every such wake would
/// reschedule the running task, and a multi-threaded runtime answers a
/// rescheduled task by waking another worker to look for work.
#[derive(Default)]
struct Gate {
    /// The task is polling (it re-checks everything before it sleeps).
    running: AtomicBool,
    /// Something woke since the task last looked.
    woken: AtomicBool,
    task: futures::task::AtomicWaker,
}

impl std::task::Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if !self.running.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

/// Rounds of one poll of a connection's loop before it yields to the
/// runtime: a resource out of its cooperative budget answers "not ready"
/// and wakes at once, which would otherwise keep the loop going forever.
const ROUNDS_PER_POLL: usize = 32;

/// Frames one round of a connection's loop reads at most.
const FRAMES_PER_ROUND: usize = 64;

/// One connection's task: it reads the frames, runs their handlers and
/// writes every frame queued for the peer, all on one task, so answering a
/// frame wakes no other task.
struct Session {
    conn: Arc<Conn>,
    ws: WebSocket,
    outbox: OutboxReceiver,
    handlers: Handlers,
    ping: tokio::time::Interval,
    /// The unauthenticated connection's deadline and its timer.
    auth_sleep: Option<(Instant, Pin<Box<tokio::time::Sleep>>)>,
    last_seen: Instant,
    last_tick: Instant,
    /// Frames were handed to the socket and not flushed yet.
    unflushed: bool,
    gate: Arc<Gate>,
}

impl Session {
    /// `waker` is the one made from this session's [`Gate`].
    fn poll(&mut self, cx: &mut std::task::Context<'_>, waker: &std::task::Waker) -> Poll<Ended> {
        self.gate.task.register(cx.waker());
        self.gate.running.store(true, Ordering::SeqCst);
        let mut inner = std::task::Context::from_waker(waker);
        for _ in 0..ROUNDS_PER_POLL {
            self.gate.woken.store(false, Ordering::SeqCst);
            if let Some(end) = self.round(&mut inner) {
                self.gate.running.store(false, Ordering::SeqCst);
                return Poll::Ready(end);
            }
            if self.gate.woken.load(Ordering::SeqCst) {
                continue;
            }
            self.gate.running.store(false, Ordering::SeqCst);
            // A wake between the last look and now found the task running:
            // look again rather than sleep on it.
            if !self.gate.woken.swap(false, Ordering::SeqCst) {
                // Nothing to do until the peer answers (a tool call out,
                // say): write the audit records queued meanwhile, so that
                // the proposal's durable point finds less left to write.
                if let Some(audit) = &self.conn.config.event_log {
                    audit.write_behind();
                }
                return Poll::Pending;
            }
            self.gate.running.store(true, Ordering::SeqCst);
        }
        // Out of rounds: yield, and be polled again.
        self.gate.running.store(false, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// One look at everything; `Some` when the connection ends.
    fn round(&mut self, cx: &mut std::task::Context<'_>) -> Option<Ended> {
        let config = &*self.conn.config;
        let peer = self.conn.peer;
        // A frame queued (or a queue overflowing) while the socket is full
        // must wake this task too, not only one queued while it can write.
        self.outbox.register(cx);
        if self.conn.out.is_overflowed() {
            eprintln!(
                "car-server: {peer}: closing a peer that does not read its replies (more than {} frames or {} bytes queued)",
                config.max_queued_frames, config.max_queued_bytes
            );
            return Some(Ended::Overflowed);
        }
        match self.conn.auth_deadline() {
            None => self.auth_sleep = None,
            Some(at) => {
                if self.auth_sleep.as_ref().is_none_or(|(d, _)| *d != at) {
                    self.auth_sleep = Some((at, Box::pin(tokio::time::sleep_until(at.into()))));
                }
                if let Some((_, sleep)) = &mut self.auth_sleep
                    && sleep.as_mut().poll(cx).is_ready()
                {
                    let secs = config.auth_timeout.as_secs_f64();
                    eprintln!("car-server: {peer}: closing a connection not authenticated within {secs}s");
                    return Some(Ended::Close(Some((CloseCode::Policy, format!("not authenticated within {secs}s")))));
                }
            }
        }
        // The frames that arrived, a bounded number a round, so that a
        // flood of them cannot hold off the handlers and the writes.
        let mut read = 0;
        while let Poll::Ready(msg) = self.ws.poll_next_unpin(cx) {
            let msg = match msg {
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    use tokio_tungstenite::tungstenite::Error as WsError;
                    return Some(Ended::Close(match e {
                        WsError::Capacity(c) => Some((CloseCode::Size, format!("frame too large: {c}"))),
                        WsError::Utf8(_) => Some((CloseCode::Invalid, "text frame is not valid UTF-8".into())),
                        WsError::Protocol(p) => Some((CloseCode::Protocol, p.to_string())),
                        _ => None,
                    }));
                }
                None => return Some(Ended::Close(None)),
            };
            self.last_seen = Instant::now();
            read += 1;
            if read == FRAMES_PER_ROUND {
                // More may be buffered already, with no wake to come for
                // them: look again after this one.
                self.gate.woken.store(true, Ordering::SeqCst);
            }
            match msg {
                Message::Text(text) => {
                    if text.len() > config.max_frame_bytes {
                        let e = RpcError::invalid_request(format!(
                            "frame of {} bytes exceeds the {}-byte cap",
                            text.len(),
                            config.max_frame_bytes
                        ));
                        self.conn.send(&rpc::error_response(&Value::Null, &e));
                    } else if let Some(reason) = on_text(&self.conn, text.as_str(), &mut self.handlers) {
                        // The answer already queued goes out before the close.
                        return Some(Ended::Close(Some((CloseCode::Policy, reason))));
                    }
                }
                Message::Binary(b) => {
                    let e = RpcError::invalid_request(format!(
                        "binary frames are not supported ({} bytes); send JSON-RPC as text frames",
                        b.len()
                    ));
                    self.conn.send(&rpc::error_response(&Value::Null, &e));
                }
                Message::Close(_) => return Some(Ended::Close(None)),
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
            if read == FRAMES_PER_ROUND {
                break;
            }
        }
        // The handlers, until none is ready.
        while let Poll::Ready(Some(())) = self.handlers.poll_next_unpin(cx) {}
        if self.ping.poll_tick(cx).is_ready() {
            let now = Instant::now();
            // An overdue tick means this loop itself stalled: do not
            // charge the stall to the peer.
            if now.duration_since(self.last_tick) > config.ping_interval * 2 {
                self.last_seen = now;
            }
            self.last_tick = now;
            if now.duration_since(self.last_seen) >= config.idle_timeout {
                let secs = config.idle_timeout.as_secs_f64();
                eprintln!("car-server: {peer}: closing a peer silent for {secs}s");
                return Some(Ended::Close(Some((CloseCode::Away, format!("peer silent for {secs}s")))));
            }
            self.conn.out.send(Message::Ping(Vec::new().into()));
        }
        // Everything queued goes out under one flush (one write syscall for
        // the frames of one look); a full socket wakes this task when it
        // drains.
        loop {
            match self.ws.poll_ready_unpin(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => return Some(Ended::Broken),
                Poll::Pending => break,
            }
            let Poll::Ready(Some(m)) = self.outbox.poll_recv(cx) else { break };
            if self.ws.start_send_unpin(m).is_err() {
                return Some(Ended::Broken);
            }
            self.unflushed = true;
        }
        if self.unflushed {
            match self.ws.poll_flush_unpin(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(_)) => return Some(Ended::Broken),
                Poll::Pending => {}
            }
        }
        None
    }
}

impl Conn {
    /// A connection's state: its runtime with the policy directory loaded
    /// (an error refuses the connection), unauthenticated unless auth is off.
    pub(crate) fn new(
        config: Arc<Config>,
        daemon: &Arc<Daemon>,
        peer: SocketAddr,
        out: Outbox,
        slot: UnauthSlot,
    ) -> Result<Conn, String> {
        let session_id = format!("sess-{}", uuid::Uuid::new_v4());
        let open = config.token.is_none();
        let identity = open.then_some(Identity { role: Role::Operator, agent_id: None });
        // The runtime's stage is built once, with this identity.
        let admission = admission_identity(&daemon.supervisors, &config, &session_id, identity.as_ref());
        let rt = session_runtime(&config, daemon, &[], Some(admission))?;
        let protected_policies = rt
            .list_policies(None)
            .ok()
            .and_then(|t| serde_json::from_str::<Vec<Value>>(&t).ok())
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
        let conn = Conn {
            rt,
            supervisors: daemon.supervisors.clone(),
            approvals: daemon.approvals.clone(),
            session_id,
            peer,
            out,
            pending: Mutex::new(HashMap::new()),
            halted: AtomicBool::new(false),
            identity: Mutex::new(identity),
            unauth_since: Mutex::new((!open).then(Instant::now)),
            slot: Mutex::new(slot),
            negotiated: AtomicBool::new(false),
            protected_policies,
            stream_forwarder: Mutex::new(None),
            streams: Mutex::new(HashMap::new()),
            runs_forwarder: Mutex::new(None),
            calls: Mutex::new(HashMap::new()),
            daemon: daemon.clone(),
            config,
        };
        daemon.activity.open(
            &conn.session_id,
            super::activity::Session {
                rt: conn.rt.clone(),
                principal: conn.principal(),
                role: conn.role().map_or("unauthenticated", Role::as_str).to_string(),
                since: chrono::Utc::now(),
            },
        );
        Ok(conn)
    }

    /// Hands the connection's identity to its admission stage: the
    /// supervision layer parks this principal's proposals for the daemon's
    /// supervisors, and (unless the daemon allows self-approval) the tier
    /// layer does not count approvals this connection recorded itself.
    /// Called whenever its identity changes (the connection's runtime is
    /// made with the first, [`Conn::new`]).
    fn sync_admission_identity(&self) -> Result<(), String> {
        let AdmissionIdentity { supervisor, discounted_reviewer } =
            admission_identity(&self.supervisors, &self.config, &self.session_id, self.identity().as_ref());
        self.rt.set_admission_identity(supervisor, discounted_reviewer).map_err(|e| e.to_string())
    }
}

/// A connection's identity as its admission stage takes it: the
/// supervision layer parks its principal's proposals for the daemon's
/// supervisors; unless the daemon allows self-approval, tier approvals its
/// reviewer recorded do not count.
fn admission_identity(
    supervisors: &Arc<super::supervision::Supervisors>,
    config: &Config,
    session_id: &str,
    identity: Option<&Identity>,
) -> AdmissionIdentity {
    let discounted = (!config.allow_self_approval).then(|| reviewer_of(session_id, identity));
    let (supervisors, principal) = (supervisors.clone(), principal_of(session_id, identity));
    let supervisor: crate::admission::SupervisorFn = Arc::new(move |proposal, _session| {
        if !supervisors.has_subscribers() {
            return Box::pin(std::future::ready(None));
        }
        let (supervisors, principal, proposal) = (supervisors.clone(), principal.clone(), proposal.clone());
        Box::pin(async move {
            // The identity the server assigned, never the client's policy session.
            match supervisors.admit(&proposal, &principal).await {
                Ok(super::supervision::Admission::Run) => None,
                Ok(super::supervision::Admission::Refuse(reason)) => Some(reason),
                Err(e) => Some(format!("refused: supervision failed: {}", e.message)),
            }
        })
    });
    AdmissionIdentity { supervisor: Some(supervisor), discounted_reviewer: discounted }
}

/// A connection's principal: `agent:<id>` for an agent, else its session id.
fn principal_of(session_id: &str, identity: Option<&Identity>) -> String {
    match identity {
        Some(Identity { agent_id: Some(a), .. }) => format!("agent:{a}"),
        _ => session_id.to_string(),
    }
}

/// The reviewer stamped on a connection's decisions:
/// `car-server:<role>:<principal>`.
fn reviewer_of(session_id: &str, identity: Option<&Identity>) -> String {
    let role = identity.map_or("unauthenticated", |i| i.role.as_str());
    format!("car-server:{role}:{}", principal_of(session_id, identity))
}

fn close_frame(code: CloseCode, reason: &str) -> Message {
    // A close reason is at most 123 bytes.
    let mut r: String = String::new();
    for c in reason.chars() {
        if r.len() + c.len_utf8() > 123 {
            break;
        }
        r.push(c);
    }
    Message::Close(Some(CloseFrame { code, reason: r.into() }))
}

/// Handles one text frame. Returns a close reason when the connection must close.
fn on_text(conn: &Arc<Conn>, text: &str, handlers: &mut Handlers) -> Option<String> {
    // A submit is read from the text (its proposal is not built as a value
    // first); every other frame, and a submit this does not read, is
    // classified. Both pass the same gates in `call`.
    match read_submit(text) {
        Some(sub) => {
            let id = Some(sub.frame.id.clone());
            let step = call(conn, id, "proposal.submit".into(), Params::Submit(Box::new(sub)), handlers.len());
            single(conn, step, handlers)
        }
        // A tool's answer is read without a value of its frame first.
        None => on_frame(conn, rpc::response_frame(text).unwrap_or_else(|| rpc::classify(text)), handlers),
    }
}

/// A `proposal.submit` frame with its proposal read, when the frame is one
/// [`rpc::submit_frame`] reads and its proposal parses. Anything else
/// (a proposal the parser refuses included) is left to the classifying
/// path, so its error is the one that path has always answered.
fn read_submit(text: &str) -> Option<ReadSubmit> {
    let frame = rpc::submit_frame(text)?;
    let proposal = crate::api::parse_proposal(&frame.proposal).ok()?;
    Some(ReadSubmit { frame, proposal })
}

/// A submit read from its frame's text: the frame's parts and its proposal.
pub(crate) struct ReadSubmit {
    pub(crate) frame: rpc::SubmitFrame,
    pub(crate) proposal: crate::ir::ActionProposal,
}

/// Handles one classified frame (a call, a response, a batch).
fn on_frame(conn: &Arc<Conn>, frame: Frame, handlers: &mut Handlers) -> Option<String> {
    // The connection's loop polls its handlers before it reads more frames,
    // so only the running ones count against the bound.
    let in_flight = handlers.len();
    match frame {
        Frame::Batch(items) => {
            // The answers' texts, joined as an array's when all are in.
            let mut now: Vec<String> = Vec::new();
            let mut later: Vec<BoxFuture<'static, Option<String>>> = Vec::new();
            let mut close = None;
            for item in items {
                match step(conn, rpc::classify_value(item), in_flight + later.len()) {
                    Step::Now(v) => now.extend(v.map(|v| v.to_string())),
                    Step::Later(f) => later.push(f),
                    Step::Close(v, reason) => {
                        now.push(v.to_string());
                        close = Some(reason);
                        break;
                    }
                }
            }
            let batch = |now: Vec<String>| format!("[{}]", now.join(","));
            if close.is_some() || later.is_empty() {
                if !now.is_empty() {
                    conn.send_text(batch(now));
                }
            } else {
                let c = conn.clone();
                handlers.push(
                    async move {
                        let done = futures::future::join_all(later).await;
                        now.extend(done.into_iter().flatten());
                        if !now.is_empty() {
                            c.send_text(batch(now));
                        }
                    }
                    .boxed(),
                );
            }
            close
        }
        frame => single(conn, step(conn, frame, in_flight), handlers),
    }
}

/// Carries out the step of a frame that is not a batch; the reason to
/// close the connection, when it must.
fn single(conn: &Arc<Conn>, step: Step, handlers: &mut Handlers) -> Option<String> {
    match step {
        Step::Now(v) => {
            if let Some(v) = v {
                conn.send(&v);
            }
            None
        }
        Step::Later(f) => {
            let c = conn.clone();
            handlers.push(
                async move {
                    if let Some(text) = f.await {
                        c.send_text(text);
                    }
                }
                .boxed(),
            );
            None
        }
        Step::Close(v, reason) => {
            conn.send(&v);
            Some(reason)
        }
    }
}

/// Gates and dispatches one classified frame; `in_flight` handlers run.
fn step(conn: &Arc<Conn>, frame: Frame, in_flight: usize) -> Step {
    let (id, method, params) = match frame {
        Frame::Invalid { id, error } => return Step::Now(Some(rpc::error_response(&id, &error))),
        Frame::Response { id, outcome } => {
            conn.route(&id, outcome);
            return Step::Now(None);
        }
        Frame::Batch(_) => {
            return Step::Now(Some(rpc::error_response(&Value::Null, &RpcError::invalid_request("nested batch"))));
        }
        Frame::Call { id, method, params } => (id, method, params),
    };
    call(conn, id, method, Params::Value(params), in_flight)
}

/// A call's params: the value of its frame's `params`, or a submit read
/// from its frame's text.
pub(crate) enum Params {
    Value(Value),
    Submit(Box<ReadSubmit>),
}

/// Gates and dispatches one call (a request when `id` is given, else a
/// notification); `in_flight` handlers run.
fn call(conn: &Arc<Conn>, id: Option<Value>, method: String, params: Params, in_flight: usize) -> Step {
    // Only a submit's params come unread, and neither check below reads them.
    static NO_PARAMS: Value = Value::Null;
    let value = match &params {
        Params::Value(v) => v,
        Params::Submit(_) => &NO_PARAMS,
    };
    let reply = |r: Result<Value, RpcError>| {
        id.as_ref().map(|id| match r {
            Ok(v) => rpc::response(id, v),
            Err(e) => rpc::error_response(id, &e),
        })
    };

    if method == "session.auth" {
        return match authenticate(conn, value) {
            Ok(v) => Step::Now(reply(Ok(v))),
            Err(AuthFailure { error, close: false }) => Step::Now(reply(Err(error))),
            Err(AuthFailure { error, close: true }) => {
                let v = rpc::error_response(id.as_ref().unwrap_or(&Value::Null), &error);
                Step::Close(v, "too many failed auth attempts".into())
            }
        };
    }
    let Some(identity) = conn.identity() else {
        return match &id {
            // A notification cannot be answered: it is dropped undispatched.
            None => Step::Now(None),
            Some(id) => Step::Close(
                rpc::error_response(
                    id,
                    &RpcError::new(
                        AUTH_REQUIRED,
                        format!("auth required: call session.auth with the daemon's token before `{method}`"),
                    ),
                ),
                "auth required".into(),
            ),
        };
    };
    if method == "server.handshake" {
        let r = handshake::negotiate(value);
        if r.is_ok() {
            conn.negotiated.store(true, Ordering::SeqCst);
        }
        return Step::Now(reply(r));
    }
    if (method == "host.subscribe" || method.starts_with("auth.")) && !conn.negotiated.load(Ordering::SeqCst) {
        return Step::Now(reply(Err(RpcError::new(
            HANDSHAKE_REQUIRED,
            format!(
                "protocol handshake required: call server.handshake with protocol_version {} before `{method}`",
                handshake::PROTOCOL_VERSION
            ),
        ))));
    }
    let Some(spec) = handshake::spec(&method) else {
        // Unknown notifications are ignored; unknown requests are -32601.
        return Step::Now(reply(Err(RpcError::unknown_method(&method))));
    };
    if spec.role == handshake::OPERATOR && !conn.may_decide() {
        return Step::Now(reply(Err(forbidden(&method, identity.role, conn.config.host_token.is_some()))));
    }
    if in_flight >= conn.config.max_in_flight {
        return Step::Now(reply(Err(RpcError::internal(format!(
            "server busy: {in_flight} requests are already in flight on this connection; retry `{method}` after one completes"
        ))
        .with_data(json!({"code": "busy", "in_flight": in_flight})))));
    }
    let c = conn.clone();
    Step::Later(
        async move {
            // Boxed where it is made (see `methods::run`). A panic anywhere
            // in it fails this call only: the connection's task runs every
            // handler, so it must not unwind through it.
            let r = super::methods::guarded(&method, Box::pin(super::methods::run(&c, &method, params))).await;
            id.map(|id| match r {
                Ok(super::methods::Answer::Value(v)) => rpc::response(&id, v).to_string(),
                Ok(super::methods::Answer::Text(result)) => rpc::response_text(&id, &result),
                Err(e) => rpc::error_response(&id, &e).to_string(),
            })
        }
        .boxed(),
    )
}

/// The refusal of a method the caller's role may not call.
fn forbidden(method: &str, role: Role, host_configured: bool) -> RpcError {
    let needed =
        if host_configured { "the host role (session.auth {host_token})" } else { "the operator or host role" };
    RpcError::internal(format!(
        "forbidden: `{method}` decides for the daemon and needs {needed}; this connection is `{}`",
        role.as_str()
    ))
    .with_data(json!({"code": "forbidden", "method": method, "caller_role": role.as_str()}))
}

/// A failed `session.auth`: the error, and whether the connection closes.
struct AuthFailure {
    error: RpcError,
    close: bool,
}

fn string_param<'a>(params: &'a Value, name: &str) -> Result<Option<&'a str>, RpcError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::invalid_params(format!("{name} must be a string"))),
    }
}

/// Which identity these credentials prove, checked against every credential
/// the daemon holds (constant-time comparisons).
fn credential(config: &Config, params: &Value) -> Result<Identity, (RpcError, bool)> {
    let invalid = |e: RpcError| (e, false);
    let mismatch = |what: &str| (RpcError::internal(format!("auth failed: {what} mismatch")), true);
    let host_token = string_param(params, "host_token").map_err(invalid)?;
    let token = string_param(params, "token").map_err(invalid)?;
    let agent_id = string_param(params, "agent_id").map_err(invalid)?;
    if let Some(h) = host_token {
        if token.is_some() || agent_id.is_some() {
            return Err(invalid(RpcError::invalid_params("host_token is given alone (no token or agent_id)")));
        }
        return match &config.host_token {
            Some(expected) if tokens_equal(expected, h) => Ok(Identity { role: Role::Host, agent_id: None }),
            Some(_) => Err(mismatch("host token")),
            None => Err(mismatch("host token (no host token is configured)")),
        };
    }
    let token = token.ok_or_else(|| invalid(RpcError::invalid_params("token is required")))?;
    if let Some(agent) = agent_id {
        if agent.is_empty() {
            return Err(invalid(RpcError::invalid_params("agent_id must be a non-empty string")));
        }
        let mut ok = false;
        for (id, t) in &config.agent_tokens {
            ok |= id == agent && tokens_equal(t, token);
        }
        return if ok {
            Ok(Identity { role: Role::Agent, agent_id: Some(agent.to_string()) })
        } else {
            Err(mismatch("agent token"))
        };
    }
    match &config.token {
        Some(expected) if tokens_equal(expected, token) => Ok(Identity { role: Role::Operator, agent_id: None }),
        _ => Err(mismatch("token")),
    }
}

/// `session.auth`. Any failure leaves the connection unauthenticated (a
/// failed re-auth de-authenticates it); a wrong credential counts against the
/// peer's address, and an address over its limit is refused without its
/// credential being looked at and the connection closes.
fn authenticate(conn: &Conn, params: &Value) -> Result<Value, AuthFailure> {
    if conn.config.token.is_none() {
        return Ok(json!({"ok": true, "auth_enabled": false}));
    }
    let before = conn.identity();
    let fail = |error: RpcError, close: bool| {
        conn.set_identity(None);
        if before.is_some() {
            conn.supervisors.unsubscribe(&conn.session_id);
            conn.unsubscribe_approver();
        }
        AuthFailure { error, close }
    };
    let ip = conn.peer.ip();
    if let Some(wait) = conn.daemon.throttle.locked(ip, Instant::now()) {
        let secs = wait.as_secs().max(1);
        return Err(fail(
            RpcError::internal(format!("auth failed: too many failed attempts from {ip}; retry in {secs}s"))
                .with_data(json!({"code": "auth_throttled", "retry_after_secs": secs})),
            true,
        ));
    }
    let identity = match credential(&conn.config, params) {
        Ok(i) => i,
        Err((error, counts)) => {
            if counts {
                conn.daemon.throttle.fail(ip, Instant::now());
            }
            return Err(fail(error, false));
        }
    };
    if before.as_ref().is_some_and(|b| *b != identity) {
        // A subscription made under another identity does not carry over.
        conn.supervisors.unsubscribe(&conn.session_id);
        conn.unsubscribe_approver();
    }
    let mut reply = json!({"ok": true, "auth_enabled": true});
    match identity.role {
        Role::Host => reply["role"] = json!("host"),
        Role::Agent => {
            reply["role"] = json!("agent");
            reply["agent_id"] = json!(identity.agent_id);
        }
        Role::Operator => {}
    }
    conn.set_identity(Some(identity));
    Ok(reply)
}

/// Drives text frames through one authenticated (operator, negotiated)
/// connection's gates and dispatcher, without a socket: what the daemon does
/// with frames after `session.auth`. Every `tools.execute` callback is
/// answered with a tool error at once; handlers still running after
/// `budget` are abandoned. Returns every frame the connection queued.
pub(crate) async fn drive_frames(config: Config, frames: &[&str], budget: Duration) -> Vec<Value> {
    drive_frames_with(config, frames, budget, on_text).await
}

/// [`drive_frames`] with `read` in place of the connection's frame reader.
async fn drive_frames_with(
    config: Config,
    frames: &[&str],
    budget: Duration,
    read: fn(&Arc<Conn>, &str, &mut Handlers) -> Option<String>,
) -> Vec<Value> {
    let (conn, mut rx) = match operator_conn(config) {
        Ok(c) => c,
        Err(e) => return vec![json!({"refused": e})],
    };
    let mut handlers: Handlers = FuturesUnordered::new();
    let mut sent: Vec<Value> = Vec::new();
    let collect = |m: Message, conn: &Conn, sent: &mut Vec<Value>| {
        let Message::Text(t) = m else { return };
        let Ok(v) = serde_json::from_str::<Value>(t.as_str()) else {
            sent.push(json!({"unparseable": t.as_str()}));
            return;
        };
        if v.get("method").and_then(Value::as_str) == Some("tools.execute")
            && let Some(id) = v.get("id")
        {
            conn.route(id, Err(json!({"code": -32000, "message": "fuzz: no tool"})));
        }
        sent.push(v);
    };
    for f in frames {
        if read(&conn, f, &mut handlers).is_some() {
            break;
        }
        while let Some(m) = rx.try_recv() {
            collect(m, &conn, &mut sent);
        }
    }
    let deadline = tokio::time::sleep(budget);
    tokio::pin!(deadline);
    while !handlers.is_empty() {
        tokio::select! {
            Some(m) = std::future::poll_fn(|cx| rx.poll_recv(cx)) => collect(m, &conn, &mut sent),
            Some(()) = handlers.next() => {}
            () = &mut deadline => break,
        }
    }
    drop(handlers);
    while let Some(m) = rx.try_recv() {
        collect(m, &conn, &mut sent);
    }
    conn.supervisors.unsubscribe(&conn.session_id);
    conn.unsubscribe_approver();
    conn.daemon.activity.close(&conn.session_id);
    sent
}

/// A connection with no socket: authenticated as the operator, its
/// handshake done, its frames in the returned receiver (the fuzz target and
/// tests).
pub(crate) fn operator_conn(config: Config) -> Result<(Arc<Conn>, OutboxReceiver), String> {
    let config = Arc::new(config);
    let daemon = Arc::new(Daemon::new(&config));
    let (out, rx) = Outbox::new(&config);
    let conn = Arc::new(Conn::new(config.clone(), &daemon, ([127, 0, 0, 1], 0).into(), out, UnauthSlot::none())?);
    conn.set_identity(Some(Identity { role: Role::Operator, agent_id: None }));
    conn.negotiated.store(true, Ordering::SeqCst);
    Ok((conn, rx))
}

/// Waits for a callback's outcome with a bound; `None` on timeout, `Some(Err)`
/// when the connection dropped the waiter.
pub(crate) async fn wait_outcome(
    rx: oneshot::Receiver<CallbackOutcome>,
    bound: Duration,
) -> Option<Result<CallbackOutcome, oneshot::error::RecvError>> {
    tokio::time::timeout(bound, rx).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A submit's answer is written as text; in a batch it is one element
    /// of the array, the same answer it gets alone.
    #[tokio::test]
    async fn a_submit_in_a_batch_answers_in_the_array_as_it_does_alone() {
        let submit = |id: &str, p: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":"{id}","method":"proposal.submit","params":{{"proposal":{{"id":"{p}","actions":[{{"id":"w","type":"state_write","parameters":{{"key":"k","value":1.5}}}}]}}}}}}"#
            )
        };
        let alone = submit("s1", "p1");
        let batch = format!(
            r#"[{},{{"jsonrpc":"2.0","id":"g","method":"state.get","params":{{"key":"k"}}}}]"#,
            submit("s2", "p2")
        );
        let out = super::super::fuzz_frames_after_auth_async(&[alone.as_str(), batch.as_str()]).await;
        let single = out.iter().find(|v| v["id"] == "s1").expect("the single submit's answer");
        let array = out.iter().find_map(Value::as_array).expect("the batch's answer");
        assert_eq!(array.len(), 2, "{array:?}");
        let in_batch = array.iter().find(|v| v["id"] == "s2").expect("the submit's answer in the batch");
        for r in [&single["result"], &in_batch["result"]] {
            assert_eq!(r["results"][0]["status"], "succeeded", "{r}");
            assert_eq!(r["results"][0]["state_changes"]["k"]["value"], 1.5, "{r}");
        }
        assert_eq!(in_batch["result"]["proposal_id"], "p2");
        assert!(array.iter().any(|v| v["id"] == "g" && v["result"] == 1.5), "{array:?}");
    }

    /// The answers of a connection to `frames`, read by `read`, without
    /// what differs from run to run (times, durations, a proposal id the
    /// runtime made up, the session's id).
    async fn answers(frames: &[&str], read: fn(&Arc<Conn>, &str, &mut Handlers) -> Option<String>) -> Vec<Value> {
        fn steady(v: &mut Value) {
            match v {
                Value::Object(m) => {
                    for k in ["timestamp", "duration_ms", "total_duration_ms", "proposal_id", "session_id"] {
                        m.remove(k);
                    }
                    m.values_mut().for_each(steady);
                }
                Value::Array(a) => a.iter_mut().for_each(steady),
                _ => {}
            }
        }
        let mut out = drive_frames_with(super::super::fuzz_config(), frames, Duration::from_secs(1), read).await;
        out.iter_mut().for_each(steady);
        out
    }

    /// A submit read from its frame's text answers what the classified
    /// frame answers, for every shape of frame the reader takes or leaves:
    /// a good proposal, one the parser refuses (a repeated key, a bad
    /// type, an escape serde refuses, a number out of range, deep
    /// nesting), params and frames with a member repeated, unknown or
    /// escaped, a proposal given as text, a scope, no id, a null id.
    #[tokio::test]
    async fn a_submit_read_from_its_text_answers_as_the_classified_frame() {
        let write =
            r#"{"id":"p","actions":[{"id":"w","type":"state_write","parameters":{"key":"k","value":"a\"\n\u00e9"}}]}"#;
        let nested = |depth: usize| {
            format!(
                r#"{{"actions":[{{"id":"d","type":"state_write","parameters":{{"key":"k","value":{}1{}}}}}]}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            )
        };
        let proposals = [
            write.to_string(),
            r#"{"actions":[{"id":"t","type":"tool_call","tool":"echo"}]}"#.to_string(),
            r#"{"actions":[{"id":"w","type":"state_write","parameters":{"key":"k","key":"j"}}]}"#.to_string(),
            r#"{"actions":[{"id":"w","type":"state_write","id":"v","parameters":{"key":"k"}}]}"#.to_string(),
            r#"{"actions":[{"id":"w","type":"teleport"}]}"#.to_string(),
            r#"{"actions":[{"id":"w","type":"state_write","parameters":{"key":"\ud800","value":1}}]}"#.to_string(),
            r#"{"actions":[{"id":"w","type":"state_write","parameters":{"key":"k","value":1e400}}]}"#.to_string(),
            r#"{"actions":[{"id":"w","type":"state_write","parameters":{"key":"k","value":18446744073709551616}}]}"#
                .to_string(),
            nested(100),
            nested(122),
            nested(123),
            nested(124),
            nested(125),
            nested(140),
            r#"{"actions":[]}"#.to_string(),
        ];
        let mut frames: Vec<String> = Vec::new();
        for (i, p) in proposals.iter().enumerate() {
            frames.push(format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"proposal.submit","params":{{"proposal":{p}}}}}"#
            ));
            frames.push(format!(
                r#"{{"id":"s{i}","params":{{"session_id":"x","proposal":{p}}},"method":"proposal.submit","jsonrpc":"2.0"}}"#
            ));
        }
        let shapes = [
            r#"{"jsonrpc":"2.0","id":"a","method":"proposal.submit","params":{"proposal":P,"session_id":null}}"#,
            r#"{"jsonrpc":"2.0","id":"b","method":"proposal.submit","params":{"proposal":P,"session_id":7}}"#,
            r#"{"jsonrpc":"2.0","id":"c","method":"proposal.submit","params":{"proposal":P,"proposal":P}}"#,
            r#"{"jsonrpc":"2.0","id":"d","method":"proposal.submit","params":{"proposal":P},"params":{"proposal":P}}"#,
            r#"{"jsonrpc":"2.0","id":"e","method":"proposal.submit","params":{"proposal":P,"extra":1}}"#,
            r#"{"jsonrpc":"2.0","id":"f","method":"proposal.submit","params":{"proposal":P},"extra":1}"#,
            r#"{"jsonrpc":"2.0","id":"g","method":"proposal\u002esubmit","params":{"proposal":P}}"#,
            r#"{"jsonrpc":"2.0","id":"h","method":"proposal.submit","params":{"proposal":P,"scope":{"tenant_id":"t"}}}"#,
            r#"{"jsonrpc":"2.0","id":"i","method":"proposal.submit","params":{"proposal":P,"scope":7}}"#,
            r#"{"jsonrpc":"2.0","id":"j","method":"proposal.submit","params":{"proposal":Q}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"proposal.submit","params":{"proposal":P}}"#,
            r#"{"jsonrpc":"2.0","method":"proposal.submit","params":{"proposal":P}}"#,
            r#"{"jsonrpc":"1.0","id":"k","method":"proposal.submit","params":{"proposal":P}}"#,
            r#"{"jsonrpc":"2.0","id":["l"],"method":"proposal.submit","params":{"proposal":P}}"#,
            r#"{"jsonrpc":"2.0","id":"m","method":"proposal.submit","params":[P]}"#,
            r#"{"jsonrpc":"2.0","id":"m2","method":"proposal.submit","params":[P,"x"]}"#,
            r#"{"jsonrpc":"2.0","id":"t","method":"proposal.submit","params":{"propos\u0061l":P}}"#,
            r#"{"jsonrpc":"2.0","id":"u","method":"proposal.submit","params":{"proposal":P,"propos\u0061l":P}}"#,
            r#"{"jsonrpc":"2.0","id":-1.5e3,"method":"proposal.submit","params":{"proposal":P}}"#,
            r#"["2.0","r","proposal.submit",{"proposal":P}]"#,
            r#"{"jsonrpc":"2.0","id":"n","method":"proposal.submit","params":{"proposal":P}} x"#,
            r#" {"jsonrpc":"2.0","id":"o","method":"proposal.submit","params":{"proposal":P}} "#,
            r#"{"jsonrpc":"2.0","id":"q","method":"proposal.submit","params":{"proposal":P,"session_id":"a\u0000b"}}"#,
        ];
        let quoted = serde_json::to_string(write).unwrap();
        for shape in shapes {
            frames.push(shape.replace('Q', &quoted).replace('P', write));
        }
        let frames: Vec<&str> = frames.iter().map(String::as_str).collect();
        for f in &frames {
            let from_text = answers(&[f], on_text).await;
            let classified = answers(&[f], |c, t, h| on_frame(c, rpc::classify(t), h)).await;
            assert_eq!(from_text, classified, "frame: {f}");
        }
        // A session in strict mode refuses a field the IR does not know,
        // read either way.
        let init =
            r#"{"jsonrpc":"2.0","id":"init","method":"session.init","params":{"client_id":"c","strict_fields":true}}"#;
        for p in [write, r#"{"actions":[{"id":"w","type":"state_write","bogus":1,"parameters":{"key":"k"}}]}"#] {
            let f = format!(r#"{{"jsonrpc":"2.0","id":"z","method":"proposal.submit","params":{{"proposal":{p}}}}}"#);
            let from_text = answers(&[init, &f], on_text).await;
            let classified = answers(&[init, &f], |c, t, h| on_frame(c, rpc::classify(t), h)).await;
            assert_eq!(from_text, classified, "strict: {f}");
            assert_eq!(from_text[1].get("error").is_some(), p.contains("bogus"), "{from_text:?}");
        }
        // The reader takes a good submit, with a session id or without.
        assert!(read_submit(frames[0]).is_some() && read_submit(frames[1]).is_some());
        let first = drive_frames(super::super::fuzz_config(), &[frames[0]], Duration::from_secs(1)).await;
        assert_eq!(first[0]["result"]["proposal_id"], "p");
        assert_eq!(first[0]["result"]["results"][0]["status"], "succeeded");
        assert!(read_submit(frames[4]).is_none(), "a repeated key in the proposal is classified");
    }

    #[tokio::test]
    async fn frames_after_auth_are_answered_and_callbacks_routed() {
        let frames = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.register","params":[{"name":"echo"}]}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"proposal.submit","params":{"proposal":{"id":"p","actions":[{"id":"a","type":"tool_call","tool":"echo"}]}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"state.set","params":{"key":"k","key":"k"}}"#,
            r#"[{"jsonrpc":"2.0","id":4,"method":"permission.get_tier"},{"jsonrpc":"2.0","method":"events.count"}]"#,
            "nonsense",
        ];
        let out = super::super::fuzz_frames_after_auth_async(&frames).await;
        let by_id = |id: i64| out.iter().find(|v| v.get("id") == Some(&json!(id))).cloned();
        assert_eq!(by_id(1).unwrap()["result"], 1);
        let r = by_id(2).unwrap();
        assert_eq!(r["result"]["results"][0]["status"], "failed", "{r}");
        assert!(out.iter().any(|v| v["method"] == "tools.execute"));
        assert_eq!(by_id(3).unwrap()["error"]["code"], rpc::INVALID_REQUEST);
        assert!(out.iter().any(|v| v.is_array() && v[0]["result"]["granted_tier"] == "sandbox_edit"));
        assert!(out.iter().any(|v| v["error"]["code"] == rpc::PARSE_ERROR));
    }

    #[test]
    fn a_full_outbox_overflows_once() {
        let config = Config { max_queued_frames: 2, max_queued_bytes: 1000, ..Config::default() };
        let (out, mut rx) = Outbox::new(&config);
        assert!(out.send(Message::text("a")));
        assert!(out.send(Message::text("b")));
        assert!(!out.send(Message::text("c")), "a third frame does not fit");
        assert!(out.is_overflowed());
        assert!(!out.send(Message::text("d")), "overflowed stays overflowed");
        rx.try_recv().unwrap();
        assert_eq!(out.shared.bytes.load(Ordering::SeqCst), 1);
        // The byte bound: one frame may exceed it alone, not on top of others.
        let (out, _rx) = Outbox::new(&config);
        assert!(out.send(Message::text("x".repeat(2000))));
        assert!(!out.send(Message::text("y")));
    }

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_gate_wakes_a_sleeping_task_and_only_marks_a_running_one() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = std::task::Waker::from(count.clone());
        let gate = Arc::new(Gate::default());
        gate.task.register(&task);
        let inner = std::task::Waker::from(gate.clone());
        gate.running.store(true, Ordering::SeqCst);
        inner.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "a running task is not rescheduled");
        assert!(gate.woken.load(Ordering::SeqCst), "but it sees the wake before it sleeps");
        gate.running.store(false, Ordering::SeqCst);
        inner.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "a sleeping task is woken");
    }

    #[test]
    fn the_outbox_wakes_its_reader_and_ends_with_its_senders() {
        let (out, mut rx) = Outbox::new(&Config::default());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(count.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(rx.poll_recv(&mut cx).is_pending());
        let other = out.clone();
        assert!(other.send(Message::text("a")));
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "a queued frame wakes the reader");
        assert!(matches!(rx.poll_recv(&mut cx), Poll::Ready(Some(Message::Text(t))) if t.as_str() == "a"));
        assert!(rx.poll_recv(&mut cx).is_pending());
        drop(out);
        assert!(rx.poll_recv(&mut cx).is_pending(), "a sender is left");
        drop(other);
        assert_eq!(count.0.load(Ordering::SeqCst), 2, "the last sender gone wakes the reader");
        assert!(matches!(rx.poll_recv(&mut cx), Poll::Ready(None)));
        // A queue whose reader is gone takes nothing.
        let (out, rx) = Outbox::new(&Config::default());
        drop(rx);
        assert!(!out.send(Message::text("b")));
    }

    /// A connection's runtime is configured in one step: its admission
    /// stage is built once, with the default tier, the daemon's ledger and
    /// approvals store, the operator's document, the connection's
    /// supervisor and (unless self-approval is allowed) its reviewer
    /// discounted; a change of identity rebuilds it once more.
    #[test]
    fn a_connection_builds_its_admission_stage_once_with_every_part() {
        let dir = std::env::temp_dir().join(format!("car-conn-stage-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let doc = dir.join("admission.toml");
        std::fs::write(&doc, "[[tools]]\nname = \"lookup\"\nrisk = \"read\"\n").unwrap();
        for allow_self_approval in [false, true] {
            let config = Arc::new(Config {
                token: Some("t".into()),
                admission_path: Some(doc.clone()),
                ledger_path: Some(dir.join("ledger.jsonl")),
                approvals_dir: Some(dir.join("approvals")),
                allow_self_approval,
                ..Config::default()
            });
            let daemon = Arc::new(Daemon::new(&config));
            let (out, _rx) = Outbox::new(&config);
            let before = crate::admission::builds_on_this_thread();
            let conn = Conn::new(config.clone(), &daemon, ([127, 0, 0, 1], 0).into(), out, UnauthSlot::none()).unwrap();
            assert_eq!(crate::admission::builds_on_this_thread() - before, 1);
            let stage = conn.rt.runtime().admission_stage();
            assert_eq!(stage.tier(), Some(crate::policy::PermissionTier::default()));
            assert!(stage.ledger().is_some(), "the daemon's ledger");
            assert!(stage.approvals().is_some(), "the daemon's approvals store");
            assert!(stage.supervisor().is_some());
            assert!(stage.config().tools.iter().any(|t| t["name"] == "lookup"), "the operator's document");
            let reviewer = format!("car-server:unauthenticated:{}", conn.session_id);
            assert_eq!(stage.discounted_reviewer(), (!allow_self_approval).then_some(reviewer.as_str()));

            conn.set_identity(Some(Identity { role: Role::Agent, agent_id: Some("a1".into()) }));
            assert_eq!(crate::admission::builds_on_this_thread() - before, 2);
            let stage = conn.rt.runtime().admission_stage();
            assert_eq!(stage.discounted_reviewer(), (!allow_self_approval).then_some("car-server:agent:agent:a1"));
            assert!(stage.ledger().is_some() && stage.approvals().is_some() && stage.supervisor().is_some());
            assert_eq!(stage.tier(), Some(crate::policy::PermissionTier::default()));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A daemon connection (no auth) over a loopback socket, and its task.
    async fn one_connection(
        config: Config,
    ) -> (tokio_tungstenite::WebSocketStream<TcpStream>, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = Arc::new(config);
        let daemon = Arc::new(Daemon::new(&config));
        let server = tokio::spawn(async move {
            let (stream, peer) = listener.accept().await.unwrap();
            serve_connection(stream, peer, config, daemon, UnauthSlot::none()).await;
        });
        let socket = TcpStream::connect(addr).await.unwrap();
        let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), socket).await.unwrap();
        (ws, server)
    }

    /// Frames that arrive together, more than one round of the loop reads
    /// (`FRAMES_PER_ROUND`), are all read: the rest of a burst, already in
    /// the socket's buffer or the reader's, has no wake of its own to come.
    /// Notifications first (they answer nothing, so no answer wakes the
    /// loop either), then one call.
    #[tokio::test]
    async fn a_burst_of_frames_is_read_whole() {
        let (mut ws, server) = one_connection(Config { token: None, ..Config::default() }).await;
        let n = FRAMES_PER_ROUND * 5 + 3;
        for _ in 0..n {
            let note = json!({"jsonrpc": "2.0", "method": "no.such.notification"});
            ws.feed(Message::text(note.to_string())).await.unwrap();
        }
        let last = json!({"jsonrpc": "2.0", "id": n, "method": "state.exists", "params": {"key": "k"}});
        ws.feed(Message::text(last.to_string())).await.unwrap();
        ws.flush().await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(10), ws.next()).await;
        let Ok(Some(Ok(Message::Text(t)))) = next else { panic!("the call after the burst is not answered: {next:?}") };
        let v: Value = serde_json::from_str(t.as_str()).unwrap();
        assert_eq!((v["id"].clone(), v["result"].clone()), (json!(n), json!(false)), "{v}");
        ws.close(None).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), server).await.unwrap().unwrap();
    }

    /// A connection's one task answers a frame in the poll that read it:
    /// the answer of a call that does not wait is written before the task
    /// sleeps, and a tool callback's result reaches the handler waiting for
    /// it without a wake of its own (see `Gate`).
    #[tokio::test]
    async fn a_connection_answers_on_its_own_task() {
        let (mut ws, server) = one_connection(Config { token: None, ..Config::default() }).await;
        let call = |id: i64, method: &str, params: Value| {
            Message::text(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string())
        };
        ws.send(call(1, "tools.register", json!([{"name": "echo"}]))).await.unwrap();
        ws.send(call(
            2,
            "proposal.submit",
            json!({"proposal": {"id": "p", "actions": [{"id": "a", "type": "tool_call", "tool": "echo", "parameters": {"x": 1}}]}}),
        ))
        .await
        .unwrap();
        let mut answers = Vec::new();
        while answers.len() < 2 {
            let Message::Text(t) = ws.next().await.unwrap().unwrap() else { continue };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["method"] == "tools.execute" {
                let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {"echoed": v["params"]["parameters"]}});
                ws.send(Message::text(reply.to_string())).await.unwrap();
                continue;
            }
            answers.push(v);
        }
        assert_eq!(answers[0]["id"], 1);
        assert_eq!(answers[1]["id"], 2);
        assert_eq!(answers[1]["result"]["results"][0]["status"], "succeeded", "{}", answers[1]);
        assert_eq!(answers[1]["result"]["results"][0]["output"]["echoed"]["x"], 1);
        ws.close(None).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), server).await.unwrap().unwrap();
    }

    #[test]
    fn close_reasons_fit_a_frame() {
        let Message::Close(Some(f)) = close_frame(CloseCode::Error, &"é".repeat(100)) else { panic!() };
        assert!(f.reason.len() <= 123);
    }
}
