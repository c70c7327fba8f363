//! Run traces, cost by agent, the metrics rollup and events truncation
//! through the facade (every binding's methods of the same names).

use std::sync::Arc;

use async_trait::async_trait;
use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{ToolCall, ToolExecutor};
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};

struct Ok;

#[async_trait]
impl ToolExecutor for Ok {
    async fn execute(&self, _call: ToolCall) -> Result<Value, ToolFailure> {
        Result::Ok(json!("ok"))
    }
}

fn v(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn submit(rt: &CarRuntime, id: &str) -> Value {
    let p =
        json!({"id": id, "source": "t", "actions": [{"id": "a", "type": "tool_call", "tool": "t", "parameters": {}}]});
    let t = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    v(&t.block_on(rt.execute_proposal(&p.to_string(), Arc::new(Ok), None, None)).unwrap())
}

fn turn(rt: &CarRuntime, run: &str, n: u64, tin: u64, tout: u64, cost: f64) -> Value {
    v(&rt
        .runs_record_model_turn(
            &json!({"run_id": run, "turn_index": n, "assistant_text": format!("turn {n}"),
                    "requested_tool_calls": [{"id": "c1", "name": "t", "arguments": {}}],
                    "model_id": "m-1", "token_usage": {"input_tokens": tin, "output_tokens": tout, "cost_usd": cost},
                    "duration_ms": 12})
            .to_string(),
        )
        .unwrap())
}

#[test]
fn a_run_groups_its_turns_and_proposals_and_ends_with_its_outcome() {
    let dir = std::env::temp_dir().join(format!("car-runs-{}", uuid::Uuid::new_v4().simple()));
    let rt = CarRuntime::new();
    rt.register_tool("t").unwrap();
    rt.set_runs_dir(Some(&dir.to_string_lossy())).unwrap();
    let started =
        v(&rt.runs_start(&json!({"intent": "fix the build", "agent_name": "Fixer One"}).to_string()).unwrap());
    let run = started["run_id"].as_str().unwrap().to_string();
    assert_eq!(started["agent_id"], "agent-fixer-one");
    assert_eq!(turn(&rt, &run, 1, 100, 20, 0.01)["ok"], true);
    submit(&rt, "p-1");
    turn(&rt, &run, 2, 50, 5, 0.005);
    let done = v(&rt
        .runs_complete(&json!({"run_id": run, "outcome": {"status": "success", "summary": "fixed"}}).to_string())
        .unwrap());
    assert_eq!(done, json!({"run_id": run, "ok": true}));
    // A proposal after completion belongs to no run.
    submit(&rt, "p-after");

    let trace = v(&rt.runs_get_trace(&json!({"run_id": run}).to_string()).unwrap());
    let r = &trace["run"];
    assert_eq!(r["status"], "success");
    assert_eq!(r["outcome"]["summary"], "fixed");
    assert_eq!(r["proposals"], json!(["p-1"]));
    assert_eq!(r["turns"].as_array().unwrap().len(), 2);
    assert_eq!(r["turns"][0]["assistant_text"], "turn 1");
    let kinds: Vec<&str> = trace["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for k in ["RunStarted", "RunModelTurn", "ProposalReceived", "ActionSucceeded", "ProposalCompleted", "RunCompleted"]
    {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    assert!(
        trace["events"].as_array().unwrap().iter().all(|e| e["proposal_id"] != "p-after"),
        "only the run's proposals"
    );

    // Listed, and kept on disk: another runtime on the directory reads it.
    let list = v(&rt.runs_list(None).unwrap());
    assert_eq!(list["count"], 1);
    assert_eq!(list["runs"][0]["turn_count"], 2);
    assert_eq!(list["runs"][0]["proposal_count"], 1);
    let other = CarRuntime::new();
    other.set_runs_dir(Some(&dir.to_string_lossy())).unwrap();
    let seen = v(&other.runs_get_trace(&json!({"run_id": run}).to_string()).unwrap());
    assert_eq!(seen["run"]["status"], "success");

    // A run another runtime started and never completed reads as incomplete.
    let dangling = v(&rt.runs_start(&json!({"intent": "left open", "agent_id": "a2"}).to_string()).unwrap());
    let l = v(&other.runs_list(Some(&json!({"agent_id": "a2"}).to_string())).unwrap());
    assert_eq!(l["runs"][0]["run_id"], dangling["run_id"]);
    assert_eq!(l["runs"][0]["status"], "incomplete");
    assert_eq!(v(&rt.runs_list(Some(r#"{"status": "running"}"#)).unwrap())["count"], 1);

    // Cost by agent and the rollup fold the turns.
    let cost = v(&rt.event_cost_by_agent());
    assert_eq!(
        cost,
        json!([{"agent": "agent-fixer-one", "calls": 2, "tokens_in": 150, "tokens_out": 25, "cost_usd": 0.015}])
    );
    let m = v(&rt.metrics_summary());
    assert_eq!(m["proposals"], 2);
    assert_eq!(m["actions"]["succeeded"], 2);
    assert_eq!(m["success_rate"], 1.0);
    assert_eq!(m["runs"], json!({"started": 2, "completed": 1, "model_turns": 2}));
    assert!((m["cost_usd"].as_f64().unwrap() - 0.015).abs() < 1e-9);

    // Truncation drops events once; the lifetime cost survives it.
    let before = rt.event_count();
    let t = v(&rt.events_truncate(r#"{"max_events": 3}"#).unwrap());
    assert_eq!(t["removed"].as_u64().unwrap(), before - 3);
    assert_eq!(t["remaining"], 3);
    let m = v(&rt.metrics_summary());
    assert!((m["cumulative_cost_usd"].as_f64().unwrap() - 0.015).abs() < 1e-9, "{m}");
    assert!(v(&rt.event_retention(None).unwrap())["policy"].get("max_events").is_none(), "the policy is unchanged");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_run_requests_are_clear_errors_and_change_nothing() {
    let rt = CarRuntime::new();
    for (params, needle) in [
        (json!({}), "intent"),
        (json!({"intent": " "}), "intent"),
        (json!({"intent": "x", "agent_id": "../etc"}), "agent_id"),
        (json!({"intent": "x", "idempotency_key": "a/b"}), "idempotency_key"),
        (json!([1]), "object"),
    ] {
        let e = rt.runs_start(&params.to_string()).unwrap_err();
        assert!(e.to_string().contains(needle), "{params}: {e}");
    }
    assert_eq!(v(&rt.runs_list(None).unwrap())["count"], 0);
    let e = rt.runs_record_model_turn(r#"{"run_id": "nope"}"#).unwrap_err();
    assert_eq!(e.code(), "run_not_found");
    let run = v(&rt.runs_start(r#"{"intent": "x", "idempotency_key": "k-1"}"#).unwrap());
    assert_eq!(run["run_id"], "k-1");
    // The same key again: the existing run, no duplicate.
    let again = v(&rt.runs_start(r#"{"intent": "x", "idempotency_key": "k-1"}"#).unwrap());
    assert_eq!(again["existing"], true);
    assert_eq!(v(&rt.runs_list(None).unwrap())["count"], 1);
    for bad in [json!({"run_id": "k-1"}), json!({"run_id": "k-1", "outcome": {"summary": "no status"}})] {
        assert!(rt.runs_complete(&bad.to_string()).unwrap_err().to_string().contains("outcome"));
    }
    rt.runs_complete(r#"{"run_id": "k-1", "outcome": {"status": "failure"}}"#).unwrap();
    let e = rt.runs_complete(r#"{"run_id": "k-1", "outcome": {"status": "success"}}"#).unwrap_err();
    assert_eq!(e.code(), "run_completed");
    let e = rt.runs_record_model_turn(r#"{"run_id": "k-1"}"#).unwrap_err();
    assert_eq!(e.code(), "run_completed");
    assert!(rt.events_truncate("{}").is_err());
}
