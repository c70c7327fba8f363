//! Engine overhead per action with a no-op in-process tool and the event log
//! on: 10,000 independent tool calls, a 10,000-action chain, 10,000
//! state_writes, and 1,000 vs 100,000 independent calls (per-action cost
//! must not grow with proposal size). Throughput is reported in actions/s.

use std::sync::Arc;
use std::time::Duration;

use car_runtime::engine::{ExecOptions, FnExecutor, Runtime, RuntimeOptions, ToolCall, ToolExecutor};
use car_runtime::events::RetentionPolicy;
use car_runtime::ir::{Action, ActionProposal, ActionType, ToolFailure};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

fn runtime() -> (Runtime, Arc<dyn ToolExecutor>) {
    // The log is on; retention only bounds memory across iterations.
    let opts =
        RuntimeOptions::default().event_retention(RetentionPolicy { max_events: Some(1_000_000), max_age_secs: None });
    let rt = Runtime::new(opts);
    rt.register_tool_name("noop").unwrap();
    let ex: Arc<dyn ToolExecutor> =
        Arc::new(FnExecutor(|_c: ToolCall| -> Result<Value, ToolFailure> { Ok(Value::Null) }));
    (rt, ex)
}

fn independent(n: usize) -> ActionProposal {
    ActionProposal::new(
        (0..n)
            .map(|i| {
                let mut a = Action::tool_call("noop");
                a.id = format!("a{i}");
                a
            })
            .collect(),
    )
}

fn chain(n: usize) -> ActionProposal {
    ActionProposal::new(
        (0..n)
            .map(|i| {
                let mut a = Action::tool_call("noop");
                a.id = format!("a{i}");
                if i > 0 {
                    a.dependencies.push(format!("a{}", i - 1));
                }
                a
            })
            .collect(),
    )
}

fn writes(n: usize) -> ActionProposal {
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

fn bench_case(c: &mut Criterion, group: &str, name: &str, proposal: ActionProposal) {
    let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (rt, ex) = runtime();
    let mut g = c.benchmark_group(group);
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(proposal.actions.len() as u64));
    g.bench_function(name, |b| {
        b.iter_batched(
            || proposal.clone(),
            |p| {
                let r = tokio_rt.block_on(rt.execute(p, ex.clone(), ExecOptions::default())).unwrap();
                assert_eq!(r.cost.actions_skipped + r.cost.actions_rejected, 0);
                r
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn engine(c: &mut Criterion) {
    bench_case(c, "engine", "independent_10k", independent(10_000));
    bench_case(c, "engine", "chain_10k", chain(10_000));
    bench_case(c, "engine", "state_write_10k", writes(10_000));
    bench_case(c, "engine_scale", "independent_1k", independent(1_000));
    bench_case(c, "engine_scale", "independent_100k", independent(100_000));
}

criterion_group!(benches, engine);
criterion_main!(benches);
