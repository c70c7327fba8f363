//! Execution semantics: failure behaviours, retries, timeouts, terminal
//! failures, rollback markers, admission, state actions and cost rows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use car_runtime::engine::{ExecOptions, ROLLBACK_WARNING, Runtime, RuntimeOptions, ToolCall, ToolExecutor};
use car_runtime::ir::{
    ActionStatus, CostBudget, ProposalResult, StateMutation, ToolFailure, ToolSchema, parse_proposal,
};
use car_runtime::policy::deny_tool;
use car_runtime::state::Scope;
use serde_json::{Value, json};

/// A scriptable executor: `fail`, `fail_times`, `terminal`, `sleep_ms`, `ret`, `panic` parameters.
#[derive(Default)]
struct Script {
    calls: Mutex<Vec<ToolCall>>,
}

#[async_trait]
impl ToolExecutor for Script {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        self.calls.lock().unwrap().push(call.clone());
        let p = &call.params;
        if let Some(ms) = p.get("sleep_ms").and_then(Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if p.get("panic").is_some() {
            panic!("tool blew up");
        }
        if p.get("terminal").is_some() {
            return Err(ToolFailure::terminal("card declined"));
        }
        if let Some(n) = p.get("fail_times").and_then(Value::as_u64)
            && u64::from(call.attempt) <= n
        {
            return Err(ToolFailure::ordinary(format!("flaky attempt {}", call.attempt)));
        }
        if p.get("fail").is_some() {
            return Err("boom: this is fatal and terminal".into());
        }
        Ok(p.get("ret").cloned().unwrap_or_else(|| json!({"ok": true, "tool": call.tool})))
    }
}

fn rt() -> Runtime {
    let rt = Runtime::default();
    rt.register_tool_name("x").unwrap();
    rt.register_tool_name("y").unwrap();
    rt
}

async fn run(rt: &Runtime, exec: &Arc<Script>, proposal: Value) -> ProposalResult {
    let p = parse_proposal(&proposal.to_string()).unwrap();
    rt.execute(p, exec.clone(), ExecOptions::default()).await.unwrap()
}

fn status(r: &ProposalResult, id: &str) -> ActionStatus {
    r.results.iter().find(|x| x.action_id == id).unwrap().status
}

fn result<'a>(r: &'a ProposalResult, id: &str) -> &'a car_runtime::ir::ActionResult {
    r.results.iter().find(|x| x.action_id == id).unwrap()
}

#[tokio::test]
async fn state_actions_and_outputs() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    rt.state_set("k", json!(5), None).unwrap();
    let r = run(
        &rt,
        &ex,
        json!({"id": "p", "actions": [
            {"id": "w", "type": "state_write", "parameters": {"key": "n", "value": null}},
            {"id": "r", "type": "state_read", "parameters": {"key": "n"}, "state_dependencies": ["n"]},
            {"id": "missing", "type": "state_read", "parameters": {"key": "absent"}},
            {"id": "as", "type": "assertion", "parameters": {"key": "k", "expected": 5}},
            {"id": "gt", "type": "assertion", "parameters": {"key": "k", "operator": "gt", "expected": 1}},
        {"id": "absent", "type": "assertion", "parameters": {"key": "nokey"}},
            {"id": "del", "type": "state_write", "parameters": {"key": "k2", "delete": true}},
        ]}),
    )
    .await;
    let w = result(&r, "w");
    assert_eq!(w.output, Some(json!("written: n")));
    assert_eq!(w.state_changes["n"].to_value(), json!({"op": "set", "value": null}));
    assert_eq!(result(&r, "r").output, Some(Value::Null));
    assert_eq!(result(&r, "missing").output, Some(Value::Null));
    assert_eq!(result(&r, "as").output, Some(json!({"asserted": "k", "value": 5})));
    assert_eq!(status(&r, "gt"), ActionStatus::Succeeded);
    assert_eq!(result(&r, "absent").output, Some(json!({"asserted": "nokey", "value": null})));
    assert_eq!(result(&r, "del").state_changes["k2"], StateMutation::Delete);
    assert!(rt.state().exists(&Scope::global(), "n"));
    assert_eq!(r.cost.actions_executed, 7);
    assert_eq!(r.cost.tool_calls, 0);

    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "bad", "type": "assertion", "parameters": {"key": "k", "expected": 6}, "failure_behavior": "skip"},
            {"id": "nokey", "type": "state_write", "parameters": {"value": 1}, "failure_behavior": "skip"},
        ]}),
    )
    .await;
    assert_eq!(result(&r, "bad").error.as_deref(), Some("assertion failed: state['k'] = 5, expected 6"));
    assert_eq!(result(&r, "nokey").error.as_deref(), Some("state_write requires 'key' parameter"));
}

#[tokio::test]
async fn abort_skips_downstream_and_rolls_back_with_markers() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    rt.state_set("keep", json!("before"), None).unwrap();
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "w", "type": "state_write", "parameters": {"key": "keep", "value": "during"}},
            {"id": "t", "type": "tool_call", "tool": "x", "expected_effects": {"made": 1}},
            {"id": "f", "type": "tool_call", "tool": "y", "parameters": {"fail": true}, "state_dependencies": ["made"]},
            {"id": "after", "type": "tool_call", "tool": "x", "state_dependencies": ["made"], "dependencies": ["f"]},
        ]}),
    )
    .await;
    assert_eq!(status(&r, "f"), ActionStatus::Failed);
    assert!(!result(&r, "f").terminal, "terminality is never inferred from the message");
    assert_eq!(status(&r, "after"), ActionStatus::Skipped);
    for id in ["w", "t"] {
        let x = result(&r, id);
        assert_eq!(x.status, ActionStatus::Succeeded);
        assert!(x.rolled_back);
        assert!(x.state_changes.is_empty());
        assert_eq!(x.error.as_deref(), Some(ROLLBACK_WARNING));
    }
    let g = Scope::global();
    assert_eq!(rt.state().get(&g, "keep"), Some(json!("before")));
    assert!(!rt.state().exists(&g, "made"));
    assert_eq!(r.cost.actions_executed, 3);
    assert_eq!(r.cost.actions_skipped, 1);
    assert_eq!(r.cost.actions_rejected, 0);
    assert_eq!(r.cost.tool_calls, 2);
    let wire = serde_json::to_value(&r).unwrap();
    assert_eq!(wire["results"][0]["rolled_back"], json!(true));
    assert!(wire["results"][2].get("rolled_back").is_none());
    assert!(wire["results"][2].get("terminal").is_none());
}

#[tokio::test]
async fn skip_marks_skipped_and_continues() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "s", "type": "tool_call", "tool": "x", "parameters": {"fail": true}, "failure_behavior": "skip"},
            {"id": "n", "type": "tool_call", "tool": "y"},
        ]}),
    )
    .await;
    assert_eq!(status(&r, "s"), ActionStatus::Skipped);
    assert!(result(&r, "s").error.as_deref().unwrap().starts_with("boom"));
    assert_eq!(status(&r, "n"), ActionStatus::Succeeded);
    assert!(!result(&r, "n").rolled_back);
    assert_eq!((r.cost.actions_executed, r.cost.actions_skipped, r.cost.tool_calls), (1, 1, 2));
}

#[tokio::test]
async fn retries_count_attempts_from_one() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    let r = run(&rt, &ex, json!({"actions": [
        {"id": "r", "type": "tool_call", "tool": "x", "parameters": {"fail_times": 2}, "failure_behavior": "retry", "max_retries": 3},
    ]})).await;
    assert_eq!(status(&r, "r"), ActionStatus::Succeeded);
    let attempts: Vec<u32> = ex.calls.lock().unwrap().iter().map(|c| c.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert_eq!((r.cost.retries, r.cost.tool_calls), (2, 3));

    let ex = Arc::new(Script::default());
    let r = run(&rt, &ex, json!({"actions": [
        {"id": "r", "type": "tool_call", "tool": "x", "parameters": {"fail": 1}, "failure_behavior": "retry", "max_retries": 2},
        {"id": "later", "type": "tool_call", "tool": "x", "dependencies": ["r"]},
    ]})).await;
    assert_eq!(status(&r, "r"), ActionStatus::Failed, "exhausted retries fail the action");
    assert_eq!(status(&r, "later"), ActionStatus::Skipped, "and then abort");
    assert_eq!(ex.calls.lock().unwrap().iter().map(|c| c.attempt).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!((r.cost.retries, r.cost.tool_calls), (2, 3));
}

#[tokio::test]
async fn timeouts_apply_per_attempt() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "slow", "type": "tool_call", "tool": "x", "parameters": {"sleep_ms": 5000}, "timeout_ms": 20,
             "failure_behavior": "retry", "max_retries": 1},
        ]}),
    )
    .await;
    let s = result(&r, "slow");
    assert_eq!(s.status, ActionStatus::Failed);
    assert!(s.error.as_deref().unwrap().contains("timed out after 20 ms"));
    assert_eq!(r.cost.retries, 1);
    let calls = ex.calls.lock().unwrap();
    assert_eq!(calls.iter().map(|c| (c.attempt, c.timeout_ms)).collect::<Vec<_>>(), [(1, Some(20)), (2, Some(20))]);
}

#[tokio::test]
async fn terminal_failure_stops_retries_and_rolls_back() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    let r = run(&rt, &ex, json!({"actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "paid", "value": true}},
        {"id": "t", "type": "tool_call", "tool": "x", "parameters": {"terminal": 1}, "failure_behavior": "retry",
         "max_retries": 5, "dependencies": ["w"]},
        {"id": "skipme", "type": "tool_call", "tool": "x", "parameters": {"terminal": 1}, "failure_behavior": "skip", "dependencies": ["t"]},
    ]})).await;
    let t = result(&r, "t");
    assert_eq!(t.status, ActionStatus::Failed);
    assert!(t.terminal);
    assert_eq!(ex.calls.lock().unwrap().len(), 1, "no retry after a terminal failure");
    assert_eq!(r.cost.retries, 0);
    assert!(result(&r, "w").rolled_back);
    assert_eq!(status(&r, "skipme"), ActionStatus::Skipped);
    assert!(!rt.state().exists(&Scope::global(), "paid"));
    assert_eq!(serde_json::to_value(t).unwrap()["terminal"], json!(true));

    // A terminal failure overrides `skip` too.
    let ex = Arc::new(Script::default());
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "t", "type": "tool_call", "tool": "x", "parameters": {"terminal": 1}, "failure_behavior": "skip"},
            {"id": "n", "type": "tool_call", "tool": "x", "dependencies": ["t"]},
        ]}),
    )
    .await;
    assert_eq!(status(&r, "t"), ActionStatus::Failed);
    assert_eq!(status(&r, "n"), ActionStatus::Skipped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_proposals_roll_back_only_their_own_keys() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    let a = json!({"id": "pa", "actions": [
        {"id": "a1", "type": "state_write", "parameters": {"key": "a1", "value": 1}},
        {"id": "a2", "type": "tool_call", "tool": "x", "expected_effects": {"a2": 2}},
        {"id": "af", "type": "tool_call", "tool": "x", "parameters": {"sleep_ms": 30, "fail": true}, "dependencies": ["a1", "a2"]},
    ]});
    let b = json!({"id": "pb", "actions": [
        {"id": "b1", "type": "state_write", "parameters": {"key": "b1", "value": 1}},
        {"id": "b2", "type": "tool_call", "tool": "x", "parameters": {"sleep_ms": 60}, "expected_effects": {"b2": 2}},
    ]});
    let (ra, rb) = tokio::join!(run(&rt, &ex, a), run(&rt, &ex, b));
    assert!(ra.results.iter().filter(|r| r.status == ActionStatus::Succeeded).all(|r| r.rolled_back));
    assert!(rb.results.iter().all(|r| r.status == ActionStatus::Succeeded && !r.rolled_back));
    let g = Scope::global();
    assert!(!rt.state().exists(&g, "a1"));
    assert!(!rt.state().exists(&g, "a2"));
    assert_eq!(rt.state().get(&g, "b1"), Some(json!(1)));
    assert_eq!(rt.state().get(&g, "b2"), Some(json!(2)));
}

#[tokio::test]
async fn admission_rejects_and_applies_failure_behavior() {
    let rt = rt();
    rt.register_tool(serde_json::from_value::<ToolSchema>(json!({
        "name": "typed", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        "returns": {"type": "object"}
    })).unwrap()).unwrap();
    let ex = Arc::new(Script::default());

    // Unknown tool with skip: rejected, the rest runs.
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "u", "type": "tool_call", "tool": "nope", "failure_behavior": "skip"},
            {"id": "bad", "type": "tool_call", "tool": "typed", "parameters": {"n": "str"}, "failure_behavior": "skip"},
            {"id": "ok", "type": "tool_call", "tool": "typed", "parameters": {"n": 1}},
        ]}),
    )
    .await;
    assert_eq!(result(&r, "u").error.as_deref(), Some("tool 'nope' is not registered"));
    assert_eq!(status(&r, "bad"), ActionStatus::Rejected);
    assert!(result(&r, "bad").error.as_deref().unwrap().starts_with("tool 'typed' parameter validation:"));
    assert_eq!(status(&r, "ok"), ActionStatus::Succeeded);
    assert_eq!((r.cost.actions_rejected, r.cost.actions_executed, r.cost.tool_calls), (2, 1, 1));

    // Abort on a refusal: nothing runs.
    let before = ex.calls.lock().unwrap().len();
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "ok", "type": "tool_call", "tool": "x"},
            {"id": "u", "type": "tool_call", "tool": "nope"},
        ]}),
    )
    .await;
    assert_eq!(status(&r, "ok"), ActionStatus::Skipped);
    assert_eq!(status(&r, "u"), ActionStatus::Rejected);
    assert_eq!(ex.calls.lock().unwrap().len(), before);
    assert_eq!((r.cost.actions_rejected, r.cost.actions_skipped, r.cost.actions_executed), (1, 1, 0));

    // `returns` mismatch is a validation failure of the action.
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "v", "type": "tool_call", "tool": "typed", "parameters": {"n": 1, "ret": [1]}},
        ]}),
    )
    .await;
    assert_eq!(status(&r, "v"), ActionStatus::Failed);
    assert!(result(&r, "v").error.as_deref().unwrap().starts_with("tool 'typed' output validation:"));
}

#[tokio::test]
async fn policy_denial_rejects_and_retry_acts_as_abort() {
    let rt = rt();
    rt.with_policies_mut(|p| p.register("no_x", deny_tool("x"), "")).unwrap();
    let ex = Arc::new(Script::default());
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "d", "type": "tool_call", "tool": "x", "failure_behavior": "retry"},
            {"id": "y", "type": "tool_call", "tool": "y"},
        ]}),
    )
    .await;
    assert_eq!(status(&r, "d"), ActionStatus::Rejected);
    assert_eq!(result(&r, "d").error.as_deref(), Some("policy 'no_x': tool 'x' is denied by policy"));
    assert_eq!(status(&r, "y"), ActionStatus::Skipped);
    assert!(ex.calls.lock().unwrap().is_empty());
    assert_eq!(r.cost.retries, 0);

    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "d", "type": "tool_call", "tool": "x", "failure_behavior": "skip"},
            {"id": "y", "type": "tool_call", "tool": "y"},
        ]}),
    )
    .await;
    assert_eq!(status(&r, "y"), ActionStatus::Succeeded);

    // An unknown policy session fails closed.
    let p = parse_proposal(r#"{"actions":[{"id":"y","type":"tool_call","tool":"y"}]}"#).unwrap();
    let opts = ExecOptions { session_id: Some("nope".into()), ..Default::default() };
    let r = rt.execute(p, ex.clone(), opts).await.unwrap();
    assert_eq!(r.results[0].status, ActionStatus::Rejected);
}

#[tokio::test]
async fn preconditions_and_dependencies_checked_against_live_state() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    let r = run(&rt, &ex, json!({"actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "ready", "value": true}},
        {"id": "go", "type": "tool_call", "tool": "x", "state_dependencies": ["ready"],
         "preconditions": [{"key": "ready", "operator": "eq", "value": true}]},
        {"id": "no", "type": "tool_call", "tool": "x", "dependencies": ["go"], "failure_behavior": "skip",
         "preconditions": [{"key": "ready", "operator": "eq", "value": false}]},
        {"id": "dep", "type": "tool_call", "tool": "x", "state_dependencies": ["never"], "failure_behavior": "skip"},
    ]})).await;
    assert_eq!(status(&r, "go"), ActionStatus::Succeeded);
    assert_eq!(status(&r, "no"), ActionStatus::Rejected);
    assert!(result(&r, "no").error.as_deref().unwrap().starts_with("precondition failed"));
    assert_eq!(result(&r, "dep").error.as_deref(), Some("state dependency 'never' not found"));
    assert_eq!((r.cost.actions_executed, r.cost.actions_rejected), (2, 2));
}

#[tokio::test]
async fn panicking_executor_fails_the_action() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "p", "type": "tool_call", "tool": "x", "parameters": {"panic": 1}, "failure_behavior": "skip"},
            {"id": "ok", "type": "tool_call", "tool": "x"},
        ]}),
    )
    .await;
    assert!(result(&r, "p").error.as_deref().unwrap().contains("panicked: tool blew up"));
    assert_eq!(status(&r, "ok"), ActionStatus::Succeeded);
}

#[tokio::test]
async fn cost_budget_refuses_before_running() {
    let rt = Runtime::new(RuntimeOptions::default().cost_budget(CostBudget::default().with_max_actions(1)));
    rt.register_tool_name("x").unwrap();
    let ex = Arc::new(Script::default());
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "a", "type": "tool_call", "tool": "x"}, {"id": "b", "type": "tool_call", "tool": "x"},
        ]}),
    )
    .await;
    assert!(r.results.iter().all(|x| x.status == ActionStatus::Rejected));
    assert!(r.results[0].error.as_deref().unwrap().contains("max_actions 1"));
    assert_eq!(r.cost.actions_rejected, 2);
    assert!(ex.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn tool_call_json_and_tenant_scope() {
    let rt = rt();
    let ex = Arc::new(Script::default());
    let p = parse_proposal(
        r#"{"actions":[{"id":"a","type":"tool_call","tool":"x","parameters":{"q":1},"timeout_ms":900,"expected_effects":{"e":1}}]}"#,
    )
    .unwrap();
    let sid = rt.with_policies_mut(|p| p.open_session()).unwrap();
    let r = rt
        .execute(
            p,
            ex.clone(),
            ExecOptions { session_id: Some(sid.clone()), tenant: Some("acme".into()), ..Default::default() },
        )
        .await
        .unwrap();
    assert_eq!(r.results[0].status, ActionStatus::Succeeded);
    let call: Value = serde_json::from_str(&ex.calls.lock().unwrap()[0].to_json()).unwrap();
    assert_eq!(call["tool"], "x");
    assert_eq!(call["params"], json!({"q": 1}));
    assert_eq!(call["action_id"], "a");
    assert_eq!(call["timeout_ms"], 900);
    assert_eq!(call["session_id"], json!(sid));
    assert_eq!(call["attempt"], 1);
    assert!(call["request_id"].is_string());
    let t = Scope::tenant("acme").unwrap();
    assert_eq!(rt.state().get(&t, "e"), Some(json!(1)));
    assert!(!rt.state().exists(&Scope::global(), "e"));
}

#[test]
fn execute_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let rt = rt();
    let p = parse_proposal(r#"{"actions":[]}"#).unwrap();
    let fut = rt.execute(p, Arc::new(Script::default()), ExecOptions::default());
    assert_send(&fut);
}

#[tokio::test]
async fn trace_rules_deny_at_dispatch_as_rejected_by_policy() {
    let rt = rt();
    let rule: car_runtime::policy::TraceRule =
        serde_json::from_value(json!({"tool": "y", "require_before": ["x"]})).unwrap();
    rt.with_policies_mut(|p| p.register_trace_rule(rule)).unwrap();
    let ex = Arc::new(Script::default());
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "y1", "type": "tool_call", "tool": "y", "failure_behavior": "skip"},
            {"id": "x", "type": "tool_call", "tool": "x", "dependencies": ["y1"]},
            {"id": "y2", "type": "tool_call", "tool": "y", "dependencies": ["x"]},
        ]}),
    )
    .await;
    // A dispatch-time denial is `rejected`, like every other denial (issue #18).
    assert_eq!(status(&r, "y1"), ActionStatus::Rejected);
    assert!(result(&r, "y1").error.as_deref().unwrap().starts_with("denied by policy: trace_rule:y"));
    assert_eq!(status(&r, "y2"), ActionStatus::Succeeded);
    assert_eq!(r.cost.actions_rejected, 1);
    let rejected = rt
        .events()
        .query(&serde_json::from_value(json!({"kinds": ["ActionRejected"], "action_id": "y1"})).unwrap())
        .unwrap();
    assert_eq!(rejected[0].data.to_value()["layer"], "trace");
    assert_eq!(rejected[0].data.to_value()["stage"], "dispatch");
}

#[tokio::test]
async fn abort_stops_starting_actions_of_the_same_level() {
    let rt = Runtime::new(RuntimeOptions::default().max_concurrency(1));
    rt.register_tool_name("x").unwrap();
    let ex = Arc::new(Script::default());
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "a", "type": "tool_call", "tool": "x", "parameters": {"fail": 1}},
            {"id": "b", "type": "tool_call", "tool": "x"},
            {"id": "c", "type": "tool_call", "tool": "x"},
        ]}),
    )
    .await;
    assert_eq!(status(&r, "a"), ActionStatus::Failed);
    assert_eq!(status(&r, "b"), ActionStatus::Skipped);
    assert_eq!(status(&r, "c"), ActionStatus::Skipped);
    assert_eq!(ex.calls.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn admission_hook_refuses_before_anything_runs() {
    let rt = rt();
    rt.set_admission_check(Some(Arc::new(|a: &car_runtime::ir::Action, _s: Option<&str>| {
        (a.tool.as_deref() == Some("y")).then(|| "needs approval: full_access".to_string())
    })));
    let ex = Arc::new(Script::default());
    let r = run(
        &rt,
        &ex,
        json!({"actions": [
            {"id": "x", "type": "tool_call", "tool": "x"},
            {"id": "y", "type": "tool_call", "tool": "y"},
        ]}),
    )
    .await;
    assert_eq!(status(&r, "y"), ActionStatus::Rejected);
    assert_eq!(result(&r, "y").error.as_deref(), Some("permission: needs approval: full_access"));
    assert_eq!(status(&r, "x"), ActionStatus::Skipped);
    assert!(ex.calls.lock().unwrap().is_empty());
    rt.set_admission_check(None);
    let r = run(&rt, &ex, json!({"actions": [{"id": "y", "type": "tool_call", "tool": "y"}]})).await;
    assert_eq!(status(&r, "y"), ActionStatus::Succeeded);
}

#[tokio::test]
async fn a_panicking_admission_hook_refuses() {
    let rt = rt();
    rt.set_admission_check(Some(Arc::new(|_a: &car_runtime::ir::Action, _s: Option<&str>| -> Option<String> {
        panic!("hook bug")
    })));
    let ex = Arc::new(Script::default());
    let r = run(&rt, &ex, json!({"actions": [{"id": "x", "type": "tool_call", "tool": "x"}]})).await;
    assert_eq!(status(&r, "x"), ActionStatus::Rejected);
    assert!(ex.calls.lock().unwrap().is_empty());
}

/// Issue #25: `max_retries: 4294967295` is held to the runtime's cap (the
/// default, 10): eleven attempts, then the action fails.
#[tokio::test]
async fn a_huge_max_retries_is_capped() {
    let rt = Runtime::new(car_runtime::engine::RuntimeOptions {
        retry_backoff_ms: 0,
        ..car_runtime::engine::RuntimeOptions::default()
    });
    rt.register_tool_name("x").unwrap();
    let ex = Arc::new(Script::default());
    let r = run(&rt, &ex, json!({"actions": [
        {"id": "r", "type": "tool_call", "tool": "x", "parameters": {"fail": 1}, "failure_behavior": "retry", "max_retries": 4294967295u64},
    ]})).await;
    assert_eq!(status(&r, "r"), ActionStatus::Failed);
    let cap = car_runtime::engine::DEFAULT_RETRY_CAP;
    assert_eq!(ex.calls.lock().unwrap().len() as u32, cap + 1);
    assert_eq!(r.cost.retries, u64::from(cap));
}
