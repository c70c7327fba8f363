//! Detached (streaming / long-running) tool invocations: a handle per call,
//! a bounded chunk buffer that drops the oldest chunk when full, polling that
//! drains it, cooperative cancellation and a broadcast subscription.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::broadcast;

use super::executor::{CancelToken, ChunkStream};
use crate::ir::{ToolHandle, ToolPollResult, ToolStatus, ToolStreamChunk, ToolStreamEvent};

#[derive(Debug)]
struct Entry {
    tool: String,
    action_id: String,
    status: ToolStatus,
    chunks: VecDeque<ToolStreamChunk>,
    dropped: u64,
    result: Option<Value>,
    error: Option<String>,
    cancel: CancelToken,
}

/// Every live detached invocation of a runtime.
#[derive(Debug)]
pub struct DetachedTools {
    entries: Mutex<HashMap<String, Entry>>,
    capacity: usize,
    events: broadcast::Sender<ToolStreamEvent>,
}

impl DetachedTools {
    /// A registry whose handles buffer at most `capacity` chunks each.
    pub fn new(capacity: usize) -> Self {
        let (events, _) = broadcast::channel(capacity.clamp(16, 65_536));
        DetachedTools { entries: Mutex::new(HashMap::new()), capacity: capacity.max(1), events }
    }

    /// Registers a started invocation; returns its handle.
    pub fn register(&self, tool: &str, action_id: &str, cancel: CancelToken) -> ToolHandle {
        let id = uuid::Uuid::new_v4().simple().to_string();
        if let Ok(mut m) = self.entries.lock() {
            m.insert(
                id.clone(),
                Entry {
                    tool: tool.to_string(),
                    action_id: action_id.to_string(),
                    status: ToolStatus::Running,
                    chunks: VecDeque::new(),
                    dropped: 0,
                    result: None,
                    error: None,
                    cancel,
                },
            );
        }
        ToolHandle { id }
    }

    /// Buffers a chunk (dropping the oldest when full), applies a terminal
    /// chunk's status and broadcasts `{handle, chunk}`. Returns false when the
    /// handle is gone or no longer running.
    pub fn push(&self, handle: &ToolHandle, chunk: ToolStreamChunk) -> bool {
        {
            let Ok(mut m) = self.entries.lock() else { return false };
            let Some(e) = m.get_mut(&handle.id) else { return false };
            if e.status != ToolStatus::Running {
                return false;
            }
            match &chunk {
                ToolStreamChunk::Done { result } => {
                    e.status = ToolStatus::Succeeded;
                    e.result = result.clone();
                }
                ToolStreamChunk::Error { message } => {
                    e.status = ToolStatus::Failed;
                    e.error = Some(message.clone());
                }
                _ => {}
            }
            if e.chunks.len() >= self.capacity {
                e.chunks.pop_front();
                e.dropped += 1;
            }
            e.chunks.push_back(chunk.clone());
        }
        let _ = self.events.send(ToolStreamEvent { handle: handle.clone(), chunk });
        true
    }

    /// Marks a still-running invocation finished without a terminal chunk.
    fn finish(&self, handle: &ToolHandle) {
        if let Ok(mut m) = self.entries.lock()
            && let Some(e) = m.get_mut(&handle.id)
            && e.status == ToolStatus::Running
        {
            e.status = ToolStatus::Succeeded;
        }
    }

    /// Drains the handle's chunks. A terminal status is reported once, after
    /// which the handle is forgotten (`None`).
    pub fn poll(&self, handle: &str) -> Option<ToolPollResult> {
        let mut m = self.entries.lock().ok()?;
        let e = m.get_mut(handle)?;
        let out = ToolPollResult {
            handle: ToolHandle { id: handle.to_string() },
            tool: e.tool.clone(),
            action_id: e.action_id.clone(),
            status: e.status,
            chunks: e.chunks.drain(..).collect(),
            dropped_chunks: std::mem::take(&mut e.dropped),
            result: e.result.clone(),
            error: e.error.clone(),
        };
        if e.status.is_terminal() {
            m.remove(handle);
        }
        Some(out)
    }

    /// Cooperative cancel: signals the tool and marks the handle cancelled.
    /// False when the handle is unknown or already finished.
    pub fn cancel(&self, handle: &str) -> bool {
        let Ok(mut m) = self.entries.lock() else { return false };
        let Some(e) = m.get_mut(handle) else { return false };
        if e.status != ToolStatus::Running {
            return false;
        }
        e.status = ToolStatus::Cancelled;
        e.cancel.cancel();
        true
    }

    /// A subscription to every `{handle, chunk}` event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ToolStreamEvent> {
        self.events.subscribe()
    }

    /// Number of handles not yet consumed.
    pub fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// True when no handle is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Drains a detached tool's stream into its handle until a terminal chunk,
/// the end of the stream, or cancellation.
pub async fn drain(tools: Arc<DetachedTools>, handle: ToolHandle, mut stream: ChunkStream, cancel: CancelToken) {
    loop {
        let next = tokio::select! {
            c = stream.next() => c,
            _ = cancel.cancelled() => return,
        };
        match next {
            Some(chunk) => {
                let terminal = chunk.is_terminal();
                if !tools.push(&handle, chunk) || terminal {
                    return;
                }
            }
            None => {
                tools.finish(&handle);
                return;
            }
        }
    }
}
