//! Live approvals (`CarRuntime::on_approval` / `approvals_subscribe` /
//! `approval_resolve`): an `ask` holds its action until an attached approver
//! answers; allow runs it, anything else rejects it with the reason, the
//! deadline denies it, a resolution racing the deadline has exactly one
//! outcome, the proposal's other actions go on meanwhile, and a resolution
//! made while the process was down applies on resubmission without asking.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall, ToolExecutor};
use serde_json::{Value, json};

fn executor(log: Arc<Mutex<Vec<String>>>) -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(move |call: ToolCall| {
        log.lock().unwrap().push(call.action_id.clone());
        Ok(json!({"ran": call.tool}))
    }))
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

fn run(rt: &CarRuntime, exec: &Arc<dyn ToolExecutor>, actions: Value) -> Value {
    let p = json!({"id": "p", "actions": actions}).to_string();
    let out = block_on(rt.execute_proposal(&p, exec.clone(), None, None)).unwrap();
    serde_json::from_str(&out).unwrap()
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("car-approvals-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A runtime whose `deploy` asks, with `other` tools allowed, over `dir`.
fn runtime(dir: &std::path::Path, extra: &str) -> CarRuntime {
    let rt = CarRuntime::new();
    for t in ["deploy", "b", "c"] {
        rt.register_tool(t).unwrap();
    }
    let config = format!(r#"{{"ask":[{{"tool":"deploy"}}]{extra}}}"#);
    rt.set_permissions(Some(&config), Some(dir.to_str().unwrap())).unwrap();
    rt
}

/// Attaches an approver that forwards every event (JSON) to a channel.
fn approver(rt: &CarRuntime) -> (u64, mpsc::Receiver<Value>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let id = rt.on_approval_json(Arc::new(move |ev: String| {
        let _ = tx.lock().unwrap().send(serde_json::from_str::<Value>(&ev).unwrap());
    }));
    (id, rx)
}

/// The key of the next `pending` event.
fn next_pending(rx: &mpsc::Receiver<Value>) -> Value {
    loop {
        let ev = rx.recv_timeout(Duration::from_secs(30)).expect("a pending approval is announced");
        if ev["event"] == "pending" {
            return ev;
        }
    }
}

fn deploy(input: Value) -> Value {
    json!({"id": "d", "type": "tool_call", "tool": "deploy", "parameters": input})
}

#[test]
fn an_approver_allowing_from_another_thread_runs_the_held_action() {
    let dir = tmpdir("allow");
    let rt = runtime(&dir, "");
    let (_, rx) = approver(&rt);
    let host = rt.clone();
    let seen = std::thread::spawn(move || {
        let ev = next_pending(&rx);
        let out: Value = serde_json::from_str(
            &host.approval_resolve(ev["key"].as_str().unwrap(), "allow", "reviewed by ops").unwrap(),
        )
        .unwrap();
        (ev, out)
    });
    let log = Arc::new(Mutex::new(Vec::new()));
    let out = run(&rt, &executor(log.clone()), json!([deploy(json!({"env": "prod"}))]));
    let (ev, resolved) = seen.join().unwrap();
    assert_eq!(out["results"][0]["status"], "succeeded", "{}", out["results"][0]);
    assert_eq!(*log.lock().unwrap(), vec!["d".to_string()]);
    assert_eq!(ev["tool"], "deploy");
    assert!(ev["key"].as_str().unwrap().starts_with("deploy:"), "{ev}");
    assert!(ev["deadline"].is_string(), "a live approval has a deadline: {ev}");
    assert_eq!(resolved["applied"], true);
    assert_eq!(resolved["decision"], "allow");
    assert_eq!(serde_json::from_str::<Value>(&rt.approvals_pending().unwrap()).unwrap()["pending"], json!([]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_deny_or_anything_but_an_explicit_allow_rejects_with_the_reason() {
    let dir = tmpdir("deny");
    let rt = runtime(&dir, "");
    let (_, rx) = approver(&rt);
    let host = rt.clone();
    let answers = std::thread::spawn(move || {
        for (decision, reason) in [("deny", "not during the freeze"), ("maybe", "unclear"), ("{\"decision\":true}", "")]
        {
            let ev = next_pending(&rx);
            host.approval_resolve(ev["key"].as_str().unwrap(), decision, reason).unwrap();
        }
    });
    let log = Arc::new(Mutex::new(Vec::new()));
    let exec = executor(log.clone());
    for (n, reason) in ["not during the freeze", "unclear", ""].iter().enumerate() {
        let out = run(&rt, &exec, json!([deploy(json!({"n": n}))]));
        let r = &out["results"][0];
        assert_eq!(r["status"], "rejected", "{r}");
        let err = r["error"].as_str().unwrap();
        assert!(err.contains("was denied") && err.contains(reason) && err.contains("`deploy:"), "{err}");
    }
    answers.join().unwrap();
    assert!(log.lock().unwrap().is_empty(), "nothing ran");
    // The denial is recorded as a rejection by the approval layer: while the
    // action is held (stage `approval`), or at admission when the approver
    // answered before the stage looked again (stage `admission`).
    let events: Value = serde_json::from_str(&rt.event_query(r#"{"kinds":["ActionRejected"]}"#).unwrap()).unwrap();
    let events = events["events"].as_array().unwrap();
    assert_eq!(events.len(), 3);
    assert!(
        events.iter().all(|e| e["data"]["layer"] == "approval"
            && (e["data"]["stage"] == "approval" || e["data"]["stage"] == "admission")
            && e["data"]["permission"] == true),
        "{events:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unanswered_approval_is_denied_at_its_deadline() {
    let dir = tmpdir("deadline");
    let rt = runtime(&dir, r#","approval_timeout_ms":150"#);
    let (_, rx) = approver(&rt);
    let log = Arc::new(Mutex::new(Vec::new()));
    let out = run(&rt, &executor(log.clone()), json!([deploy(json!({}))]));
    let r = &out["results"][0];
    assert_eq!(r["status"], "rejected", "{r}");
    assert!(r["error"].as_str().unwrap().contains("deadline passed"), "{r}");
    assert!(log.lock().unwrap().is_empty());
    let key = next_pending(&rx)["key"].as_str().unwrap().to_string();
    // The timeout closed it: a late resolution does not apply.
    let late: Value = serde_json::from_str(&rt.approval_resolve(&key, "allow", "too late").unwrap()).unwrap();
    assert_eq!(late["applied"], false, "{late}");
    assert_eq!(late["by"], "timeout");
    assert_eq!(late["decision"], "deny");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resolution_racing_the_deadline_has_exactly_one_outcome() {
    let dir = tmpdir("race");
    let rt = runtime(&dir, r#","approval_timeout_ms":40"#);
    let (_, rx) = approver(&rt);
    let host = rt.clone();
    let rounds = 12;
    let answers = std::thread::spawn(move || {
        let mut out = Vec::new();
        for n in 0..rounds {
            let ev = next_pending(&rx);
            // Around the deadline: some before it, some after.
            std::thread::sleep(Duration::from_millis(25 + 3 * n));
            let v: Value =
                serde_json::from_str(&host.approval_resolve(ev["key"].as_str().unwrap(), "allow", "racing").unwrap())
                    .unwrap();
            out.push((ev["key"].as_str().unwrap().to_string(), v));
        }
        out
    });
    let log = Arc::new(Mutex::new(Vec::new()));
    let exec = executor(log.clone());
    let mut statuses = Vec::new();
    for n in 0..rounds {
        let out = run(&rt, &exec, json!([deploy(json!({"round": n}))]));
        statuses.push(out["results"][0].clone());
    }
    let answers = answers.join().unwrap();
    let file = std::fs::read_to_string(dir.join("approvals.jsonl")).unwrap();
    let records: Vec<Value> = file.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut ran = 0;
    for ((key, answer), result) in answers.iter().zip(&statuses) {
        // The first resolution in file order is the one in force.
        let first = records.iter().find(|r| r["type"] == "resolved" && r["key"] == *key).unwrap();
        let allowed = first["decision"] == "allow";
        assert_eq!(answer["applied"], allowed, "the host learns whether its answer applied: {answer} vs {first}");
        assert_eq!(answer["decision"], first["decision"]);
        if allowed {
            assert_eq!(result["status"], "succeeded", "{result}");
            ran += 1;
        } else {
            assert_eq!(first["by"], "timeout");
            assert_eq!(result["status"], "rejected", "{result}");
            assert!(result["error"].as_str().unwrap().contains("deadline passed"), "{result}");
        }
    }
    assert_eq!(log.lock().unwrap().len(), ran, "exactly the allowed actions ran");
    eprintln!("race: {ran} of {rounds} allowed before the deadline");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_proposals_other_actions_proceed_while_one_waits_on_one_thread() {
    let dir = tmpdir("others");
    let rt = runtime(&dir, "");
    let (_, rx) = approver(&rt);
    let log = Arc::new(Mutex::new(Vec::new()));
    let host = rt.clone();
    let seen = log.clone();
    // The approver allows only once both other actions ran (or gives up).
    let answer = std::thread::spawn(move || {
        let key = next_pending(&rx)["key"].as_str().unwrap().to_string();
        let mut others_ran = false;
        for _ in 0..3000 {
            if seen.lock().unwrap().len() >= 2 {
                others_ran = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        host.approval_resolve(&key, "allow", "after the others").unwrap();
        others_ran
    });
    // A current-thread runtime: a hold that blocked the thread would stall b and c.
    let out = run(
        &rt,
        &executor(log.clone()),
        json!([
            deploy(json!({"v": 1})),
            {"id": "b", "type": "tool_call", "tool": "b"},
            {"id": "c", "type": "tool_call", "tool": "c"},
        ]),
    );
    assert!(answer.join().unwrap(), "b and c ran while deploy waited for its approval");
    for r in out["results"].as_array().unwrap() {
        assert_eq!(r["status"], "succeeded", "{r}");
    }
    let log = log.lock().unwrap();
    assert_eq!(log.last().map(String::as_str), Some("d"), "{log:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resolution_recorded_by_another_store_reaches_the_waiting_action() {
    let dir = tmpdir("other-store");
    // A deadline well past the answer: without re-reading the file the
    // action would be denied at it.
    let rt = runtime(&dir, r#","approval_timeout_ms":20000"#);
    let (_, rx) = approver(&rt);
    let state_dir = dir.to_str().unwrap().to_string();
    let answer = std::thread::spawn(move || {
        let key = next_pending(&rx)["key"].as_str().unwrap().to_string();
        // Well after the action started waiting.
        std::thread::sleep(Duration::from_millis(300));
        // The stateless facade function opens its own store of the directory.
        car_runtime::api::gate::approval_resolve(&state_dir, &key, "allow", "from another process").unwrap();
        // The waiting runtime folds it in from the file long before the deadline.
        let ev = rx.recv_timeout(Duration::from_secs(10)).expect("the waiting store re-reads the file");
        assert_eq!(
            (ev["event"].as_str(), ev["by"].as_str(), ev["key"].as_str()),
            (Some("resolved"), Some("host"), Some(key.as_str()))
        );
    });
    let out = run(&rt, &executor(Arc::default()), json!([deploy(json!({}))]));
    answer.join().unwrap();
    assert_eq!(out["results"][0]["status"], "succeeded", "{}", out["results"][0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resolution_made_while_the_process_was_down_applies_on_resubmission_without_asking() {
    let dir = tmpdir("restart");
    let call = json!([deploy(json!({"release": "1.2.3"}))]);
    // First process: the action is held, then the process goes down mid-wait.
    {
        let rt = runtime(&dir, "");
        let (_, rx) = approver(&rt);
        let p = json!({"id": "p", "actions": call}).to_string();
        let exec = executor(Arc::default());
        let cut = block_on(async {
            tokio::time::timeout(Duration::from_millis(300), rt.execute_proposal(&p, exec, None, None)).await
        });
        assert!(cut.is_err(), "the action was still waiting when the process went down");
        next_pending(&rx);
    }
    // While it is down, a host resolves from the durable store.
    let pending: Value =
        serde_json::from_str(&car_runtime::api::gate::approvals_pending(dir.to_str().unwrap()).unwrap()).unwrap();
    let key = pending["pending"][0]["key"].as_str().unwrap().to_string();
    car_runtime::api::gate::approval_resolve(dir.to_str().unwrap(), &key, "allow", "approved overnight").unwrap();

    // A new process over the same directory, an approver attached: it runs at once.
    let rt = runtime(&dir, "");
    let (_, rx) = approver(&rt);
    let log = Arc::new(Mutex::new(Vec::new()));
    let out = run(&rt, &executor(log.clone()), call.clone());
    assert_eq!(out["results"][0]["status"], "succeeded", "{}", out["results"][0]);
    assert_eq!(*log.lock().unwrap(), vec!["d".to_string()]);
    let asked: Vec<Value> = rx.try_iter().filter(|e| e["event"] == "pending").collect();
    assert!(asked.is_empty(), "not asked again: {asked:?}");

    // Without an approver the same holds for the no-approver path.
    let dir2 = tmpdir("restart-noapprover");
    let rt = runtime(&dir2, "");
    let out = run(&rt, &executor(Arc::default()), call.clone());
    let key = serde_json::from_str::<Value>(&rt.approvals_pending().unwrap()).unwrap()["pending"][0]["key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(out["results"][0]["error"].as_str().unwrap().contains(&key));
    drop(rt);
    car_runtime::api::gate::approval_resolve(dir2.to_str().unwrap(), &key, "allow", "ok").unwrap();
    let rt = runtime(&dir2, "");
    let out = run(&rt, &executor(Arc::default()), call);
    assert_eq!(out["results"][0]["status"], "succeeded", "{}", out["results"][0]);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}

#[test]
fn without_an_approver_an_ask_is_rejected_naming_the_key_and_detaching_restores_that() {
    let dir = tmpdir("detach");
    let rt = runtime(&dir, "");
    let (id, _rx) = approver(&rt);
    assert!(rt.remove_approval_callback(id));
    assert!(!rt.remove_approval_callback(id), "an unknown id is reported");
    let out = run(&rt, &executor(Arc::default()), json!([deploy(json!({}))]));
    let err = out["results"][0]["error"].as_str().unwrap();
    assert_eq!(out["results"][0]["status"], "rejected");
    let pending: Value = serde_json::from_str(&rt.approvals_pending().unwrap()).unwrap();
    let key = pending["pending"][0]["key"].as_str().unwrap();
    assert!(err.contains("approval required") && err.contains(key), "{err}");
    assert!(pending["pending"][0].get("deadline").is_none(), "recorded for the next submission, no deadline");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_subscription_is_an_approver_too() {
    let dir = tmpdir("subscribe");
    let rt = runtime(&dir, "");
    let mut sub = rt.approvals_subscribe().unwrap();
    let host = rt.clone();
    let answer = std::thread::spawn(move || {
        let ev = loop {
            match sub.try_recv() {
                Ok(car_runtime::gate::ApprovalEvent::Pending(p)) => break p,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("subscription failed: {e}"),
            }
        };
        host.approval_resolve(&ev.key, "allow", "").unwrap();
        sub
    });
    let out = run(&rt, &executor(Arc::default()), json!([deploy(json!({}))]));
    drop(answer.join().unwrap());
    assert_eq!(out["results"][0]["status"], "succeeded", "{}", out["results"][0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn approvals_configuration_errors_name_the_input_and_change_nothing() {
    let rt = CarRuntime::new();
    assert_eq!(rt.approvals_pending().unwrap_err().code(), "approvals_not_configured");
    assert_eq!(rt.approval_resolve("deploy:x", "allow", "").unwrap_err().code(), "approvals_not_configured");
    assert!(rt.approvals_subscribe().is_err());
    rt.register_tool("deploy").unwrap();
    rt.set_permissions(Some(r#"{"deny":[{"tool":"deploy"}]}"#), None).unwrap();
    for bad in ["0", "-5", "\"soon\"", "1.5"] {
        let config = format!(r#"{{"ask":[{{"tool":"deploy"}}],"approval_timeout_ms":{bad}}}"#);
        let e = rt.set_permissions(Some(&config), None).unwrap_err();
        assert!(e.to_string().contains("approval_timeout_ms"), "{e}");
    }
    let out = run(&rt, &executor(Arc::default()), json!([deploy(json!({}))]));
    assert!(out["results"][0]["error"].as_str().unwrap().contains("denied by deny-rule"), "{}", out["results"][0]);
    let dir = tmpdir("unknown-key");
    rt.set_permissions(Some(r#"{"ask":[{"tool":"deploy"}]}"#), Some(dir.to_str().unwrap())).unwrap();
    assert_eq!(rt.approval_resolve("deploy:nope", "allow", "").unwrap_err().code(), "approval_not_found");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn three_actions_of_one_proposal_get_three_independent_decisions() {
    let dir = tmpdir("three");
    let rt = CarRuntime::new();
    for t in ["deploy", "b", "rm_tree"] {
        rt.register_tool(t).unwrap();
    }
    rt.set_permissions(Some(r#"{"ask":[{"tool":"deploy"}],"deny":[{"tool":"rm_tree"}]}"#), Some(dir.to_str().unwrap()))
        .unwrap();
    let (_, rx) = approver(&rt);
    let host = rt.clone();
    let answer = std::thread::spawn(move || {
        let key = next_pending(&rx)["key"].as_str().unwrap().to_string();
        host.approval_resolve(&key, "allow", "ok").unwrap();
        // Only the ask item asked.
        rx.recv_timeout(Duration::from_millis(300)).ok().filter(|e| e["event"] == "pending")
    });
    let log = Arc::new(Mutex::new(Vec::new()));
    let out = run(
        &rt,
        &executor(log.clone()),
        json!([
            {"id": "b", "type": "tool_call", "tool": "b"},
            deploy(json!({})),
            {"id": "r", "type": "tool_call", "tool": "rm_tree", "failure_behavior": "skip"},
        ]),
    );
    assert!(answer.join().unwrap().is_none(), "one approval for the one ask item");
    let status: Vec<&str> = out["results"].as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(status, ["succeeded", "succeeded", "rejected"], "{out}");
    assert!(out["results"][2]["error"].as_str().unwrap().contains("denied by deny-rule"));
    let mut ran = log.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["b", "d"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_approval_first_recorded_without_an_approver_still_has_a_deadline_once_one_waits() {
    let dir = tmpdir("late-approver");
    let rt = runtime(&dir, r#","approval_timeout_ms":150"#);
    let call = json!([deploy(json!({"same": true}))]);
    // No approver: rejected, recorded without a deadline.
    let out = run(&rt, &executor(Arc::default()), call.clone());
    assert!(out["results"][0]["error"].as_str().unwrap().contains("approval required"));
    // An approver attaches but never answers: the resubmission joins the
    // pending approval (announced again) and is denied at the deadline.
    let (_, rx) = approver(&rt);
    let out = run(&rt, &executor(Arc::default()), call);
    let r = &out["results"][0];
    assert_eq!(r["status"], "rejected", "{r}");
    assert!(r["error"].as_str().unwrap().contains("deadline passed"), "{r}");
    let key = next_pending(&rx)["key"].as_str().unwrap().to_string();
    let late: Value = serde_json::from_str(&rt.approval_resolve(&key, "allow", "late").unwrap()).unwrap();
    assert_eq!((late["applied"].as_bool(), late["by"].as_str()), (Some(false), Some("timeout")), "{late}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn identical_calls_waiting_on_one_approval_share_its_answer() {
    for answer_inside_the_callback in [true, false] {
        let dir = tmpdir("identical");
        let rt = runtime(&dir, "");
        let host = rt.clone();
        let (tx, rx) = mpsc::channel::<String>();
        let tx = Mutex::new(tx);
        rt.on_approval_json(Arc::new(move |ev: String| {
            let ev: Value = serde_json::from_str(&ev).unwrap();
            if ev["event"] != "pending" {
                return;
            }
            let key = ev["key"].as_str().unwrap().to_string();
            if answer_inside_the_callback {
                host.approval_resolve(&key, "allow", "at once").unwrap();
            } else {
                let _ = tx.lock().unwrap().send(key);
            }
        }));
        let host = rt.clone();
        let answer = std::thread::spawn(move || {
            if let Ok(key) = rx.recv_timeout(Duration::from_secs(if answer_inside_the_callback { 1 } else { 30 })) {
                std::thread::sleep(Duration::from_millis(50));
                host.approval_resolve(&key, "allow", "later").unwrap();
            }
        });
        let log = Arc::new(Mutex::new(Vec::new()));
        let same = json!({"env": "prod"});
        let out = run(
            &rt,
            &executor(log.clone()),
            json!([
                {"id": "d1", "type": "tool_call", "tool": "deploy", "parameters": same},
                {"id": "d2", "type": "tool_call", "tool": "deploy", "parameters": same},
            ]),
        );
        answer.join().unwrap();
        for r in out["results"].as_array().unwrap() {
            assert_eq!(r["status"], "succeeded", "inside the callback: {answer_inside_the_callback}: {r}");
        }
        assert_eq!(log.lock().unwrap().len(), 2);
        // Used up: the next identical submission asks again.
        assert_eq!(serde_json::from_str::<Value>(&rt.approvals_pending().unwrap()).unwrap()["pending"], json!([]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_held_action_is_skipped_when_its_proposal_aborts_meanwhile() {
    let dir = tmpdir("abort");
    let rt = runtime(&dir, r#","approval_timeout_ms":5000"#);
    let (_, rx) = approver(&rt); // attached, never answers
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    let exec: Arc<dyn ToolExecutor> = Arc::new(FnExecutor(move |call: ToolCall| {
        seen.lock().unwrap().push(call.action_id.clone());
        if call.tool == "b" { Err(car_runtime::ir::ToolFailure::ordinary("b broke")) } else { Ok(json!({})) }
    }));
    let out = run(&rt, &exec, json!([deploy(json!({})), {"id": "b", "type": "tool_call", "tool": "b"}]));
    let by_id = |id: &str| out["results"].as_array().unwrap().iter().find(|r| r["action_id"] == id).unwrap().clone();
    assert_eq!(by_id("b")["status"], "failed");
    let d = by_id("d");
    assert_eq!(d["status"], "skipped", "not started after the abort, not left to its deadline: {d}");
    assert_eq!(d["error"], "skipped due to abort");
    assert_eq!(*log.lock().unwrap(), vec!["b".to_string()]);
    // The approval stays open: an answer applies to the next identical submission.
    let key = next_pending(&rx)["key"].as_str().unwrap().to_string();
    let pending: Value = serde_json::from_str(&rt.approvals_pending().unwrap()).unwrap();
    assert_eq!(pending["pending"][0]["key"], key.as_str());
    let _ = std::fs::remove_dir_all(&dir);
}
