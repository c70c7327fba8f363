//! `car-server`: the car-runtime daemon (JSON-RPC 2.0 over WebSocket).

/// mimalloc: a proposal's parse makes several small allocations per action.
#[global_allocator]
static GLOBAL: car_runtime_alloc::MiMalloc = car_runtime_alloc::MiMalloc;

fn main() -> std::process::ExitCode {
    car_runtime::server::cli::main_with_args(std::env::args().skip(1).collect())
}
