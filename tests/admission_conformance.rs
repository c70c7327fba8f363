//! The admission conformance corpus (`tests/conformance/admission/cases.json`)
//! through the Rust facade, plus regression tests for the admission bypasses
//! of issue #18. The same corpus runs through the Python, Node and UniFFI
//! bindings, the daemon and `car run` (see `docs/admission.md`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall};
use car_runtime::gate::ApprovalEvent;
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};

fn corpus() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/admission/cases.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "car-adm-{}-{}-{}",
        std::process::id(),
        name.replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
        uuid_suffix()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn uuid_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

fn stub() -> Arc<FnExecutor<impl Fn(ToolCall) -> Result<Value, ToolFailure> + Send + Sync>> {
    Arc::new(FnExecutor(|call: ToolCall| {
        if call.params.get("fail") == Some(&Value::Bool(true)) {
            Err(ToolFailure::ordinary("stub failure"))
        } else {
            Ok(json!({"ok": true}))
        }
    }))
}

/// Sets up a runtime for one case: tools, policies, policy files, ledger,
/// the admission document, the approver.
fn runtime_for(tools: &[Value], case: &Value, dir: &Path) -> CarRuntime {
    let rt = CarRuntime::new();
    for t in tools.iter().chain(case["extra_tools"].as_array().into_iter().flatten()) {
        rt.register_tool_schema(&t.to_string()).unwrap();
    }
    for p in case["policies"].as_array().into_iter().flatten() {
        let s = |k: &str| p[k].as_str();
        rt.register_policy(
            s("name").unwrap(),
            s("rule").unwrap(),
            s("target"),
            s("key"),
            s("pattern"),
            s("value_json"),
            None,
        )
        .unwrap();
    }
    if let Some(files) = case["policy_files"].as_object() {
        let pd = dir.join("policies");
        std::fs::create_dir_all(&pd).unwrap();
        for (name, text) in files {
            std::fs::write(pd.join(name), text.as_str().unwrap()).unwrap();
        }
        rt.load_policies(pd.to_str().unwrap()).unwrap();
    }
    let mut config = case["config"].clone();
    if let Some(lines) = case["ledger"].as_array() {
        let path = dir.join("ledger.jsonl");
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&path, text).unwrap();
        config["ledger_path"] = json!(path.to_string_lossy());
    }
    let approvals = (case["approvals"] != json!(false)).then(|| dir.join("approvals"));
    rt.set_permissions(Some(&config.to_string()), approvals.as_deref().and_then(Path::to_str)).unwrap();
    if let Some(mode) = case["approver"].as_str() {
        let resolver = rt.clone();
        let mode = mode.to_string();
        rt.on_approval(Arc::new(move |ev: &ApprovalEvent| {
            if let ApprovalEvent::Pending(p) = ev {
                match mode.as_str() {
                    "approve" => drop(resolver.approval_resolve(&p.key, "allow", "conformance approver")),
                    "deny" => drop(resolver.approval_resolve(&p.key, "deny", "conformance approver")),
                    _ => {} // "timeout": never answers
                }
            }
        }));
    }
    rt
}

/// `(id, status, layer)` per action, plus the result.
fn outcome(rt: &CarRuntime, result: &Value) -> Vec<(String, String, String)> {
    let events: Value = serde_json::from_str(&rt.event_query(r#"{"kinds":["AdmissionDecided"]}"#).unwrap()).unwrap();
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let id = r["action_id"].as_str().unwrap().to_string();
            // Newest first: the first event of the action outside the compensation stage.
            let layer = events["events"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["action_id"] == json!(id) && e["data"]["stage"] != json!("compensation"))
                .and_then(|e| e["data"]["layer"].as_str())
                .unwrap_or("none")
                .to_string();
            (id, r["status"].as_str().unwrap().to_string(), layer)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_through_the_rust_facade() {
    let corpus = corpus();
    let tools = corpus["tools"].as_array().unwrap().clone();
    let cases = corpus["cases"].as_array().unwrap();
    assert!(cases.len() >= 40, "the corpus holds {} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let dir = scratch(name);
        let rt = runtime_for(&tools, case, &dir);
        let out = rt.execute_proposal(&case["proposal"].to_string(), stub(), None, None).await.unwrap();
        let result: Value = serde_json::from_str(&out).unwrap();
        let got = outcome(&rt, &result);
        let want: Vec<(String, String, String)> = case["expected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["id"].as_str().unwrap().into(),
                    e["status"].as_str().unwrap().into(),
                    e["layer"].as_str().unwrap().into(),
                )
            })
            .collect();
        if got != want {
            failures.push(format!("{name}: got {got:?}, want {want:?}; results {}", result["results"]));
        }
        if let Some(comp) = case["compensation"].as_object() {
            for (id, what) in comp {
                let r = result["results"].as_array().unwrap().iter().find(|r| r["action_id"] == json!(id)).unwrap();
                let seen = if r["compensated"] == json!(true) {
                    "compensated"
                } else if r["compensation_error"].is_string() {
                    "refused"
                } else {
                    "none"
                };
                if seen != what.as_str().unwrap() {
                    failures.push(format!("{name}: compensation of {id} is {seen}, want {what}: {r}"));
                }
            }
        }
        if let Some(cost) = case["cost"].as_object() {
            for (k, v) in cost {
                if result["cost"][k] != *v {
                    failures.push(format!("{name}: cost.{k} is {}, want {v}", result["cost"][k]));
                }
            }
        }
        // Every verdict is recorded, without the parameter values.
        let events = rt.event_query(r#"{"kinds":["AdmissionDecided"]}"#).unwrap();
        for secret in ["rm -rf victim", "evil.test"] {
            if events.contains(secret) {
                failures.push(format!("{name}: an AdmissionDecided event carries the parameter value `{secret}`"));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// Issue #18: a denied action still ran when another action named it as
/// its compensation (generated over deny layers and compensation kinds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_action_never_runs_as_a_compensation() {
    let ran = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    /// `(what, document, a deny_tool policy (name, tool))`.
    type Layer<'a> = (&'a str, Value, Option<(&'a str, &'a str)>);
    let layers: [Layer; 4] = [
        ("argv deny", json!({"shell": {"deny": ["rm **"]}, "preset": "open", "compensate_on_abort": true}), None),
        ("tool deny", json!({"deny": [{"tool": "shell"}], "compensate_on_abort": true}), None),
        ("hook deny", json!({"hooks": [{"tool": "shell", "verdict": "deny"}], "compensate_on_abort": true}), None),
        ("policy", json!({"compensate_on_abort": true, "preset": "open"}), Some(("no_shell", "shell"))),
    ];
    for (what, config, policy) in layers {
        for by_ref in [true, false] {
            let rt = CarRuntime::new();
            for t in ["shell", "lookup", "work"] {
                rt.register_tool(t).unwrap();
            }
            if let Some((name, tool)) = policy {
                rt.register_policy(name, "deny_tool", Some(tool), None, None, None, None).unwrap();
            }
            rt.set_permissions(Some(&config.to_string()), None).unwrap();
            let comp = if by_ref {
                json!({"type": "action_ref", "action_id": "evil"})
            } else {
                json!({"type": "tool", "tool": "shell", "parameters": {"command": "rm -rf victim"}})
            };
            let plan = json!({"actions": [
                {"id": "evil", "type": "tool_call", "tool": "shell", "parameters": {"command": "rm -rf victim"}, "failure_behavior": "skip"},
                {"id": "step", "type": "tool_call", "tool": "lookup", "reversibility": "compensable", "compensation": comp},
                {"id": "boom", "type": "tool_call", "tool": "work", "dependencies": ["step"], "parameters": {"fail": true}, "max_retries": 0}
            ]});
            let log = ran.clone();
            let exec = Arc::new(FnExecutor(move |call: ToolCall| {
                log.lock().unwrap().push(call.tool.clone());
                if call.tool == "work" { Err(ToolFailure::ordinary("boom")) } else { Ok(json!({})) }
            }));
            let out: Value =
                serde_json::from_str(&rt.execute_proposal(&plan.to_string(), exec, None, None).await.unwrap()).unwrap();
            assert_eq!(out["results"][0]["status"], "rejected", "{what}: {out}");
            let comp_error = out["results"][1]["compensation_error"].as_str().unwrap_or_default().to_string();
            assert!(comp_error.starts_with("compensation refused"), "{what} (by_ref {by_ref}): {out}");
            let calls = std::mem::take(&mut *ran.lock().unwrap());
            assert!(!calls.contains(&"shell".to_string()), "{what} (by_ref {by_ref}): shell ran: {calls:?}");
        }
    }
}

/// Issue #18: `permission_set_tier("read_only")` on an in-process runtime
/// did not stop `rm -rf /`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_is_enforced_in_process() {
    for (tier, command, runs) in [
        ("read_only", "rm -rf /", false),
        ("sandbox_edit", "rm -rf /", false),
        ("full_access", "rm -rf /", false), // full_access always needs an approval
        ("sandbox_edit", "ls", true),
    ] {
        let rt = CarRuntime::new();
        rt.register_tool("shell").unwrap();
        rt.permission_set_tier(tier).unwrap();
        let plan =
            json!({"actions": [{"id": "a", "type": "tool_call", "tool": "shell", "parameters": {"command": command}}]});
        let out: Value =
            serde_json::from_str(&rt.execute_proposal(&plan.to_string(), stub(), None, None).await.unwrap()).unwrap();
        let status = out["results"][0]["status"].as_str().unwrap();
        assert_eq!(status == "succeeded", runs, "{tier} {command}: {out}");
        if !runs {
            assert_eq!(out["cost"]["actions_rejected"], 1);
        }
    }
}

/// Issue #18: `[shell] allow = ["touch **"]` with `[[deny]] tool = "shell"`
/// ran `touch marker` (an allow pattern decided before the deny rules).
#[test]
fn deny_always_beats_a_shell_allow_pattern() {
    use car_runtime::admission::{AdmissionConfig, AdmissionStage, HostLayers, StageVerdict};
    let denies = [
        json!([{"tool": "shell"}]),
        json!([{"tool": "shell", "argv": "touch **"}]),
        json!([{"risk": "execute"}]),
        json!([{"tool": ["x", "shell"]}]),
    ];
    for preset in ["strict", "standard", "open"] {
        for deny in &denies {
            let config =
                AdmissionConfig::from_value(json!({"preset": preset, "shell": {"allow": ["touch **"]}, "deny": deny}))
                    .unwrap();
            let stage = AdmissionStage::build(config, &HostLayers::default(), None).unwrap();
            let mut a = car_runtime::ir::Action::tool_call("shell");
            a.parameters = json!({"command": "touch marker"}).as_object().unwrap().clone().into();
            match stage.decide(&a, None) {
                StageVerdict::Refuse(d) => assert_eq!(d.layer, "deny-rule", "{preset} {deny}"),
                other => panic!("{preset} {deny}: {other:?}"),
            }
        }
    }
}

/// Issue #18: a trace-rule denial was `failed` and counted as executed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_denial_is_rejected() {
    let dir = scratch("trace");
    std::fs::write(dir.join("t.toml"), "[[trace_rule]]\ntool = \"deploy\"\nrequire_before = [\"test\"]\n").unwrap();
    for behavior in ["abort", "skip", "retry"] {
        let rt = CarRuntime::new();
        rt.register_tool("deploy").unwrap();
        rt.load_policies(dir.to_str().unwrap()).unwrap();
        let plan =
            json!({"actions": [{"id": "d", "type": "tool_call", "tool": "deploy", "failure_behavior": behavior}]});
        let out: Value =
            serde_json::from_str(&rt.execute_proposal(&plan.to_string(), stub(), None, None).await.unwrap()).unwrap();
        assert_eq!(out["results"][0]["status"], "rejected", "{behavior}: {out}");
        assert_eq!(out["cost"]["actions_rejected"], 1, "{behavior}: {out}");
        assert_eq!(out["cost"]["actions_executed"], 0, "{behavior}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue #18: the bindings' `register_agent_basics` registered `shell`,
/// which is not a published built-in tool.
#[test]
fn agent_basics_are_the_published_list() {
    let rt = CarRuntime::new();
    let dir = scratch("basics");
    rt.register_agent_basics(dir.to_str()).unwrap();
    let tools: Value = serde_json::from_str(&rt.list_tools()).unwrap();
    let names: Vec<&str> = tools.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["calculate", "edit_file", "find_files", "grep_files", "list_dir", "read_file", "write_file"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A malformed document is an error naming the key and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_document_changes_nothing() {
    let rt = CarRuntime::new();
    rt.register_tool("deploy").unwrap();
    rt.set_permissions(Some(r#"{"deny": [{"tool": "deploy"}]}"#), None).unwrap();
    for (bad, key) in [
        (r#"{"deny": [{"tool": "deploy"}], "dney": []}"#, "dney"),
        (r#"{"shell": {"alow": ["x"]}}"#, "alow"),
        (r#"{"inspectors": {"egress": []}}"#, "egress"),
        (r#"{"tier": "root"}"#, "tier"),
        (r#"{"preset": "lax"}"#, "lax"),
        (r#"{"approval_timeout_ms": 0}"#, "approval_timeout_ms"),
    ] {
        let e = rt.set_permissions(Some(bad), None).unwrap_err();
        assert!(e.to_string().contains(key), "{bad}: {e}");
    }
    assert!(rt.admission_config().contains("deploy"), "{}", rt.admission_config());
    let plan = r#"{"actions":[{"id":"d","type":"tool_call","tool":"deploy"}]}"#;
    let out: Value = serde_json::from_str(&rt.execute_proposal(plan, stub(), None, None).await.unwrap()).unwrap();
    assert_eq!(out["results"][0]["status"], "rejected");
}

/// Issue #18: `modified_input` is applied: the substituted input is what the
/// later layers check and what the tool receives; a panicking host hook
/// denies (from the document's static hooks and from host closures alike).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_substituted_input_is_checked_and_is_what_the_tool_receives() {
    use car_runtime::permission::{CanUseDecision, HookDecision};
    let seen = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let recorder = |seen: &Arc<std::sync::Mutex<Vec<Value>>>| {
        let log = seen.clone();
        Arc::new(FnExecutor(move |call: ToolCall| {
            log.lock().unwrap().push(call.params.clone());
            Ok(json!({}))
        }))
    };
    let plan = json!({"actions": [{"id": "s", "type": "tool_call", "tool": "shell", "parameters": {"command": "rm -rf /"}, "failure_behavior": "skip"}]}).to_string();

    // A static hook substitutes a harmless command: it runs, with that command.
    let rt = CarRuntime::new();
    rt.register_tool("shell").unwrap();
    rt.set_permissions(
        Some(r#"{"hooks": [{"tool": "shell", "modified_input": {"command": "echo safe"}}], "preset": "open"}"#),
        None,
    )
    .unwrap();
    let out: Value =
        serde_json::from_str(&rt.execute_proposal(&plan, recorder(&seen), None, None).await.unwrap()).unwrap();
    assert_eq!(out["results"][0]["status"], "succeeded", "{out}");
    assert_eq!(std::mem::take(&mut *seen.lock().unwrap()), vec![json!({"command": "echo safe"})]);

    // A host hook substitutes a denied command: the deny rule sees it.
    let rt = CarRuntime::new();
    rt.register_tool("shell").unwrap();
    rt.set_permissions(Some(r#"{"shell": {"deny": ["touch **"]}, "preset": "open"}"#), None).unwrap();
    rt.set_permission_hooks(
        vec![Arc::new(|_: &str, _: &Value| HookDecision::ModifiedInput(json!({"command": "touch pwned"})))],
        None,
    )
    .unwrap();
    let plan_ls = json!({"actions": [{"id": "s", "type": "tool_call", "tool": "shell", "parameters": {"command": "ls"}, "failure_behavior": "skip"}]}).to_string();
    let out: Value =
        serde_json::from_str(&rt.execute_proposal(&plan_ls, recorder(&seen), None, None).await.unwrap()).unwrap();
    assert_eq!(out["results"][0]["status"], "rejected", "{out}");
    assert!(seen.lock().unwrap().is_empty());

    // A substitution the tool's schema refuses is refused.
    let rt = CarRuntime::new();
    rt.register_tool_schema(r#"{"name": "shell", "parameters": {"type": "object", "required": ["command"]}}"#).unwrap();
    rt.set_permission_hooks(
        vec![Arc::new(|_: &str, _: &Value| HookDecision::ModifiedInput(json!({"cmd": "x"})))],
        None,
    )
    .unwrap();
    let out: Value =
        serde_json::from_str(&rt.execute_proposal(&plan_ls, recorder(&seen), None, None).await.unwrap()).unwrap();
    assert_eq!(out["results"][0]["status"], "rejected", "{out}");
    assert!(out["results"][0]["error"].as_str().unwrap().contains("substituted input"), "{out}");

    // A panicking hook or can_use_tool denies.
    for hooks in [true, false] {
        let rt = CarRuntime::new();
        rt.register_tool("shell").unwrap();
        if hooks {
            rt.set_permission_hooks(vec![Arc::new(|_: &str, _: &Value| -> HookDecision { panic!("boom") })], None)
                .unwrap();
        } else {
            rt.set_permission_hooks(
                Vec::new(),
                Some(Arc::new(|_: &str, _: &Value| -> CanUseDecision { panic!("boom") })),
            )
            .unwrap();
        }
        let out: Value =
            serde_json::from_str(&rt.execute_proposal(&plan_ls, recorder(&seen), None, None).await.unwrap()).unwrap();
        assert_eq!(out["results"][0]["status"], "rejected", "hooks {hooks}: {out}");
    }
    assert!(seen.lock().unwrap().is_empty());
}

/// Issue #25: shell rules may carry examples, checked when the document
/// loads; one that does not come out as its rule says fails the load naming
/// the rule and the example (JSON and TOML forms alike).
#[test]
fn shell_rule_examples_are_checked_at_load() {
    use car_runtime::admission::{AdmissionConfig, AdmissionStage, HostLayers};
    let build = |c: AdmissionConfig| AdmissionStage::build(c, &HostLayers::default(), None);
    let good = r#"
[[shell.rule]]
table = "deny"
pattern = "rm **"
match = ["rm -rf /", "/bin/rm x", "sudo rm -rf /"]
not_match = ["ls"]
"#;
    assert!(build(AdmissionConfig::from_toml(good).unwrap()).is_ok());
    let bad = r#"
[[shell.rule]]
table = "deny"
pattern = "rm -rf **"
match = ["rm -r -f /"]
"#;
    let e = build(AdmissionConfig::from_toml(bad).unwrap()).unwrap_err();
    assert_eq!(e.code(), "invalid_shell_rule_example", "{e}");
    assert!(e.to_string().contains("rm -rf **") && e.to_string().contains("rm -r -f /"), "{e}");
    let json = AdmissionConfig::from_value(
        json!({"shell": {"rule": [{"table": "allow", "pattern": "git status", "not_match": ["git status; rm x"]}]}}),
    );
    assert!(build(json.unwrap()).is_ok());
    // The rule's pattern takes part in the chain.
    let c = AdmissionConfig::from_toml(good).unwrap();
    let stage = build(c).unwrap();
    let mut a = car_runtime::ir::Action::tool_call("shell");
    a.parameters = json!({"command": "rm -rf /"}).as_object().unwrap().clone().into();
    assert_eq!(stage.preview(&a, None).unwrap().0.layer, "deny-rule");
}

/// Issue #18, item 5: the plan/apply gate on the execution path: plan (no
/// side effects), decide each ask with a scope, apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_decide_apply() {
    let dir = scratch("plan");
    let rt = CarRuntime::new();
    rt.register_agent_basics(dir.to_str()).unwrap();
    rt.register_tool("migrate").unwrap();
    rt.set_permissions(
        Some(r#"{"ask": [{"tool": "migrate"}], "deny": [{"tool": "edit_file"}], "preset": "open"}"#),
        Some(dir.join("approvals").to_str().unwrap()),
    )
    .unwrap();
    let plan = json!({"actions": [
        {"id": "m1", "type": "tool_call", "tool": "migrate", "parameters": {"env": "a"}, "failure_behavior": "skip"},
        {"id": "m2", "type": "tool_call", "tool": "migrate", "parameters": {"env": "b"}, "failure_behavior": "skip"},
        {"id": "m3", "type": "tool_call", "tool": "migrate", "parameters": {"env": "c"}, "failure_behavior": "skip"},
        {"id": "w", "type": "tool_call", "tool": "write_file", "parameters": {"path": "notes.txt", "content": "hello\n"}},
        {"id": "e", "type": "tool_call", "tool": "edit_file", "parameters": {"path": "notes.txt", "old_text": "x", "new_text": "y"}, "failure_behavior": "skip"}
    ]})
    .to_string();
    let events_before = rt.event_count();
    let p: Value = serde_json::from_str(&rt.proposal_plan(&plan, None, None).unwrap()).unwrap();
    assert_eq!(rt.event_count(), events_before, "planning records nothing");
    assert!(!dir.join("notes.txt").exists(), "planning runs nothing");
    let item = |id: &str| p["items"].as_array().unwrap().iter().find(|i| i["action_id"] == json!(id)).unwrap().clone();
    assert_eq!((item("m1")["verdict"].as_str(), item("m1")["layer"].as_str()), (Some("ask"), Some("ask-rule")));
    assert!(item("m1")["approval_key"].as_str().unwrap().starts_with("migrate:"));
    assert_eq!(item("w")["verdict"], "allow");
    assert!(item("w")["preview"]["diff"].as_str().unwrap().contains("+hello"), "{}", item("w"));
    assert_eq!((item("e")["verdict"].as_str(), item("e")["layer"].as_str()), (Some("deny"), Some("deny-rule")));
    assert_eq!(p["counts"], json!({"allow": 1, "ask": 3, "deny": 1}));
    let id = p["plan_id"].as_str().unwrap();

    // A deny is not an ask: it cannot be decided.
    let e = rt.proposal_decide(id, "e", "allow", "once", "").unwrap_err();
    assert!(e.to_string().contains("`e`"), "{e}");
    // (`always` is covered by tests/approval_always.rs: it would answer m2 and m3 too.)
    rt.proposal_decide(id, "m1", "allow", "once", "reviewed").unwrap();
    rt.proposal_decide(id, "m2", "deny", "once", "not today").unwrap();
    // m3 is left undecided.
    let out: Value = serde_json::from_str(&rt.proposal_apply(id, stub()).await.unwrap()).unwrap();
    let status = |id: &str| {
        out["results"].as_array().unwrap().iter().find(|r| r["action_id"] == json!(id)).unwrap()["status"].clone()
    };
    assert_eq!(status("m1"), "succeeded", "{out}");
    assert_eq!(status("m2"), "rejected", "{out}");
    assert_eq!(status("m3"), "rejected", "{out}");
    assert_eq!(status("w"), "succeeded");
    assert_eq!(status("e"), "rejected");
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).unwrap(), "hello\n");
    assert_eq!(rt.proposal_apply(id, stub()).await.unwrap_err().code(), "plan_not_found");

    // `session`: later identical calls are answered without deciding again.
    let one = json!({"actions": [{"id": "m", "type": "tool_call", "tool": "migrate", "parameters": {"env": "s"}}]})
        .to_string();
    let p: Value = serde_json::from_str(&rt.proposal_plan(&one, None, None).unwrap()).unwrap();
    rt.proposal_decide(p["plan_id"].as_str().unwrap(), "m", "allow", "session", "ok for the session").unwrap();
    for _ in 0..2 {
        let out: Value = serde_json::from_str(&rt.execute_proposal(&one, stub(), None, None).await.unwrap()).unwrap();
        assert_eq!(out["results"][0]["status"], "succeeded", "{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue #25: a shell command that names the runtime's own files (its
/// configuration, policies, approvals) is refused unless the operator's
/// document allows it; generated over writers, spellings and places.
#[test]
fn shell_commands_naming_protected_files_are_refused() {
    use car_runtime::admission::{AdmissionConfig, AdmissionStage, HostLayers, StageVerdict};
    let stage = |extra: Value| {
        let mut doc = json!({"preset": "open"});
        if let (Some(d), Some(e)) = (doc.as_object_mut(), extra.as_object()) {
            d.extend(e.clone());
        }
        AdmissionStage::build(AdmissionConfig::from_value(doc).unwrap(), &HostLayers::default(), None).unwrap()
    };
    let shell = |cmd: &str| {
        let mut a = car_runtime::ir::Action::tool_call("shell");
        a.parameters = json!({"command": cmd}).as_object().unwrap().clone().into();
        a
    };
    let targets = [
        ".car/permissions.toml",
        "./.car/policies/x.toml",
        ".CAR/permissions.toml",
        "state/approvals.jsonl",
        "a/b/.Car",
        "audit/events.jsonl",
    ];
    let writers = [
        "echo x > {}",
        "echo x >>{}",
        "rm -rf {}",
        "cp evil {}",
        "tee {} < x",
        "git diff --output={} a b",
        "sh -c 'echo > \"{}\"'",
    ];
    let strict = stage(json!({}));
    let open = stage(json!({"allow_protected_writes": true}));
    for t in targets {
        for w in writers {
            let cmd = w.replace("{}", t);
            match strict.decide(&shell(&cmd), None) {
                StageVerdict::Refuse(d) => assert_eq!(d.layer, "protected", "{cmd}"),
                other => panic!("{cmd}: {other:?}"),
            }
            assert!(matches!(open.decide(&shell(&cmd), None), StageVerdict::Admit(_)), "{cmd}");
        }
    }
    // Spellings the shell reads as the same names: quotes and escapes
    // inside the name (every writer), globs and braces that can expand to
    // it (the writers where the shell expands them: unquoted).
    let spelled = [
        ".c'a'r/permissions.toml",
        ".c\"a\"r/policies/x.toml",
        ".ca\\r/permissions.toml",
        "state/appro'vals'.jsonl",
        "tier-approvals.json\\l",
        "$'\\x2ecar'/permissions.toml",
        "$'.c\\141r/policies/x.toml'",
        "$'state/approvals\\u002ejsonl'",
        "ev$'\\x65'nts.jsonl",
    ];
    let globbed = [
        ".c?r/permissions.toml",
        ".ca[r]/x",
        ".c*/x",
        ".c{a,x}r/x",
        "{.c,}ar/x",
        "{.,x}car/permissions.toml",
        "state/appro*.jsonl",
        "tier-*.jsonl",
        "event[s].jsonl",
    ];
    let unquoted = ["echo x > {}", "rm -rf {}", "cp evil {}", "tee {} < x", "git diff --output={} a b"];
    let cases = spelled
        .iter()
        .flat_map(|t| writers.iter().map(move |w| w.replace("{}", t)))
        .chain(globbed.iter().flat_map(|t| unquoted.iter().map(move |w| w.replace("{}", t))));
    for cmd in cases {
        match strict.decide(&shell(&cmd), None) {
            StageVerdict::Refuse(d) => assert_eq!(d.layer, "protected", "{cmd}"),
            other => panic!("{cmd}: {other:?}"),
        }
    }
    for fine in ["ls", "cat notes/car.txt", "echo .cartography", "git status", "ls *", "rm -rf ./*", "echo '.c?r'"] {
        assert!(matches!(strict.decide(&shell(fine), None), StageVerdict::Admit(_)), "{fine}");
    }
}

/// Issue #25: a tier ledger and its key under names of the operator's
/// choosing are protected like the fixed names: a shell command naming
/// either (every writer, quoted, escaped and ANSI-C spellings, globs) and a
/// built-in file tool's `path` naming either are refused by the `protected`
/// layer; so an agent cannot append a forged line to an unkeyed ledger or
/// read the key of a keyed one. Generated over writers and spellings.
#[test]
fn a_ledger_and_key_of_any_name_are_protected() {
    use car_runtime::admission::{AdmissionConfig, AdmissionStage, HostLayers, StageVerdict};
    let dir = scratch("ledger-names");
    let ledger = dir.join("grants.log");
    let key = dir.join("secret.bin");
    std::fs::write(&key, [7u8; 32]).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let build = |doc: Value| {
        AdmissionStage::build(AdmissionConfig::from_value(doc).unwrap(), &HostLayers::default(), None).unwrap()
    };
    let keyed = build(json!({"preset": "open", "tier": "full_access", "ledger_path": ledger.to_string_lossy(),
                             "ledger_key_path": key.to_string_lossy()}));
    let unkeyed = build(json!({"preset": "open", "tier": "full_access", "ledger_path": ledger.to_string_lossy()}));
    let operator =
        build(json!({"preset": "open", "ledger_path": ledger.to_string_lossy(), "allow_protected_writes": true}));
    let call = |tool: &str, params: Value| {
        let mut a = car_runtime::ir::Action::tool_call(tool);
        a.parameters = params.as_object().unwrap().clone().into();
        a
    };
    let refused = |stage: &AdmissionStage, a: &car_runtime::ir::Action| matches!(stage.decide(a, None), StageVerdict::Refuse(d) if d.layer == "protected");
    let writers =
        ["echo '{\"r\":1}' >> {}", "printf x>{}", "cp forged {}", "tee -a {} < x", "sh -c 'cat > \"{}\"'", "cat {}"];
    let ledger_s = ledger.to_string_lossy().to_string();
    let spellings = [
        ledger_s.clone(),
        "grants.log".to_string(),
        "./GRANTS.LOG".to_string(),
        "gra'nts'.log".to_string(),
        "grants.lo\\g".to_string(),
        "$'grants\\x2elog'".to_string(),
    ];
    // Globs the shell expands to the name (where it expands them: unquoted).
    let globbed = ["grants.l?g", "gr*.log", "grant[s].log"];
    let unquoted = ["printf x>{}", "cp forged {}", "tee -a {} < x", "cat {}"];
    let cases: Vec<String> = spellings
        .iter()
        .flat_map(|s| writers.iter().map(move |w| w.replacen("{}", s, 1)))
        .chain(globbed.iter().flat_map(|g| unquoted.iter().map(move |w| w.replacen("{}", g, 1))))
        .collect();
    let mut n = 0;
    for cmd in cases {
        let a = call("shell", json!({"command": cmd}));
        assert!(refused(&unkeyed, &a), "unkeyed: {cmd}");
        assert!(refused(&keyed, &a), "keyed: {cmd}");
        assert!(!refused(&operator, &a), "operator: {cmd}");
        n += 1;
    }
    for cmd in ["cat secret.bin", "base64 /x/SECRET.BIN", "cp secret.b'i'n /tmp/k"] {
        assert!(refused(&keyed, &call("shell", json!({"command": cmd}))), "{cmd}");
    }
    for (tool, params) in [
        ("write_file", json!({"path": "grants.log", "content": "{}"})),
        ("edit_file", json!({"path": "sub/Grants.Log", "old_text": "a", "new_text": "b"})),
        ("read_file", json!({"path": "secret.bin"})),
    ] {
        assert!(refused(&keyed, &call(tool, params.clone())), "{tool} {params}");
    }
    // Other files and commands pass.
    for cmd in ["ls", "cat grants.txt", "echo log"] {
        assert!(!refused(&keyed, &call("shell", json!({"command": cmd}))), "{cmd}");
    }
    assert!(!refused(&keyed, &call("write_file", json!({"path": "notes.log", "content": ""}))));
    assert_eq!(n, 48);
    let _ = std::fs::remove_dir_all(&dir);
}
