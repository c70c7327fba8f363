//! [`BuiltinExecutor`]: the engine's [`ToolExecutor`] for the built-in tools,
//! confined to one root. Each call runs [`super::execute`] on tokio's
//! blocking pool so file and process work never stalls the async threads.

use async_trait::async_trait;
use serde_json::Value;

use super::Root;
use crate::engine::{ToolCall, ToolExecutor};
use crate::ir::ToolFailure;

/// Runs the built-in tools (`read_file`, `write_file`, ..., `shell`) inside
/// `root`. A call to any other tool fails as an ordinary tool failure.
#[derive(Debug, Clone)]
pub struct BuiltinExecutor {
    /// The directory every file tool is confined to (and `shell`'s working directory).
    pub root: Root,
}

impl BuiltinExecutor {
    /// An executor confined to `root`.
    pub fn new(root: Root) -> Self {
        BuiltinExecutor { root }
    }
}

#[async_trait]
impl ToolExecutor for BuiltinExecutor {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        let params = match call.params {
            Value::Object(m) => m,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(ToolFailure::ordinary(format!(
                    "tool '{}': parameters must be a JSON object, got {other}",
                    call.tool
                )));
            }
        };
        let root = self.root.clone();
        let tool = call.tool.clone();
        tokio::task::spawn_blocking(move || super::execute(&root, &tool, &params))
            .await
            .unwrap_or_else(|e| Err(ToolFailure::ordinary(format!("tool '{}' did not finish: {e}", call.tool))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn runs_builtin_tools_confined() {
        let dir = std::env::temp_dir().join(format!("car-exec-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let ex = BuiltinExecutor::new(Root::new(&dir).unwrap());
        let call = |tool: &str, params: Value| ToolCall {
            tool: tool.into(),
            params,
            action_id: "a".into(),
            request_id: "r".into(),
            timeout_ms: None,
            session_id: None,
            attempt: 1,
        };
        let r = ex.execute(call("write_file", json!({"path": "x.txt", "content": "hi"}))).await.unwrap();
        assert_eq!(r["created"], true);
        assert_eq!(std::fs::read_to_string(dir.join("x.txt")).unwrap(), "hi");
        let e = ex.execute(call("read_file", json!({"path": "../x.txt"}))).await.unwrap_err();
        assert!(e.message.contains("root"), "{e:?}");
        let e = ex.execute(call("nope", json!({}))).await.unwrap_err();
        assert!(e.message.contains("not a built-in tool"));
        let e = ex.execute(call("read_file", json!([1]))).await.unwrap_err();
        assert!(e.message.contains("JSON object"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
