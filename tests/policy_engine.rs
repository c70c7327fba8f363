//! The engine's rule index (by tool, one keyword scan) gives exactly the
//! violations, in exactly the order, that running every rule would; sessions,
//! unregister and trace scopes behave as documented.

use std::sync::Arc;

use car_runtime::ir::Action;
use car_runtime::policy::{
    PolicyEngine, PolicyFn, PolicyViolation, RuleScope, TraceRule, deny_tool, parse_policy_text,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn naive(rules: &[car_runtime::policy::file::NamedRule], a: &Action) -> Vec<PolicyViolation> {
    rules
        .iter()
        .filter_map(|r| {
            (r.rule)(a, &Map::new()).map(|reason| PolicyViolation {
                policy_name: r.name.clone(),
                action_id: a.id.clone(),
                reason,
            })
        })
        .collect()
}

const TOOLS: &[&str] = &["t0", "t1", "t2", "deploy", "http_request"];
const WORDS: &[&str] = &["kw", "DROP TABLE", "rm -rf /", "ok", "safe", "staging", "sk-aaaaaaaaaaaaaaaaaaaaaaaa"];

fn arb_action() -> impl Strategy<Value = Action> {
    (
        prop::sample::select(TOOLS),
        prop::collection::vec(
            (prop::sample::select(&["p", "q", "url", "target"][..]), prop::sample::select(WORDS), any::<bool>()),
            0..4,
        ),
    )
        .prop_map(|(tool, params)| {
            let mut a = Action::tool_call(tool);
            a.id = "a".into();
            for (k, w, nest) in params {
                let v = if nest { json!({"inner": [w]}) } else { json!(w) };
                a.parameters.insert(k.to_string(), v);
            }
            a
        })
}

fn rules_text(seed: &[u8]) -> String {
    let mut t = String::from("deny_keyword = [\"kw\", \"DROP TABLE\", \"rm -rf /\"]\n");
    for (i, b) in seed.iter().enumerate() {
        let tool = TOOLS[*b as usize % TOOLS.len()];
        let param = ["p", "q", "url", "target"][i % 4];
        t += &match b % 5 {
            0 => format!("deny_tool = [\"{tool}\"]\n"),
            1 => format!("[[deny_tool_param]]\ntool = \"{tool}\"\nparam = \"{param}\"\ncontains = \"o\"\n"),
            2 => format!("[[allow_tool_param]]\ntool = \"{tool}\"\nparam = \"{param}\"\nallow = [\"staging\"]\n"),
            3 => format!(
                "[[deny_tool_param_matching]]\ntool = \"{tool}\"\nparam = \"{param}\"\nmatches = \"sk-[a-z]{{20,}}\"\n"
            ),
            _ => format!(
                "[[deny_tool_param_matching]]\ntool = \"{tool}\"\nparam = \"{param}\"\nmatches = \"^s\"\nnegate = true\n"
            ),
        };
    }
    t
}

proptest! {
    #[test]
    fn indexed_check_equals_running_every_rule(seed in prop::collection::vec(any::<u8>(), 0..12), actions in prop::collection::vec(arb_action(), 1..8)) {
        // `deny_tool` may appear twice in the generated text; keep the first.
        let text = rules_text(&seed);
        let mut merged = String::new();
        let mut denied = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("deny_tool = ") {
                denied.push(rest.trim_matches(['[', ']']).to_string());
            } else {
                merged += line;
                merged.push('\n');
            }
        }
        if !denied.is_empty() {
            merged = format!("deny_tool = [{}]\n{merged}", denied.join(", "));
        }
        let set = parse_policy_text(&merged, "p.toml").unwrap();
        let naive_rules = set.lower();
        let mut engine = PolicyEngine::new();
        engine.apply_policy_set(&set);
        for a in &actions {
            prop_assert_eq!(engine.check(a, &Map::new()), naive(&naive_rules, a));
        }
    }
}

#[test]
fn mixed_scopes_keep_registration_order() {
    let mut e = PolicyEngine::new();
    let any: PolicyFn = Arc::new(|_: &Action, _: &Map<String, Value>| Some("any".into()));
    e.register_scoped("kw", Arc::new(|_: &Action, _: &Map<String, Value>| None), "", RuleScope::Keyword("bad".into()));
    e.register("closure", any, "");
    e.register_scoped("tool", deny_tool("x"), "", RuleScope::Tool("x".into()));
    e.register_scoped(
        "kw2",
        Arc::new(|_: &Action, _: &Map<String, Value>| None),
        "",
        RuleScope::Keyword("worse".into()),
    );
    let mut a = Action::tool_call("x");
    a.parameters.insert("first".into(), json!("fine"));
    a.parameters.insert("second".into(), json!("bad and worse"));
    let v = e.check(&a, &Map::new());
    let names: Vec<_> = v.iter().map(|v| v.policy_name.as_str()).collect();
    assert_eq!(names, ["kw", "closure", "tool", "kw2"]);
    assert_eq!(v[0].reason, "parameter `second` contains a denied keyword");
    // Unregister rebuilds the index.
    assert_eq!(e.unregister("tool"), 1);
    let names: Vec<_> = e.check(&a, &Map::new()).into_iter().map(|v| v.policy_name).collect();
    assert_eq!(names, ["kw", "closure", "kw2"]);
    // A tool-scoped rule is skipped for other tools.
    e.register_scoped("tool", deny_tool("x"), "", RuleScope::Tool("x".into()));
    assert_eq!(e.check(&Action::tool_call("y"), &Map::new()).len(), 1);
}

#[test]
fn engine_stays_send_sync_and_clones_share_trace_state() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PolicyEngine>();
    let mut e = PolicyEngine::new();
    e.register_trace_rule(TraceRule {
        tool: "send".into(),
        forbid_after: vec![],
        require_before: vec![],
        max_per_session: Some(1),
    });
    let c = e.clone();
    let a = Action::tool_call("send");
    assert!(e.check_dispatch(&a, None).is_empty());
    assert_eq!(c.check_dispatch(&a, None).len(), 1, "the clone sees the same trace");
    c.reset_trace(None);
    assert!(e.check_dispatch(&a, None).is_empty());
    // Trace rules are listed, and unregistered, by their stable name.
    assert_eq!(e.list()[0].name, "trace_rule:send");
    assert_eq!(e.unregister("trace_rule:send"), 1);
    assert!(e.is_empty());
    assert!(e.check_dispatch(&a, None).is_empty());
}

#[test]
fn closing_a_session_drops_its_trace() {
    let mut e = PolicyEngine::new();
    e.register_trace_rule(TraceRule {
        tool: "send".into(),
        forbid_after: vec![],
        require_before: vec![],
        max_per_session: Some(1),
    });
    let s = e.open_session();
    let a = Action::tool_call("send");
    assert!(e.check_dispatch(&a, Some(&s)).is_empty());
    assert_eq!(e.check_dispatch(&a, Some(&s)).len(), 1);
    e.close_session(&s);
    assert!(e.check_dispatch(&a, Some(&s)).is_empty());
}

#[test]
fn record_dispatch_without_check_counts_once() {
    let mut e = PolicyEngine::new();
    e.register_trace_rule(TraceRule {
        tool: "send".into(),
        forbid_after: vec![],
        require_before: vec![],
        max_per_session: Some(2),
    });
    let mut a = Action::tool_call("send");
    a.id = "x".into();
    // Checked and recorded: one dispatch.
    assert!(e.check_dispatch(&a, None).is_empty());
    e.record_dispatch(&a, None, true);
    // Recorded without a check (e.g. a host that only reports): one more.
    a.id = "y".into();
    e.record_dispatch(&a, None, true);
    assert_eq!(e.check_dispatch(&a, None).len(), 1);
}
