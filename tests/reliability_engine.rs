//! Properties of the engine under generated proposals and generated tool
//! outcomes (success, failure, timeout, terminal failure, panic in a tool):
//!
//! - every action ends in exactly one final status, and exactly one final
//!   event (`ActionSucceeded`, `ActionFailed`, `ActionRejected` or
//!   `ActionSkipped`) that agrees with it;
//! - the cost rows add up: per status, tool calls equal the executor's own
//!   count and the `ActionExecuting` events, retries equal `ActionRetrying`;
//! - an aborted proposal leaves state exactly as it was before, except for keys
//!   it did not write (a tool writing its own key behind the engine's back
//!   keeps that write); a completed one leaves every succeeded write in place;
//! - every executed action has its events (`ActionExecuting` per attempt);
//! - no panic escapes the runtime.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use car_runtime::engine::{ExecOptions, Runtime, ToolCall, ToolExecutor};
use car_runtime::events::{Event, EventKind};
use car_runtime::ir::{ActionStatus, ProposalResult, ToolFailure, parse_proposal};
use car_runtime::state::Scope;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// What a generated tool does on each attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Ok,
    Fail,
    /// Fails the first attempt only.
    Flaky,
    Terminal,
    /// Sleeps far past the action's `timeout_ms`.
    Timeout,
    Panic,
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Ok => "ok",
        Outcome::Fail => "fail",
        Outcome::Flaky => "flaky",
        Outcome::Terminal => "terminal",
        Outcome::Timeout => "timeout",
        Outcome::Panic => "panic",
    }
}

/// Runs the outcome named in the call's parameters; counts every invocation,
/// and writes `side:<action id>` straight into the runtime's state: a key the
/// proposal never writes, which a rollback must leave alone.
struct Scripted {
    rt: Runtime,
    calls: AtomicU64,
}

#[async_trait]
impl ToolExecutor for Scripted {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.rt.state_set(&format!("side:{}", call.action_id), json!(call.attempt), None).expect("side write");
        match call.params.get("outcome").and_then(Value::as_str).unwrap_or("ok") {
            "fail" => Err(ToolFailure::ordinary("generated failure")),
            "flaky" if call.attempt == 1 => Err(ToolFailure::ordinary("flaky")),
            "terminal" => Err(ToolFailure::terminal("generated terminal failure")),
            "timeout" => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(json!("too late"))
            }
            "panic" => panic!("generated panic in a tool"),
            _ => Ok(json!({"ok": call.attempt})),
        }
    }
}

#[derive(Debug, Clone)]
enum Gen {
    Tool { outcome: Outcome, effect: Option<u8> },
    Write { key: u8, delete: bool },
    Read { key: u8 },
    Assert { key: u8, expected: i64 },
}

#[derive(Debug, Clone)]
struct GenAction {
    kind: Gen,
    behavior: u8,
    retries: u32,
    deps: Vec<prop::sample::Index>,
    precondition: Option<u8>,
    unknown_tool: bool,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Ok),
        1 => Just(Outcome::Fail),
        1 => Just(Outcome::Flaky),
        1 => Just(Outcome::Terminal),
        1 => Just(Outcome::Timeout),
        1 => Just(Outcome::Panic),
    ]
}

fn gen_action() -> impl Strategy<Value = GenAction> {
    let kind = prop_oneof![
        5 => (outcome(), prop::option::of(0u8..6)).prop_map(|(outcome, effect)| Gen::Tool { outcome, effect }),
        3 => (0u8..6, prop::bool::weighted(0.2)).prop_map(|(key, delete)| Gen::Write { key, delete }),
        1 => (0u8..6).prop_map(|key| Gen::Read { key }),
        1 => (0u8..6, 0i64..3).prop_map(|(key, expected)| Gen::Assert { key, expected }),
    ];
    (
        kind,
        0u8..3,
        0u32..3,
        prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        prop::option::weighted(0.15, 0u8..6),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(kind, behavior, retries, deps, precondition, unknown_tool)| GenAction {
            kind,
            behavior,
            retries,
            deps,
            precondition,
            unknown_tool,
        })
}

fn key(k: u8) -> String {
    format!("k{k}")
}

/// The proposal JSON: dependencies only point backwards, so the DAG is acyclic.
fn proposal_json(actions: &[GenAction]) -> Value {
    let mut out = Vec::new();
    for (i, g) in actions.iter().enumerate() {
        let mut deps: Vec<String> =
            if i == 0 { vec![] } else { g.deps.iter().map(|d| format!("a{}", d.index(i))).collect() };
        deps.sort();
        deps.dedup();
        let behavior = ["abort", "skip", "retry"][g.behavior as usize];
        let mut a = json!({
            "id": format!("a{i}"),
            "dependencies": deps,
            "failure_behavior": behavior,
            "max_retries": g.retries,
            "timeout_ms": 50,
        });
        let o = a.as_object_mut().unwrap();
        match &g.kind {
            Gen::Tool { outcome, effect } => {
                o.insert("type".into(), json!("tool_call"));
                o.insert("tool".into(), json!(if g.unknown_tool { "nope" } else { "t" }));
                o.insert("parameters".into(), json!({"outcome": outcome_name(*outcome)}));
                if let Some(e) = effect {
                    o.insert("expected_effects".into(), json!({ key(*e): format!("by a{i}") }));
                }
            }
            Gen::Write { key: k, delete } => {
                o.insert("type".into(), json!("state_write"));
                let p =
                    if *delete { json!({"key": key(*k), "delete": true}) } else { json!({"key": key(*k), "value": i}) };
                o.insert("parameters".into(), p);
            }
            Gen::Read { key: k } => {
                o.insert("type".into(), json!("state_read"));
                o.insert("parameters".into(), json!({"key": key(*k)}));
            }
            Gen::Assert { key: k, expected } => {
                o.insert("type".into(), json!("assertion"));
                o.insert("parameters".into(), json!({"key": key(*k), "expected": expected}));
            }
        }
        if let Some(k) = g.precondition {
            o.insert("preconditions".into(), json!([{"key": key(k), "operator": "exists", "value": null}]));
        }
        out.push(a);
    }
    json!({"id": "gen", "actions": out})
}

fn count(events: &[Event], aid: &str, kind: EventKind) -> usize {
    events.iter().filter(|e| e.kind == kind && e.action_id.as_deref() == Some(aid)).count()
}

fn run_case(initial: &BTreeMap<u8, i64>, actions: &[GenAction]) -> Result<(), TestCaseError> {
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rt = Runtime::default();
    rt.register_tool_name("t").unwrap();
    for (k, v) in initial {
        rt.state_set(&key(*k), json!(v), None).unwrap();
    }
    let before = rt.state().snapshot(&Scope::global());
    let executor = Arc::new(Scripted { rt: rt.clone(), calls: AtomicU64::new(0) });
    let proposal = parse_proposal(&proposal_json(actions).to_string()).unwrap();
    let n = proposal.actions.len();
    let r: ProposalResult = tokio
        .block_on(rt.execute(proposal, executor.clone(), ExecOptions::default()))
        .map_err(|e| TestCaseError::fail(format!("execute errored: {e}")))?;
    let events = rt.events().events();
    let after = rt.state().snapshot(&Scope::global());

    // One result per action, in order, each in a final status.
    prop_assert_eq!(r.results.len(), n);
    let (mut executed, mut rejected, mut skipped) = (0u64, 0u64, 0u64);
    for (i, res) in r.results.iter().enumerate() {
        let aid = format!("a{i}");
        prop_assert_eq!(&res.action_id, &aid);
        let finals = [
            (EventKind::ActionSucceeded, count(&events, &aid, EventKind::ActionSucceeded)),
            (EventKind::ActionFailed, count(&events, &aid, EventKind::ActionFailed)),
            (EventKind::ActionRejected, count(&events, &aid, EventKind::ActionRejected)),
            (EventKind::ActionSkipped, count(&events, &aid, EventKind::ActionSkipped)),
        ];
        let total: usize = finals.iter().map(|(_, c)| c).sum();
        prop_assert_eq!(total, 1, "{} has {:?} final events ({:?})", aid, finals, res);
        let final_kind = finals.iter().find(|(_, c)| *c == 1).unwrap().0;
        let attempts = count(&events, &aid, EventKind::ActionExecuting);
        match res.status {
            ActionStatus::Succeeded => {
                executed += 1;
                prop_assert_eq!(final_kind, EventKind::ActionSucceeded);
                prop_assert!(attempts >= 1);
            }
            ActionStatus::Failed => {
                executed += 1;
                prop_assert_eq!(final_kind, EventKind::ActionFailed);
                prop_assert!(res.error.is_some());
            }
            ActionStatus::Rejected => {
                rejected += 1;
                prop_assert_eq!(final_kind, EventKind::ActionRejected);
                prop_assert_eq!(attempts, 0, "{} was rejected yet executed", aid);
            }
            ActionStatus::Skipped => {
                skipped += 1;
                // Never attempted (ActionSkipped), or failed under `skip` (ActionFailed).
                prop_assert!(matches!(final_kind, EventKind::ActionSkipped | EventKind::ActionFailed));
                if final_kind == EventKind::ActionSkipped {
                    prop_assert_eq!(attempts, 0);
                } else {
                    prop_assert!(attempts >= 1);
                }
            }
            other => prop_assert!(false, "{} ended in non-final status {:?}", aid, other),
        }
        // A failure that a timeout or panic caused is reported, not thrown.
        if let Gen::Tool { outcome: Outcome::Panic, .. } = actions[i].kind
            && attempts > 0
        {
            prop_assert!(res.error.as_deref().is_some_and(|e| e.contains("panicked")), "{:?}", res);
        }
        if let Gen::Tool { outcome: Outcome::Timeout, .. } = actions[i].kind
            && attempts > 0
        {
            prop_assert!(res.error.as_deref().is_some_and(|e| e.contains("timed out")), "{:?}", res);
        }
        if let Gen::Tool { outcome: Outcome::Terminal, .. } = actions[i].kind
            && attempts > 0
        {
            prop_assert_eq!(res.status, ActionStatus::Failed);
            prop_assert!(res.terminal);
            prop_assert_eq!(attempts, 1, "a terminal failure is never retried");
        }
    }

    // Cost rows add up.
    prop_assert_eq!(r.cost.actions_executed, executed);
    prop_assert_eq!(r.cost.actions_rejected, rejected);
    prop_assert_eq!(r.cost.actions_skipped, skipped);
    prop_assert_eq!(executed + rejected + skipped, n as u64);
    let calls = executor.calls.load(Ordering::SeqCst);
    prop_assert_eq!(r.cost.tool_calls, calls);
    let tool_attempts: usize = (0..n)
        .filter(|i| matches!(actions[*i].kind, Gen::Tool { .. }))
        .map(|i| count(&events, &format!("a{i}"), EventKind::ActionExecuting))
        .sum();
    prop_assert_eq!(tool_attempts as u64, calls);
    let retrying = events.iter().filter(|e| e.kind == EventKind::ActionRetrying).count();
    prop_assert_eq!(r.cost.retries, retrying as u64);

    // The proposal's own events bracket it.
    let own: Vec<&Event> = events.iter().filter(|e| e.proposal_id.as_deref() == Some("gen")).collect();
    prop_assert_eq!(own.first().map(|e| e.kind), Some(EventKind::ProposalReceived));
    let completed = own.last().unwrap();
    prop_assert_eq!(completed.kind, EventKind::ProposalCompleted);
    let data = completed.to_json()["data"].clone();
    let aborted = data["aborted"].as_bool().unwrap();
    prop_assert_eq!(&data["cost"]["tool_calls"], &json!(calls));

    // State: keys the proposal did not write are exactly the side writes.
    let mut expected = before.clone();
    for (k, v) in &after {
        if k.starts_with("side:") {
            expected.insert(k.clone(), v.clone());
        }
    }
    let attempted_tools: usize = after.keys().filter(|k| k.starts_with("side:")).count();
    prop_assert_eq!(
        attempted_tools,
        (0..n)
            .filter(|i| matches!(actions[*i].kind, Gen::Tool { .. })
                && r.results[*i].status != ActionStatus::Rejected
                && count(&events, &format!("a{i}"), EventKind::ActionExecuting) > 0)
            .count()
    );
    if aborted {
        prop_assert_eq!(&after, &expected, "an aborted proposal changed state");
        prop_assert_eq!(events.iter().filter(|e| e.kind == EventKind::StateRolledBack).count(), 1);
        for res in r.results.iter().filter(|x| x.status == ActionStatus::Succeeded) {
            prop_assert!(res.rolled_back);
            prop_assert!(res.state_changes.is_empty());
        }
    } else {
        prop_assert!(r.results.iter().all(|x| !x.rolled_back));
        // Replaying the recorded state changes in completion order over the
        // prior state gives the final state.
        let mut replay: Map<String, Value> = expected.clone();
        let mut changes: Vec<(u64, String, Value)> = events
            .iter()
            .filter(|e| e.kind == EventKind::StateChanged && e.proposal_id.is_some())
            .map(|e| {
                let d = e.to_json()["data"].clone();
                (e.id, d["key"].as_str().unwrap_or_default().to_string(), d)
            })
            .collect();
        changes.sort_by_key(|c| c.0);
        for (_, k, d) in changes {
            prop_assert!(!k.is_empty(), "StateChanged without a key: {}", d);
            match d.get("op").and_then(Value::as_str) {
                Some("delete") => {
                    replay.remove(&k);
                }
                _ => {
                    replay.insert(k, d.get("value").cloned().unwrap_or(Value::Null));
                }
            }
        }
        prop_assert_eq!(&after, &replay, "state differs from its StateChanged events");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_action_ends_once_costs_add_up_and_aborts_restore_state(
        initial in prop::collection::btree_map(0u8..6, 0i64..3, 0..4),
        actions in prop::collection::vec(gen_action(), 1..10),
    ) {
        run_case(&initial, &actions)?;
    }
}

/// A tool panicking in every way at once (panic while building the future and
/// inside it) fails its action; the runtime answers and the next proposal runs.
#[test]
fn panics_in_every_tool_never_escape() {
    struct Boom;
    #[async_trait]
    impl ToolExecutor for Boom {
        async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
            if call.attempt > 1 {
                std::panic::panic_any(42u32);
            }
            panic!("boom {}", call.action_id)
        }
    }
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let rt = Runtime::default();
    rt.register_tool_name("t").unwrap();
    let actions: Vec<Value> = (0..50)
        .map(|i| json!({"id": format!("a{i}"), "type": "tool_call", "tool": "t", "failure_behavior": "retry", "max_retries": 1}))
        .collect();
    let p = parse_proposal(&json!({"id": "p", "actions": actions}).to_string()).unwrap();
    let r = tokio.block_on(rt.execute(p, Arc::new(Boom), ExecOptions::default())).unwrap();
    assert!(r.results.iter().any(|x| x.error.as_deref().is_some_and(|e| e.contains("panicked"))));
    assert!(r.results.iter().all(|x| x.status != ActionStatus::Succeeded));
    let p =
        parse_proposal(r#"{"id":"q","actions":[{"id":"w","type":"state_write","parameters":{"key":"k","value":1}}]}"#)
            .unwrap();
    let r = tokio.block_on(rt.execute(p, Arc::new(Boom), ExecOptions::default())).unwrap();
    assert_eq!(r.results[0].status, ActionStatus::Succeeded);
}
