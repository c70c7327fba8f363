//! [`BuiltinExecutor`]: the engine's [`ToolExecutor`] for the built-in tools,
//! confined to one root. Each call runs [`super::execute`] on tokio's
//! blocking pool so file and process work never stalls the async threads.

use async_trait::async_trait;
use serde_json::Value;

use super::Root;
use crate::engine::{ToolCall, ToolExecutor};
use crate::ir::ToolFailure;

/// Runs the built-in tools (`read_file`, `write_file`, ..., `shell`) inside
/// `root`, and the `subprocess` tools the runtime's admission document
/// defines. `shell` and subprocess tools run through the sandbox
/// ([`crate::sandbox`]) under the document's profiles, each run recorded as
/// a `SandboxRun` event. A call to any other tool fails as an ordinary tool
/// failure.
#[derive(Clone)]
pub struct BuiltinExecutor {
    /// The directory every file tool is confined to (and `shell`'s working
    /// directory); `None`: only the tools that touch no file run.
    root: Option<Root>,
    rt: Option<crate::engine::Runtime>,
}

impl std::fmt::Debug for BuiltinExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinExecutor").field("root", &self.root).finish_non_exhaustive()
    }
}

impl BuiltinExecutor {
    /// An executor confined to `root`, with the default sandbox profiles
    /// and no event log.
    pub fn new(root: Root) -> Self {
        BuiltinExecutor { root: Some(root), rt: None }
    }

    /// An executor with no root: `http_fetch` runs, and every tool that
    /// needs a directory (the file tools, `shell`, subprocess tools) fails
    /// naming the missing root.
    pub fn without_root() -> Self {
        BuiltinExecutor { root: None, rt: None }
    }

    /// The directory the file tools are confined to, when there is one.
    pub fn root(&self) -> Option<&Root> {
        self.root.as_ref()
    }

    /// Reads the sandbox section and tool definitions from `rt`'s admission
    /// stage at each call, and records each run in `rt`'s event log.
    pub fn with_runtime(mut self, rt: crate::engine::Runtime) -> Self {
        self.rt = Some(rt);
        self
    }

    fn run_command(
        &self,
        root: &Root,
        call: &ToolCall,
        params: &serde_json::Map<String, Value>,
    ) -> Option<Result<Value, ToolFailure>> {
        let stage = self.rt.as_ref().map(|rt| rt.admission_stage());
        let sandbox = stage.as_ref().and_then(|s| s.config().sandbox.clone()).unwrap_or_default();
        let (res, ev) = if call.tool == crate::admission::SHELL_TOOL {
            super::shell_with(root, params, sandbox.for_tool(&call.tool, None))
        } else {
            let def = stage.as_ref().map(|s| s.definition(&call.tool))?;
            if def.executor != crate::permission::Executor::Subprocess {
                return None;
            }
            let command = def.command.clone().unwrap_or_default();
            match crate::sandbox::template::fill(&command, params) {
                Ok(argv) => crate::sandbox::execute_command(
                    root.path(),
                    &call.tool,
                    &argv,
                    None,
                    sandbox.for_tool(&call.tool, def.sandbox.as_deref()),
                    super::MAX_SHELL_OUTPUT,
                ),
                Err(e) => (Err(ToolFailure::ordinary(format!("tool '{}': {e}", call.tool))), Value::Null),
            }
        };
        if let Some(rt) = &self.rt
            && !ev.is_null()
        {
            rt.events().record(crate::events::EventKind::SandboxRun, None, Some(&call.action_id), ev);
        }
        Some(res)
    }
}

#[async_trait]
impl ToolExecutor for BuiltinExecutor {
    async fn execute(&self, mut call: ToolCall) -> Result<Value, ToolFailure> {
        let params = match std::mem::take(&mut call.params) {
            Value::Object(m) => m,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(ToolFailure::ordinary(format!(
                    "tool '{}': parameters must be a JSON object, got {other}",
                    call.tool
                )));
            }
        };
        #[cfg(feature = "fetch")]
        if call.tool == super::fetch::FETCH_TOOL {
            return match &self.rt {
                Some(rt) => super::fetch::fetch(&params, call.timeout_ms, &*rt.admission_stage()).await,
                None => super::fetch::fetch(&params, call.timeout_ms, &super::fetch::Unconfigured).await,
            };
        }
        let mut this = self.clone();
        tokio::task::spawn_blocking(move || {
            // Under worktree isolation the engine names the tree: every
            // built-in tool of the call is confined to it, not the host root.
            if let Some(cwd) = &call.cwd {
                this.root = Some(Root::new(std::path::Path::new(cwd)).map_err(|e| {
                    ToolFailure::ordinary(format!("tool '{}': the isolation directory: {e}", call.tool))
                })?);
            }
            let Some(root) = &this.root else {
                return Err(ToolFailure::terminal(format!(
                    "tool '{}' works in a root directory and this runtime has none: register the built-in tools with a root (register_agent_basics) first",
                    call.tool
                )));
            };
            match this.run_command(root, &call, &params) {
                Some(r) => r,
                None => super::execute(root, &call.tool, &params),
            }
        })
        .await
        .unwrap_or_else(|e| Err(ToolFailure::ordinary(format!("tool did not finish: {e}"))))
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
        let call = |tool: &str, params: Value| ToolCall::new(tool, params, "a", "r");
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

    /// Without a root, a tool that needs a directory fails, naming the
    /// missing root, and touches nothing (not the current directory).
    #[tokio::test]
    async fn without_a_root_the_file_tools_fail_naming_it() {
        let ex = BuiltinExecutor::without_root();
        assert!(ex.root().is_none());
        let name = format!("car-no-root-{}.txt", uuid::Uuid::new_v4());
        for (tool, params) in [
            ("write_file", json!({"path": name, "content": "hi"})),
            ("read_file", json!({"path": "Cargo.toml"})),
            ("list_dir", json!({"path": "."})),
            ("shell", json!({"command": "true"})),
        ] {
            let call = ToolCall::new(tool, params, "a", "r");
            let e = ex.execute(call).await.unwrap_err();
            assert!(e.message.contains("has none") && e.message.contains(tool), "{tool}: {e:?}");
            assert!(e.is_terminal(), "{tool}: {e:?}");
        }
        assert!(!std::path::Path::new(&name).exists(), "nothing was written to the current directory");
    }
}
