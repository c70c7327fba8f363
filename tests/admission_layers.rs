//! The admission layers that came from the plan/apply gate and the daemon:
//! the data_source/interactive precheck, `session`-scoped answers, the
//! circuit breaker (across a session's proposals) and the supervision layer,
//! through the Rust facade. The same precheck and breaker cases are in the
//! cross-front-end corpus.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use car_runtime::admission::SupervisorFn;
use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall};
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};

fn counting(calls: Arc<AtomicUsize>) -> Arc<FnExecutor<impl Fn(ToolCall) -> Result<Value, ToolFailure> + Send + Sync>> {
    Arc::new(FnExecutor(move |_call: ToolCall| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"ok": true}))
    }))
}

fn runtime(doc: Value) -> (CarRuntime, std::path::PathBuf) {
    let rt = CarRuntime::new();
    for t in ["lookup", "migrate", "deploy"] {
        rt.register_tool_schema(&json!({"name": t, "parameters": {"type": "object"}}).to_string()).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("car-layers-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    rt.set_permissions(Some(&doc.to_string()), Some(dir.to_str().unwrap())).unwrap();
    (rt, dir)
}

fn proposal(actions: Value) -> String {
    json!({"id": format!("p-{}", uuid::Uuid::new_v4()), "actions": actions}).to_string()
}

fn tc(id: &str, tool: &str, params: Value) -> Value {
    json!({"id": id, "type": "tool_call", "tool": tool, "parameters": params, "failure_behavior": "skip"})
}

async fn run(rt: &CarRuntime, p: &str, session: Option<&str>, calls: &Arc<AtomicUsize>) -> Value {
    serde_json::from_str(&rt.execute_proposal(p, counting(calls.clone()), session, None).await.unwrap()).unwrap()
}

fn statuses(out: &Value) -> Vec<(String, String)> {
    out["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["action_id"].as_str().unwrap().to_string(), r["status"].as_str().unwrap().to_string()))
        .collect()
}

fn admission_events(rt: &CarRuntime) -> Vec<Value> {
    let q: Value = serde_json::from_str(&rt.event_query(r#"{"kinds": ["AdmissionDecided"]}"#).unwrap()).unwrap();
    q["events"].as_array().unwrap().clone()
}

/// `plan-apply-gate.md`: an ask for a data_source or interactive call is a
/// deny, and the decision says it was downgraded; for every asking layer.
#[tokio::test]
async fn an_ask_for_a_data_source_or_interactive_tool_is_a_deny_and_says_so() {
    for kind in ["data_source", "interactive"] {
        for asking in [
            json!({"ask": [{"tool": "lookup"}]}),
            json!({"hooks": [{"tool": "lookup", "verdict": "ask"}]}),
            json!({"preset": "standard"}),
            json!({"needs_approval": true}),
        ] {
            let mut doc = asking.clone();
            let needs = doc.as_object_mut().unwrap().remove("needs_approval").is_some();
            doc["tools"] = json!([{"name": "lookup", "description": "", "parameters": {"type": "object"}, "kind": kind, "needs_approval": needs}]);
            let (rt, dir) = runtime(doc.clone());
            // An approver that would approve: it is never asked.
            let asked = Arc::new(AtomicUsize::new(0));
            let a2 = asked.clone();
            rt.on_approval(Arc::new(move |_| {
                a2.fetch_add(1, Ordering::SeqCst);
            }));
            let calls = Arc::new(AtomicUsize::new(0));
            let out = run(&rt, &proposal(json!([tc("l", "lookup", json!({}))])), None, &calls).await;
            assert_eq!(statuses(&out), [("l".into(), "rejected".into())], "{kind} {asking}: {out}");
            assert_eq!(calls.load(Ordering::SeqCst), 0);
            assert_eq!(asked.load(Ordering::SeqCst), 0, "nobody is asked");
            let ev = admission_events(&rt);
            let d = &ev[0]["data"];
            assert_eq!(d["verdict"], "deny", "{d}");
            assert_eq!(d["downgraded_from_ask"], true, "{kind} {asking}: {d}");
            // A resource tool asked the same way is an ask (held, then refused here: no approver answers).
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    // A plain deny is not marked as a downgrade.
    let (rt, dir) = runtime(
        json!({"deny": [{"tool": "lookup"}], "tools": [{"name": "lookup", "parameters": {"type": "object"}, "kind": "data_source"}]}),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    run(&rt, &proposal(json!([tc("l", "lookup", json!({}))])), None, &calls).await;
    assert!(admission_events(&rt)[0]["data"].get("downgraded_from_ask").is_none());
    // An unknown kind is an error naming it, and changes nothing.
    let e = rt
        .set_permissions(
            Some(&json!({"tools": [{"name": "lookup", "parameters": {}, "kind": "reader"}]}).to_string()),
            None,
        )
        .unwrap_err();
    assert!(e.to_string().contains("reader"), "{e}");
    assert!(rt.admission_config().contains("\"deny\""), "the old document stays");
    let _ = std::fs::remove_dir_all(dir);
}

/// A `session`-scoped allow answers every later ask of the same tool in the
/// same session, whatever the input; it never lifts a deny, and another
/// session still asks. A `session`-scoped deny refuses later calls the chain
/// would allow.
#[tokio::test]
async fn session_scoped_answers_apply_to_the_tool_for_the_session() {
    let (rt, dir) = runtime(json!({"ask": [{"tool": "migrate"}]}));
    rt.register_policy("no_prod", "deny_tool_param", Some("migrate"), Some("env"), Some("prod"), None, None).unwrap();
    let (s1, s2, s3) = (rt.open_session().unwrap(), rt.open_session().unwrap(), rt.open_session().unwrap());
    let (s1, s2, s3) = (Some(s1.as_str()), Some(s2.as_str()), Some(s3.as_str()));
    let calls = Arc::new(AtomicUsize::new(0));
    let plan: Value = serde_json::from_str(
        &rt.proposal_plan(&proposal(json!([tc("m", "migrate", json!({"env": "dev"}))])), s1, None).unwrap(),
    )
    .unwrap();
    let d: Value = serde_json::from_str(
        &rt.proposal_decide(plan["plan_id"].as_str().unwrap(), "m", "allow", "session", "fine today").unwrap(),
    )
    .unwrap();
    assert_eq!(d["scope"], "session");
    // Other inputs of the same tool, same session: answered by the session layer.
    for env in ["stage", "qa", "dev"] {
        let out = run(&rt, &proposal(json!([tc("m", "migrate", json!({"env": env}))])), s1, &calls).await;
        assert_eq!(statuses(&out), [("m".into(), "succeeded".into())], "{env}: {out}");
        assert_eq!(admission_events(&rt)[0]["data"]["layer"], "session");
    }
    // A deny still wins.
    let out = run(&rt, &proposal(json!([tc("m", "migrate", json!({"env": "prod"}))])), s1, &calls).await;
    assert_eq!(statuses(&out), [("m".into(), "rejected".into())]);
    assert_eq!(admission_events(&rt)[0]["data"]["layer"], "policy");
    // Another session is asked (and refused: no approver).
    let out = run(&rt, &proposal(json!([tc("m", "migrate", json!({"env": "stage"}))])), s2, &calls).await;
    assert_eq!(statuses(&out), [("m".into(), "rejected".into())]);
    assert_ne!(admission_events(&rt)[0]["data"]["layer"], "session");
    // The answers survive a reconfiguration.
    rt.set_permissions(Some(&json!({"ask": [{"tool": "migrate"}]}).to_string()), Some(dir.to_str().unwrap())).unwrap();
    let out = run(&rt, &proposal(json!([tc("m", "migrate", json!({"env": "x"}))])), s1, &calls).await;
    assert_eq!(statuses(&out), [("m".into(), "succeeded".into())]);

    // A session deny refuses even a call the chain allows.
    let plan: Value = serde_json::from_str(
        &rt.proposal_plan(&proposal(json!([tc("m", "migrate", json!({"env": "dev"}))])), s3, None).unwrap(),
    )
    .unwrap();
    rt.proposal_decide(plan["plan_id"].as_str().unwrap(), "m", "deny", "session", "not this week").unwrap();
    rt.set_permissions(Some(&json!({"preset": "open"}).to_string()), Some(dir.to_str().unwrap())).unwrap();
    let out = run(&rt, &proposal(json!([tc("m", "migrate", json!({"env": "y"}))])), s3, &calls).await;
    assert_eq!(statuses(&out), [("m".into(), "rejected".into())], "{out}");
    let d = &admission_events(&rt)[0]["data"];
    assert_eq!(d["layer"], "session");
    assert!(d["reason"].as_str().unwrap().contains("not this week"), "{d}");
    let out = run(&rt, &proposal(json!([tc("m", "migrate", json!({"env": "y"}))])), s1, &calls).await;
    assert_eq!(statuses(&out), [("m".into(), "succeeded".into())], "s1 is not s3");
    // Closing a session forgets its answers (and the id is gone).
    rt.close_session(s3.unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// The breaker's counts persist across a session's proposals: once over the
/// threshold, the next denial ends that proposal too; another session has
/// its own counts. Generated over thresholds.
#[tokio::test]
async fn the_breaker_counts_across_a_sessions_proposals() {
    for n in 1..=4u32 {
        let (rt, dir) = runtime(json!({
            "deny": [{"tool": "migrate"}],
            "breaker": {"max_consecutive_denials": n, "max_window_denials": 0},
        }));
        let calls = Arc::new(AtomicUsize::new(0));
        let (sid, other) = (rt.open_session().unwrap(), rt.open_session().unwrap());
        let (s, other) = (Some(sid.as_str()), Some(other.as_str()));
        // n-1 denials in one proposal: not tripped, the lookup runs.
        let mut actions: Vec<Value> = (1..n).map(|i| tc(&format!("d{i}"), "migrate", json!({"i": i}))).collect();
        actions.push(tc("l", "lookup", json!({})));
        let out = run(&rt, &proposal(Value::Array(actions)), s, &calls).await;
        assert_eq!(statuses(&out).last().unwrap().1, "succeeded", "n={n}: {out}");
        // The lookup restarted the count; n denials trip it for the rest.
        let mut actions: Vec<Value> = (1..=n).map(|i| tc(&format!("d{i}"), "migrate", json!({"i": i}))).collect();
        actions.push(tc("l", "lookup", json!({})));
        let out = run(&rt, &proposal(Value::Array(actions)), s, &calls).await;
        assert_eq!(statuses(&out).last().unwrap().1, "rejected", "n={n}: {out}");
        assert_eq!(admission_events(&rt)[0]["data"]["layer"], "breaker");
        // Next proposal of the session: one more denial trips it again at once.
        let out =
            run(&rt, &proposal(json!([tc("d", "migrate", json!({})), tc("l", "lookup", json!({}))])), s, &calls).await;
        assert_eq!(statuses(&out)[1].1, "rejected", "n={n}: {out}");
        // Another session is not affected.
        let out = run(&rt, &proposal(json!([tc("l", "lookup", json!({}))])), other, &calls).await;
        assert_eq!(statuses(&out)[0].1, "succeeded");
        let _ = std::fs::remove_dir_all(dir);
    }
    // A bad breaker document is an error naming the key.
    let rt = CarRuntime::new();
    let e = rt.set_permissions(Some(r#"{"breaker": {"max_consecutive": 2}}"#), None).unwrap_err();
    assert!(e.to_string().contains("max_consecutive"), "{e}");
}

/// The supervision layer is part of the stage: every path that runs a
/// proposal (execute, plan/apply) passes it; a refusal rejects every action
/// with layer `supervision`; a supervisor that panics refuses.
#[tokio::test]
async fn the_supervisor_sees_every_proposal_and_its_refusal_rejects_it() {
    let (rt, dir) = runtime(json!({"preset": "open"}));
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let sup: SupervisorFn = Arc::new(move |p, _session| {
        s2.fetch_add(1, Ordering::SeqCst);
        let refuse = p.actions.iter().any(|a| a.tool.as_deref() == Some("deploy"));
        Box::pin(async move { refuse.then(|| "denied by supervisor: no deploys on Fridays".to_string()) })
    });
    rt.set_supervisor(Some(sup)).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let out =
        run(&rt, &proposal(json!([tc("l", "lookup", json!({})), tc("d", "deploy", json!({}))])), None, &calls).await;
    assert_eq!(statuses(&out), [("l".into(), "rejected".into()), ("d".into(), "rejected".into())], "{out}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(admission_events(&rt)[0]["data"]["layer"], "supervision");
    let out = run(&rt, &proposal(json!([tc("l", "lookup", json!({}))])), None, &calls).await;
    assert_eq!(statuses(&out)[0].1, "succeeded");
    // Plan and apply: the supervisor decides at apply.
    let plan: Value =
        serde_json::from_str(&rt.proposal_plan(&proposal(json!([tc("d", "deploy", json!({}))])), None, None).unwrap())
            .unwrap();
    let out: Value = serde_json::from_str(
        &rt.proposal_apply(plan["plan_id"].as_str().unwrap(), counting(calls.clone())).await.unwrap(),
    )
    .unwrap();
    assert_eq!(statuses(&out)[0].1, "rejected");
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    // The supervisor survives a reconfiguration.
    rt.set_permissions(Some(r#"{"preset": "open"}"#), None).unwrap();
    let out = run(&rt, &proposal(json!([tc("d", "deploy", json!({}))])), None, &calls).await;
    assert_eq!(statuses(&out)[0].1, "rejected");
    // A panicking supervisor refuses (fail closed).
    let boom: SupervisorFn = Arc::new(|_, _| Box::pin(async { panic!("supervisor bug") }));
    rt.set_supervisor(Some(boom)).unwrap();
    let out = run(&rt, &proposal(json!([tc("l", "lookup", json!({}))])), None, &calls).await;
    assert_eq!(statuses(&out)[0].1, "rejected");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the one allowed lookup ran");
    let _ = std::fs::remove_dir_all(dir);
}

/// With nothing configured, a shell command naming the runtime's own files
/// is still refused (the protected layer is not skipped with the stage).
#[tokio::test]
async fn the_protected_layer_runs_when_nothing_is_configured() {
    let rt = CarRuntime::new();
    rt.register_tool_schema(r#"{"name": "shell", "parameters": {"type": "object"}}"#).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    for cmd in ["echo x > .car/permissions.toml", "rm approvals.jsonl", "cat ./.CAR/policies/a.toml"] {
        let out = run(&rt, &proposal(json!([tc("s", "shell", json!({"command": cmd}))])), None, &calls).await;
        assert_eq!(statuses(&out)[0].1, "rejected", "{cmd}: {out}");
    }
    let out = run(&rt, &proposal(json!([tc("s", "shell", json!({"command": "ls"}))])), None, &calls).await;
    assert_eq!(statuses(&out)[0].1, "succeeded");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Counts how many calls run at once.
struct Concurrency {
    now: AtomicUsize,
    max: AtomicUsize,
}

#[async_trait::async_trait]
impl car_runtime::engine::ToolExecutor for Concurrency {
    async fn execute(&self, _call: ToolCall) -> Result<Value, ToolFailure> {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Ok(json!({"ok": true}))
    }
}

/// `plan-apply-gate.md`: interactive calls run one at a time, whatever the
/// DAG allows; other independent calls still run together.
#[tokio::test]
async fn interactive_tools_run_one_at_a_time() {
    for (kind, want_max) in [("interactive", 1), ("resource", 4)] {
        let (rt, dir) = runtime(json!({
            "preset": "open",
            "tools": [{"name": "lookup", "description": "", "parameters": {"type": "object"}, "kind": kind}],
        }));
        let ex = Arc::new(Concurrency { now: AtomicUsize::new(0), max: AtomicUsize::new(0) });
        let actions: Vec<Value> = (0..4).map(|i| tc(&format!("a{i}"), "lookup", json!({"i": i}))).collect();
        let out: Value = serde_json::from_str(
            &rt.execute_proposal(&proposal(Value::Array(actions)), ex.clone(), None, None).await.unwrap(),
        )
        .unwrap();
        assert!(statuses(&out).iter().all(|(_, s)| s == "succeeded"), "{out}");
        // Four independent calls of 30 ms each on one tokio thread: a
        // resource tool reaches 4 at once, an interactive one never 2.
        if kind == "interactive" {
            assert_eq!(ex.max.load(Ordering::SeqCst), want_max, "{kind}");
        } else {
            assert!(ex.max.load(Ordering::SeqCst) > 1, "{kind}: independent calls run together");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// One evaluation: the plan a host shows (`proposal_plan`) says what the run
/// then decides, for the precheck's ask-to-deny and for session answers,
/// generated over tool kinds, asking layers and session answers.
#[tokio::test]
async fn the_plan_and_the_run_decide_alike() {
    for kind in ["resource", "data_source", "interactive"] {
        for asking in [json!({"ask": [{"tool": "lookup"}]}), json!({"preset": "standard"}), json!({"preset": "open"})] {
            for answer in [None, Some("allow"), Some("deny")] {
                let mut doc = asking.clone();
                doc["tools"] =
                    json!([{"name": "lookup", "description": "", "parameters": {"type": "object"}, "kind": kind}]);
                let (rt, dir) = runtime(doc.clone());
                let s = rt.open_session().unwrap();
                let s = Some(s.as_str());
                let p = proposal(json!([tc("l", "lookup", json!({"q": 1}))]));
                if let Some(answer) = answer {
                    let plan: Value = serde_json::from_str(&rt.proposal_plan(&p, s, None).unwrap()).unwrap();
                    // Only an ask item can be decided (a precheck deny is final).
                    if plan["items"][0]["verdict"] == "ask" {
                        rt.proposal_decide(plan["plan_id"].as_str().unwrap(), "l", answer, "session", "r").unwrap();
                    }
                }
                // A fresh proposal of the same tool in the same session.
                let p = proposal(json!([tc("l", "lookup", json!({"q": 2}))]));
                let plan: Value = serde_json::from_str(&rt.proposal_plan(&p, s, None).unwrap()).unwrap();
                let item = &plan["items"][0];
                let calls = Arc::new(AtomicUsize::new(0));
                let out = run(&rt, &p, s, &calls).await;
                let ev = admission_events(&rt);
                let d = &ev[0]["data"];
                let case = format!("{kind} {asking} {answer:?}: plan {item} run {d}");
                if item["verdict"] == "ask" {
                    // Held for an approval nobody gives: refused, never run.
                    assert_eq!(kind, "resource", "{case}");
                    assert_eq!(calls.load(Ordering::SeqCst), 0, "{case}");
                } else {
                    assert_eq!(item["verdict"], d["verdict"], "{case}");
                    assert_eq!(item["layer"], d["layer"], "{case}");
                    let ran = calls.load(Ordering::SeqCst) == 1;
                    assert_eq!(ran, item["verdict"] == "allow", "{case} {out}");
                }
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// The operator's decision on `action` recorded in the tier ledger at `path`.
fn record_decision(action: &Value, approve: bool, reason: &str, path: &std::path::Path) {
    car_runtime::api::policy::permission_record_decision(
        &action.to_string(),
        approve,
        "operator",
        reason,
        path.to_str().unwrap(),
        None,
    )
    .unwrap();
}

/// A runtime granted `read_only`, with a `deploy` tool and a tier ledger
/// attached in a fresh directory: `(runtime, directory, ledger path)`.
fn read_only_with_ledger(tag: &str) -> (CarRuntime, std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tier-approvals.jsonl");
    let rt = CarRuntime::new();
    rt.register_tool_schema(&json!({"name": "deploy", "parameters": {"type": "object"}}).to_string()).unwrap();
    rt.permission_set_tier("read_only").unwrap();
    rt.set_tier_ledger(Some(Arc::new(car_runtime::policy::JsonlLedger::new(&path)).into())).unwrap();
    (rt, dir, path)
}

/// A tier ledger the host attached (`set_tier_ledger`, as the daemon does)
/// is part of every stage built afterwards: an approval recorded in it lets
/// an escalated action run before and after each kind of reconfiguration.
#[tokio::test]
async fn an_attached_tier_ledger_survives_every_reconfiguration() {
    let (rt, dir, path) = read_only_with_ledger("car-ledger");
    let action =
        json!({"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {}, "failure_behavior": "skip"});
    let calls = Arc::new(AtomicUsize::new(0));
    let p = proposal(json!([action.clone()]));
    let out = run(&rt, &p, None, &calls).await;
    assert_eq!(statuses(&out), [("d".into(), "rejected".into())], "unapproved: {out}");
    record_decision(&action, true, "ok", &path);
    let reconfigure: [&dyn Fn(); 3] =
        [&|| (), &|| rt.set_permissions(Some(&json!({"preset": "open"}).to_string()), None).unwrap(), &|| {
            rt.register_tool_schema(&json!({"name": "other", "parameters": {"type": "object"}}).to_string())
                .map(|_| ())
                .unwrap()
        }];
    for (i, change) in reconfigure.iter().enumerate() {
        change();
        let out = run(&rt, &proposal(json!([action.clone()])), None, &calls).await;
        assert_eq!(statuses(&out), [("d".into(), "succeeded".into())], "after change {i}: {out}");
    }
    // Detached: the approval no longer counts.
    rt.set_tier_ledger(None).unwrap();
    let out = run(&rt, &proposal(json!([action])), None, &calls).await;
    assert_eq!(statuses(&out), [("d".into(), "rejected".into())], "{out}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The breaker counts denials by a deciding layer only: actions refused as
/// malformed (an unregistered tool, parameters its schema rejects) are no
/// denials, so they neither trip the breaker nor reset its count.
#[tokio::test]
async fn the_breaker_ignores_malformed_actions() {
    for malformed in [tc("x", "no_such_tool", json!({})), tc("x", "typed", json!({"m": 1}))] {
        let (rt, dir) = runtime(json!({
            "deny": [{"tool": "migrate"}],
            "breaker": {"max_consecutive_denials": 2, "max_window_denials": 0},
        }));
        rt.register_tool_schema(
            &json!({"name": "typed", "parameters": {"type": "object", "required": ["n"]}}).to_string(),
        )
        .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let s = rt.open_session().unwrap();
        let s = Some(s.as_str());
        // Many malformed actions: nothing trips, the lookup runs.
        let mut actions: Vec<Value> = (0..5)
            .map(|i| {
                let mut m = malformed.clone();
                m["id"] = json!(format!("x{i}"));
                m
            })
            .collect();
        actions.push(tc("t", "typed", json!({})));
        actions.push(tc("l", "lookup", json!({})));
        let out = run(&rt, &proposal(Value::Array(actions)), s, &calls).await;
        assert_eq!(statuses(&out).last().unwrap().1, "succeeded", "{malformed}: {out}");
        // One denial, a malformed one, one denial: consecutive (2), tripped.
        let mut m = malformed.clone();
        m["id"] = json!("x");
        let actions =
            json!([tc("d1", "migrate", json!({})), m, tc("d2", "migrate", json!({})), tc("l", "lookup", json!({}))]);
        let out = run(&rt, &proposal(actions), s, &calls).await;
        assert_eq!(statuses(&out).last().unwrap().1, "rejected", "{malformed}: {out}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A `tool` compensation that asks is decided on the plan like an item, by
/// its handle `ID#compensation` (`compensation.decide_as`): an allow lets it
/// run when the proposal aborts, a deny keeps it from running; an action
/// whose id is that handle is refused as ambiguous.
#[tokio::test]
async fn a_compensation_ask_is_decided_on_the_plan() {
    for (answer, runs) in [("allow", true), ("deny", false)] {
        let (rt, dir) = runtime(json!({"ask": [{"tool": "migrate"}], "compensate_on_abort": true}));
        let p = json!({"id": "p", "actions": [
            {"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {}, "reversibility": "compensable",
             "compensation": {"type": "tool", "tool": "migrate", "parameters": {"down": true}}},
            {"id": "f", "type": "tool_call", "tool": "lookup", "parameters": {"fail": true}, "dependencies": ["d"],
             "failure_behavior": "abort"}
        ]})
        .to_string();
        let plan: Value = serde_json::from_str(&rt.proposal_plan(&p, None, None).unwrap()).unwrap();
        let comp = &plan["items"][0]["compensation"];
        assert_eq!(comp["verdict"], "ask", "{plan}");
        assert_eq!(comp["decide_as"], "d#compensation", "{plan}");
        let d: Value = serde_json::from_str(
            &rt.proposal_decide(plan["plan_id"].as_str().unwrap(), "d#compensation", answer, "once", "r").unwrap(),
        )
        .unwrap();
        assert_eq!(d["approval_key"], comp["approval_key"]);
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let exec = Arc::new(FnExecutor(move |call: ToolCall| {
            s2.lock().unwrap().push(call.tool.clone());
            if call.params.get("fail").is_some() {
                return Err(ToolFailure::terminal("boom"));
            }
            Ok(json!({}))
        }));
        rt.proposal_apply(plan["plan_id"].as_str().unwrap(), exec).await.unwrap();
        let ran = seen.lock().unwrap().iter().any(|t| t == "migrate");
        assert_eq!(ran, runs, "{answer}: {:?}", seen.lock().unwrap());
        let _ = std::fs::remove_dir_all(dir);
    }
    // An action named like the handle is ambiguous: refused, naming it.
    let (rt, dir) = runtime(json!({"ask": [{"tool": "migrate"}]}));
    let p = json!({"id": "p", "actions": [
        {"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {},
         "compensation": {"type": "tool", "tool": "migrate", "parameters": {}}},
        {"id": "d#compensation", "type": "tool_call", "tool": "lookup", "parameters": {}}
    ]})
    .to_string();
    let e = rt.proposal_plan(&p, None, None).unwrap_err();
    assert!(e.to_string().contains("d#compensation"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Plan mode, over every declaration a tool can have (kind x risk, and
/// undeclared): what the stage offers is exactly what runs, a refusal is the
/// `plan` layer's recorded decision, and neither a hook's allow nor a
/// `session`-scoped allow gets a removed tool past it.
#[tokio::test]
async fn plan_mode_admits_exactly_the_tools_it_offers() {
    let kinds = ["resource", "data_source", "interactive"];
    let risks = [None, Some("read"), Some("write"), Some("network"), Some("execute"), Some("destructive")];
    let mut tools = Vec::new();
    let mut expect = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        for (r, risk) in risks.iter().enumerate() {
            let name = format!("t{k}{r}");
            let mut def = json!({"name": name, "description": "", "parameters": {"type": "object"}, "kind": kind});
            if let Some(risk) = risk {
                def["risk"] = json!(risk);
            }
            tools.push(def);
            expect.push((name, *kind == "data_source" || (*kind == "resource" && *risk == Some("read"))));
        }
    }
    expect.push(("undeclared".to_string(), false));
    let doc = json!({"plan_mode": true, "tools": tools, "preset": "open",
                     "hooks": [{"tool": "t00", "verdict": "allow"}]});
    let (rt, _dir) = runtime(doc);
    for (name, _) in &expect {
        rt.register_tool_schema(&json!({"name": name, "parameters": {"type": "object"}}).to_string()).unwrap();
    }
    let stage = rt.runtime().admission_stage();
    for (name, reads) in &expect {
        assert_eq!(stage.offers(name), *reads, "offers({name})");
    }
    let session = rt.open_session().unwrap();
    rt.runtime().admission_stage().session_state().remember(Some(&session), "t02", true, "allowed for the session");
    let actions: Vec<Value> = expect.iter().map(|(n, _)| tc(n, n, json!({}))).collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let out = run(&rt, &proposal(Value::Array(actions)), Some(&session), &calls).await;
    let got = statuses(&out);
    for ((name, reads), (id, status)) in expect.iter().zip(&got) {
        assert_eq!(id, name);
        assert_eq!(status, if *reads { "succeeded" } else { "rejected" }, "{name}: {out}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), expect.iter().filter(|(_, r)| *r).count());
    let mut plan: Vec<String> = admission_events(&rt)
        .into_iter()
        .filter(|e| e["data"]["layer"] == "plan")
        .map(|e| e["data"]["tool"].as_str().unwrap().to_string())
        .collect();
    plan.sort();
    let refused: Vec<String> = expect.iter().filter(|(_, r)| !r).map(|(n, _)| n.clone()).collect();
    assert_eq!(plan, refused);
}

/// Plan mode off (the default) removes nothing.
#[tokio::test]
async fn without_plan_mode_every_tool_is_offered() {
    let (rt, _dir) = runtime(json!({"preset": "open"}));
    let stage = rt.runtime().admission_stage();
    assert!(!stage.plan_mode());
    for t in ["lookup", "migrate", "shell", "write_file", "undeclared"] {
        assert!(stage.offers(t), "{t}");
    }
}

/// The tier's decisions made for the supervision layer's look are reused by
/// the admission only when the supervisor answered at once: an approval
/// revoked while a supervisor held the proposal counts. (The supervisor sees
/// only a proposal the tier admits whole, so an approval given while it
/// holds one cannot matter.)
#[tokio::test]
async fn a_ledger_change_while_the_supervisor_holds_a_proposal_counts() {
    let (rt, dir, path) = read_only_with_ledger("car-ledger-sup");
    let held = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let (h, r) = (held.clone(), release.clone());
    let sup: SupervisorFn = Arc::new(move |_, _| {
        let (h, r) = (h.clone(), r.clone());
        Box::pin(async move {
            h.notify_one();
            r.notified().await;
            None
        })
    });
    rt.set_supervisor(Some(sup)).unwrap();
    let deploy =
        json!({"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {}, "failure_behavior": "skip"});
    let read = json!({"id": "r", "type": "state_read", "parameters": {"key": "x"}});
    let record = |approve: bool| record_decision(&deploy, approve, "changed while held", &path);
    record(true);
    for revoke_while_held in [false, true] {
        let calls = Arc::new(AtomicUsize::new(0));
        let (rt2, c2) = (rt.clone(), calls.clone());
        let p = proposal(json!([read.clone(), deploy.clone()]));
        let mut running = tokio::spawn(async move { run(&rt2, &p, None, &c2).await });
        tokio::select! {
            () = held.notified() => {}
            out = &mut running => panic!("the supervisor never held the proposal: {}", out.unwrap()),
        }
        if revoke_while_held {
            record(false);
        }
        release.notify_one();
        let out = running.await.unwrap();
        let want = if revoke_while_held { "rejected" } else { "succeeded" };
        assert_eq!(
            statuses(&out)[1],
            ("d".to_string(), want.to_string()),
            "revoked while held: {revoke_while_held}: {out}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), usize::from(!revoke_while_held));
    }
    let _ = std::fs::remove_dir_all(dir);
}
