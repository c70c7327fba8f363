//! One WebSocket connection: the read loop, the auth and handshake gates,
//! concurrent dispatch, response routing and liveness.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{FutureExt, SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::Config;
use super::auth::tokens_equal;
use super::handshake;
use super::rpc::{self, AUTH_REQUIRED, Frame, HANDSHAKE_REQUIRED, RpcError};
use super::supervision::Supervisors;
use crate::api::runtime::CarRuntime;
use crate::policy::JsonlLedger;

/// What the outcome of a server-initiated request carries back.
pub(crate) type CallbackOutcome = Result<Value, Value>;

/// The state of one connection, shared by its handlers and its executor.
pub(crate) struct Conn {
    pub(crate) config: Arc<Config>,
    pub(crate) rt: CarRuntime,
    /// The daemon-wide supervision registry.
    pub(crate) supervisors: Arc<Supervisors>,
    /// The daemon's approvals ledger (`Config::ledger_path`), shared by
    /// every connection for its read cache.
    pub(crate) ledger: Option<Arc<JsonlLedger>>,
    /// This connection's session id, stamped on `tools.execute`.
    pub(crate) session_id: String,
    out: mpsc::UnboundedSender<Message>,
    pending: Mutex<HashMap<String, oneshot::Sender<CallbackOutcome>>>,
    /// Set by a terminal tool failure; cleared by `session.clear_halt`.
    pub(crate) halted: AtomicBool,
    authenticated: AtomicBool,
    negotiated: AtomicBool,
    /// The `tools.stream.subscribe` forwarder, aborted at teardown.
    stream_forwarder: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Conn {
    /// Queues a frame for the writer; false once the connection is gone.
    /// The outbound queue (for daemon-wide notifications).
    pub(crate) fn outbox(&self) -> mpsc::UnboundedSender<Message> {
        self.out.clone()
    }

    pub(crate) fn send(&self, v: &Value) -> bool {
        self.out.send(Message::text(v.to_string())).is_ok()
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
                        if out.send(Message::text(note)).is_err() {
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
            None => eprintln!("car-server: ignoring a response to unknown or abandoned request id {key}"),
        }
    }
}

/// The WebSocket read buffer (see `serve_connection`).
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// What the reader does with one call.
enum Step {
    /// Answer now (or nothing for a notification).
    Now(Option<Value>),
    /// Answer when the handler finishes (on its own task).
    Later(BoxFuture<'static, Option<Value>>),
    /// Answer, then close the connection.
    Close(Value),
}

pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    config: Arc<Config>,
    supervisors: Arc<Supervisors>,
    ledger: Option<Arc<JsonlLedger>>,
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
    let ws = match tokio_tungstenite::accept_async_with_config(stream, Some(ws_config)).await {
        Ok(ws) => ws,
        Err(e) => {
            eprintln!("car-server: {peer}: websocket upgrade failed: {e}");
            return;
        }
    };
    let (mut sink, mut source) = ws.split();
    let (out, mut outbox) = mpsc::unbounded_channel::<Message>();
    let writer = tokio::spawn(async move {
        // Everything already queued goes out under one flush (one write
        // syscall under load instead of one per frame); a lone frame is
        // flushed at once, so nothing waits for company.
        'write: while let Some(m) = outbox.recv().await {
            let mut next = Some(m);
            while let Some(m) = next.take() {
                let closing = matches!(m, Message::Close(_));
                if sink.feed(m).await.is_err() {
                    break 'write;
                }
                if closing {
                    let _ = sink.flush().await;
                    break 'write;
                }
                next = outbox.try_recv().ok();
            }
            if sink.flush().await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });

    let rt = CarRuntime::new();
    // The session's tier layer: on from the start (`sandbox_edit`), reading
    // the daemon's one approvals ledger (websocket-methods.md).
    let _ = rt.permission_set_tier(crate::policy::PermissionTier::default().as_str());
    rt.set_tier_ledger(ledger.clone());
    if let Some(dir) = &config.policy_dir
        && dir.is_dir()
        && let Err(e) = rt.load_policies(&dir.to_string_lossy())
    {
        let msg = format!("connection refused: policy directory `{}`: {e}", dir.display());
        eprintln!("car-server: {peer}: {msg}");
        let _ =
            out.send(Message::text(rpc::error_response(&Value::Null, &RpcError::internal(msg.clone())).to_string()));
        let _ = out.send(close_frame(CloseCode::Error, &msg));
        drop(out);
        let _ = writer.await;
        return;
    }

    let conn = Arc::new(Conn {
        config: config.clone(),
        rt,
        supervisors,
        ledger,
        session_id: format!("sess-{}", uuid::Uuid::new_v4()),
        out: out.clone(),
        pending: Mutex::new(HashMap::new()),
        halted: AtomicBool::new(false),
        authenticated: AtomicBool::new(config.token.is_none()),
        negotiated: AtomicBool::new(false),
        stream_forwarder: Mutex::new(None),
    });

    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut ping = tokio::time::interval(config.ping_interval);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    let mut last_seen = Instant::now();
    let mut last_tick = Instant::now();
    let mut close_reason: Option<(CloseCode, String)> = None;

    loop {
        tokio::select! {
            biased;
            msg = source.next() => {
                let msg = match msg {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        use tokio_tungstenite::tungstenite::Error as WsError;
                        close_reason = match e {
                            WsError::Capacity(c) => Some((CloseCode::Size, format!("frame too large: {c}"))),
                            WsError::Utf8(_) => Some((CloseCode::Invalid, "text frame is not valid UTF-8".into())),
                            WsError::Protocol(p) => Some((CloseCode::Protocol, p.to_string())),
                            _ => None,
                        };
                        break;
                    }
                    None => break,
                };
                last_seen = Instant::now();
                match msg {
                    Message::Text(text) => {
                        if text.len() > config.max_frame_bytes {
                            let e = RpcError::invalid_request(format!(
                                "frame of {} bytes exceeds the {}-byte cap",
                                text.len(),
                                config.max_frame_bytes
                            ));
                            conn.send(&rpc::error_response(&Value::Null, &e));
                            continue;
                        }
                        if let Some(reason) = on_text(&conn, text.as_str(), &mut tasks) {
                            close_reason = Some((CloseCode::Policy, reason));
                            break;
                        }
                    }
                    Message::Binary(b) => {
                        let e = RpcError::invalid_request(format!(
                            "binary frames are not supported ({} bytes); send JSON-RPC as text frames",
                            b.len()
                        ));
                        conn.send(&rpc::error_response(&Value::Null, &e));
                    }
                    Message::Close(_) => break,
                    Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
                }
            }
            _ = ping.tick() => {
                let now = Instant::now();
                // An overdue tick means this loop itself stalled: do not
                // charge the stall to the peer.
                if now.duration_since(last_tick) > config.ping_interval * 2 {
                    last_seen = now;
                }
                last_tick = now;
                if now.duration_since(last_seen) >= config.idle_timeout {
                    let secs = config.idle_timeout.as_secs_f64();
                    eprintln!("car-server: {peer}: closing a peer silent for {secs}s");
                    close_reason = Some((CloseCode::Away, format!("peer silent for {secs}s")));
                    break;
                }
                if out.send(Message::Ping(Vec::new().into())).is_err() {
                    break;
                }
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }

    // Teardown: abandon every handler (their callbacks are cancelled),
    // drop every pending callback waiter, release the session.
    let callbacks = conn.pending.lock().map(|p| p.len()).unwrap_or(0);
    let handlers = tasks.len();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    conn.supervisors.unsubscribe(&conn.session_id);
    if let Some(f) = conn.stream_forwarder.lock().ok().and_then(|mut f| f.take()) {
        f.abort();
    }
    if let Ok(mut p) = conn.pending.lock() {
        p.clear();
    }
    if handlers > 0 || callbacks > 0 {
        eprintln!(
            "car-server: {peer}: connection ended with {handlers} handler(s) in flight; abandoned them and cancelled {callbacks} tool callback(s)"
        );
    }
    if let Some((code, reason)) = close_reason {
        let _ = out.send(close_frame(code, &reason));
    } else {
        let _ = out.send(Message::Close(None));
    }
    drop(out);
    drop(conn);
    let _ = writer.await;
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
fn on_text(conn: &Arc<Conn>, text: &str, tasks: &mut JoinSet<()>) -> Option<String> {
    match rpc::classify(text) {
        Frame::Batch(items) => {
            let mut now: Vec<Value> = Vec::new();
            let mut later: Vec<BoxFuture<'static, Option<Value>>> = Vec::new();
            let mut close = None;
            for item in items {
                match step(conn, rpc::classify_value(item)) {
                    Step::Now(v) => now.extend(v),
                    Step::Later(f) => later.push(f),
                    Step::Close(v) => {
                        now.push(v);
                        close = Some("auth required".to_string());
                        break;
                    }
                }
            }
            if close.is_some() || later.is_empty() {
                if !now.is_empty() {
                    conn.send(&Value::Array(now));
                }
            } else {
                let c = conn.clone();
                tasks.spawn(async move {
                    let done = futures::future::join_all(later).await;
                    now.extend(done.into_iter().flatten());
                    if !now.is_empty() {
                        c.send(&Value::Array(now));
                    }
                });
            }
            close
        }
        frame => match step(conn, frame) {
            Step::Now(v) => {
                if let Some(v) = v {
                    conn.send(&v);
                }
                None
            }
            Step::Later(f) => {
                let c = conn.clone();
                tasks.spawn(async move {
                    if let Some(v) = f.await {
                        c.send(&v);
                    }
                });
                None
            }
            Step::Close(v) => {
                conn.send(&v);
                Some("auth required".to_string())
            }
        },
    }
}

/// Gates and dispatches one classified frame.
fn step(conn: &Arc<Conn>, frame: Frame) -> Step {
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
    let reply = |r: Result<Value, RpcError>| {
        id.as_ref().map(|id| match r {
            Ok(v) => rpc::response(id, v),
            Err(e) => rpc::error_response(id, &e),
        })
    };

    if method == "session.auth" {
        return Step::Now(reply(authenticate(conn, &params)));
    }
    if !conn.authenticated.load(Ordering::SeqCst) {
        return match &id {
            // A notification cannot be answered: it is dropped undispatched.
            None => Step::Now(None),
            Some(id) => Step::Close(rpc::error_response(
                id,
                &RpcError::new(
                    AUTH_REQUIRED,
                    format!("auth required: call session.auth with the daemon's token before `{method}`"),
                ),
            )),
        };
    }
    if method == "server.handshake" {
        let r = handshake::negotiate(&params);
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
    if !handshake::is_known(&method) {
        // Unknown notifications are ignored; unknown requests are -32601.
        return Step::Now(reply(Err(RpcError::unknown_method(&method))));
    }
    let c = conn.clone();
    Step::Later(
        async move {
            let r = super::methods::run(&c, &method, params).await;
            id.map(|id| match r {
                Ok(v) => rpc::response(&id, v),
                Err(e) => rpc::error_response(&id, &e),
            })
        }
        .boxed(),
    )
}

fn authenticate(conn: &Conn, params: &Value) -> Result<Value, RpcError> {
    let Some(expected) = &conn.config.token else {
        return Ok(json!({"ok": true, "auth_enabled": false}));
    };
    if params.get("host_token").is_some() && params.get("token").is_none() {
        return Err(RpcError::internal("auth failed: the host-management role is not supported by this daemon"));
    }
    if params.get("agent_id").is_some_and(|a| !a.is_null()) {
        return Err(RpcError::internal("auth failed: agent identities (`agent_id`) are not supported by this daemon"));
    }
    let token = match params.get("token") {
        Some(Value::String(t)) => t,
        None | Some(Value::Null) => return Err(RpcError::invalid_params("token is required")),
        Some(_) => return Err(RpcError::invalid_params("token must be a string")),
    };
    if tokens_equal(expected, token) {
        conn.authenticated.store(true, Ordering::SeqCst);
        Ok(json!({"ok": true, "auth_enabled": true}))
    } else {
        Err(RpcError::internal("auth failed: token mismatch"))
    }
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

    #[test]
    fn close_reasons_fit_a_frame() {
        let Message::Close(Some(f)) = close_frame(CloseCode::Error, &"é".repeat(100)) else { panic!() };
        assert!(f.reason.len() <= 123);
    }
}
