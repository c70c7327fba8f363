//! Adapters from foreign tool callbacks to the engine's [`ToolExecutor`].
//!
//! The bindings hand the runtime a callback that receives the call JSON text
//! `{"tool","params","action_id","request_id","timeout_ms","session_id","attempt"}`
//! and answers with the result as JSON text. These adapters hold the shared
//! rules, so every binding treats callback answers the same way:
//! - the answer is parsed as JSON; text that is not JSON is the string itself;
//! - a callback failure is an ordinary failure unless the binding says it was
//!   terminal (never inferred from the message);
//! - a blocking callback runs on a dedicated blocking thread, never on an
//!   async worker, so it may call back into the same runtime.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::engine::{ToolCall, ToolExecutor};
use crate::ir::ToolFailure;

/// The value of a callback's answer: JSON text parsed, anything else kept as a string.
pub fn parse_tool_output(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Decodes the envelope the JS and Python shims produce around a callback:
/// `{"ok": "<result JSON text>"}` or `{"error": "...", "terminal": bool}`.
pub fn decode_envelope(text: &str) -> Result<Value, ToolFailure> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| ToolFailure::ordinary(format!("tool callback returned a malformed envelope: {e}")))?;
    if let Some(ok) = v.get("ok") {
        return Ok(match ok {
            Value::String(s) => parse_tool_output(s),
            other => other.clone(),
        });
    }
    let message = v.get("error").and_then(Value::as_str).unwrap_or("tool callback failed").to_string();
    if v.get("terminal").and_then(Value::as_bool).unwrap_or(false) {
        Err(ToolFailure::terminal(message))
    } else {
        Err(ToolFailure::ordinary(message))
    }
}

/// A blocking callback: the call JSON text in, the answer text or a failure out.
pub type BlockingToolFn = dyn Fn(String) -> Result<String, ToolFailure> + Send + Sync;

/// Runs a blocking foreign callback on tokio's blocking pool for every call.
pub struct BlockingCallbackExecutor {
    f: Arc<BlockingToolFn>,
}

impl BlockingCallbackExecutor {
    /// Wraps a callback.
    pub fn new(f: Arc<BlockingToolFn>) -> Self {
        BlockingCallbackExecutor { f }
    }
}

#[async_trait]
impl ToolExecutor for BlockingCallbackExecutor {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        let f = self.f.clone();
        let text = call.to_json();
        match tokio::task::spawn_blocking(move || f(text)).await {
            Ok(Ok(answer)) => Ok(parse_tool_output(&answer)),
            Ok(Err(failure)) => Err(failure),
            Err(e) => Err(ToolFailure::ordinary(format!("tool callback panicked: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelopes_and_outputs() {
        assert_eq!(parse_tool_output(r#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(parse_tool_output("plain words"), json!("plain words"));
        assert_eq!(decode_envelope(r#"{"ok":"{\"x\":2}"}"#).unwrap(), json!({"x": 2}));
        assert_eq!(decode_envelope(r#"{"ok":"not json"}"#).unwrap(), json!("not json"));
        let e = decode_envelope(r#"{"error":"fatal error in tool","terminal":false}"#).unwrap_err();
        assert!(!e.is_terminal(), "terminality is never inferred from the text");
        assert!(decode_envelope(r#"{"error":"x","terminal":true}"#).unwrap_err().is_terminal());
        assert!(decode_envelope("garbage").is_err());
    }
}
