//! Parse + serialise of a 10,000-action proposal, next to a plain
//! `serde_json::Value` round trip of the same text. Throughput in bytes.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

fn proposal_text(n: usize) -> String {
    let actions: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "id": format!("a{i}"),
                "type": if i % 4 == 0 { "state_write" } else { "tool_call" },
                "tool": "deploy",
                "parameters": {"env": "staging", "n": i, "key": format!("k{i}"), "value": {"nested": [1, 2, 3]}},
                "preconditions": [{"key": "tests_passed", "operator": "eq", "value": true}],
                "expected_effects": {format!("k{i}"): true},
                "state_dependencies": [format!("k{}", i.saturating_sub(1))],
                "failure_behavior": "retry",
                "timeout_ms": 30000,
                "metadata": {"rationale": "benchmark"}
            })
        })
        .collect();
    json!({"id": "abc123def456", "source": "bench", "timestamp": "2026-05-02T12:00:00Z", "actions": actions})
        .to_string()
}

fn bench(c: &mut Criterion) {
    let text = proposal_text(10_000);
    let mut g = c.benchmark_group("ir_10k_actions");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("parse_and_serialise_proposal", |b| {
        b.iter(|| {
            let p = car_runtime::ir::parse_proposal(std::hint::black_box(&text)).unwrap();
            serde_json::to_string(&p).unwrap()
        })
    });
    g.bench_function("serde_json_value_roundtrip", |b| {
        b.iter(|| {
            let v: Value = serde_json::from_str(std::hint::black_box(&text)).unwrap();
            serde_json::to_string(&v).unwrap()
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
