//! MCP servers as tool sources (feature `mcp`), against a real MCP server
//! over stdio: `examples/mcp_upstream.rs`, built on the official SDK's
//! server side (`cargo build --all-targets --all-features` builds it).
#![cfg(feature = "mcp")]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall, ToolExecutor};
use serde_json::{Value, json};

fn upstream() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("examples").join("mcp_upstream");
    assert!(p.exists(), "{} is missing: build with `cargo build --all-targets --all-features`", p.display());
    p
}

fn host(log: Arc<Mutex<Vec<String>>>) -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(move |call: ToolCall| {
        log.lock().unwrap().push(call.tool.clone());
        Ok(json!({"host": call.tool}))
    }))
}

fn run(rt: &CarRuntime, actions: Value) -> Value {
    let p = json!({"id": "p", "actions": actions}).to_string();
    let out = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rt.execute_proposal(&p, host(Arc::default()), None, None))
        .unwrap();
    serde_json::from_str(&out).unwrap()
}

fn call(rt: &CarRuntime, tool: &str, params: Value) -> Value {
    run(rt, json!([{"id": "a", "type": "tool_call", "tool": tool, "parameters": params}]))["results"][0].clone()
}

fn server(extra: Value) -> Value {
    let mut s = json!({"command": upstream().to_str().unwrap(), "prefix": "up_"});
    for (k, v) in extra.as_object().unwrap() {
        s[k] = v.clone();
    }
    s
}

fn configured(doc: Value) -> CarRuntime {
    let rt = CarRuntime::new();
    rt.set_permissions(Some(&doc.to_string()), None).unwrap();
    rt
}

#[test]
fn tools_are_imported_with_their_contract_source_and_risk() {
    let rt = configured(json!({"mcp": {"servers": {"t": server(json!({"risk": {"drifty": "network"}}))}}}));
    let tools: Vec<Value> = serde_json::from_str(&rt.list_tools()).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["up_add", "up_calls", "up_die", "up_drifty", "up_echo", "up_fail"]);
    let echo = tools.iter().find(|t| t["name"] == "up_echo").unwrap();
    assert_eq!(echo["source"], "mcp");
    assert_eq!(echo["description"], "returns its text");
    assert_eq!(echo["parameters"]["required"], json!(["text"]));
    let add = tools.iter().find(|t| t["name"] == "up_add").unwrap();
    assert_eq!(add["idempotent"], true, "idempotentHint");

    let stage = rt.runtime().admission_stage();
    let risk = |n: &str| stage.definition(n).risk.map(|r| r.as_str());
    assert_eq!(risk("up_echo"), Some("read"), "readOnlyHint");
    assert_eq!(risk("up_add"), Some("write"), "not destructive, closed world");
    assert_eq!(risk("up_drifty"), Some("network"), "the risk map wins");
    assert_eq!(risk("up_fail"), None, "unannotated and unmapped: undeclared");

    // The document in force is the operator's: the imported definitions are not in it.
    let doc: Value = serde_json::from_str(&rt.admission_config()).unwrap();
    assert!(doc.get("tools").is_none(), "{doc}");
    assert!(doc["mcp"]["servers"]["t"].is_object());
}

#[test]
fn results_map_to_outputs_and_failures() {
    let rt = configured(json!({"mcp": {"servers": {"t": server(json!({}))}}}));
    let r = call(&rt, "up_echo", json!({"text": "hello"}));
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["output"], "hello");
    let r = call(&rt, "up_add", json!({"a": 2, "b": 3}));
    assert_eq!(r["output"], json!({"sum": 5.0}), "structuredContent is the output");
    let r = call(&rt, "up_fail", json!({}));
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("upstream refused: it always fails"), "{r}");
}

#[test]
fn parameters_are_validated_against_the_input_schema_before_dispatch() {
    let rt = configured(json!({"mcp": {"servers": {"t": server(json!({}))}}}));
    let r = call(&rt, "up_echo", json!({"text": 5}));
    assert_ne!(r["status"], "succeeded", "{r}");
    assert!(r["error"].as_str().unwrap().contains("text") || r["error"].as_str().unwrap().contains("string"), "{r}");
    let r = call(&rt, "up_echo", json!({"text": "x", "extra": 1}));
    assert_ne!(r["status"], "succeeded", "additionalProperties: false: {r}");
    // Nothing reached the server: the first call it serves is number 1.
    assert_eq!(call(&rt, "up_calls", json!({}))["output"], "1");
}

#[test]
fn calls_pass_the_admission_stage() {
    let rt = configured(json!({
        "deny": [{"tool": "up_fail"}],
        "mcp": {"servers": {"t": server(json!({"needs_approval": {"add": true}}))}}
    }));
    let r = call(&rt, "up_fail", json!({}));
    assert_eq!(r["status"], "rejected", "{r}");
    let r = call(&rt, "up_add", json!({"a": 1, "b": 1}));
    assert_eq!(r["status"], "rejected", "needs_approval asks; no store: {r}");
    assert!(r["error"].as_str().unwrap().contains("approval required"), "{r}");
    // Neither reached the server.
    assert_eq!(call(&rt, "up_calls", json!({}))["output"], "1");
    // The decisions are in the event log.
    let events = rt.event_query("{}").unwrap();
    assert!(events.contains("up_fail") && events.contains("deny"), "{events}");
}

#[test]
fn include_exclude_and_a_name_conflict() {
    let rt = configured(
        json!({"mcp": {"servers": {"t": server(json!({"include": ["e*", "add", "fail"], "exclude": ["fail"]}))}}}),
    );
    let tools: Vec<Value> = serde_json::from_str(&rt.list_tools()).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["up_add", "up_echo"]);

    // Without a prefix, a remote tool may not shadow a host tool.
    let rt = CarRuntime::new();
    rt.register_tool("echo").unwrap();
    let mut s = server(json!({}));
    s.as_object_mut().unwrap().remove("prefix");
    let e = rt.set_permissions(Some(&json!({"mcp": {"servers": {"t": s}}}).to_string()), None).unwrap_err();
    assert_eq!(e.code(), "mcp_tool_conflict", "{e}");
    assert!(e.to_string().contains("`echo`"), "{e}");
}

#[test]
fn bad_configurations_are_errors_that_change_nothing() {
    let rt = configured(json!({"deny": [{"tool": "x"}]}));
    let before = rt.admission_config();
    for (doc, code, needle) in [
        (json!({"mcp": {"servers": {"s": {}}}}), "invalid_admission_config", ""),
        (
            json!({"mcp": {"servers": {"s": {"command": "x", "url": "http://127.0.0.1:1/mcp"}}}}),
            "invalid_mcp_config",
            "`s`",
        ),
        (
            json!({"mcp": {"servers": {"s": {"command": "/nonexistent/mcp-server"}}}}),
            "mcp_connect_failed",
            "/nonexistent/mcp-server",
        ),
        (json!({"mcp": {"servers": {"s": {"command": "x", "bogus": 1}}}}), "invalid_admission_config", "bogus"),
    ] {
        let e = rt.set_permissions(Some(&doc.to_string()), None).unwrap_err();
        if code != "invalid_admission_config" || !needle.is_empty() {
            assert_eq!(e.code(), code, "{doc}: {e}");
        }
        assert!(e.to_string().contains(needle), "{doc}: {e}");
        assert_eq!(rt.admission_config(), before, "nothing changed");
    }
    assert_eq!(rt.list_tools(), "[]");
    // Two servers importing one name; a prefix that makes an illegal name.
    let up = upstream();
    let two = json!({"mcp": {"servers": {"a": {"command": up}, "b": {"command": up}}}});
    let e = rt.set_permissions(Some(&two.to_string()), None).unwrap_err();
    assert_eq!(e.code(), "duplicate_tool", "{e}");
    let dotted = json!({"mcp": {"servers": {"a": {"command": up, "prefix": "a."}}}});
    let e = rt.set_permissions(Some(&dotted.to_string()), None).unwrap_err();
    assert_eq!(e.code(), "invalid_mcp_tool", "{e}");
    assert!(e.to_string().contains("`a.echo`"), "{e}");
    assert_eq!(rt.admission_config(), before, "nothing changed");
    assert_eq!(rt.list_tools(), "[]");
}

#[test]
fn a_server_that_dies_mid_call_fails_the_action_and_reconnects_for_the_next() {
    let rt = configured(json!({"mcp": {"servers": {"t": server(json!({}))}}}));
    assert_eq!(call(&rt, "up_calls", json!({}))["output"], "1");
    assert_eq!(call(&rt, "up_calls", json!({}))["output"], "2");
    let r = call(&rt, "up_die", json!({}));
    assert_eq!(r["status"], "failed", "{r}");
    let err = r["error"].as_str().unwrap();
    assert!(err.contains("server `t` failed during the call") && err.contains("reconnected"), "{err}");
    // A fresh process serves the next call.
    let r = call(&rt, "up_calls", json!({}));
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["output"], "1");
    let status: Value = serde_json::from_str(&rt.mcp_status()).unwrap();
    assert_eq!(status["servers"]["t"]["connections"], 2);
    assert_eq!(status["servers"]["t"]["drift"], json!([]), "same contracts: no drift");
}

fn drift_setup(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("car-mcp-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let desc = dir.join("description.txt");
    std::fs::write(&desc, "takes x").unwrap();
    (dir, desc)
}

#[test]
fn contract_drift_is_reported_and_pin_refuses_the_changed_tool() {
    for pin in [false, true] {
        let (dir, desc) = drift_setup("drift");
        let s = server(json!({"pin": pin, "env": {"MCP_UPSTREAM_DESCRIPTION": desc.to_str().unwrap()}}));
        let rt = configured(json!({"mcp": {"servers": {"t": s}}}));
        assert_eq!(call(&rt, "up_drifty", json!({"x": "1"}))["output"], "x=1");
        let before: Value = serde_json::from_str(&rt.mcp_status()).unwrap();

        // The server changes the tool's description, then restarts.
        std::fs::write(&desc, "takes x and now also sends it somewhere").unwrap();
        assert_eq!(call(&rt, "up_die", json!({}))["status"], "failed");
        let r = call(&rt, "up_drifty", json!({"x": "2"}));
        let status: Value = serde_json::from_str(&rt.mcp_status()).unwrap();
        let drift = &status["servers"]["t"]["drift"][0];
        assert_eq!(drift["changed"], json!(["drifty"]), "{status}");
        assert_eq!(drift["old_hash"], before["servers"]["t"]["toolset_hash"]);
        assert_ne!(drift["old_hash"], drift["new_hash"]);
        assert_eq!(drift["new_hash"], status["servers"]["t"]["toolset_hash"]);
        let row = status["servers"]["t"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "up_drifty")
            .unwrap()
            .clone();
        if pin {
            assert_eq!(r["status"], "failed", "{r}");
            let err = r["error"].as_str().unwrap();
            assert!(err.contains("pin = true") && err.contains(row["current_hash"].as_str().unwrap()), "{err}");
            assert_eq!(row["refused"], true);
            // An unchanged tool of the same server still runs.
            assert_eq!(call(&rt, "up_echo", json!({"text": "ok"}))["output"], "ok");
            // Accepting the new contract: pin it.
            let s = server(json!({"pin": true, "env": {"MCP_UPSTREAM_DESCRIPTION": desc.to_str().unwrap()},
                                  "pinned": {"drifty": row["current_hash"]}}));
            rt.set_permissions(Some(&json!({"mcp": {"servers": {"t": s}}}).to_string()), None).unwrap();
            assert_eq!(call(&rt, "up_drifty", json!({"x": "3"}))["output"], "x=3");
        } else {
            assert_eq!(r["output"], "x=2", "without pin the drifted tool runs: {r}");
            assert_eq!(row["refused"], false);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_pinned_hash_that_does_not_match_refuses_from_the_first_connection() {
    let s = server(json!({"pin": true, "pinned": {"echo": "0000"}}));
    let rt = configured(json!({"mcp": {"servers": {"t": s}}}));
    let r = call(&rt, "up_echo", json!({"text": "x"}));
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("from 0000 to"), "{r}");
    assert_eq!(call(&rt, "up_add", json!({"a": 1, "b": 2}))["output"], json!({"sum": 3.0}));
}

#[test]
fn reconfiguring_keeps_an_unchanged_hub_and_removing_the_section_unregisters() {
    let doc = json!({"mcp": {"servers": {"t": server(json!({}))}}});
    let rt = configured(doc.clone());
    assert_eq!(call(&rt, "up_calls", json!({}))["output"], "1");
    let mut with_deny = doc.clone();
    with_deny["deny"] = json!([{"tool": "up_fail"}]);
    rt.set_permissions(Some(&with_deny.to_string()), None).unwrap();
    assert_eq!(call(&rt, "up_calls", json!({}))["output"], "2", "the same connection");
    rt.set_permissions(Some("{}"), None).unwrap();
    assert_eq!(rt.list_tools(), "[]");
    let _ = Mutex::new(());
}
