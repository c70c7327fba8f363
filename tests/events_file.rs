//! The audit file: every event of the logs attached to it, hash-chained
//! across restarts; a torn last record is reported and skipped (moved
//! aside), never merged; `car events export` and `car events verify`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use car_runtime::events::{EventKind, EventLog};
use car_runtime::store::file::{AuditFile, EVENTS_FILE, verify_file};
use serde_json::{Value, json};

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let p = std::env::temp_dir().join(format!(
        "car-evfile-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&p).unwrap();
    TempDir(p)
}

fn write_events(path: &Path, n: usize) {
    let (file, report) = AuditFile::open(path).unwrap();
    assert!(report.intact());
    let file = Arc::new(file);
    // Two logs (two connections of one daemon) share one file and chain.
    let a = EventLog::new();
    let b = EventLog::new();
    a.attach_file(file.clone());
    b.attach_file(file.clone());
    for i in 0..n {
        let log = if i % 2 == 0 { &a } else { &b };
        log.record(EventKind::StateChanged, None, None, json!({"n": i}));
    }
    a.record(EventKind::ProposalCompleted, None, None, json!({"aborted": false}));
    file.sync().unwrap();
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_chain_continues_across_restarts() {
    let d = temp_dir("restart");
    let path = d.0.join(EVENTS_FILE);
    write_events(&path, 3);
    write_events(&path, 2);
    let recs = lines(&path);
    assert_eq!(recs.len(), 7);
    let ids: Vec<u64> = recs.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, (1..=7).collect::<Vec<_>>());
    assert!(recs[0].get("prev_hash").is_none());
    for w in recs.windows(2) {
        assert_eq!(w[1]["prev_hash"], w[0]["hash"]);
    }
    let r = verify_file(&path).unwrap();
    assert!(r.intact());
    assert_eq!(r.records, 7);
    assert_eq!(r.head.as_deref(), recs[6]["hash"].as_str());
}

#[test]
fn a_torn_last_record_is_reported_moved_aside_and_not_merged() {
    let d = temp_dir("torn");
    let path = d.0.join(EVENTS_FILE);
    write_events(&path, 2);
    // A write cut short: half a record, no newline.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"id":4,"kind":"StateCh"#);
    std::fs::write(&path, &bytes).unwrap();
    let r = verify_file(&path).unwrap();
    assert!(r.intact());
    assert_eq!(r.records, 3);
    assert_eq!(r.torn.as_ref().map(|t| t.line), Some(4));
    // Reopening for appends moves the fragment aside and continues the chain.
    let (file, report) = AuditFile::open(&path).unwrap();
    let torn = report.torn.expect("reported");
    let aside = torn.moved_to.expect("moved aside");
    assert_eq!(std::fs::read(&aside).unwrap(), br#"{"id":4,"kind":"StateCh"#);
    let log = EventLog::new();
    let file = Arc::new(file);
    log.attach_file(file.clone());
    log.record(EventKind::ProposalCompleted, None, None, json!({}));
    file.sync().unwrap();
    let recs = lines(&path);
    assert_eq!(recs.len(), 4);
    assert_eq!(recs[3]["id"], json!(4));
    assert_eq!(recs[3]["kind"], json!("ProposalCompleted"));
    assert!(verify_file(&path).unwrap().intact());
}

#[test]
fn tampering_is_caught_and_refuses_appends() {
    let d = temp_dir("tamper");
    let path = d.0.join(EVENTS_FILE);
    write_events(&path, 4);
    let text = std::fs::read_to_string(&path).unwrap();
    // Altered payload.
    let altered = text.replacen(r#""n":2"#, r#""n":7"#, 1);
    std::fs::write(&path, &altered).unwrap();
    let r = verify_file(&path).unwrap();
    assert_eq!(r.tampered_at, Some(3));
    assert_eq!(r.records, 2);
    let err = AuditFile::open(&path).unwrap_err();
    assert_eq!(err.code(), "event_file_tampered");
    // The refused open changed nothing.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), altered);
    // A removed record.
    let mut ls: Vec<&str> = text.lines().collect();
    ls.remove(1);
    std::fs::write(&path, ls.join("\n") + "\n").unwrap();
    assert_eq!(verify_file(&path).unwrap().tampered_at, Some(2));
    // A removed head.
    let ls: Vec<&str> = text.lines().skip(1).collect();
    std::fs::write(&path, ls.join("\n") + "\n").unwrap();
    assert_eq!(verify_file(&path).unwrap().tampered_at, Some(1));
}

fn car() -> Command {
    Command::new(env!("CARGO_BIN_EXE_car"))
}

#[test]
fn car_run_appends_and_car_events_exports_and_verifies() {
    let d = temp_dir("cli");
    let plan = d.0.join("plan.json");
    std::fs::write(
        &plan,
        json!({"id": "p1", "actions": [
            {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 1}}
        ]})
        .to_string(),
    )
    .unwrap();
    let home = d.0.join("home");
    for _ in 0..2 {
        let out = car()
            .args(["run", plan.to_str().unwrap(), "--root", d.0.to_str().unwrap(), "--no-input"])
            .env("CAR_HOME", &home)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let log = home.join(EVENTS_FILE);
    let recs = lines(&log);
    assert_eq!(recs.iter().filter(|r| r["kind"] == json!("ProposalCompleted")).count(), 2);

    let export = d.0.join("audit.jsonl");
    let out =
        car().args(["events", "export", "--out", export.to_str().unwrap()]).env("CAR_HOME", &home).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&export).unwrap(), std::fs::read_to_string(&log).unwrap());

    let out = car().args(["events", "verify", export.to_str().unwrap(), "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verified"], json!(true));
    assert_eq!(report["records"], json!(recs.len()));

    // Tampered: exit 1, the line named.
    let text = std::fs::read_to_string(&export).unwrap().replacen("\"k\"", "\"K\"", 1);
    std::fs::write(&export, text).unwrap();
    let out = car().args(["events", "verify", export.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line"), "{}", String::from_utf8_lossy(&out.stderr));

    // A missing file is bad input.
    let out = car().args(["events", "verify", d.0.join("nope.jsonl").to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));

    // --no-event-log appends nothing.
    let before = std::fs::read_to_string(&log).unwrap();
    let out = car()
        .args(["run", plan.to_str().unwrap(), "--root", d.0.to_str().unwrap(), "--no-input", "--no-event-log"])
        .env("CAR_HOME", &home)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), before);
}

#[test]
fn concurrent_proposals_share_the_sync_and_every_ticket_resolves() {
    use std::time::Duration;
    let d = temp_dir("group");
    let path = d.0.join(EVENTS_FILE);
    let (file, _) = AuditFile::open(&path).unwrap();
    let file = Arc::new(file);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..16 {
            let file = file.clone();
            tasks.push(tokio::spawn(async move {
                let log = EventLog::new();
                log.attach_file(file);
                for i in 0..25 {
                    log.record(EventKind::StateChanged, None, None, json!({"t": t, "i": i}));
                    log.record(EventKind::ProposalCompleted, None, None, json!({"aborted": false}));
                    tokio::time::timeout(Duration::from_secs(20), log.sink_durable())
                        .await
                        .expect("a durability ticket resolves");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    // The sync thread ends when idle; a later ticket starts another.
    std::thread::sleep(Duration::from_millis(1300));
    let ticket = file.durable();
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), ticket).await.unwrap().unwrap() });
    let r = verify_file(&path).unwrap();
    assert!(r.intact(), "{r:?}");
    assert_eq!(r.records, 16 * 25 * 2);
}

/// The records of the file whose `data` has `"t": t`, in file order.
fn records_of(path: &Path, t: u64) -> Vec<Value> {
    lines(path).into_iter().filter(|r| r["data"]["t"] == json!(t)).collect()
}

#[test]
fn a_batch_spans_many_proposals_and_each_ticket_sees_its_own_events_in_the_file() {
    use std::time::Duration;
    let d = temp_dir("batch");
    let path = d.0.join(EVENTS_FILE);
    let (file, _) = AuditFile::open(&path).unwrap();
    let file = Arc::new(file);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    const TASKS: u64 = 12;
    const PROPOSALS: u64 = 20;
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let (file, path) = (file.clone(), path.clone());
            // Each task is one connection's log: proposals one after another,
            // each answered once its ticket resolves.
            tasks.push(tokio::spawn(async move {
                let log = EventLog::new();
                log.attach_file(file);
                for i in 0..PROPOSALS {
                    log.record(EventKind::ProposalReceived, None, None, json!({"t": t, "i": i, "n": 0}));
                    for n in 1..=3 {
                        log.record(EventKind::StateChanged, None, None, json!({"t": t, "i": i, "n": n}));
                        tokio::task::yield_now().await;
                    }
                    log.record(EventKind::ProposalCompleted, None, None, json!({"t": t, "i": i, "n": 4}));
                    tokio::time::timeout(Duration::from_secs(20), log.sink_durable())
                        .await
                        .expect("a durability ticket resolves");
                    // The reply goes now: every event of this proposal is in the file.
                    let text = std::fs::read_to_string(&path).unwrap();
                    // (A batch another task is writing may be cut short here.)
                    let datas: Vec<Value> = text
                        .lines()
                        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                        .map(|r| r["data"].clone())
                        .collect();
                    for n in 0..=4 {
                        let data = json!({"t": t, "i": i, "n": n});
                        assert!(datas.contains(&data), "task {t} proposal {i}: {data} is not in the file");
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    file.sync().unwrap();
    let r = verify_file(&path).unwrap();
    assert!(r.intact(), "{r:?}");
    assert_eq!(r.records as u64, TASKS * PROPOSALS * 5);
    let recs = lines(&path);
    assert_eq!(
        recs.iter().map(|r| r["id"].as_u64().unwrap()).collect::<Vec<_>>(),
        (1..=recs.len() as u64).collect::<Vec<_>>()
    );
    // Each log's events are in the file in the order it recorded them.
    for t in 0..TASKS {
        let order: Vec<(u64, u64)> = records_of(&path, t)
            .iter()
            .map(|r| (r["data"]["i"].as_u64().unwrap(), r["data"]["n"].as_u64().unwrap()))
            .collect();
        let want: Vec<(u64, u64)> = (0..PROPOSALS).flat_map(|i| (0..5).map(move |n| (i, n))).collect();
        assert_eq!(order, want, "task {t}");
    }
    assert_eq!(r.head.as_deref(), recs.last().unwrap()["hash"].as_str());
}

#[test]
fn two_open_files_on_one_path_keep_one_chain() {
    // Two opens of one file lock it as two processes do (a flock is per open
    // file): each batch folds in what the other appended.
    let d = temp_dir("two-open");
    let path = d.0.join(EVENTS_FILE);
    let (a, _) = AuditFile::open(&path).unwrap();
    let (b, _) = AuditFile::open(&path).unwrap();
    let (a, b) = (Arc::new(a), Arc::new(b));
    let (la, lb) = (EventLog::new(), EventLog::new());
    la.attach_file(a.clone());
    lb.attach_file(b.clone());
    for i in 0..5u64 {
        la.record(EventKind::StateChanged, None, None, json!({"t": 0, "i": i}));
        la.record(EventKind::StateChanged, None, None, json!({"t": 0, "i": i}));
        a.sync().unwrap();
        lb.record(EventKind::StateChanged, None, None, json!({"t": 1, "i": i}));
        b.sync().unwrap();
    }
    let recs = lines(&path);
    assert_eq!(recs.len(), 15);
    let ts: Vec<u64> = recs.iter().map(|r| r["data"]["t"].as_u64().unwrap()).collect();
    assert_eq!(ts, [0, 0, 1].repeat(5));
    assert!(verify_file(&path).unwrap().intact());
    // And at once, from threads: every record lands, one chain.
    std::thread::scope(|s| {
        for (t, log) in [(2u64, &la), (3, &lb)] {
            s.spawn(move || {
                for i in 0..300u64 {
                    log.record(EventKind::StateChanged, None, None, json!({"t": t, "i": i}));
                }
            });
        }
    });
    a.sync().unwrap();
    b.sync().unwrap();
    let r = verify_file(&path).unwrap();
    assert!(r.intact(), "{r:?}");
    assert_eq!(r.records, 15 + 600);
    for t in [2, 3] {
        let is: Vec<u64> = records_of(&path, t).iter().map(|r| r["data"]["i"].as_u64().unwrap()).collect();
        assert_eq!(is, (0..300).collect::<Vec<_>>());
    }
}

/// Run by [`two_processes_append_to_one_chain`] as a child process of its
/// own (`CAR_TEST_APPENDER=<file>,<tag>,<start file>`); does nothing when run
/// as a test.
#[test]
fn appender_child_process() {
    let Ok(spec) = std::env::var("CAR_TEST_APPENDER") else { return };
    let mut parts = spec.split(',');
    let (path, tag, start) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let t: u64 = tag.parse().unwrap();
    let (file, _) = AuditFile::open(path).unwrap();
    let file = Arc::new(file);
    let log = EventLog::new();
    log.attach_file(file.clone());
    // Both processes hold the file open before either appends.
    std::fs::write(format!("{path}.ready-{tag}"), b"").unwrap();
    while !Path::new(start).exists() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for i in 0..400u64 {
        log.record(EventKind::StateChanged, None, None, json!({"t": t, "i": i}));
        if i % 10 == 9 {
            rt.block_on(log.sink_durable());
        }
    }
    file.sync().unwrap();
}

#[test]
fn two_processes_append_to_one_chain() {
    let d = temp_dir("procs");
    let path = d.0.join(EVENTS_FILE);
    let start = d.0.join("start");
    let children: Vec<_> = [1, 2]
        .map(|t| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "events_file::appender_child_process", "--nocapture"])
                .env("CAR_TEST_APPENDER", format!("{},{t},{}", path.display(), start.display()))
                .spawn()
                .unwrap()
        })
        .into_iter()
        .collect();
    for t in [1, 2] {
        let ready = PathBuf::from(format!("{}.ready-{t}", path.display()));
        for _ in 0..2000 {
            if ready.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(ready.exists(), "child {t} did not open the file");
    }
    std::fs::write(&start, b"").unwrap();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    // Both appended after both opened: the second to write folded in the
    // first's records, and every record of both is in one chain.
    let r = verify_file(&path).unwrap();
    assert!(r.intact(), "{r:?}");
    assert_eq!(r.records, 800);
    for t in [1, 2] {
        let is: Vec<u64> = records_of(&path, t).iter().map(|r| r["data"]["i"].as_u64().unwrap()).collect();
        assert_eq!(is, (0..400).collect::<Vec<_>>(), "process {t}");
    }
    let switches = lines(&path).windows(2).filter(|w| w[0]["data"]["t"] != w[1]["data"]["t"]).count();
    assert!(switches >= 1);
}
