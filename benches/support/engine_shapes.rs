//! The runtime and proposals of `benches/engine.rs`, shared with
//! `examples/engine_profile.rs` so the profile runs exactly what the
//! benchmark times: the event log on, a no-op in-process tool, and 10,000
//! independent tool calls, a chain of them, or state_writes.

use std::sync::Arc;

use car_runtime::engine::{FnExecutor, Runtime, RuntimeOptions, ToolCall, ToolExecutor};
use car_runtime::events::RetentionPolicy;
use car_runtime::ir::{Action, ActionProposal, ActionType, ToolFailure};
use serde_json::{Value, json};

/// A runtime with the event log on and the tool `noop` registered, and an
/// executor for which every call succeeds with `null`.
pub fn runtime() -> (Runtime, Arc<dyn ToolExecutor>) {
    // The log is on; retention only bounds memory across iterations.
    let opts =
        RuntimeOptions::default().event_retention(RetentionPolicy { max_events: Some(1_000_000), max_age_secs: None });
    let rt = Runtime::new(opts);
    rt.register_tool_name("noop").unwrap();
    let ex: Arc<dyn ToolExecutor> =
        Arc::new(FnExecutor(|_c: ToolCall| -> Result<Value, ToolFailure> { Ok(Value::Null) }));
    (rt, ex)
}

/// `n` independent calls of `noop`.
pub fn independent(n: usize) -> ActionProposal {
    calls(n, false)
}

/// `n` calls of `noop`, each depending on the previous one.
pub fn chain(n: usize) -> ActionProposal {
    calls(n, true)
}

fn calls(n: usize, chained: bool) -> ActionProposal {
    ActionProposal::new(
        (0..n)
            .map(|i| {
                let mut a = Action::tool_call("noop");
                a.id = format!("a{i}");
                if chained && i > 0 {
                    a.dependencies.push(format!("a{}", i - 1));
                }
                a
            })
            .collect(),
    )
}

/// `n` state_writes, each of its own key.
pub fn writes(n: usize) -> ActionProposal {
    ActionProposal::new(
        (0..n)
            .map(|i| {
                let mut a = Action::new(ActionType::StateWrite);
                a.id = format!("w{i}");
                a.parameters.insert("key".into(), Value::String(format!("k{i}")));
                a.parameters.insert("value".into(), json!(i));
                a
            })
            .collect(),
    )
}

/// Every admission layer configured (issue #18's benchmark): 100 mixed
/// policy-file rules, a 30-rule permission chain with a preset, the tier layer
/// with a ledger, and one dispatch-time inspector. None of them refuses
/// `noop`, so every action is decided by every layer and then runs.
pub fn full_admission(rt: &Runtime) {
    use car_runtime::admission::{AdmissionConfig, AdmissionStage, HostLayers};
    // 100 mixed policy-file rules: 40 denied tools, 20 keywords, 20 denied
    // parameter values, 20 parameter regexes.
    let mut text = String::from("deny_tool = [");
    text.push_str(&(0..40).map(|i| format!("\"t{i}\"")).collect::<Vec<_>>().join(", "));
    text.push_str("]\ndeny_keyword = [");
    text.push_str(&(0..20).map(|i| format!("\"secret{i}\"")).collect::<Vec<_>>().join(", "));
    text.push_str("]\n");
    for i in 0..20 {
        text.push_str(&format!("[[deny_tool_param]]\ntool = \"noop\"\nparam = \"k{i}\"\nequals = \"v{i}\"\n"));
    }
    for i in 0..20 {
        text.push_str(&format!(
            "[[deny_tool_param_matching]]\ntool = \"noop\"\nparam = \"p{i}\"\nmatches = \"^x{i}$\"\n"
        ));
    }
    let set = car_runtime::policy::parse_policy_text(&text, "bench.toml").unwrap();
    rt.with_policies_mut(|p| assert_eq!(p.apply_policy_set(&set), 100)).unwrap();
    let mut deny: Vec<Value> = (0..15).map(|i| json!({"tool": format!("d{i}")})).collect();
    deny.push(json!({"tool": "shell", "argv": "rm **"}));
    let ask: Vec<Value> = (0..14).map(|i| json!({"tool": format!("q{i}")})).collect();
    let ledger = std::env::temp_dir().join(format!("car-bench-ledger-{}.jsonl", std::process::id()));
    let config = AdmissionConfig::from_value(json!({
        "tier": "sandbox_edit",
        "ledger_path": ledger.to_string_lossy(),
        "preset": "open",
        "deny": deny,
        "ask": ask,
        "inspectors": {"egress_allowlist": ["example.com"]},
    }))
    .unwrap();
    let stage = AdmissionStage::build(config, &HostLayers::default(), None).unwrap();
    rt.set_admission_stage(Arc::new(stage));
}
