//! The host tool executor: the one seam through which the runtime calls tools.
//! Bindings and the daemon adapt their foreign callbacks to [`ToolExecutor`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;

use crate::ir::{ToolFailure, ToolStreamChunk};

/// One tool invocation, as the binding callback receives it:
/// `{"tool","params","action_id","request_id","timeout_ms","session_id","attempt"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name.
    pub tool: String,
    /// The action's `parameters`, verbatim.
    pub params: Value,
    /// The action this call serves.
    pub action_id: String,
    /// Unique per call over the runtime's life.
    pub request_id: String,
    /// The per-attempt timeout, when the action set one.
    pub timeout_ms: Option<u64>,
    /// The policy session the proposal runs in, when any.
    pub session_id: Option<String>,
    /// 1-based attempt number.
    pub attempt: u32,
    /// The isolation working directory (`ToolContext.cwd`): inside the
    /// worktree under worktree isolation; `None` under `none`/`readonly`
    /// (the host directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The proposal's declared isolation (`ToolContext.isolation`), when
    /// not `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Value>,
    /// When the engine gives up on this attempt (`timeout_ms` after it was
    /// dispatched; RFC 3339): a tool past it is no longer waited for and
    /// should stop (`CarRuntime::tool_cancelled`). `None` without a timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<chrono::DateTime<chrono::Utc>>,
}

impl ToolCall {
    /// A first attempt of `tool` for action `action_id`, with no timeout,
    /// session, working directory, isolation or deadline (a host's own
    /// calls, tests).
    pub fn new(
        tool: impl Into<String>,
        params: Value,
        action_id: impl Into<String>,
        request_id: impl Into<String>,
    ) -> Self {
        ToolCall {
            tool: tool.into(),
            params,
            action_id: action_id.into(),
            request_id: request_id.into(),
            timeout_ms: None,
            session_id: None,
            attempt: 1,
            cwd: None,
            isolation: None,
            deadline: None,
        }
    }

    /// The callback JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}

/// A detached tool's output: chunks until a terminal `done` / `error`.
pub type ChunkStream = BoxStream<'static, ToolStreamChunk>;

/// Cooperative cancellation signal handed to detached tools.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<(AtomicBool, Notify)>,
}

impl CancelToken {
    /// A fresh, uncancelled token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Signals cancellation (idempotent).
    pub fn cancel(&self) {
        self.inner.0.store(true, Ordering::SeqCst);
        self.inner.1.notify_waiters();
    }

    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.0.load(Ordering::SeqCst)
    }

    /// Resolves once cancelled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.1.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// What the host supplies to run tools. Implementations must not assume the
/// runtime holds any lock while they run: a tool may call back into the same
/// runtime (`state_set`, `tool_poll`, ...).
#[async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Runs a one-shot call: its JSON result, or a typed failure (terminal
    /// only when the tool says so).
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure>;

    /// Starts a detached (streaming / long-running) call and returns its chunk
    /// stream. The action's `timeout_ms` bounds only this start. The default
    /// refuses: executors opt in.
    async fn execute_stream(&self, call: ToolCall, cancel: CancelToken) -> Result<ChunkStream, ToolFailure> {
        let _ = cancel;
        Err(ToolFailure::ordinary(format!(
            "tool '{}': this tool executor does not support detached (streaming / long_running) invocation",
            call.tool
        )))
    }
}

/// An executor from a synchronous closure (tests, benchmarks, simple hosts).
pub struct FnExecutor<F>(pub F);

#[async_trait]
impl<F> ToolExecutor for FnExecutor<F>
where
    F: Fn(ToolCall) -> Result<Value, ToolFailure> + Send + Sync,
{
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        (self.0)(call)
    }
}
