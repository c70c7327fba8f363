//! Tool contracts: definition-time validation, toolset assembly, and pinned
//! `toolset_hash` values. Expected hashes were computed independently with
//! python3: `hashlib.sha256(json.dumps(tuples, sort_keys=True,
//! separators=(',', ':'), ensure_ascii=False).encode()).hexdigest()` over the
//! `{name, description, parameters, version?}` tuples sorted by name.

use car_runtime::permission::{Executor, Risk, ToolDefinition, Toolset, toolset_hash};
use serde_json::{Value, json};

fn search() -> Value {
    json!({
        "name": "search_issues",
        "description": "Search the issue tracker and return the top matches.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}}, "required": ["query"]},
        "version": "2",
        "risk": "read"
    })
}

fn deploy() -> Value {
    json!({
        "name": "deploy_service",
        "description": "Deploy a service to production.",
        "parameters": {"type": "object", "properties": {"service": {"type": "string"}}},
        "risk": "execute",
        "needs_approval": true
    })
}

fn defs(vs: &[Value]) -> Vec<ToolDefinition> {
    vs.iter().cloned().map(|v| ToolDefinition::from_value(v).unwrap()).collect()
}

fn hash(vs: &[Value]) -> String {
    toolset_hash(&defs(vs)).unwrap()
}

#[test]
fn pinned_hashes() {
    assert_eq!(hash(&[search(), deploy()]), "3d13c1430c830804b81e76957e9824085638611cc37bc8104cefd5a3707962f2");
    assert_eq!(hash(&[deploy()]), "66912391482744b02adbbd1d4b73cf4c8a67e944be6aa11993db9c23770ea505");
    assert_eq!(hash(&[]), "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945");
    let unicode = json!({"name": "a", "description": "é ✓ \u{2028} \"q\"",
        "parameters": {"type": "object", "title": "ü",
            "properties": {"z": {"type": "number", "maximum": 1.5}, "a": {"enum": [3, 2, "x"]}}}});
    assert_eq!(hash(&[unicode]), "6ca4c1d054b7445c1c4d4dc6af149c34cdfcbbc770d491670170c08ef6e21d3b");
    // An absent version stays absent: not the same as an empty one.
    assert_eq!(hash(&[json!({"name": "x"})]), "a46e9dbec2904ffbc48f1542562f140bdfdd3411997c3079cad79ffe627047ba");
    assert_eq!(
        hash(&[json!({"name": "x", "version": ""})]),
        "a5381f7184f06d5072604db6114cfc7d7486226698a49cdde7129ae8da8e67f0"
    );
}

#[test]
fn pinned_hash_equals_sha256_of_hand_written_canonical_json() {
    use sha2::{Digest, Sha256};
    // RFC 8785 by hand: keys sorted, no whitespace, no version (absent).
    let canonical = r#"[{"description":"Deploy a service to production.","name":"deploy_service","parameters":{"properties":{"service":{"type":"string"}},"type":"object"}}]"#;
    let expected = hex::encode(Sha256::digest(canonical.as_bytes()));
    assert_eq!(expected, "66912391482744b02adbbd1d4b73cf4c8a67e944be6aa11993db9c23770ea505");
    assert_eq!(hash(&[deploy()]), expected);
}

#[test]
fn hash_is_insensitive_to_order_policy_and_key_order() {
    let base = hash(&[search(), deploy()]);
    assert_eq!(hash(&[deploy(), search()]), base, "tool order");
    let mut d = deploy();
    d["risk"] = json!("destructive");
    d["needs_approval"] = json!(false);
    d["executor"] = json!("inprocess");
    assert_eq!(hash(&[search(), d]), base, "policy fields are not identity");
    let mut d = deploy();
    d.as_object_mut().unwrap().remove("risk");
    assert_eq!(hash(&[search(), d]), base, "undeclared risk is not identity either");
    let reordered: Value = serde_json::from_str(
        r#"{"needs_approval":true,"risk":"execute","parameters":{"properties":{"service":{"type":"string"}},"type":"object"},
            "description":"Deploy a service to production.","name":"deploy_service"}"#,
    )
    .unwrap();
    assert_eq!(hash(&[search(), reordered]), base, "schema key order is canonicalized");
}

#[test]
fn hash_is_sensitive_to_every_contract_field() {
    let base = hash(&[search(), deploy()]);
    let changes: [(&str, Value); 5] = [
        ("description", json!("Deploy a service.")),
        ("parameters", json!({"type": "object", "properties": {"service": {"type": "string", "minLength": 1}}})),
        ("version", json!("1")),
        ("name", json!("deploy_services")),
        ("description", json!("Deploy a service to production. ")),
    ];
    for (field, value) in changes {
        let mut d = deploy();
        d[field] = value.clone();
        assert_ne!(hash(&[search(), d]), base, "changing {field} to {value} must change the hash");
    }
    let mut s = search();
    s.as_object_mut().unwrap().remove("version");
    assert_ne!(hash(&[s, deploy()]), base, "removing a version changes the hash");
}

#[test]
fn names_are_validated_at_definition_time() {
    for ok in ["a", "Z9", "search_issues", "deploy-service", &"n".repeat(64)] {
        assert!(ToolDefinition::new(ok, "", json!({})).is_ok(), "{ok}");
    }
    for bad in ["", "a.b", "a b", "a/b", "ä", "a\u{200b}", &"n".repeat(65), "mcp:tool"] {
        let e = ToolDefinition::new(bad, "", json!({})).unwrap_err();
        assert_eq!(e.code(), "invalid_tool_name", "{bad:?}");
        assert_eq!(e.family(), "config");
        assert!(e.to_string().contains(&format!("`{bad}`")), "{e}");
        let e = ToolDefinition::from_value(json!({"name": bad})).unwrap_err();
        assert_eq!(e.code(), "invalid_tool_name");
    }
}

#[test]
fn schemas_outside_the_subset_fail_at_definition_time() {
    for schema in [
        json!({"$ref": "https://example.com/schema.json"}),
        json!({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}),
        json!({"$dynamicRef": "#meta"}),
        json!({"type": "object", "requried": ["a"]}),
        json!({"type": "objekt"}),
        json!({"type": "object", "properties": {"a": {"pattern": "[unclosed"}}}),
        json!(["not", "a", "schema"]),
        json!(true),
    ] {
        let e = ToolDefinition::new("t", "", schema.clone()).unwrap_err();
        assert_eq!(e.code(), "unsupported_schema", "{schema}");
        assert!(e.to_string().starts_with("tool `t`"), "{e}");
    }
    let local_ref =
        json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"type": "string"}}});
    assert!(ToolDefinition::new("t", "", local_ref).is_ok());
}

#[test]
fn inprocess_and_subprocess_executors_are_served() {
    let e = ToolDefinition::from_value(json!({"name": "t", "executor": "container"})).unwrap_err();
    assert_eq!(e.code(), "unsupported_executor");
    assert!(e.to_string().contains("`container`"), "{e}");
    // A subprocess tool needs an argv template naming declared parameters.
    let e = ToolDefinition::from_value(json!({"name": "t", "executor": "subprocess"})).unwrap_err();
    assert_eq!(e.code(), "invalid_subprocess_tool");
    assert!(e.to_string().contains("needs `command`"), "{e}");
    let params = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let ok = json!({"name": "t", "executor": "subprocess", "command": ["git", "log", "-n", "{n}"], "parameters": params, "sandbox": "read-only"});
    let def = ToolDefinition::from_value(ok).unwrap();
    assert_eq!(def.executor, Executor::Subprocess);
    let e = ToolDefinition::from_value(
        json!({"name": "t", "executor": "subprocess", "command": ["ls", "{m}"], "parameters": params}),
    )
    .unwrap_err();
    assert!(e.to_string().contains("`m`, which is not a declared parameter"), "{e}");
    let e = ToolDefinition::from_value(json!({"name": "t", "command": ["ls"]})).unwrap_err();
    assert!(e.to_string().contains("only for executor `subprocess`"), "{e}");
    let e = ToolDefinition::new("t", "", json!({})).unwrap().with_executor(Executor::Container).unwrap_err();
    assert_eq!(e.code(), "unsupported_executor");
    let def = ToolDefinition::from_value(json!({"name": "t"})).unwrap();
    assert_eq!(def.executor, Executor::Inprocess);
    assert_eq!(def.risk, None);
    assert!(!def.needs_approval);
    assert!(ToolDefinition::from_value(json!({"name": "t", "executor": "wasm"})).is_err());
    assert!(ToolDefinition::from_value(json!({"name": "t", "execute": "x"})).is_err(), "unknown field");
}

#[test]
fn duplicate_names_fail_when_the_toolset_is_assembled() {
    let a = ToolDefinition::new("a", "one", json!({})).unwrap();
    let a2 = ToolDefinition::new("a", "two", json!({})).unwrap().with_risk(Risk::Read);
    let e = Toolset::new(vec![a.clone(), a2.clone()]).unwrap_err();
    assert_eq!(e.code(), "duplicate_tool");
    assert!(e.to_string().contains("`a`"));
    assert_eq!(toolset_hash(&[a.clone(), a2]).unwrap_err().code(), "duplicate_tool");
    let set = Toolset::new(vec![a]).unwrap();
    assert_eq!(set.get("a").map(|t| t.description.as_str()), Some("one"));
}

#[test]
fn facade_toolset_hash_matches() {
    let text = serde_json::to_string(&json!([search(), deploy()])).unwrap();
    assert_eq!(
        car_runtime::api::permission::toolset_hash(&text).unwrap(),
        "3d13c1430c830804b81e76957e9824085638611cc37bc8104cefd5a3707962f2"
    );
    let e = car_runtime::api::permission::toolset_hash(r#"[{"name":"a b"}]"#).unwrap_err();
    assert_eq!(e.code(), "invalid_tool_name");
}
