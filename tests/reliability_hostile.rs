//! Hostile inputs: each is answered with a clear error or handled, and none
//! crashes the process. No test asserts a duration; each is bounded by a
//! generous watchdog that only fires on a hang (see `bounded`).
//!
//! Limits referred to here are listed in docs/limits.md.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use car_runtime::api;
use car_runtime::engine::{ExecOptions, FnExecutor, Runtime, RuntimeOptions, ToolCall};
use car_runtime::ir::{ActionStatus, CostBudget, ToolFailure, parse_proposal};
use car_runtime::permission::Verdict;
use car_runtime::permission::shell::ShellRules;
use car_runtime::policy::parse_policy_text;
use car_runtime::verify::{VerifyOptions, verify};
use serde_json::{Value, json};

/// Runs `f` on its own thread (with a large stack) and fails the test if it
/// has not finished after `secs`: a hang detector, not a timing assertion.
fn bounded<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish within {secs} s: a hang"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the worker panicked"),
    }
}

fn nested_arrays(depth: usize) -> String {
    let mut s = String::with_capacity(depth * 2);
    s.extend(std::iter::repeat_n('[', depth));
    s.extend(std::iter::repeat_n(']', depth));
    s
}

fn proposal_with_params(params: &str) -> String {
    format!(r#"{{"id":"p","actions":[{{"id":"a","type":"tool_call","tool":"t","parameters":{{"deep":{params}}}}}]}}"#)
}

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

// ------------------------------------------------------------------ nesting

#[test]
fn deep_nesting_in_parameters_is_a_clear_error() {
    bounded(120, || {
        let text = proposal_with_params(&nested_arrays(100_000));
        let e = parse_proposal(&text).unwrap_err();
        assert_eq!(e.code(), "invalid_json", "{e}");
        assert!(e.to_string().contains("recursion limit"), "{e}");

        // The facade's entry points answer the same way, as text or as a
        // string argument.
        let e = api::parse_proposal(&text).unwrap_err();
        assert!(e.to_string().contains("recursion limit"), "{e}");
        let e = api::call("normalize_proposal", &json!({ "proposal": text })).unwrap_err();
        assert!(e.to_string().contains("recursion limit"), "{e}");
        let e = api::call("verify", &json!({ "proposal": text })).unwrap_err();
        assert!(e.to_string().contains("recursion limit"), "{e}");

        // Objects nest the same way.
        let obj = format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000));
        assert!(parse_proposal(&proposal_with_params(&obj)).is_err());
    });
}

#[test]
fn nesting_within_the_limit_parses_verifies_and_executes() {
    bounded(120, || {
        // serde_json's limit is 128 levels of the whole document; the
        // parameters sit 4 levels down.
        let text = proposal_with_params(&nested_arrays(120));
        let p = parse_proposal(&text).unwrap();
        let v = verify(&p, &VerifyOptions { tool_names: Some(vec!["t".into()]), ..VerifyOptions::default() });
        assert!(v.valid, "{:?}", v.issues);
        let rt = Runtime::default();
        rt.register_tool_name("t").unwrap();
        let ex = Arc::new(FnExecutor(|c: ToolCall| Ok(c.params["deep"].clone())));
        let r = tokio().block_on(rt.execute(p, ex, ExecOptions::default())).unwrap();
        assert_eq!(r.results[0].status, ActionStatus::Succeeded);
        // The event log renders the deep value (digest and JSON form).
        for e in rt.events().events() {
            let _ = e.to_json().to_string();
        }
    });
}

#[cfg(feature = "server")]
#[test]
fn deep_nesting_in_a_frame_is_a_parse_error() {
    use car_runtime::server::rpc::{Frame, PARSE_ERROR, classify};
    bounded(120, || {
        let frame = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"verify","params":{}}}"#, nested_arrays(100_000));
        match classify(&frame) {
            Frame::Invalid { error, .. } => {
                assert_eq!(error.code, PARSE_ERROR);
                assert!(error.message.contains("recursion limit"), "{}", error.message);
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
        // Invalid UTF-8 cannot reach `classify` (it takes &str); its lossy
        // form is a parse error, not a panic.
        let lossy = String::from_utf8_lossy(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}");
        assert!(matches!(classify(&lossy), Frame::Call { .. }));
        let lossy = String::from_utf8_lossy(b"\xc3\x28\xa0\xa1");
        assert!(matches!(classify(&lossy), Frame::Invalid { .. }));
    });
}

// ------------------------------------------------------------------ size

#[test]
fn huge_strings_are_handled() {
    bounded(300, || {
        let big = "x".repeat(32 << 20);
        let text = format!(
            r#"{{"id":"p","actions":[{{"id":"a","type":"tool_call","tool":"t","parameters":{{"s":"{big}"}},"metadata":{{"m":"{big}"}}}}]}}"#
        );
        let p = parse_proposal(&text).unwrap();
        let v = verify(&p, &VerifyOptions { tool_names: Some(vec!["t".into()]), ..VerifyOptions::default() });
        assert!(v.valid, "{:?}", v.issues);
        let rt = Runtime::default();
        rt.register_tool_name("t").unwrap();
        let ex = Arc::new(FnExecutor(|c: ToolCall| Ok(json!(c.params["s"].as_str().map(str::len)))));
        let r = tokio().block_on(rt.execute(p, ex, ExecOptions::default())).unwrap();
        assert_eq!(r.results[0].output, Some(json!(32 << 20)));

        // A huge action id and tool name are data, not a crash.
        let text = format!(r#"{{"id":"{big}","actions":[{{"id":"{big}","type":"tool_call","tool":"{big}"}}]}}"#);
        let p = parse_proposal(&text).unwrap();
        let v = verify(&p, &VerifyOptions { tool_names: Some(vec!["t".into()]), ..VerifyOptions::default() });
        assert!(!v.valid, "an unknown (huge) tool name is reported");
    });
}

#[test]
fn huge_shell_commands_are_answered() {
    bounded(300, || {
        let rules = ShellRules::new(&["echo **"], &[], &["rm **"]).unwrap();
        let long = format!("echo {}", "a ".repeat(1 << 20));
        assert_eq!(rules.check(&long), Verdict::Allow);
        let long_deny = format!("{long}; rm -rf /");
        assert_eq!(rules.check(&long_deny), Verdict::Deny);
        // Deeply nested substitutions past the lexer's depth bound are `ask`,
        // never a stack overflow.
        let nested = format!("{}rm x{}", "echo $(".repeat(100_000), ")".repeat(100_000));
        assert_ne!(rules.check(&nested), Verdict::Allow);
        let subshells = format!("{}ls{}", "(".repeat(100_000), ")".repeat(100_000));
        assert_ne!(rules.check(&subshells), Verdict::Allow);
        let quotes = "'".repeat(1 << 20);
        assert_ne!(rules.check(&quotes), Verdict::Allow);
    });
}

// ------------------------------------------------------------------ count

fn many_actions(n: usize) -> String {
    let mut s = String::with_capacity(n * 64 + 32);
    s.push_str(r#"{"id":"p","actions":["#);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(r#"{{"id":"a{i}","type":"state_read","parameters":{{"key":"k"}}}}"#));
    }
    s.push_str("]}");
    s
}

#[test]
fn a_million_actions_are_refused_by_the_limits() {
    bounded(600, || {
        let p = parse_proposal(&many_actions(1_000_000)).unwrap();
        assert_eq!(p.actions.len(), 1_000_000);
        // verify: the action count limit (default 30, `max_actions`) reports it
        // (a warning, as in the original runtime: the hard limit is the
        // engine's cost budget).
        let v = verify(&p, &VerifyOptions::default());
        assert!(
            v.issues.iter().any(|i| i.message.contains("excessive actions: 1000000 (limit 30)")),
            "{:?}",
            &v.issues[..v.issues.len().min(3)]
        );
        // The engine's cost budget refuses the whole proposal before anything runs.
        let rt = Runtime::new(RuntimeOptions::default().cost_budget(CostBudget::default().with_max_actions(1000)));
        let ex = Arc::new(FnExecutor(|_c: ToolCall| -> Result<Value, ToolFailure> { unreachable!() }));
        let r = tokio().block_on(rt.execute(p, ex, ExecOptions::default())).unwrap();
        assert_eq!(r.results.len(), 1_000_000);
        assert_eq!(r.cost.actions_executed, 0);
        assert_eq!(r.cost.actions_rejected + r.cost.actions_skipped, 1_000_000);
    });
}

#[test]
fn a_hundred_thousand_actions_execute_without_a_budget() {
    bounded(600, || {
        let p = parse_proposal(&many_actions(100_000)).unwrap();
        let rt = Runtime::default();
        let ex = Arc::new(FnExecutor(|_c: ToolCall| -> Result<Value, ToolFailure> { unreachable!() }));
        let r = tokio().block_on(rt.execute(p, ex, ExecOptions::default())).unwrap();
        assert_eq!(r.cost.actions_executed, 100_000);
        assert!(r.results.iter().all(|x| x.status == ActionStatus::Succeeded));
    });
}

// ------------------------------------------------------------------ shape

#[test]
fn duplicate_action_ids_are_reported_by_verify_and_refused_by_the_engine() {
    bounded(120, || {
        let text = json!({"id": "p", "actions": [
            {"id": "a", "type": "state_write", "parameters": {"key": "k", "value": 1}},
            {"id": "a", "type": "state_write", "parameters": {"key": "k", "value": 2}},
            {"id": "b", "type": "state_read", "parameters": {"key": "k"}, "dependencies": ["a"]},
            {"id": "b", "type": "state_read", "parameters": {"key": "k"}},
            {"id": "a", "type": "state_read", "parameters": {"key": "k"}},
        ]})
        .to_string();
        // The spec asks ids to be unique within a proposal. Verify reports each
        // repeated id once (an error, so the proposal is not valid) and still
        // builds the graph by position: a dependency on a repeated id names
        // its first action.
        let p = parse_proposal(&text).unwrap();
        let v = verify(&p, &VerifyOptions::default());
        assert!(!v.valid);
        let dup: Vec<(&str, &str)> = v
            .issues
            .iter()
            .filter(|i| i.message.starts_with("action id"))
            .map(|i| (i.action_id.as_str(), i.message.as_str()))
            .collect();
        assert_eq!(
            dup,
            vec![
                ("a", "action id 'a' is used by 3 actions; ids must be unique within a proposal"),
                ("b", "action id 'b' is used by 2 actions; ids must be unique within a proposal"),
            ]
        );
        assert_eq!(v.execution_levels, vec![vec!["a", "b", "a"], vec!["a", "b"]]);
        let check = v.evidence.checks.iter().find(|c| c.name == "unique_action_ids").unwrap();
        assert_eq!(check.findings, 2);

        // The engine refuses the proposal before anything runs or is logged.
        let rt = Runtime::default();
        let ex = Arc::new(FnExecutor(|_c: ToolCall| -> Result<Value, ToolFailure> { unreachable!() }));
        let events = rt.events().count();
        let e = tokio().block_on(rt.execute(p, ex, ExecOptions::default())).unwrap_err();
        assert_eq!(e.code(), "invalid_document");
        assert_eq!(
            e.to_string(),
            "actions[1].id: duplicate action id 'a' (also actions[0].id); ids must be unique within a proposal"
        );
        assert_eq!(rt.events().count(), events);
        assert!(rt.state().snapshot(&car_runtime::state::Scope::global()).is_empty());
    });
}

#[test]
fn cycles_are_rejected_before_anything_runs() {
    bounded(120, || {
        // A long cycle through 100,000 actions, plus a self-loop.
        let n = 100_000;
        let actions: Vec<Value> = (0..n)
            .map(|i| {
                json!({"id": format!("a{i}"), "type": "state_write", "parameters": {"key": format!("k{i}"), "value": i},
                       "dependencies": [format!("a{}", (i + 1) % n)]})
            })
            .chain(std::iter::once(json!({"id": "self", "type": "state_read", "parameters": {"key": "k"},
                                          "dependencies": ["self"], "failure_behavior": "skip"})))
            .collect();
        let p = parse_proposal(&json!({"id": "p", "actions": actions}).to_string()).unwrap();
        let v = verify(&p, &VerifyOptions { max_actions: Some(1_000_000), ..VerifyOptions::default() });
        assert!(!v.valid);
        assert!(v.issues.iter().any(|i| i.message.to_lowercase().contains("cycle")));
        let rt = Runtime::default();
        let ex = Arc::new(FnExecutor(|_c: ToolCall| -> Result<Value, ToolFailure> { unreachable!() }));
        let r = tokio().block_on(rt.execute(p, ex, ExecOptions::default())).unwrap();
        assert_eq!(r.cost.actions_executed, 0);
        assert!(rt.state().keys(&car_runtime::state::Scope::global()).is_empty());
    });
}

#[test]
fn nan_like_numbers_are_clear_errors_or_plain_data() {
    bounded(120, || {
        for bad in ["NaN", "Infinity", "-Infinity", "nan", "1e999", "-1e999", "0x10", "01", "+1", ".5"] {
            let text = proposal_with_params(bad);
            let e = parse_proposal(&text).unwrap_err();
            assert_eq!(e.code(), "invalid_json", "{bad}: {e}");
        }
        // Extreme but valid numbers are data: verify, digest and compare them.
        for ok in ["1e308", "-1e308", "5e-324", "1e-400", "-0", "0.0", "18446744073709551615", "-9223372036854775808"] {
            let text = proposal_with_params(ok);
            let p = parse_proposal(&text).unwrap_or_else(|e| panic!("{ok}: {e}"));
            let _ = verify(&p, &VerifyOptions::default());
            let r = api::call(
                "evaluate_precondition",
                &json!({"precondition": {"key": "n", "operator": "gt", "value": 1}, "state": format!(r#"{{"n":{ok}}}"#)}),
            );
            assert!(r.is_ok(), "{ok}: {r:?}");
        }
        // In a timeout or retry count, a float or huge number is a shape error.
        for (field, v) in
            [("timeout_ms", "1e308"), ("max_retries", "1e3"), ("timeout_ms", "-1"), ("max_retries", "4294967296")]
        {
            let text = format!(r#"{{"id":"p","actions":[{{"id":"a","type":"state_read","{field}":{v}}}]}}"#);
            let e = parse_proposal(&text).unwrap_err();
            assert!(e.to_string().contains(field), "{field}={v}: {e}");
        }
        // TOML has nan and inf; a policy file's numbers must be finite.
        for bad in ["nan", "inf", "-inf", "-1.0"] {
            let text = format!("[[rate_limit_tool]]\ntool = \"t\"\nmax_calls = 1\ninterval_secs = {bad}\n");
            assert!(parse_policy_text(&text, "f.toml").is_err(), "interval_secs = {bad} was accepted");
        }
    });
}

// ------------------------------------------------------------------ policy files

#[test]
fn backtracking_patterns_in_policy_files_are_bounded() {
    bounded(300, || {
        // The classic catastrophic patterns: the regex engine is linear-time,
        // so a long near-miss input is answered.
        let text = r#"
[[deny_tool_param_matching]]
tool = "t"
param = "s"
matches = "^(a+)+$"

[[deny_tool_param_matching]]
tool = "t"
param = "s"
matches = "(a|aa)*b"

[[deny_tool_param_matching]]
tool = "t"
param = "s"
matches = "(.*a){20}"
"#;
        let set = parse_policy_text(text, "evil.toml").unwrap();
        let rules = set.lower();
        let input = format!("{}!", "a".repeat(200_000));
        let p = parse_proposal(
            &json!({"id": "p", "actions": [{"id": "a", "type": "tool_call", "tool": "t", "parameters": {"s": input}}]})
                .to_string(),
        )
        .unwrap();
        let state = serde_json::Map::new();
        let denials: Vec<String> = rules.iter().filter_map(|r| (r.rule)(&p.actions[0], &state)).collect();
        // `(.*a){20}` matches; the two anchored ones do not.
        assert_eq!(denials.len(), 1, "{denials:?}");

        // A pattern whose compiled form is enormous exceeds the compiled-size
        // bound: the rule fails closed (denies every call to its tool).
        let huge = "[[deny_tool_param_matching]]\ntool = \"t\"\nparam = \"s\"\nmatches = \"(\\\\w{500}){500}\"\n";
        let set = parse_policy_text(huge, "huge.toml").unwrap();
        assert!(car_runtime::policy::file::compile_pattern(&set.deny_tool_param_matching[0].matches).is_err());
        let rules = set.lower();
        let harmless =
            parse_proposal(r#"{"id":"p","actions":[{"id":"a","type":"tool_call","tool":"t","parameters":{"s":"x"}}]}"#)
                .unwrap();
        let denial = (rules[0].rule)(&harmless.actions[0], &state).expect("fails closed");
        assert!(denial.contains("does not compile"), "{denial}");
    });
}

#[test]
fn ten_megabyte_policy_files_load_or_fail_clearly() {
    bounded(600, || {
        // 10 MB of valid rules.
        let mut text = String::from("deny_tool = [\n");
        let mut i = 0;
        while text.len() < 10 << 20 {
            text.push_str(&format!("  \"tool-{i:08}-padding-padding-padding\",\n"));
            i += 1;
        }
        text.push_str("]\n");
        let set = parse_policy_text(&text, "big.toml").unwrap();
        assert_eq!(set.deny_tool.len(), i);

        // 10 MB of one string value.
        let text = format!("deny_keyword = [\"{}\"]\n", "k".repeat(10 << 20));
        let set = parse_policy_text(&text, "big.toml").unwrap();
        assert_eq!(set.deny_keyword[0].len(), 10 << 20);

        // 10 MB of garbage, and 10 MB of nesting: clear errors naming the file.
        let garbage = "=[{\"".repeat((10 << 20) / 4);
        let e = parse_policy_text(&garbage, "garbage.toml").unwrap_err();
        assert!(e.to_string().contains("garbage.toml"), "{e}");
        let nested = format!("deny_tool = {}", nested_arrays(5 << 20));
        let e = parse_policy_text(&nested, "nested.toml").unwrap_err();
        assert!(e.to_string().contains("nested.toml"), "{e}");
    });
}
