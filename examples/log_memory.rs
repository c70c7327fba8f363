//! What a long-lived runtime keeps per action: the bytes still allocated
//! after runs of `state_write`s through the JSON facade (the path the Python
//! and Node runtimes take), per action, by allocation size.
//!
//! ```text
//! cargo build --release --example log_memory
//! target/.../release/examples/log_memory 1000 20
//! target/.../release/examples/log_memory 1000 5 call
//! ```
//!
//! Runs the proposal once to warm up, then `runs` more times on the same
//! runtime (its event log unbounded) and prints the growth of the live
//! bytes divided by the actions run, then the blocks by size that grew (a
//! block of more than 4 KiB is listed by its own size: the event log's
//! chunks, each proposal's list of actions). The log keeps every event it
//! holds, and each event keeps its proposal (events render from it), so
//! this is the memory a run leaves behind for as long as the log holds it.
//! With `call` as the third argument it runs `N x runs` proposals of one
//! tool call each instead (a daemon client's usual submit) and counts per
//! proposal.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::Relaxed};

#[path = "../benches/support/engine_shapes.rs"]
#[allow(dead_code)]
mod engine_shapes;

/// Blocks of at most this size are counted by size in an array.
const SMALL: usize = 4096;
/// Slots for the sizes of larger blocks (open addressing).
const LARGE_SLOTS: usize = 1024;

/// The extensions' allocator, counting the bytes and blocks it holds.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
static BY_SIZE: [AtomicI64; SMALL + 1] = [const { AtomicI64::new(0) }; SMALL + 1];
static LARGE_SIZE: [AtomicUsize; LARGE_SLOTS] = [const { AtomicUsize::new(0) }; LARGE_SLOTS];
static LARGE_COUNT: [AtomicI64; LARGE_SLOTS] = [const { AtomicI64::new(0) }; LARGE_SLOTS];

/// Counts `d` blocks of `size` bytes.
fn count(size: usize, d: i64) {
    LIVE.fetch_add(d * size as i64, Relaxed);
    if size <= SMALL {
        BY_SIZE[size].fetch_add(d, Relaxed);
        return;
    }
    let mut i = size.wrapping_mul(0x9E37_79B9) % LARGE_SLOTS;
    for _ in 0..LARGE_SLOTS {
        match LARGE_SIZE[i].compare_exchange(0, size, Relaxed, Relaxed) {
            Ok(_) => {}
            Err(s) if s == size => {}
            Err(_) => {
                i = (i + 1) % LARGE_SLOTS;
                continue;
            }
        }
        LARGE_COUNT[i].fetch_add(d, Relaxed);
        return;
    }
}

// SAFETY: every call is passed on to mimalloc unchanged; the counting only
// reads the layouts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size(), 1);
        // SAFETY: the caller's contract, passed on.
        unsafe { car_runtime_alloc::MiMalloc.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(l.size(), -1);
        // SAFETY: the caller's contract, passed on.
        unsafe { car_runtime_alloc::MiMalloc.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count(l.size(), -1);
        count(n, 1);
        // SAFETY: the caller's contract, passed on.
        unsafe { car_runtime_alloc::MiMalloc.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn snapshot() -> (Vec<i64>, Vec<(usize, i64)>) {
    let small = BY_SIZE.iter().map(|a| a.load(Relaxed)).collect();
    let large = (0..LARGE_SLOTS).map(|i| (LARGE_SIZE[i].load(Relaxed), LARGE_COUNT[i].load(Relaxed))).collect();
    (small, large)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20).max(1);
    // `call`: n proposals of one tool call each (a daemon client's submit),
    // per proposal; else one proposal of n state writes, per action.
    let one_call = args.get(3).is_some_and(|s| s == "call");
    let core = car_runtime::api::runtime::CarRuntime::new();
    core.register_tool("noop").unwrap();
    let (_, ex) = engine_shapes::runtime();
    let (text, each) = if one_call {
        (car_runtime::api::proposal_to_json(&engine_shapes::independent(1)), n)
    } else {
        (car_runtime::api::proposal_to_json(&engine_shapes::writes(n)), 1)
    };
    let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let first = tokio_rt.block_on(core.execute_proposal(&text, ex.clone(), None, None)).unwrap();
    assert!(first.contains(r#""status":"succeeded""#) && !first.contains(r#""status":"rejected""#), "{first}");
    let live0 = LIVE.load(Relaxed);
    let (small0, large0) = snapshot();
    for _ in 0..runs * each {
        tokio_rt.block_on(core.execute_proposal(&text, ex.clone(), None, None)).unwrap();
    }
    let actions = (n * runs) as f64;
    let (small1, large1) = snapshot();
    let what = if one_call { "one-call proposals" } else { "state_writes" };
    let per = if one_call { "proposal" } else { "action" };
    println!(
        "{n} {what} x {runs} on one runtime: {:.0} bytes kept per {per}",
        (LIVE.load(Relaxed) - live0) as f64 / actions
    );
    println!("{:>10} {:>16} {:>16}", "block size", format!("blocks / {per}"), format!("bytes / {per}"));
    let mut rows: Vec<(usize, i64)> = (0..=SMALL)
        .map(|s| (s, small1[s] - small0[s]))
        .chain(large1.iter().zip(&large0).map(|(&(s, c1), &(_, c0))| (s, c1 - c0)))
        .collect();
    rows.retain(|&(s, d)| s > 0 && d != 0 && (d as f64 * s as f64 / actions).abs() >= 1.0);
    rows.sort_by_key(|&(s, _)| s);
    for (s, d) in rows {
        println!("{s:>10} {:>16.3} {:>16.1}", d as f64 / actions, d as f64 * s as f64 / actions);
    }
}
