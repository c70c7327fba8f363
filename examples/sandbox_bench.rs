//! p50 / p99 of a sandboxed `true` (the `workspace-write` preset: Landlock,
//! user + network + mount namespaces, rlimits, a pids cgroup) against a
//! plain spawn of `true`, in one run.
//!
//! ```sh
//! cargo run --release --example sandbox_bench -- 300
//! ```

use std::time::{Duration, Instant};

use car_runtime::sandbox::{RunSpec, SandboxConfig, run};

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let root = std::env::temp_dir().join(format!("car-sandbox-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("bench root");
    let profile = SandboxConfig::default().profile("workspace-write").expect("preset");
    let missing = car_runtime::sandbox::probe().missing(&profile);
    assert!(missing.is_empty(), "this machine cannot enforce workspace-write: {missing:?}");
    let argv = vec!["true".to_string()];
    let (mut plain, mut boxed) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        let s = std::process::Command::new("true").status().expect("spawn true");
        assert!(s.success());
        plain.push(t.elapsed());
        let t = Instant::now();
        let spec = RunSpec { argv: &argv, root: &root, profile: Some(&profile), timeout: None, max_output: 1024 };
        let o = run(&spec).expect("sandboxed true");
        assert_eq!(o.exit_code, Some(0));
        boxed.push(t.elapsed());
    }
    let _ = std::fs::remove_dir_all(&root);
    let (p50, p99) = (pct(&mut plain, 0.5), pct(&mut plain, 0.99));
    let (s50, s99) = (pct(&mut boxed, 0.5), pct(&mut boxed, 0.99));
    println!("{n} runs each, interleaved");
    println!("plain spawn of true:     p50 {p50:.2} ms  p99 {p99:.2} ms");
    println!("sandboxed true:          p50 {s50:.2} ms  p99 {s99:.2} ms");
    println!("added by the sandbox:    p50 {:.2} ms  p99 {:.2} ms", s50 - p50, s99 - p99);
}
