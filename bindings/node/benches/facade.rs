//! The Rust facade under the Node binding, for comparison with `bench.js`:
//! `api::runtime::CarRuntime::execute_proposal` with JSON text in and out and
//! a no-op in-process tool, on a current-thread tokio runtime. The same
//! proposals as `bench.js`: 10,000 independent tool calls, a 10,000-action
//! chain, 10,000 state_writes (per action), and one one-tool proposal (per call).
//! Run: `cargo bench -p car-runtime-node --bench facade`.

use std::sync::Arc;
use std::time::Duration;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall, ToolExecutor};
use car_runtime::ir::ToolFailure;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

fn proposal(n: usize, f: impl Fn(usize) -> Value) -> String {
    json!({ "actions": (0..n).map(f).collect::<Vec<_>>() }).to_string()
}

fn facade(c: &mut Criterion) {
    let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rt = CarRuntime::new();
    rt.register_tool("noop").unwrap();
    let ex: Arc<dyn ToolExecutor> =
        Arc::new(FnExecutor(|_c: ToolCall| -> Result<Value, ToolFailure> { Ok(json!({})) }));
    let n = 10_000;
    let cases = [
        ("independent_10k", proposal(n, |i| json!({"id": format!("a{i}"), "type": "tool_call", "tool": "noop"}))),
        (
            "chain_10k",
            proposal(n, |i| {
                let deps: Vec<String> = if i > 0 { vec![format!("c{}", i - 1)] } else { vec![] };
                json!({"id": format!("c{i}"), "type": "tool_call", "tool": "noop", "dependencies": deps})
            }),
        ),
        (
            "state_write_10k",
            proposal(
                n,
                |i| json!({"id": format!("w{i}"), "type": "state_write", "parameters": {"key": format!("k{i}"), "value": i}}),
            ),
        ),
        ("one_tool", proposal(1, |_| json!({"id": "a", "type": "tool_call", "tool": "noop"}))),
    ];
    let mut g = c.benchmark_group("node_facade");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    for (name, text) in &cases {
        let actions = if *name == "one_tool" { 1 } else { n as u64 };
        g.throughput(Throughput::Elements(actions));
        g.bench_function(*name, |b| {
            b.iter(|| tokio_rt.block_on(rt.execute_proposal(text, ex.clone(), None, None)).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, facade);
criterion_main!(benches);
