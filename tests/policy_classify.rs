//! The two classifiers: the spec's pinned misses, a table of tool names
//! checked against the original runtime, and properties.

use car_runtime::ir::{Action, Reversibility};
use car_runtime::policy::{PermissionTier, RiskClassifier, classify_reversibility, evaluate_axes};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use PermissionTier::{FullAccess as F, SandboxEdit as S};
use Reversibility::{Compensable as C, Irreversible as I, Reversible as R};

fn call(tool: &str, params: Value) -> Action {
    let mut a = Action::tool_call(tool);
    a.parameters = params.as_object().cloned().unwrap_or_default().into();
    a
}

/// Tool names (no parameters) where our answer agrees with car-runtime 0.58.0.
const AGREED: &[(&str, PermissionTier, Reversibility)] = &[
    ("read_file", S, R),
    ("write_file", S, I),
    ("list_dir", S, R),
    ("grep_files", S, R),
    ("shell", S, I),
    ("deploy", F, C),
    ("deploy_service", F, C),
    ("list_deployments", S, C),
    ("get_payment", F, I),
    ("send_email", F, I),
    ("sendEmail", F, I),
    ("read_secret", F, R),
    ("http_request", S, I),
    ("http_get", S, R),
    ("web_fetch", S, R),
    ("git_push", F, C),
    ("git_commit", S, C),
    ("git_status", S, R),
    ("git_clone", S, C),
    ("git_reset", F, I),
    ("delete_file", F, I),
    ("rm", F, I),
    ("docker.rm", F, I),
    ("format_date", S, I),
    ("release", F, I),
    ("create_issue", S, C),
    ("query_db", S, R),
    ("db_insert", S, C),
    ("charge_card", F, I),
    ("upload", F, C),
    ("download", F, I),
    ("kubectl_apply", F, I),
    ("terraform_apply", F, I),
    ("npm_install", S, C),
    ("update_record", S, C),
    ("drop_table", F, I),
    ("truncate_table", F, I),
    ("publish", F, I),
    ("restart_service", S, C),
    ("aws_s3_put", S, C),
    ("validate_email", S, R),
    ("select_rows", S, R),
    ("chmod", F, I),
    ("helm_install", F, C),
    ("rmdir", F, I),
    ("grant_access", S, C),
    ("subscribe", S, C),
    ("unknown_thing", S, I),
];

#[test]
fn tool_names_agreed_with_the_original() {
    let rc = RiskClassifier::default();
    for (tool, tier, rev) in AGREED {
        let a = call(tool, json!({}));
        assert_eq!(rc.classify(&a), *tier, "tier of {tool}");
        assert_eq!(classify_reversibility(&a), *rev, "reversibility of {tool}");
    }
}

#[test]
fn spec_pins() {
    assert_eq!(classify_reversibility(&call("list_deployments", json!({}))), C);
    assert_eq!(classify_reversibility(&call("get_payment", json!({}))), I);
    assert_eq!(classify_reversibility(&call("shell", json!({"command": "git push origin main"}))), C);
    let secret = evaluate_axes(&call("read_secret", json!({})));
    assert_eq!((secret.required_tier, secret.reversibility), (F, R));
    // A database INSERT and a sent email share a rung and differ on the other axis.
    let insert = evaluate_axes(&call("query", json!({"sql": "INSERT INTO t VALUES (1)"})));
    assert_eq!(insert.reversibility, C);
    assert_eq!(evaluate_axes(&call("send_email", json!({}))).reversibility, I);
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop::sample::select(vec![
            "rm -rf /",
            "ls -la",
            "DROP TABLE x",
            "https://example.com/http",
            "~/.ssh/id_rsa",
            "release notes",
            "git push",
            "insert into t",
            "hello",
            "sudo reboot",
            "x.pem",
        ])
        .prop_map(|s| json!(s)),
        "[a-zA-Z ./-]{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (prop::sample::select(vec!["command", "args", "api_key", "auth", "token", "path", "q", "body"]), inner),
                0..4
            )
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>())),
        ]
    })
}

fn arb_tool() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(AGREED.iter().map(|(t, _, _)| t.to_string()).collect::<Vec<_>>()),
        "[a-zA-Z_.-]{1,16}",
    ]
}

proptest! {
    #[test]
    fn axes_equal_the_two_classifiers(tool in arb_tool(), params in prop::collection::btree_map("[a-z_]{1,8}", arb_json(), 0..4)) {
        let a = call(&tool, Value::Object(params.into_iter().collect()));
        let axes = evaluate_axes(&a);
        prop_assert_eq!(axes.required_tier, RiskClassifier::default().classify(&a));
        prop_assert_eq!(axes.reversibility, classify_reversibility(&a));
    }

    #[test]
    fn adding_a_parameter_never_lowers_the_tier(
        tool in arb_tool(),
        params in prop::collection::btree_map("[a-z_]{1,8}", arb_json(), 0..3),
        key in "[a-z_]{1,8}",
        extra in arb_json(),
    ) {
        let mut a = call(&tool, Value::Object(params.into_iter().collect()));
        prop_assume!(!a.parameters.contains_key(&key));
        let before = RiskClassifier::default().classify(&a);
        a.parameters.insert(key, extra);
        prop_assert!(RiskClassifier::default().classify(&a) >= before);
    }
}
