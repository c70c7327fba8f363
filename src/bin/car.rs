//! `car`: run an Agent IR plan safely with the built-in tools, verify it,
//! simulate it, and explain policy and permission decisions.
//!
//! The command line is a thin front end over `car_runtime::api` and the
//! public types it returns; see `docs/cli.md`.

#![forbid(unsafe_code)]

#[path = "../cli/mod.rs"]
mod cli;

/// mimalloc: a proposal's parse makes several small allocations per action.
#[global_allocator]
static GLOBAL: car_runtime_alloc::MiMalloc = car_runtime_alloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
