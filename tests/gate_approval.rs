//! The approvals store ("Ask approvals surface to the host"): keys, fail-closed
//! resolution, first-closing-wins, deadlines, no approver, durability.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use car_runtime::approval::store::Clock;
use car_runtime::gate::*;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn temp_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("car-approvals-{tag}-{}", uuid::Uuid::new_v4().simple()))
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

/// A settable clock.
#[derive(Clone)]
struct FakeClock(Arc<Mutex<DateTime<Utc>>>);

impl FakeClock {
    fn new(t: DateTime<Utc>) -> Self {
        FakeClock(Arc::new(Mutex::new(t)))
    }
    fn set(&self, t: DateTime<Utc>) {
        *self.0.lock().unwrap() = t;
    }
    fn clock(&self) -> Clock {
        let c = self.0.clone();
        Arc::new(move || *c.lock().unwrap())
    }
}

fn secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

#[test]
fn keys_are_the_tool_name_and_the_canonical_input_digest() {
    let a = input_digest(&json!({"b": [1, 2.0], "a": "x"})).unwrap();
    let b = input_digest(&json!({"a": "x", "b": [1, 2.0]})).unwrap();
    assert_eq!(a, b, "key order does not matter (RFC 8785)");
    assert_eq!(a, hex::encode(Sha256::digest(br#"{"a":"x","b":[1,2]}"#)));
    assert_ne!(a, input_digest(&json!({"a": "y", "b": [1, 2]})).unwrap());
    assert_eq!(approval_key("deploy", &a), format!("deploy:{a}"));
}

#[test]
fn resolution_fails_closed() {
    for (v, want) in [
        (json!("allow"), ApprovalDecision::Allow),
        (json!({"decision": "allow", "reason": "ok"}), ApprovalDecision::Allow),
        (json!("deny"), ApprovalDecision::Deny),
        (json!("Allow"), ApprovalDecision::Deny),
        (json!("approve"), ApprovalDecision::Deny),
        (json!(true), ApprovalDecision::Deny),
        (Value::Null, ApprovalDecision::Deny),
        (json!({"decision": "ALLOW"}), ApprovalDecision::Deny),
        (json!({"allow": true}), ApprovalDecision::Deny),
    ] {
        assert_eq!(ApprovalDecision::normalize(&v), want, "{v}");
    }
    let dir = temp_dir("failclosed");
    let store = ApprovalStore::open(&dir).unwrap();
    let _approver = store.subscribe();
    let Ticket::Pending(p) = store.request("deploy", "d1", None).unwrap() else { panic!("pending") };
    let out = store.resolve_value(&p.key, &json!("yes please"), "typo").unwrap();
    assert_eq!((out.resolution.decision, out.applied), (ApprovalDecision::Deny, true));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_first_resolution_to_close_wins() {
    let dir = temp_dir("race");
    let store = Arc::new(ApprovalStore::open(&dir).unwrap());
    let _approver = store.subscribe();
    let Ticket::Pending(p) = store.request("deploy", "d1", None).unwrap() else { panic!("pending") };
    let first = store.resolve(&p.key, ApprovalDecision::Allow, "ops").unwrap();
    assert!(first.applied);
    let second = store.resolve(&p.key, ApprovalDecision::Deny, "late").unwrap();
    assert!(!second.applied);
    assert_eq!((second.resolution.decision, second.resolution.reason.as_str()), (ApprovalDecision::Allow, "ops"));

    // Many racing resolvers: exactly one applies and all see the same winner.
    let Ticket::Pending(p) = store.request("deploy", "d2", None).unwrap() else { panic!("pending") };
    let handles: Vec<_> = (0..8)
        .map(|n| {
            let (store, key) = (store.clone(), p.key.clone());
            std::thread::spawn(move || {
                let d = if n % 2 == 0 { ApprovalDecision::Allow } else { ApprovalDecision::Deny };
                store.resolve(&key, d, &format!("r{n}")).unwrap()
            })
        })
        .collect();
    let outs: Vec<ResolveOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(outs.iter().filter(|o| o.applied).count(), 1);
    assert!(outs.iter().all(|o| o.resolution == outs[0].resolution));
    // The file agrees after a restart.
    drop(store);
    let reopened = ApprovalStore::open(&dir).unwrap();
    assert_eq!(reopened.resolution(&p.key).unwrap(), Some(outs[0].resolution.clone()));
    assert_eq!(reopened.resolve("deploy:nope", ApprovalDecision::Allow, "").unwrap_err().code(), "approval_not_found");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_unanswered_approval_is_denied_after_its_deadline_and_a_late_allow_loses() {
    let dir = temp_dir("deadline");
    let clock = FakeClock::new(t0());
    let store = ApprovalStore::open_with_clock(&dir, clock.clock()).unwrap();
    let _approver = store.subscribe();
    let Ticket::Pending(p) = store.request("deploy", "d1", Some(t0() + secs(60))).unwrap() else { panic!() };
    assert_eq!(store.pending().unwrap().len(), 1);
    clock.set(t0() + secs(61));
    let late = store.resolve(&p.key, ApprovalDecision::Allow, "too late").unwrap();
    assert!(!late.applied, "the timeout closed first");
    assert_eq!((late.resolution.decision, late.resolution.by), (ApprovalDecision::Deny, ResolvedBy::Timeout));
    assert!(store.pending().unwrap().is_empty());

    // Another process with a later clock resolving a stored approval: the
    // deadline passed, so the timeout wins there too.
    let Ticket::Pending(p2) = store.request("deploy", "d2", Some(t0() + secs(120))).unwrap() else { panic!() };
    let other = ApprovalStore::open_with_clock(&dir, FakeClock::new(t0() + secs(500)).clock()).unwrap();
    let out = other.resolve(&p2.key, ApprovalDecision::Allow, "").unwrap();
    assert_eq!((out.applied, out.resolution.by), (false, ResolvedBy::Timeout));
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn wait_returns_the_resolution_or_the_timeout_deny() {
    let dir = temp_dir("wait");
    let store = Arc::new(ApprovalStore::open(&dir).unwrap());
    let _approver = store.subscribe();
    let Ticket::Pending(p) = store.request("deploy", "d1", Some(Utc::now() + secs(3600))).unwrap() else { panic!() };
    let waiter = {
        let (store, key) = (store.clone(), p.key.clone());
        tokio::spawn(async move { store.wait(&key).await })
    };
    tokio::task::yield_now().await;
    store.resolve(&p.key, ApprovalDecision::Allow, "ok").unwrap();
    let r = tokio::time::timeout(Duration::from_secs(30), waiter).await.unwrap().unwrap().unwrap();
    assert_eq!((r.decision, r.by), (ApprovalDecision::Allow, ResolvedBy::Host));

    // Nobody answers: the deadline denies.
    let Ticket::Pending(p) =
        store.request("deploy", "d2", Some(Utc::now() + chrono::Duration::milliseconds(50))).unwrap()
    else {
        panic!()
    };
    let r = tokio::time::timeout(Duration::from_secs(30), store.wait(&p.key)).await.unwrap().unwrap();
    assert_eq!((r.decision, r.by), (ApprovalDecision::Deny, ResolvedBy::Timeout));
    // A live decision after the timeout does not apply.
    let late = store.resolve(&p.key, ApprovalDecision::Allow, "late").unwrap();
    assert!(!late.applied);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn without_an_approver_the_request_is_rejected_naming_the_key_and_stays_recorded() {
    let dir = temp_dir("noapprover");
    let store = ApprovalStore::open(&dir).unwrap();
    assert!(!store.approver_attached());
    let digest = input_digest(&json!({"service": "api"})).unwrap();
    let key = approval_key("deploy", &digest);
    let err = store.request("deploy", &digest, Some(t0())).unwrap_err();
    assert_eq!(err.code(), "approval_required");
    assert!(err.to_string().contains(&format!("`{key}`")), "{err}");
    let pending = store.pending().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].key.as_str(), pending[0].deadline),
        (key.as_str(), None),
        "kept open for the next submission"
    );

    // The host approves out of band; the next submission proceeds at once.
    let host = ApprovalStore::open(&dir).unwrap();
    assert!(host.resolve(&key, ApprovalDecision::Allow, "reviewed").unwrap().applied);
    let resolution = host.resolution(&key).unwrap().expect("resolved");
    assert_eq!(store.request("deploy", &digest, None).unwrap(), Ticket::Resolved(resolution));
    // The approval was used up: a further submission asks again.
    assert_eq!(store.request("deploy", &digest, None).unwrap_err().code(), "approval_required");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn approvals_survive_a_restart_and_an_offline_resolution_applies_on_resume() {
    let dir = temp_dir("restart");
    let key = {
        let store = ApprovalStore::open(&dir).unwrap();
        let _approver = store.subscribe();
        let Ticket::Pending(p) = store.request("send_email", "d1", None).unwrap() else { panic!() };
        p.key
    }; // process exits
    // A host process resolves it while the runtime is down.
    {
        let host = ApprovalStore::open(&dir).unwrap();
        let pending = host.pending().unwrap();
        assert_eq!(pending.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(), [key.as_str()]);
        host.resolve(&key, ApprovalDecision::Allow, "approved overnight").unwrap();
    }
    // On resume the resolution applies without asking again.
    let resumed = ApprovalStore::open(&dir).unwrap();
    let mut events = resumed.subscribe();
    let ticket = resumed.request("send_email", "d1", None).unwrap();
    let Ticket::Resolved(r) = ticket else { panic!("not re-suspended: {ticket:?}") };
    assert_eq!((r.decision, r.reason.as_str()), (ApprovalDecision::Allow, "approved overnight"));
    assert!(events.try_recv().is_err(), "no new approval was announced");
    assert!(resumed.pending().unwrap().is_empty());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn hosts_are_notified_and_a_callback_can_approve() {
    let dir = temp_dir("notify");
    let store = Arc::new(ApprovalStore::open(&dir).unwrap());
    let mut rx = store.subscribe();
    let Ticket::Pending(p) = store.request("deploy", "d1", None).unwrap() else { panic!() };
    assert_eq!(rx.try_recv().unwrap(), ApprovalEvent::Pending(p.clone()));
    store.resolve(&p.key, ApprovalDecision::Deny, "no").unwrap();
    let ApprovalEvent::Resolved(r) = rx.try_recv().unwrap() else { panic!() };
    assert_eq!((r.key, r.decision), (p.key.clone(), ApprovalDecision::Deny));
    drop(rx);

    // A callback attaches an approver and may resolve from inside the notification.
    let weak = Arc::downgrade(&store);
    let id = store.on_event(Arc::new(move |ev: &ApprovalEvent| {
        if let (ApprovalEvent::Pending(p), Some(s)) = (ev, weak.upgrade()) {
            s.resolve(&p.key, ApprovalDecision::Allow, "auto").unwrap();
        }
    }));
    assert!(store.approver_attached());
    let Ticket::Pending(p) = store.request("deploy", "d2", None).unwrap() else { panic!() };
    assert_eq!(store.resolution(&p.key).unwrap().map(|r| r.decision), Some(ApprovalDecision::Allow));
    store.remove_callback(id);
    assert!(!store.approver_attached());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_corrupt_store_fails_to_open_and_a_torn_last_line_waits() {
    let dir = temp_dir("corrupt");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("approvals.jsonl"), "{\"type\":\"nonsense\"}\n").unwrap();
    assert_eq!(ApprovalStore::open(&dir).unwrap_err().code(), "approval_store_corrupt");

    let dir2 = temp_dir("torn");
    let store = ApprovalStore::open(&dir2).unwrap();
    let _approver = store.subscribe();
    store.request("deploy", "d1", None).unwrap();
    let path = dir2.join("approvals.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"type\":\"resolved\",\"key\":\"deploy:d1\"");
    std::fs::write(&path, &text).unwrap();
    let reopened = ApprovalStore::open(&dir2).unwrap();
    assert_eq!(reopened.pending().unwrap().len(), 1, "the torn record is not applied");
    // The next append starts on a line of its own; the torn record stays skipped.
    assert!(reopened.resolve("deploy:d1", ApprovalDecision::Allow, "after crash").unwrap().applied);
    let again = ApprovalStore::open(&dir2).unwrap();
    assert_eq!(again.resolution("deploy:d1").unwrap().map(|r| r.reason), Some("after crash".to_string()));
    std::fs::remove_dir_all(dir).ok();
    std::fs::remove_dir_all(dir2).ok();
}

#[test]
fn two_processes_racing_on_one_file_agree_on_the_first_resolution() {
    let dir = temp_dir("twoproc");
    let a = ApprovalStore::open(&dir).unwrap();
    let mut events = a.subscribe();
    let Ticket::Pending(p) = a.request("deploy", "d1", None).unwrap() else { panic!() };
    assert!(matches!(events.try_recv().unwrap(), ApprovalEvent::Pending(_)));
    // Joining the same pending approval announces it again and returns it.
    assert_eq!(a.request("deploy", "d1", None).unwrap(), Ticket::Pending(p.clone()));
    assert_eq!(events.try_recv().unwrap(), ApprovalEvent::Pending(p.clone()));

    let b = ApprovalStore::open(&dir).unwrap();
    assert!(b.resolve(&p.key, ApprovalDecision::Deny, "from b").unwrap().applied);
    // `a` has not re-read the file yet: its own resolution loses in file order.
    let out = a.resolve(&p.key, ApprovalDecision::Allow, "from a").unwrap();
    assert!(!out.applied);
    assert_eq!((out.resolution.decision, out.resolution.reason.as_str()), (ApprovalDecision::Deny, "from b"));
    let ApprovalEvent::Resolved(seen) = events.try_recv().unwrap() else { panic!("resolution event") };
    assert_eq!(seen.reason, "from b", "the other process's resolution is announced");
    std::fs::remove_dir_all(dir).ok();
}
