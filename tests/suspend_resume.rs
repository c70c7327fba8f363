//! Suspended proposals (`on_ask = "suspend"`, `docs/suspend.md`): an ask
//! nobody answered settles the proposal as `suspended` with a checkpoint;
//! resuming it by id runs what had not run, exactly once, through
//! admission again; settled actions are never run again; a refusal on
//! resume rolls the whole proposal back; the checkpoint outlives the
//! runtime (a directory) and is claimed by one resumer at a time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use car_runtime::api::runtime::CarRuntime;
use car_runtime::checkpoint::{CheckpointBackend, Claim, FileCheckpoints};
use car_runtime::engine::{FnExecutor, ToolCall, ToolExecutor};
use serde_json::{Value, json};

type Calls = Arc<Mutex<HashMap<String, usize>>>;

fn executor(calls: Calls) -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(move |call: ToolCall| {
        *calls.lock().unwrap().entry(call.action_id.clone()).or_default() += 1;
        Ok(json!({"ran": call.tool}))
    }))
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("car-suspend-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A runtime whose `deploy` asks and suspends, over the approvals `dir`.
fn runtime(dir: &std::path::Path) -> CarRuntime {
    let rt = CarRuntime::new();
    for t in ["deploy", "build", "notify", "lint"] {
        rt.register_tool(t).unwrap();
    }
    let config = r#"{"ask":[{"tool":"deploy"}],"on_ask":"suspend"}"#;
    rt.set_permissions(Some(config), Some(dir.to_str().unwrap())).unwrap();
    rt
}

/// build -> deploy (asks) -> notify, lint independent, a state write before.
fn proposal() -> String {
    json!({"id": "rel", "actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "stage", "value": "built"}},
        {"id": "build", "type": "tool_call", "tool": "build", "dependencies": ["w"]},
        {"id": "deploy", "type": "tool_call", "tool": "deploy", "parameters": {"env": "prod"}, "dependencies": ["build"]},
        {"id": "notify", "type": "tool_call", "tool": "notify", "dependencies": ["deploy"]},
        {"id": "lint", "type": "tool_call", "tool": "lint"}
    ]})
    .to_string()
}

fn status_of(r: &Value, id: &str) -> String {
    r["results"].as_array().unwrap().iter().find(|a| a["action_id"] == id).unwrap()["status"]
        .as_str()
        .unwrap()
        .to_string()
}

fn suspend(rt: &CarRuntime, calls: &Calls) -> Value {
    let out = block_on(rt.execute_proposal(&proposal(), executor(calls.clone()), None, None)).unwrap();
    serde_json::from_str(&out).unwrap()
}

#[test]
fn an_unanswered_ask_suspends_and_resume_runs_the_rest_exactly_once() {
    let dir = tmpdir("once");
    let rt = runtime(&dir);
    let calls: Calls = Arc::default();
    let r = suspend(&rt, &calls);
    assert_eq!(r["status"], "suspended", "{r}");
    let id = r["suspension"]["id"].as_str().unwrap().to_string();
    assert_eq!(r["suspension"]["pending"][0]["action_id"], "deploy");
    assert_eq!(r["suspension"]["waiting"], json!(["notify"]));
    for (a, s) in [
        ("w", "succeeded"),
        ("build", "succeeded"),
        ("lint", "succeeded"),
        ("deploy", "proposed"),
        ("notify", "proposed"),
    ] {
        assert_eq!(status_of(&r, a), s, "{a}: {r}");
    }
    // The state write stays while suspended (nothing rolled back).
    assert_eq!(rt.state_get("stage", None).unwrap(), "\"built\"");
    let kinds: Vec<String> = serde_json::from_str::<Value>(&rt.event_query("{}").unwrap()).unwrap()["events"]
        .as_array()
        .map(|e| e.iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    assert!(kinds.contains(&"ProposalSuspended".to_string()), "{kinds:?}");
    assert!(!kinds.contains(&"ProposalCompleted".to_string()), "{kinds:?}");

    // Resuming before anyone answered suspends again, running nothing.
    let again: Value =
        serde_json::from_str(&block_on(rt.resume_proposal(&id, executor(calls.clone()))).unwrap()).unwrap();
    assert_eq!(again["status"], "suspended", "{again}");
    assert_eq!(again["suspension"]["id"], id.as_str());
    assert!(!calls.lock().unwrap().contains_key("deploy"));

    let key = r["suspension"]["pending"][0]["approval_key"].as_str().unwrap();
    rt.approval_resolve(key, "allow", "reviewed").unwrap();
    let done: Value =
        serde_json::from_str(&block_on(rt.resume_proposal(&id, executor(calls.clone()))).unwrap()).unwrap();
    assert!(done.get("status").is_none(), "{done}");
    for a in ["w", "build", "lint", "deploy", "notify"] {
        assert_eq!(status_of(&done, a), "succeeded", "{a}: {done}");
    }
    let c = calls.lock().unwrap().clone();
    for a in ["build", "lint", "deploy", "notify"] {
        assert_eq!(c.get(a), Some(&1), "{a} ran exactly once: {c:?}");
    }
    assert_eq!(done["cost"]["tool_calls"], 4, "{done}");
    // Resumed to its end: the checkpoint is gone.
    let e = block_on(rt.resume_proposal(&id, executor(calls.clone()))).unwrap_err();
    assert_eq!(e.code(), "suspension_not_found");
    assert_eq!(block_on(rt.suspended_proposals(None)).unwrap(), r#"{"suspended":[]}"#);
}

#[test]
fn a_denial_on_resume_rejects_and_rolls_the_whole_proposal_back() {
    let dir = tmpdir("deny");
    let rt = runtime(&dir);
    let calls: Calls = Arc::default();
    let r = suspend(&rt, &calls);
    let id = r["suspension"]["id"].as_str().unwrap().to_string();
    let key = r["suspension"]["pending"][0]["approval_key"].as_str().unwrap();
    rt.approval_resolve(key, "deny", "not today").unwrap();
    let done: Value =
        serde_json::from_str(&block_on(rt.resume_proposal(&id, executor(calls.clone()))).unwrap()).unwrap();
    assert_eq!(status_of(&done, "deploy"), "rejected", "{done}");
    assert_eq!(status_of(&done, "notify"), "skipped", "{done}");
    // The write made before the suspension is rolled back with the rest.
    assert_eq!(rt.state_get("stage", None).unwrap(), "null");
    let w = &done["results"][0];
    assert_eq!(w["rolled_back"], true, "{done}");
    assert!(!calls.lock().unwrap().contains_key("deploy"));
}

#[test]
fn a_checkpoint_outlives_the_runtime_and_resumes_in_another() {
    let dir = tmpdir("restart");
    let calls: Calls = Arc::default();
    let (id, key) = {
        let rt = runtime(&dir);
        let r = suspend(&rt, &calls);
        (
            r["suspension"]["id"].as_str().unwrap().to_string(),
            r["suspension"]["pending"][0]["approval_key"].as_str().unwrap().to_string(),
        )
    };
    // A new runtime over the same directory: a process restarted.
    let rt = runtime(&dir);
    let listed: Value = serde_json::from_str(&block_on(rt.suspended_proposals(None)).unwrap()).unwrap();
    assert_eq!(listed["suspended"][0]["id"], id.as_str(), "{listed}");
    rt.approval_resolve(&key, "allow", "later").unwrap();
    let done: Value =
        serde_json::from_str(&block_on(rt.resume_proposal(&id, executor(calls.clone()))).unwrap()).unwrap();
    assert!(done.get("status").is_none(), "{done}");
    // The fresh runtime holds the write the suspended run made.
    assert_eq!(rt.state_get("stage", None).unwrap(), "\"built\"");
    let c = calls.lock().unwrap().clone();
    for a in ["build", "lint", "deploy", "notify"] {
        assert_eq!(c.get(a), Some(&1), "{a} ran exactly once across both runtimes: {c:?}");
    }
}

#[test]
fn a_key_moved_while_suspended_refuses_the_resume_and_changes_nothing() {
    let dir = tmpdir("conflict");
    let rt = runtime(&dir);
    let calls: Calls = Arc::default();
    let r = suspend(&rt, &calls);
    let id = r["suspension"]["id"].as_str().unwrap().to_string();
    rt.state_set("stage", "\"someone else\"", None).unwrap();
    let e = block_on(rt.resume_proposal(&id, executor(calls.clone()))).unwrap_err();
    assert_eq!(e.code(), "suspension_conflict", "{e}");
    assert!(e.to_string().contains("stage"), "{e}");
    assert_eq!(rt.state_get("stage", None).unwrap(), "\"someone else\"");
    // Still there, and not claimed: it can be resumed once the key is back.
    rt.state_set("stage", "\"built\"", None).unwrap();
    let again: Value =
        serde_json::from_str(&block_on(rt.resume_proposal(&id, executor(calls.clone()))).unwrap()).unwrap();
    assert_eq!(again["status"], "suspended", "{again}");
}

#[test]
fn one_resumer_at_a_time_and_an_expired_lease_can_be_taken_over() {
    let dir = tmpdir("claim");
    let rt = runtime(&dir);
    let calls: Calls = Arc::default();
    let r = suspend(&rt, &calls);
    let id = r["suspension"]["id"].as_str().unwrap().to_string();
    let store = FileCheckpoints::open(dir.join("checkpoints")).unwrap();
    let first = block_on(store.claim(&id, "a", std::time::Duration::from_secs(60))).unwrap();
    assert!(matches!(first, Claim::Claimed(_)));
    match block_on(store.claim(&id, "b", std::time::Duration::from_secs(60))).unwrap() {
        Claim::Held { by, .. } => assert_eq!(by, "a"),
        other => panic!("{other:?}"),
    }
    let e = block_on(rt.resume_proposal(&id, executor(calls.clone()))).unwrap_err();
    assert_eq!(e.code(), "suspension_claimed", "{e}");
    // A claimant that died: its lease runs out and another takes over.
    block_on(store.claim(&id, "a", std::time::Duration::from_millis(1))).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(matches!(block_on(store.claim(&id, "b", std::time::Duration::from_secs(60))).unwrap(), Claim::Claimed(_)));
    block_on(store.release(&id, "b")).unwrap();
    let again: Value =
        serde_json::from_str(&block_on(rt.resume_proposal(&id, executor(calls.clone()))).unwrap()).unwrap();
    assert_eq!(again["status"], "suspended");
}

#[test]
fn resume_checks_the_owner_and_names_a_bad_id() {
    let dir = tmpdir("owner");
    let rt = runtime(&dir);
    let calls: Calls = Arc::default();
    let p = car_runtime::ir::parse_proposal(&proposal()).unwrap();
    let r = block_on(rt.execute_parsed_as(p, executor(calls.clone()), None, None, Some("agent:alice"))).unwrap();
    let id = r.suspension.as_ref().unwrap()["id"].as_str().unwrap().to_string();
    let e = block_on(rt.resume_parsed_as(&id, executor(calls.clone()), None, Some("agent:mallory"))).unwrap_err();
    assert_eq!(e.code(), "suspension_not_owned", "{e}");
    let mine: Value = serde_json::from_str(&block_on(rt.suspended_proposals(Some("agent:alice"))).unwrap()).unwrap();
    assert_eq!(mine["suspended"].as_array().unwrap().len(), 1);
    let theirs: Value =
        serde_json::from_str(&block_on(rt.suspended_proposals(Some("agent:mallory"))).unwrap()).unwrap();
    assert_eq!(theirs["suspended"], json!([]));
    let ok = block_on(rt.resume_parsed_as(&id, executor(calls.clone()), None, Some("agent:alice"))).unwrap();
    assert_eq!(ok.status.as_deref(), Some("suspended"));
    for bad in ["../x", "", "a/b", "x y"] {
        let e = block_on(rt.resume_proposal(bad, executor(calls.clone()))).unwrap_err();
        assert!(e.to_string().contains("suspension id"), "{bad}: {e}");
    }
}

#[test]
fn without_on_ask_suspend_an_unanswered_ask_is_refused_as_before() {
    let dir = tmpdir("wait");
    let rt = CarRuntime::new();
    for t in ["deploy", "build", "notify", "lint"] {
        rt.register_tool(t).unwrap();
    }
    rt.set_permissions(Some(r#"{"ask":[{"tool":"deploy"}]}"#), Some(dir.to_str().unwrap())).unwrap();
    let calls: Calls = Arc::default();
    let r = suspend(&rt, &calls);
    assert!(r.get("status").is_none(), "{r}");
    assert_eq!(status_of(&r, "deploy"), "rejected", "{r}");
    assert!(r["results"][2]["error"].as_str().unwrap().contains("approval"), "{r}");
}
