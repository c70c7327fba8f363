//! `ModelRetry` (tools-and-permissions.md): a tool says the model called it
//! wrongly. The result tells the model (`model retry (n of 2): ...`), the
//! engine never retries it, and a call chain (a policy session's calls of
//! one tool) gets two before the result says the limit is reached; a
//! success starts the chain again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall};
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};

fn search(calls: Arc<AtomicUsize>) -> Arc<dyn car_runtime::engine::ToolExecutor> {
    Arc::new(FnExecutor(move |call: ToolCall| {
        calls.fetch_add(1, Ordering::SeqCst);
        if call.params.get("q").and_then(Value::as_str).is_some_and(|q| q.contains("AND")) {
            Err(ToolFailure::model_retry("malformed query; use plain keywords, no operators"))
        } else {
            Ok(json!({"hits": 1}))
        }
    }))
}

async fn run(rt: &CarRuntime, q: &str, session: Option<&str>, calls: &Arc<AtomicUsize>) -> Value {
    let p = json!({"id": format!("p-{}", uuid::Uuid::new_v4()), "actions": [
        {"id": "s", "type": "tool_call", "tool": "search", "parameters": {"q": q},
         "failure_behavior": "retry", "max_retries": 3}]});
    let out = rt.execute_proposal(&p.to_string(), search(calls.clone()), session, None).await.unwrap();
    serde_json::from_str(&out).unwrap()
}

#[tokio::test]
async fn a_model_retry_is_reported_not_retried_and_bounded_per_call_chain() {
    let rt = CarRuntime::new();
    rt.register_tool("search").unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let first = run(&rt, "a AND b", None, &calls).await;
    let r = &first["results"][0];
    assert_eq!(r["status"], "failed", "{first}");
    assert_eq!(r["error"], "model retry (1 of 2): malformed query; use plain keywords, no operators");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "never retried by the engine, though failure_behavior is retry");
    let failed: Value = serde_json::from_str(&rt.event_query(r#"{"kinds": ["ActionFailed"]}"#).unwrap()).unwrap();
    assert_eq!(failed["events"][0]["data"]["error_class"], "model_retry", "{failed}");
    let second = run(&rt, "a AND c", None, &calls).await;
    assert!(second["results"][0]["error"].as_str().unwrap().starts_with("model retry (2 of 2): "), "{second}");
    let third = run(&rt, "a AND d", None, &calls).await;
    let e = third["results"][0]["error"].as_str().unwrap();
    assert!(e.starts_with("model retry limit reached (2 per call chain"), "{e}");
    let failed: Value = serde_json::from_str(&rt.event_query(r#"{"kinds": ["ActionFailed"]}"#).unwrap()).unwrap();
    let classes: Vec<&str> =
        failed["events"].as_array().unwrap().iter().map(|e| e["data"]["error_class"].as_str().unwrap()).collect();
    assert_eq!(classes.iter().filter(|c| **c == "model_retry").count(), 2, "{classes:?}");
    assert_eq!(classes.iter().filter(|c| **c == "tool_error").count(), 1, "past the bound: an ordinary tool error");
    // Another policy session is another chain.
    let session = rt.open_session().unwrap();
    let other = run(&rt, "x AND y", Some(&session), &calls).await;
    assert!(other["results"][0]["error"].as_str().unwrap().starts_with("model retry (1 of 2): "), "{other}");
    // A success ends the chain: the next model retry counts from 1 again.
    assert_eq!(run(&rt, "plain words", None, &calls).await["results"][0]["status"], "succeeded");
    let again = run(&rt, "a AND e", None, &calls).await;
    assert!(again["results"][0]["error"].as_str().unwrap().starts_with("model retry (1 of 2): "), "{again}");
    assert_eq!(calls.load(Ordering::SeqCst), 6);
}

#[test]
fn the_envelope_and_the_classification_carry_it() {
    let f =
        car_runtime::api::callback::decode_envelope(r#"{"error": "say it plainly", "model_retry": true}"#).unwrap_err();
    assert!(f.is_model_retry() && !f.is_terminal() && f.message == "say it plainly");
    assert_eq!(serde_json::to_value(&f).unwrap()["classification"], "model_retry");
    // Terminal wins when a binding says both.
    let f = car_runtime::api::callback::decode_envelope(r#"{"error": "x", "model_retry": true, "terminal": true}"#)
        .unwrap_err();
    assert!(f.is_terminal());
}
