//! The plan/apply gate (`plan-apply-gate.md`): per-item policy, snapshots,
//! read prechecks, denial results, previews, scopes, corrections, breaker,
//! plan mode and execution order.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use car_runtime::gate::*;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn at(secs: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(secs)
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("car-gate-{tag}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn spec(provider: &str, op: &str, kind: ToolKind, risk: RiskClass) -> OperationSpec {
    OperationSpec { description: format!("{op} of {provider}"), ..OperationSpec::new(provider, op, kind, risk) }
}

fn write_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"path": {"type": "string", "pattern": "^/"}, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": false
    })
}

fn catalog() -> Vec<OperationSpec> {
    vec![
        OperationSpec {
            parameters: Some(write_schema()),
            ..spec("fs", "write_file", ToolKind::Resource, RiskClass::Write)
        },
        spec("fs", "read_file", ToolKind::DataSource, RiskClass::Read),
        spec("http", "post", ToolKind::Resource, RiskClass::Network),
        spec("shell", "run", ToolKind::Resource, RiskClass::Execute),
        spec("ui", "ask_user", ToolKind::Interactive, RiskClass::Undeclared),
    ]
}

fn call(id: &str, provider: &str, op: &str, input: Value) -> Call {
    Call::new(id, provider, op, input)
}

fn decide_nth(
    gate: &Gate,
    plan: &mut Plan,
    n: usize,
    d: &PlanDecision,
    s: &mut GateSession,
    now: DateTime<Utc>,
) -> car_runtime::Result<PlanItem> {
    let id = plan.items[n].id.clone();
    gate.decide(plan, &id, d, s, now)
}

fn write(id: &str, path: &str, content: &str) -> Call {
    call(id, "fs", "write_file", json!({"path": path, "content": content}))
}

/// Asks on every resource item, allows reads.
fn ask_all() -> RuleTable {
    RuleTable::default()
}

#[test]
fn three_items_get_three_independent_decisions() {
    let calls_seen = Cell::new(0);
    let policy = |item: &PlanItem| {
        calls_seen.set(calls_seen.get() + 1);
        match item.provider.as_str() {
            "fs" => PolicyDecision::new(Decision::Allow, "fs-rule", "writes to the workspace are fine"),
            "http" => PolicyDecision::new(Decision::Ask, "http-rule", "network needs a human"),
            _ => PolicyDecision::new(Decision::Deny, "shell-rule", "no shell in this profile"),
        }
    };
    let mut session = GateSession::new("s", t0());
    let calls = [
        write("c1", "/w/a", "x"),
        call("c2", "http", "post", json!({"url": "https://x"})),
        call("c3", "shell", "run", json!({"cmd": "ls"})),
    ];
    let plan = Gate::new(&policy).build_plan("t1", &calls, &catalog(), &mut session, t0());
    assert_eq!(calls_seen.get(), 3, "policy runs once per item, never once per plan");
    let got: Vec<(&str, Decision, &str)> =
        plan.items.iter().map(|i| (i.call_id.as_str(), i.decision, i.decided_by.as_str())).collect();
    assert_eq!(
        got,
        vec![
            ("c1", Decision::Allow, "fs-rule"),
            ("c2", Decision::Ask, "http-rule"),
            ("c3", Decision::Deny, "shell-rule")
        ]
    );
    assert_eq!(plan.items[2].reason, "no shell in this profile");
    assert_eq!(plan.turn_id, "t1");
    let ids: std::collections::HashSet<&str> = plan.items.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids.len(), 3);
    // Approving one ask item does not touch the others.
    let mut plan = plan;
    decide_nth(&Gate::new(&policy), &mut plan, 1, &PlanDecision::once(Decision::Allow), &mut session, t0()).unwrap();
    assert_eq!(
        plan.items.iter().map(|i| i.decision).collect::<Vec<_>>(),
        [Decision::Allow, Decision::Allow, Decision::Deny]
    );
}

#[test]
fn snapshot_fields_do_not_change_when_the_schema_changes() {
    let mut cat = catalog();
    let policy = ask_all();
    let gate = Gate::new(&policy);
    let mut session = GateSession::new("s", t0());
    let mut plan = gate.build_plan("t1", &[call("c1", "http", "post", json!({}))], &cat, &mut session, t0());
    let before = plan.items[0].clone();
    assert_eq!(
        (before.kind, before.risk, before.description.as_str()),
        (ToolKind::Resource, RiskClass::Network, "post of http")
    );

    // The provider reclassifies and rewords the operation.
    let op = cat.iter_mut().find(|s| s.operation_name == "post").unwrap();
    op.risk = RiskClass::Destructive;
    op.kind = ToolKind::DataSource;
    op.description = "reworded".into();

    // The plan, its JSON round trip and a later decision keep the snapshot.
    let round: Plan = serde_json::from_value(serde_json::to_value(&plan).unwrap()).unwrap();
    assert_eq!(round.items[0], before);
    let id = before.id.clone();
    gate.decide(&mut plan, &id, &PlanDecision::once(Decision::Allow), &mut session, t0()).unwrap();
    let after = &plan.items[0];
    assert_eq!(
        (after.kind, after.risk, after.description.as_str()),
        (ToolKind::Resource, RiskClass::Network, "post of http")
    );
    // A new plan does see the new classification.
    let next = gate.build_plan("t2", &[call("c2", "http", "post", json!({}))], &cat, &mut session, t0());
    assert_eq!((next.items[0].kind, next.items[0].risk), (ToolKind::DataSource, RiskClass::Destructive));
}

#[test]
fn read_precheck_downgrades_ask_to_deny_visibly() {
    let policy = |item: &PlanItem| match item.input["mode"].as_str() {
        Some("ask") => PolicyDecision::new(Decision::Ask, "ask-rule", "wants a human"),
        Some("deny") => PolicyDecision::new(Decision::Deny, "deny-rule", "reads of secrets are blocked"),
        _ => PolicyDecision::new(Decision::Allow, "default", ""),
    };
    let mut session = GateSession::new("s", t0());
    let calls = [
        call("r-ask", "fs", "read_file", json!({"mode": "ask"})),
        call("r-deny", "fs", "read_file", json!({"mode": "deny"})),
        call("r-allow", "fs", "read_file", json!({})),
        call("i-ask", "ui", "ask_user", json!({"mode": "ask"})),
        call("w-ask", "http", "post", json!({"mode": "ask"})),
    ];
    let plan = Gate::new(&policy).build_plan("t", &calls, &catalog(), &mut session, t0());
    let row = |n: usize| (plan.items[n].decision, plan.items[n].downgraded_from_ask);
    assert_eq!(row(0), (Decision::Deny, true), "data_source ask becomes a flagged deny");
    assert!(plan.items[0].reason.contains("downgraded"), "{}", plan.items[0].reason);
    assert_eq!(row(1), (Decision::Deny, false), "a plain deny is not flagged");
    assert_eq!(row(2), (Decision::Allow, false));
    assert_eq!(row(3), (Decision::Deny, true), "interactive items share the read precheck");
    assert_eq!(row(4), (Decision::Ask, false), "resource items keep ask");
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["items"][0]["downgraded_from_ask"], true);
    assert_eq!(json["items"][1]["downgraded_from_ask"], false);
}

#[test]
fn the_default_rule_table_allows_reads_and_asks_on_resources() {
    let table = RuleTable::new(vec![GateRule {
        name: "no-interactive".into(),
        provider: None,
        operation_name: None,
        kind: Some(ToolKind::Interactive),
        risk: None,
        decision: Decision::Deny,
        reason: "headless profile".into(),
    }]);
    let mut session = GateSession::new("s", t0());
    let calls = [
        call("a", "fs", "read_file", json!({})),
        call("b", "shell", "run", json!({})),
        call("c", "ui", "ask_user", json!({})),
        call("d", "nope", "x", json!({})),
    ];
    let plan = Gate::new(&table).build_plan("t", &calls, &catalog(), &mut session, t0());
    assert_eq!(
        plan.items.iter().map(|i| i.decision).collect::<Vec<_>>(),
        [Decision::Allow, Decision::Ask, Decision::Deny, Decision::Deny]
    );
    assert_eq!(plan.items[2].decided_by, "no-interactive");
    assert!(plan.items[3].reason.contains("unknown operation `x`"), "an unknown operation fails closed");
}

#[tokio::test]
async fn a_denied_item_never_executes_and_yields_a_denial_result() {
    let policy = |item: &PlanItem| {
        if item.provider == "shell" {
            PolicyDecision::new(Decision::Deny, "deny-rule", "`rm` is never allowed")
        } else {
            PolicyDecision::new(Decision::Allow, "default", "")
        }
    };
    let mut session = GateSession::new("s", t0());
    let calls = [
        call("c-shell", "shell", "run", json!({"cmd": "rm -rf /"})),
        call("c-read", "fs", "read_file", json!({"path": "/a"})),
    ];
    let plan = Gate::new(&policy).build_plan("t", &calls, &catalog(), &mut session, t0());
    let result = denial_result(&plan.items[0]).expect("a denied item has a denial result");
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "c-shell");
    assert_eq!(result["is_error"], true);
    assert!(result["content"].as_str().unwrap().contains("`rm` is never allowed"));
    assert!(denial_result(&plan.items[1]).is_none());

    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let r2 = ran.clone();
    let outcomes = execute_plan(&plan, move |item| {
        r2.lock().unwrap().push(item.call_id.clone());
        async move { json!({"ok": item.call_id}) }
    })
    .await;
    assert_eq!(*ran.lock().unwrap(), vec!["c-read".to_string()], "the denied call never ran");
    assert_eq!(outcomes[0], ItemOutcome::Denied { item_id: plan.items[0].id.clone(), result });
    assert_eq!(
        outcomes[1],
        ItemOutcome::Executed { item_id: plan.items[1].id.clone(), result: json!({"ok": "c-read"}) }
    );
}

struct Previews {
    requested: AtomicUsize,
}

#[async_trait::async_trait]
impl PreviewProvider for Previews {
    async fn preview(&self, call: &Call) -> car_runtime::Result<Option<RenderTree>> {
        self.requested.fetch_add(1, Ordering::SeqCst);
        match call.input["behaviour"].as_str() {
            Some("hang") => std::future::pending().await,
            Some("fail") => Err(car_runtime::Error::runtime("preview_failed", "boom")),
            Some("panic") => panic!("preview panicked"),
            _ => Ok(Some(file_write_preview(
                call.input["path"].as_str().unwrap_or(""),
                Some("old\n"),
                call.input["content"].as_str().unwrap_or(""),
            ))),
        }
    }
}

#[tokio::test]
async fn a_slow_or_failing_preview_degrades_to_absent() {
    let previews = Previews { requested: AtomicUsize::new(0) };
    let policy = ask_all();
    let gate = Gate::new(&policy).with_previews(&previews, Duration::from_millis(100));
    let mut session = GateSession::new("s", t0());
    let calls = [
        call("ok", "fs", "write_file", json!({"path": "/a", "content": "new\n"})),
        call("hang", "fs", "write_file", json!({"path": "/a", "content": "x", "behaviour": "hang"})),
        call("fail", "fs", "write_file", json!({"path": "/a", "content": "x", "behaviour": "fail"})),
        call("panic", "fs", "write_file", json!({"path": "/a", "content": "x", "behaviour": "panic"})),
        call("read", "fs", "read_file", json!({"path": "/a", "content": "x"})),
    ];
    let plan = gate.build_plan_with_previews("t", &calls, &catalog(), &mut session, t0()).await;
    assert_eq!(plan.items.len(), 5, "the plan is never aborted");
    assert_eq!(
        plan.items[0].preview,
        Some(RenderTree::Diff { path: "/a".into(), unified: "--- a//a\n+++ b//a\n@@ -1 +1 @@\n-old\n+new\n".into() })
    );
    for n in 1..5 {
        assert_eq!(plan.items[n].preview, None, "item {n}");
    }
    assert_eq!(previews.requested.load(Ordering::SeqCst), 4, "data_source items are never previewed");
    assert_eq!(plan.items[1].decision, Decision::Ask, "a hung preview does not change the decision");
    let json = serde_json::to_value(&plan).unwrap();
    assert!(json["items"][1].get("preview").is_none(), "an absent preview is absent, not null");
    assert_eq!(json["items"][0]["preview"]["type"], "diff");
}

fn decide_ask(
    gate: &Gate,
    plan: &mut Plan,
    d: &PlanDecision,
    s: &mut GateSession,
    now: DateTime<Utc>,
) -> car_runtime::Result<PlanItem> {
    let id = plan.items.iter().find(|i| i.decision == Decision::Ask).expect("an ask item").id.clone();
    gate.decide(plan, &id, d, s, now)
}

#[test]
fn scope_once_applies_to_the_named_item_only() {
    let policy = ask_all();
    let gate = Gate::new(&policy);
    let mut s = GateSession::new("s", t0());
    let mut p1 = gate.build_plan(
        "t1",
        &[call("a", "http", "post", json!({})), call("b", "http", "post", json!({}))],
        &catalog(),
        &mut s,
        t0(),
    );
    let id = p1.items[0].id.clone();
    let item = gate.decide(&mut p1, &id, &PlanDecision::once(Decision::Allow), &mut s, t0()).unwrap();
    assert_eq!((item.decision, item.decided_by.as_str()), (Decision::Allow, "client"));
    assert_eq!(p1.items[1].decision, Decision::Ask);
    assert!(s.rules.is_empty());
    let p2 = gate.build_plan("t2", &[call("c", "http", "post", json!({}))], &catalog(), &mut s, at(1));
    assert_eq!(p2.items[0].decision, Decision::Ask);
    // An already decided item cannot be decided again.
    let err = gate.decide(&mut p1, &id, &PlanDecision::once(Decision::Deny), &mut s, t0()).unwrap_err();
    assert_eq!(err.code(), "plan_item_not_awaiting_decision");
    let err = gate.decide(&mut p1, "nope", &PlanDecision::once(Decision::Deny), &mut s, t0()).unwrap_err();
    assert_eq!(err.code(), "plan_item_not_found");
    let err = decide_nth(&gate, &mut p1, 1, &PlanDecision::once(Decision::Ask), &mut s, t0()).unwrap_err();
    assert_eq!(err.code(), "invalid_argument");
}

#[test]
fn scope_session_applies_to_later_items_of_the_same_pair_and_policy_still_runs() {
    let policy = |item: &PlanItem| {
        if item.input["forbidden"] == true {
            PolicyDecision::new(Decision::Deny, "deny-rule", "forbidden target")
        } else {
            PolicyDecision::new(Decision::Ask, "ask-rule", "asks")
        }
    };
    let gate = Gate::new(&policy);
    let mut s = GateSession::new("s", t0());
    let mut p1 = gate.build_plan("t1", &[call("a", "http", "post", json!({}))], &catalog(), &mut s, t0());
    decide_ask(&gate, &mut p1, &PlanDecision::once(Decision::Allow).with_scope(Scope::Session), &mut s, t0()).unwrap();
    let p2 = gate.build_plan(
        "t2",
        &[
            call("b", "http", "post", json!({})),
            call("c", "http", "post", json!({"forbidden": true})),
            call("d", "shell", "run", json!({})),
        ],
        &catalog(),
        &mut s,
        at(10),
    );
    assert_eq!((p2.items[0].decision, p2.items[0].decided_by.as_str()), (Decision::Allow, "session"));
    assert_eq!(
        (p2.items[1].decision, p2.items[1].decided_by.as_str()),
        (Decision::Deny, "deny-rule"),
        "policy still runs"
    );
    assert_eq!(p2.items[2].decision, Decision::Ask, "another operation is not covered");

    // A session deny suppresses later ask and allow items of the pair.
    let mut p3 = gate.build_plan("t3", &[call("e", "shell", "run", json!({}))], &catalog(), &mut s, at(20));
    decide_ask(&gate, &mut p3, &PlanDecision::once(Decision::Deny).with_scope(Scope::Session), &mut s, at(20)).unwrap();
    let allow_all = |_: &PlanItem| PolicyDecision::new(Decision::Allow, "default", "");
    let p4 =
        Gate::new(&allow_all).build_plan("t4", &[call("f", "shell", "run", json!({}))], &catalog(), &mut s, at(30));
    assert_eq!((p4.items[0].decision, p4.items[0].decided_by.as_str()), (Decision::Deny, "session"));
    assert!(denial_result(&p4.items[0]).is_some());
}

#[test]
fn session_rules_lapse_when_the_session_expires_or_ends() {
    let policy = ask_all();
    let gate = Gate::new(&policy);
    let mut s = GateSession::new("s", t0()).with_ttl(60);
    let mut p1 = gate.build_plan("t1", &[call("a", "http", "post", json!({}))], &catalog(), &mut s, t0());
    decide_ask(&gate, &mut p1, &PlanDecision::once(Decision::Allow).with_scope(Scope::Session), &mut s, t0()).unwrap();
    let live = gate.build_plan("t2", &[call("b", "http", "post", json!({}))], &catalog(), &mut s, at(59));
    assert_eq!(live.items[0].decision, Decision::Allow);
    let expired = gate.build_plan("t3", &[call("c", "http", "post", json!({}))], &catalog(), &mut s, at(61));
    assert_eq!(expired.items[0].decision, Decision::Ask, "the session rule lapsed");
    assert!(s.rules.is_empty());

    let mut s = GateSession::new("s2", t0());
    let mut p = gate.build_plan("t1", &[call("a", "http", "post", json!({}))], &catalog(), &mut s, t0());
    decide_ask(&gate, &mut p, &PlanDecision::once(Decision::Allow).with_scope(Scope::Session), &mut s, t0()).unwrap();
    s.end();
    let after = gate.build_plan("t2", &[call("b", "http", "post", json!({}))], &catalog(), &mut s, at(1));
    assert_eq!(after.items[0].decision, Decision::Ask);
}

#[test]
fn scope_always_persists_a_policy_rule_in_a_writable_store() {
    let dir = temp_dir("always");
    let path = dir.join("rules.jsonl");
    let store = FilePolicyStore::open(&path);
    let policy = |item: &PlanItem| {
        if item.input["forbidden"] == true {
            PolicyDecision::new(Decision::Deny, "deny-rule", "forbidden")
        } else {
            PolicyDecision::new(Decision::Ask, "ask-rule", "asks")
        }
    };
    let gate = Gate::new(&policy).with_store(&store);
    let mut s = GateSession::new("s", t0());
    let mut p1 = gate.build_plan(
        "t1",
        &[call("a", "http", "post", json!({})), call("b", "http", "post", json!({}))],
        &catalog(),
        &mut s,
        t0(),
    );
    let item =
        decide_nth(&gate, &mut p1, 0, &PlanDecision::once(Decision::Allow).with_scope(Scope::Always), &mut s, t0())
            .unwrap();
    assert_eq!(item.decision, Decision::Allow);
    assert_eq!(p1.items[1].decision, Decision::Ask, "not retroactive within the plan");
    assert!(s.rules.is_empty(), "always is not a session rule");
    let rules = store.rules().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        (rules[0].provider.as_deref(), rules[0].operation_name.as_deref(), rules[0].decision),
        (Some("http"), Some("post"), Decision::Allow)
    );

    // A fresh session over a freshly opened store of the same file.
    let reopened = FilePolicyStore::open(&path);
    let gate2 = Gate::new(&policy).with_store(&reopened);
    let mut s2 = GateSession::new("s2", at(100));
    let p2 = gate2.build_plan(
        "t2",
        &[call("c", "http", "post", json!({})), call("d", "http", "post", json!({"forbidden": true}))],
        &catalog(),
        &mut s2,
        at(100),
    );
    assert_eq!((p2.items[0].decision, p2.items[0].decided_by.as_str()), (Decision::Allow, "always:http/post"));
    assert_eq!(p2.items[1].decision, Decision::Deny, "policy still runs for every item");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn scope_always_without_a_writable_store_is_refused_not_downgraded() {
    let policy = ask_all();
    let mut s = GateSession::new("s", t0());
    let gate = Gate::new(&policy);
    let mut p = gate.build_plan("t1", &[call("a", "http", "post", json!({}))], &catalog(), &mut s, t0());
    let id = p.items[0].id.clone();
    let err = gate
        .decide(&mut p, &id, &PlanDecision::once(Decision::Allow).with_scope(Scope::Always), &mut s, t0())
        .unwrap_err();
    assert_eq!(err.code(), "always_scope_unavailable");
    assert_eq!(p.items[0].decision, Decision::Ask, "the item stays undecided");
    assert!(s.rules.is_empty(), "not silently downgraded to session");

    let dir = temp_dir("ro");
    let ro = FilePolicyStore::open_read_only(dir.join("rules.jsonl"));
    let gate = Gate::new(&policy).with_store(&ro);
    let err = gate
        .decide(&mut p, &id, &PlanDecision::once(Decision::Allow).with_scope(Scope::Always), &mut s, t0())
        .unwrap_err();
    assert_eq!(err.code(), "always_scope_unavailable");
    assert!(!dir.join("rules.jsonl").exists());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn corrected_input_is_validated_and_re_validated_per_call() {
    let policy = ask_all();
    let gate = Gate::new(&policy);
    let mut s = GateSession::new("s", t0());
    let mut p1 = gate.build_plan("t1", &[write("a", "/etc/hosts", "one")], &catalog(), &mut s, t0());
    let id = p1.items[0].id.clone();
    // A correction that breaks the parameters schema is refused.
    let bad = PlanDecision::once(Decision::Allow).with_corrected_input(json!({"path": "relative", "content": "one"}));
    let err = gate.decide(&mut p1, &id, &bad, &mut s, t0()).unwrap_err();
    assert_eq!(err.code(), "invalid_argument");
    assert_eq!(p1.items[0].decision, Decision::Ask);
    // A valid correction, remembered for the session.
    let good = PlanDecision::once(Decision::Allow)
        .with_corrected_input(json!({"path": "/tmp/hosts", "content": "one"}))
        .with_scope(Scope::Session);
    let item = gate.decide(&mut p1, &id, &good, &mut s, t0()).unwrap();
    assert_eq!(item.effective_input(), &json!({"path": "/tmp/hosts", "content": "one"}));
    assert_eq!(item.input, json!({"path": "/etc/hosts", "content": "one"}), "the model's input stays on record");

    let p2 = gate.build_plan(
        "t2",
        &[
            write("b", "/etc/hosts", "two"),
            write("c", "/home/me/x", "three"),
            call("d", "fs", "write_file", json!({"path": "/etc/hosts"})),
        ],
        &catalog(),
        &mut s,
        at(5),
    );
    // Same corrected argument: the correction applies to this call's own arguments.
    assert_eq!(p2.items[0].decision, Decision::Allow);
    assert_eq!(p2.items[0].corrected_input, Some(json!({"path": "/tmp/hosts", "content": "two"})));
    // A different path: the correction does not fit, so a human is asked again.
    assert_eq!(p2.items[1].decision, Decision::Ask);
    assert!(p2.items[1].reason.contains("`path`"), "{}", p2.items[1].reason);
    assert_eq!(p2.items[1].corrected_input, None);
    // The corrected arguments fail the schema (no content): asked again.
    assert_eq!(p2.items[2].decision, Decision::Ask);
    // Corrections only come with an allow.
    let mut p3 = gate.build_plan("t3", &[write("e", "/x", "y")], &catalog(), &mut s, at(6));
    let deny_fix = PlanDecision::once(Decision::Deny).with_corrected_input(json!({"path": "/y", "content": "y"}));
    assert_eq!(decide_nth(&gate, &mut p3, 0, &deny_fix, &mut s, at(6)).unwrap_err().code(), "invalid_argument");
}

fn deny_all() -> impl Fn(&PlanItem) -> PolicyDecision {
    |_: &PlanItem| PolicyDecision::new(Decision::Deny, "deny-rule", "nope")
}

#[test]
fn the_breaker_trips_on_consecutive_denials() {
    let deny = deny_all();
    let allow = |_: &PlanItem| PolicyDecision::new(Decision::Allow, "default", "");
    let cfg = BreakerConfig { max_consecutive_denials: 3, max_window_denials: 0, window_secs: 60 };
    let mut s = GateSession::new("s", t0()).with_breaker(cfg);
    let shell = |id: &str| call(id, "shell", "run", json!({}));
    // Two denials, an allow, two denials: never three in a row.
    let p = Gate::new(&deny).build_plan("t1", &[shell("a"), shell("b")], &catalog(), &mut s, at(1));
    assert!(p.breaker.is_none());
    Gate::new(&allow).build_plan("t2", &[shell("c")], &catalog(), &mut s, at(2));
    let p = Gate::new(&deny).build_plan("t3", &[shell("d"), shell("e")], &catalog(), &mut s, at(3));
    assert!(p.breaker.is_none());
    // The third consecutive denial trips it; the rest of the turn is denied by it.
    let p = Gate::new(&allow).build_plan("t4", &[], &catalog(), &mut s, at(4));
    assert!(p.breaker.is_none());
    let p = Gate::new(&deny).build_plan("t5", &[shell("f"), shell("g"), shell("h")], &catalog(), &mut s, at(5));
    let trip = p.breaker.clone().expect("tripped");
    assert_eq!((trip.status.as_str(), trip.condition.as_str(), trip.denials), (BREAKER_STATUS, "consecutive", 3));
    assert!(p.turn_ended());
    let p = Gate::new(&allow).build_plan("t6", &[shell("i")], &catalog(), &mut s, at(6));
    assert!(p.breaker.is_none(), "a new turn starts closed");
    assert_eq!(p.items[0].decision, Decision::Allow);
}

#[test]
fn the_breaker_trips_on_denials_within_the_window() {
    let deny = deny_all();
    let allow = |_: &PlanItem| PolicyDecision::new(Decision::Allow, "default", "");
    let cfg = BreakerConfig { max_consecutive_denials: 0, max_window_denials: 3, window_secs: 60 };
    let mut s = GateSession::new("s", t0()).with_breaker(cfg);
    let shell = |id: &str| call(id, "shell", "run", json!({}));
    // Denials 70 s apart never gather three within 60 s.
    for (n, t) in [0, 70, 140].into_iter().enumerate() {
        let p = Gate::new(&deny).build_plan(&format!("a{n}"), &[shell("x")], &catalog(), &mut s, at(t));
        assert!(p.breaker.is_none(), "denial at {t}s");
    }
    // Interleaved allows do not reset the window count.
    Gate::new(&allow).build_plan("b0", &[shell("y")], &catalog(), &mut s, at(150));
    let p = Gate::new(&deny).build_plan("b1", &[shell("z")], &catalog(), &mut s, at(160));
    assert!(p.breaker.is_none(), "two denials (140 s, 160 s) in the window");
    Gate::new(&allow).build_plan("b2", &[shell("y")], &catalog(), &mut s, at(165));
    let p = Gate::new(&deny).build_plan("b3", &[shell("z"), shell("w")], &catalog(), &mut s, at(170));
    let trip = p.breaker.expect("tripped");
    assert_eq!((trip.condition.as_str(), trip.denials), ("window", 3));
    assert_eq!(p.items[1].decided_by, "circuit_breaker");
}

#[test]
fn client_denials_count_towards_the_breaker() {
    let policy = ask_all();
    let gate = Gate::new(&policy);
    let cfg = BreakerConfig { max_consecutive_denials: 2, ..BreakerConfig::default() };
    let mut s = GateSession::new("s", t0()).with_breaker(cfg);
    let mut p = gate.build_plan(
        "t",
        &[
            call("a", "http", "post", json!({})),
            call("b", "http", "post", json!({})),
            call("c", "http", "post", json!({})),
        ],
        &catalog(),
        &mut s,
        t0(),
    );
    let ids: Vec<String> = p.items.iter().map(|i| i.id.clone()).collect();
    gate.decide(&mut p, &ids[0], &PlanDecision::once(Decision::Deny), &mut s, t0()).unwrap();
    assert!(p.breaker.is_none());
    gate.decide(&mut p, &ids[1], &PlanDecision::once(Decision::Deny), &mut s, t0()).unwrap();
    assert_eq!(p.breaker.as_ref().map(|b| b.condition.as_str()), Some("consecutive"));
    // Once open, even an allow of a remaining item is denied by the breaker.
    let item = gate.decide(&mut p, &ids[2], &PlanDecision::once(Decision::Allow), &mut s, t0()).unwrap();
    assert_eq!((item.decision, item.decided_by.as_str()), (Decision::Deny, "circuit_breaker"));
    assert_eq!(
        BreakerConfig::default(),
        BreakerConfig { max_consecutive_denials: 3, max_window_denials: 5, window_secs: 300 }
    );
}

#[test]
fn plan_mode_offers_only_data_source_tools() {
    let kept = plan_mode_tools(&catalog());
    assert_eq!(kept.iter().map(|s| s.operation_name.as_str()).collect::<Vec<_>>(), ["read_file"]);
    let json_specs = vec![
        json!({"name": "read", "kind": "data_source"}),
        json!({"name": "write", "kind": "resource"}),
        json!({"name": "ask", "kind": "interactive"}),
        json!({"name": "mystery"}),
    ];
    assert_eq!(plan_mode_filter_json(&json_specs), vec![json!({"name": "read", "kind": "data_source"})]);
}

#[tokio::test]
async fn data_sources_run_concurrently_and_interactive_items_sequentially() {
    let policy = |_: &PlanItem| PolicyDecision::new(Decision::Allow, "default", "");
    let mut s = GateSession::new("s", t0());
    let calls = [
        call("r1", "fs", "read_file", json!({})),
        call("i1", "ui", "ask_user", json!({})),
        call("r2", "fs", "read_file", json!({})),
        call("i2", "ui", "ask_user", json!({})),
        call("r3", "fs", "read_file", json!({})),
    ];
    let plan = Gate::new(&policy).build_plan("t", &calls, &catalog(), &mut s, t0());
    // Three reads meet at a barrier: only possible when they run concurrently.
    let barrier = Arc::new(tokio::sync::Barrier::new(3));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max_interactive = Arc::new(AtomicUsize::new(0));
    let (b, f, m) = (barrier.clone(), in_flight.clone(), max_interactive.clone());
    let run = execute_plan(&plan, move |item| {
        let (b, f, m) = (b.clone(), f.clone(), m.clone());
        async move {
            if item.kind == ToolKind::DataSource {
                b.wait().await;
            } else {
                let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                f.fetch_sub(1, Ordering::SeqCst);
            }
            json!(item.call_id)
        }
    });
    let outcomes = tokio::time::timeout(Duration::from_secs(30), run).await.expect("reads ran concurrently");
    assert_eq!(max_interactive.load(Ordering::SeqCst), 1, "interactive items ran one at a time");
    let results: Vec<Value> = outcomes
        .iter()
        .map(|o| match o {
            ItemOutcome::Executed { result, .. } => result.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        results,
        vec![json!("r1"), json!("i1"), json!("r2"), json!("i2"), json!("r3")],
        "outcomes in plan order"
    );
}

#[tokio::test]
async fn items_awaiting_a_decision_do_not_run() {
    let policy = ask_all();
    let mut s = GateSession::new("s", t0());
    let plan = Gate::new(&policy).build_plan("t", &[call("a", "http", "post", json!({}))], &catalog(), &mut s, t0());
    let outcomes = execute_plan(&plan, |_item| async { panic!("must not run") }).await;
    assert_eq!(outcomes, vec![ItemOutcome::AwaitingDecision { item_id: plan.items[0].id.clone() }]);
}

#[test]
fn an_indexed_catalog_plans_large_batches_and_keeps_snapshots() {
    let mut index = OperationIndex::new(catalog());
    let policy = ask_all();
    let mut s = GateSession::new("s", t0());
    let calls: Vec<Call> = (0..20_000).map(|n| call(&format!("c{n}"), "fs", "read_file", json!({"n": n}))).collect();
    let plan = Gate::new(&policy).build_plan("big", &calls, &index, &mut s, t0());
    assert_eq!(plan.items.len(), 20_000);
    assert!(plan.items.iter().all(|i| i.decision == Decision::Allow && i.kind == ToolKind::DataSource));
    assert_eq!(plan.items[19_999].id, "big.19999");
    index.insert(spec("fs", "read_file", ToolKind::Resource, RiskClass::Destructive));
    assert_eq!(plan.items[0].risk, RiskClass::Read);
    let again = Gate::new(&policy).build_plan("next", &calls[..1], &index, &mut s, t0());
    assert_eq!((again.items[0].kind, again.items[0].decision), (ToolKind::Resource, Decision::Ask));
}

#[tokio::test]
async fn built_in_file_tools_are_planned_with_a_diff_of_the_write() {
    let dir = temp_dir("builtin");
    std::fs::write(dir.join("README.md"), "hello\nworld\n").unwrap();
    let ops = builtin_operations("builtin");
    let kind_of = |n: &str| ops.iter().find(|s| s.operation_name == n).map(|s| (s.kind, s.risk));
    assert_eq!(kind_of("read_file"), Some((ToolKind::DataSource, RiskClass::Read)));
    assert_eq!(kind_of("write_file"), Some((ToolKind::Resource, RiskClass::Write)));
    assert_eq!(kind_of("shell"), Some((ToolKind::Resource, RiskClass::Execute)));

    let previews = BuiltinPreviews::new(car_runtime::tools::Root::new(&dir).unwrap());
    let policy = ask_all();
    let gate = Gate::new(&policy).with_previews(&previews, DEFAULT_PREVIEW_DEADLINE);
    let mut s = GateSession::new("s", t0());
    let calls = [
        call("w", "builtin", "write_file", json!({"path": "README.md", "content": "hello\nthere\n"})),
        call("r", "builtin", "read_file", json!({"path": "README.md"})),
        call("x", "builtin", "write_file", json!({"path": "../escape.txt", "content": "x"})),
    ];
    let plan = gate.build_plan_with_previews("t", &calls, &ops, &mut s, t0()).await;
    let Some(RenderTree::Diff { path, unified }) = &plan.items[0].preview else {
        panic!("{:?}", plan.items[0].preview)
    };
    assert_eq!(path, "README.md");
    assert!(unified.contains("-world\n") && unified.contains("+there\n"), "{unified}");
    assert_eq!(std::fs::read_to_string(dir.join("README.md")).unwrap(), "hello\nworld\n", "a preview writes nothing");
    assert_eq!((plan.items[1].decision, plan.items[1].preview.is_none()), (Decision::Allow, true));
    assert_eq!(plan.items[2].preview, None, "a failing preview is absent");
    assert_eq!(plan.items[2].decision, Decision::Ask);
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn every_precheck_outcome_of_reads_and_interactive_calls_from_both_producers() {
    // The same rule set for both kinds and both producer categories: allow
    // (no rule), plain deny, and ask downgraded to a flagged deny.
    let policy = |item: &PlanItem| match item.input["mode"].as_str() {
        Some("ask") => PolicyDecision::new(Decision::Ask, "ask-rule", "wants a human"),
        Some("deny") => PolicyDecision::new(Decision::Deny, "deny-rule", "blocked read"),
        _ => PolicyDecision::new(Decision::Allow, "default", ""),
    };
    // The breaker off: eight denials in one turn would trip it otherwise.
    let off = BreakerConfig { max_consecutive_denials: 0, max_window_denials: 0, window_secs: 60 };
    let mut session = GateSession::new("s", t0()).with_breaker(off);
    let mut calls = Vec::new();
    for (provider, op) in [("fs", "read_file"), ("ui", "ask_user")] {
        for category in [ProducerCategory::Tool, ProducerCategory::SlashCommand] {
            for mode in ["allow", "deny", "ask"] {
                let mut c = call(&format!("{op}-{category:?}-{mode}"), provider, op, json!({"mode": mode}));
                c.producer_category = category;
                calls.push(c);
            }
        }
    }
    let plan = Gate::new(&policy).build_plan("t", &calls, &catalog(), &mut session, t0());
    for item in &plan.items {
        let mode = item.input["mode"].as_str().unwrap();
        let expected = match mode {
            "allow" => (Decision::Allow, false),
            "deny" => (Decision::Deny, false),
            _ => (Decision::Deny, true),
        };
        assert_eq!((item.decision, item.downgraded_from_ask), expected, "{}", item.call_id);
        assert!(item.preview.is_none(), "{}: no preview outside resources", item.call_id);
        // Every denial, plain or downgraded, is surfaced as a tool result.
        match denial_result(item) {
            None => assert_eq!(mode, "allow"),
            Some(r) => {
                assert_eq!(
                    (r["type"].as_str(), r["tool_use_id"].as_str()),
                    (Some("tool_result"), Some(&*item.call_id))
                );
                assert_eq!(r["downgraded_from_ask"], expected.1, "{r}");
                assert_eq!(r["is_error"], true);
            }
        }
    }
    // Only the allowed ones execute; the denied ones answer with their denial.
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let r2 = ran.clone();
    let outcomes = execute_plan(&plan, move |item| {
        r2.lock().unwrap().push(item.call_id.clone());
        async move { json!({"ok": true}) }
    })
    .await;
    let mut ran = ran.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran.len(), 4, "{ran:?}");
    assert!(ran.iter().all(|id| id.ends_with("-allow")), "{ran:?}");
    let denied = outcomes.iter().filter(|o| matches!(o, ItemOutcome::Denied { .. })).count();
    assert_eq!(denied, 8);
}
