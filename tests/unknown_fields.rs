//! Unknown fields of a proposal: accepted (the spec's stability rule), but
//! `verify` warns of each with its JSON path and the known field it
//! probably meant, `car verify` and `car run` show it, and strict mode
//! (`set_strict_fields`) refuses the proposal with `unknown_field`.
//! Misspellings are generated from every field of an action.

use std::sync::Arc;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall};
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};

use crate::cli_common::{car_in, tmp};

fn warnings(result: &str) -> Vec<(String, String)> {
    let v: Value = serde_json::from_str(result).unwrap();
    v["issues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["severity"] == "warning" && i["message"].as_str().unwrap().starts_with("unknown field"))
        .map(|i| (i["action_id"].as_str().unwrap().to_string(), i["message"].as_str().unwrap().to_string()))
        .collect()
}

fn misspelled() -> Value {
    json!({"id": "p", "sorce": "me", "actions": [
        {"id": "a", "type": "state_write", "parameters": {"key": "k", "value": 1, "anything": true}},
        {"id": "b", "type": "state_read", "parameters": {"key": "k"}, "dependecies": ["a"],
         "preconditions": [{"key": "k", "operator": "exists", "vaule": 1}], "metadata": {"free": 1}},
    ]})
}

#[test]
fn verify_warns_of_each_unknown_field_with_its_path_and_a_suggestion() {
    let text = misspelled().to_string();
    let out = car_runtime::api::verify::verify(&text, None, None, None, None).unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["valid"], true, "warnings leave the proposal valid: {out}");
    assert_eq!(
        warnings(&out),
        vec![
            ("proposal".to_string(), "unknown field `sorce` at sorce (ignored); did you mean `source`?".to_string()),
            (
                "b".to_string(),
                "unknown field `dependecies` at actions[1].dependecies (ignored); did you mean `dependencies`?"
                    .to_string()
            ),
            (
                "b".to_string(),
                "unknown field `vaule` at actions[1].preconditions[0].vaule (ignored); did you mean `value`?"
                    .to_string()
            ),
        ]
    );
    // The same through the runtime and through the facade (the daemon's and
    // the MCP endpoint's `verify`), the proposal as a value or as JSON text.
    let rt = CarRuntime::new();
    assert_eq!(warnings(&rt.verify_proposal(&text).unwrap()), warnings(&out));
    for proposal in [misspelled(), Value::String(text.clone())] {
        let v = car_runtime::api::call("verify", &json!({"proposal": proposal})).unwrap();
        assert_eq!(warnings(&v.to_string()), warnings(&out), "{proposal}");
    }
    // Maps take any key: nothing is reported inside parameters or metadata.
    assert!(!out.contains("anything") && !out.contains("`free`"), "{out}");
    // A proposal without unknown fields gets none.
    let clean = json!({"actions": [{"id": "a", "type": "state_write", "parameters": {"key": "k", "value": 1}}]});
    assert!(
        warnings(&car_runtime::api::verify::verify(&clean.to_string(), None, None, None, None).unwrap()).is_empty()
    );
}

/// Every field of an action, misspelled by deleting or transposing one
/// character: each variant is reported at its path, and the suggestion is
/// a known field at least as close to it as the one it came from.
#[test]
fn generated_misspellings_of_every_action_field_are_reported() {
    let fields = [
        "tool",
        "parameters",
        "preconditions",
        "expected_effects",
        "state_dependencies",
        "dependencies",
        "read_set",
        "write_set",
        "assumptions",
        "invocation_mode",
        "reversibility",
        "compensation",
        "idempotent",
        "max_retries",
        "failure_behavior",
        "timeout_ms",
        "metadata",
    ];
    let mut checked = 0;
    for f in fields {
        let chars: Vec<char> = f.chars().collect();
        let mut variants = Vec::new();
        for i in 0..chars.len() {
            let mut d = chars.clone();
            d.remove(i);
            variants.push(d.into_iter().collect::<String>());
            if i + 1 < chars.len() {
                let mut t = chars.clone();
                t.swap(i, i + 1);
                variants.push(t.into_iter().collect::<String>());
            }
        }
        for v in variants {
            if v == f || fields.contains(&v.as_str()) || v == "id" || v == "type" {
                continue;
            }
            let p = json!({"actions": [{"id": "x", "type": "tool_call", "tool": "t", &v: 1}]});
            let out = car_runtime::api::verify::verify(&p.to_string(), None, None, None, None).unwrap();
            let w = warnings(&out);
            assert_eq!(w.len(), 1, "{f} -> {v}: {out}");
            assert!(w[0].1.contains(&format!("at actions[0].{v} ")), "{f} -> {v}: {}", w[0].1);
            let suggested = w[0].1.split("did you mean `").nth(1).map(|s| s.trim_end_matches("`?").to_string());
            let Some(s) = suggested else { panic!("{f} -> {v}: no suggestion in {}", w[0].1) };
            assert!(strsim::osa_distance(&v, &s) <= strsim::osa_distance(&v, f), "{f} -> {v}: suggested {s}");
            checked += 1;
        }
    }
    assert!(checked > 300, "{checked}");
}

#[tokio::test]
async fn strict_mode_refuses_and_nothing_runs() {
    let rt = CarRuntime::new();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = calls.clone();
    rt.register_tool_schema(&json!({"name": "t", "parameters": {"type": "object"}}).to_string()).unwrap();
    let exec = Arc::new(FnExecutor(move |_: ToolCall| {
        c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok::<Value, ToolFailure>(json!(1))
    }));
    let p = json!({"actions": [{"id": "a", "type": "tool_call", "tool": "t"},
                               {"id": "b", "type": "tool_call", "tool": "t", "dependecies": ["a"]}]})
    .to_string();
    // Off (the default): it runs, without the ordering it meant.
    assert!(!rt.strict_fields());
    rt.execute_proposal(&p, exec.clone(), None, None).await.unwrap();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    rt.set_strict_fields(true);
    for e in [
        rt.execute_proposal(&p, exec.clone(), None, None).await.unwrap_err(),
        rt.verify_proposal(&p).unwrap_err(),
        rt.proposal_plan(&p, None, None).unwrap_err(),
    ] {
        assert_eq!(e.code(), "unknown_field", "{e}");
        assert!(e.to_string().contains("did you mean `dependencies`"), "{e}");
        assert_eq!(e.details()["path"], "actions[1].dependecies");
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2, "nothing ran in strict mode");
    // A proposal without unknown fields still runs in strict mode.
    let clean = json!({"actions": [{"id": "a", "type": "tool_call", "tool": "t"}]}).to_string();
    rt.execute_proposal(&clean, exec.clone(), None, None).await.unwrap();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    // Malformed input keeps its own error (not unknown_field).
    assert_eq!(rt.verify_proposal("{\"actions\": 3}").unwrap_err().code(), "invalid_document");
}

#[test]
fn car_verify_and_car_run_show_the_warning() {
    let dir = tmp();
    std::fs::write(dir.join("plan.json"), misspelled().to_string()).unwrap();
    let r = car_in(&dir, &["verify", "plan.json"]);
    assert_eq!(r.code, 0, "{}", r.all());
    assert!(
        r.stdout.contains(
            "warning b: unknown field `dependecies` at actions[1].dependecies (ignored); did you mean `dependencies`?"
        ),
        "{}",
        r.all()
    );
    let r = car_in(&dir, &["run", "plan.json", "--yes"]);
    assert!(r.all().contains("unknown field `dependecies`"), "{}", r.all());
}
