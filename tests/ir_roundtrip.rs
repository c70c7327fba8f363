//! The IR on the wire: defaults, path errors and serialise → parse identity.

use car_runtime::ir::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

#[test]
fn minimal_document_gets_every_default_and_reparses_identically() {
    let p = parse_proposal(r#"{"actions":[{"type":"tool_call","tool":"x"}]}"#).unwrap();
    let text = serde_json::to_string(&p).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();

    // Proposal defaults.
    let id = v["id"].as_str().unwrap();
    assert_eq!(id.len(), 12);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{id}");
    assert_eq!(v["source"], "unknown");
    let ts = v["timestamp"].as_str().unwrap();
    let parsed = chrono::DateTime::parse_from_rfc3339(ts).unwrap();
    assert!((chrono::Utc::now() - parsed.with_timezone(&chrono::Utc)).num_seconds().abs() < 60);
    assert_eq!(v["context"], json!({}));

    // Action defaults, exactly the spec's table.
    let a = &v["actions"][0];
    let aid = a["id"].as_str().unwrap();
    assert_eq!(aid.len(), 12);
    let mut expected = json!({
        "id": aid, "type": "tool_call", "tool": "x", "parameters": {}, "preconditions": [],
        "expected_effects": {}, "state_dependencies": [], "read_set": [], "write_set": [], "assumptions": [],
        "invocation_mode": "one_shot", "reversibility": "irreversible", "idempotent": false, "max_retries": 3,
        "failure_behavior": "abort", "metadata": {}
    });
    assert_eq!(a, &expected);
    // `compensation` and `timeout_ms` are omitted when absent.
    assert!(a.get("compensation").is_none() && a.get("timeout_ms").is_none());

    // Parsing the output again is identical.
    let again = parse_proposal(&text).unwrap();
    assert_eq!(again, p);
    assert_eq!(serde_json::to_string(&again).unwrap(), text);
    expected["id"] = json!("other");
    assert_ne!(a, &expected);
}

#[test]
fn generated_ids_are_unique() {
    let p = parse_proposal(r#"{"actions":[{"type":"assertion"},{"type":"assertion"}]}"#).unwrap();
    assert_ne!(p.actions[0].id, p.actions[1].id);
    let q = parse_proposal(r#"{"actions":[]}"#).unwrap();
    assert_ne!(p.id, q.id);
}

#[test]
fn errors_name_the_json_path() {
    let e = parse_proposal(
        r#"{"actions":[{"type":"assertion"},{"type":"assertion"},{"type":"assertion"},{"type":"tool_call","tool":"x","failure_behavior":"redo"}]}"#,
    )
    .unwrap_err();
    assert_eq!(e.code(), "invalid_document");
    assert!(e.to_string().starts_with("actions[3].failure_behavior: unknown variant `redo`"), "{e}");
    assert_eq!(e.to_json()["details"]["path"], "actions[3].failure_behavior");

    let e = parse_proposal(r#"{"actions":[{"type":"state_read"},{"type":"tool_call"}]}"#).unwrap_err();
    assert_eq!(e.code(), "missing_field");
    assert_eq!(e.to_string(), "actions[1].tool: missing field `tool`");

    let e = parse_proposal(r#"{"actions":[{"type":"tool_call","tool":"x","preconditions":[{"operator":"eq"}]}]}"#)
        .unwrap_err();
    assert!(e.to_string().starts_with("actions[0].preconditions[0]: missing field `key`"), "{e}");

    let e = parse_proposal(r#"{"actions": [}"#).unwrap_err();
    assert_eq!(e.code(), "invalid_json");
    assert_eq!(e.to_json()["details"]["line"], 1);

    let e = parse_proposal(r#"{"actions": []} trailing"#).unwrap_err();
    assert_eq!(e.code(), "invalid_json");
}

#[test]
fn hostile_nesting_is_an_error_not_a_crash() {
    let deep = format!(
        r#"{{"actions":[{{"type":"tool_call","tool":"x","parameters":{{"p":{}{}}}}}]}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = parse_proposal(&deep).unwrap_err();
    assert_eq!(e.code(), "invalid_json");
    assert!(e.to_string().contains("recursion limit"), "{e}");
}

#[test]
fn rollback_contract_and_missing_compensation() {
    let mut p = ActionProposal::new(vec![]);
    assert_eq!(p.rollback_contract(), Reversibility::Reversible, "an empty batch is reversible");
    let mut a = Action::tool_call("db.insert");
    a.reversibility = Reversibility::Reversible;
    p.actions.push(a.clone());
    assert_eq!(p.rollback_contract(), Reversibility::Reversible);
    a.reversibility = Reversibility::Compensable;
    assert!(a.missing_required_compensation());
    a.compensation = Some(Box::new(Compensation::Tool { tool: "db.delete".into(), parameters: Map::new() }));
    assert!(!a.missing_required_compensation());
    p.actions.push(a);
    assert_eq!(p.rollback_contract(), Reversibility::Compensable);
    p.actions.push(Action::tool_call("email.send"));
    assert_eq!(p.rollback_contract(), Reversibility::Irreversible, "the default is irreversible");
}

#[test]
fn derived_transactional_sets() {
    let mut a = Action::new(ActionType::StateWrite);
    a.parameters.insert("key".into(), json!("k"));
    a.parameters.insert("value".into(), json!(1));
    a.expected_effects.insert("e".into(), json!(true));
    a.state_dependencies = vec!["d".into()];
    a.assumptions = vec![StateAssumption::new("s").with_read_version(2)];
    assert_eq!(a.effective_read_set(), ["d", "s"]);
    assert_eq!(a.effective_write_set(), ["e", "k"]);
    a.read_set = vec!["r".into()];
    a.write_set = vec!["w".into()];
    assert_eq!(a.effective_read_set(), ["r"]);
    assert_eq!(a.effective_write_set(), ["w"]);
    // A tool_call's `key` parameter is not a write.
    let mut t = Action::tool_call("x");
    t.parameters.insert("key".into(), json!("k"));
    assert!(t.effective_write_set().is_empty());
}

#[test]
fn cost_target_score_formula() {
    let t = CostTarget::default();
    assert!((t.score(1.0, 0.0) - 0.8).abs() < 1e-12);
    assert!((t.score(0.5, 1.0) - (0.5 * 0.8 + 0.2)).abs() < 1e-12);
    let t = CostTarget::default().with_cost_weight(1.0);
    assert!((t.score(0.3, 0.9) - 0.9).abs() < 1e-12);
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_map() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("[a-z_.]{1,8}", json_value(), 0..3).prop_map(|m| m.into_iter().collect())
}

fn keys() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[a-z]{1,4}", 0..3)
}

fn action() -> impl Strategy<Value = Action> {
    let ty = prop_oneof![
        Just(ActionType::ToolCall),
        Just(ActionType::StateWrite),
        Just(ActionType::StateRead),
        Just(ActionType::Assertion)
    ];
    let op = prop_oneof![
        Just(Operator::Eq),
        Just(Operator::Neq),
        Just(Operator::Gt),
        Just(Operator::Lte),
        Just(Operator::Exists),
        Just(Operator::NotExists),
        Just(Operator::Contains),
        "[a-z]{8}".prop_map(Operator::Unknown),
    ];
    let pre = ("[a-z]{1,4}", op, json_value(), ".{0,6}").prop_map(|(key, operator, value, description)| {
        Precondition::new(key, operator, value).with_description(description)
    });
    let assumption = ("[a-z]{1,4}", prop::option::of(json_value()), prop::option::of(any::<u64>())).prop_map(
        |(key, expected_value, read_version)| {
            let mut a = StateAssumption::new(key);
            if let Some(v) = expected_value {
                a = a.with_expected_value(v);
            }
            if let Some(n) = read_version {
                a = a.with_read_version(n);
            }
            a
        },
    );
    let comp = prop::option::of(prop_oneof![
        ("[a-z.]{1,8}", json_map()).prop_map(|(tool, parameters)| Compensation::Tool { tool, parameters }),
        "[a-z0-9]{1,8}".prop_map(|action_id| Compensation::ActionRef { action_id }),
    ]);
    let rev = prop_oneof![
        Just(Reversibility::Reversible),
        Just(Reversibility::Compensable),
        Just(Reversibility::Irreversible)
    ];
    let mode = prop_oneof![
        Just(ToolInvocationMode::OneShot),
        Just(ToolInvocationMode::Streaming),
        Just(ToolInvocationMode::LongRunning)
    ];
    let fb = prop_oneof![Just(FailureBehavior::Abort), Just(FailureBehavior::Retry), Just(FailureBehavior::Skip)];
    (
        ("[a-z0-9-]{1,12}", ty, "[a-z_.]{1,10}", json_map(), prop::collection::vec(pre, 0..3), json_map()),
        (keys(), keys(), keys(), keys(), prop::collection::vec(assumption, 0..2)),
        (mode, rev, comp, any::<bool>(), any::<u32>(), fb, prop::option::of(any::<u64>()), json_map()),
    )
        .prop_map(|(a, b, c)| {
            let (id, action_type, tool, parameters, preconditions, expected_effects) = a;
            let (state_dependencies, dependencies, read_set, write_set, assumptions) = b;
            let (
                invocation_mode,
                reversibility,
                compensation,
                idempotent,
                max_retries,
                failure_behavior,
                timeout_ms,
                metadata,
            ) = c;
            // Every field through the builders (the struct is `#[non_exhaustive]`).
            let mut a = Action::new(action_type)
                .with_id(id)
                .with_parameters(parameters)
                .with_read_set(read_set)
                .with_write_set(write_set)
                .with_invocation_mode(invocation_mode)
                .with_reversibility(reversibility)
                .with_idempotent(idempotent)
                .with_max_retries(max_retries)
                .on_failure(failure_behavior);
            if action_type == ActionType::ToolCall {
                a = a.with_tool(tool);
            }
            a = preconditions.into_iter().fold(a, Action::with_precondition);
            a = expected_effects.into_iter().fold(a, |a, (k, v)| a.with_expected_effect(k, v));
            a = state_dependencies.into_iter().fold(a, Action::with_state_dependency);
            a = dependencies.into_iter().fold(a, Action::after);
            a = assumptions.into_iter().fold(a, Action::with_assumption);
            if let Some(c) = compensation {
                a = a.with_compensation(c);
            }
            if let Some(ms) = timeout_ms {
                a = a.with_timeout_ms(ms);
            }
            metadata.into_iter().fold(a, |a, (k, v)| a.with_metadata(k, v))
        })
}

fn proposal() -> impl Strategy<Value = ActionProposal> {
    (
        "[a-f0-9]{12}",
        ".{0,10}",
        prop::collection::vec(action(), 0..5),
        0i64..4_102_444_800,
        0u32..1_000_000_000,
        json_map(),
    )
        .prop_map(|(id, source, actions, secs, nanos, context)| {
            let p = ActionProposal::new(actions)
                .with_id(id)
                .with_source(source)
                .with_timestamp(chrono::DateTime::from_timestamp(secs, nanos).unwrap_or_default());
            context.into_iter().fold(p, |p, (k, v)| p.with_context(k, v))
        })
}

proptest! {
    #[test]
    fn any_valid_proposal_survives_serialise_then_parse(p in proposal()) {
        let text = serde_json::to_string(&p).unwrap();
        let back = parse_proposal(&text).unwrap();
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(&serde_json::to_string(&back).unwrap(), &text);
        // The direct writers (of `normalize_proposal`, `optimize`, `verify`
        // and `simulate`) give serde's bytes.
        prop_assert_eq!(&car_runtime::api::proposal_to_json(&p), &text);
        let verified = car_runtime::verify::verify(&back, &car_runtime::verify::VerifyOptions::default());
        prop_assert_eq!(
            car_runtime::api::verify::verify(&text, None, None, None, None).unwrap(),
            serde_json::to_string(&verified).unwrap()
        );
        let simulated = car_runtime::verify::simulate(&back, &Map::new());
        prop_assert_eq!(
            car_runtime::api::verify::simulate(&text, None).unwrap(),
            serde_json::to_string(&simulated).unwrap()
        );
    }
}

/// Issue #25: a repeated key in any object of a proposal's text is refused,
/// naming the key, wherever it sits (a field of the action, `parameters` at
/// any depth, `context`, `metadata`, `expected_effects`, a compensation's
/// parameters, a precondition's value): serde_json alone keeps the last one
/// silently. The same text without the repeat parses.
mod repeated_keys {
    use super::*;

    /// Where the repeated key is put.
    fn place() -> impl Strategy<Value = usize> {
        0usize..7
    }

    /// `{"<k>": 1, <inner>, "<k>": 2}` nested `depth` levels in objects or arrays.
    fn nest(depth: usize, key: &str, arrays: &[bool], repeat: bool) -> String {
        let mut inner =
            if repeat { format!(r#"{{"{key}":1,"z":0,"{key}":2}}"#) } else { format!(r#"{{"{key}":1,"z":0}}"#) };
        for d in 0..depth {
            inner = if arrays.get(d).copied().unwrap_or(false) {
                format!("[0,{inner}]")
            } else {
                format!(r#"{{"n{d}":{inner}}}"#)
            };
        }
        inner
    }

    fn text(place: usize, v: &str, key: &str, repeat: bool) -> String {
        let action =
            |extra: &str| format!(r#"{{"id":"a","type":"tool_call","tool":"t","parameters":{{"p":0}}{extra}}}"#);
        match place {
            0 => format!(r#"{{"actions":[{{"id":"a","type":"tool_call","tool":"t","parameters":{{"p":{v}}}}}]}}"#),
            1 => format!(r#"{{"actions":[{}],"context":{{"c":{v}}}}}"#, action("")),
            2 => format!(r#"{{"actions":[{}]}}"#, action(&format!(r#","metadata":{{"m":{v}}}"#))),
            3 => format!(r#"{{"actions":[{}]}}"#, action(&format!(r#","expected_effects":{{"e":{v}}}"#))),
            4 => format!(
                r#"{{"actions":[{}]}}"#,
                action(&format!(r#","compensation":{{"type":"tool","tool":"undo","parameters":{{"u":{v}}}}}"#))
            ),
            5 => format!(
                r#"{{"actions":[{}]}}"#,
                action(&format!(r#","preconditions":[{{"key":"k","operator":"equals","value":{v}}}]"#))
            ),
            // The action's own field repeated.
            _ => {
                let dup = if repeat { format!(r#","{key}":"x","{key}":"y""#) } else { format!(r#","{key}":"x""#) };
                format!(
                    r#"{{"actions":[{{"type":"tool_call","tool":"t","parameters":{{}},"metadata":{{"q":1}}{dup}}}]}}"#
                )
            }
        }
    }

    proptest! {
        #[test]
        fn is_refused_naming_the_key(
            place in place(),
            depth in 0usize..5,
            arrays in prop::collection::vec(any::<bool>(), 5),
            key in "[a-y]{1,6}",
        ) {
            let key = if place == 6 { "id".to_string() } else { key };
            let good = text(place, &nest(depth, &key, &arrays, false), &key, false);
            prop_assert!(parse_proposal(&good).is_ok(), "{} -> {:?}", good, parse_proposal(&good).err());
            let bad = text(place, &nest(depth, &key, &arrays, true), &key, true);
            let e = parse_proposal(&bad).expect_err(&bad).to_string();
            prop_assert!(e.contains(&format!("`{key}`")), "{}: {}", bad, e);
            prop_assert!(e.contains("duplicate"), "{}: {}", bad, e);
        }
    }
}

/// The builders make the same actions as the JSON they stand for.
#[test]
fn builders_match_the_json_they_stand_for() {
    use car_runtime::ir::{Action, ActionProposal, Compensation, FailureBehavior, parse_proposal_value};
    let built = ActionProposal::new(vec![
        Action::tool_call("deploy")
            .with_id("d")
            .with_param("env", "staging")
            .with_timeout_ms(5000)
            .with_max_retries(1)
            .on_failure(FailureBehavior::Retry)
            .compensated_by(Compensation::Tool {
                tool: "rollback".into(),
                parameters: serde_json::json!({"env": "staging"}).as_object().unwrap().clone(),
            }),
        Action::state_write("k", 3).with_id("w").after("d"),
    ])
    .with_id("p")
    .with_source("bot")
    .with_action(Action::state_read("k").with_id("r").after("w"));
    let mut parsed = parse_proposal_value(serde_json::json!({"id": "p", "source": "bot", "actions": [
        {"id": "d", "type": "tool_call", "tool": "deploy", "parameters": {"env": "staging"}, "timeout_ms": 5000,
         "max_retries": 1, "failure_behavior": "retry", "reversibility": "compensable",
         "compensation": {"type": "tool", "tool": "rollback", "parameters": {"env": "staging"}}},
        {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 3}, "dependencies": ["d"]},
        {"id": "r", "type": "state_read", "parameters": {"key": "k"}, "dependencies": ["w"]},
    ]}))
    .unwrap();
    parsed.timestamp = built.timestamp;
    assert_eq!(built, parsed);
}
