//! Times the JSON facade's pure functions (`api::verify::verify`,
//! `simulate`, `optimize`, `transaction_check`, JSON text in and out) on
//! proposal files, the reference `benches/compare.py` sets the bindings'
//! times against (the same text, the same arguments as the binding calls).
//!
//! ```text
//! cargo build --release --example facade_time
//! target/x86_64-unknown-linux-gnu/release/examples/facade_time REPEATS FILE...
//! ```
//!
//! Prints one JSON object per file and function: `{"file", "function",
//! "best_ms", "median_ms"}` over REPEATS runs after one warm-up. `verify`
//! gets `max_actions` = the number of actions, as `compare.py` passes it.
//! `FACADE_ONLY=NAME` times that function alone (to profile one).

use std::hint::black_box;
use std::time::Instant;

use car_runtime::api::verify;

/// The allocator the Python and Node extensions use, so that their cost is
/// set against the facade's on equal terms.
#[global_allocator]
static GLOBAL: car_runtime_alloc::MiMalloc = car_runtime_alloc::MiMalloc;

/// One timed facade call.
type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);

fn time(repeats: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    let mut ms: Vec<f64> = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms[0], ms[ms.len() / 2])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(repeats) = args.first().and_then(|s| s.parse::<usize>().ok()).filter(|&r| r > 0) else {
        eprintln!("usage: facade_time REPEATS FILE...");
        std::process::exit(2);
    };
    // `FACADE_ONLY=optimize`: time that function alone (for a profiler).
    let only = std::env::var("FACADE_ONLY").ok();
    for file in &args[1..] {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("facade_time: cannot read {file}: {e}");
                std::process::exit(2);
            }
        };
        let n = match car_runtime::api::parse_proposal(&text) {
            Ok(p) => p.actions.len() as u64,
            Err(e) => {
                eprintln!("facade_time: {file} is not a proposal: {e}");
                std::process::exit(2);
            }
        };
        let cases: [Case<'_>; 4] = [
            ("verify", Box::new(|| drop(black_box(verify::verify(&text, None, None, Some(n), None))))),
            ("simulate", Box::new(|| drop(black_box(verify::simulate(&text, None))))),
            ("optimize", Box::new(|| drop(black_box(verify::optimize(&text))))),
            ("transaction_check", Box::new(|| drop(black_box(verify::transaction_check(&text, None, None))))),
        ];
        for (name, f) in cases {
            if only.as_deref().is_some_and(|o| o != name) {
                continue;
            }
            let (best, median) = time(repeats, f);
            let file = serde_json::Value::from(file.as_str());
            println!(r#"{{"file":{file},"function":"{name}","best_ms":{best:.4},"median_ms":{median:.4}}}"#);
        }
    }
}
