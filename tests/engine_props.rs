//! Property tests: cost rows partition the actions, an aborted proposal leaves
//! state exactly as it found it, and each outcome has exactly one event.

use std::sync::Arc;

use car_runtime::engine::{ExecOptions, FnExecutor, Runtime, ToolCall};
use car_runtime::ir::{Action, ActionProposal, ActionStatus, ActionType, FailureBehavior, ToolFailure};
use car_runtime::state::Scope;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

#[derive(Debug, Clone)]
enum Step {
    Write { key: u8, value: i64 },
    Call { fail: bool, terminal: bool },
}

fn step() -> impl Strategy<Value = (Step, u8, bool)> {
    let s = prop_oneof![
        (0u8..4, -5i64..5).prop_map(|(key, value)| Step::Write { key, value }),
        (any::<bool>(), prop::bool::weighted(0.1)).prop_map(|(fail, terminal)| Step::Call { fail, terminal }),
    ];
    (s, 0u8..3, any::<bool>())
}

fn build(steps: &[(Step, u8, bool)]) -> ActionProposal {
    let actions = steps
        .iter()
        .enumerate()
        .map(|(i, (s, fb, chain))| {
            let mut a = match s {
                Step::Write { key, value } => {
                    let mut a = Action::new(ActionType::StateWrite);
                    a.parameters.insert("key".into(), json!(format!("k{key}")));
                    a.parameters.insert("value".into(), json!(value));
                    a
                }
                Step::Call { fail, terminal } => {
                    let mut a = Action::tool_call("t");
                    a.parameters.insert("fail".into(), json!(fail));
                    a.parameters.insert("terminal".into(), json!(terminal));
                    a
                }
            };
            a.id = format!("a{i}");
            a.max_retries = 1;
            a.failure_behavior = [FailureBehavior::Abort, FailureBehavior::Retry, FailureBehavior::Skip][*fb as usize];
            if *chain && i > 0 {
                a.dependencies.push(format!("a{}", i - 1));
            }
            a
        })
        .collect();
    ActionProposal::new(actions)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn outcomes_are_consistent(steps in prop::collection::vec(step(), 0..12), initial in prop::collection::vec(-3i64..3, 4)) {
        let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let rt = Runtime::default();
        rt.register_tool_name("t").unwrap();
        let g = Scope::global();
        for (i, v) in initial.iter().enumerate() {
            rt.state().set(&g, &format!("k{i}"), json!(v)).unwrap();
        }
        let before: Map<String, Value> = rt.state().snapshot(&g);
        let ex = Arc::new(FnExecutor(|c: ToolCall| {
            if c.params["terminal"] == json!(true) && c.params["fail"] == json!(true) {
                return Err(ToolFailure::terminal("terminal"));
            }
            if c.params["fail"] == json!(true) { Err(ToolFailure::ordinary("no")) } else { Ok(json!(1)) }
        }));
        let p = build(&steps);
        let n = p.actions.len();
        let r = tokio_rt.block_on(rt.execute(p.clone(), ex, ExecOptions::default())).unwrap();

        prop_assert_eq!(r.results.len(), n);
        for (res, a) in r.results.iter().zip(&p.actions) {
            prop_assert_eq!(&res.action_id, &a.id);
        }
        let c = &r.cost;
        prop_assert_eq!(c.actions_executed + c.actions_rejected + c.actions_skipped, n as u64);
        let aborted = r.results.iter().any(|x| x.status == ActionStatus::Failed);
        if aborted {
            prop_assert_eq!(rt.state().snapshot(&g), before);
            for x in r.results.iter().filter(|x| x.status == ActionStatus::Succeeded) {
                prop_assert!(x.rolled_back);
                prop_assert!(x.state_changes.is_empty());
            }
        } else {
            prop_assert!(r.results.iter().all(|x| !x.rolled_back));
            let after = rt.state().snapshot(&g);
            for (k, v) in &after {
                let written: Vec<Value> = r.results.iter()
                    .filter(|x| x.status == ActionStatus::Succeeded)
                    .filter_map(|x| x.state_changes.get(k))
                    .map(|m| m.to_value()["value"].clone())
                    .collect();
                if written.is_empty() {
                    prop_assert_eq!(Some(v), before.get(k));
                } else {
                    prop_assert!(written.contains(v));
                }
            }
        }
        let events = rt.events().events();
        for res in &r.results {
            let kind = match res.status {
                ActionStatus::Succeeded => "ActionSucceeded",
                ActionStatus::Failed => "ActionFailed",
                _ => continue,
            };
            let count = events.iter()
                .filter(|e| e.kind.as_str() == kind && e.action_id.as_deref() == Some(res.action_id.as_str()))
                .count();
            prop_assert_eq!(count, 1);
        }
    }
}
