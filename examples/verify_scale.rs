//! Runs `verify` or `simulate` once (or a few times) on the proposals of
//! `benches/verify.rs`, for profiling and for counting instructions, which is
//! a load-independent way to compare sizes:
//!
//! ```text
//! cargo build --release --example verify_scale
//! valgrind --tool=callgrind target/x86_64-unknown-linux-gnu/release/examples/verify_scale verify wide 10000
//! valgrind --tool=callgrind target/x86_64-unknown-linux-gnu/release/examples/verify_scale verify wide 100000
//! ```
//!
//! Arguments: `verify|simulate chain|wide N [REPEATS]`. Prints the wall-clock
//! time of each run and, on Linux, the CPU time of the running thread (which
//! time-sharing with other processes on a loaded machine does not inflate);
//! building the proposal is not timed.

use std::hint::black_box;
use std::time::Instant;

use car_runtime::verify::{VerifyOptions, simulate, verify};
use serde_json::Map;

#[path = "../benches/support/verify_shapes.rs"]
mod verify_shapes;

/// CPU time of the calling thread, in seconds (Linux); `None` elsewhere.
#[cfg(target_os = "linux")]
fn thread_cpu() -> Option<f64> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut t = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec for the call.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (rc == 0).then_some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu() -> Option<f64> {
    None
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: verify_scale verify|simulate chain|wide N [REPEATS]";
    let (Some(what), Some(shape), Some(n)) = (args.first(), args.get(1), args.get(2).and_then(|s| s.parse().ok()))
    else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let repeats: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let chain = match shape.as_str() {
        "chain" => true,
        "wide" => false,
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let p = verify_shapes::proposal(n, chain);
    let opts = VerifyOptions { max_actions: Some(n as u64), ..VerifyOptions::default() };
    let empty = Map::new();
    for _ in 0..repeats {
        let t = Instant::now();
        let c = thread_cpu();
        match what.as_str() {
            "verify" => drop(black_box(verify(&p, &opts))),
            "simulate" => drop(black_box(simulate(&p, &empty))),
            _ => {
                eprintln!("{usage}");
                std::process::exit(2);
            }
        }
        let wall = t.elapsed().as_secs_f64() * 1e3;
        match (c, thread_cpu()) {
            (Some(c0), Some(c1)) => println!("{what} {shape} {n}: {wall:.3} ms (cpu {:.3} ms)", (c1 - c0) * 1e3),
            _ => println!("{what} {shape} {n}: {wall:.3} ms"),
        }
    }
}
