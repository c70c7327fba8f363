//! Optimistic concurrency at execution: an action whose `assumptions` carry
//! a `read_version` fails with the `conflict` error class (never retried)
//! when the key moved; a rollback restores a key only when no other writer
//! moved it since, and reports the keys it could not restore.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use car_runtime::engine::{ExecOptions, Runtime, ToolCall, ToolExecutor};
use car_runtime::events::EventQuery;
use car_runtime::ir::{ActionStatus, ProposalResult, ToolFailure, parse_proposal};
use car_runtime::state::Scope;
use serde_json::{Value, json};

/// Counts calls; `sleep_ms` sleeps, `fail` fails, `write` writes state
/// through the runtime as another writer would.
struct Tool {
    calls: Mutex<u32>,
    rt: Mutex<Option<Arc<Runtime>>>,
}

#[async_trait]
impl ToolExecutor for Tool {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        *self.calls.lock().unwrap() += 1;
        if let Some(ms) = call.params.get("sleep_ms").and_then(Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if let Some(k) = call.params.get("write").and_then(Value::as_str) {
            let rt = self.rt.lock().unwrap().clone().unwrap();
            rt.state_set(k, json!("other writer"), None).unwrap();
        }
        if call.params.get("fail").is_some() {
            return Err(ToolFailure::ordinary("boom"));
        }
        Ok(json!({"ok": true}))
    }
}

fn setup() -> (Arc<Runtime>, Arc<Tool>) {
    let rt = Arc::new(Runtime::default());
    rt.register_tool_name("x").unwrap();
    let tool = Arc::new(Tool { calls: Mutex::new(0), rt: Mutex::new(Some(rt.clone())) });
    (rt, tool)
}

async fn run(rt: &Runtime, tool: &Arc<Tool>, proposal: Value) -> ProposalResult {
    let p = parse_proposal(&proposal.to_string()).unwrap();
    rt.execute(p, tool.clone(), ExecOptions::default()).await.unwrap()
}

fn failed_events(rt: &Runtime) -> Vec<Value> {
    let q = EventQuery { kinds: vec!["ActionFailed".into()], ..EventQuery::default() };
    rt.events().query(&q).unwrap().into_iter().map(|e| e.to_json()).collect()
}

#[tokio::test]
async fn a_moved_key_is_a_conflict_and_is_never_retried() {
    let (rt, tool) = setup();
    let v = rt.state_set("balance", json!(10), None).unwrap();
    rt.state_set("balance", json!(11), None).unwrap();
    let r = run(
        &rt,
        &tool,
        json!({"id": "p", "actions": [
            {"id": "a", "type": "tool_call", "tool": "x",
             "assumptions": [{"key": "balance", "read_version": v}],
             "failure_behavior": "retry", "max_retries": 3},
        ]}),
    )
    .await;
    let a = &r.results[0];
    assert_eq!(a.status, ActionStatus::Failed);
    let err = a.error.as_deref().unwrap();
    assert!(err.contains("conflict") && err.contains("balance"), "{err}");
    // Never dispatched, never retried.
    assert_eq!(*tool.calls.lock().unwrap(), 0);
    assert_eq!(r.cost.retries, 0);
    let ev = failed_events(&rt);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["data"]["error_class"], json!("conflict"));
}

#[tokio::test]
async fn a_current_read_version_runs() {
    let (rt, tool) = setup();
    let v = rt.state_set("balance", json!(10), None).unwrap();
    let r = run(
        &rt,
        &tool,
        json!({"actions": [
            {"id": "w", "type": "state_write", "parameters": {"key": "balance", "value": 9},
             "assumptions": [{"key": "balance", "read_version": v}]},
            // Never written: version 0.
            {"id": "n", "type": "tool_call", "tool": "x", "assumptions": [{"key": "fresh", "read_version": 0}]},
        ]}),
    )
    .await;
    assert!(r.results.iter().all(|x| x.status == ActionStatus::Succeeded), "{r:?}");
    assert_eq!(rt.state().get(&Scope::global(), "balance"), Some(json!(9)));
    assert_eq!(rt.state().version(&Scope::global(), "balance"), v + 1);
}

#[tokio::test]
async fn a_key_moved_while_the_tool_ran_fails_the_write_with_a_conflict() {
    let (rt, tool) = setup();
    let v = rt.state_set("k", json!(1), None).unwrap();
    // The tool itself moves `k` (as another writer would while it runs);
    // its expected effect on `k` is a compare-and-set against version v.
    let r = run(
        &rt,
        &tool,
        json!({"actions": [
            {"id": "t", "type": "tool_call", "tool": "x", "parameters": {"write": "k"},
             "assumptions": [{"key": "k", "read_version": v}], "expected_effects": {"k": "mine"},
             "failure_behavior": "retry", "max_retries": 2},
        ]}),
    )
    .await;
    assert_eq!(r.results[0].status, ActionStatus::Failed);
    assert_eq!(*tool.calls.lock().unwrap(), 1, "a conflict is never retried");
    assert_eq!(rt.state().get(&Scope::global(), "k"), Some(json!("other writer")));
    assert_eq!(failed_events(&rt)[0]["data"]["error_class"], json!("conflict"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_read_version_writers_have_exactly_one_winner() {
    let (rt, tool) = setup();
    for round in 0..20 {
        let key = format!("k{round}");
        let v = rt.state_set(&key, json!(0), None).unwrap();
        let mut tasks = Vec::new();
        for i in 0..4 {
            let (rt, tool, key) = (rt.clone(), tool.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                let p = json!({"actions": [
                    {"id": "w", "type": "state_write", "parameters": {"key": key, "value": i},
                     "assumptions": [{"key": key, "read_version": v}]},
                ]});
                run(&rt, &tool, p).await.results[0].status
            }));
        }
        let mut wins = 0;
        for t in tasks {
            if t.await.unwrap() == ActionStatus::Succeeded {
                wins += 1;
            }
        }
        assert_eq!(wins, 1, "round {round}");
        assert_eq!(rt.state().version(&Scope::global(), &key), v + 1);
    }
}

#[tokio::test]
async fn rollback_leaves_keys_another_writer_moved_and_reports_them() {
    let (rt, tool) = setup();
    rt.state_set("mine", json!("orig"), None).unwrap();
    rt.state_set("theirs", json!("orig"), None).unwrap();
    let r = run(
        &rt,
        &tool,
        json!({"id": "p", "actions": [
            {"id": "w1", "type": "state_write", "parameters": {"key": "mine", "value": "tx"}},
            {"id": "w2", "type": "state_write", "parameters": {"key": "theirs", "value": "tx"}},
            // Another writer moves `theirs`, then the proposal fails.
            {"id": "f", "type": "tool_call", "tool": "x", "parameters": {"write": "theirs", "fail": true},
             "dependencies": ["w1", "w2"]},
        ]}),
    )
    .await;
    assert_eq!(r.results[2].status, ActionStatus::Failed);
    let g = Scope::global();
    assert_eq!(rt.state().get(&g, "mine"), Some(json!("orig")));
    assert_eq!(rt.state().get(&g, "theirs"), Some(json!("other writer")));
    let q = EventQuery { kinds: vec!["StateRolledBack".into()], ..EventQuery::default() };
    let ev = rt.events().query(&q).unwrap()[0].to_json();
    assert_eq!(ev["data"]["keys"], json!(["mine"]));
    assert_eq!(ev["data"]["not_restored"], json!(["theirs"]));
}
