//! The gateway (`car mcp serve`): an MCP server in front of the configured
//! upstream MCP servers. Every `tools/call` is a one-action proposal run by
//! the runtime, so it passes the admission stage like any other call (a
//! refusal is an `isError` result naming the layer and rule), is recorded
//! in the event log, and is forwarded only once admitted. `tools/list`
//! hides the tools a deny rule (or plan mode) removes.
//!
//! Like the daemon and the CLI, this is a front end over
//! [`crate::api::runtime::CarRuntime`]: it translates, it does not decide.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult, PaginatedRequestParams};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
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
    plan_mode: bool,
}

impl Gateway {
    /// A gateway over a runtime already configured with an `mcp` section.
    /// `plan_mode` offers and admits only the tools whose risk is `read`.
    pub fn new(rt: CarRuntime, plan_mode: bool) -> crate::Result<Self> {
        let hub = rt.mcp_hub().ok_or_else(|| {
            crate::Error::config(
                "invalid_mcp_config",
                "the gateway needs at least one server in the configuration's `mcp` section",
                json!({"key": "mcp"}),
            )
        })?;
        hub.keep_raw_results(true);
        let session = rt.open_session().ok();
        Ok(Gateway { rt, hub, session, plan_mode })
    }

    /// The runtime underneath (its event log holds every call and verdict).
    pub fn runtime(&self) -> &CarRuntime {
        &self.rt
    }

    fn read_only(&self, name: &str) -> bool {
        self.rt.runtime().admission_stage().definition(name).risk == Some(crate::permission::Risk::Read)
    }

    /// True when a deny rule refuses the tool whatever its arguments
    /// (a call with no arguments is denied by the deny layer).
    fn denied_outright(&self, name: &str) -> bool {
        let proposal = json!({"id": "tools-list", "actions": [{"id": "probe", "type": "tool_call", "tool": name}]});
        let Ok(plan) = self.rt.proposal_plan(&proposal.to_string(), None, None) else { return false };
        let plan: Value = serde_json::from_str(&plan).unwrap_or_default();
        plan["items"]
            .as_array()
            .and_then(|items| items.first())
            .is_some_and(|i| i["verdict"] == "deny" && i["layer"] == "deny-rule")
    }

    /// The tools offered: every imported tool not removed by a deny rule or plan mode.
    pub fn list(&self) -> Vec<Value> {
        self.hub
            .imported()
            .iter()
            .filter(|t| !self.plan_mode || self.read_only(&t.name))
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
        if !self.hub.serves(name) {
            return Err(ErrorData::invalid_params(format!("unknown tool `{name}`"), None));
        }
        if self.plan_mode && !self.read_only(name) {
            return Ok(error_result(format!("tool `{name}` is removed by plan mode (only read tools are offered)")));
        }
        let action_id = format!("mcp-{}", uuid::Uuid::new_v4());
        let proposal = json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "source": "mcp-gateway",
            "actions": [{"id": action_id, "type": "tool_call", "tool": name,
                         "parameters": arguments.unwrap_or_else(|| json!({}))}],
        });
        let refuse = Arc::new(FnExecutor(|c: crate::engine::ToolCall| {
            Err::<Value, _>(ToolFailure::terminal(format!("tool `{}` has no executor in the gateway", c.tool)))
        }));
        let out = self.rt.execute_proposal(&proposal.to_string(), refuse, self.session.as_deref(), None).await;
        let raw = self.hub.take_raw(&action_id);
        let result: Value = match out {
            Ok(text) => serde_json::from_str(&text).unwrap_or_default(),
            Err(e) => return Ok(error_result(format!("refused: {e}"))),
        };
        let r = result["results"].as_array().and_then(|r| r.first()).cloned().unwrap_or_default();
        if let Some(raw) = raw {
            return Ok(raw);
        }
        if r["status"] == "succeeded" {
            let output = r.get("output").cloned().unwrap_or(Value::Null);
            return Ok(match output {
                Value::String(s) => json!({"content": [{"type": "text", "text": s}]}),
                v @ Value::Object(_) => {
                    json!({"content": [{"type": "text", "text": v.to_string()}], "structuredContent": v})
                }
                v => json!({"content": [{"type": "text", "text": v.to_string()}]}),
            });
        }
        let why = r["error"].as_str().unwrap_or("the call was not admitted");
        Ok(error_result(format!("{} ({}): {why}", name, r["status"].as_str().unwrap_or("rejected"))))
    }
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
            "capabilities": {"tools": {}},
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
}

/// Serves the gateway over stdio until the client closes it.
pub async fn serve_stdio(gateway: Gateway) -> crate::Result<()> {
    use rmcp::ServiceExt;
    let running = gateway
        .serve(rmcp::transport::stdio())
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
    let svc = super::http::service(move || Ok(gateway.clone()), bound, None);
    let routes = super::http::Routes { path: "/mcp", health: None, check_version: false, bearer: None };
    super::http::serve(listener, svc, routes, shutdown).await;
}
