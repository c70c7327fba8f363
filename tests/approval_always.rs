//! Issue #19: an `always` decision is a rule in the approvals directory that
//! every runtime reading that directory applies to later asks of the tool,
//! and it never lifts a deny.

use std::sync::Arc;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall};
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};

fn stub() -> Arc<FnExecutor<impl Fn(ToolCall) -> Result<Value, ToolFailure> + Send + Sync>> {
    Arc::new(FnExecutor(|_call: ToolCall| Ok(json!({"ok": true}))))
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("car-always-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn runtime(doc: &str, approvals: &std::path::Path) -> CarRuntime {
    let rt = CarRuntime::new();
    rt.register_tool("publish").unwrap();
    rt.set_permissions(Some(doc), Some(approvals.to_str().unwrap())).unwrap();
    rt
}

fn one(v: u32) -> String {
    json!({"actions": [{"id": "p", "type": "tool_call", "tool": "publish", "parameters": {"v": v}}]}).to_string()
}

async fn status(rt: &CarRuntime, v: u32) -> (String, String) {
    let out: Value = serde_json::from_str(&rt.execute_proposal(&one(v), stub(), None, None).await.unwrap()).unwrap();
    let r = &out["results"][0];
    (r["status"].as_str().unwrap().to_string(), r["error"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_applies_to_every_runtime_of_the_directory_and_never_over_a_deny() {
    let dir = scratch("dir");
    let approvals = dir.join("approvals");
    let ask = r#"{"ask": [{"tool": "publish"}]}"#;
    let first = runtime(ask, &approvals);
    // No approver: the ask is refused.
    assert_eq!(status(&first, 1).await.0, "rejected");
    let p: Value = serde_json::from_str(&first.proposal_plan(&one(1), None, None).unwrap()).unwrap();
    let d = first.proposal_decide(p["plan_id"].as_str().unwrap(), "p", "allow", "always", "trusted").unwrap();
    assert!(d.contains("\"always\""), "{d}");
    assert!(approvals.join(car_runtime::approval::rules::ALWAYS_RULES_FILE).is_file());
    // Another runtime on the same directory, another input, no approver.
    let second = runtime(ask, &approvals);
    let (s, _) = status(&second, 2).await;
    assert_eq!(s, "succeeded");
    let events: Value = serde_json::from_str(&second.event_query("{}").unwrap()).unwrap();
    let decided = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "AdmissionDecided" && e["data"]["layer"] == "approval")
        .cloned()
        .unwrap_or_else(|| panic!("{events}"));
    assert_eq!(decided["data"]["rule"]["scope"], "always", "{decided}");
    // A deny rule still refuses it.
    let denied = runtime(r#"{"deny": [{"tool": "publish"}]}"#, &approvals);
    let (s, e) = status(&denied, 3).await;
    assert_eq!(s, "rejected");
    assert!(e.contains("deny-rule"), "{e}");
    // A later `always` deny replaces the allow for every runtime.
    let p: Value = serde_json::from_str(&second.proposal_plan(&one(4), None, None).unwrap()).unwrap();
    second.proposal_decide(p["plan_id"].as_str().unwrap(), "p", "deny", "always", "no more").unwrap();
    let (s, e) = status(&first, 5).await;
    assert_eq!(s, "rejected");
    assert!(e.contains("always denied"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn always_without_an_approvals_store_is_refused_not_downgraded() {
    let rt = CarRuntime::new();
    rt.register_tool("publish").unwrap();
    rt.set_permissions(Some(r#"{"ask": [{"tool": "publish"}]}"#), None).unwrap();
    let p: Value = serde_json::from_str(&rt.proposal_plan(&one(1), None, None).unwrap()).unwrap();
    let e = rt.proposal_decide(p["plan_id"].as_str().unwrap(), "p", "allow", "always", "").unwrap_err();
    assert_eq!(e.code(), "always_scope_unavailable");
}

#[test]
fn a_corrupt_rules_file_refuses_the_ask() {
    let dir = scratch("corrupt");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(car_runtime::approval::rules::ALWAYS_RULES_FILE), "{not json\n").unwrap();
    let rt = runtime(r#"{"ask": [{"tool": "publish"}]}"#, &dir);
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let (s, e) = tokio.block_on(status(&rt, 1));
    assert_eq!(s, "rejected");
    assert!(e.contains("always` rules cannot be read"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
