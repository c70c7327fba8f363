//! The idempotency cache, the TTL result cache and rate limits.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use car_runtime::engine::{ExecOptions, FnExecutor, Runtime, ToolCall, ToolExecutor};
use car_runtime::ir::{ActionStatus, ProposalResult, ToolFailure, ToolSchema, parse_proposal};
use serde_json::{Value, json};

type Log = Arc<Mutex<Vec<(String, Value, Instant)>>>;

fn executor(log: Log) -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(move |c: ToolCall| {
        let mut l = log.lock().unwrap();
        l.push((c.tool.clone(), c.params.clone(), Instant::now()));
        let n = l.len();
        if c.params.get("fail_first").is_some()
            && l.iter().filter(|(t, p, _)| *t == c.tool && *p == c.params).count() == 1
        {
            return Err(ToolFailure::ordinary("first call fails"));
        }
        Ok(json!({"call": n}))
    }))
}

fn schema(v: Value) -> ToolSchema {
    serde_json::from_value(v).unwrap()
}

async fn run(rt: &Runtime, ex: &Arc<dyn ToolExecutor>, p: Value) -> ProposalResult {
    rt.execute(parse_proposal(&p.to_string()).unwrap(), ex.clone(), ExecOptions::default()).await.unwrap()
}

#[tokio::test]
async fn idempotent_calls_are_served_from_the_runtime_wide_cache() {
    let rt = Runtime::default();
    rt.register_tool_name("x").unwrap();
    let log = Log::default();
    let ex = executor(log.clone());
    let p = |params: Value| json!({"actions": [{"type": "tool_call", "tool": "x", "idempotent": true, "parameters": params}]});
    let r1 = run(&rt, &ex, p(json!({"a": 1, "b": 2}))).await;
    let r2 = run(&rt, &ex, p(json!({"b": 2, "a": 1}))).await;
    assert_eq!(r1.results[0].output, r2.results[0].output, "same canonical parameters, same result");
    assert_eq!(log.lock().unwrap().len(), 1);
    assert_eq!(r2.cost.tool_calls, 0);
    assert_eq!(r2.results[0].status, ActionStatus::Succeeded);
    let hits = rt
        .events()
        .query(
            &serde_json::from_value(json!({"kinds": ["ActionSucceeded"], "data_matches": {"cached": "idempotency"}}))
                .unwrap(),
        )
        .unwrap();
    assert_eq!(hits.len(), 1);

    run(&rt, &ex, p(json!({"a": 2}))).await;
    assert_eq!(log.lock().unwrap().len(), 2, "other parameters miss");
    let not_idem = json!({"actions": [{"type": "tool_call", "tool": "x", "parameters": {"a": 1, "b": 2}}]});
    run(&rt, &ex, not_idem).await;
    assert_eq!(log.lock().unwrap().len(), 3, "non-idempotent actions always call");
}

#[tokio::test]
async fn failed_calls_are_never_cached() {
    let rt = Runtime::default();
    rt.register_tool(schema(json!({"name": "t", "cache_ttl_secs": 60}))).unwrap();
    let log = Log::default();
    let ex = executor(log.clone());
    let p = json!({"actions": [{"type": "tool_call", "tool": "t", "idempotent": true, "parameters": {"fail_first": 1}, "failure_behavior": "skip"}]});
    let r1 = run(&rt, &ex, p.clone()).await;
    assert_eq!(r1.results[0].status, ActionStatus::Skipped);
    let r2 = run(&rt, &ex, p.clone()).await;
    assert_eq!(r2.results[0].status, ActionStatus::Succeeded);
    let r3 = run(&rt, &ex, p).await;
    assert_eq!(r3.results[0].output, r2.results[0].output);
    assert_eq!(log.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn ttl_cache_expires() {
    let rt = Runtime::default();
    rt.register_tool(schema(json!({"name": "t", "cache_ttl_secs": 1}))).unwrap();
    let log = Log::default();
    let ex = executor(log.clone());
    let p = json!({"actions": [{"type": "tool_call", "tool": "t", "parameters": {"q": 1}}]});
    let r1 = run(&rt, &ex, p.clone()).await;
    let r2 = run(&rt, &ex, p.clone()).await;
    assert_eq!(r1.results[0].output, r2.results[0].output);
    assert_eq!(log.lock().unwrap().len(), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    run(&rt, &ex, p).await;
    assert_eq!(log.lock().unwrap().len(), 2, "expired entries are not served");
}

#[tokio::test]
async fn rate_limit_bounds_calls_per_interval() {
    let rt = Runtime::default();
    rt.register_tool(schema(json!({"name": "r", "rate_limit": {"max_calls": 2, "interval_secs": 0.2}}))).unwrap();
    rt.register_tool(schema(json!({"name": "never", "rate_limit": {"max_calls": 0, "interval_secs": 1.0}}))).unwrap();
    let log = Log::default();
    let ex = executor(log.clone());
    let actions: Vec<Value> =
        (0..5).map(|i| json!({"type": "tool_call", "tool": "r", "parameters": {"i": i}})).collect();
    let r = run(&rt, &ex, json!({"actions": actions})).await;
    assert!(r.results.iter().all(|x| x.status == ActionStatus::Succeeded));
    let mut times: Vec<Instant> = log.lock().unwrap().iter().map(|(_, _, t)| *t).collect();
    times.sort();
    for w in times.windows(3) {
        assert!(w[2].duration_since(w[0]) >= Duration::from_millis(200), "no 3 calls within one 0.2 s window");
    }
    let r = run(&rt, &ex, json!({"actions": [{"type": "tool_call", "tool": "never"}]})).await;
    assert_eq!(r.results[0].status, ActionStatus::Failed);
    assert!(r.results[0].error.as_deref().unwrap().contains("rate-limited"));
}
