//! The workloads of the instruction-count benchmark (`benches/icount.py`,
//! run by `scripts/test`): each case runs once inside [`measured`], the one
//! function callgrind collects (`--toggle-collect`), so building the inputs
//! is not counted.
//!
//! ```text
//! cargo build --example icount
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='icount::measured*' \
//!     target/x86_64-unknown-linux-gnu/debug/examples/icount verify_chain
//! ```
//!
//! `icount list` prints the case names. The cases: `verify` and `simulate`
//! of the chain and wide proposals of `benches/support/verify_shapes.rs`;
//! the facade's text-in, text-out `verify` and `optimize` of the wide one
//! (parsing and serialising included: the bindings' path); the engine
//! (`benches/support/engine_shapes.rs`) running state_writes and independent
//! tool calls through a runtime that has already run the same proposal once.

use std::hint::black_box;

use car_runtime::engine::ExecOptions;
use car_runtime::verify::{VerifyOptions, simulate, verify};
use serde_json::Map;

// Shared with benches/engine.rs, which uses the shapes this file does not.
#[allow(dead_code)]
#[path = "../benches/support/engine_shapes.rs"]
mod engine_shapes;
#[path = "../benches/support/verify_shapes.rs"]
mod verify_shapes;

/// Actions per verify/simulate case.
const N: usize = 2_000;
/// Actions per facade case (parsing dominates: fewer keep the check quick).
const FACADE_N: usize = 500;
/// Actions per engine case.
const ENGINE_N: usize = 500;

const CASES: [&str; 8] = [
    "verify_chain",
    "verify_wide",
    "simulate_chain",
    "simulate_wide",
    "facade_verify_wide",
    "facade_optimize_wide",
    "engine_state_writes",
    "engine_tool_calls",
];

/// The measured region: callgrind collects inside this function only.
#[inline(never)]
fn measured<T>(f: impl FnOnce() -> T) -> T {
    black_box(f())
}

fn main() {
    let case = std::env::args().nth(1).unwrap_or_default();
    let opts = VerifyOptions { max_actions: Some(N as u64), ..VerifyOptions::default() };
    let empty = Map::new();
    match case.as_str() {
        "list" => println!("{}", CASES.join("\n")),
        "verify_chain" | "verify_wide" | "simulate_chain" | "simulate_wide" => {
            let p = verify_shapes::proposal(N, case.ends_with("chain"));
            if case.starts_with("verify") {
                drop(measured(|| verify(&p, &opts)));
            } else {
                drop(measured(|| simulate(&p, &empty)));
            }
        }
        "facade_verify_wide" | "facade_optimize_wide" => {
            let text = car_runtime::api::proposal_to_json(&verify_shapes::proposal(FACADE_N, false));
            let out = if case == "facade_verify_wide" {
                measured(|| car_runtime::api::verify::verify(&text, None, None, Some(FACADE_N as u64), None))
            } else {
                measured(|| car_runtime::api::verify::optimize(&text))
            };
            assert!(out.is_ok());
        }
        "engine_state_writes" | "engine_tool_calls" => {
            let p = if case == "engine_state_writes" {
                engine_shapes::writes(ENGINE_N)
            } else {
                engine_shapes::independent(ENGINE_N)
            };
            let (rt, ex) = engine_shapes::runtime();
            let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            // Once unmeasured: the runtime is warm, as a long-lived one is.
            tokio_rt.block_on(rt.execute(p.clone(), ex.clone(), ExecOptions::default())).unwrap();
            let r = measured(|| tokio_rt.block_on(rt.execute(p, ex, ExecOptions::default())).unwrap());
            assert_eq!(r.cost.actions_executed as usize, ENGINE_N);
        }
        other => {
            eprintln!("icount: unknown case `{other}`; `icount list` prints the cases");
            std::process::exit(2);
        }
    }
}
