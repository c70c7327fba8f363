//! The tool executor of a connection: each call goes to the client as a
//! `tools.execute` request and waits for the response routed by id.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::conn::Conn;
use super::rpc;
use crate::engine::{CancelToken, ChunkStream, ToolCall, ToolExecutor};
use crate::ir::{ToolFailure, ToolStreamChunk};
use futures::StreamExt;

/// Sends `tools.execute` to the client of one connection.
pub(crate) struct WsToolExecutor {
    pub(crate) conn: Arc<Conn>,
}

/// The `tools.execute` request frame of `call`, written straight from it
/// (the call's parameters are not copied into a value first): `{action_id,
/// tool, parameters, timeout_ms, attempt, request_id, session_id}`, then the
/// tool context of an isolated proposal (`ToolContext.cwd`, `.isolation`),
/// `detached` and the `deadline` when there are.
fn execute_request(call: &ToolCall, session_id: &str, detached: bool) -> String {
    #[derive(serde::Serialize)]
    struct Params<'a> {
        action_id: &'a str,
        tool: &'a str,
        parameters: &'a Value,
        timeout_ms: Option<u64>,
        attempt: u32,
        request_id: &'a str,
        session_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cwd: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        isolation: Option<&'a Value>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        detached: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        deadline: Option<&'a chrono::DateTime<chrono::Utc>>,
    }
    #[derive(serde::Serialize)]
    struct Request<'a> {
        jsonrpc: &'static str,
        id: &'a str,
        method: &'static str,
        params: Params<'a>,
    }
    let request = Request {
        jsonrpc: "2.0",
        id: &call.request_id,
        method: "tools.execute",
        params: Params {
            action_id: &call.action_id,
            tool: &call.tool,
            parameters: &call.params,
            timeout_ms: call.timeout_ms,
            attempt: call.attempt,
            request_id: &call.request_id,
            session_id: call.session_id.as_deref().unwrap_or(session_id),
            cwd: call.cwd.as_deref(),
            isolation: call.isolation.as_ref(),
            detached,
            deadline: call.deadline.as_ref(),
        },
    };
    // Strings, values and numbers always serialise.
    serde_json::to_string(&request).unwrap_or_default()
}

/// `185s`, or `300ms` when not whole seconds.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) { format!("{}s", ms / 1000) } else { format!("{ms}ms") }
}

/// Sends `tools.cancel` when a callback is given up: dropped by the engine
/// (the action's `timeout_ms`), by the method deadline, or timed out here.
struct CancelGuard<'a> {
    conn: &'a Conn,
    request_id: &'a str,
    action_id: &'a str,
    tool: &'a str,
    timeout_ms: Option<u64>,
    started: Instant,
    armed: bool,
    reason: Option<String>,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.conn.forget(self.request_id);
        let reason = self.reason.take().unwrap_or_else(|| match self.timeout_ms {
            Some(t) if self.started.elapsed() >= Duration::from_millis(t) => {
                format!("tool '{}' callback timed out ({})", self.tool, human(Duration::from_millis(t)))
            }
            _ => format!("tool '{}' callback cancelled: its handler was abandoned", self.tool),
        });
        self.conn.send(&rpc::notification(
            "tools.cancel",
            json!({"request_id": self.request_id, "action_id": self.action_id, "reason": reason}),
        ));
    }
}

/// Forgets a callback's `tools.log` identity when its wait ends.
struct Tracked<'a> {
    conn: &'a Conn,
    id: &'a str,
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.conn.untrack_call(self.id);
    }
}

#[async_trait]
impl ToolExecutor for WsToolExecutor {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        self.callback(&call, false).await
    }

    /// A detached call: `tools.execute` with `detached: true`. The client
    /// answers `{"stream": true}` and then pushes the chunks with
    /// `tools.stream.push {request_id, chunk | chunks}` until a terminal
    /// one (`done` / `error`); any other answer is the whole result (one
    /// `done` chunk). A cancellation of the handle (`tools.cancel`) sends
    /// the client `tools.cancel {request_id, action_id, reason}` and closes
    /// the stream; a client that disconnects ends it with an `error` chunk.
    async fn execute_stream(&self, call: ToolCall, cancel: CancelToken) -> Result<ChunkStream, ToolFailure> {
        let conn = self.conn.clone();
        // Open before asking, so a push that follows the answer at once lands.
        let chunks = conn.open_stream(&call.request_id);
        let answer = match self.callback(&call, true).await {
            Ok(v) => v,
            Err(f) => {
                conn.close_stream(&call.request_id);
                return Err(f);
            }
        };
        if answer.get("stream") != Some(&Value::Bool(true)) {
            conn.close_stream(&call.request_id);
            let done = ToolStreamChunk::Done { result: Some(answer) };
            return Ok(futures::stream::iter([done]).boxed());
        }
        // The open stream may log (`tools.log`) until it closes.
        conn.track_call(&call.request_id, &call.tool, &call.action_id);
        // The stream's end (dropped by the engine's drain) stops the watcher.
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
        let (request_id, action_id, tool) = (call.request_id.clone(), call.action_id.clone(), call.tool.clone());
        let weak = Arc::downgrade(&conn);
        tokio::spawn(async move {
            // Cancellation first: the engine drops the stream when cancelled.
            let reason = tokio::select! {
                biased;
                _ = cancel.cancelled() => format!("tool '{tool}' cancelled (tools.cancel on its handle)"),
                _ = ended_rx => format!("tool '{tool}': its stream is no longer read"),
            };
            // Still open: the client was not done, tell it to stop.
            if let Some(conn) = weak.upgrade()
                && conn.close_stream(&request_id)
            {
                conn.send(&rpc::notification(
                    "tools.cancel",
                    json!({"request_id": request_id, "action_id": action_id, "reason": reason}),
                ));
            }
        });
        Ok(pushed_chunks(chunks, ended_tx))
    }
}

/// The chunks a client pushes to a detached call, as the engine reads them.
/// A push's acknowledgement (on its last chunk) is let go when the reader
/// asks for the chunk after it, having done with that one (the engine's
/// drain has put it where `tools.poll` finds it), or drops the stream; the
/// push answers then. `ended` goes with the stream (its drop tells the
/// cancel watcher the stream is no longer read).
fn pushed_chunks(
    rx: tokio::sync::mpsc::Receiver<super::conn::Pushed>,
    ended: tokio::sync::oneshot::Sender<()>,
) -> ChunkStream {
    futures::stream::unfold((rx, ended, None), |(mut rx, ended, ack)| async move {
        drop::<Option<tokio::sync::oneshot::Sender<()>>>(ack);
        rx.recv().await.map(|(c, ack)| (c, (rx, ended, ack)))
    })
    .boxed()
}

impl WsToolExecutor {
    /// One `tools.execute` request and its answer (`detached`: the call of
    /// a streaming or long-running tool).
    async fn callback(&self, call: &ToolCall, detached: bool) -> Result<Value, ToolFailure> {
        let conn = &*self.conn;
        let request = execute_request(call, &conn.session_id, detached);
        let rx = conn.expect(&call.request_id);
        conn.track_call(&call.request_id, &call.tool, &call.action_id);
        let _tracked = Tracked { conn, id: &call.request_id };
        let mut guard = CancelGuard {
            conn,
            request_id: &call.request_id,
            action_id: &call.action_id,
            tool: &call.tool,
            timeout_ms: call.timeout_ms,
            started: Instant::now(),
            armed: true,
            reason: None,
        };
        if !conn.send_text(request) {
            guard.armed = false;
            conn.forget(&call.request_id);
            return Err(ToolFailure::ordinary(format!("tool '{}': the client connection is closed", call.tool)));
        }
        let bound = match call.timeout_ms {
            Some(t) => Duration::from_millis(t) + conn.config.callback_grace,
            None => conn.config.tool_timeout,
        };
        match super::conn::wait_outcome(rx, bound).await {
            Some(Ok(Ok(v))) => {
                guard.armed = false;
                Ok(v)
            }
            Some(Ok(Err(error))) => {
                guard.armed = false;
                let message = match error.get("message") {
                    Some(Value::String(m)) => m.clone(),
                    _ => error.to_string(),
                };
                let flag = |k: &str| error.get("data").and_then(|d| d.get(k)).and_then(Value::as_bool) == Some(true);
                Err(if flag("terminal") {
                    ToolFailure::terminal(message)
                } else if flag("model_retry") {
                    ToolFailure::model_retry(message)
                } else {
                    ToolFailure::ordinary(message)
                })
            }
            Some(Err(_)) => {
                guard.armed = false;
                Err(ToolFailure::ordinary(format!("tool '{}': the client disconnected before answering", call.tool)))
            }
            None => {
                let reason = format!("tool '{}' callback timed out ({})", call.tool, human(bound));
                guard.reason = Some(reason.clone());
                drop(guard);
                Err(ToolFailure::ordinary(reason))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request as it was built before (a value, then its text), the
    /// reference for the frame written straight from the call.
    fn as_value(call: &ToolCall, session_id: &str, detached: bool) -> String {
        let mut params = json!({
            "action_id": call.action_id,
            "tool": call.tool,
            "parameters": call.params,
            "timeout_ms": call.timeout_ms,
            "attempt": call.attempt,
            "request_id": call.request_id,
            "session_id": call.session_id.as_deref().unwrap_or(session_id),
        });
        if let Some(cwd) = &call.cwd {
            params["cwd"] = json!(cwd);
        }
        if let Some(iso) = &call.isolation {
            params["isolation"] = iso.clone();
        }
        if detached {
            params["detached"] = json!(true);
        }
        if let Some(d) = &call.deadline {
            params["deadline"] = json!(d);
        }
        rpc::request(&call.request_id, "tools.execute", params).to_string()
    }

    /// A push answers once the stream's reader has done with its last
    /// chunk (asked for the next one, or dropped the stream), so a
    /// `tools.poll` after the answer finds the chunks; not when they enter
    /// the stream's buffer.
    #[tokio::test]
    async fn a_push_answers_once_its_chunks_are_read() {
        use crate::ir::ToolStreamChunk as C;
        let (conn, _frames) = super::super::conn::operator_conn(super::super::fuzz_config()).unwrap();
        let text = |t: &str| C::Text { text: t.into() };
        let (ended, _watch) = tokio::sync::oneshot::channel();
        let mut stream = pushed_chunks(conn.open_stream("r"), ended);

        let push = conn.push_stream("r", vec![text("a"), text("b")]);
        tokio::pin!(push);
        assert!(futures::poll!(&mut push).is_pending(), "answered while its chunks sit in the buffer");
        assert!(matches!(stream.next().await, Some(C::Text { text }) if text == "a"));
        assert!(futures::poll!(&mut push).is_pending(), "answered before its last chunk was read");
        assert!(matches!(stream.next().await, Some(C::Text { text }) if text == "b"));
        assert!(futures::poll!(&mut push).is_pending(), "answered while the reader still holds the last chunk");
        let next = stream.next();
        tokio::pin!(next);
        assert!(futures::poll!(&mut next).is_pending());
        assert_eq!(futures::poll!(&mut push), std::task::Poll::Ready(Some(2)));

        // A terminal chunk: the reader drops the stream after it, which
        // answers the push; later chunks are not taken.
        let push = conn.push_stream("r", vec![C::Done { result: None }, text("late")]);
        tokio::pin!(push);
        assert!(futures::poll!(&mut push).is_pending());
        assert!(matches!(next.await, Some(C::Done { .. })));
        assert!(futures::poll!(&mut push).is_pending());
        drop(stream);
        assert_eq!(push.await, Some(1));
        assert_eq!(conn.push_stream("r", vec![text("c")]).await, None, "the stream closed with its terminal chunk");
    }

    #[test]
    fn the_tools_execute_frame_is_written_as_its_value_was() {
        let bare = ToolCall::new("echo", json!({"b": [1, 2.5, null], "a": "x\"\u{1}é"}), "a-1", "req-1");
        let full = ToolCall {
            timeout_ms: Some(2500),
            session_id: Some("own \"session\"".into()),
            attempt: 3,
            cwd: Some("/tmp/work tree".into()),
            isolation: Some(json!({"mode": "worktree"})),
            deadline: Some(chrono::DateTime::from_timestamp(1_700_000_000, 123_000_000).unwrap()),
            params: json!(null),
            ..bare.clone()
        };
        for call in [&bare, &full] {
            for detached in [false, true] {
                assert_eq!(execute_request(call, "conn-7", detached), as_value(call, "conn-7", detached));
            }
        }
    }

    #[test]
    fn durations() {
        assert_eq!(human(Duration::from_secs(185)), "185s");
        assert_eq!(human(Duration::from_millis(300)), "300ms");
    }
}
