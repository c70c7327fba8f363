//! `compensate_on_abort`: reverse completion order, tool and action_ref
//! compensations, outcomes in results and events; off by default.

use std::sync::{Arc, Mutex};

use car_runtime::engine::{ExecOptions, FnExecutor, Runtime, RuntimeOptions, ToolCall, ToolExecutor};
use car_runtime::ir::{ActionStatus, ToolFailure, parse_proposal};
use serde_json::{Value, json};

fn setup(opts: RuntimeOptions) -> (Runtime, Arc<Mutex<Vec<String>>>, Arc<dyn ToolExecutor>) {
    let rt = Runtime::new(opts);
    for t in ["do", "undo1", "undo2", "undo_bad", "fail"] {
        rt.register_tool_name(t).unwrap();
    }
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let ex: Arc<dyn ToolExecutor> = Arc::new(FnExecutor(move |c: ToolCall| {
        l.lock().unwrap().push(format!("{}:{}", c.tool, c.action_id));
        match c.tool.as_str() {
            "fail" => Err(ToolFailure::ordinary("fails")),
            "undo_bad" => Err(ToolFailure::ordinary("cannot undo")),
            _ => Ok(json!(null)),
        }
    }));
    (rt, log, ex)
}

fn proposal() -> Value {
    json!({"actions": [
        {"id": "c1", "type": "tool_call", "tool": "do", "reversibility": "compensable",
         "compensation": {"type": "tool", "tool": "undo1", "parameters": {"x": 1}}},
        {"id": "c2", "type": "tool_call", "tool": "do", "reversibility": "compensable", "dependencies": ["c1"],
         "compensation": {"type": "action_ref", "action_id": "u2"}},
        {"id": "c3", "type": "tool_call", "tool": "do", "reversibility": "compensable", "dependencies": ["c2"],
         "compensation": {"type": "tool", "tool": "undo_bad"}},
        {"id": "i4", "type": "tool_call", "tool": "do", "dependencies": ["c3"]},
        {"id": "f", "type": "tool_call", "tool": "fail", "dependencies": ["i4"]},
        {"id": "u2", "type": "tool_call", "tool": "undo2", "dependencies": ["f"]},
    ]})
}

#[tokio::test]
async fn compensations_run_in_reverse_completion_order() {
    let (rt, log, ex) = setup(RuntimeOptions::default().compensate_on_abort(true));
    let p = parse_proposal(&proposal().to_string()).unwrap();
    let r = rt.execute(p, ex, ExecOptions::default()).await.unwrap();
    let calls = log.lock().unwrap().clone();
    assert_eq!(calls, ["do:c1", "do:c2", "do:c3", "do:i4", "fail:f", "undo_bad:c3", "undo2:u2", "undo1:c1"]);
    assert!(r.results[0].compensated);
    assert!(r.results[1].compensated);
    assert!(!r.results[2].compensated);
    assert_eq!(r.results[2].compensation_error.as_deref(), Some("cannot undo"));
    assert!(!r.results[3].compensated, "irreversible actions are not compensated");
    assert_eq!(r.results[5].status, ActionStatus::Skipped);
    assert!(r.results[..4].iter().all(|x| x.rolled_back));
    let wire = serde_json::to_value(&r).unwrap();
    assert_eq!(wire["results"][0]["compensated"], true);
    assert!(wire["results"][3].get("compensated").is_none());
    let q = |k: &str| rt.events().query(&serde_json::from_value(json!({"kinds": [k]})).unwrap()).unwrap();
    assert_eq!(q("CompensationSucceeded").len(), 2);
    let failed = q("CompensationFailed");
    assert_eq!(failed[0].action_id.as_deref(), Some("c3"));
    assert_eq!(failed[0].data.to_value()["error"], "cannot undo");
}

#[tokio::test]
async fn off_by_default() {
    let (rt, log, ex) = setup(RuntimeOptions::default());
    let p = parse_proposal(&proposal().to_string()).unwrap();
    let r = rt.execute(p, ex, ExecOptions::default()).await.unwrap();
    assert_eq!(log.lock().unwrap().len(), 5);
    assert!(r.results.iter().all(|x| !x.compensated && x.compensation_error.is_none()));
}
