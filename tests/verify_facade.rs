//! The verify family through the JSON text facade, and its behaviour at scale
//! (correctness only: speed is measured by `benches/verify.rs`).

use car_runtime::api::verify as facade;
use serde_json::{Value, json};

fn chain(n: usize) -> String {
    let actions: Vec<Value> = (0..n)
        .map(|i| {
            let mut a = json!({"id": format!("a{i}"), "type": "tool_call", "tool": format!("t{}", i % 7),
                               "parameters": {"n": i}, "expected_effects": {format!("k{i}"): i}});
            if i > 0 {
                a["state_dependencies"] = json!([format!("k{}", i - 1)]);
            }
            a
        })
        .collect();
    json!({"actions": actions}).to_string()
}

#[test]
fn verify_text_api_with_every_argument() {
    let p = json!({"actions": [
        {"id": "a", "type": "tool_call", "tool": "deploy", "parameters": {"env": "prod"},
         "preconditions": [{"key": "ok", "value": true}], "expected_effects": {"deployed": true}},
        {"id": "b", "type": "tool_call", "tool": "ghost"}
    ]})
    .to_string();
    let schemas = json!([{"name": "deploy", "parameters": {"required": ["env"]}}]).to_string();
    let out =
        facade::verify(&p, Some(r#"{"ok": true}"#), Some(vec!["deploy".into()]), Some(1), Some(&schemas)).unwrap();
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["valid"], false);
    let msgs: Vec<&str> = r["issues"].as_array().unwrap().iter().map(|i| i["message"].as_str().unwrap()).collect();
    // Schemas are the registry: "ghost" is not in them.
    assert_eq!(msgs, vec!["excessive actions: 2 (limit 1)", "tool 'ghost' is not registered"]);
    assert_eq!(r["simulated_state"], json!({"deployed": true, "ok": true}));
    assert_eq!(r["evidence"]["checks"][5]["name"], "param_schema");
    assert_eq!(r["evidence"]["checks"][5]["ran"], true);
    assert!(facade::verify(&p, None, None, None, Some(r#"{"deploy": {}}"#)).is_err());
}

#[test]
fn simulate_optimize_equivalent_transaction_text_api() {
    let p = r#"{"actions":[{"id":"a","type":"tool_call","tool":"t","state_dependencies":["ghost"],"expected_effects":{"x":1}}]}"#;
    assert_eq!(facade::simulate(p, None).unwrap(), "{}");
    assert_eq!(facade::simulate(p, Some(r#"{"ghost":0}"#)).unwrap(), r#"{"ghost":0,"x":1}"#);
    let o: Value = serde_json::from_str(&facade::optimize(p).unwrap()).unwrap();
    assert_eq!(o["actions"][0]["state_dependencies"], json!([]));
    let q = r#"{"actions":[]}"#;
    assert!(!facade::equivalent(p, q, Some(r#"[{"ghost":1}]"#)).unwrap());
    assert!(facade::equivalent(p, q, Some("[{}]")).unwrap());
    let t: Value = serde_json::from_str(
        &facade::transaction_check(
            r#"{"actions":[{"id":"a","type":"tool_call","tool":"t","assumptions":[{"key":"x","read_version":1}]}]}"#,
            Some(r#"{"x":2}"#),
            None,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(t["consistent"], false);
    assert_eq!(t["conflicts"][0]["kind"], "stale_assumption");
}

#[test]
fn call_dispatch_names_and_errors() {
    let v = car_runtime::api::call("verify", &json!({"proposal": {"actions": []}})).unwrap();
    assert_eq!(v["valid"], true);
    let e = car_runtime::api::call("simulate", &json!({})).unwrap_err();
    assert_eq!(e.code(), "invalid_argument");
    let e = car_runtime::api::call("equivalent", &json!({"p1": {"actions": []}})).unwrap_err();
    assert!(e.to_string().contains("`p2`"));
    let e = car_runtime::api::call("verify", &json!({"proposal": {"actions": []}, "max_actions": "ten"})).unwrap_err();
    assert!(e.to_string().contains("`max_actions`"));
}

#[test]
fn a_long_chain_verifies_layer_by_layer() {
    let n = 20_000;
    let out = facade::verify(&chain(n), None, None, Some(n as u64), None).unwrap();
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["valid"], true, "{}", r["issues"]);
    assert_eq!(r["execution_levels"].as_array().unwrap().len(), n);
    assert_eq!(r["simulated_state"].as_object().unwrap().len(), n);
    assert_eq!(r["evidence"]["untested_regions"].as_array().unwrap().len(), 2 * n);
    let s: Value = serde_json::from_str(&facade::simulate(&chain(n), None).unwrap()).unwrap();
    assert_eq!(s.as_object().unwrap().len(), n);
}

#[test]
fn many_writers_of_one_key_give_linear_findings() {
    let n = 5_000;
    let actions: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("w{i}"), "type": "tool_call", "tool": format!("t{i}"), "expected_effects": {"hot": i}}))
        .collect();
    let p = json!({"actions": actions}).to_string();
    let r: Value = serde_json::from_str(&facade::verify(&p, None, None, Some(n as u64), None).unwrap()).unwrap();
    assert_eq!(r["conflicts"].as_array().unwrap().len(), n - 1);
    assert_eq!(r["execution_levels"], json!([(0..n).map(|i| format!("w{i}")).collect::<Vec<_>>()]));
    let t: Value = serde_json::from_str(&facade::transaction_check(&p, None, None).unwrap()).unwrap();
    assert_eq!(t["conflicts"].as_array().unwrap().len(), n - 1);
}
