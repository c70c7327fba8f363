//! `.car/policies/*.toml`: every example of the spec loads and behaves as
//! described, loading is strict and names the file and key, discovery walks
//! up, and no violation reason echoes the offending value.

use std::path::{Path, PathBuf};

use car_runtime::ir::Action;
use car_runtime::policy::{PolicyEngine, PolicyViolation, discover_policy_dir};
use serde_json::{Map, Value, json};

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let p = std::env::temp_dir().join(format!("car-policy-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn engine(toml: &str) -> PolicyEngine {
    let dir = TempDir::new();
    dir.write("rules.toml", toml);
    let mut e = PolicyEngine::new();
    e.load_policy_dir(dir.path()).unwrap();
    e
}

fn call(tool: &str, params: Value) -> Action {
    let mut a = Action::tool_call(tool);
    a.id = "a1".into();
    a.parameters = params.as_object().cloned().unwrap_or_default().into();
    a
}

fn check(e: &PolicyEngine, tool: &str, params: Value) -> Vec<PolicyViolation> {
    e.check(&call(tool, params), &Map::new())
}

fn names(v: &[PolicyViolation]) -> Vec<&str> {
    v.iter().map(|v| v.policy_name.as_str()).collect()
}

const SECURITY: &str = r#"
# .car/policies/security.toml
deny_tool    = ["deploy", "rm"]
deny_keyword = ["DROP TABLE", "rm -rf /"]

[[deny_tool_param]]
tool     = "http_request"
param    = "url"
contains = "169.254.169.254"
"#;

#[test]
fn security_example() {
    let e = engine(SECURITY);
    assert_eq!(e.len(), 5);
    let listed: Vec<_> = e.list().into_iter().map(|p| p.name).collect();
    assert_eq!(
        listed,
        [
            "deny_tool:deploy",
            "deny_tool:rm",
            "deny_keyword:DROP TABLE",
            "deny_keyword:rm -rf /",
            "deny_tool_param:http_request.url"
        ]
    );
    assert_eq!(names(&check(&e, "deploy", json!({}))), ["deny_tool:deploy"]);
    assert_eq!(names(&check(&e, "rm", json!({"path": "x"}))), ["deny_tool:rm"]);
    assert!(check(&e, "deployer", json!({})).is_empty());
    // Every violation is collected.
    let v = check(&e, "rm", json!({"cmd": "sudo rm -rf / && DROP TABLE x"}));
    assert_eq!(names(&v), ["deny_tool:rm", "deny_keyword:DROP TABLE", "deny_keyword:rm -rf /"]);
    let v = check(&e, "http_request", json!({"url": "http://169.254.169.254/latest/meta-data"}));
    assert_eq!(names(&v), ["deny_tool_param:http_request.url"]);
    assert!(check(&e, "http_request", json!({"url": "https://example.com"})).is_empty());
    assert!(check(&e, "http_request", json!({})).is_empty(), "an absent parameter never violates");
}

#[test]
fn deny_keyword_matches_any_string_coerced_parameter_of_any_action() {
    let e = engine(r#"deny_keyword = ["DROP TABLE", "rm -rf /"]"#);
    assert_eq!(check(&e, "anything", json!({"q": "x; DROP TABLE users"})).len(), 1);
    assert!(check(&e, "anything", json!({"q": "drop table users"})).is_empty(), "case-sensitive");
    // Non-string values are matched on their JSON text.
    assert_eq!(check(&e, "anything", json!({"nested": {"sql": ["DROP TABLE t"]}})).len(), 1);
    let mut w = Action::new(car_runtime::ir::ActionType::StateWrite);
    w.parameters.insert("value".into(), json!("rm -rf /"));
    assert_eq!(e.check(&w, &Map::new()).len(), 1, "any action, not just tool calls");
    assert!(check(&e, "DROP TABLE", json!({})).is_empty(), "parameters only, not the tool name");
}

#[test]
fn deny_tool_param_equals_contains_both_and_presence() {
    let e = engine(
        r#"
[[deny_tool_param]]
tool     = "http_request"
param    = "url"
contains = "169.254.169.254"   # block cloud metadata exfiltration

[[deny_tool_param]]
tool   = "shell"
param  = "command"
equals = "shutdown"
"#,
    );
    assert_eq!(names(&check(&e, "shell", json!({"command": "shutdown"}))), ["deny_tool_param:shell.command"]);
    assert!(check(&e, "shell", json!({"command": "shutdown now"})).is_empty(), "equals is exact");
    assert!(check(&e, "other", json!({"command": "shutdown"})).is_empty());

    let e = engine("[[deny_tool_param]]\ntool = \"t\"\nparam = \"p\"\nequals = 5\n");
    assert_eq!(check(&e, "t", json!({"p": 5})).len(), 1);
    assert_eq!(check(&e, "t", json!({"p": 5.0})).len(), 1, "JSON value equality");
    assert!(check(&e, "t", json!({"p": "5"})).is_empty(), "a string is not the number");

    let e = engine("[[deny_tool_param]]\ntool = \"t\"\nparam = \"p\"\nequals = \"abc\"\ncontains = \"b\"\n");
    assert_eq!(check(&e, "t", json!({"p": "abc"})).len(), 1);
    assert!(check(&e, "t", json!({"p": "xbx"})).is_empty(), "both must hold");

    let e = engine("[[deny_tool_param]]\ntool = \"t\"\nparam = \"force\"\n");
    assert_eq!(check(&e, "t", json!({"force": false})).len(), 1, "presence deny");
    assert_eq!(check(&e, "t", json!({"force": null})).len(), 1, "present even when null");
    assert!(check(&e, "t", json!({})).is_empty());

    let e = engine("[[deny_tool_param]]\ntool = \"t\"\nparam = \"p\"\ncontains = \"42\"\n");
    assert_eq!(check(&e, "t", json!({"p": {"n": 1421}})).len(), 1, "string-coerced value");
}

#[test]
fn allow_tool_param_fails_closed_three_ways() {
    let e = engine(
        r#"
[[allow_tool_param]]
tool  = "deploy"
param = "target"
allow = ["staging", "preview"]   # any other target — or none at all — is denied
"#,
    );
    assert!(check(&e, "deploy", json!({"target": "staging"})).is_empty());
    assert!(check(&e, "deploy", json!({"target": "preview"})).is_empty());
    assert_eq!(names(&check(&e, "deploy", json!({"target": "prod"}))), ["allow_tool_param:deploy.target"]);
    assert_eq!(check(&e, "deploy", json!({"target": "Staging"})).len(), 1, "case-sensitive");
    assert_eq!(check(&e, "deploy", json!({"target": "staging "})).len(), 1, "exact");
    assert_eq!(check(&e, "deploy", json!({})).len(), 1, "absent parameter is denied");
    assert!(check(&e, "build", json!({})).is_empty(), "other tools untouched");

    let e = engine("[[allow_tool_param]]\ntool = \"deploy\"\nparam = \"target\"\n");
    assert_eq!(check(&e, "deploy", json!({"target": "staging"})).len(), 1, "empty allow denies every call");
    let e = engine("[[allow_tool_param]]\ntool = \"deploy\"\nparam = \"target\"\nallow = []\n");
    assert_eq!(check(&e, "deploy", json!({"target": ""})).len(), 1);
}

#[test]
fn deny_tool_param_matching_examples() {
    let e = engine(
        r#"
[[deny_tool_param_matching]]
tool    = "http_request"
param   = "body"
matches = "sk-[A-Za-z0-9]{20,}"   # never let an API-key-shaped string leave in a body

[[deny_tool_param_matching]]
tool    = "docker.rm"
param   = "name"
matches = "^parslee-"
negate  = true                     # deny unless the name has the trusted prefix
"#,
    );
    let secret = "sk-abcdefghijklmnopqrstuvwxyz0123";
    let v = check(&e, "http_request", json!({"body": format!("{{\"key\": \"{secret}\"}}")}));
    assert_eq!(names(&v), ["deny_tool_param_matching:http_request.body"]);
    assert!(!v[0].reason.contains(secret) && !v[0].reason.contains("sk-"), "{}", v[0].reason);
    assert!(check(&e, "http_request", json!({"body": "sk-short"})).is_empty());
    assert!(check(&e, "http_request", json!({})).is_empty(), "absent does not deny by default");

    assert!(check(&e, "docker.rm", json!({"name": "parslee-web"})).is_empty());
    assert_eq!(
        names(&check(&e, "docker.rm", json!({"name": "web-parslee-1"}))),
        ["deny_tool_param_matching:docker.rm.name"]
    );
    assert_eq!(check(&e, "docker.rm", json!({})).len(), 1, "negate: absence denies");
}

#[test]
fn uncompilable_pattern_denies_every_call_to_its_tool() {
    let e = engine("[[deny_tool_param_matching]]\ntool = \"t\"\nparam = \"p\"\nmatches = \"(unclosed\"\n");
    assert_eq!(check(&e, "t", json!({})).len(), 1);
    assert_eq!(check(&e, "t", json!({"p": "anything"})).len(), 1);
    assert!(check(&e, "u", json!({"p": "anything"})).is_empty());
}

#[test]
fn rate_limit_tool_example() {
    let e = engine(
        r#"
[[rate_limit_tool]]
tool          = "http_request"
max_calls     = 10
interval_secs = 60.0
"#,
    );
    for i in 0..10 {
        assert!(check(&e, "http_request", json!({})).is_empty(), "call {i}");
    }
    let v = check(&e, "http_request", json!({}));
    assert_eq!(names(&v), ["rate_limit_tool:http_request"]);
    assert!(check(&e, "other", json!({})).is_empty());
    // Clones share the window (a session's engine is one window).
    assert_eq!(e.clone().check(&call("http_request", json!({})), &Map::new()).len(), 1);
}

#[test]
fn rate_limit_zero_denies_all_and_other_rules_do_not_refund() {
    let e = engine("[[rate_limit_tool]]\ntool = \"t\"\nmax_calls = 0\ninterval_secs = 60\n");
    assert_eq!(check(&e, "t", json!({})).len(), 1);

    let e =
        engine("deny_keyword = [\"bad\"]\n[[rate_limit_tool]]\ntool = \"t\"\nmax_calls = 2\ninterval_secs = 3600\n");
    // Refused by deny_keyword, but the rate limit already took a slot.
    assert_eq!(names(&check(&e, "t", json!({"x": "bad"}))), ["deny_keyword:bad"]);
    assert!(check(&e, "t", json!({})).is_empty());
    assert_eq!(names(&check(&e, "t", json!({}))), ["rate_limit_tool:t"]);
    // Refused by the rate limit itself: consumes nothing, still refused.
    assert_eq!(names(&check(&e, "t", json!({}))), ["rate_limit_tool:t"]);
}

#[test]
fn trace_rules_deny_and_allow_in_order() {
    let e = engine(
        r#"
[[trace_rule]]
tool         = "http_request"
forbid_after = ["read_secret"]

[[trace_rule]]
tool           = "deploy"
require_before = ["run_tests"]

[[trace_rule]]
tool            = "send_email"
max_per_session = 1
"#,
    );
    let listed: Vec<_> = e.list().into_iter().map(|p| p.name).collect();
    assert_eq!(listed, ["trace_rule:http_request", "trace_rule:deploy", "trace_rule:send_email"]);
    // Trace rules are not per-action checks.
    assert!(check(&e, "deploy", json!({})).is_empty());

    let s = Some("s1");
    let http = call("http_request", json!({}));
    assert!(e.check_dispatch(&http, s).is_empty());
    e.record_dispatch(&http, s, true);
    let secret = call("read_secret", json!({}));
    assert!(e.check_dispatch(&secret, s).is_empty());
    e.record_dispatch(&secret, s, true);
    let v = e.check_dispatch(&http, s);
    assert_eq!(names(&v), ["trace_rule:http_request"]);

    let deploy = call("deploy", json!({}));
    assert_eq!(names(&e.check_dispatch(&deploy, s)), ["trace_rule:deploy"]);
    let tests = call("run_tests", json!({}));
    assert!(e.check_dispatch(&tests, s).is_empty());
    e.record_dispatch(&tests, s, false);
    assert_eq!(e.check_dispatch(&deploy, s).len(), 1, "a failed run does not satisfy require_before");
    e.record_dispatch(&tests, s, true);
    assert!(e.check_dispatch(&deploy, s).is_empty());

    let mail = call("send_email", json!({}));
    assert!(e.check_dispatch(&mail, s).is_empty());
    assert_eq!(e.check_dispatch(&mail, s).len(), 1);
    // Another session starts with an empty trace.
    assert!(e.check_dispatch(&mail, Some("s2")).is_empty());
    assert!(e.check_dispatch(&http, Some("s2")).is_empty());
}

#[test]
fn files_load_in_sorted_order_and_merge() {
    let dir = TempDir::new();
    dir.write("20-b.toml", "deny_tool = [\"b\"]");
    dir.write("03-a.toml", "deny_tool = [\"a\"]\n[[rate_limit_tool]]\ntool=\"a\"\nmax_calls=1\ninterval_secs=1");
    dir.write("10-c.toml", "deny_tool = [\"c\"]");
    dir.write("notes.md", "deny_tool = not toml at all");
    dir.write("sub.toml/inner.toml", "garbage = 1");
    let mut e = PolicyEngine::new();
    assert_eq!(e.load_policy_dir(dir.path()).unwrap(), 4);
    let listed: Vec<_> = e.list().into_iter().map(|p| p.name).collect();
    assert_eq!(listed, ["deny_tool:a", "rate_limit_tool:a", "deny_tool:c", "deny_tool:b"]);
}

#[test]
fn missing_directory_is_zero_rules() {
    let mut e = PolicyEngine::new();
    assert_eq!(e.load_policy_dir(Path::new("/nonexistent/car/policies")).unwrap(), 0);
    assert!(e.is_empty());
}

fn load_err(toml: &str) -> car_runtime::Error {
    let dir = TempDir::new();
    dir.write("00-ok.toml", "deny_tool = [\"x\"]");
    dir.write("bad.toml", toml);
    let mut e = PolicyEngine::new();
    let err = e.load_policy_dir(dir.path()).unwrap_err();
    assert!(e.is_empty(), "a failed load registers nothing");
    assert!(err.to_string().contains("bad.toml"), "names the file: {err}");
    assert!(err.details()["file"].as_str().unwrap().ends_with("bad.toml"));
    err
}

#[test]
fn malformed_files_are_refused_naming_file_and_key() {
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("deny_tool = [", "policy_parse_error", None),
        ("deny_tools = [\"x\"]", "unknown_policy_key", Some("deny_tools")),
        ("deny_tool = \"deploy\"", "invalid_policy_type", Some("deny_tool")),
        ("deny_tool = [1]", "invalid_policy_type", Some("deny_tool[0]")),
        ("deny_tool = [\"\"]", "invalid_policy_value", Some("deny_tool[0]")),
        ("deny_keyword = [true]", "invalid_policy_type", Some("deny_keyword[0]")),
        ("deny_tool_param = \"x\"", "invalid_policy_type", Some("deny_tool_param")),
        ("deny_tool_param = [1]", "invalid_policy_type", Some("deny_tool_param[0]")),
        ("[[deny_tool_param]]\nparam = \"p\"", "missing_policy_key", Some("deny_tool_param[0].tool")),
        (
            "[[deny_tool_param]]\ntool = \"t\"\nparam = \"p\"\ncontain = \"x\"",
            "unknown_policy_key",
            Some("deny_tool_param[0].contain"),
        ),
        (
            "[[deny_tool_param]]\ntool = \"t\"\nparam = \"p\"\ncontains = 5",
            "invalid_policy_type",
            Some("deny_tool_param[0].contains"),
        ),
        (
            "[[allow_tool_param]]\ntool = \"t\"\nparam = \"p\"\nallow = \"x\"",
            "invalid_policy_type",
            Some("allow_tool_param[0].allow"),
        ),
        ("[[allow_tool_param]]\ntool = \"t\"", "missing_policy_key", Some("allow_tool_param[0].param")),
        (
            "[[deny_tool_param_matching]]\ntool = \"t\"\nparam = \"p\"",
            "missing_policy_key",
            Some("deny_tool_param_matching[0].matches"),
        ),
        (
            "[[deny_tool_param_matching]]\ntool = \"t\"\nparam = \"p\"\nmatches = \"x\"\nnegate = \"yes\"",
            "invalid_policy_type",
            Some("deny_tool_param_matching[0].negate"),
        ),
        (
            "[[rate_limit_tool]]\ntool = \"t\"\nmax_calls = 1",
            "missing_policy_key",
            Some("rate_limit_tool[0].interval_secs"),
        ),
        (
            "[[rate_limit_tool]]\ntool = \"t\"\nmax_calls = 1.5\ninterval_secs = 1",
            "invalid_policy_type",
            Some("rate_limit_tool[0].max_calls"),
        ),
        (
            "[[rate_limit_tool]]\ntool = \"t\"\nmax_calls = 1\ninterval_secs = -1.0",
            "invalid_policy_value",
            Some("rate_limit_tool[0].interval_secs"),
        ),
        (
            "[[rate_limit_tool]]\ntool = \"t\"\nmax_calls = 1\ninterval_secs = nan",
            "invalid_policy_value",
            Some("rate_limit_tool[0].interval_secs"),
        ),
        ("[[trace_rule]]\ntool = \"t\"", "missing_policy_key", Some("trace_rule[0].forbid_after")),
        (
            "[[deny_tool_param]]\ntool = \"t\"\nparam = \"p\"\nequals = nan",
            "invalid_policy_value",
            Some("deny_tool_param[0].equals"),
        ),
        (
            "[[trace_rule]]\ntool = \"t\"\nforbid_after = \"x\"",
            "invalid_policy_type",
            Some("trace_rule[0].forbid_after"),
        ),
        (
            "[[trace_rule]]\ntool = \"t\"\nmax_per_session = -1",
            "invalid_policy_value",
            Some("trace_rule[0].max_per_session"),
        ),
        (
            "[[trace_rule]]\ntool = \"t\"\nmax_per_session = 1\nbefore = [\"x\"]",
            "unknown_policy_key",
            Some("trace_rule[0].before"),
        ),
    ];
    for (toml, code, key) in cases {
        let e = load_err(toml);
        assert_eq!(e.code(), *code, "{toml}: {e}");
        assert_eq!(e.family(), "config");
        if let Some(key) = key {
            assert_eq!(e.details()["key"], *key, "{toml}: {e}");
            assert!(e.to_string().contains(&format!("`{key}`")), "{e}");
        }
    }
}

#[test]
fn discovery_walks_up_and_nearest_wins() {
    let root = TempDir::new();
    root.write(".car/policies/root.toml", "deny_tool = [\"root\"]");
    std::fs::create_dir_all(root.path().join("a/b/c")).unwrap();
    let found = discover_policy_dir(&root.path().join("a/b/c")).unwrap();
    assert_eq!(found, root.path().join(".car/policies"));
    root.write("a/.car/policies/near.toml", "deny_tool = [\"near\"]");
    let found = discover_policy_dir(&root.path().join("a/b/c")).unwrap();
    assert_eq!(found, root.path().join("a/.car/policies"));
    assert_eq!(discover_policy_dir(root.path()).unwrap(), root.path().join(".car/policies"));
    // A `.car` without `policies` is passed over.
    std::fs::create_dir_all(root.path().join("a/b/.car")).unwrap();
    assert_eq!(discover_policy_dir(&root.path().join("a/b/c")).unwrap(), root.path().join("a/.car/policies"));
    // A file where the directory should be is found, and loading it fails
    // loudly rather than passing over to the next level.
    root.write("a/b/.car/policies", "not a directory");
    let found = discover_policy_dir(&root.path().join("a/b/c")).unwrap();
    assert_eq!(found, root.path().join("a/b/.car/policies"));
    let err = PolicyEngine::new().load_policy_dir(&found).unwrap_err();
    assert_eq!(err.code(), "policy_io_error");
}

#[test]
fn loaded_rules_are_enforced_by_session_admission() {
    let mut e = engine(SECURITY);
    let s = e.open_session();
    let v = e.check_in_session(&call("deploy", json!({})), &Map::new(), Some(&s));
    assert_eq!(names(&v), ["deny_tool:deploy"]);
    assert_eq!(e.unregister("deny_tool:deploy"), 1);
    assert!(e.check_in_session(&call("deploy", json!({})), &Map::new(), Some(&s)).is_empty());
}

mod no_value_in_reasons {
    use super::*;
    use proptest::prelude::*;

    fn all_kinds() -> PolicyEngine {
        engine(
            r#"
deny_keyword = ["QQ"]
[[deny_tool_param]]
tool = "t"
param = "p"
contains = "QQ"
[[deny_tool_param]]
tool = "t"
param = "p"
[[allow_tool_param]]
tool = "t"
param = "p"
allow = ["ok"]
[[deny_tool_param_matching]]
tool = "t"
param = "p"
matches = "QQ"
[[deny_tool_param_matching]]
tool = "t"
param = "p"
matches = "^zzz"
negate = true
"#,
        )
    }

    proptest! {
        #[test]
        fn reasons_never_contain_the_value(secret in "[a-z0-9]{12,24}") {
            let e = all_kinds();
            let value = format!("QQ{secret}");
            let v = check(&e, "t", json!({"p": value}));
            prop_assert_eq!(v.len(), 6);
            for viol in &v {
                prop_assert!(!viol.reason.contains(&secret), "{}", viol.reason);
                prop_assert!(!viol.policy_name.contains(&secret));
            }
        }
    }
}
