//! A profiling harness for the engine's per-action overhead, the same
//! workloads as `benches/engine.rs` (event log on, no-op in-process tool).
//!
//! `cargo build --release --example engine_profile`, then for instruction
//! counts that do not depend on machine load:
//!
//! ```text
//! valgrind --tool=callgrind target/.../release/examples/engine_profile state_write 10000 1
//! valgrind --tool=callgrind target/.../release/examples/engine_profile state_write 10000 3
//! ```
//!
//! The difference of the two totals divided by `2 * 10000` is the
//! instructions per action in steady state (setup and the first, cold run
//! cancel out). Workloads: `state_write`, `independent`, `chain`. With
//! `SIZES=1` set it also prints the sizes of the event and result types (the
//! event log holds up to `max_events` of them).

use std::sync::Arc;

use car_runtime::engine::{ExecOptions, FnExecutor, Runtime, RuntimeOptions, ToolCall, ToolExecutor};
use car_runtime::events::RetentionPolicy;
use car_runtime::ir::{Action, ActionProposal, ActionType, ToolFailure};
use serde_json::{Value, json};

fn proposal(kind: &str, n: usize) -> ActionProposal {
    let actions = (0..n)
        .map(|i| match kind {
            "state_write" => {
                let mut a = Action::new(ActionType::StateWrite);
                a.id = format!("w{i}");
                a.parameters.insert("key".into(), Value::String(format!("k{i}")));
                a.parameters.insert("value".into(), json!(i));
                a
            }
            "independent" | "chain" => {
                let mut a = Action::tool_call("noop");
                a.id = format!("a{i}");
                if kind == "chain" && i > 0 {
                    a.dependencies.push(format!("a{}", i - 1));
                }
                a
            }
            other => panic!("unknown workload `{other}` (state_write, independent, chain)"),
        })
        .collect();
    ActionProposal::new(actions)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map_or("state_write", String::as_str);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);

    let opts =
        RuntimeOptions::default().event_retention(RetentionPolicy { max_events: Some(1_000_000), max_age_secs: None });
    let rt = Runtime::new(opts);
    rt.register_tool_name("noop").unwrap();
    let ex: Arc<dyn ToolExecutor> =
        Arc::new(FnExecutor(|_c: ToolCall| -> Result<Value, ToolFailure> { Ok(Value::Null) }));
    let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let p = proposal(kind, n);
    for _ in 0..iters {
        let r = tokio_rt.block_on(rt.execute(p.clone(), ex.clone(), ExecOptions::default())).unwrap();
        assert_eq!(r.cost.actions_skipped + r.cost.actions_rejected, 0);
    }
    if std::env::var_os("SIZES").is_some() {
        println!(
            "Event {} EventData {} ActionEvent {} ActionResult {} Action {}",
            std::mem::size_of::<car_runtime::events::Event>(),
            std::mem::size_of::<car_runtime::events::EventData>(),
            std::mem::size_of::<car_runtime::events::ActionEvent>(),
            std::mem::size_of::<car_runtime::ir::ActionResult>(),
            std::mem::size_of::<Action>()
        );
    }
    println!("{kind}: {n} actions x {iters}; {} events held", rt.events().count());
}
