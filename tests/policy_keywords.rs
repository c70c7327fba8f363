//! `deny_keyword` matches every text of the parameters in its unescaped
//! form: strings and object keys at any depth, whatever characters the
//! keyword holds (quotes, backslashes, newlines, unicode).

use car_runtime::ir::Action;
use car_runtime::policy::{PolicyEngine, parse_policy_text};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// One step down (fillers and keys along the way are digits and `-`). from the parameter value to the place of the keyword.
#[derive(Debug, Clone)]
enum Step {
    /// Inside an array, at this position among fillers.
    Array(usize),
    /// Inside an object, under this key, among filler keys.
    Object(String),
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![(0usize..3).prop_map(Step::Array), "[0-9]{1,4}".prop_map(Step::Object)]
}

/// Where the keyword sits at the bottom of the path.
#[derive(Debug, Clone, Copy)]
enum Place {
    Value,
    Key,
    ParamName,
}

fn arb_place() -> impl Strategy<Value = Place> {
    prop_oneof![Just(Place::Value), Just(Place::Key), Just(Place::ParamName)]
}

fn keyword() -> impl Strategy<Value = String> {
    "[a-z\"\\\\\n\t\r{}:,\\[\\]é\u{202e}😀 ]{1,8}"
}

fn wrap(path: &[Step], inner: Value) -> Value {
    path.iter().rev().fold(inner, |v, step| match step {
        Step::Array(i) => {
            let mut a: Vec<Value> = (0..3).map(|j| json!(format!("{j}"))).collect();
            a.insert(*i, v);
            Value::Array(a)
        }
        Step::Object(k) => json!({ "-8": 1, k.clone(): v, "-9": [0.5, -2] }),
    })
}

fn engines(kw: &str) -> (PolicyEngine, Vec<car_runtime::policy::file::NamedRule>) {
    // A JSON string literal is a valid TOML basic string.
    let text = format!("deny_keyword = [{}]\n", serde_json::to_string(kw).unwrap());
    let set = parse_policy_text(&text, "kw.toml").unwrap();
    assert_eq!(set.deny_keyword, [kw.to_string()]);
    let mut e = PolicyEngine::new();
    e.apply_policy_set(&set);
    (e, set.lower())
}

proptest! {
    #[test]
    fn a_keyword_anywhere_in_the_parameters_is_denied(
        kw in keyword(),
        pre in "[a-z \"\\\\]{0,3}",
        post in "[a-z \"\\\\]{0,3}",
        path in prop::collection::vec(arb_step(), 0..5),
        place in arb_place(),
    ) {
        let text = format!("{pre}{kw}{post}");
        let (param, value) = match place {
            Place::Value => ("p".to_string(), wrap(&path, json!(text))),
            Place::Key => ("p".to_string(), wrap(&path, json!({ text.clone(): 0 }))),
            Place::ParamName => (text.clone(), wrap(&path, json!("7"))),
        };
        let mut a = Action::tool_call("t");
        a.id = "a".into();
        // Fillers are digits, which no generated keyword holds.
        a.parameters.insert("0".into(), json!(["1", {"2": 3}]));
        a.parameters.insert(param.clone(), value.clone());
        let (engine, lowered) = engines(&kw);
        let v = engine.check(&a, &Map::new());
        prop_assert_eq!(v.len(), 1, "indexed scan missed {:?} in {} = {}", kw, param, value);
        prop_assert_eq!(v[0].reason.clone(), format!("parameter `{param}` contains a denied keyword"));
        // The rule evaluated on its own (the fallback path) agrees.
        let hits = lowered.iter().filter(|r| (r.rule)(&a, &Map::new()).is_some()).count();
        prop_assert_eq!(hits, 1, "lowered rule missed {:?}", kw);
    }
}

#[test]
fn keywords_match_texts_not_json_punctuation_or_escapes() {
    let (e, _) = engines("\\\"");
    let mut a = Action::tool_call("t");
    // The JSON text of `["a\"b"]` holds `\"`; the string itself does not.
    a.parameters.insert("p".into(), json!(["a\"b"]));
    assert!(e.check(&a, &Map::new()).is_empty());
    a.parameters.insert("p".into(), json!(["a\\\"b"]));
    assert_eq!(e.check(&a, &Map::new()).len(), 1);
    // Not across two strings, nor across JSON punctuation.
    let (e, _) = engines("a\",\"b");
    a.parameters.insert("p".into(), json!(["a", "b"]));
    assert!(e.check(&a, &Map::new()).is_empty());
    // Numbers and booleans nested anywhere match on their JSON text.
    let (e, _) = engines("12345");
    a.parameters.insert("p".into(), json!({"deep": [[{"n": 9123456}]]}));
    assert_eq!(e.check(&a, &Map::new()).len(), 1);
}
