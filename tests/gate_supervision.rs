//! Supervision: filters, intents without values, allow/deny/escalate,
//! timeouts failing closed, no subscriber = no-op.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use car_runtime::gate::*;
use car_runtime::ir::{ActionProposal, Reversibility, parse_proposal};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;

fn proposal(tool: &str, reversibility: &str) -> ActionProposal {
    parse_proposal(
        &json!({
            "id": "p1", "source": "agent-7", "timestamp": "2026-01-01T00:00:00Z",
            "actions": [
                {"id": "a1", "type": "tool_call", "tool": tool, "parameters": {"to": "ops@example.com", "body": "secret plan"}, "reversibility": reversibility},
                {"id": "a2", "type": "state_read", "parameters": {}, "reversibility": "reversible"}
            ]
        })
        .to_string(),
    )
    .unwrap()
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn fake_clock() -> (Arc<Mutex<DateTime<Utc>>>, car_runtime::approval::store::Clock) {
    let t = Arc::new(Mutex::new(t0()));
    let c = t.clone();
    (t, Arc::new(move || *c.lock().unwrap()))
}

#[test]
fn with_no_subscriber_the_gate_is_a_no_op() {
    let hub = SupervisionHub::default();
    assert_eq!(hub.admit(&proposal("send_email", "irreversible"), Some("s1")).unwrap(), None);
    assert!(hub.pending(None).unwrap().is_empty());
}

#[test]
fn filters_select_by_tool_session_and_minimum_reversibility() {
    let p = proposal("send_email", "compensable");
    let f = |v: serde_json::Value| serde_json::from_value::<SupervisionFilter>(v).unwrap();
    assert!(f(json!({})).matches(&p, None));
    assert!(f(json!({"tools": ["send_email"]})).matches(&p, None));
    assert!(!f(json!({"tools": ["deploy"]})).matches(&p, None));
    assert!(f(json!({"sessions": ["s1"]})).matches(&p, Some("s1")));
    assert!(!f(json!({"sessions": ["s1"]})).matches(&p, Some("s2")));
    assert!(!f(json!({"sessions": ["s1"]})).matches(&p, None));
    assert!(f(json!({"min_reversibility": "compensable"})).matches(&p, None));
    assert!(f(json!({"min_reversibility": "reversible"})).matches(&p, None));
    assert!(!f(json!({"min_reversibility": "irreversible"})).matches(&p, None));
    assert!(!f(json!({"tools": ["send_email"], "min_reversibility": "irreversible"})).matches(&p, None));
}

#[test]
fn intents_carry_key_names_and_a_digest_never_values() {
    let hub = SupervisionHub::default();
    let (sub, mut rx) = hub.subscribe("sup-1", SupervisionFilter::default()).unwrap();
    assert_eq!((sub.subscribed, sub.decision_timeout_ms, sub.supervisors), (true, 30_000, 1));
    let intent = hub.admit(&proposal("send_email", "irreversible"), Some("s1")).unwrap().expect("parked");
    assert_eq!(rx.try_recv().unwrap(), intent, "the supervisor is notified");
    assert_eq!((intent.proposal_id.as_str(), intent.source.as_str()), ("p1", "agent-7"));
    assert_eq!((intent.session_id.as_deref(), intent.reversibility), (Some("s1"), Reversibility::Irreversible));
    let a = &intent.actions[0];
    assert_eq!(a.parameter_keys, ["body", "to"]);
    assert_eq!(a.parameters_digest, input_digest(&json!({"to": "ops@example.com", "body": "secret plan"})).unwrap());
    let text = serde_json::to_string(&intent).unwrap();
    assert!(!text.contains("secret plan") && !text.contains("ops@example.com"), "{text}");
    assert_eq!(hub.pending(Some("sup-1")).unwrap(), vec![intent.clone()]);
    assert!(hub.pending(Some("someone-else")).unwrap().is_empty());
}

#[test]
fn decisions_first_wins_and_deny_or_escalate_need_a_reason() {
    let hub = SupervisionHub::default();
    let (_s, _rx) = hub.subscribe("sup", SupervisionFilter::default()).unwrap();
    let id = hub.admit(&proposal("deploy", "irreversible"), None).unwrap().unwrap().id;
    let no_reason = SupervisorDecision { kind: SupervisorVerdict::Deny, reason: None };
    assert_eq!(hub.decide(&id, &no_reason).unwrap_err().code(), "invalid_argument");
    let escalate = SupervisorDecision { kind: SupervisorVerdict::Escalate, reason: Some("needs a human".into()) };
    let out = hub.decide(&id, &escalate).unwrap();
    assert!(!out.admits());
    assert_eq!(out.rejection_reason().unwrap(), "escalated by supervisor: needs a human");
    let allow = SupervisorDecision { kind: SupervisorVerdict::Allow, reason: None };
    assert_eq!(hub.decide(&id, &allow).unwrap_err().code(), "intent_already_decided");
    assert_eq!(hub.decide("intent-nope", &allow).unwrap_err().code(), "intent_not_found");
    assert_eq!(hub.outcome(&id).unwrap(), Some(out));
    assert!(hub.pending(None).unwrap().is_empty());
}

#[test]
fn unanswered_intents_are_rejected_after_the_decision_timeout() {
    let (t, clock) = fake_clock();
    let hub = SupervisionHub::with_clock(Duration::from_secs(10), clock);
    let (_s, _rx) =
        hub.subscribe("sup", SupervisionFilter { tools: Some(vec!["deploy".into()]), ..Default::default() }).unwrap();
    assert_eq!(hub.admit(&proposal("send_email", "irreversible"), None).unwrap(), None, "not matching: no-op");
    let id = hub.admit(&proposal("deploy", "irreversible"), None).unwrap().unwrap().id;
    *t.lock().unwrap() = t0() + chrono::Duration::seconds(11);
    assert!(hub.pending(None).unwrap().is_empty());
    assert_eq!(hub.outcome(&id).unwrap(), Some(IntentOutcome::Expired));
    assert!(!IntentOutcome::Expired.admits());
    let allow = SupervisorDecision { kind: SupervisorVerdict::Allow, reason: None };
    assert_eq!(hub.decide(&id, &allow).unwrap_err().code(), "intent_expired", "a late allow never applies");
    assert!(hub.unsubscribe("sup").unwrap());
    assert!(!hub.unsubscribe("sup").unwrap());
    assert_eq!(hub.admit(&proposal("deploy", "irreversible"), None).unwrap(), None);
    assert_eq!(hub.prune_decided().unwrap(), 1);
}

#[tokio::test]
async fn a_parked_proposal_waits_for_the_decision_or_the_timeout() {
    let hub = Arc::new(SupervisionHub::new(Duration::from_secs(3600)));
    let (_s, mut rx) = hub.subscribe("sup", SupervisionFilter::default()).unwrap();
    let id = hub.admit(&proposal("deploy", "irreversible"), None).unwrap().unwrap().id;
    let waiter = {
        let (hub, id) = (hub.clone(), id.clone());
        tokio::spawn(async move { hub.wait(&id).await })
    };
    let seen = rx.recv().await.unwrap();
    hub.decide(&seen.id, &SupervisorDecision { kind: SupervisorVerdict::Allow, reason: Some("fine".into()) }).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), waiter).await.unwrap().unwrap().unwrap();
    assert_eq!(out, IntentOutcome::Allowed { reason: Some("fine".into()) });
    assert!(out.admits());

    let quick = SupervisionHub::new(Duration::from_millis(50));
    let (_s2, _rx2) = quick.subscribe("sup", SupervisionFilter::default()).unwrap();
    let id = quick.admit(&proposal("deploy", "irreversible"), None).unwrap().unwrap().id;
    let out = tokio::time::timeout(Duration::from_secs(30), quick.wait(&id)).await.unwrap().unwrap();
    assert_eq!(out, IntentOutcome::Expired);
    let deny = SupervisorDecision { kind: SupervisorVerdict::Deny, reason: Some("late".into()) };
    assert_eq!(quick.decide(&id, &deny).unwrap_err().code(), "intent_expired");
}

#[test]
fn classified_reversibility_raises_the_declared_one() {
    let hub = SupervisionHub::default();
    let f = SupervisionFilter { min_reversibility: Some(Reversibility::Irreversible), ..Default::default() };
    let (_s, _rx) = hub.subscribe("sup", f.clone()).unwrap();
    let p = proposal("send_email", "reversible");
    assert!(!f.matches(&p, None), "declared reversible");
    assert!(f.matches_contract(&p, None, Reversibility::Irreversible));
    assert_eq!(hub.admit(&p, None).unwrap(), None, "the declared value alone slips past the filter");
    let intent = hub
        .admit_classified(&p, Some("s1"), &[Reversibility::Irreversible, Reversibility::Reversible])
        .unwrap()
        .expect("the classifier's verdict parks it");
    assert_eq!(intent.reversibility, Reversibility::Irreversible);
    assert_eq!(
        intent.actions.iter().map(|a| a.reversibility).collect::<Vec<_>>(),
        [Reversibility::Irreversible, Reversibility::Reversible]
    );
    // A classifier never lowers a declared value; a missing entry keeps it.
    let worse = proposal("send_email", "irreversible");
    let i2 = hub.admit_classified(&worse, None, &[Reversibility::Reversible]).unwrap().unwrap();
    assert_eq!(i2.actions[0].reversibility, Reversibility::Irreversible);
    assert_eq!(i2.actions[1].reversibility, Reversibility::Reversible);
}

#[test]
fn subscribers_withdrawal_and_bounded_retention() {
    let hub = SupervisionHub::new(Duration::from_secs(60));
    assert_eq!(hub.decision_timeout(), Duration::from_secs(60));
    assert!(!hub.has_subscribers());
    assert!(!hub.is_subscribed("sup").unwrap());
    let (_s, rx) = hub.subscribe("sup", SupervisionFilter::default()).unwrap();
    assert!(hub.has_subscribers() && hub.is_subscribed("sup").unwrap());
    let ids: Vec<String> =
        (0..3).map(|_| hub.admit(&proposal("deploy", "irreversible"), None).unwrap().unwrap().id).collect();
    // The submitter leaves: withdrawn as expired; a decided intent keeps its outcome.
    assert!(hub.withdraw(&ids[0]).unwrap());
    assert!(!hub.withdraw(&ids[0]).unwrap());
    assert!(!hub.withdraw("intent-nope").unwrap());
    assert_eq!(hub.outcome(&ids[0]).unwrap(), Some(IntentOutcome::Expired));
    let allow = SupervisorDecision { kind: SupervisorVerdict::Allow, reason: None };
    assert_eq!(hub.decide(&ids[0], &allow).unwrap_err().code(), "intent_expired");
    hub.decide(&ids[1], &allow).unwrap();
    assert!(!hub.withdraw(&ids[1]).unwrap());
    assert_eq!(hub.outcome(&ids[1]).unwrap(), Some(IntentOutcome::Allowed { reason: None }));
    assert_eq!(hub.pending(None).unwrap().iter().map(|i| i.id.clone()).collect::<Vec<_>>(), [ids[2].clone()]);
    // Keep the newest decided one: the oldest is forgotten, the undecided stays.
    assert_eq!(hub.prune_decided_keep(1).unwrap(), 1);
    assert_eq!(hub.decide(&ids[0], &allow).unwrap_err().code(), "intent_not_found");
    assert_eq!(hub.decide(&ids[1], &allow).unwrap_err().code(), "intent_already_decided");
    assert_eq!(hub.prune_decided_keep(1).unwrap(), 0);
    assert_eq!(hub.pending(None).unwrap().len(), 1);
    // A supervisor whose receiver is gone no longer counts.
    drop(rx);
    assert!(!hub.has_subscribers() && !hub.is_subscribed("sup").unwrap());
    assert_eq!(hub.admit(&proposal("deploy", "irreversible"), None).unwrap(), None);
}
