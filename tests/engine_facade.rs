//! The CarRuntime facade: names, JSON shapes and error codes.

use std::sync::Arc;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall};
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap()
}

#[test]
fn tools_register_list_unregister() {
    let rt = CarRuntime::new();
    rt.register_tool("zeta").unwrap();
    rt.register_tool_schema(
        r#"{"name":"alpha","source":"mcp","description":"d","parameters":{"type":"object"},"extra":1}"#,
    )
    .unwrap();
    rt.register_tool("zeta").unwrap();
    let list = parse(&rt.list_tools());
    assert_eq!(list.as_array().unwrap().len(), 2, "names are unique");
    assert_eq!(list[0]["name"], "alpha");
    assert_eq!(list[0]["source"], "user_defined", "source is assigned by the runtime");
    assert_eq!(list[1]["name"], "zeta");
    assert_eq!(rt.list_tools(), rt.list_tools());
    assert_eq!(rt.unregister_tool("zeta"), 1);
    assert_eq!(rt.unregister_tool("zeta"), 0);
    let e = rt.register_tool_schema(r#"{"name":"bad","parameters":{"type":"nonsense"}}"#).unwrap_err();
    assert_eq!(e.code(), "invalid_tool_schema");
    assert_eq!(rt.register_tool_schema("{").unwrap_err().family(), "input");
}

#[test]
fn policies_and_sessions() {
    let rt = CarRuntime::new();
    rt.register_policy("p1", "deny_tool", Some("x"), None, None, None, None).unwrap();
    rt.register_policy("p2", "deny_tool_param", Some("x"), Some("cmd"), Some("rm"), None, None).unwrap();
    rt.register_policy("p3", "require_state", None, Some("ok"), None, Some("true"), None).unwrap();
    let list = parse(&rt.list_policies(None).unwrap());
    assert_eq!(
        list.as_array().unwrap().iter().map(|p| p["name"].clone()).collect::<Vec<_>>(),
        [json!("p1"), json!("p2"), json!("p3")]
    );
    assert_eq!(
        rt.register_policy("p", "deny_tool", None, None, None, None, None).unwrap_err().code(),
        "invalid_argument"
    );
    assert_eq!(
        rt.register_policy("p", "bogus", Some("x"), None, None, None, None).unwrap_err().code(),
        "invalid_argument"
    );
    assert_eq!(rt.unregister_policy("p1", None).unwrap(), 1);
    assert_eq!(rt.unregister_policy("p1", None).unwrap(), 0);
    let s = rt.open_session().unwrap();
    rt.register_policy("sp", "deny_tool", Some("y"), None, None, None, Some(&s)).unwrap();
    assert_eq!(parse(&rt.list_policies(Some(&s)).unwrap())[0]["name"], "sp");
    assert!(rt.close_session(&s).unwrap());
    assert!(!rt.close_session(&s).unwrap());
    assert_eq!(
        rt.register_policy("sp", "deny_tool", Some("y"), None, None, None, Some(&s)).unwrap_err().code(),
        "unknown_session"
    );
}

#[test]
fn state_tenants_are_isolated_both_ways() {
    let rt = CarRuntime::new();
    rt.state_set("k", r#"{"a":1}"#, None).unwrap();
    rt.state_set("k", "2", Some("t1")).unwrap();
    rt.state_set("only", "null", Some("t1")).unwrap();
    assert_eq!(rt.state_get("k", None).unwrap(), r#"{"a":1}"#);
    assert_eq!(rt.state_get("k", Some("t1")).unwrap(), "2");
    assert_eq!(rt.state_get("k", Some("t2")).unwrap(), "null");
    assert!(rt.state_exists("only", Some("t1")).unwrap(), "explicit null exists");
    assert!(!rt.state_exists("only", None).unwrap());
    assert!(!rt.state_exists("tenant:t1:only", None).unwrap());
    assert_eq!(rt.state_keys(None).unwrap(), ["k"]);
    assert_eq!(rt.state_keys(Some("t1")).unwrap(), ["k", "only"]);
    assert_eq!(parse(&rt.state_snapshot(Some("t1")).unwrap()), json!({"k": 2, "only": null}));
    assert_eq!(parse(&rt.state_snapshot(None).unwrap()), json!({"k": {"a": 1}}));
    assert_eq!(rt.state_set("x", "{bad", None).unwrap_err().family(), "input");
    assert!(rt.state_set("tenant:t1:k", "1", None).is_err());
}

#[test]
fn permission_tiers() {
    let rt = CarRuntime::new();
    assert_eq!(rt.permission_get_tier(), "sandbox_edit");
    assert_eq!(rt.permission_set_tier("full_access").unwrap(), "full_access");
    assert_eq!(rt.permission_get_tier(), "full_access");
    assert_eq!(rt.permission_set_tier("root").unwrap_err().code(), "invalid_argument");
    assert_eq!(rt.clone().permission_get_tier(), "full_access", "clones share the runtime");
}

#[tokio::test]
async fn execute_proposal_with_scope_and_reentrant_tool() {
    let rt = CarRuntime::new();
    rt.register_tool("setter").unwrap();
    let inner = rt.clone();
    // The tool calls back into the same runtime while the proposal runs.
    let ex = Arc::new(FnExecutor(move |c: ToolCall| -> Result<Value, ToolFailure> {
        inner
            .state_set("from_tool", &c.params["v"].to_string(), Some("acme"))
            .map_err(|e| ToolFailure::ordinary(e.to_string()))?;
        Ok(json!({"count": inner.event_count()}))
    }));
    let p = r#"{"id":"pp","actions":[{"id":"a","type":"tool_call","tool":"setter","parameters":{"v":7}},
               {"id":"w","type":"state_write","parameters":{"key":"k","value":1}}]}"#;
    let out = parse(&rt.execute_proposal(p, ex.clone(), None, Some(r#"{"tenant_id":"acme"}"#)).await.unwrap());
    assert_eq!(out["proposal_id"], "pp");
    assert_eq!(out["results"][0]["status"], "succeeded");
    assert_eq!(out["results"][1]["state_changes"], json!({"k": {"op": "set", "value": 1}}));
    assert_eq!(
        out["cost"],
        json!({"tool_calls": 1, "actions_executed": 2, "actions_rejected": 0, "actions_skipped": 0,
        "total_duration_ms": out["cost"]["total_duration_ms"], "retries": 0})
    );
    assert_eq!(rt.state_get("from_tool", Some("acme")).unwrap(), "7");
    assert_eq!(rt.state_get("k", Some("acme")).unwrap(), "1");
    assert_eq!(rt.state_get("k", None).unwrap(), "null");
    assert_eq!(rt.execute_proposal("{}", ex.clone(), None, None).await.unwrap_err().family(), "input");
    assert_eq!(
        rt.execute_proposal(p, ex, None, Some(r#"{"tenant_id":"a:b"}"#)).await.unwrap_err().code(),
        "invalid_argument"
    );
    assert!(rt.tool_poll("nope").is_none());
    assert!(!rt.tool_cancel("nope"));
    let v = parse(&rt.verify_proposal(r#"{"actions":[{"type":"tool_call","tool":"missing"}]}"#).unwrap());
    assert_eq!(v["valid"], false);
}

#[test]
fn the_runtimes_verify_answers_serdes_text_of_its_result() {
    // Untested regions whose names and ids escape or are not ASCII, a state
    // the runtime holds, an unknown field's warning: the text is exactly
    // what serde writes for the result it holds.
    let rt = CarRuntime::new();
    rt.register_tool("t\"q").unwrap();
    rt.state_set("k\\1", "{\"a\":1}", None).unwrap();
    let text = json!({"actions": [
        {"id": "a\n1", "type": "tool_call", "tool": "t\"q", "expected_effects": {"k\\1": 2, "é'(x": [1.5]}, "extra": 1},
        {"id": "b", "type": "tool_call", "tool": "t\"q", "state_dependencies": ["k\\1"]},
        {"id": "b", "type": "tool_call", "tool": "t'"}
    ]})
    .to_string();
    let out = rt.verify_proposal(&text).unwrap();
    let result: car_runtime::ir::VerificationResult = serde_json::from_str(&out).unwrap();
    assert!(result.evidence.untested_regions.len() >= 4, "{out}");
    assert!(result.issues.iter().any(|i| i.message.contains("unknown field")), "{out}");
    assert_eq!(out, serde_json::to_string(&result).unwrap());
}
