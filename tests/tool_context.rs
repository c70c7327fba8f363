//! What a tool has beside its input (tools-and-permissions.md): its
//! context's `log`, and `ModelRetry`.
//!
//! `ModelRetry`: a tool says the model called it
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

/// The tool context's `log(level, msg, data?)` (`CarRuntime::tool_log`): a
/// `ToolLog` event for the call's action; bad arguments are refused, naming
/// them, and record nothing.
#[tokio::test]
async fn a_tool_logs_into_the_event_log_through_its_call() {
    let rt = CarRuntime::new();
    rt.register_tool("fetch").unwrap();
    let logger = rt.clone();
    let exec = Arc::new(FnExecutor(move |call: ToolCall| {
        let text = call.to_json();
        logger.tool_log(&text, "info", "fetching", Some(r#"{"url": "https://example.test"}"#)).unwrap();
        logger.tool_log(&text, "warn", "slow", None).unwrap();
        Ok(json!("ok"))
    }));
    let p = json!({"id": "logs", "actions": [{"id": "f", "type": "tool_call", "tool": "fetch"}]});
    let out: Value =
        serde_json::from_str(&rt.execute_proposal(&p.to_string(), exec, None, None).await.unwrap()).unwrap();
    assert_eq!(out["results"][0]["status"], "succeeded");
    let logs: Value = serde_json::from_str(&rt.event_query(r#"{"kinds": ["ToolLog"]}"#).unwrap()).unwrap();
    let logs = logs["events"].as_array().unwrap();
    assert_eq!(logs.len(), 2, "{logs:?}");
    let info = logs.iter().find(|e| e["data"]["level"] == "info").unwrap();
    assert_eq!(info["action_id"], "f");
    assert_eq!(info["data"]["tool"], "fetch");
    assert_eq!(info["data"]["message"], "fetching");
    assert_eq!(info["data"]["data"], json!({"url": "https://example.test"}));
    assert!(info["data"]["request_id"].as_str().unwrap().starts_with("req-"));
    let before = rt.event_count();
    let call = r#"{"request_id": "req-1", "action_id": "f", "tool": "fetch"}"#;
    for (call, level, data, names) in [
        (call, "loud", None, "level"),
        (r#"{"tool": "fetch"}"#, "info", None, "call"),
        ("not json", "info", None, "call_json"),
        (call, "info", Some("{bad"), "data"),
    ] {
        let e = rt.tool_log(call, level, "m", data).unwrap_err();
        assert!(e.to_string().contains(names) || e.code() == "invalid_json", "{names}: {e}");
    }
    let big = "x".repeat(car_runtime::api::runtime::TOOL_LOG_MAX_BYTES + 1);
    assert!(rt.tool_log(call, "info", &big, None).is_err());
    assert_eq!(rt.event_count(), before, "nothing recorded for a bad argument");
}

/// `CarRuntime::tool_log_entry`, the form the daemon's `tools.log` uses
/// (the call's fields and the data as a value): the same event and the same
/// refusals as `tool_log`, the size counted on the data's compact JSON.
#[test]
fn a_log_entry_from_fields_records_what_tool_log_records() {
    use car_runtime::api::runtime::{TOOL_LOG_MAX_BYTES, ToolLogEntry};
    let rt = CarRuntime::new();
    let call = ToolLogEntry { request_id: "req-9", tool: Some("fetch"), action_id: Some("f") };
    rt.tool_log_entry(call, "info", "fetching", Some(json!({"url": "https://example.test"}))).unwrap();
    // A null data is no data, as an absent one.
    rt.tool_log_entry(call, "debug", "quiet", Some(Value::Null)).unwrap();
    let logs: Value = serde_json::from_str(&rt.event_query(r#"{"kinds": ["ToolLog"]}"#).unwrap()).unwrap();
    let logs = logs["events"].as_array().unwrap();
    assert_eq!(logs.len(), 2, "{logs:?}");
    let info = logs.iter().find(|e| e["data"]["level"] == "info").unwrap();
    let debug = logs.iter().find(|e| e["data"]["level"] == "debug").unwrap();
    assert_eq!(info["action_id"], "f");
    assert_eq!(
        info["data"],
        json!({"tool": "fetch", "request_id": "req-9", "level": "info", "message": "fetching",
               "data": {"url": "https://example.test"}})
    );
    assert!(debug["data"].get("data").is_none(), "{debug:?}");
    let before = rt.event_count();
    let e = rt.tool_log_entry(call, "loud", "m", None).unwrap_err();
    assert!(e.to_string().contains("level"), "{e}");
    let e = rt.tool_log_entry(ToolLogEntry { request_id: "", ..call }, "info", "m", None).unwrap_err();
    assert!(e.to_string().contains("request_id"), "{e}");
    // Exactly at the limit passes; one byte of data over it is refused.
    let fill = |n: usize| Value::String("x".repeat(n - 2)); // its JSON adds two quotes
    let half = TOOL_LOG_MAX_BYTES / 2;
    rt.tool_log_entry(call, "info", &"m".repeat(half), Some(fill(TOOL_LOG_MAX_BYTES - half))).unwrap();
    let after_one = rt.event_count();
    let e = rt.tool_log_entry(call, "info", &"m".repeat(half), Some(fill(TOOL_LOG_MAX_BYTES - half + 1))).unwrap_err();
    assert!(e.to_string().contains("limit"), "{e}");
    assert_eq!(after_one, before + 1, "only the entry within the limit is recorded");
    assert_eq!(rt.event_count(), after_one, "nothing recorded for a bad argument");
}

/// A one-shot tool that times out is told so: its call carries the
/// attempt's `deadline`, and `tool_cancelled` turns true once it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_past_its_deadline_is_told_it_was_given_up_on() {
    use std::sync::atomic::AtomicBool;
    let rt = CarRuntime::new();
    rt.register_tool("slow").unwrap();
    let (told, finished) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (t, f, check) = (told.clone(), finished.clone(), rt.clone());
    // The tool works on a thread of its own, as a host's blocking tool does.
    struct Blocking<F>(Arc<F>);
    #[async_trait::async_trait]
    impl<F: Fn(ToolCall) -> Result<Value, ToolFailure> + Send + Sync + 'static> car_runtime::engine::ToolExecutor
        for Blocking<F>
    {
        async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
            let f = self.0.clone();
            tokio::task::spawn_blocking(move || f(call)).await.unwrap()
        }
    }
    let exec = Arc::new(Blocking(Arc::new(move |call: ToolCall| {
        let text = call.to_json();
        if call.deadline.is_some() {
            assert!(!check.tool_cancelled(&text).unwrap(), "not yet");
            let end = std::time::Instant::now() + std::time::Duration::from_secs(3);
            while std::time::Instant::now() < end && !check.tool_cancelled(&text).unwrap() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            t.store(check.tool_cancelled(&text).unwrap(), Ordering::SeqCst);
            f.store(true, Ordering::SeqCst);
            // Winding down takes a moment: the answer comes after the timer.
            std::thread::sleep(std::time::Duration::from_millis(100));
        } else {
            assert!(!check.tool_cancelled(&text).unwrap(), "no timeout: never given up on by the clock");
        }
        Ok(json!("late"))
    })));
    let p = json!({"id": "dl", "actions": [
        {"id": "s", "type": "tool_call", "tool": "slow", "timeout_ms": 60, "failure_behavior": "skip"},
        {"id": "n", "type": "tool_call", "tool": "slow"}]});
    let out: Value =
        serde_json::from_str(&rt.execute_proposal(&p.to_string(), exec, None, None).await.unwrap()).unwrap();
    assert!(out["results"][0]["error"].as_str().unwrap().contains("timed out"), "{out}");
    for _ in 0..300 {
        if finished.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(told.load(Ordering::SeqCst), "the tool learned it was given up on");
    assert!(rt.tool_cancelled(r#"{"tool": "x"}"#).is_err(), "not a call");
    assert!(rt.tool_cancelled(r#"{"request_id": "r", "deadline": "soon"}"#).is_err(), "a bad deadline");
}

/// A `timeout_ms` too large for a timestamp (the agent writes it) gives the
/// call no deadline instead of overflowing, and the call runs.
#[tokio::test]
async fn a_timeout_of_ages_gives_no_deadline_and_the_call_runs() {
    let rt = CarRuntime::new();
    rt.register_tool("t").unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let exec = Arc::new(FnExecutor(move |call: ToolCall| {
        s.lock().unwrap().push((call.timeout_ms, call.deadline.is_some()));
        Ok(json!("ok"))
    }));
    let huge = [u64::MAX, i64::MAX as u64, (i64::MAX as u64) + 1, 9_000_000_000_000_000, 8_000_000_000_000_000];
    let actions: Vec<Value> = huge
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"id": format!("a{i}"), "type": "tool_call", "tool": "t", "timeout_ms": t}))
        .chain([json!({"id": "small", "type": "tool_call", "tool": "t", "timeout_ms": 60000})])
        .collect();
    let p = json!({"id": "ages", "actions": actions});
    let out: Value =
        serde_json::from_str(&rt.execute_proposal(&p.to_string(), exec, None, None).await.unwrap()).unwrap();
    assert!(out["results"].as_array().unwrap().iter().all(|r| r["status"] == "succeeded"), "{out}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), huge.len() + 1);
    assert!(seen.iter().any(|(t, d)| *t == Some(60000) && *d), "an ordinary timeout has its deadline: {seen:?}");
    assert!(seen.iter().filter(|(t, _)| *t == Some(u64::MAX)).all(|(_, d)| !d), "{seen:?}");
}
