//! A small MCP server over stdio (the official SDK's server side), used by
//! the tests as an upstream whose behaviour they control:
//!
//! - `echo {text}`: returns the text (annotated read-only);
//! - `add {a, b}`: returns `structuredContent {sum}` (annotated non-destructive, closed-world);
//! - `fail`: an `isError` result;
//! - `die`: the process exits in the middle of the call;
//! - `calls`: how many calls this process has served (a reconnect starts at 1);
//! - `drifty {x}`: its description is the content of the file named by
//!   `MCP_UPSTREAM_DESCRIPTION` at each `tools/list` (to make contracts drift).
//!
//! With `MCP_UPSTREAM_RESOURCES=1` it also declares resources with
//! `subscribe`, lists none and refuses every `resources/subscribe` (the
//! SDK's default answer, method not found); it declares prompts too, with
//! one prompt `greet {name}` and one resource template `note://{id}` (read
//! as `note <id>`), and the tool `lists` returns how many `prompts/list`
//! and `resources/templates/list` requests it has served (listed only then).
//!
//! Run: `cargo run --example mcp_upstream --features mcp` (stdio), or with
//! `--http 127.0.0.1:0 [--bearer TOKEN]` over streamable HTTP at `/mcp`
//! (it prints `listening on http://ADDR/mcp` on stdout; with `--bearer`
//! every request needs `Authorization: Bearer TOKEN`).

use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams, GetPromptResponse,
    ListPromptsResult, ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// `MCP_UPSTREAM_RESOURCES=1`: resources, prompts and the `lists` tool too.
fn resources() -> bool {
    std::env::var("MCP_UPSTREAM_RESOURCES").is_ok_and(|v| v == "1")
}

#[derive(Default)]
struct Upstream {
    calls: AtomicU64,
    /// `prompts/list` and `resources/templates/list` requests served.
    lists: AtomicU64,
}

fn parse<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        let mut caps = json!({"tools": {}});
        if resources() {
            caps["resources"] = json!({"subscribe": true});
            caps["prompts"] = json!({});
        }
        serde_json::from_value(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": caps,
            "serverInfo": {"name": "mcp-upstream", "version": "0.1.0"}
        }))
        .unwrap_or_default()
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let drifty = std::env::var("MCP_UPSTREAM_DESCRIPTION")
            .ok()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_else(|| "takes x".to_string());
        let obj = |props: Value, required: Value| json!({"type": "object", "properties": props, "required": required, "additionalProperties": false});
        let mut tools = json!([
            {"name": "echo", "description": "returns its text",
             "inputSchema": obj(json!({"text": {"type": "string"}}), json!(["text"])),
             "annotations": {"readOnlyHint": true}},
            {"name": "add", "description": "adds two numbers",
             "inputSchema": obj(json!({"a": {"type": "number"}, "b": {"type": "number"}}), json!(["a", "b"])),
             "annotations": {"readOnlyHint": false, "destructiveHint": false, "openWorldHint": false, "idempotentHint": true}},
            {"name": "fail", "description": "always fails", "inputSchema": {"type": "object"}},
            {"name": "die", "description": "exits mid-call", "inputSchema": {"type": "object"}},
            {"name": "calls", "description": "calls served by this process", "inputSchema": {"type": "object"}},
            {"name": "drifty", "description": drifty.trim(),
             "inputSchema": obj(json!({"x": {"type": "string"}}), json!([]))}
        ]);
        if resources() {
            tools.as_array_mut().unwrap().push(
                json!({"name": "lists", "description": "list requests served", "inputSchema": {"type": "object"}}),
            );
        }
        parse(json!({"tools": tools}))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let v = serde_json::to_value(&request).unwrap_or_default();
        let args = v.get("arguments").cloned().unwrap_or(json!({}));
        let text = |t: String| json!({"content": [{"type": "text", "text": t}]});
        let result = match v["name"].as_str().unwrap_or_default() {
            "echo" => text(args["text"].as_str().unwrap_or_default().to_string()),
            "add" => {
                let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                json!({"content": [{"type": "text", "text": json!({"sum": sum}).to_string()}], "structuredContent": {"sum": sum}})
            }
            "fail" => {
                json!({"content": [{"type": "text", "text": "upstream refused: it always fails"}], "isError": true})
            }
            "die" => std::process::exit(3),
            "calls" => text(n.to_string()),
            "lists" => text(self.lists.load(Ordering::SeqCst).to_string()),
            "drifty" => text(format!("x={}", args["x"].as_str().unwrap_or_default())),
            other => return Err(ErrorData::invalid_params(format!("unknown tool `{other}`"), None)),
        };
        Ok(parse::<CallToolResult>(result)?.into())
    }

    async fn list_prompts(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        parse(json!({"prompts": [{"name": "greet", "arguments": [{"name": "name", "required": true}]}]}))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let v = serde_json::to_value(&request).unwrap_or_default();
        if v["name"] != "greet" {
            return Err(ErrorData::invalid_params(format!("unknown prompt {}", v["name"]), None));
        }
        let text = format!("hello {}", v["arguments"]["name"].as_str().unwrap_or("you"));
        Ok(parse::<rmcp::model::GetPromptResult>(
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]}),
        )?
        .into())
    }

    async fn list_resource_templates(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        parse(json!({"resourceTemplates": [{"uriTemplate": "note://{id}", "name": "note"}]}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = serde_json::to_value(&request).unwrap_or_default()["uri"].as_str().unwrap_or_default().to_string();
        let Some(id) = uri.strip_prefix("note://") else {
            return Err(ErrorData::resource_not_found(format!("no resource {uri}"), None));
        };
        Ok(parse::<rmcp::model::ReadResourceResult>(json!({"contents": [{"uri": uri, "text": format!("note {id}")}]}))?
            .into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    if let Some(addr) = flag("--http") {
        use std::io::Write;
        let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
        let local = listener.local_addr().expect("address");
        println!("listening on http://{local}/mcp");
        let _ = std::io::stdout().flush();
        let svc = car_runtime::mcp::http::service(|| Ok(Upstream::default()), local.ip(), None);
        let routes = car_runtime::mcp::http::Routes {
            path: "/mcp",
            health: None,
            check_version: false,
            bearer: flag("--bearer"),
        };
        car_runtime::mcp::http::serve(listener, svc, routes, std::future::pending()).await;
        return;
    }
    let running = Upstream::default().serve(rmcp::transport::stdio()).await.expect("initialize");
    let _ = running.waiting().await;
}
