//! Throughput of the store backends: state compare-and-set writes per
//! second and events appended per second, embedded and (with a URL)
//! PostgreSQL, and the time from a grant through one handle to the wake-up
//! of a waiter on another (two pools and listeners, as two hosts).
//!
//! ```text
//! cargo run --release --example store_bench --features postgres -- [postgres://...]
//! ```

use std::time::Instant;

use car_runtime::approval::store::{ApprovalDecision, Ticket};
use car_runtime::events::EventKind;
use car_runtime::store::{Backends, CasOutcome, Expect, NewEvent};
use serde_json::json;

async fn cas_writes(b: &Backends, tasks: usize, per_task: usize) -> f64 {
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let st = b.state.clone();
        handles.push(tokio::spawn(async move {
            let key = format!("bench{t}");
            let mut version = match st.put(None, &key, Some(json!(0)), Expect::Any).await.unwrap() {
                CasOutcome::Written { version } => version,
                CasOutcome::Conflict { .. } => unreachable!(),
            };
            for i in 0..per_task {
                match st.put(None, &key, Some(json!(i)), Expect::Version(version)).await.unwrap() {
                    CasOutcome::Written { version: v } => version = v,
                    CasOutcome::Conflict { current } => panic!("unexpected conflict at {current}"),
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    (tasks * per_task) as f64 / t0.elapsed().as_secs_f64()
}

async fn events(b: &Backends, batches: usize, batch: usize) -> f64 {
    let t0 = Instant::now();
    for i in 0..batches {
        let evs =
            (0..batch).map(|j| NewEvent::new(EventKind::StateChanged, json!({"batch": i, "n": j}))).collect::<Vec<_>>();
        b.events.append(evs).await.unwrap();
    }
    (batches * batch) as f64 / t0.elapsed().as_secs_f64()
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = std::env::temp_dir().join(format!("car-store-bench-{}", std::process::id()));
    let emb = Backends::embedded(&dir).unwrap();
    println!("embedded: state CAS writes/s (1 task): {:.0}", cas_writes(&emb, 1, 200_000).await);
    println!("embedded: events appended/s (batches of 1): {:.0}", events(&emb, 100_000, 1).await);
    let _ = std::fs::remove_dir_all(&dir);

    #[cfg(feature = "postgres")]
    if let Some(url) = std::env::args().nth(1) {
        use car_runtime::store::postgres::PgBackends;
        let schema = format!("bench_{}", std::process::id());
        PgBackends::drop_schema(&url, &schema).await.unwrap();
        let a = PgBackends::connect(&url, &schema, "bench-a").await.unwrap();
        let host_b = PgBackends::connect(&url, &schema, "bench-b").await.unwrap();
        let (ba, bb) = (a.backends(), host_b.backends());
        println!("postgres: state CAS writes/s (1 task): {:.0}", cas_writes(&ba, 1, 2_000).await);
        println!("postgres: state CAS writes/s (8 tasks): {:.0}", cas_writes(&ba, 8, 500).await);
        println!("postgres: events appended/s (batches of 1): {:.0}", events(&ba, 2_000, 1).await);
        println!("postgres: events appended/s (batches of 100): {:.0}", events(&ba, 100, 100).await);
        // Grant on B, waiter on A.
        let _approver = ba.approvals.subscribe();
        let mut lat = Vec::new();
        let mut grant = Vec::new();
        for i in 0..200 {
            let Ticket::Pending(p) = ba.approvals.request(None, "t", &format!("d{i}"), None).await.unwrap() else {
                panic!("pending")
            };
            let waiter = {
                let ap = ba.approvals.clone();
                let key = p.key.clone();
                tokio::spawn(async move {
                    let r = ap.wait(&key, None).await.unwrap();
                    (r, Instant::now())
                })
            };
            // Let the waiter park on its notification first.
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            let t0 = Instant::now();
            bb.approvals.resolve(&p.key, ApprovalDecision::Allow, "bench").await.unwrap();
            grant.push(t0.elapsed().as_secs_f64() * 1e3);
            let (_, woke) = waiter.await.unwrap();
            lat.push(woke.duration_since(t0).as_secs_f64() * 1e3);
        }
        lat.sort_by(f64::total_cmp);
        grant.sort_by(f64::total_cmp);
        println!(
            "postgres: the grant itself (one conditional UPDATE + pg_notify, durable commit): p50 {:.2} ms, p99 {:.2} ms",
            pct(&grant, 0.5),
            pct(&grant, 0.99)
        );
        println!(
            "postgres: grant on B -> waiter on A holds its resolution, used up (durable): p50 {:.2} ms, p99 {:.2} ms (200 grants)",
            pct(&lat, 0.5),
            pct(&lat, 0.99)
        );
        // The shared tier ledger: a refresh that finds nothing new (what
        // every run pays with --store), and a record appended on B until a
        // refresh on A holds it.
        {
            use car_runtime::policy::{ApprovalRecord, JsonlLedger, PermissionTier};
            use car_runtime::store::ledger::SharedLedger;
            use std::sync::Arc;
            let d = std::env::temp_dir().join(format!("car-ledger-bench-{}", std::process::id()));
            let la = SharedLedger::shared(Arc::new(JsonlLedger::new(d.join("a.jsonl"))), ba.ledger.clone());
            let lb = SharedLedger::shared(Arc::new(JsonlLedger::new(d.join("b.jsonl"))), bb.ledger.clone());
            la.refresh().await.unwrap();
            let ms = |t0: Instant| t0.elapsed().as_secs_f64() * 1e3;
            let mut idle = Vec::new();
            for _ in 0..500 {
                let t0 = Instant::now();
                la.refresh().await.unwrap();
                idle.push(ms(t0));
            }
            let mut held = Vec::new();
            for i in 0..200 {
                let fp = format!("fp-{i}");
                let rec = ApprovalRecord::new(&fp, PermissionTier::FullAccess, true, "bench", "", None).unwrap();
                let t0 = Instant::now();
                lb.append(&rec).await.unwrap();
                la.refresh().await.unwrap();
                assert!(la.latest_shared().unwrap().contains_key(&fp));
                held.push(ms(t0));
            }
            idle.sort_by(f64::total_cmp);
            held.sort_by(f64::total_cmp);
            println!(
                "postgres: tier ledger refresh with nothing new: p50 {:.3} ms, p99 {:.3} ms (500)",
                pct(&idle, 0.5),
                pct(&idle, 0.99)
            );
            println!(
                "postgres: tier ledger record on B (durable, under its lock) until A's refresh holds it: p50 {:.2} ms, p99 {:.2} ms (200)",
                pct(&held, 0.5),
                pct(&held, 0.99)
            );
            let _ = std::fs::remove_dir_all(&d);
        }
        drop((ba, bb, a, host_b));
        PgBackends::drop_schema(&url, &schema).await.unwrap();
    }
}
