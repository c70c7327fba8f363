//! The permission chain at admission (`CarRuntime::set_permissions`): deny,
//! ask through the durable approvals store, resolution and resubmission, and
//! the fail-closed paths.

use std::sync::{Arc, Mutex};

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall, ToolExecutor};
use serde_json::{Value, json};

fn executor(log: Arc<Mutex<Vec<String>>>) -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(move |call: ToolCall| {
        log.lock().unwrap().push(call.tool.clone());
        Ok(json!({"ran": call.tool}))
    }))
}

fn run(rt: &CarRuntime, exec: &Arc<dyn ToolExecutor>, actions: Value) -> Value {
    let p = json!({"id": "p", "actions": actions}).to_string();
    let out = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rt.execute_proposal(&p, exec.clone(), None, None))
        .unwrap();
    serde_json::from_str(&out).unwrap()
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("car-perm-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn deny_rules_and_presets_reject_at_admission() {
    let rt = CarRuntime::new();
    for t in ["shell", "rm_tree", "read_file"] {
        rt.register_tool(t).unwrap();
    }
    let log = Arc::new(Mutex::new(Vec::new()));
    let exec = executor(log.clone());
    rt.set_permissions(
        Some(r#"{"preset":"strict","deny":[{"tool":"shell","argv":"rm -rf *"}],"tools":[{"name":"rm_tree","description":"","parameters":{"type":"object"},"risk":"destructive"}]}"#),
        None,
    )
    .unwrap();
    let out = run(
        &rt,
        &exec,
        json!([
            {"id": "a", "type": "tool_call", "tool": "rm_tree", "failure_behavior": "skip"},
            {"id": "b", "type": "tool_call", "tool": "shell", "parameters": {"command": "rm -rf /"}, "failure_behavior": "skip"},
            {"id": "c", "type": "tool_call", "tool": "read_file", "parameters": {"path": "x"}, "failure_behavior": "skip"},
        ]),
    );
    let r = &out["results"];
    assert_eq!(r[0]["status"], "rejected");
    assert!(r[0]["error"].as_str().unwrap().contains("denied by deny-rule"), "{}", r[0]);
    assert_eq!(r[1]["status"], "rejected");
    assert_eq!(r[2]["status"], "succeeded", "a built-in read tool is allowed under strict");
    assert_eq!(*log.lock().unwrap(), vec!["read_file".to_string()]);

    // Removing the chain lets the calls through again.
    rt.set_permissions(None, None).unwrap();
    let out = run(&rt, &exec, json!([{"id": "a", "type": "tool_call", "tool": "rm_tree"}]));
    assert_eq!(out["results"][0]["status"], "succeeded");
}

#[test]
fn an_ask_records_a_durable_pending_approval_that_a_host_resolves_for_the_next_submission() {
    let dir = tmpdir("ask");
    let rt = CarRuntime::new();
    rt.register_tool("shell").unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let exec = executor(log.clone());
    rt.set_permissions(Some(r#"{"preset":"standard"}"#), Some(dir.to_str().unwrap())).unwrap();
    let call = json!([{"id": "s", "type": "tool_call", "tool": "shell", "parameters": {"command": "make test"}}]);

    let out = run(&rt, &exec, call.clone());
    let err = out["results"][0]["error"].as_str().unwrap().to_string();
    assert_eq!(out["results"][0]["status"], "rejected");
    assert!(err.contains("approval required"), "{err}");
    assert!(log.lock().unwrap().is_empty(), "nothing ran");

    let pending: Value =
        serde_json::from_str(&car_runtime::api::gate::approvals_pending(dir.to_str().unwrap()).unwrap()).unwrap();
    let key = pending["pending"][0]["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("shell:"), "{key}");
    assert!(err.contains(&key), "the error names the approval key: {err}");

    // The host approves (here from a second runtime over the same store: durable).
    car_runtime::api::gate::approval_resolve(dir.to_str().unwrap(), &key, "allow", "looks fine").unwrap();
    let out = run(&rt, &exec, call.clone());
    assert_eq!(out["results"][0]["status"], "succeeded", "{}", out["results"][0]);
    assert_eq!(*log.lock().unwrap(), vec!["shell".to_string()]);

    // The approval was used: the next identical call asks again.
    let out = run(&rt, &exec, call.clone());
    assert_eq!(out["results"][0]["status"], "rejected");

    // A denial applies and says so; anything but an explicit allow denies.
    let pending: Value =
        serde_json::from_str(&car_runtime::api::gate::approvals_pending(dir.to_str().unwrap()).unwrap()).unwrap();
    let key = pending["pending"][0]["key"].as_str().unwrap().to_string();
    car_runtime::api::gate::approval_resolve(dir.to_str().unwrap(), &key, "maybe", "unclear").unwrap();
    let out = run(&rt, &exec, call);
    assert_eq!(out["results"][0]["status"], "rejected");
    assert!(out["results"][0]["error"].as_str().unwrap().contains("was denied"), "{}", out["results"][0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_ask_without_an_approvals_store_is_a_rejection() {
    let rt = CarRuntime::new();
    rt.register_tool("deploy").unwrap();
    rt.set_permissions(Some(r#"{"ask":[{"tool":"deploy"}]}"#), None).unwrap();
    let out = run(&rt, &executor(Arc::default()), json!([{"id": "d", "type": "tool_call", "tool": "deploy"}]));
    assert_eq!(out["results"][0]["status"], "rejected");
    assert!(out["results"][0]["error"].as_str().unwrap().contains("approval required"));
}

/// A hook's substituted input is applied (issue #18): the tool receives the
/// substituted input, never the original, and a deny rule sees it.
#[test]
fn a_substituted_input_is_applied_not_bypassed() {
    let rt = CarRuntime::new();
    rt.register_tool("shell").unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    rt.set_permissions(
        Some(r#"{"preset":"open","hooks":[{"tool":"shell","modified_input":{"command":"echo sanitized"}}]}"#),
        None,
    )
    .unwrap();
    let params = log.clone();
    let exec: Arc<dyn ToolExecutor> = Arc::new(FnExecutor(move |call: ToolCall| {
        params.lock().unwrap().push(call.params.to_string());
        Ok(json!({}))
    }));
    let out = run(
        &rt,
        &exec,
        json!([{"id": "s", "type": "tool_call", "tool": "shell", "parameters": {"command": "cat secrets"}}]),
    );
    assert_eq!(out["results"][0]["status"], "succeeded", "{}", out["results"][0]);
    let seen = format!("{:?}", log.lock().unwrap());
    assert!(seen.contains("echo sanitized") && !seen.contains("cat secrets"), "{seen}");

    // Substituted into something a deny rule matches: refused, nothing runs.
    let rt = CarRuntime::new();
    rt.register_tool("shell").unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    rt.set_permissions(
        Some(r#"{"preset":"open","shell":{"deny":["rm **"]},"hooks":[{"tool":"shell","modified_input":{"command":"rm -rf x"}}]}"#),
        None,
    )
    .unwrap();
    let out = run(
        &rt,
        &executor(log.clone()),
        json!([{"id": "s", "type": "tool_call", "tool": "shell", "parameters": {"command": "ls"}}]),
    );
    assert_eq!(out["results"][0]["status"], "rejected", "{}", out["results"][0]);
    assert!(log.lock().unwrap().is_empty());
}

#[test]
fn bad_configurations_are_errors_that_change_nothing() {
    let rt = CarRuntime::new();
    rt.register_tool("t").unwrap();
    rt.set_permissions(Some(r#"{"deny":[{"tool":"t"}]}"#), None).unwrap();
    assert!(rt.set_permissions(Some(r#"{"preset":"lenient"}"#), None).is_err());
    assert!(rt.set_permissions(Some(r#"{"tools":{"name":"x"}}"#), None).is_err());
    // The earlier chain still applies.
    let out = run(&rt, &executor(Arc::default()), json!([{"id": "a", "type": "tool_call", "tool": "t"}]));
    assert_eq!(out["results"][0]["status"], "rejected");
}

#[test]
fn policies_are_still_enforced_after_a_panic_poisoned_the_policy_lock() {
    let rt = CarRuntime::new();
    rt.register_tool("deploy").unwrap();
    rt.register_policy("no_deploy", "deny_tool", Some("deploy"), None, None, None, None).unwrap();
    let poison = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = rt.runtime().with_policies_mut(|_| panic!("a host callback panicked while changing policies"));
    }));
    assert!(poison.is_err());
    let log = Arc::new(Mutex::new(Vec::new()));
    let out = run(&rt, &executor(log.clone()), json!([{"id": "d", "type": "tool_call", "tool": "deploy"}]));
    assert_eq!(out["results"][0]["status"], "rejected", "fail closed: {}", out["results"][0]);
    assert!(log.lock().unwrap().is_empty());
}
