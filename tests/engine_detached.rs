//! Detached (streaming / long_running) tools: handle, poll, cancel,
//! subscription, bounded buffer, cache bypass, rate limit, start timeout.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use car_runtime::engine::{CancelToken, ChunkStream, ExecOptions, Runtime, RuntimeOptions, ToolCall, ToolExecutor};
use car_runtime::ir::{
    ActionStatus, ProposalResult, ToolFailure, ToolSchema, ToolStatus, ToolStreamChunk, parse_proposal,
};
use futures::StreamExt;
use serde_json::{Value, json};

#[derive(Default)]
struct Streamer {
    starts: Mutex<Vec<Instant>>,
    stream_calls: AtomicUsize,
    saw_cancel: Arc<AtomicBool>,
}

#[async_trait]
impl ToolExecutor for Streamer {
    async fn execute(&self, _call: ToolCall) -> Result<Value, ToolFailure> {
        Ok(json!("one-shot"))
    }

    async fn execute_stream(&self, call: ToolCall, cancel: CancelToken) -> Result<ChunkStream, ToolFailure> {
        self.stream_calls.fetch_add(1, Ordering::SeqCst);
        self.starts.lock().unwrap().push(Instant::now());
        let p = call.params.clone();
        if let Some(ms) = p.get("slow_start_ms").and_then(Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let saw_cancel = self.saw_cancel.clone();
        tokio::spawn(async move {
            if let Some(ms) = p.get("delay_ms").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if p.get("until_cancel").is_some() {
                let _ = tx.unbounded_send(ToolStreamChunk::Progress { fraction: 0.5, message: Some("half".into()) });
                cancel.cancelled().await;
                saw_cancel.store(true, Ordering::SeqCst);
                return;
            }
            let n = p.get("n").and_then(Value::as_u64).unwrap_or(0);
            for i in 0..n {
                let _ = tx.unbounded_send(ToolStreamChunk::Text { text: format!("t{i}") });
            }
            if p.get("error").is_some() {
                let _ = tx.unbounded_send(ToolStreamChunk::Error { message: "stream broke".into() });
            } else {
                let _ = tx.unbounded_send(ToolStreamChunk::Done { result: Some(json!({"n": n})) });
            }
        });
        Ok(rx.boxed())
    }
}

fn runtime(opts: RuntimeOptions) -> Runtime {
    let rt = Runtime::new(opts);
    rt.register_tool_name("s").unwrap();
    rt.register_tool_name("plain").unwrap();
    rt
}

async fn run(rt: &Runtime, ex: &Arc<Streamer>, p: Value) -> ProposalResult {
    rt.execute(parse_proposal(&p.to_string()).unwrap(), ex.clone(), ExecOptions::default()).await.unwrap()
}

fn handle_of(r: &ProposalResult, i: usize) -> String {
    let out = r.results[i].output.as_ref().unwrap();
    assert_eq!(out["status"], "running");
    out["tool_handle"].as_str().unwrap().to_string()
}

/// Waits (bounded) for a terminal chunk of `handle` on a subscription.
async fn wait_terminal(rx: &mut tokio::sync::broadcast::Receiver<car_runtime::ir::ToolStreamEvent>, handle: &str) {
    let deadline = tokio::time::sleep(Duration::from_secs(10));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) if ev.handle.id == handle && ev.chunk.is_terminal() => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => panic!("subscription closed: {e}"),
            },
            _ = &mut deadline => panic!("no terminal chunk"),
        }
    }
}

#[tokio::test]
async fn lifecycle_handle_poll_subscription() {
    let rt = runtime(RuntimeOptions::default());
    let ex = Arc::new(Streamer::default());
    let mut rx = rt.subscribe_tool_stream();
    let r = run(&rt, &ex, json!({"actions": [
        {"id": "st", "type": "tool_call", "tool": "s", "invocation_mode": "streaming", "parameters": {"n": 3, "delay_ms": 20}},
        {"id": "next", "type": "tool_call", "tool": "plain", "dependencies": ["st"]},
    ]})).await;
    assert_eq!(r.results[0].status, ActionStatus::Succeeded);
    assert_eq!(r.results[1].status, ActionStatus::Succeeded, "the DAG goes on");
    let h = handle_of(&r, 0);
    wait_terminal(&mut rx, &h).await;
    let poll = rt.tool_poll(&h).unwrap();
    assert_eq!(poll.status, ToolStatus::Succeeded);
    assert_eq!(poll.tool, "s");
    assert_eq!(poll.action_id, "st");
    assert_eq!(poll.chunks.len(), 4);
    assert_eq!(poll.chunks[0], ToolStreamChunk::Text { text: "t0".into() });
    assert_eq!(poll.result, Some(json!({"n": 3})));
    assert!(rt.tool_poll(&h).is_none(), "terminal status reported once, then the handle is consumed");
    let started = rt.events().query(&serde_json::from_value(json!({"kinds": ["ToolStarted"]})).unwrap()).unwrap();
    assert_eq!(started[0].data.to_value()["handle"], json!(h));
    assert_eq!(started[0].action_id.as_deref(), Some("st"));
    assert!(!rt.tool_cancel(&h));

    let r = run(&rt, &ex, json!({"actions": [
        {"id": "e", "type": "tool_call", "tool": "s", "invocation_mode": "long_running", "parameters": {"n": 1, "error": 1}},
    ]})).await;
    let h = handle_of(&r, 0);
    wait_terminal(&mut rx, &h).await;
    let poll = rt.tool_poll(&h).unwrap();
    assert_eq!(poll.status, ToolStatus::Failed);
    assert_eq!(poll.error.as_deref(), Some("stream broke"));
}

#[tokio::test]
async fn poll_while_running_then_cooperative_cancel() {
    let rt = runtime(RuntimeOptions::default());
    let ex = Arc::new(Streamer::default());
    let mut rx = rt.subscribe_tool_stream();
    let r = run(&rt, &ex, json!({"actions": [
        {"id": "st", "type": "tool_call", "tool": "s", "invocation_mode": "streaming", "parameters": {"until_cancel": 1}},
    ]})).await;
    let h = handle_of(&r, 0);
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.unwrap().unwrap();
    assert_eq!(first.handle.id, h);
    let poll = rt.tool_poll(&h).unwrap();
    assert_eq!(poll.status, ToolStatus::Running);
    assert_eq!(poll.chunks.len(), 1);
    assert!(rt.tool_poll(&h).unwrap().chunks.is_empty(), "chunks drain per poll");
    assert!(rt.tool_cancel(&h));
    assert_eq!(rt.tool_poll(&h).unwrap().status, ToolStatus::Cancelled);
    assert!(rt.tool_poll(&h).is_none());
    for _ in 0..1000 {
        if ex.saw_cancel.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(ex.saw_cancel.load(Ordering::SeqCst), "the tool observed the cancellation");
}

#[tokio::test]
async fn buffer_drops_oldest_and_reports_dropped() {
    let rt = runtime(RuntimeOptions::default().chunk_buffer_size(8));
    let ex = Arc::new(Streamer::default());
    let mut rx = rt.subscribe_tool_stream();
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "st", "type": "tool_call", "tool": "s", "invocation_mode": "streaming", "parameters": {"n": 20}},
        ]}),
    )
    .await;
    let h = handle_of(&r, 0);
    wait_terminal(&mut rx, &h).await;
    let poll = rt.tool_poll(&h).unwrap();
    assert_eq!(poll.chunks.len(), 8);
    assert_eq!(poll.dropped_chunks, 13);
    assert_eq!(poll.chunks[0], ToolStreamChunk::Text { text: "t13".into() });
    assert!(poll.chunks[7].is_terminal());
    let wire = serde_json::to_value(&poll).unwrap();
    assert_eq!(wire["dropped_chunks"], 13);
}

#[test]
fn default_buffer_is_1024() {
    assert_eq!(RuntimeOptions::default().chunk_buffer_size, 1024);
}

#[tokio::test]
async fn detached_calls_bypass_both_caches_but_are_rate_limited() {
    let rt = runtime(RuntimeOptions::default());
    rt.register_tool(
        serde_json::from_value::<ToolSchema>(json!({
            "name": "cached", "idempotent": true, "cache_ttl_secs": 60,
            "rate_limit": {"max_calls": 1, "interval_secs": 0.2}
        }))
        .unwrap(),
    )
    .unwrap();
    let ex = Arc::new(Streamer::default());
    let p = json!({"actions": [{"id": "a", "type": "tool_call", "tool": "cached", "idempotent": true,
                                "invocation_mode": "streaming", "parameters": {"n": 1}}]});
    let r1 = run(&rt, &ex, p.clone()).await;
    let r2 = run(&rt, &ex, p).await;
    assert_ne!(handle_of(&r1, 0), handle_of(&r2, 0), "a fresh invocation, not a cached handle");
    assert_eq!(ex.stream_calls.load(Ordering::SeqCst), 2);
    assert_eq!(r2.cost.tool_calls, 1);
    let starts = ex.starts.lock().unwrap();
    assert!(starts[1].duration_since(starts[0]) >= Duration::from_millis(200), "at most 1 start per 0.2 s window");
}

#[tokio::test]
async fn timeout_bounds_only_the_start() {
    let rt = runtime(RuntimeOptions::default());
    let ex = Arc::new(Streamer::default());
    let mut rx = rt.subscribe_tool_stream();
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "slow", "type": "tool_call", "tool": "s", "invocation_mode": "streaming", "timeout_ms": 10,
             "parameters": {"slow_start_ms": 2000}, "failure_behavior": "skip"},
            {"id": "long", "type": "tool_call", "tool": "s", "invocation_mode": "streaming", "timeout_ms": 10,
             "parameters": {"delay_ms": 100, "n": 1}},
        ]}),
    )
    .await;
    assert!(r.results[0].error.as_deref().unwrap().contains("timed out"));
    assert_eq!(r.results[1].status, ActionStatus::Succeeded);
    let h = handle_of(&r, 1);
    wait_terminal(&mut rx, &h).await;
    assert_eq!(rt.tool_poll(&h).unwrap().status, ToolStatus::Succeeded, "the stream outlived timeout_ms");
}

#[tokio::test]
async fn executors_without_streaming_fail_the_action() {
    let rt = runtime(RuntimeOptions::default());
    let ex = Arc::new(car_runtime::engine::FnExecutor(|_c: ToolCall| Ok(json!(1))));
    let p = parse_proposal(r#"{"actions":[{"type":"tool_call","tool":"s","invocation_mode":"streaming"}]}"#).unwrap();
    let r = rt.execute(p, ex, ExecOptions::default()).await.unwrap();
    assert_eq!(r.results[0].status, ActionStatus::Failed);
    assert!(r.results[0].error.as_deref().unwrap().contains("does not support detached"));
}

/// The `ProposalCompleted` event of a proposal.
fn completed(rt: &Runtime, proposal_id: &str) -> Value {
    let q = serde_json::from_value(json!({"kinds": ["ProposalCompleted"], "proposal_id": proposal_id})).unwrap();
    let evs = rt.events().query(&q).unwrap();
    assert_eq!(evs.len(), 1);
    evs[0].data.to_value()
}

async fn wait_saw_cancel(ex: &Streamer) -> bool {
    for _ in 0..2000 {
        if ex.saw_cancel.load(Ordering::SeqCst) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

#[tokio::test]
async fn abort_cancels_the_detached_tools_the_proposal_started() {
    let rt = runtime(RuntimeOptions::default());
    let ex = Arc::new(Streamer::default());
    let r = run(&rt, &ex, json!({"id": "p-abort", "actions": [
        {"id": "st", "type": "tool_call", "tool": "s", "invocation_mode": "long_running", "parameters": {"until_cancel": 1}},
        {"id": "check", "type": "assertion", "dependencies": ["st"], "parameters": {"key": "absent", "expected": 1}},
    ]})).await;
    assert_eq!(r.results[1].status, ActionStatus::Failed, "the failed assertion aborts the proposal");
    let st = &r.results[0];
    assert_eq!(st.status, ActionStatus::Succeeded);
    assert!(st.rolled_back);
    let out = st.output.as_ref().unwrap();
    assert_eq!(out["status"], "cancelled", "the result shows the handle's status after the abort");
    let h = out["tool_handle"].as_str().unwrap().to_string();

    // The same cancel as tool_cancel: signalled, terminal `cancelled` reported once.
    assert!(wait_saw_cancel(&ex).await, "the tool observed the cancellation");
    let poll = rt.tool_poll(&h).unwrap();
    assert_eq!(poll.status, ToolStatus::Cancelled);
    assert_eq!(poll.action_id, "st");
    assert!(rt.tool_poll(&h).is_none());
    assert!(!rt.tool_cancel(&h), "already cancelled");

    let done = completed(&rt, "p-abort");
    assert_eq!(done["aborted"], true);
    assert_eq!(done["cancelled_tools"], json!([{"action_id": "st", "tool": "s", "handle": h}]));
}

#[tokio::test]
async fn success_leaves_detached_tools_running_and_abort_touches_only_its_own() {
    let rt = runtime(RuntimeOptions::default());
    let ex = Arc::new(Streamer::default());
    let ok = run(&rt, &ex, json!({"id": "p-ok", "actions": [
        {"id": "keep", "type": "tool_call", "tool": "s", "invocation_mode": "streaming", "parameters": {"until_cancel": 1}},
        {"id": "after", "type": "tool_call", "tool": "plain", "dependencies": ["keep"]},
    ]})).await;
    assert!(ok.results.iter().all(|x| x.status == ActionStatus::Succeeded));
    let kept = handle_of(&ok, 0);
    let done = completed(&rt, "p-ok");
    assert_eq!(done["aborted"], false);
    assert!(done.get("cancelled_tools").is_none());

    // A skipped failure does not abort: its detached tool keeps running too.
    let skipped = run(&rt, &ex, json!({"id": "p-skip", "actions": [
        {"id": "also", "type": "tool_call", "tool": "s", "invocation_mode": "streaming", "parameters": {"until_cancel": 1}},
        {"id": "bad", "type": "assertion", "failure_behavior": "skip", "parameters": {"key": "absent", "expected": 1}},
    ]})).await;
    assert_eq!(skipped.results[1].status, ActionStatus::Skipped);
    let also = handle_of(&skipped, 0);

    let aborted = run(&rt, &ex, json!({"id": "p-abort2", "actions": [
        {"id": "mine", "type": "tool_call", "tool": "s", "invocation_mode": "streaming", "parameters": {"until_cancel": 1}},
        {"id": "boom", "type": "assertion", "dependencies": ["mine"], "parameters": {"key": "absent", "expected": 1}},
    ]})).await;
    let mine = aborted.results[0].output.as_ref().unwrap()["tool_handle"].as_str().unwrap().to_string();
    assert_eq!(rt.tool_poll(&mine).unwrap().status, ToolStatus::Cancelled);

    for h in [&kept, &also] {
        assert_eq!(rt.tool_poll(h).unwrap().status, ToolStatus::Running, "another proposal's tool keeps running");
        assert!(rt.tool_cancel(h));
    }
}

#[tokio::test]
async fn abort_at_admission_starts_and_cancels_nothing() {
    let rt = runtime(RuntimeOptions::default());
    let ex = Arc::new(Streamer::default());
    let r = run(&rt, &ex, json!({"id": "p-adm", "actions": [
        {"id": "st", "type": "tool_call", "tool": "s", "invocation_mode": "streaming", "parameters": {"until_cancel": 1}},
        {"id": "ghost", "type": "tool_call", "tool": "unregistered"},
    ]})).await;
    assert_eq!(r.results[0].status, ActionStatus::Skipped);
    assert_eq!(ex.stream_calls.load(Ordering::SeqCst), 0);
    let done = completed(&rt, "p-adm");
    assert_eq!(done["aborted"], true);
    assert!(done.get("cancelled_tools").is_none());
}
