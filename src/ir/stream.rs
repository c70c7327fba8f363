//! The streaming / long-running tool contract.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a `tool_call` runs.
///
/// `#[non_exhaustive]`: modes may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolInvocationMode {
    /// Dispatch awaits the result inline (default).
    #[default]
    OneShot,
    /// Detached: produces chunks incrementally.
    Streaming,
    /// Detached: runs longer than a single request.
    LongRunning,
}

impl ToolInvocationMode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolInvocationMode::OneShot => "one_shot",
            ToolInvocationMode::Streaming => "streaming",
            ToolInvocationMode::LongRunning => "long_running",
        }
    }

    /// True for the detached modes.
    pub fn is_detached(self) -> bool {
        !matches!(self, ToolInvocationMode::OneShot)
    }
}

/// Opaque handle of a detached tool invocation.
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`ToolHandle::new`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolHandle {
    /// The handle id.
    pub id: String,
}

impl ToolHandle {
    /// The handle with this id.
    pub fn new(id: impl Into<String>) -> Self {
        ToolHandle { id: id.into() }
    }
}

/// One piece of a detached tool's output. Tagged by `kind`.
///
/// `#[non_exhaustive]`: kinds of chunk may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolStreamChunk {
    /// Text output.
    Text {
        /// The text.
        text: String,
    },
    /// Structured output.
    Data {
        /// The data.
        data: Value,
    },
    /// Progress report.
    Progress {
        /// Fraction done in [0, 1].
        fraction: f64,
        /// Optional message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Terminal: success with an optional result.
    Done {
        /// The final result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
    },
    /// Terminal: failure.
    Error {
        /// What went wrong.
        message: String,
    },
}

impl ToolStreamChunk {
    /// True for `done` and `error`.
    pub fn is_terminal(&self) -> bool {
        matches!(self, ToolStreamChunk::Done { .. } | ToolStreamChunk::Error { .. })
    }
}

/// Control messages to a detached tool.
///
/// `#[non_exhaustive]`: messages may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolControl {
    /// Ask for buffered output.
    Poll,
    /// Cooperative cancellation.
    Cancel,
}

/// Status of a detached tool.
///
/// `#[non_exhaustive]`: statuses may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolStatus {
    /// Still running.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished with an error.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl ToolStatus {
    /// True for every status but `running`.
    pub fn is_terminal(self) -> bool {
        !matches!(self, ToolStatus::Running)
    }
}

/// Handle-tagged envelope streamed to a client.
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`ToolStreamEvent::new`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolStreamEvent {
    /// The handle.
    pub handle: ToolHandle,
    /// The chunk.
    pub chunk: ToolStreamChunk,
}

impl ToolStreamEvent {
    /// The event of `chunk` from the invocation `handle`.
    pub fn new(handle: ToolHandle, chunk: ToolStreamChunk) -> Self {
        ToolStreamEvent { handle, chunk }
    }
}

/// What `tools.poll` / `tool_poll` returns.
///
/// `#[non_exhaustive]`: fields may be added; the runtime produces it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolPollResult {
    /// The handle.
    pub handle: ToolHandle,
    /// The tool name.
    pub tool: String,
    /// The action that started it.
    pub action_id: String,
    /// Current status.
    pub status: ToolStatus,
    /// Chunks buffered since the last poll.
    #[serde(default)]
    pub chunks: Vec<ToolStreamChunk>,
    /// Chunks dropped because the buffer was full.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_chunks: u64,
    /// The final result once succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constructors_build_what_the_struct_literals_build() {
        assert_eq!(ToolHandle::new("h1"), ToolHandle { id: "h1".into() });
        let chunk = ToolStreamChunk::Progress { fraction: 0.5, message: Some("half".into()) };
        let built = ToolStreamEvent::new(ToolHandle::new("h1"), chunk.clone());
        let literal = ToolStreamEvent { handle: ToolHandle { id: "h1".into() }, chunk };
        assert_eq!(built, literal);
        assert_eq!(serde_json::to_value(&built).unwrap(), serde_json::to_value(&literal).unwrap());
    }
}
