//! p50 / p99 of a sandboxed `true` (the `workspace-write` preset: Landlock,
//! user + network + mount namespaces, rlimits, a pids cgroup) against a
//! plain spawn of `true`, in one run.
//!
//! ```sh
//! cargo run --release --example sandbox_bench -- 300
//! cargo run --release --example sandbox_bench -- 300 --breakdown
//! ```
//!
//! `--breakdown` also times variants of the profile with one part taken
//! away each (no process limit, network `on`, no Landlock filesystem
//! rules), interleaved with the others, to show what each part costs.

use std::time::{Duration, Instant};

use car_runtime::sandbox::{Filesystem, Network, Profile, RunSpec, SandboxConfig, run};

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.iter().find_map(|s| s.parse().ok()).unwrap_or(200);
    let breakdown = args.iter().any(|a| a == "--breakdown");
    let root = std::env::temp_dir().join(format!("car-sandbox-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("bench root");
    let profile = SandboxConfig::default().profile("workspace-write").expect("preset");
    let missing = car_runtime::sandbox::probe().missing(&profile);
    assert!(missing.is_empty(), "this machine cannot enforce workspace-write: {missing:?}");
    let mut variants: Vec<(String, Option<Profile>)> =
        vec![("plain spawn of true".into(), None), ("sandboxed true (workspace-write)".into(), Some(profile.clone()))];
    if breakdown {
        let mut p = profile.clone();
        p.limits.processes = None;
        variants.push(("  without the process limit (cgroup)".into(), Some(p)));
        let mut p = profile.clone();
        p.network = Network::On;
        variants.push(("  with network on".into(), Some(p)));
        let mut p = profile.clone();
        p.filesystem = Filesystem::Open;
        variants.push(("  without Landlock filesystem rules".into(), Some(p)));
        let mut p = profile.clone();
        p.limits.processes = None;
        p.network = Network::On;
        p.filesystem = Filesystem::Open;
        variants.push(("  none of those three".into(), Some(p)));
    }
    let argv = vec!["true".to_string()];
    let mut times: Vec<Vec<Duration>> = variants.iter().map(|_| Vec::with_capacity(n)).collect();
    for _ in 0..n {
        for (i, (_, p)) in variants.iter().enumerate() {
            let t = Instant::now();
            match p {
                None => {
                    let s = std::process::Command::new("true").status().expect("spawn true");
                    assert!(s.success());
                }
                Some(p) => {
                    let spec = RunSpec { argv: &argv, root: &root, profile: Some(p), timeout: None, max_output: 1024 };
                    let o = run(&spec).expect("sandboxed true");
                    assert_eq!(o.exit_code, Some(0));
                }
            }
            times[i].push(t.elapsed());
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "{n} runs each, interleaved (release: {}; {cores} cores, load average {})",
        !cfg!(debug_assertions),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let mut p50s = Vec::new();
    for ((name, _), t) in variants.iter().zip(times.iter_mut()) {
        let (a, b) = (pct(t, 0.5), pct(t, 0.99));
        p50s.push((a, b));
        println!("{name:<40} p50 {a:7.2} ms  p99 {b:7.2} ms");
    }
    println!(
        "{:<40} p50 {:7.2} ms  p99 {:7.2} ms",
        "added by the sandbox",
        p50s[1].0 - p50s[0].0,
        p50s[1].1 - p50s[0].1
    );
}
