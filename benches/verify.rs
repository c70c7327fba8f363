//! Scale of verify and simulate: a chain (each action reads what the previous
//! one wrote) and a wide proposal (independent actions) at 1k, 10k and 100k
//! actions. Targets: 100k chain verified in under 300 ms; time(100k) /
//! time(10k) at most 12 for both shapes.
//!
//! `cargo bench --bench verify -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::time::Duration;

use car_runtime::verify::{VerifyOptions, simulate, verify};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::Map;

#[path = "support/verify_shapes.rs"]
mod verify_shapes;
use verify_shapes::proposal;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("verify");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for &n in &[1_000usize, 10_000, 100_000] {
        for (shape, chain) in [("chain", true), ("wide", false)] {
            let p = proposal(n, chain);
            let opts = VerifyOptions { max_actions: Some(n as u64), ..VerifyOptions::default() };
            g.bench_with_input(BenchmarkId::new(format!("verify_{shape}"), n), &p, |b, p| {
                b.iter(|| black_box(verify(p, &opts)))
            });
            let empty = Map::new();
            g.bench_with_input(BenchmarkId::new(format!("simulate_{shape}"), n), &p, |b, p| {
                b.iter(|| black_box(simulate(p, &empty)))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
