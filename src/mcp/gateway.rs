//! The gateway (`car mcp serve`): an MCP server in front of the configured
//! upstream MCP servers. Every `tools/call` is a one-action proposal run by
//! the runtime, so it passes the admission stage like any other call (a
//! refusal is an `isError` result naming the layer and rule), is recorded
//! in the event log, and is forwarded only once admitted. `tools/list`
//! hides the tools a deny rule or the `plan` layer (plan mode) removes.
//!
//! Like the daemon and the CLI, this is a front end over
//! [`crate::api::runtime::CarRuntime`]: it translates, it does not decide.

use std::sync::Arc;

#[allow(deprecated)] // `logging/setLevel` is legacy in the newest revision; clients still send it
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, SetLevelRequestParams,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};

use super::ImportKind;
use serde_json::{Value, json};

use crate::api::runtime::CarRuntime;
use crate::engine::FnExecutor;
use crate::ir::ToolFailure;

/// The gateway's MCP server handler.
#[derive(Clone)]
pub struct Gateway {
    rt: CarRuntime,
    hub: Arc<super::McpHub>,
    session: Option<String>,
    /// This client's id (one per MCP session), for its subscriptions.
    client: String,
}

/// What became of one admitted-and-forwarded call.
enum Outcome {
    /// The server's own result, verbatim.
    Raw(Value),
    /// The action's output (no raw result was kept).
    Output(Value),
    /// Refused, or failed: why, naming the layer and rule.
    Refused(String),
}

impl Gateway {
    /// A gateway over a runtime already configured with an `mcp` section
    /// (its document's `plan_mode` offers and admits only the tools that read).
    pub fn new(rt: CarRuntime) -> crate::Result<Self> {
        let hub = rt.mcp_hub().ok_or_else(|| {
            crate::Error::config(
                "invalid_mcp_config",
                "the gateway needs at least one server in the configuration's `mcp` section",
                json!({"key": "mcp"}),
            )
        })?;
        hub.keep_raw_results(true);
        let session = rt.open_session().ok();
        Ok(Gateway { rt, hub, session, client: uuid::Uuid::new_v4().to_string() })
    }

    /// The same gateway for another client (an MCP session of its own).
    pub fn for_client(&self) -> Gateway {
        Gateway { client: uuid::Uuid::new_v4().to_string(), ..self.clone() }
    }

    /// The tokio runtime to serve on: the MCP runtime's one worker thread,
    /// where the upstream connections run (see [`super::McpHub::handle`]).
    pub fn serving_runtime(&self) -> Option<tokio::runtime::Handle> {
        self.hub.handle()
    }

    /// The runtime underneath (its event log holds every call and verdict).
    pub fn runtime(&self) -> &CarRuntime {
        &self.rt
    }

    /// True when the admission stage offers the tool at all (plan mode
    /// removes every tool that does not only read).
    fn offered(&self, name: &str) -> bool {
        self.rt.runtime().admission_stage().offers(name)
    }

    /// True when a deny rule refuses the tool whatever its arguments: the
    /// admission stage's chain (not the validation before it, which would
    /// refuse a probe without the tool's required arguments) denies a call
    /// of it with no arguments in its deny-rule layer.
    fn denied_outright(&self, name: &str) -> bool {
        let probe = json!({"id": "tools-list", "actions": [{"id": "probe", "type": "tool_call", "tool": name}]});
        let Ok(mut probe) = crate::ir::parse_proposal_value(probe) else { return false };
        let Some(action) = probe.actions.pop() else { return false };
        self.rt
            .runtime()
            .admission_stage()
            .preview(&action, self.session.as_deref())
            .is_some_and(|(d, _)| d.verdict == crate::permission::Verdict::Deny && d.layer == "deny-rule")
    }

    /// True when source `i`'s tool of `kind` is removed by a deny rule or
    /// plan mode (so its resources or prompts are not listed).
    fn removed(&self, i: usize, kind: ImportKind) -> bool {
        self.hub.tool_of(i, kind).is_none_or(|t| !self.offered(&t) || self.denied_outright(&t))
    }

    /// The tools offered: every imported tool not removed by a deny rule or plan mode.
    pub fn list(&self) -> Vec<Value> {
        self.hub
            .imported()
            .iter()
            .filter(|t| t.kind == ImportKind::Tool)
            .filter(|t| self.offered(&t.name))
            .filter(|t| !self.denied_outright(&t.name))
            .map(|t| {
                let mut v = json!({"name": t.name, "description": t.description, "inputSchema": t.parameters});
                if let Some(a) = &t.annotations {
                    v["annotations"] = a.clone();
                }
                v
            })
            .collect()
    }

    /// One `tools/call`: the upstream result verbatim when admitted and
    /// forwarded, else an `isError` result saying why.
    pub async fn call(&self, name: &str, arguments: Option<Value>) -> Result<Value, ErrorData> {
        // Only remote tools are tools here; `read_resource` / `get_prompt`
        // are reached through resources/read and prompts/get.
        if self.hub.kind(name) != Some(ImportKind::Tool) {
            return Err(ErrorData::invalid_params(format!("unknown tool `{name}`"), None));
        }
        Ok(match self.admit_and_forward(name, arguments.unwrap_or_else(|| json!({}))).await {
            Outcome::Raw(raw) => raw,
            Outcome::Output(Value::String(s)) => json!({"content": [{"type": "text", "text": s}]}),
            Outcome::Output(v @ Value::Object(_)) => {
                json!({"content": [{"type": "text", "text": v.to_string()}], "structuredContent": v})
            }
            Outcome::Output(v) => json!({"content": [{"type": "text", "text": v.to_string()}]}),
            Outcome::Refused(why) => error_result(why),
        })
    }

    /// A call of an imported tool as a one-action proposal: admitted by the
    /// stage, recorded in the event log, forwarded only once admitted.
    async fn admit_and_forward(&self, name: &str, parameters: Value) -> Outcome {
        let action_id = format!("mcp-{}", uuid::Uuid::new_v4());
        let proposal = json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "source": "mcp-gateway",
            "actions": [{"id": action_id, "type": "tool_call", "tool": name, "parameters": parameters}],
        });
        let proposal = match crate::ir::parse_proposal_value(proposal) {
            Ok(p) => p,
            Err(e) => return Outcome::Refused(format!("refused: {e}")),
        };
        let refuse = Arc::new(FnExecutor(|c: crate::engine::ToolCall| {
            Err::<Value, _>(ToolFailure::terminal(format!("tool `{}` has no executor in the gateway", c.tool)))
        }));
        let out = self.rt.execute_parsed(proposal, refuse, self.session.as_deref(), None).await;
        let raw = self.hub.take_raw(&action_id);
        let mut result = match out {
            Ok(result) => result,
            Err(e) => return Outcome::Refused(format!("refused: {e}")),
        };
        if let Some(raw) = raw {
            return Outcome::Raw(raw);
        }
        let Some(r) = result.results.pop() else { return Outcome::Refused("the call was not admitted".into()) };
        if r.status == crate::ir::ActionStatus::Succeeded {
            return Outcome::Output(r.output.unwrap_or(Value::Null));
        }
        let status = serde_json::to_value(r.status).ok().and_then(|v| v.as_str().map(str::to_string));
        let why = r.error.as_deref().unwrap_or("the call was not admitted");
        Outcome::Refused(format!("{} ({}): {why}", name, status.as_deref().unwrap_or("rejected")))
    }

    /// `resources/read`: a call of the serving upstream's `read_resource`
    /// tool, admitted like every call; a refusal is a JSON-RPC error saying why.
    pub async fn read_resource(&self, uri: &str) -> Result<Value, ErrorData> {
        let tool = match self.hub.resource_source(uri).await {
            Some(i) => self.hub.tool_of(i, ImportKind::ReadResource),
            None => None,
        };
        let Some(tool) = tool else {
            return Err(ErrorData::resource_not_found(
                format!("no upstream server forwards a resource `{uri}`"),
                Some(json!({"uri": uri})),
            ));
        };
        match self.admit_and_forward(&tool, json!({"uri": uri})).await {
            Outcome::Raw(raw) => Ok(raw),
            Outcome::Output(v) => Ok(
                json!({"contents": [{"uri": uri, "text": v.as_str().map_or_else(|| v.to_string(), str::to_string)}]}),
            ),
            Outcome::Refused(why) => Err(refusal(why, json!({"uri": uri, "tool": tool}))),
        }
    }

    /// `prompts/get`: a call of the upstream's `get_prompt` tool, admitted.
    pub async fn get_prompt(&self, name: &str, arguments: Option<Value>) -> Result<Value, ErrorData> {
        let found = self.hub.prompt_source(name).await;
        let tool = found.as_ref().and_then(|(i, _)| self.hub.tool_of(*i, ImportKind::GetPrompt));
        let (Some((_, remote)), Some(tool)) = (found, tool) else {
            return Err(ErrorData::invalid_params(format!("unknown prompt `{name}`"), Some(json!({"name": name}))));
        };
        let mut params = json!({"name": remote});
        if let Some(a) = arguments.filter(|a| !a.is_null()) {
            params["arguments"] = a;
        }
        match self.admit_and_forward(&tool, params).await {
            Outcome::Raw(raw) | Outcome::Output(raw) => Ok(raw),
            Outcome::Refused(why) => Err(refusal(why, json!({"prompt": name, "tool": tool}))),
        }
    }

    /// `completion/complete`, forwarded to the server of the prompt or
    /// resource it completes (in that server's own names).
    pub async fn complete(&self, mut params: Value) -> Result<Value, ErrorData> {
        let empty = json!({"completion": {"values": []}});
        let source = match params["ref"]["type"].as_str() {
            Some("ref/prompt") => {
                let name = params["ref"]["name"].as_str().unwrap_or_default().to_string();
                match self.hub.prompt_source(&name).await {
                    Some((i, remote)) => {
                        params["ref"]["name"] = json!(remote);
                        Some(i)
                    }
                    None => None,
                }
            }
            Some("ref/resource") => {
                let uri = params["ref"]["uri"].as_str().unwrap_or_default().to_string();
                self.hub.resource_source(&uri).await
            }
            _ => None,
        };
        match source {
            Some(i) => self.hub.complete(i, params).await,
            None => Ok(empty),
        }
    }
}

/// A refused `resources/read` or `prompts/get`: there is no `isError`
/// result for them, so it is a JSON-RPC error naming the layer and rule.
fn refusal(why: String, data: Value) -> ErrorData {
    ErrorData::invalid_request(why, Some(data))
}

fn error_result(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| ErrorData::internal_error(format!("cannot encode the result: {e}"), None))
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        let info = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": self.hub.capabilities(),
            "serverInfo": {"name": "car-mcp-gateway", "version": crate::VERSION},
            "instructions": "Every tools/call passes the car-runtime admission stage before it is forwarded."
        });
        serde_json::from_value(info).unwrap_or_default()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        from_json(json!({"tools": self.list()}))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let v = serde_json::to_value(&request).unwrap_or_default();
        let name = v["name"].as_str().unwrap_or_default().to_string();
        let result = self.call(&name, v.get("arguments").cloned().filter(|a| !a.is_null())).await?;
        Ok(from_json::<CallToolResult>(result)?.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        from_json(self.hub.list_resources(|i| self.removed(i, ImportKind::ReadResource)).await?)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        from_json(self.hub.list_resource_templates(|i| self.removed(i, ImportKind::ReadResource)).await?)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let v = serde_json::to_value(&request).unwrap_or_default();
        let result = Gateway::read_resource(self, v["uri"].as_str().unwrap_or_default()).await?;
        Ok(from_json::<rmcp::model::ReadResourceResult>(result)?.into())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = serde_json::to_value(&request).unwrap_or_default()["uri"].as_str().unwrap_or_default().to_string();
        let Some(i) = self.hub.resource_source(&uri).await else {
            return Err(ErrorData::resource_not_found(format!("no upstream server forwards a resource `{uri}`"), None));
        };
        self.hub.subscribe(i, &uri, &self.client, Some(context.peer.clone())).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = serde_json::to_value(&request).unwrap_or_default()["uri"].as_str().unwrap_or_default().to_string();
        match self.hub.resource_source(&uri).await {
            Some(i) => self.hub.subscribe(i, &uri, &self.client, None).await,
            None => Ok(()),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        from_json(self.hub.list_prompts(|i| self.removed(i, ImportKind::GetPrompt)).await?)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let v = serde_json::to_value(&request).unwrap_or_default();
        let result =
            Gateway::get_prompt(self, v["name"].as_str().unwrap_or_default(), v.get("arguments").cloned()).await?;
        Ok(from_json::<rmcp::model::GetPromptResult>(result)?.into())
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let level = serde_json::to_value(&request).unwrap_or_default()["level"].clone();
        self.hub.set_level(level, &self.client, context.peer.clone()).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        from_json(Gateway::complete(self, serde_json::to_value(&request).unwrap_or_default()).await?)
    }
}

type Reader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type Writer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// The process's stdin and stdout for the session. When both are pipes (as
/// an MCP client starts its servers) they are read and written on the
/// reactor, without tokio's stdio hop through a blocking thread on every
/// read and write. Not when stderr shares stdout's pipe: the pipe turns
/// non-blocking, which a log line to stderr must not meet.
fn stdio() -> (Reader, Writer) {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        use std::os::unix::fs::MetadataExt;
        use tokio::net::unix::pipe;
        let dup = |fd: std::os::fd::BorrowedFd<'_>| fd.try_clone_to_owned().ok();
        use std::os::unix::fs::FileTypeExt;
        let meta = |fd: &std::os::fd::OwnedFd| fd.try_clone().ok().and_then(|f| std::fs::File::from(f).metadata().ok());
        let (stdin, stdout, stderr) =
            (dup(std::io::stdin().as_fd()), dup(std::io::stdout().as_fd()), dup(std::io::stderr().as_fd()));
        if let (Some(i), Some(o)) = (stdin, stdout)
            && let (Some(mi), Some(mo)) = (meta(&i), meta(&o))
            && mi.file_type().is_fifo()
            && mo.file_type().is_fifo()
        {
            let shared = stderr.as_ref().and_then(meta).is_none_or(|me| (me.dev(), me.ino()) == (mo.dev(), mo.ino()));
            if !shared
                && let Ok(rx) = pipe::Receiver::from_owned_fd(i)
                && let Ok(tx) = pipe::Sender::from_owned_fd(o)
            {
                return (Box::new(rx), Box::new(tx));
            }
        }
    }
    let (i, o) = rmcp::transport::stdio();
    (Box::new(i), Box::new(o))
}

/// Serves the gateway over stdio until the client closes it.
pub async fn serve_stdio(gateway: Gateway) -> crate::Result<()> {
    use rmcp::ServiceExt;
    let running = gateway
        .serve(stdio())
        .await
        .map_err(|e| crate::Error::runtime("mcp_serve_failed", format!("cannot start the MCP session: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| crate::Error::runtime("mcp_serve_failed", format!("the MCP session failed: {e}")))?;
    Ok(())
}

/// Serves the gateway over streamable HTTP at `POST /mcp` on `listener`
/// (sessions by `MCP-Session-Id`, loopback `Origin`s only) until
/// `shutdown` resolves. Every session shares the one runtime and its
/// event log.
pub async fn serve_http(
    gateway: Gateway,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let bound = listener.local_addr().map(|a| a.ip()).unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    let svc = super::http::service(move || Ok(gateway.for_client()), bound, None);
    let routes = super::http::Routes { path: "/mcp", health: None, check_version: false, bearer: None };
    super::http::serve(listener, svc, routes, shutdown).await;
}
