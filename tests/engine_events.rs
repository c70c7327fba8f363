//! The event log: every kind the engine emits, params_digest against an
//! independently computed JCS form, queries, retention and hash chaining.

use std::sync::Arc;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall};
use car_runtime::events::{ChainVerification, EventData, verify_chain};
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn exec() -> Arc<FnExecutor<impl Fn(ToolCall) -> Result<Value, ToolFailure> + Send + Sync>> {
    Arc::new(FnExecutor(|c: ToolCall| {
        if c.params.get("fail").is_some() {
            return Err(ToolFailure::ordinary("nope"));
        }
        if let Some(r) = c.params.get("ret") {
            return Ok(r.clone());
        }
        Ok(json!({"ok": true}))
    }))
}

fn query(rt: &CarRuntime, q: Value) -> Vec<Value> {
    let out: Value = serde_json::from_str(&rt.event_query(&q.to_string()).unwrap()).unwrap();
    assert_eq!(out["count"].as_u64().unwrap() as usize, out["events"].as_array().unwrap().len());
    out["events"].as_array().unwrap().clone()
}

fn sha_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[tokio::test]
async fn every_kind_and_digests() {
    let rt = CarRuntime::new();
    rt.register_tool("x").unwrap();
    rt.register_tool_schema(r#"{"name":"typed","parameters":{"type":"object"},"returns":{"type":"string"}}"#).unwrap();
    rt.register_policy("no_z", "deny_tool", Some("z"), None, None, None, None).unwrap();
    rt.register_tool("z").unwrap();
    // Key order, nesting, numbers and escapes: the JCS form is written out by hand.
    let params = json!({"z": [3, {"b": true, "a": null}], "a": "é\n", "m": 1.5e1, "k": 10});
    let canonical = r#"{"a":"é\n","k":10,"m":15,"z":[3,{"a":null,"b":true}]}"#;
    let proposal = json!({"id": "p1", "actions": [
        {"id": "t", "type": "tool_call", "tool": "x", "parameters": params, "expected_effects": {"done": true}},
        {"id": "f", "type": "tool_call", "tool": "x", "parameters": {"fail": 1}, "failure_behavior": "retry", "max_retries": 1,
         "dependencies": ["t"], "expected_effects": {"claimed": 1}},
        {"id": "v", "type": "tool_call", "tool": "typed", "parameters": {"ret": 5}, "failure_behavior": "skip"},
        {"id": "as", "type": "assertion", "parameters": {"key": "missing", "expected": 1}, "failure_behavior": "skip"},
        {"id": "d", "type": "tool_call", "tool": "z", "failure_behavior": "skip"},
        {"id": "after", "type": "tool_call", "tool": "x", "dependencies": ["f"]},
    ]});
    let r: Value =
        serde_json::from_str(&rt.execute_proposal(&proposal.to_string(), exec(), None, None).await.unwrap()).unwrap();
    assert_eq!(r["results"][5]["status"], "skipped");

    let received = query(&rt, json!({"kinds": ["ProposalReceived"]}));
    assert_eq!(received.len(), 1);
    assert_eq!(received[0]["proposal_id"], "p1");
    assert_eq!(received[0]["data"]["actions"][0]["parameters"], params, "raw parameters only here");

    let ok = query(&rt, json!({"kinds": ["ActionSucceeded"], "action_id": "t"}));
    assert_eq!(ok[0]["data"]["params_digest"], json!(sha_hex(canonical)));
    assert_eq!(ok[0]["data"]["expected_effects"], json!({"done": true}));
    assert!(ok[0]["data"].get("parameters").is_none());

    let failed = query(&rt, json!({"kinds": ["ActionFailed"]}));
    let class = |id: &str| failed.iter().find(|e| e["action_id"] == id).unwrap()["data"]["error_class"].clone();
    assert_eq!(class("f"), "tool_error");
    assert_eq!(class("v"), "validation");
    assert_eq!(class("as"), "unknown");
    let f = failed.iter().find(|e| e["action_id"] == "f").unwrap();
    assert_eq!(f["data"]["params_digest"], json!(sha_hex(r#"{"fail":1}"#)));
    assert_eq!(f["data"]["expected_effects"], json!({"claimed": 1}));
    assert_eq!(f["data"]["attempt"], 2);

    let retrying = query(&rt, json!({"kinds": ["ActionRetrying"]}));
    assert_eq!(retrying.len(), 1);
    assert_eq!(retrying[0]["data"]["attempt"], 2);
    let executing = query(&rt, json!({"kinds": ["ActionExecuting"], "action_id": "f"}));
    assert_eq!(executing.iter().map(|e| e["data"]["attempt"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 1]);

    let violation = query(&rt, json!({"kinds": ["PolicyViolation"]}));
    assert_eq!(violation[0]["data"]["policy_name"], "no_z");
    assert_eq!(violation[0]["action_id"], "d");
    let rejected = query(&rt, json!({"kinds": ["ActionRejected"]}));
    assert_eq!(rejected[0]["action_id"], "d");

    let changed = query(&rt, json!({"kinds": ["StateChanged"], "data_matches": {"key": "done"}}));
    assert_eq!(changed[0]["data"]["op"], "set");
    assert_eq!(changed[0]["data"]["value"], true);
    assert_eq!(query(&rt, json!({"kinds": ["StateRolledBack"]}))[0]["data"]["keys"], json!(["done"]));
    assert_eq!(query(&rt, json!({"kinds": ["ActionSkipped"]}))[0]["action_id"], "after");
    let done = query(&rt, json!({"kinds": ["ProposalCompleted"]}));
    assert_eq!(done[0]["data"]["aborted"], true);
    // The whole record: the result's cost under `cost`, members in this order.
    assert_eq!(done[0]["data"], json!({"aborted": true, "cost": r["cost"]}));
    let keys: Vec<&String> = done[0]["data"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["aborted", "cost"]);
    let cost: Vec<&String> = done[0]["data"]["cost"].as_object().unwrap().keys().collect();
    let result_cost: Vec<&String> = r["cost"].as_object().unwrap().keys().collect();
    assert_eq!(cost, result_cost);
    assert_eq!(rt.state_get("done", None).unwrap(), "null", "rolled back");

    let stats: Value = serde_json::from_str(&rt.event_stats()).unwrap();
    assert_eq!(stats["ActionRetrying"], 1);
    assert_eq!(stats.as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum::<u64>(), rt.event_count());
}

#[tokio::test]
async fn queries_filters_order_and_limits() {
    let rt = CarRuntime::new();
    rt.register_tool("x").unwrap();
    for i in 0..3 {
        let p = json!({"id": format!("p{i}"), "actions": [{"id": format!("a{i}"), "type": "tool_call", "tool": "x"}]});
        rt.execute_proposal(&p.to_string(), exec(), None, None).await.unwrap();
    }
    let all = query(&rt, json!({}));
    assert_eq!(all.len() as u64, rt.event_count());
    let ids: Vec<u64> = all.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first");
    let limited = query(&rt, json!({"kinds": ["ActionSucceeded"], "limit": 2}));
    assert_eq!(limited.iter().map(|e| e["action_id"].clone()).collect::<Vec<_>>(), [json!("a2"), json!("a1")]);
    assert_eq!(query(&rt, json!({"kinds": ["ActionSucceeded"], "limit": 0})).len(), 3);
    assert_eq!(query(&rt, json!({"proposal_id": "p1"})).iter().filter(|e| e["proposal_id"] != "p1").count(), 0);

    let middle = query(&rt, json!({"proposal_id": "p1", "kinds": ["ActionExecuting"]}))[0]["timestamp"].clone();
    let since = query(&rt, json!({"since": middle, "kinds": ["ActionExecuting"]}));
    assert_eq!(
        since.iter().map(|e| e["action_id"].clone()).collect::<Vec<_>>(),
        [json!("a2"), json!("a1")],
        "since is inclusive"
    );
    let until = query(&rt, json!({"until": middle, "kinds": ["ActionExecuting"]}));
    assert_eq!(until.iter().map(|e| e["action_id"].clone()).collect::<Vec<_>>(), [json!("a0")], "until is exclusive");
    assert!(rt.event_query(r#"{"kinds":["Nope"]}"#).is_err());
}

#[tokio::test]
async fn retention_clear_and_chain() {
    let rt = CarRuntime::new();
    rt.register_tool("x").unwrap();
    rt.state_set("before", "1", None).unwrap();
    rt.enable_event_log_hash_chaining();
    let p = json!({"actions": [{"type": "tool_call", "tool": "x"}, {"type": "state_write", "parameters": {"key": "k", "value": 1}}]});
    rt.execute_proposal(&p.to_string(), exec(), None, None).await.unwrap();
    let total = rt.event_count();
    let v: Value = serde_json::from_str(&rt.verify_event_log_chain()).unwrap();
    assert_eq!(v, json!({"verified": total - 1}));
    let chained = query(&rt, json!({"limit": 1}));
    assert_eq!(chained[0]["hash"].as_str().unwrap().len(), 64);

    let mut events = rt.runtime().events().events();
    events[3].data = EventData::Value(Box::new(json!({"forged": true})));
    assert_eq!(verify_chain(&events), ChainVerification::TamperedAt(3));

    let set: Value = serde_json::from_str(&rt.event_retention(Some(r#"{"max_events": 3}"#)).unwrap()).unwrap();
    assert_eq!(set["removed"].as_u64().unwrap(), total - 3);
    assert_eq!(rt.event_count(), 3);
    let got: Value = serde_json::from_str(&rt.event_retention(None).unwrap()).unwrap();
    assert_eq!(got, json!({"policy": {"max_events": 3}}));
    rt.execute_proposal(&p.to_string(), exec(), None, None).await.unwrap();
    assert_eq!(rt.event_count(), 3, "retention applies on append");
    assert_eq!(serde_json::from_str::<Value>(&rt.verify_event_log_chain()).unwrap(), json!({"verified": 3}));
    let cleared: Value = serde_json::from_str(&rt.event_clear()).unwrap();
    assert_eq!(cleared["removed"], 3);
    assert_eq!(rt.event_count(), 0);
}
