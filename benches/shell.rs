//! Shell matcher throughput: simple segments per second.
//!
//! `cargo bench --bench shell -- --quick`

use std::hint::black_box;

use car_runtime::permission::ShellRules;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const SEGMENTS: [&str; 8] = [
    "git status --short",
    "ls -la src",
    "npm run build",
    "cargo test --lib",
    "grep -rn TODO src",
    "cat README.md",
    "echo done",
    "git diff --stat",
];

fn rules() -> ShellRules {
    ShellRules::new(
        &["git status **", "git diff **", "ls **", "npm run *", "cargo test **", "grep **", "cat *", "echo **"],
        &["git push **", "npm publish **"],
        &["rm **", "git push --force **", "sudo **"],
    )
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let r = rules();
    let mut g = c.benchmark_group("shell");
    // One simple segment per call.
    g.throughput(Throughput::Elements(SEGMENTS.len() as u64));
    g.bench_function("single_segment_commands", |b| {
        b.iter(|| {
            for s in SEGMENTS {
                black_box(r.check(black_box(s)));
            }
        })
    });
    // Many segments in one command.
    let long = (0..128).map(|i| SEGMENTS[i % SEGMENTS.len()]).collect::<Vec<_>>().join(" && ");
    g.throughput(Throughput::Elements(128));
    g.bench_function("128_segment_command", |b| b.iter(|| black_box(r.check(black_box(&long)))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
