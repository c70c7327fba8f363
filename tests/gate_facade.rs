//! The gate's JSON facade: JSON text in and out, session state carried by
//! the caller, `always` rules in a policy store file, approvals under a
//! state directory.

use car_runtime::api::gate::{approval_resolve, approvals_pending, plan_build, plan_decide};
use car_runtime::gate::{ApprovalStore, approval_key, input_digest};
use serde_json::{Value, json};

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("car-gate-facade-{tag}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ops() -> String {
    json!([{"provider": "http", "operation_name": "post", "kind": "resource", "risk": "network"}]).to_string()
}

fn post(id: &str) -> String {
    json!([{"call_id": id, "provider": "http", "operation_name": "post", "input": {"url": "https://x"}}]).to_string()
}

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap()
}

#[test]
fn session_state_round_trips_through_the_facade() {
    let built =
        parse(&plan_build(&post("a"), &ops(), Some(r#"{"turn_id": "t1", "now": "2026-01-01T00:00:00Z"}"#)).unwrap());
    assert_eq!(built["plan"]["items"][0]["decision"], "ask");
    let decided = parse(
        &plan_decide(
            &built["plan"].to_string(),
            "t1.0",
            r#"{"decision": "allow", "scope": "session"}"#,
            Some(&json!({"session": built["session"]}).to_string()),
        )
        .unwrap(),
    );
    assert_eq!(decided["item"]["decision"], "allow");
    let next = parse(
        &plan_build(
            &post("b"),
            &ops(),
            Some(&json!({"turn_id": "t2", "session": decided["session"], "now": "2026-01-01T00:01:00Z"}).to_string()),
        )
        .unwrap(),
    );
    assert_eq!(next["plan"]["items"][0]["decision"], "allow");
    assert_eq!(next["plan"]["items"][0]["decided_by"], "session");
    // Without the session the same call is asked again.
    let fresh = parse(&plan_build(&post("c"), &ops(), None).unwrap());
    assert_eq!(fresh["plan"]["items"][0]["decision"], "ask");
    // Malformed input names the argument.
    let err = plan_build("not json", &ops(), None).unwrap_err();
    assert_eq!(err.code(), "invalid_argument");
    assert!(err.to_string().contains("`calls`"), "{err}");
}

#[test]
fn always_decisions_persist_to_the_policy_store_file() {
    let dir = temp_dir("always");
    let store = dir.join("rules.jsonl");
    let opts = json!({"turn_id": "t1", "policy_store": store}).to_string();
    let built = parse(&plan_build(&post("a"), &ops(), Some(&opts)).unwrap());
    let decided = parse(
        &plan_decide(&built["plan"].to_string(), "t1.0", r#"{"decision": "allow", "scope": "always"}"#, Some(&opts))
            .unwrap(),
    );
    assert_eq!(decided["item"]["decision"], "allow");
    let later = parse(
        &plan_build(&post("b"), &ops(), Some(&json!({"turn_id": "t9", "policy_store": store}).to_string())).unwrap(),
    );
    assert_eq!(later["plan"]["items"][0]["decision"], "allow");
    assert_eq!(later["plan"]["items"][0]["decided_by"], "always:http/post");
    // Read-only: refused with the distinct code.
    let ro = json!({"policy_store": store, "policy_store_read_only": true}).to_string();
    let built = parse(
        &plan_build(
            &json!([{"call_id": "d", "provider": "http", "operation_name": "put"}]).to_string(),
            &json!([{"provider": "http", "operation_name": "put"}]).to_string(),
            Some(r#"{"turn_id": "t4"}"#),
        )
        .unwrap(),
    );
    assert_eq!(built["plan"]["items"][0]["decision"], "ask");
    let err = plan_decide(&built["plan"].to_string(), "t4.0", r#"{"decision": "allow", "scope": "always"}"#, Some(&ro))
        .unwrap_err();
    assert_eq!(err.code(), "always_scope_unavailable");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn hosts_list_and_resolve_approvals_of_a_state_directory() {
    let dir = temp_dir("approvals");
    let digest = input_digest(&json!({"service": "api"})).unwrap();
    let key = approval_key("deploy", &digest);
    {
        // The runtime asked with no approver attached: rejected, recorded.
        let runtime = ApprovalStore::open(&dir).unwrap();
        assert_eq!(runtime.request("deploy", &digest, None).unwrap_err().code(), "approval_required");
    }
    let state_dir = dir.to_str().unwrap();
    let pending = parse(&approvals_pending(state_dir).unwrap());
    assert_eq!(pending["pending"][0]["key"], key.as_str());
    assert_eq!(pending["pending"][0]["tool"], "deploy");

    let first = parse(&approval_resolve(state_dir, &key, "allow", "reviewed by ops").unwrap());
    assert_eq!((first["decision"].as_str(), first["applied"].as_bool()), (Some("allow"), Some(true)));
    let second = parse(&approval_resolve(state_dir, &key, "deny", "late").unwrap());
    assert_eq!((second["decision"].as_str(), second["applied"].as_bool()), (Some("allow"), Some(false)));
    assert_eq!(parse(&approvals_pending(state_dir).unwrap())["pending"], json!([]));

    // Through `call`, and fail closed on anything but an explicit allow.
    let runtime = ApprovalStore::open(&dir).unwrap();
    let _approver = runtime.subscribe();
    let other = input_digest(&json!({"service": "db"})).unwrap();
    runtime.request("deploy", &other, None).unwrap();
    let listed = car_runtime::api::call("approvals_pending", &json!({"state_dir": state_dir})).unwrap();
    assert_eq!(listed["pending"].as_array().unwrap().len(), 1);
    let resolved = car_runtime::api::call(
        "approval_resolve",
        &json!({"state_dir": state_dir, "key": approval_key("deploy", &other), "decision": "yes"}),
    )
    .unwrap();
    assert_eq!(resolved["decision"], "deny");
    let err = car_runtime::api::call(
        "approval_resolve",
        &json!({"state_dir": state_dir, "key": "deploy:none", "decision": "allow"}),
    )
    .unwrap_err();
    assert_eq!(err.code(), "approval_not_found");
    std::fs::remove_dir_all(dir).ok();
}
