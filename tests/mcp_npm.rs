//! MCP tool sources against real MCP servers from npm over stdio:
//! `@modelcontextprotocol/server-filesystem` and `server-everything`
//! (installed in `tests/mcp/node_modules` by `scripts/test`).
#![cfg(feature = "mcp")]

use std::path::PathBuf;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall, ToolExecutor};
use serde_json::{Value, json};

fn npm_server(package: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js");
    assert!(p.exists(), "{} is missing: run `npm ci` in tests/mcp (scripts/test does)", p.display());
    p.to_string_lossy().into_owned()
}

fn call(rt: &CarRuntime, tool: &str, params: Value) -> Value {
    let host: std::sync::Arc<dyn ToolExecutor> =
        std::sync::Arc::new(FnExecutor(|c: ToolCall| Err(car_runtime::ir::ToolFailure::terminal(c.tool))));
    let p = json!({"id": "p", "actions": [{"id": "a", "type": "tool_call", "tool": tool, "parameters": params}]});
    let out = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rt.execute_proposal(&p.to_string(), host, None, None))
        .unwrap();
    serde_json::from_str::<Value>(&out).unwrap()["results"][0].clone()
}

#[test]
fn the_filesystem_server_reads_and_its_destructive_tools_are_governed() {
    let dir = std::env::temp_dir().join(format!("car-mcp-fs-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    std::fs::write(dir.join("a.txt"), "hello from a file").unwrap();
    let doc = json!({"preset": "standard", "mcp": {"servers": {"fs": {
        "command": "node", "args": [npm_server("server-filesystem"), dir.to_str().unwrap()], "prefix": "fs_"}}}});
    let rt = CarRuntime::new();
    rt.set_permissions(Some(&doc.to_string()), None).unwrap();

    let stage = rt.runtime().admission_stage();
    assert_eq!(stage.definition("fs_read_text_file").risk.map(|r| r.as_str()), Some("read"));
    assert_eq!(stage.definition("fs_write_file").risk.map(|r| r.as_str()), Some("destructive"));
    assert_eq!(stage.definition("fs_create_directory").risk.map(|r| r.as_str()), Some("write"));

    let r = call(&rt, "fs_read_text_file", json!({"path": dir.join("a.txt").to_str().unwrap()}));
    assert_eq!(r["status"], "succeeded", "{r}");
    assert!(r["output"].to_string().contains("hello from a file"), "{r}");

    // The schema is the server's: a missing `path` never reaches it.
    let r = call(&rt, "fs_read_text_file", json!({}));
    assert_ne!(r["status"], "succeeded", "{r}");
    assert!(r["error"].as_str().unwrap().contains("path"), "{r}");

    // A destructive tool asks under the standard preset; without an approver it is refused.
    let target = dir.join("b.txt");
    let r = call(&rt, "fs_write_file", json!({"path": target.to_str().unwrap(), "content": "x"}));
    assert_eq!(r["status"], "rejected", "{r}");
    assert!(!target.exists(), "nothing was written");

    // The server's own refusal (a path outside its roots) is a failure with its text.
    let r = call(&rt, "fs_read_text_file", json!({"path": "/etc/hostname"}));
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("returned an error"), "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_everything_server_text_structured_and_image_results() {
    let doc = json!({"mcp": {"servers": {"ev": {"command": "node", "args": [npm_server("server-everything"), "stdio"],
        "include": ["echo", "get-sum", "get-structured-content", "get-tiny-image"]}}}});
    let rt = CarRuntime::new();
    rt.set_permissions(Some(&doc.to_string()), None).unwrap();
    let tools: Vec<Value> = serde_json::from_str(&rt.list_tools()).unwrap();
    assert_eq!(tools.len(), 4, "{tools:?}");
    assert!(tools.iter().all(|t| t["source"] == "mcp"));

    let r = call(&rt, "echo", json!({"message": "hi"}));
    assert_eq!(r["status"], "succeeded", "{r}");
    assert!(r["output"].as_str().unwrap().contains("hi"), "{r}");
    let r = call(&rt, "get-structured-content", json!({"location": "New York"}));
    assert_eq!(r["status"], "succeeded", "{r}");
    assert!(r["output"].is_object(), "structuredContent is the output: {r}");
    let r = call(&rt, "get-tiny-image", json!({}));
    assert_eq!(r["status"], "succeeded", "{r}");
    let content = r["output"]["content"].as_array().unwrap();
    assert!(content.iter().any(|c| c["type"] == "image"), "non-text content is kept: {r}");
    let r = call(&rt, "get-sum", json!({"a": "one", "b": 2}));
    assert_ne!(r["status"], "succeeded", "schema-rejected: {r}");
}
