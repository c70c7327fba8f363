//! Faults in the append-only JSONL files: the approvals ledger of the
//! permission gate (`policy::JsonlLedger`) and the approvals store of the
//! plan/apply gate (`gate::ApprovalStore`).
//!
//! A process killed mid-write leaves its last record cut at any byte. For
//! every cut, the file still loads, every earlier record is intact, the torn
//! line is ignored (the ledger warns on stderr), and the next append lands as
//! a record of its own. A corrupt earlier record is an error, never a silent
//! loss.

use std::path::{Path, PathBuf};

use car_runtime::gate::ApprovalStore;
use car_runtime::ir::Action;
use car_runtime::policy::{Decision, JsonlLedger, PermissionGate, PermissionTier, fingerprint};
use serde_json::json;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("car-rel-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn action(n: usize) -> Action {
    car_runtime::ir::from_value(
        json!({"id": format!("a{n}"), "type": "tool_call", "tool": "deploy", "parameters": {"n": n}}),
    )
    .unwrap()
}

/// A ledger file holding three decisions; returns its bytes and the byte
/// offset where the third (last) record starts.
fn three_record_ledger(dir: &Path) -> (Vec<u8>, usize) {
    let path = dir.join("ledger.jsonl");
    let gate = PermissionGate::new().with_ledger(Box::new(JsonlLedger::new(&path)));
    for n in 0..3 {
        gate.record(&action(n), n != 1, "reviewer", "because", None).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let body = &bytes[..bytes.len() - 1];
    let last_start = body.iter().rposition(|b| *b == b'\n').unwrap() + 1;
    (bytes, last_start)
}

#[test]
fn ledger_a_torn_last_record_at_any_byte_is_ignored_and_earlier_records_survive() {
    let dir = tmp("ledger-torn");
    let (bytes, last_start) = three_record_ledger(&dir);
    let path = dir.join("cut.jsonl");
    for cut in last_start + 1..bytes.len() - 1 {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let ledger = JsonlLedger::new(&path);
        let records = ledger.records().unwrap_or_else(|e| panic!("cut at byte {cut}: the ledger does not load: {e}"));
        assert_eq!(records.len(), 2, "cut at byte {cut}");
        assert_eq!(records[0].fingerprint, fingerprint(&action(0)));
        assert_eq!(records[1].fingerprint, fingerprint(&action(1)));

        // The next decision is appended as a record of its own, and the gate
        // honours every decision.
        let gate = PermissionGate::new().with_ledger(Box::new(JsonlLedger::new(&path)));
        gate.record(&action(3), true, "r", "after the crash", None).unwrap();
        let records = JsonlLedger::new(&path).records().unwrap_or_else(|e| panic!("cut at byte {cut}, appended: {e}"));
        assert_eq!(records.len(), 3, "cut at byte {cut}");
        assert_eq!(records[2].fingerprint, fingerprint(&action(3)));
        let d = gate.evaluate(&action(3), PermissionTier::ReadOnly).unwrap();
        assert_eq!(d.decision, Decision::Allow, "cut at byte {cut}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ledger_a_corrupt_earlier_record_is_an_error_not_a_silent_loss() {
    let dir = tmp("ledger-corrupt");
    let (bytes, last_start) = three_record_ledger(&dir);
    let path = dir.join("bad.jsonl");
    // Garbage in the middle, and a valid JSON line of the wrong shape.
    for bad in [&b"not json\n"[..], b"{\"fingerprint\": 1}\n", b"{\"a\":1}  trailing\n"] {
        let mut text = bytes[..last_start].to_vec();
        text.extend_from_slice(bad);
        text.extend_from_slice(&bytes[last_start..]);
        std::fs::write(&path, &text).unwrap();
        let e = JsonlLedger::new(&path).records().unwrap_err();
        assert_eq!(e.code(), "invalid_ledger", "{e}");
        assert!(e.to_string().contains("line 3"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Latest resolutions and pending keys of a store, as comparable JSON.
fn store_view(dir: &Path) -> (Vec<String>, Vec<(String, String)>) {
    let store = ApprovalStore::open(dir).unwrap_or_else(|e| panic!("the store does not open: {e}"));
    let mut pending: Vec<String> = store.pending().unwrap().into_iter().map(|p| p.key).collect();
    pending.sort();
    let mut resolved = Vec::new();
    for k in ["k0", "k1", "k2", "k3"] {
        let key = car_runtime::gate::approval_key("deploy", k);
        if let Some(r) = store.resolution(&key).unwrap() {
            resolved.push((k.to_string(), format!("{:?}", r.decision)));
        }
    }
    (pending, resolved)
}

#[test]
fn approvals_store_a_torn_last_record_at_any_byte_loses_nothing_committed() {
    use car_runtime::gate::ApprovalDecision;
    let dir = tmp("store");
    {
        let store = ApprovalStore::open(&dir).unwrap();
        for k in ["k0", "k1", "k2"] {
            // With no approver attached the request is recorded as pending and
            // the caller is told to resubmit later.
            let _ = store.request("deploy", k, None);
        }
        store.resolve(&car_runtime::gate::approval_key("deploy", "k0"), ApprovalDecision::Allow, "ok").unwrap();
    }
    let file = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let committed = std::fs::read(&file).unwrap();
    let before = store_view(&dir);
    assert_eq!(before.1.len(), 1);
    assert_eq!(before.0.len(), 2);

    // A fourth record (a resolution of k1) written by a process killed at
    // every byte of it.
    let full = {
        let copy = tmp("store-full");
        std::fs::copy(&file, copy.join(file.file_name().unwrap())).unwrap();
        let store = ApprovalStore::open(&copy).unwrap();
        store.resolve(&car_runtime::gate::approval_key("deploy", "k1"), ApprovalDecision::Deny, "no").unwrap();
        let b = std::fs::read(copy.join(file.file_name().unwrap())).unwrap();
        let _ = std::fs::remove_dir_all(&copy);
        b
    };
    let extra = &full[committed.len()..];
    assert!(extra.len() > 10);
    let cut_dir = tmp("store-cut");
    let cut_file = cut_dir.join(file.file_name().unwrap());
    for cut in 1..extra.len() - 1 {
        let mut text = committed.clone();
        text.extend_from_slice(&extra[..cut]);
        std::fs::write(&cut_file, &text).unwrap();
        assert_eq!(store_view(&cut_dir), before, "cut at byte {cut}");
        // The next write lands on a line of its own; everything committed stays.
        let store = ApprovalStore::open(&cut_dir).unwrap();
        store.resolve(&car_runtime::gate::approval_key("deploy", "k2"), ApprovalDecision::Allow, "later").unwrap();
        drop(store);
        let (pending, resolved) = store_view(&cut_dir);
        assert_eq!(pending, vec![car_runtime::gate::approval_key("deploy", "k1")], "cut at byte {cut}");
        assert_eq!(resolved.len(), 2, "cut at byte {cut}: {resolved:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&cut_dir);
}
