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

use super::{ImportKind, ImportedTool, McpConfig, McpServerConfig, contract_hash};
use crate::engine::{CancelToken, ChunkStream, ToolCall, ToolExecutor};
use crate::ir::ToolFailure;
use crate::{Error, Result};

type Conn = RunningService<RoleClient, Relay>;

type ServerPeer = rmcp::service::Peer<rmcp::service::RoleServer>;

/// The gateway's clients: who gets an upstream server's notifications.
/// A client is named by an id the gateway gives each of its sessions.
#[derive(Default)]
pub struct Downstream {
    /// `resources/subscribe` by URI: the clients to tell of an update.
    subscribers: Mutex<HashMap<String, Vec<(String, ServerPeer)>>>,
    /// The clients that set a logging level.
    loggers: Mutex<Vec<(String, ServerPeer)>>,
}

impl Downstream {
    /// Client `id` hears of updates of `uri` (until it unsubscribes or goes
    /// away); true when it is the first client subscribed to it.
    pub fn subscribe(&self, uri: &str, id: &str, peer: ServerPeer) -> bool {
        let mut subs = lock(&self.subscribers);
        let list = subs.entry(uri.to_string()).or_default();
        list.retain(|(i, p)| i != id && !p.is_transport_closed());
        list.push((id.to_string(), peer));
        list.len() == 1
    }

    /// Client `id` no longer hears of updates of `uri`; true when no client
    /// is subscribed to it any more.
    pub fn unsubscribe(&self, uri: &str, id: &str) -> bool {
        let mut subs = lock(&self.subscribers);
        let Some(list) = subs.get_mut(uri) else { return true };
        list.retain(|(i, p)| i != id && !p.is_transport_closed());
        let last = list.is_empty();
        if last {
            subs.remove(uri);
        }
        last
    }

    /// Client `id` gets the upstream servers' log messages.
    pub fn log_to(&self, id: &str, peer: ServerPeer) {
        let mut loggers = lock(&self.loggers);
        loggers.retain(|(i, p)| i != id && !p.is_transport_closed());
        loggers.push((id.to_string(), peer));
    }
}

/// The client side of one upstream connection: what it says at
/// `initialize`, and the relay of its notifications to the gateway's clients.
#[derive(Clone)]
struct Relay {
    downstream: Arc<Downstream>,
}

impl rmcp::ClientHandler for Relay {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        client_config()
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let peers = lock(&self.downstream.subscribers).get(&params.uri).cloned().unwrap_or_default();
        for (_, p) in peers {
            let _ = p.notify_resource_updated(params.clone()).await;
        }
    }

    #[allow(deprecated)] // logging is legacy in the newest revision; our upstreams still speak it
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let peers = lock(&self.downstream.loggers).clone();
        for (_, p) in peers {
            let _ = p.notify_logging_message(params.clone()).await;
        }
    }
}

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
    /// The capabilities the server declared at its latest `initialize`.
    caps: Value,
}

struct Source {
    name: String,
    cfg: McpServerConfig,
    conn: tokio::sync::Mutex<Option<Conn>>,
    state: Mutex<SourceState>,
    downstream: Arc<Downstream>,
}

/// Connects and lists the server's selected tools (and, with `resources` /
/// `prompts`, the tools that read its resources and get its prompts).
async fn connect(name: &str, cfg: &McpServerConfig, downstream: &Arc<Downstream>) -> Result<(Conn, Vec<ImportedTool>)> {
    let relay = Relay { downstream: downstream.clone() };
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
        relay.serve(transport).await.map_err(|e| fail(&format!("initialize at `{url}`"), e.to_string()))?
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
        relay.serve(transport).await.map_err(|e| fail("initialize", e.to_string()))?
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
            kind: ImportKind::Tool,
        });
    }
    let caps = conn.peer().peer_info().map(|i| i.capabilities.clone()).unwrap_or_default();
    if cfg.resources && caps.resources.is_some() && cfg.selects(super::READ_RESOURCE) {
        out.push(ImportedTool::read_resource(name, cfg));
    }
    if cfg.prompts && caps.prompts.is_some() && cfg.selects(super::GET_PROMPT) {
        out.push(ImportedTool::get_prompt(name, cfg));
    }
    Ok((conn, out))
}

/// The capabilities a connected server declared.
fn caps_of(conn: &Conn) -> Value {
    conn.peer().peer_info().and_then(|i| serde_json::to_value(&i.capabilities).ok()).unwrap_or_default()
}

impl Source {
    /// Records a connection's contracts; reports drift against the accepted ones.
    fn observe(&self, caps: Value, tools: &[ImportedTool], first: bool) {
        let current: BTreeMap<String, String> =
            tools.iter().map(|t| (t.remote.clone(), t.contract_hash.clone())).collect();
        let mut st = lock(&self.state);
        st.connects += 1;
        st.caps = caps;
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
        peer: Option<rmcp::service::Peer<RoleClient>>,
        remote: &str,
        local: &str,
        kind: ImportKind,
        params: Value,
    ) -> (std::result::Result<Value, ToolFailure>, Option<Value>) {
        match self.call_inner(peer, remote, local, kind, params).await {
            Ok(raw) => (map_result(local, kind, raw.clone()), Some(raw)),
            Err(f) => (Err(f), None),
        }
    }

    /// The peer of a live connection, without waiting or reconnecting.
    fn live_peer(&self) -> Option<rmcp::service::Peer<RoleClient>> {
        let conn = self.conn.try_lock().ok()?;
        conn.as_ref().filter(|c| !c.is_closed() && !c.peer().is_transport_closed()).map(|c| c.peer().clone())
    }

    /// The connection's peer, reconnecting a server that went away.
    async fn peer(&self) -> Result<rmcp::service::Peer<RoleClient>> {
        let mut conn = self.conn.lock().await;
        if conn.as_ref().is_none_or(|c| c.is_closed() || c.peer().is_transport_closed()) {
            *conn = None;
            let (c, tools) = connect(&self.name, &self.cfg, &self.downstream).await?;
            self.observe(caps_of(&c), &tools, false);
            *conn = Some(c);
        }
        conn.as_ref()
            .map(|c| c.peer().clone())
            .ok_or_else(|| Error::runtime("mcp_connect_failed", format!("mcp server `{}` is not connected", self.name)))
    }

    async fn call_inner(
        &self,
        peer: Option<rmcp::service::Peer<RoleClient>>,
        remote: &str,
        local: &str,
        kind: ImportKind,
        params: Value,
    ) -> std::result::Result<Value, ToolFailure> {
        let peer = match peer {
            Some(p) => p,
            None => self
                .peer()
                .await
                .map_err(|e| ToolFailure::ordinary(format!("mcp tool `{local}`: reconnecting failed: {e}")))?,
        };
        self.check_pin(remote, local)?;
        let arguments = if params.is_null() { json!({}) } else { params };
        let bad = |e: serde_json::Error| ToolFailure::terminal(format!("mcp tool `{local}`: bad arguments: {e}"));
        let answer = match kind {
            ImportKind::Tool => {
                let request: rmcp::model::CallToolRequestParams =
                    serde_json::from_value(json!({"name": remote, "arguments": arguments})).map_err(bad)?;
                peer.call_tool(request).await.map(|r| serde_json::to_value(&r).unwrap_or_default())
            }
            ImportKind::ReadResource => {
                let request: rmcp::model::ReadResourceRequestParams =
                    serde_json::from_value(json!({"uri": arguments["uri"]})).map_err(bad)?;
                peer.read_resource(request).await.map(|r| serde_json::to_value(&r).unwrap_or_default())
            }
            ImportKind::GetPrompt => {
                let mut p = json!({"name": arguments["name"]});
                if let Some(a) = arguments.get("arguments").filter(|a| !a.is_null()) {
                    p["arguments"] = a.clone();
                }
                let request: rmcp::model::GetPromptRequestParams = serde_json::from_value(p).map_err(bad)?;
                peer.get_prompt(request).await.map(|r| serde_json::to_value(&r).unwrap_or_default())
            }
        };
        match answer {
            Ok(v) => Ok(v),
            Err(rmcp::ServiceError::McpError(e)) if kind != ImportKind::Tool => {
                Err(ToolFailure::ordinary(format!("mcp tool `{local}`: server `{}` refused: {}", self.name, e.message)))
            }
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
/// the text of a single text block, else `{"content": [...]}`. A
/// `resources/read` result is the text of a single text resource, else
/// `{"contents": [...]}`; a `prompts/get` result is itself.
pub(crate) fn map_result(local: &str, kind: ImportKind, v: Value) -> std::result::Result<Value, ToolFailure> {
    match kind {
        ImportKind::Tool => {}
        ImportKind::ReadResource => {
            let contents = v.get("contents").and_then(Value::as_array).cloned().unwrap_or_default();
            if let [only] = contents.as_slice()
                && let Some(text) = only.get("text").and_then(Value::as_str)
            {
                return Ok(Value::String(text.to_string()));
            }
            return Ok(json!({"contents": contents}));
        }
        ImportKind::GetPrompt => return Ok(v),
    }
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

/// True when `uri` fits an RFC 6570 level-1 template: the literal text
/// before the first variable, between variables and after the last one
/// appear in order, each variable standing for at least one character.
fn template_fits(template: &str, uri: &str) -> bool {
    let mut parts = template.split('{');
    let first = parts.next().unwrap_or("");
    let literals: Vec<&str> = parts.map(|p| p.split_once('}').map_or("", |(_, rest)| rest)).collect();
    let Some(mut tail) = uri.strip_prefix(first) else { return false };
    let Some((last, middle)) = literals.split_last() else { return tail.is_empty() };
    let after_one = |t: &str| t.char_indices().nth(1).map_or(t.len(), |(i, _)| i);
    for lit in middle {
        let skip = after_one(tail);
        match tail[skip..].find(lit) {
            Some(at) if !tail.is_empty() => tail = &tail[skip + at + lit.len()..],
            _ => return false,
        }
    }
    !tail.is_empty() && tail.len() > last.len() && tail.ends_with(last)
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
    /// Local name → (source index, remote name, what a call does).
    tools: HashMap<String, (usize, String, ImportKind)>,
    /// The gateway's clients, told of the servers' notifications.
    downstream: Arc<Downstream>,
    /// Resource URI → source index, from the latest `resources/list`.
    resource_owner: Mutex<HashMap<String, usize>>,
    /// (source index, URI template) of the forwarding servers, from the
    /// latest `resources/templates/list` (or the first read that needed
    /// them); `None` until then.
    templates: Mutex<Option<Vec<(usize, String)>>>,
    /// Local prompt name → (source index, remote name), from the latest
    /// `prompts/list` and the prompts found since.
    prompt_owner: Mutex<HashMap<String, (usize, String)>>,
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
        let downstream = Arc::new(Downstream::default());
        // Connect and check inside the MCP runtime, so that connections
        // dropped on an error are shut down there.
        let connected = std::thread::scope(|s| {
            s.spawn(|| {
                handle.block_on(async {
                    let mut out = Vec::new();
                    for (name, cfg) in &servers {
                        out.push(connect(name, cfg, &downstream).await?);
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
            downstream: downstream.clone(),
            resource_owner: Mutex::new(HashMap::new()),
            templates: Mutex::new(None),
            prompt_owner: Mutex::new(HashMap::new()),
            imported: Vec::new(),
            rt: Some(rt),
            raw: Mutex::new(None),
        };
        for (i, ((name, cfg), (conn, tools))) in servers.into_iter().zip(connected).enumerate() {
            let caps = caps_of(&conn);
            for t in &tools {
                hub.tools.insert(t.name.clone(), (i, t.remote.clone(), t.kind));
            }
            let source = Arc::new(Source {
                name,
                cfg,
                conn: tokio::sync::Mutex::new(Some(conn)),
                state: Mutex::new(SourceState::default()),
                downstream: downstream.clone(),
            });
            source.observe(caps, &tools, true);
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

    /// What a call of the imported tool `tool` does on its server.
    pub fn kind(&self, tool: &str) -> Option<ImportKind> {
        self.tools.get(tool).map(|(_, _, k)| *k)
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
        let Some((i, remote, kind)) = self.tools.get(tool).cloned() else {
            return (
                Err(ToolFailure::terminal(format!("tool `{tool}` is not served by a configured MCP server"))),
                None,
            );
        };
        let (Some(rt), Some(source)) = (&self.rt, self.sources.get(i).cloned()) else {
            return (Err(ToolFailure::terminal("the MCP runtime is shut down")), None);
        };
        let local = tool.to_string();
        // A live connection is called from here (its service task runs on
        // the MCP runtime either way); starting a server again happens on
        // the MCP runtime, which owns the child processes.
        if let Some(peer) = source.live_peer() {
            return source.call(Some(peer), &remote, &local, kind, params).await;
        }
        rt.spawn(async move { source.call(None, &remote, &local, kind, params).await }).await.unwrap_or_else(|e| {
            (Err(ToolFailure::ordinary(format!("mcp tool `{tool}`: the call task failed: {e}"))), None)
        })
    }

    /// The MCP runtime: one worker thread, which owns the connections. The
    /// gateway serves its own clients on it too, so a forwarded call never
    /// crosses a thread in the gateway.
    pub fn handle(&self) -> Option<tokio::runtime::Handle> {
        self.rt.as_ref().map(|rt| rt.handle().clone())
    }

    /// The gateway's clients (who hears the servers' notifications).
    pub fn downstream(&self) -> &Downstream {
        &self.downstream
    }

    /// The sources that forward `what` (`resources`, `prompts`, `logging`,
    /// `completions`): configured to (resources, prompts; logging and
    /// completions of any server) and declared at their latest `initialize`.
    fn forwarding(&self, what: &str) -> Vec<(usize, Arc<Source>)> {
        self.sources
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                let configured = match what {
                    "resources" => s.cfg.resources,
                    "prompts" => s.cfg.prompts,
                    _ => true,
                };
                configured && !lock(&s.state).caps[what].is_null()
            })
            .map(|(i, s)| (i, s.clone()))
            .collect()
    }

    /// The capabilities the gateway declares for its upstreams: resources
    /// (`subscribe` when a server has it), prompts, logging and
    /// completions when a forwarding server declares them.
    pub fn capabilities(&self) -> Value {
        let mut caps = json!({"tools": {}});
        let resources = self.forwarding("resources");
        if !resources.is_empty() {
            let subscribe = resources.iter().any(|(_, s)| lock(&s.state).caps["resources"]["subscribe"] == true);
            caps["resources"] = json!({"subscribe": subscribe, "listChanged": false});
        }
        if !self.forwarding("prompts").is_empty() {
            caps["prompts"] = json!({"listChanged": false});
        }
        if !self.forwarding("logging").is_empty() {
            caps["logging"] = json!({});
        }
        let completes = self.forwarding("completions");
        if completes.iter().any(|(_, s)| s.cfg.resources || s.cfg.prompts) {
            caps["completions"] = json!({});
        }
        caps
    }

    /// Runs `f` with the source's peer on the MCP runtime (reconnecting a
    /// server that went away); a server's own error is passed on verbatim.
    async fn on<T, F, Fut>(&self, source: &Arc<Source>, f: F) -> std::result::Result<T, rmcp::ErrorData>
    where
        F: FnOnce(rmcp::service::Peer<RoleClient>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = std::result::Result<T, rmcp::ServiceError>> + Send + 'static,
        T: Send + 'static,
    {
        let internal = |m: String| rmcp::ErrorData::internal_error(m, None);
        let rt = self.rt.as_ref().ok_or_else(|| internal("the MCP runtime is shut down".into()))?;
        let source = source.clone();
        rt.spawn(async move {
            let peer = source.peer().await.map_err(|e| internal(e.to_string()))?;
            f(peer).await.map_err(|e| match e {
                rmcp::ServiceError::McpError(e) => e,
                e => internal(format!("mcp server `{}`: {e}", source.name)),
            })
        })
        .await
        .map_err(|e| internal(format!("the MCP task failed: {e}")))?
    }

    /// The local name of source `i`'s imported tool of `kind`.
    pub fn tool_of(&self, i: usize, kind: ImportKind) -> Option<String> {
        self.tools.iter().find(|(_, (j, _, k))| *j == i && *k == kind).map(|(name, _)| name.clone())
    }

    /// `resources/list` of every server forwarding resources, in server
    /// order (a URI listed by two servers belongs to the first).
    /// Sources for which `hidden` is true are left out (the gateway hides
    /// the resources of a server whose `read_resource` a rule removes).
    pub async fn list_resources(&self, hidden: impl Fn(usize) -> bool) -> std::result::Result<Value, rmcp::ErrorData> {
        let mut all = Vec::new();
        let mut owners = HashMap::new();
        for (i, s) in self.forwarding("resources") {
            let resources = self.on(&s, |p| async move { p.list_all_resources().await }).await?;
            for r in resources {
                let v = serde_json::to_value(&r).unwrap_or_default();
                if let Some(uri) = v["uri"].as_str() {
                    owners.entry(uri.to_string()).or_insert(i);
                }
                if !hidden(i) {
                    all.push(v);
                }
            }
        }
        *lock(&self.resource_owner) = owners;
        Ok(json!({"resources": all}))
    }

    /// `resources/templates/list` of every server forwarding resources.
    pub async fn list_resource_templates(
        &self,
        hidden: impl Fn(usize) -> bool,
    ) -> std::result::Result<Value, rmcp::ErrorData> {
        let mut all = Vec::new();
        let mut fits = Vec::new();
        for (i, s) in self.forwarding("resources") {
            // A hidden server is listed only to know its templates; its
            // failure fails nothing the client asked for.
            let templates = match self.on(&s, |p| async move { p.list_all_resource_templates().await }).await {
                Ok(t) => t,
                Err(_) if hidden(i) => continue,
                Err(e) => return Err(e),
            };
            for t in templates {
                let v = serde_json::to_value(&t).unwrap_or_default();
                if let Some(t) = v["uriTemplate"].as_str() {
                    fits.push((i, t.to_string()));
                }
                if !hidden(i) {
                    all.push(v);
                }
            }
        }
        *lock(&self.templates) = Some(fits);
        Ok(json!({"resourceTemplates": all}))
    }

    /// The source serving a resource URI: the one that listed it, else the
    /// first whose URI template it fits, else the only server forwarding
    /// resources. The lists and templates are those of the latest
    /// `resources/list` and `resources/templates/list` (asked for here only
    /// when there is none yet, or when no known template fits the URI).
    pub async fn resource_source(&self, uri: &str) -> Option<usize> {
        if lock(&self.resource_owner).is_empty() {
            let _ = self.list_resources(|_| false).await;
        }
        if let Some(i) = lock(&self.resource_owner).get(uri) {
            return Some(*i);
        }
        let fitting =
            |templates: &[(usize, String)]| templates.iter().find(|(_, t)| template_fits(t, uri)).map(|(i, _)| *i);
        let known = lock(&self.templates).as_deref().map(fitting);
        if let Some(Some(i)) = known {
            return Some(i);
        }
        // None known yet, or none fits: the servers' templates as they are now.
        if self.list_resource_templates(|_| true).await.is_ok()
            && let Some(i) = lock(&self.templates).as_deref().and_then(fitting)
        {
            return Some(i);
        }
        match self.forwarding("resources").as_slice() {
            [(i, _)] => Some(*i),
            _ => None,
        }
    }

    /// `resources/subscribe` (`on`) or `unsubscribe` of `uri` for the
    /// gateway's client `id`: the server is asked once for all its clients.
    pub async fn subscribe(
        &self,
        i: usize,
        uri: &str,
        id: &str,
        peer: Option<ServerPeer>,
    ) -> std::result::Result<(), rmcp::ErrorData> {
        let Some(s) = self.sources.get(i).cloned() else { return Ok(()) };
        match peer {
            Some(peer) => {
                let params: rmcp::model::SubscribeRequestParams = serde_json::from_value(json!({"uri": uri}))
                    .map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
                if self.downstream.subscribe(uri, id, peer) {
                    #[allow(deprecated)]
                    let asked = self.on(&s, |p| async move { p.subscribe(params).await }).await;
                    if let Err(e) = asked {
                        // The upstream refused: the client is not subscribed.
                        self.downstream.unsubscribe(uri, id);
                        return Err(e);
                    }
                }
            }
            None => {
                if self.downstream.unsubscribe(uri, id) {
                    let params: rmcp::model::UnsubscribeRequestParams = serde_json::from_value(json!({"uri": uri}))
                        .map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
                    #[allow(deprecated)]
                    self.on(&s, |p| async move { p.unsubscribe(params).await }).await?;
                }
            }
        }
        Ok(())
    }

    /// `prompts/list` of every server forwarding prompts, the names with
    /// the server's prefix.
    pub async fn list_prompts(&self, hidden: impl Fn(usize) -> bool) -> std::result::Result<Value, rmcp::ErrorData> {
        let mut all = Vec::new();
        let mut owners = HashMap::new();
        for (i, s) in self.forwarding("prompts").into_iter().filter(|(i, _)| !hidden(*i)) {
            let prompts = self.on(&s, |p| async move { p.list_all_prompts().await }).await?;
            for p in prompts {
                let mut v = serde_json::to_value(&p).unwrap_or_default();
                if let Some(name) = v["name"].as_str() {
                    let local = s.cfg.local_name(name);
                    owners.entry(local.clone()).or_insert((i, name.to_string()));
                    v["name"] = json!(local);
                }
                all.push(v);
            }
        }
        // The owners of the listed prompts replace the known ones (hidden
        // servers' prompts are looked up again when asked for).
        *lock(&self.prompt_owner) = owners;
        Ok(json!({"prompts": all}))
    }

    /// The source and remote name of a prompt listed as `local`: the
    /// server whose listed prompts include it (the first, in server order),
    /// from the latest `prompts/list`; the servers are asked only for a
    /// name not known from it.
    pub async fn prompt_source(&self, local: &str) -> Option<(usize, String)> {
        if let Some(known) = lock(&self.prompt_owner).get(local) {
            return Some(known.clone());
        }
        for (i, s) in self.forwarding("prompts") {
            let Some(remote) = local.strip_prefix(s.cfg.prefix.as_deref().unwrap_or("")) else { continue };
            let prompts = self.on(&s, |p| async move { p.list_all_prompts().await }).await.unwrap_or_default();
            if prompts.iter().any(|p| p.name == remote) {
                let found = (i, remote.to_string());
                lock(&self.prompt_owner).insert(local.to_string(), found.clone());
                return Some(found);
            }
        }
        None
    }

    /// `logging/setLevel` to every server that declares logging; the
    /// gateway's client `id` then gets their log messages.
    #[allow(deprecated)]
    pub async fn set_level(
        &self,
        level: Value,
        id: &str,
        peer: ServerPeer,
    ) -> std::result::Result<(), rmcp::ErrorData> {
        self.downstream.log_to(id, peer);
        for (_, s) in self.forwarding("logging") {
            let params: rmcp::model::SetLevelRequestParams = serde_json::from_value(json!({"level": level}))
                .map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
            #[allow(deprecated)]
            self.on(&s, |p| async move { p.set_level(params).await }).await?;
        }
        Ok(())
    }

    /// `completion/complete` on source `i`, with `params` already in the
    /// server's own names.
    pub async fn complete(&self, i: usize, params: Value) -> std::result::Result<Value, rmcp::ErrorData> {
        let Some(s) = self.sources.get(i).cloned() else { return Ok(json!({"completion": {"values": []}})) };
        if lock(&s.state).caps["completions"].is_null() {
            return Ok(json!({"completion": {"values": []}}));
        }
        let params: rmcp::model::CompleteRequestParams =
            serde_json::from_value(params).map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
        let r = self.on(&s, |p| async move { p.complete(params).await }).await?;
        Ok(serde_json::to_value(&r).unwrap_or_default())
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

#[cfg(test)]
mod tests {
    use super::template_fits;

    #[test]
    fn uri_templates() {
        assert!(template_fits("test://static/resource/{id}", "test://static/resource/7"));
        assert!(!template_fits("test://static/resource/{id}", "test://static/resource/"));
        assert!(!template_fits("test://static/resource/{id}", "test://other/7"));
        assert!(template_fits("file:///{path}.txt", "file:///a/b.txt"));
        assert!(!template_fits("file:///{path}.txt", "file:///a/b.md"));
        assert!(template_fits("db://{table}/rows/{id}", "db://users/rows/3"));
        assert!(!template_fits("db://{table}/rows/{id}", "db://users/cols/3"));
        assert!(!template_fits("db://{table}/rows/{id}", "db:///rows/3"));
        assert!(template_fits("plain://x", "plain://x"));
        assert!(!template_fits("plain://x", "plain://xy"));
        assert!(template_fits("u://{a}é{b}", "u://ééé"));
    }
}
