//! A profiling harness for the engine's per-action overhead, the same
//! workloads as `benches/engine.rs` (event log on, no-op in-process tool;
//! both take them from `benches/support/engine_shapes.rs`).
//!
//! `cargo build --release --example engine_profile`, then for instruction
//! counts that do not depend on machine load:
//!
//! ```text
//! valgrind --tool=callgrind target/.../release/examples/engine_profile state_write 10000 1
//! valgrind --tool=callgrind target/.../release/examples/engine_profile state_write 10000 3
//! ```
//!
//! The difference of the two totals divided by `2 * 10000` is the
//! instructions per action in steady state (setup and the first, cold run
//! cancel out). Workloads: `state_write`, `independent`, `chain`; with
//! `ADMISSION=full`, every admission layer configured. With
//! `FACADE=1`, through the JSON facade the bindings call (text in and out);
//! `MAX_EVENTS=N` bounds the facade runtime's event log; `TEXT=FILE` runs
//! that proposal text through the facade instead (the text
//! `benches/compare.py` sends holds only the fields it sets; `N` is then
//! the number of actions the text holds);
//! with `SIZES=1` set it also prints the sizes of the event and result types (the
//! event log holds up to `max_events` of them).

use car_runtime::engine::ExecOptions;

/// The allocator of the Python and Node extensions, which run the engine
/// users measure.
#[global_allocator]
static GLOBAL: car_runtime_alloc::MiMalloc = car_runtime_alloc::MiMalloc;
use car_runtime::ir::{Action, ActionProposal};

#[path = "../benches/support/engine_shapes.rs"]
mod engine_shapes;

fn proposal(kind: &str, n: usize) -> ActionProposal {
    match kind {
        "state_write" => engine_shapes::writes(n),
        "independent" => engine_shapes::independent(n),
        "chain" => engine_shapes::chain(n),
        other => panic!("unknown workload `{other}` (state_write, independent, chain)"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map_or("state_write", String::as_str);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);

    // `FACADE=1`: the path the Python and Node runtimes take, JSON text in
    // and out through `api::runtime::CarRuntime::execute_proposal` (the
    // parse, the front end's admission defaults, the result's JSON).
    if std::env::var_os("FACADE").is_some() {
        let core = car_runtime::api::runtime::CarRuntime::new();
        // `MAX_EVENTS=N`: the log bounded (a profile of the steady state
        // without the first touch of the memory a growing log takes).
        if let Some(max) = std::env::var("MAX_EVENTS").ok().and_then(|m| m.parse::<u64>().ok()) {
            core.event_retention(Some(&format!(r#"{{"max_events":{max}}}"#))).unwrap();
        }
        let (_, ex) = engine_shapes::runtime();
        // `TEXT=FILE`: this proposal text instead (`benches/compare.py`
        // sends only the fields it sets; the serialized proposal has every
        // field); per action is then over the actions it holds.
        let (text, n) = match std::env::var_os("TEXT") {
            Some(path) => {
                let text = std::fs::read_to_string(&path).unwrap();
                let held = car_runtime::api::parse_proposal(&text)
                    .unwrap_or_else(|e| panic!("{}: not a proposal: {e}", path.display()))
                    .actions
                    .len();
                assert!(held > 0, "{}: no actions", path.display());
                (text, held)
            }
            None => (car_runtime::api::proposal_to_json(&proposal(kind, n)), n),
        };
        let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut per_action: Vec<f64> = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t0 = std::time::Instant::now();
            let out = tokio_rt.block_on(core.execute_proposal(&text, ex.clone(), None, None)).unwrap();
            per_action.push(t0.elapsed().as_secs_f64() * 1e6 / n as f64);
            assert!(out.contains("\"status\":\"succeeded\""));
        }
        // Per action, over the runs on the one long-lived runtime (its
        // event log growing): the best, the median and the mean (which
        // counts the runs that paid for the log's growth).
        let mean = per_action.iter().sum::<f64>() / iters.max(1) as f64;
        let mut sorted = per_action.clone();
        sorted.sort_by(f64::total_cmp);
        let (best, median) = (sorted.first().copied().unwrap_or(0.0), sorted.get(iters / 2).copied().unwrap_or(0.0));
        let worst = sorted.last().copied().unwrap_or(0.0);
        println!(
            "{kind}: {n} actions x {iters} through the facade; per action: best {best:.3} us, median {median:.3} us, mean {mean:.3} us, worst {worst:.3} us"
        );
        return;
    }
    let (rt, ex) = engine_shapes::runtime();
    // `ADMISSION=full`: every admission layer configured (benches/engine.rs).
    if std::env::var("ADMISSION").as_deref() == Ok("full") {
        engine_shapes::full_admission(&rt);
    }
    let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let p = proposal(kind, n);
    for _ in 0..iters {
        let r = tokio_rt.block_on(rt.execute(p.clone(), ex.clone(), ExecOptions::default())).unwrap();
        assert_eq!(r.cost.actions_skipped + r.cost.actions_rejected, 0);
    }
    if std::env::var_os("SIZES").is_some() {
        println!(
            "Event {} EventData {} ActionEvent {} ActionResult {} Action {}",
            std::mem::size_of::<car_runtime::events::Event>(),
            std::mem::size_of::<car_runtime::events::EventData>(),
            std::mem::size_of::<car_runtime::events::ActionEvent>(),
            std::mem::size_of::<car_runtime::ir::ActionResult>(),
            std::mem::size_of::<Action>()
        );
    }
    println!("{kind}: {n} actions x {iters}; {} events held", rt.events().count());
}
