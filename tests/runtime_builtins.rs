//! `register_agent_basics`: the built-in tools run in-process, confined to a
//! root, while other tools still go to the host's executor.

use std::sync::{Arc, Mutex};

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall, ToolExecutor};
use serde_json::{Value, json};

#[test]
fn builtins_run_in_process_confined_to_the_root_and_host_tools_still_reach_the_host() {
    let dir = std::env::temp_dir().join(format!("car-basics-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "hello\n").unwrap();
    let rt = CarRuntime::new();
    // The published seven plus `shell` (`register_agent_basics` has no shell).
    rt.register_shell_tool(Some(dir.to_str().unwrap())).unwrap();
    rt.register_tool("notify").unwrap();
    let tools: Value = serde_json::from_str(&rt.list_tools()).unwrap();
    let names: Vec<_> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["source"].as_str().unwrap()))
        .collect();
    assert!(names.contains(&("read_file", "builtin")) && names.contains(&("shell", "builtin")));
    assert!(names.contains(&("notify", "user_defined")));

    let host_calls = Arc::new(Mutex::new(Vec::new()));
    let log = host_calls.clone();
    let exec: Arc<dyn ToolExecutor> = Arc::new(FnExecutor(move |call: ToolCall| {
        log.lock().unwrap().push(call.tool.clone());
        Ok(json!("sent"))
    }));
    let p = json!({"id": "p", "actions": [
        {"id": "r", "type": "tool_call", "tool": "read_file", "parameters": {"path": "notes.txt"}},
        {"id": "w", "type": "tool_call", "tool": "write_file", "parameters": {"path": "out/summary.txt", "content": "done"}},
        {"id": "n", "type": "tool_call", "tool": "notify", "parameters": {}},
        {"id": "x", "type": "tool_call", "tool": "read_file", "parameters": {"path": "../../etc/passwd"}, "failure_behavior": "skip"},
    ]})
    .to_string();
    let out = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rt.execute_proposal(&p, exec, None, None))
        .unwrap();
    let out: Value = serde_json::from_str(&out).unwrap();
    let r = &out["results"];
    assert_eq!(r[0]["output"]["content"], "hello\n");
    assert_eq!(std::fs::read_to_string(dir.join("out/summary.txt")).unwrap(), "done");
    assert_eq!(r[2]["output"], "sent");
    assert!(r[3]["error"].as_str().unwrap().contains("refused"), "{}", r[3]);
    assert_eq!(*host_calls.lock().unwrap(), vec!["notify".to_string()], "only the host tool reached the host");
    assert!(rt.register_agent_basics(Some("/no/such/dir")).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_plan_cannot_rewrite_the_runtimes_permissions_policies_or_approvals_through_the_builtins() {
    let dir = std::env::temp_dir().join(format!("car-basics-protected-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(dir.join(".car/policies")).unwrap();
    std::fs::write(dir.join(".car/permissions.toml"), "preset = \"strict\"\n").unwrap();
    std::fs::write(dir.join(".car/policies/safety.toml"), "# rules\n").unwrap();
    let rt = CarRuntime::new();
    rt.register_agent_basics(Some(dir.to_str().unwrap())).unwrap();
    let skip = |id: &str, tool: &str, params: Value| json!({"id": id, "type": "tool_call", "tool": tool, "parameters": params, "failure_behavior": "skip", "max_retries": 0});
    let p = json!({"id": "p", "actions": [
        skip("perm", "write_file", json!({"path": ".car/permissions.toml", "content": "preset = \"open\"\n"})),
        skip("pol", "edit_file", json!({"path": ".car/policies/safety.toml", "old_text": "# rules", "new_text": ""})),
        skip("appr", "write_file", json!({"path": "state/approvals.jsonl", "content": "{\"forged\":true}\n"})),
        skip("case", "write_file", json!({"path": "x/../.CAR/permissions.toml", "content": ""})),
        skip("events", "write_file", json!({"path": "audit/events.jsonl", "content": "{\"forged\":true}\n"})),
    ]})
    .to_string();
    let exec: Arc<dyn ToolExecutor> = Arc::new(FnExecutor(|_: ToolCall| Ok(json!(null))));
    let out = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rt.execute_proposal(&p, exec, None, None))
        .unwrap();
    let out: Value = serde_json::from_str(&out).unwrap();
    for r in out["results"].as_array().unwrap() {
        let e = r["error"].as_str().unwrap_or_else(|| panic!("ran: {r}"));
        assert!(e.contains("protected"), "{r}");
    }
    assert_eq!(std::fs::read_to_string(dir.join(".car/permissions.toml")).unwrap(), "preset = \"strict\"\n");
    assert_eq!(std::fs::read_to_string(dir.join(".car/policies/safety.toml")).unwrap(), "# rules\n");
    assert!(!dir.join("state/approvals.jsonl").exists());
    assert!(!dir.join("audit/events.jsonl").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
