//! The read-only subcommands of `car`: verify (text, json, mermaid),
//! simulate, optimize, policy check / lint, permission explain, shell-match,
//! and `--help` everywhere.

use crate::cli_common;
use cli_common::{car, examples};
use serde_json::Value;

const CONFLICT: &str = r#"{"actions":[
    {"id":"left","type":"tool_call","tool":"calculate","parameters":{"expression":"1"},"expected_effects":{"mode":"a"}},
    {"id":"right","type":"tool_call","tool":"calculate","parameters":{"expression":"2"},"expected_effects":{"mode":"b"}},
    {"id":"note","type":"state_write","dependencies":["left"],"parameters":{"key":"seen","value":true}},
    {"id":"again","type":"state_write","parameters":{"key":"seen","value":false}}
]}"#;

#[test]
fn verify_text_and_exit_codes() {
    let ex = examples();
    let r = car(&ex, &["verify", "plans/deploy.json"]);
    assert_eq!(r.code, 0, "{}", r.all());
    assert!(r.stdout.contains("plans/deploy.json: valid (5 actions)"), "{}", r.stdout);
    assert!(r.stdout.contains("  0: run-tests\n  1: package\n  2: deploy"), "{}", r.stdout);
    assert!(r.stdout.contains(r#"simulated state: {"deployed.version":"1.2.0"}"#), "{}", r.stdout);

    std::fs::write(
        ex.join("plans/ghost.json"),
        r#"{"actions":[{"id":"a","type":"state_write","dependencies":["ghost"],"parameters":{"key":"k"}}]}"#,
    )
    .unwrap();
    let r = car(&ex, &["verify", "plans/ghost.json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("INVALID") && r.stdout.contains("unknown action 'ghost'"), "{}", r.stdout);

    // Parameters are checked against the built-in tools' schemas.
    std::fs::write(
        ex.join("plans/noparams.json"),
        r#"{"actions":[{"id":"w","type":"tool_call","tool":"write_file","parameters":{"path":"x"}}]}"#,
    )
    .unwrap();
    let r = car(&ex, &["verify", "plans/noparams.json", "--format", "json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert!(v["issues"].to_string().contains("content"), "{}", v["issues"]);

    // --max-actions and --state.
    // Too many actions is a warning (the spec's verify): still valid.
    let r = car(&ex, &["verify", "plans/release-notes.json", "--max-actions", "2"]);
    assert_eq!(r.code, 0, "{}", r.all());
    assert!(r.stdout.contains("excessive actions: 5 (limit 2)"), "{}", r.stdout);
    std::fs::write(ex.join("state.json"), r#"{"release.version": "0.1"}"#).unwrap();
    let r = car(&ex, &["verify", "plans/release-notes.json", "--state", "state.json", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.all());

    // --tools adds schemas: an unknown tool with a schema is checked.
    std::fs::write(
        ex.join("tools.json"),
        r#"[{"name":"deploy_service","parameters":{"type":"object","properties":{"service":{"type":"string"}},"required":["service"]}}]"#,
    )
    .unwrap();
    std::fs::write(
        ex.join("plans/svc.json"),
        r#"{"actions":[{"id":"d","type":"tool_call","tool":"deploy_service","parameters":{}}]}"#,
    )
    .unwrap();
    let r = car(&ex, &["verify", "plans/svc.json", "--tools", "tools.json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("service"), "{}", r.stdout);
    std::fs::write(ex.join("tools.json"), r#"[{"nam":"x"}]"#).unwrap();
    let r = car(&ex, &["verify", "plans/svc.json", "--tools", "tools.json"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("tools.json"), "{}", r.stderr);

    // Bad input: the file and the JSON path.
    std::fs::write(ex.join("plans/bad.json"), r#"{"actions":[{"type":"state_write","max_retries":-1}]}"#).unwrap();
    let r = car(&ex, &["verify", "plans/bad.json"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("plans/bad.json: actions[0].max_retries"), "{}", r.stderr);
}

#[test]
fn verify_mermaid_draws_levels_edges_and_conflicts() {
    let ex = examples();
    std::fs::write(ex.join("plans/conflict.json"), CONFLICT).unwrap();
    let r = car(&ex, &["verify", "plans/conflict.json", "--format", "mermaid"]);
    assert_eq!(r.code, 0, "{}", r.all());
    let m = r.stdout;
    assert!(m.starts_with("flowchart TD\n"), "{m}");
    assert!(m.contains("  subgraph L0[\"level 0\"]\n    a0[\"left<br/>tool_call calculate\"]\n    a1[\"right<br/>tool_call calculate\"]\n"), "{m}");
    assert!(m.contains("subgraph L1[\"level 1\"]"), "{m}");
    assert!(m.contains("  a0 --> a2\n"), "declared dependency: {m}");
    assert!(m.contains("  a2 -- state --> a3\n"), "two writes of one key are ordered: {m}");
    assert!(m.contains("  a0 -. \"conflict: mode\" .- a1\n"), "{m}");

    let r = car(&ex, &["verify", "plans/deploy.json", "--format", "mermaid"]);
    assert!(r.stdout.contains("a1[\"package<br/>tool_call write_file\"]"), "{}", r.stdout);
    assert!(r.stdout.contains("a3 --> a4"), "{}", r.stdout);

    // An action with an error is marked.
    std::fs::write(
        ex.join("plans/ghost.json"),
        r#"{"actions":[{"id":"a","type":"state_write","dependencies":["ghost"],"parameters":{"key":"k"}}]}"#,
    )
    .unwrap();
    let r = car(&ex, &["verify", "plans/ghost.json", "--format", "mermaid"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("missing_a0[\"missing: ghost\"] -.-> a0"), "{}", r.stdout);
    assert!(r.stdout.contains("class a0 error"), "{}", r.stdout);
}

#[test]
fn simulate_and_optimize() {
    let ex = examples();
    std::fs::write(ex.join("state.json"), r#"{"team": "web"}"#).unwrap();
    let r = car(&ex, &["simulate", "plans/deploy.json", "--state", "state.json"]);
    assert_eq!(r.code, 0, "{}", r.all());
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v, serde_json::json!({"team": "web", "deployed.version": "1.2.0"}));

    std::fs::write(
        ex.join("plans/phantom.json"),
        r#"{"actions":[{"id":"r","type":"state_read","state_dependencies":["never_written"],"parameters":{"key":"x"}}]}"#,
    )
    .unwrap();
    let r = car(&ex, &["optimize", "plans/phantom.json"]);
    assert_eq!(r.code, 0, "{}", r.all());
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["actions"][0]["id"], "r");
    assert_eq!(v["actions"][0]["state_dependencies"], serde_json::json!([]), "{v}");
    // The same input gives the same output: no made-up id or timestamp.
    assert!(v.get("id").is_none() && v.get("timestamp").is_none(), "{v}");
    assert_eq!(car(&ex, &["optimize", "plans/phantom.json"]).stdout, r.stdout);
    // An input's own id and timestamp are kept.
    std::fs::write(
        ex.join("plans/dated.json"),
        r#"{"id":"p-1","timestamp":"2026-01-02T03:04:05Z","actions":[{"id":"r","type":"state_read","parameters":{"key":"x"}}]}"#,
    )
    .unwrap();
    let v: Value = serde_json::from_str(&car(&ex, &["optimize", "plans/dated.json"]).stdout).unwrap();
    assert_eq!((v["id"].as_str(), v["timestamp"].as_str()), (Some("p-1"), Some("2026-01-02T03:04:05Z")), "{v}");
}

/// `car ... | head`: a closed pipe ends the program quietly (no panic).
#[test]
fn a_closed_stdout_pipe_ends_quietly() {
    let ex = examples();
    // Output far beyond a pipe's buffer, so the writer meets the closed pipe.
    let actions: Vec<Value> = (0..2000)
        .map(|i| serde_json::json!({"id": format!("w{i}"), "type": "state_write", "parameters": {"key": format!("k{i}"), "value": i}}))
        .collect();
    let plan = ex.join("plans/big.json");
    std::fs::write(&plan, serde_json::json!({"actions": actions}).to_string()).unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("'{}' optimize '{}' | head -c 1 >/dev/null", env!("CARGO_BIN_EXE_car"), plan.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
}

#[test]
fn policy_check_and_lint() {
    let ex = examples();
    let r = car(&ex, &["policy", "check", "plans/inspect-config.json", "--dir", ".car/policies"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("DENY  read-secrets  deny_tool_param_matching:read_file.path"), "{}", r.stdout);
    assert!(r.stdout.contains("1 of 4 actions would be denied"), "{}", r.stdout);
    // Without --dir: discovered walking up from the current directory.
    let r = cli_common::car_in(
        &ex.join("workspace/config"),
        &["policy", "check", "../../plans/release-notes.json", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.all());
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["rule_count"], 4);
    assert_eq!(v["denied_actions"], serde_json::json!([]));

    let r = car(&ex, &["policy", "lint", ".car/policies"]);
    assert_eq!(r.code, 0, "{}", r.all());
    assert!(r.stdout.contains("safety.toml: 4 rules"), "{}", r.stdout);
    std::fs::write(
        ex.join(".car/policies/warn.toml"),
        "[[rate_limit_tool]]\ntool = \"x\"\nmax_calls = 0\ninterval_secs = 1\n",
    )
    .unwrap();
    let r = car(&ex, &["policy", "lint", ".car/policies"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("warning: ") && r.stdout.contains("rate_limit_tool[0].max_calls"), "{}", r.stdout);
    let r = car(&ex, &["policy", "lint", "nowhere"]);
    assert_eq!(r.code, 2);
}

#[test]
fn permission_explain() {
    let ex = examples();
    let r = car(
        &ex,
        &[
            "permission",
            "explain",
            "--tool",
            "shell",
            "--input",
            r#"{"command":"rm -rf build"}"#,
            "--root",
            "workspace",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.all());
    assert!(r.stdout.contains("verdict:    deny"), "{}", r.stdout);
    assert!(r.stdout.contains("decided by: deny-rule"), "{}", r.stdout);
    assert!(r.stdout.contains(r#"rule:       {"tool":"shell","argv":"rm -rf **"}"#), "{}", r.stdout);

    let explain = |tool: &str, input: &str, extra: &[&str]| -> Value {
        let mut args = vec!["permission", "explain", "--tool", tool, "--input", input, "--root", "workspace", "--json"];
        args.extend_from_slice(extra);
        let r = car(&ex, &args);
        assert_eq!(r.code, 0, "{}", r.all());
        serde_json::from_str(&r.stdout).unwrap()
    };
    let v = explain("shell", r#"{"command":"sh scripts/test.sh"}"#, &[]);
    assert_eq!((v["verdict"].as_str(), v["decided_by"].as_str()), (Some("allow"), Some("shell-allow")), "{v}");
    // An allowed segment next to an unknown one asks (the preset's execute rule).
    let v = explain("shell", r#"{"command":"sh scripts/test.sh && make"}"#, &[]);
    assert_eq!(v["verdict"], "ask", "{v}");
    let v = explain("shell", r#"{"command":"git push origin main"}"#, &[]);
    assert_eq!((v["verdict"].as_str(), v["decided_by"].as_str()), (Some("ask"), Some("ask-rule")), "{v}");
    let v = explain("write_file", r#"{"path":"a","content":"b"}"#, &[]);
    assert_eq!(v["verdict"], "allow");
    let v = explain("write_file", r#"{"path":"a","content":"b"}"#, &["--preset", "strict"]);
    assert_eq!(v["verdict"], "ask");
    let v = explain("edit_file", r#"{"path":"a","old_text":"b","new_text":"c"}"#, &["--preset", "open"]);
    assert_eq!((v["verdict"].as_str(), v["decided_by"].as_str()), (Some("ask"), Some("ask-rule")), "{v}");
    let v = explain("deploy_service", "{}", &["--preset", "open"]);
    assert_eq!(v["verdict"], "allow");

    let r = car(&ex, &["permission", "explain", "--tool", "shell", "--input", "{nope"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--input"), "{}", r.stderr);
}

#[test]
fn shell_match() {
    let ex = examples();
    let m = |args: &[&str]| {
        let mut all = vec!["shell-match"];
        all.extend_from_slice(args);
        let r = car(&ex, &all);
        assert_eq!(r.code, 0, "{}", r.all());
        r.stdout.trim().to_string()
    };
    assert_eq!(m(&["git status", "--allow", "git status"]), "allow");
    assert_eq!(m(&["git status && git push", "--allow", "git status"]), "ask");
    assert_eq!(m(&["cd build && rm -rf *", "--allow", "cd *", "--deny", "rm -rf **"]), "deny");
    assert_eq!(m(&["/bin/rm -rf x", "--allow", "**", "--deny", "rm -rf **"]), "deny");
    assert_eq!(m(&["cargo test", "--allow", "cargo test", "--ask", "cargo **"]), "ask");
    let r = car(&ex, &["shell-match", "ls", "--allow", "ls && rm"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("ls && rm"), "{}", r.stderr);
}

#[test]
fn every_subcommand_has_help_with_an_example() {
    let ex = examples();
    for sub in [
        vec![],
        vec!["run"],
        vec!["verify"],
        vec!["simulate"],
        vec!["optimize"],
        vec!["policy"],
        vec!["policy", "check"],
        vec!["policy", "lint"],
        vec!["permission"],
        vec!["permission", "explain"],
        vec!["shell-match"],
    ] {
        let mut args = sub.clone();
        args.push("--help");
        let r = car(&ex, &args);
        assert_eq!(r.code, 0, "{sub:?}: {}", r.all());
        assert!(r.stdout.contains("Example"), "{sub:?} has no example: {}", r.stdout);
        assert!(r.stdout.contains("car "), "{sub:?}: {}", r.stdout);
    }
}

/// One output flag everywhere: `--format json` prints what `--json` prints,
/// for every command that has a JSON form; both at once is bad input.
#[test]
fn format_json_and_json_are_the_same_everywhere() {
    let ex = examples();
    let commands: [&[&str]; 6] = [
        &["verify", "plans/deploy.json"],
        &["policy", "check", "plans/inspect-config.json", "--dir", ".car/policies"],
        &["policy", "lint", ".car/policies"],
        &["shell-match", "rm -rf x", "--deny", "rm **"],
        &["permission", "explain", "--tool", "shell", "--input", r#"{"command":"ls"}"#, "--root", "workspace"],
        &["sandbox", "check"],
    ];
    for args in commands {
        let with = |extra: &[&str]| {
            let mut v = args.to_vec();
            v.extend_from_slice(extra);
            car(&ex, &v)
        };
        let (a, b) = (with(&["--json"]), with(&["--format", "json"]));
        assert_eq!(a.code, b.code, "{args:?}");
        let (va, vb): (Value, Value) = (
            serde_json::from_str(&a.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", a.all())),
            serde_json::from_str(&b.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", b.all())),
        );
        if args[0] != "sandbox" {
            assert_eq!(va, vb, "{args:?}");
        }
        assert_eq!(with(&["--json", "--format", "text"]).code, 2, "{args:?}");
    }
}

/// `car completions bash` is a script bash loads, and it completes the
/// subcommands; `car man` is a roff page naming every subcommand.
#[test]
fn completions_and_man_page() {
    let ex = examples();
    let r = car(&ex, &["completions", "bash"]);
    assert_eq!(r.code, 0, "{}", r.all());
    let script = ex.join("car.bash");
    std::fs::write(&script, &r.stdout).unwrap();
    // Load it and ask for the completions of `car p`.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}'; COMP_WORDS=(car p); COMP_CWORD=1; _car car p car; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        ))
        .output()
        .unwrap();
    let words = String::from_utf8_lossy(&out.stdout);
    for w in ["plan", "policy", "permission"] {
        assert!(words.lines().any(|l| l == w), "{w}: {words} {out:?}");
    }
    assert!(!words.lines().any(|l| l == "run"), "{words}");
    for shell in ["zsh", "fish"] {
        let r = car(&ex, &["completions", shell]);
        assert!(r.code == 0 && r.stdout.contains("plan"), "{shell}: {}", r.all());
    }
    assert_eq!(car(&ex, &["completions", "nosh"]).code, 2);
    let r = car(&ex, &["man"]);
    assert_eq!(r.code, 0, "{}", r.all());
    assert!(r.stdout.starts_with(".ie") || r.stdout.contains(".TH car 1"), "{}", &r.stdout[..200.min(r.stdout.len())]);
    for sub in ["run", "plan", "verify", "completions"] {
        assert!(r.stdout.contains(sub), "{sub}");
    }
}
