//! The admission conformance corpus through `car run`, with the TOML form of
//! each case's document as `.car/permissions.toml`, its policy files under
//! `.car/policies`, its tools as `--stub-tools` stand-ins, and its approver
//! as `--yes` (approve) or `--no-input` (deny). `car run --json` reports the
//! admission decisions beside the result.

use crate::cli_common;
use cli_common::{car_in, tmp};
use serde_json::{Value, json};

/// Why a case cannot run through `car run`, if it cannot.
fn cli_skip(case: &Value) -> Option<&'static str> {
    if case.get("policies").is_some() {
        return Some("registered policies are an API surface; `car run` reads policy files");
    }
    if case["approver"] == json!("timeout") {
        return Some("`car run` answers every ask before the run; it never leaves one to time out");
    }
    if case["approvals"] == json!(false) {
        return Some("`car run` is always the approver of its asks");
    }
    None
}

#[test]
fn corpus_through_car_run() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/admission/cases.json");
    let corpus: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = corpus["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in cases {
        let name = case["name"].as_str().unwrap();
        if cli_skip(case).is_some() {
            continue;
        }
        ran += 1;
        let dir = tmp();
        let car_dir = dir.join(".car");
        std::fs::create_dir_all(car_dir.join("policies")).unwrap();
        let mut config = case["config"].clone();
        if let Some(lines) = case["ledger"].as_array() {
            let ledger = dir.join("ledger.jsonl");
            std::fs::write(&ledger, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
            config["ledger_path"] = json!(ledger.to_string_lossy());
        }
        // `car run` always runs a chain (its default preset is standard).
        // A case without one runs with `open`, the chain that adds no rule:
        // a tool call the tier admitted is then decided by the chain's
        // terminal default instead of the tier.
        let chain_keys = ["preset", "hooks", "deny", "ask", "can_use_tool", "shell", "tools"];
        let chainless = chain_keys.iter().all(|k| config.get(*k).is_none());
        if config.get("preset").is_none() {
            config["preset"] = json!("open");
        }
        // `car run` compensates unless told not to; the library does not.
        if config.get("compensate_on_abort").is_none() {
            config["compensate_on_abort"] = json!(false);
        }
        let tool_calls: Vec<&str> = case["proposal"]["actions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["type"] == json!("tool_call"))
            .filter_map(|a| a["id"].as_str())
            .collect();
        let toml_text = toml::to_string(&config).unwrap_or_else(|e| panic!("{name}: {e}: {config}"));
        std::fs::write(car_dir.join("permissions.toml"), toml_text).unwrap();
        for (file, text) in case["policy_files"].as_object().into_iter().flatten() {
            std::fs::write(car_dir.join("policies").join(file), text.as_str().unwrap()).unwrap();
        }
        let tools: Vec<Value> = corpus["tools"]
            .as_array()
            .unwrap()
            .iter()
            .chain(case["extra_tools"].as_array().into_iter().flatten())
            .cloned()
            .collect();
        std::fs::write(dir.join("stubs.json"), Value::Array(tools).to_string()).unwrap();
        std::fs::write(dir.join("plan.json"), case["proposal"].to_string()).unwrap();
        let answer = if case["approver"] == json!("approve") { "--yes" } else { "--no-input" };
        let r = car_in(&dir, &["run", "plan.json", "--root", ".", "--json", "--stub-tools", "stubs.json", answer]);
        let Ok(out) = serde_json::from_str::<Value>(&r.stdout) else {
            failures.push(format!("{name}: no JSON result (exit {}): {}", r.code, r.all()));
            continue;
        };
        let decisions = out["admission_decisions"].as_array().cloned().unwrap_or_default();
        for want in case["expected"].as_array().unwrap() {
            let id = want["id"].as_str().unwrap();
            let mut want = want.clone();
            if chainless
                && want["layer"] == json!("tier")
                && want["status"] != json!("rejected")
                && tool_calls.contains(&id)
            {
                want["layer"] = json!("default");
            }
            let res = out["results"].as_array().unwrap().iter().find(|x| x["action_id"] == json!(id));
            let status = res.map(|x| x["status"].clone()).unwrap_or(Value::Null);
            // Oldest first: the last decision of the action outside the compensation stage.
            let layer = decisions
                .iter()
                .rev()
                .find(|d| d["action_id"] == json!(id) && d["stage"] != json!("compensation"))
                .and_then(|d| d["layer"].as_str())
                .unwrap_or("none");
            if status != want["status"] || layer != want["layer"] {
                failures.push(format!(
                    "{name}: {id} is {status} by {layer}, want {} by {}: {}",
                    want["status"],
                    want["layer"],
                    res.map(|x| x.to_string()).unwrap_or_default()
                ));
            }
        }
        for (id, what) in case["compensation"].as_object().into_iter().flatten() {
            let res = out["results"].as_array().unwrap().iter().find(|x| x["action_id"] == json!(id)).unwrap();
            let seen = if res["compensated"] == json!(true) {
                "compensated"
            } else if res["compensation_error"].is_string() {
                "refused"
            } else {
                "none"
            };
            if seen != what.as_str().unwrap() {
                failures.push(format!("{name}: compensation of {id} is {seen}, want {what}"));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(ran >= 40, "only {ran} cases ran through car run");
    assert!(failures.is_empty(), "{} of {ran} cases differ:\n{}", failures.len(), failures.join("\n"));
}
