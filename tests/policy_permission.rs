//! The permission gate through the facade: classify, evaluate against a
//! granted tier, and the approvals ledger round trip.

use car_runtime::api::policy::{
    permission_classify, permission_evaluate, permission_record_decision, permission_record_for_fingerprint,
};
use serde_json::{Value, json};

struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new() -> Self {
        TempFile(std::env::temp_dir().join(format!("car-ledger-{}/approvals.jsonl", uuid::Uuid::new_v4())))
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn decisions(proposal: &Value, tier: &str, ledger: Option<&str>) -> Vec<Value> {
    let out: Value = serde_json::from_str(&permission_evaluate(&proposal.to_string(), tier, ledger).unwrap()).unwrap();
    out["decisions"].as_array().unwrap().clone()
}

#[test]
fn approval_round_trip_through_the_ledger() {
    let ledger = TempFile::new();
    let deploy = json!({"id": "a1", "type": "tool_call", "tool": "deploy", "parameters": {"target": "prod", "v": 2}});
    let proposal = json!({"actions": [deploy.clone(), {"id": "a2", "type": "tool_call", "tool": "deploy", "parameters": {"v": 2, "target": "prod"}}]});
    let d = decisions(&proposal, "full_access", Some(ledger.path()));
    assert_eq!(d[0]["decision"], "needs_approval");
    assert_eq!(d[0]["fingerprint"], d[1]["fingerprint"], "key order does not change the fingerprint");

    let rec: Value = serde_json::from_str(
        &permission_record_decision(&deploy.to_string(), true, "alice", "change window", ledger.path(), Some("CHG-1"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(rec["decision"], "approved");
    assert_eq!(rec["required_tier"], "full_access");
    assert_eq!(rec["fingerprint"], d[0]["fingerprint"]);
    assert_eq!(rec["evidence"], "CHG-1");

    let d = decisions(&proposal, "sandbox_edit", Some(ledger.path()));
    assert_eq!(d[0]["decision"], "allow");
    assert_eq!(d[1]["decision"], "allow");
    assert!(d[0].get("reason").is_none());
    // Without the ledger nothing is remembered.
    assert_eq!(decisions(&proposal, "sandbox_edit", None)[0]["decision"], "needs_approval");

    // A later rejection wins.
    let fp = d[0]["fingerprint"].as_str().unwrap();
    permission_record_for_fingerprint(fp, "full_access", false, "bob", "freeze", ledger.path(), None).unwrap();
    let d = decisions(&proposal, "full_access", Some(ledger.path()));
    assert_eq!(d[0]["decision"], "deny");
    assert_eq!(d[0]["reason"], "previously rejected by bob (freeze)");
    assert_eq!(d[0]["granted"], "full_access");

    // The ledger is append-only JSONL: one record per line.
    let text = std::fs::read_to_string(&ledger.0).unwrap();
    assert_eq!(text.lines().count(), 2);
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(v["decided_at"].is_string());
    }
}

#[test]
fn record_through_call_method() {
    let ledger = TempFile::new();
    let action = json!({"id": "a1", "type": "tool_call", "tool": "send_email", "parameters": {"to": "x@example.com"}});
    let rec = car_runtime::api::call(
        "permission_record_decision",
        &json!({"action": action, "approve": false, "reviewer": "bob", "reason": "no", "ledger_path": ledger.path()}),
    )
    .unwrap();
    assert_eq!(rec["decision"], "rejected");
    let out = car_runtime::api::call(
        "permission_evaluate",
        &json!({"proposal": {"actions": [action]}, "granted_tier": "full_access", "ledger_path": ledger.path()}),
    )
    .unwrap();
    assert_eq!(out["decisions"][0]["decision"], "deny");
    let e = car_runtime::api::call(
        "permission_record_decision",
        &json!({"action": {"type": "tool_call", "tool": "x"}, "approve": "yes", "reviewer": "b", "ledger_path": ledger.path()}),
    )
    .unwrap_err();
    assert_eq!(e.code(), "invalid_argument");
}

#[test]
fn bad_inputs_are_errors() {
    assert_eq!(permission_classify("not json").unwrap_err().code(), "invalid_json");
    assert_eq!(permission_evaluate(r#"{"actions":[]}"#, "admin", None).unwrap_err().code(), "invalid_argument");
    assert_eq!(
        permission_record_for_fingerprint("", "full_access", true, "a", "b", "/tmp/unused.jsonl", None)
            .unwrap_err()
            .code(),
        "invalid_argument"
    );
    assert_eq!(
        permission_record_for_fingerprint("f", "root", true, "a", "b", "/tmp/unused.jsonl", None).unwrap_err().code(),
        "invalid_argument"
    );
}

#[test]
fn reversibility_is_on_every_row_allow_included() {
    let p = json!({"actions": [
        {"id": "r", "type": "tool_call", "tool": "read_file", "parameters": {"path": "a"}},
        {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 1}}
    ]});
    for row in decisions(&p, "sandbox_edit", None) {
        assert_eq!(row["decision"], "allow");
        assert_eq!(row["reversibility"], "reversible");
    }
}
