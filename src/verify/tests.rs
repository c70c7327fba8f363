use serde_json::{Value, json};

use super::*;
use crate::ir::parse_proposal_value;

fn p(actions: Value) -> ActionProposal {
    parse_proposal_value(json!({"id": "p", "actions": actions})).unwrap()
}

fn messages(r: &VerificationResult) -> Vec<String> {
    r.issues.iter().map(|i| format!("{}: {}", i.action_id, i.message)).collect()
}

fn state(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

#[test]
fn chain_levels_and_state() {
    let r = verify(
        &p(json!([
            {"id":"a","type":"tool_call","tool":"ta","expected_effects":{"x":1}},
            {"id":"b","type":"tool_call","tool":"tb","state_dependencies":["x"],"expected_effects":{"y":1}},
            {"id":"c","type":"tool_call","tool":"tc","state_dependencies":["y"]}
        ])),
        &VerifyOptions::default(),
    );
    assert!(r.valid, "{:?}", r.issues);
    assert_eq!(r.execution_levels, vec![vec!["a"], vec!["b"], vec!["c"]]);
    assert_eq!(Value::Object(r.simulated_state), json!({"x":1,"y":1}));
}

#[test]
fn blocked_action_applied_by_verify_skipped_by_simulate() {
    let prop = p(json!([
        {"id":"a","type":"tool_call","tool":"deploy","preconditions":[{"key":"tests_passed","value":true}],"expected_effects":{"deployed":true}},
        {"id":"b","type":"tool_call","tool":"notify","state_dependencies":["deployed"],"expected_effects":{"notified":true}},
        {"id":"c","type":"tool_call","tool":"other","expected_effects":{"f":1}}
    ]));
    let r = verify(&prop, &VerifyOptions::default());
    assert!(!r.valid);
    assert_eq!(messages(&r), vec!["a: precondition will fail: key 'tests_passed' has no value"]);
    assert_eq!(Value::Object(r.simulated_state), json!({"deployed":true,"f":1,"notified":true}));
    assert_eq!(Value::Object(simulate(&prop, &Map::new())), json!({"f":1}));
    let ok = state(json!({"tests_passed": true}));
    assert_eq!(Value::Object(simulate(&prop, &ok)), json!({"deployed":true,"f":1,"notified":true,"tests_passed":true}));
}

#[test]
fn loops_warning_then_error() {
    let two = p(json!([{"id":"a","type":"tool_call","tool":"t"},{"id":"b","type":"tool_call","tool":"t"}]));
    let r = verify(&two, &VerifyOptions::default());
    assert!(r.valid);
    assert_eq!(messages(&r), vec!["proposal: duplicate tool call: t (2x)"]);
    assert_eq!(r.issues[0].tier, Some(EvidenceTier::Heuristic));
    let three = p(json!([
        {"id":"a","type":"tool_call","tool":"t","parameters":{"x":1,"y":2}},
        {"id":"b","type":"tool_call","tool":"t","parameters":{"y":2,"x":1}},
        {"id":"c","type":"tool_call","tool":"t","parameters":{"x":1,"y":2}},
        {"id":"d","type":"tool_call","tool":"t","parameters":{"x":2}}
    ]));
    let r = verify(&three, &VerifyOptions::default());
    assert!(!r.valid);
    assert_eq!(messages(&r), vec!["proposal: repeated identical tool call: t (3x) \u{2014} likely loop"]);
}

#[test]
fn resource_bounds_default_thirty() {
    let many: Vec<Value> = (0..31)
        .map(|i| json!({"id": format!("a{i}"), "type":"state_write","parameters":{"key": format!("k{i}"),"value":i}}))
        .collect();
    let r = verify(&p(Value::Array(many.clone())), &VerifyOptions::default());
    assert_eq!(messages(&r), vec!["a0: excessive actions: 31 (limit 30)"]);
    assert_eq!(r.issues[0].severity, Severity::Warning);
    assert!(r.valid);
    let r = verify(&p(Value::Array(many[..30].to_vec())), &VerifyOptions::default());
    assert!(r.issues.is_empty());
    let r = verify(&p(Value::Array(many[..2].to_vec())), &VerifyOptions { max_actions: Some(1), ..Default::default() });
    assert_eq!(messages(&r), vec!["a0: excessive actions: 2 (limit 1)"]);
    assert_eq!(r.evidence.checks[0].verifies, "action count is within the limit (1)");
}

#[test]
fn write_conflicts_unordered_only() {
    let r = verify(
        &p(json!([
            {"id":"a","type":"tool_call","tool":"ta","expected_effects":{"x":1}},
            {"id":"b","type":"tool_call","tool":"tb","expected_effects":{"x":2}},
            {"id":"c","type":"tool_call","tool":"tc","state_dependencies":["x"]}
        ])),
        &VerifyOptions::default(),
    );
    assert_eq!(r.conflicts, vec![("a".to_string(), "b".to_string(), "x".to_string())]);
    assert_eq!(messages(&r), vec!["a: write conflict on 'x' with action b (no dependency declared)"]);
    assert_eq!(r.execution_levels, vec![vec!["a", "b"], vec!["c"]]);
    // Transitively ordered writers do not conflict.
    let r = verify(
        &p(json!([
            {"id":"a","type":"tool_call","tool":"ta","expected_effects":{"x":1,"y":1}},
            {"id":"m","type":"tool_call","tool":"tm","state_dependencies":["y"],"expected_effects":{"z":1}},
            {"id":"b","type":"tool_call","tool":"tb","state_dependencies":["z"],"expected_effects":{"x":2}}
        ])),
        &VerifyOptions::default(),
    );
    assert!(r.conflicts.is_empty());
}

#[test]
fn many_writers_of_one_key_stay_linear() {
    let acts: Vec<Value> = (0..40)
        .map(|i| json!({"id": format!("w{i}"), "type":"tool_call","tool": format!("t{i}"),"expected_effects":{"k":i}}))
        .collect();
    let r = verify(&p(Value::Array(acts)), &VerifyOptions { max_actions: Some(100), ..Default::default() });
    assert_eq!(r.conflicts.len(), 39);
    assert_eq!(r.conflicts[0], ("w0".into(), "w1".into(), "k".into()));
}

#[test]
fn tools_schemas_and_compensation() {
    let prop = p(json!([
        {"id":"a","type":"tool_call","tool":"x","reversibility":"compensable"},
        {"id":"b","type":"tool_call","tool":"t","parameters":{"p":1},"compensation":{"type":"tool","tool":"undo"}},
        {"id":"c","type":"tool_call","tool":"t","parameters":{"p":"s"},"reversibility":"compensable","compensation":{"type":"action_ref","action_id":"zz"}}
    ]));
    let schemas: Vec<ToolSchema> = serde_json::from_value(json!([
        {"name":"x"},
        {"name":"t","parameters":{"type":"object","properties":{"p":{"type":"string"}},"required":["p"]}}
    ]))
    .unwrap();
    // Supplied schemas are the registry: `tool_names` is not consulted.
    let r = verify(
        &prop,
        &VerifyOptions { tool_names: Some(vec!["undo".into()]), tool_schemas: Some(schemas), ..Default::default() },
    );
    assert_eq!(
        messages(&r),
        vec![
            "a: action declares reversibility 'compensable' but no compensation",
            "b: tool 't': parameter 'p' has wrong type: expected string, got number",
            "b: compensation names tool 'undo', which is not registered",
            "c: compensation references action 'zz', which is not in this proposal",
        ]
    );
    let names: Vec<(&str, bool, u64)> =
        r.evidence.checks.iter().map(|c| (c.name.as_str(), c.ran, c.findings)).collect();
    assert_eq!(
        names,
        vec![
            ("resource_bounds", true, 0),
            ("loop_detection", true, 0),
            ("preconditions", true, 0),
            ("state_dependencies", true, 0),
            ("tool_existence", true, 0),
            ("param_schema", true, 1),
            ("compensation_resolution", true, 3),
            ("write_conflicts", true, 0),
        ]
    );
    // Without a registry: tool existence and tool compensations are unchecked.
    let r = verify(&prop, &VerifyOptions::default());
    assert_eq!(r.issues.len(), 2);
    assert!(!r.evidence.checks[4].ran);
    assert_eq!(r.evidence.checks[4].verifies, "(skipped \u{2014} no tool registry supplied)");
}

#[test]
fn evidence_confidence_and_regions() {
    let r = verify(&p(json!([])), &VerifyOptions::default());
    assert_eq!(r.evidence.confidence, 1.0);
    assert!(r.evidence.untested_regions.is_empty() && r.evidence.residual_risks.is_empty());
    assert_eq!(r.evidence.assumptions.len(), 2);
    let r = verify(
        &p(json!([{"id":"a","type":"tool_call","tool":"t","expected_effects":{"k":1}}])),
        &VerifyOptions::default(),
    );
    assert_eq!(
        r.evidence.untested_regions,
        vec!["runtime output of tool 't' (action a)", "state key 'k' (value set at runtime by action a)"]
    );
    // 1.0 - 0.15 (no registry) - 0.2 (no schemas) - 2 * 0.02 (untested regions)
    assert!((r.evidence.confidence - 0.61).abs() < 1e-9);
    assert_eq!(r.evidence.assumptions.len(), 3);
    assert_eq!(
        r.evidence.residual_risks,
        vec!["outcomes depending on runtime tool output or runtime-set state are unverified"]
    );
}

#[test]
fn explicit_dependencies_cycles_and_unknown_ids() {
    let r = verify(
        &p(json!([
            {"id":"a","type":"state_write","parameters":{"key":"k","value":1},"dependencies":["b"]},
            {"id":"b","type":"state_write","parameters":{"key":"j","value":1},"dependencies":["a"]},
            {"id":"c","type":"state_write","parameters":{"key":"i","value":1},"dependencies":["nope"]}
        ])),
        &VerifyOptions::default(),
    );
    assert!(!r.valid);
    assert_eq!(
        messages(&r),
        vec![
            "c: dependency on unknown action 'nope'",
            "a: action is in or behind a cycle of explicit `dependencies` and can never run",
            "b: action is in or behind a cycle of explicit `dependencies` and can never run",
        ]
    );
    assert_eq!(r.execution_levels, vec![vec!["c"]]);
    assert!(r.evidence.checks.iter().any(|c| c.name == "explicit_dependencies" && c.findings == 3));
}

#[test]
fn simulate_cascades_through_explicit_dependencies() {
    let prop = p(json!([
        {"id":"a","type":"tool_call","tool":"t","preconditions":[{"key":"go","operator":"exists"}],"expected_effects":{"a":1}},
        {"id":"b","type":"tool_call","tool":"u","dependencies":["a"],"expected_effects":{"b":1}},
        {"id":"c","type":"tool_call","tool":"v","expected_effects":{"c":1}}
    ]));
    assert_eq!(Value::Object(simulate(&prop, &Map::new())), json!({"c":1}));
    assert_eq!(Value::Object(simulate(&prop, &state(json!({"go":0})))), json!({"a":1,"b":1,"c":1,"go":0}));
}

#[test]
fn equivalent_uses_default_probes() {
    let a = p(json!([{"id":"a","type":"tool_call","tool":"t","expected_effects":{"d":true}}]));
    let gated = p(
        json!([{"id":"a","type":"tool_call","tool":"t","preconditions":[{"key":"ok","value":true}],"expected_effects":{"d":true}}]),
    );
    assert!(equivalent(&a, &a, None));
    assert!(!equivalent(&a, &gated, None));
    let probe = vec![state(json!({"ok": true}))];
    assert!(equivalent(&a, &gated, Some(&probe)));
    // A difference only the {"x":1,"y":2} probe reaches.
    let on_y = p(
        json!([{"id":"a","type":"tool_call","tool":"t","preconditions":[{"key":"y","value":2}],"expected_effects":{"d":true}}]),
    );
    assert!(!equivalent(&on_y, &p(json!([])), None));
    assert!(equivalent(&on_y, &p(json!([])), Some(&[Map::new()])));
}

#[test]
fn optimize_prunes_phantom_dependencies_only() {
    let prop = p(json!([
        {"id":"a","type":"tool_call","tool":"ta","state_dependencies":["ghost"]},
        {"id":"b","type":"tool_call","tool":"tb","state_dependencies":["x","ghost"]},
        {"id":"c","type":"tool_call","tool":"tc","expected_effects":{"x":1}}
    ]));
    let o = optimize(&prop);
    assert_eq!(o.actions.len(), 3);
    assert!(o.actions[0].state_dependencies.is_empty());
    assert_eq!(o.actions[1].state_dependencies, vec!["x"]);
    assert_eq!(o.actions.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), vec!["a", "b", "c"]);
}

#[test]
fn optimize_in_place_prunes_as_optimize_does_and_keeps_order_and_duplicates() {
    let mut prop = p(json!([
        {"id":"a","type":"tool_call","tool":"ta","state_dependencies":["x","ghost","x","ghost2"]},
        {"id":"b","type":"state_write","parameters":{"key":"y","value":1},"state_dependencies":["y"]},
        {"id":"c","type":"tool_call","tool":"tc","expected_effects":{"x":1}}
    ]));
    let copied = optimize(&prop);
    super::optimize_in_place(&mut prop);
    assert_eq!(prop, copied);
    assert_eq!(prop.actions[0].state_dependencies, vec!["x", "x"]);
    assert_eq!(prop.actions[1].state_dependencies, vec!["y"]);
    // Without any state dependency nothing changes.
    let mut wide = p(json!([{"id":"a","type":"tool_call","tool":"t","expected_effects":{"k":1}}]));
    let before = wide.clone();
    super::optimize_in_place(&mut wide);
    assert_eq!(wide, before);
}

mod facade_text {
    use proptest::prelude::*;

    use super::*;

    /// Names and ids from pieces that escape, sort around the lines' fixed
    /// middles (`'`, ` `, `(`, `)`), or are not ASCII.
    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop::sample::select(vec!["t", "k", "'", " (", ")", "\"", "\\", "\n", "\u{1}", "é", "a1", "'x", ""]),
            0..4,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The JSON facade writes the untested regions from their names and
        /// ids; its answer is the typed result as serde writes it.
        #[test]
        fn the_facades_answer_is_the_typed_result_as_serde_writes_it(
            actions in prop::collection::vec((name(), name(), prop::collection::vec(name(), 0..3), any::<bool>()), 0..12)
        ) {
            let actions: Vec<Value> = actions
                .into_iter()
                .map(|(id, tool, keys, call)| {
                    let effects: Map<String, Value> = keys.into_iter().map(|k| (k, json!(1))).collect();
                    if call {
                        json!({"id": id, "type": "tool_call", "tool": tool, "expected_effects": effects})
                    } else {
                        json!({"id": id, "type": "state_write", "parameters": {"key": tool, "value": 2}, "expected_effects": effects})
                    }
                })
                .collect();
            let text = json!({"id": "p", "actions": actions}).to_string();
            let typed = verify(&crate::ir::parse_proposal(&text).unwrap(), &VerifyOptions::default());
            let got = crate::api::verify::verify(&text, None, None, None, None).unwrap();
            prop_assert_eq!(got, serde_json::to_string(&typed).unwrap());
        }
    }
}
