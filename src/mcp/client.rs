//! The tool-source client: connects to the configured MCP servers with the
//! official SDK (`rmcp`), imports their tools, forwards calls, reconnects a
//! server that died, and watches contracts for drift.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{ImportedTool, McpConfig, McpServerConfig, contract_hash};
use crate::engine::{CancelToken, ChunkStream, ToolCall, ToolExecutor};
use crate::ir::ToolFailure;
use crate::{Error, Result};

type Conn = RunningService<RoleClient, rmcp::model::ClientConfig>;

/// What the client says at `initialize`: revision `2025-11-25`, the newest
/// one with an `initialize` handshake that today's servers (and the
/// conformance suite) speak, rather than rmcp's draft default.
fn client_config() -> rmcp::model::ClientConfig {
    serde_json::from_value(json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "car-runtime", "version": crate::VERSION},
    }))
    .unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The hash over a server's tool contracts (`{remote name: contract hash}`,
/// canonical JSON).
fn toolset_hash(hashes: &BTreeMap<String, String>) -> String {
    hex::encode(Sha256::digest(serde_jcs::to_vec(hashes).unwrap_or_default()))
}

#[derive(Debug, Default)]
struct SourceState {
    /// The accepted contract hash of each remote tool.
    accepted: BTreeMap<String, String>,
    /// The contract hashes of the latest connection.
    current: BTreeMap<String, String>,
    /// Every drift report, oldest first.
    drift: Vec<Value>,
    /// How many connections were made.
    connects: u64,
}

struct Source {
    name: String,
    cfg: McpServerConfig,
    conn: tokio::sync::Mutex<Option<Conn>>,
    state: Mutex<SourceState>,
}

/// Connects and lists the server's selected tools.
async fn connect(name: &str, cfg: &McpServerConfig) -> Result<(Conn, Vec<ImportedTool>)> {
    let fail = |what: &str, e: String| {
        Error::runtime("mcp_connect_failed", format!("mcp server `{name}`: cannot {what}: {e}"))
    };
    let conn = if let Some(url) = &cfg.url {
        // Streamable HTTP: the bearer token is read from its variable at
        // every connection, never stored in the configuration.
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
        // A server that went away mid-call fails that call after a few
        // tries (rmcp's default retries the stream forever); the next call
        // reconnects.
        let mut retry = rmcp::transport::common::client_side_sse::FixedInterval::default();
        retry.max_times = Some(3);
        retry.duration = std::time::Duration::from_millis(200);
        config.retry_config = Arc::new(retry);
        if let Some(var) = &cfg.bearer_token_env {
            let token = std::env::var(var).map_err(|_| {
                fail("authenticate", format!("the bearer token variable `{var}` is not set (or not UTF-8)"))
            })?;
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        client_config().serve(transport).await.map_err(|e| fail(&format!("initialize at `{url}`"), e.to_string()))?
    } else {
        let program = cfg.command.clone().unwrap_or_default();
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&cfg.args).envs(&cfg.env).kill_on_drop(true);
        if let Some(dir) = &cfg.cwd {
            cmd.current_dir(dir);
        }
        let (transport, _stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| fail(&format!("start `{program}`"), e.to_string()))?;
        client_config().serve(transport).await.map_err(|e| fail("initialize", e.to_string()))?
    };
    let tools = conn.peer().list_all_tools().await.map_err(|e| fail("list its tools", e.to_string()))?;
    let mut out = Vec::new();
    for t in tools {
        let v = serde_json::to_value(&t).unwrap_or_default();
        let remote = v["name"].as_str().unwrap_or_default().to_string();
        if !cfg.selects(&remote) {
            continue;
        }
        let description = v["description"].as_str().unwrap_or_default().to_string();
        let parameters = v.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"}));
        let annotations = v.get("annotations").cloned().filter(|a| !a.is_null());
        out.push(ImportedTool {
            server: name.to_string(),
            name: cfg.local_name(&remote),
            contract_hash: contract_hash(&remote, &description, &parameters),
            remote,
            description,
            parameters,
            annotations,
        });
    }
    Ok((conn, out))
}

impl Source {
    /// Records a connection's contracts; reports drift against the accepted ones.
    fn observe(&self, tools: &[ImportedTool], first: bool) {
        let current: BTreeMap<String, String> =
            tools.iter().map(|t| (t.remote.clone(), t.contract_hash.clone())).collect();
        let mut st = lock(&self.state);
        st.connects += 1;
        if first {
            let mut accepted = current.clone();
            for (k, v) in &self.cfg.pinned {
                accepted.insert(k.clone(), v.clone());
            }
            st.accepted = accepted;
        }
        let previous = if first { st.accepted.clone() } else { st.current.clone() };
        let changed: Vec<&String> =
            current.iter().filter(|(k, v)| previous.get(*k).is_some_and(|p| p != *v)).map(|(k, _)| k).collect();
        let added: Vec<&String> = current.keys().filter(|k| !previous.contains_key(*k)).collect();
        let removed: Vec<&String> = previous.keys().filter(|k| !current.contains_key(*k)).collect();
        if !changed.is_empty() || !added.is_empty() || !removed.is_empty() {
            let report = json!({
                "server": self.name,
                "connection": st.connects,
                "old_hash": toolset_hash(&previous),
                "new_hash": toolset_hash(&current),
                "changed": changed,
                "added": added,
                "removed": removed,
            });
            st.drift.push(report);
        }
        st.current = current;
    }

    /// With `pin`, a tool whose contract differs from the accepted one is refused.
    fn check_pin(&self, remote: &str, local: &str) -> std::result::Result<(), ToolFailure> {
        if !self.cfg.pin {
            return Ok(());
        }
        let st = lock(&self.state);
        let (accepted, now) = (st.accepted.get(remote), st.current.get(remote));
        if accepted.is_some() && accepted == now {
            return Ok(());
        }
        Err(ToolFailure::terminal(format!(
            "mcp tool `{local}` (server `{}`, pin = true) is refused: its contract changed from {} to {}; \
             accept it by setting pinned.{remote} = \"{}\" in the server's configuration",
            self.name,
            accepted.map_or("(none)", String::as_str),
            now.map_or("(gone)", String::as_str),
            now.map_or("", String::as_str),
        )))
    }

    /// The call's mapped outcome and, when the server answered, its raw result.
    async fn call(
        &self,
        remote: &str,
        local: &str,
        params: Value,
    ) -> (std::result::Result<Value, ToolFailure>, Option<Value>) {
        match self.call_inner(remote, local, params).await {
            Ok(raw) => (map_result(local, raw.clone()), Some(raw)),
            Err(f) => (Err(f), None),
        }
    }

    async fn call_inner(&self, remote: &str, local: &str, params: Value) -> std::result::Result<Value, ToolFailure> {
        let peer = {
            let mut conn = self.conn.lock().await;
            if conn.as_ref().is_none_or(|c| c.is_closed() || c.peer().is_transport_closed()) {
                *conn = None;
                let (c, tools) = connect(&self.name, &self.cfg)
                    .await
                    .map_err(|e| ToolFailure::ordinary(format!("mcp tool `{local}`: reconnecting failed: {e}")))?;
                self.observe(&tools, false);
                *conn = Some(c);
            }
            self.check_pin(remote, local)?;
            conn.as_ref().map(|c| c.peer().clone())
        };
        let Some(peer) = peer else {
            return Err(ToolFailure::ordinary(format!("mcp tool `{local}`: server `{}` is not connected", self.name)));
        };
        let arguments = if params.is_null() { json!({}) } else { params };
        let request: rmcp::model::CallToolRequestParams =
            serde_json::from_value(json!({"name": remote, "arguments": arguments}))
                .map_err(|e| ToolFailure::terminal(format!("mcp tool `{local}`: arguments must be an object: {e}")))?;
        match peer.call_tool(request).await {
            Ok(result) => Ok(serde_json::to_value(&result).unwrap_or_default()),
            Err(e) => {
                if peer.is_transport_closed() {
                    *self.conn.lock().await = None;
                }
                Err(ToolFailure::ordinary(format!(
                    "mcp tool `{local}`: server `{}` failed during the call ({e}); it is reconnected on the next call",
                    self.name
                )))
            }
        }
    }
}

/// A `tools/call` result as an action output or failure: `isError` is a
/// failure carrying the text; else `structuredContent` when present, else
/// the text of a single text block, else `{"content": [...]}`.
pub(crate) fn map_result(local: &str, v: Value) -> std::result::Result<Value, ToolFailure> {
    let content = v.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    let text: Vec<&str> = content.iter().filter(|c| c["type"] == "text").filter_map(|c| c["text"].as_str()).collect();
    if v.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(ToolFailure::ordinary(format!("mcp tool `{local}` returned an error: {}", text.join("\n"))));
    }
    if let Some(sc) = v.get("structuredContent").filter(|s| !s.is_null()) {
        return Ok(sc.clone());
    }
    if content.len() == 1 && text.len() == 1 {
        return Ok(Value::String(text[0].to_string()));
    }
    Ok(json!({"content": content}))
}

/// Every imported name is a legal tool name, imported once.
fn check_names(servers: &[(String, McpServerConfig)], connected: &[(Conn, Vec<ImportedTool>)]) -> Result<()> {
    let mut seen = BTreeSet::new();
    for ((name, _), (_, tools)) in servers.iter().zip(connected) {
        for t in tools {
            if !crate::permission::is_valid_tool_name(&t.name) {
                return Err(Error::config(
                    "invalid_mcp_tool",
                    format!(
                        "mcp server `{name}`: tool `{}` is not a legal tool name (^[a-zA-Z0-9_-]{{1,64}}$); \
                         exclude it or choose another prefix",
                        t.name
                    ),
                    json!({"server": name, "tool": t.name}),
                ));
            }
            if !seen.insert(t.name.clone()) {
                return Err(Error::config(
                    "duplicate_tool",
                    format!("mcp server `{name}`: tool `{}` is imported twice; give a server a `prefix`", t.name),
                    json!({"server": name, "tool": t.name}),
                ));
            }
        }
    }
    Ok(())
}

/// The connected MCP servers of one configuration, with their imported tools.
pub struct McpHub {
    config: McpConfig,
    sources: Vec<Arc<Source>>,
    /// Local name → (source index, remote name).
    tools: HashMap<String, (usize, String)>,
    imported: Vec<ImportedTool>,
    rt: Option<tokio::runtime::Runtime>,
    /// Raw results by action id, kept for the gateway (`keep_raw_results`).
    raw: Mutex<Option<HashMap<String, Value>>>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub").field("servers", &self.config.servers.keys()).finish_non_exhaustive()
    }
}

impl McpHub {
    /// Connects to every server of `config` and imports their tools. Any
    /// error (a server that does not start, a tool name that is not legal
    /// after the prefix, two servers importing one name) leaves nothing
    /// running. Blocks; safe to call from inside an async runtime.
    pub fn connect(config: McpConfig) -> Result<McpHub> {
        config.check()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("car-mcp")
            .enable_all()
            .build()
            .map_err(|e| Error::runtime("mcp_connect_failed", format!("cannot start the MCP runtime: {e}")))?;
        let servers: Vec<(String, McpServerConfig)> = config.servers.clone().into_iter().collect();
        let handle = rt.handle().clone();
        // Connect and check inside the MCP runtime, so that connections
        // dropped on an error are shut down there.
        let connected = std::thread::scope(|s| {
            s.spawn(|| {
                handle.block_on(async {
                    let mut out = Vec::new();
                    for (name, cfg) in &servers {
                        out.push(connect(name, cfg).await?);
                    }
                    check_names(&servers, &out)?;
                    Ok::<_, Error>(out)
                })
            })
            .join()
            .unwrap_or_else(|_| Err(Error::runtime("mcp_connect_failed", "the MCP connect thread panicked")))
        });
        let connected = match connected {
            Ok(c) => c,
            Err(e) => {
                rt.shutdown_background();
                return Err(e);
            }
        };
        let mut hub = McpHub {
            config,
            sources: Vec::new(),
            tools: HashMap::new(),
            imported: Vec::new(),
            rt: Some(rt),
            raw: Mutex::new(None),
        };
        for (i, ((name, cfg), (conn, tools))) in servers.into_iter().zip(connected).enumerate() {
            for t in &tools {
                hub.tools.insert(t.name.clone(), (i, t.remote.clone()));
            }
            let source = Arc::new(Source {
                name,
                cfg,
                conn: tokio::sync::Mutex::new(Some(conn)),
                state: Mutex::new(SourceState::default()),
            });
            source.observe(&tools, true);
            hub.imported.extend(tools);
            hub.sources.push(source);
        }
        Ok(hub)
    }

    /// The configuration it was connected with.
    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// Every imported tool, in server order.
    pub fn imported(&self) -> &[ImportedTool] {
        &self.imported
    }

    /// The admission definitions of the imported tools.
    pub fn definitions(&self) -> Vec<Value> {
        self.imported.iter().map(|t| t.definition(&self.config.servers[&t.server])).collect()
    }

    /// True when `tool` is one of the imported tools.
    pub fn serves(&self, tool: &str) -> bool {
        self.tools.contains_key(tool)
    }

    /// Forwards a call of an imported tool to its server (reconnecting a
    /// server that died; refusing a drifted tool under `pin`).
    pub async fn call(&self, tool: &str, params: Value) -> std::result::Result<Value, ToolFailure> {
        self.call_raw(tool, params).await.0
    }

    /// Keeps every raw `tools/call` result by action id until
    /// [`McpHub::take_raw`] (the gateway forwards them verbatim).
    pub fn keep_raw_results(&self, keep: bool) {
        *lock(&self.raw) = keep.then(HashMap::new);
    }

    /// The raw result of the call made for `action_id`, once.
    pub fn take_raw(&self, action_id: &str) -> Option<Value> {
        lock(&self.raw).as_mut().and_then(|m| m.remove(action_id))
    }

    /// [`McpHub::call`] with the server's raw result when it answered.
    pub async fn call_raw(
        &self,
        tool: &str,
        params: Value,
    ) -> (std::result::Result<Value, ToolFailure>, Option<Value>) {
        let Some((i, remote)) = self.tools.get(tool).cloned() else {
            return (
                Err(ToolFailure::terminal(format!("tool `{tool}` is not served by a configured MCP server"))),
                None,
            );
        };
        let (Some(rt), Some(source)) = (&self.rt, self.sources.get(i).cloned()) else {
            return (Err(ToolFailure::terminal("the MCP runtime is shut down")), None);
        };
        let local = tool.to_string();
        rt.spawn(async move { source.call(&remote, &local, params).await }).await.unwrap_or_else(|e| {
            (Err(ToolFailure::ordinary(format!("mcp tool `{tool}`: the call task failed: {e}"))), None)
        })
    }

    /// Per server: its tools with their accepted and current contract
    /// hashes, whether a call is refused (pin), and every drift report.
    pub fn status(&self) -> Value {
        let mut servers = serde_json::Map::new();
        for s in &self.sources {
            let st = lock(&s.state);
            let tools: Vec<Value> = self
                .imported
                .iter()
                .filter(|t| t.server == s.name)
                .map(|t| {
                    let accepted = st.accepted.get(&t.remote);
                    let current = st.current.get(&t.remote);
                    json!({
                        "name": t.name, "remote": t.remote,
                        "accepted_hash": accepted, "current_hash": current,
                        "refused": s.cfg.pin && (accepted.is_none() || accepted != current),
                    })
                })
                .collect();
            servers.insert(
                s.name.clone(),
                json!({
                    "connections": st.connects,
                    "toolset_hash": toolset_hash(&st.current),
                    "tools": tools,
                    "drift": st.drift,
                }),
            );
        }
        json!({"servers": servers})
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        // Close every connection (the SDK shuts a child down gracefully, then
        // kills it) on a thread of its own: a drop may happen inside an async
        // runtime, where blocking is not allowed.
        let Some(rt) = self.rt.take() else { return };
        let sources = std::mem::take(&mut self.sources);
        let _ = std::thread::Builder::new().name("car-mcp-close".into()).spawn(move || {
            rt.block_on(async {
                for s in sources {
                    if let Some(c) = s.conn.lock().await.take() {
                        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), c.cancel()).await;
                    }
                }
            });
            rt.shutdown_background();
        });
    }
}

/// Sends calls of the imported tools to the [`McpHub`] and every other call
/// to the inner executor.
pub struct McpDispatch {
    /// The hub.
    pub hub: Arc<McpHub>,
    /// Everything else.
    pub inner: Arc<dyn ToolExecutor>,
}

#[async_trait]
impl ToolExecutor for McpDispatch {
    async fn execute(&self, call: ToolCall) -> std::result::Result<Value, ToolFailure> {
        if self.hub.serves(&call.tool) {
            let (out, raw) = self.hub.call_raw(&call.tool, call.params).await;
            if let (Some(raw), Some(m)) = (raw, lock(&self.hub.raw).as_mut()) {
                m.insert(call.action_id, raw);
            }
            out
        } else {
            self.inner.execute(call).await
        }
    }

    async fn execute_stream(
        &self,
        call: ToolCall,
        cancel: CancelToken,
    ) -> std::result::Result<ChunkStream, ToolFailure> {
        self.inner.execute_stream(call, cancel).await
    }
}
