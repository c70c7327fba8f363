//! The daemon's MCP endpoint (`websocket-protocol.md`, "Sibling
//! endpoints"): `POST /mcp` (streamable HTTP, sessions by
//! `MCP-Session-Id`), `GET /mcp/health`, `GET /mcp` `405`, the `Origin`
//! and `MCP-Protocol-Version` rules ([`crate::mcp::http`]).
//!
//! Each MCP session has its own runtime, configured as a WebSocket
//! session is (tier layer over the daemon's ledger, the policy directory,
//! the operator's admission document). Every `tools/call` is a one-action
//! proposal run by that runtime, so it passes the same admission stage as
//! the daemon's proposals and is recorded in its event log; arguments the
//! tool's input schema rejects come back as an `isError` result (the
//! engine validates them before dispatch). `submit_proposal` needs an
//! authenticated request (`Authorization: Bearer <daemon token>`) and
//! runs the proposal itself through the admission stage.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};

use super::{Config, Daemon};
use crate::api::runtime::CarRuntime;
use crate::engine::{FnExecutor, ToolCall};
use crate::ir::ToolFailure;
use crate::mcp::http;

fn proposal_schema() -> Value {
    json!({"type": "object", "description": "an Agent IR proposal: {id?, actions: [...]}", "required": ["actions"]})
}

/// The endpoint's tools: `(name, description, input schema)`.
fn tools() -> Vec<(&'static str, &'static str, Value)> {
    let p = proposal_schema();
    let state = json!({"type": "object", "description": "the state the proposal starts from"});
    let list = json!({"type": "array", "items": {"type": "string"}});
    vec![
        (
            "verify",
            "Static verification of a proposal (structure, dependencies, tool contracts, state) without running it.",
            json!({"type": "object", "properties": {"proposal": p, "initial_state": state}, "required": ["proposal"], "additionalProperties": false}),
        ),
        (
            "simulate",
            "The state a proposal would leave behind from an initial state (state actions only; nothing runs).",
            json!({"type": "object", "properties": {"proposal": p, "initial_state": state}, "required": ["proposal"], "additionalProperties": false}),
        ),
        (
            "optimize",
            "The optimized form of a proposal (dead actions removed, independent ones grouped).",
            json!({"type": "object", "properties": {"proposal": p}, "required": ["proposal"], "additionalProperties": false}),
        ),
        (
            "transaction_check",
            "Whether a proposal's reads and writes are consistent with the given key versions and state.",
            json!({"type": "object", "properties": {"proposal": p,
                "versions": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
                "state": {"type": "object"}}, "required": ["proposal"], "additionalProperties": false}),
        ),
        (
            "permission_classify",
            "The permission tier each action of a proposal needs.",
            json!({"type": "object", "properties": {"proposal": p}, "required": ["proposal"], "additionalProperties": false}),
        ),
        (
            "explain_permission",
            "The dry run: what the daemon's admission stage would decide for each action (layer, rule, verdict), running nothing.",
            json!({"type": "object", "properties": {"proposal": p}, "required": ["proposal"], "additionalProperties": false}),
        ),
        (
            "match_shell_command",
            "Matches a shell command against shell permission rules: allow, ask or deny.",
            json!({"type": "object", "properties": {"command": {"type": "string"}, "rules": {"type": "object",
                "description": "the shell rule tables: lists of patterns",
                "properties": {"allow": list, "ask": list, "deny": list}, "additionalProperties": false}},
                "required": ["command", "rules"], "additionalProperties": false}),
        ),
        (
            "policy_check",
            "Checks a proposal against the daemon's policy directory (or the TOML `rules` given).",
            json!({"type": "object", "properties": {"proposal": p, "rules": {"type": "string", "description": "policy rules as TOML"}},
                "required": ["proposal"], "additionalProperties": false}),
        ),
        (
            "submit_proposal",
            "Runs a proposal through the daemon's admission stage (authenticated requests only). Tool calls need a host \
             executor, which MCP does not carry: they fail after admission; state actions run.",
            json!({"type": "object", "properties": {"proposal": p}, "required": ["proposal"], "additionalProperties": false}),
        ),
    ]
}

/// One MCP session of the endpoint.
#[derive(Clone)]
pub(crate) struct Endpoint {
    rt: CarRuntime,
    /// This session's name as a submitter of approvals (`mcp-<uuid>`).
    id: String,
    /// The daemon's ask approvals, when it has them.
    approvals: Option<Arc<super::approvals::Approvals>>,
    session: Option<String>,
    policy_dir: Option<PathBuf>,
    token: Option<String>,
}

fn error_result(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| ErrorData::internal_error(format!("cannot encode the result: {e}"), None))
}

fn tool_error(e: crate::Error) -> ToolFailure {
    ToolFailure::terminal(e.to_string())
}

fn parse(text: &str) -> Result<Value, ToolFailure> {
    serde_json::from_str(text).map_err(|e| ToolFailure::terminal(format!("malformed result: {e}")))
}

impl Endpoint {
    /// A session: its runtime as the daemon configures every session, with
    /// the endpoint's tools registered (their input schemas) and declared
    /// `read` unless the operator's document declares them.
    pub(crate) fn new(config: &Config, daemon: &Daemon) -> Result<Endpoint, String> {
        let defs: Vec<Value> = tools()
            .iter()
            .filter(|(n, _, _)| *n != "submit_proposal")
            .map(|(n, _, _)| json!({"name": n, "risk": "read"}))
            .collect();
        let rt = super::conn::session_runtime(config, daemon, &defs, None)?;
        for (name, description, schema) in tools() {
            let s = json!({"name": name, "description": description, "parameters": schema});
            rt.register_tool_schema(&s.to_string()).map_err(|e| format!("cannot register `{name}`: {e}"))?;
        }
        let session = rt.open_session().ok();
        Ok(Endpoint {
            rt,
            id: format!("mcp-{}", uuid::Uuid::new_v4()),
            approvals: daemon.approvals.clone(),
            session,
            policy_dir: config.policy_dir.clone(),
            token: config.token.clone(),
        })
    }

    /// Runs one of the stateless tools (inside the admitted action).
    fn run(&self, c: &ToolCall) -> Result<Value, ToolFailure> {
        let p = &c.params;
        match c.tool.as_str() {
            "verify" => {
                let state = match p.get("initial_state") {
                    Some(s) if !s.is_null() => s.clone(),
                    _ => parse(&self.rt.state_snapshot(None).map_err(tool_error)?)?,
                };
                let schemas = parse(&self.rt.list_tools())?;
                let args = json!({"proposal": p["proposal"], "initial_state": state, "tool_schemas": schemas});
                crate::api::call("verify", &args).map_err(tool_error)
            }
            "simulate" | "optimize" | "transaction_check" | "permission_classify" | "match_shell_command" => {
                crate::api::call(&c.tool, p).map_err(tool_error)
            }
            "explain_permission" => parse(
                &self
                    .rt
                    .proposal_plan(&p["proposal"].to_string(), self.session.as_deref(), None)
                    .map_err(tool_error)?,
            ),
            "policy_check" => {
                let mut args = json!({"proposal": p["proposal"]});
                match (p.get("rules").and_then(Value::as_str), &self.policy_dir) {
                    (Some(rules), _) => args["rules"] = json!(rules),
                    (None, Some(dir)) if dir.is_dir() => args["dir"] = json!(dir.to_string_lossy()),
                    (None, _) => args["rules"] = json!(""),
                }
                crate::api::call("check_policies", &args).map_err(tool_error)
            }
            other => Err(ToolFailure::terminal(format!("tool `{other}` has no executor over MCP"))),
        }
    }

    fn authenticated(&self, ctx: &RequestContext<RoleServer>) -> bool {
        let Some(expected) = &self.token else { return true };
        let Some(parts) = ctx.extensions.get::<hyper::http::request::Parts>() else { return false };
        parts
            .headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| super::auth::tokens_equal(expected, t.trim()))
    }

    /// Runs a proposal in this session: its asks wait on the daemon's
    /// approvals, shown to the approvers as a WebSocket submission's are.
    async fn execute(&self, proposal: &Value, exec: Arc<dyn crate::engine::ToolExecutor>) -> crate::Result<Value> {
        let proposal = crate::ir::parse_proposal_value(proposal.clone())?;
        let session = self.session.as_deref();
        let expected = match &self.approvals {
            Some(a) => a.expect_asks(&self.rt, &proposal, (&self.id, &self.id), session),
            None => Vec::new(),
        };
        let out = self.rt.execute_parsed(proposal, exec, session, None).await;
        if let Some(a) = &self.approvals {
            a.done(&expected.into_iter().map(|(k, _)| k).collect::<Vec<_>>(), &self.id);
        }
        // A ProposalResult is plain data (string keys only): it always serialises.
        Ok(serde_json::to_value(out?).unwrap_or_default())
    }

    /// One `tools/call`.
    async fn call(&self, name: &str, arguments: Value, ctx: &RequestContext<RoleServer>) -> Result<Value, ErrorData> {
        if !tools().iter().any(|(n, _, _)| *n == name) {
            return Err(ErrorData::invalid_params(format!("unknown tool `{name}`"), None));
        }
        let refuse = Arc::new(FnExecutor(|c: ToolCall| {
            Err::<Value, _>(ToolFailure::terminal(format!(
                "tool `{}` has no executor over MCP (tools run on a WebSocket host)",
                c.tool
            )))
        }));
        if name == "submit_proposal" {
            if !self.authenticated(ctx) {
                return Ok(error_result(
                    "submit_proposal needs an authenticated request: `Authorization: Bearer <daemon token>`".into(),
                ));
            }
            let Some(proposal) = arguments.get("proposal").filter(|p| p.is_object()) else {
                return Ok(error_result("submit_proposal: `proposal` is required and must be an object".into()));
            };
            return Ok(match self.execute(proposal, refuse).await {
                Ok(out) => object_result(out),
                Err(e) => error_result(format!("submit_proposal refused: {e}")),
            });
        }
        let proposal = json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "source": "mcp-endpoint",
            "actions": [{"id": "mcp-call", "type": "tool_call", "tool": name, "parameters": arguments}],
        });
        let me = self.clone();
        let exec = Arc::new(FnExecutor(move |c: ToolCall| me.run(&c)));
        let out = match self.execute(&proposal, exec).await {
            Ok(out) => out,
            Err(e) => return Ok(error_result(format!("{name}: refused: {e}"))),
        };
        let r = out["results"].as_array().and_then(|r| r.first()).cloned().unwrap_or_default();
        if r["status"] == "succeeded" {
            return Ok(object_result(r.get("output").cloned().unwrap_or(Value::Null)));
        }
        let why = r["error"].as_str().unwrap_or("the call was not admitted");
        Ok(error_result(format!("{name} ({}): {why}", r["status"].as_str().unwrap_or("rejected"))))
    }
}

/// A successful result: the value as text, and as `structuredContent` when
/// it is an object.
fn object_result(v: Value) -> Value {
    match v {
        Value::String(s) => json!({"content": [{"type": "text", "text": s}]}),
        v @ Value::Object(_) => json!({"content": [{"type": "text", "text": v.to_string()}], "structuredContent": v}),
        v => json!({"content": [{"type": "text", "text": v.to_string()}]}),
    }
}

impl ServerHandler for Endpoint {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        let info = json!({
            "protocolVersion": http::negotiate_version(None),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "car-server", "version": crate::VERSION},
            "instructions": "car-runtime's verification and admission tools; every tools/call passes the daemon's admission stage."
        });
        serde_json::from_value(info).unwrap_or_default()
    }

    /// The revisions `initialize` accepts ([`http::SUPPORTED_VERSIONS`]);
    /// rmcp answers the client's when listed, else `get_info`'s (the newest).
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        static VERSIONS: [ProtocolVersion; 3] =
            [ProtocolVersion::V_2024_11_05, ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25];
        debug_assert!(
            VERSIONS.iter().map(|v| v.to_string()).eq(http::SUPPORTED_VERSIONS.iter().map(|v| v.to_string()))
        );
        std::borrow::Cow::Borrowed(&VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let list: Vec<Value> = tools()
            .into_iter()
            .map(|(name, description, schema)| {
                let read_only = name != "submit_proposal";
                json!({"name": name, "description": description, "inputSchema": schema,
                       "annotations": {"readOnlyHint": read_only, "destructiveHint": !read_only, "openWorldHint": false}})
            })
            .collect();
        from_json(json!({"tools": list}))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let v = serde_json::to_value(&request).unwrap_or_default();
        let name = v["name"].as_str().unwrap_or_default().to_string();
        let arguments = v.get("arguments").cloned().filter(|a| !a.is_null()).unwrap_or_else(|| json!({}));
        let result = self.call(&name, arguments, &context).await?;
        Ok(from_json::<CallToolResult>(result)?.into())
    }
}

/// Serves the endpoint on `listener` until `shutdown` resolves.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    config: Arc<Config>,
    daemon: Arc<Daemon>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let bound = listener.local_addr().map(|a| a.ip()).unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    let started = std::time::Instant::now();
    let factory = move || Endpoint::new(&config, &daemon).map_err(std::io::Error::other);
    // A session idle for 24 hours is removed (websocket-protocol.md).
    let svc = http::service(factory, bound, Some(std::time::Duration::from_secs(24 * 60 * 60)));
    let health = Arc::new(move || {
        json!({"status": "ok", "server": "car-server", "version": crate::VERSION,
               "protocol_version": http::negotiate_version(None), "supported_versions": http::SUPPORTED_VERSIONS,
               "uptime_secs": started.elapsed().as_secs()})
    });
    let routes = http::Routes { path: "/mcp", health: Some(health), check_version: true, bearer: None };
    http::serve(listener, svc, routes, shutdown).await;
}
