//! One conformance suite for the store backends, run against the embedded
//! stores and against PostgreSQL (feature `postgres`, a schema per test so
//! the tests run in parallel).
//!
//! PostgreSQL: `CAR_TEST_PG_URL` (`scripts/test` starts a throwaway
//! cluster and sets it). Without it the PostgreSQL cases are skipped with a
//! message, except under `CI=true`, where a missing database fails.

use std::sync::Arc;
use std::time::Duration;

use car_runtime::approval::store::{ApprovalDecision, ApprovalStore, ResolvedBy, Ticket};
use car_runtime::events::{ChainVerification, EventKind, EventQuery, RetentionPolicy};
use car_runtime::store::{Backends, CasOutcome, Expect, NewEvent};
use serde_json::json;

/// A backend under test and what tampers with it.
struct Under {
    b: Backends,
    /// Keeps an approver attached (the embedded store refuses requests
    /// with none).
    _approver: tokio::sync::broadcast::Receiver<car_runtime::approval::store::ApprovalEvent>,
    kind: Kind,
    _dir: Option<TempDir>,
}

enum Kind {
    Embedded,
    #[cfg(feature = "postgres")]
    Pg {
        url: String,
        schema: String,
        pg: car_runtime::store::postgres::PgBackends,
    },
}

struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    let p = std::env::temp_dir().join(format!("car-store-{tag}-{}", uuid_like()));
    std::fs::create_dir_all(&p).unwrap();
    TempDir(p)
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

fn embedded() -> Under {
    let dir = temp_dir("emb");
    let b = Backends::embedded(&dir.0).unwrap();
    let approver = b.approvals.subscribe();
    Under { b, _approver: approver, kind: Kind::Embedded, _dir: Some(dir) }
}

#[cfg(feature = "postgres")]
fn pg_url() -> Option<String> {
    match std::env::var("CAR_TEST_PG_URL").ok().filter(|u| !u.is_empty()) {
        Some(u) => Some(u),
        None if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true and CAR_TEST_PG_URL is not set: the PostgreSQL conformance suite must run in CI")
        }
        None => {
            eprintln!("skipped: CAR_TEST_PG_URL is not set (scripts/test starts a throwaway PostgreSQL)");
            None
        }
    }
}

#[cfg(feature = "postgres")]
async fn postgres(test: &str) -> Option<Under> {
    use car_runtime::store::postgres::PgBackends;
    let url = pg_url()?;
    let schema = format!("t_{test}_{}", uuid_like());
    PgBackends::drop_schema(&url, &schema).await.unwrap();
    let pg = PgBackends::connect(&url, &schema, "writer-a").await.unwrap();
    let b = pg.backends();
    let approver = b.approvals.subscribe();
    Some(Under { b, _approver: approver, kind: Kind::Pg { url, schema, pg }, _dir: None })
}

#[cfg(feature = "postgres")]
impl Drop for Under {
    fn drop(&mut self) {
        if let Kind::Pg { url, schema, .. } = &self.kind {
            let (url, schema) = (url.clone(), schema.clone());
            // A runtime of its own: the test's is shutting down.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                let _ = rt.block_on(car_runtime::store::postgres::PgBackends::drop_schema(&url, &schema));
            })
            .join();
        }
    }
}

/// Generates one test per backend for a conformance case.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod embedded_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&super::embedded()).await;
                }
            )*
        }
        #[cfg(feature = "postgres")]
        mod postgres_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(u) = super::postgres(stringify!($name)).await else { return };
                    super::$name(&u).await;
                }
            )*
        }
    };
}

conformance!(
    cas,
    tenancy,
    rollback_restores_only_unmoved_keys,
    first_closing_wins,
    many_racing_resolutions,
    deadline_closes_as_a_deny,
    consume_once,
    rate_windows,
    events_chain_query_and_retention,
    tamper_detection,
    checkpoints_claim_by_lease,
    always_rules,
    tier_ledger_shared_by_two_hosts,
);

async fn always_rules(u: &Under) {
    use car_runtime::approval::rules::always_rule_of;
    let a = &u.b.approvals;
    let shared = a.persist_always(&always_rule_of("deploy", true, "r1", "fine")).await.unwrap();
    match &u.kind {
        // The embedded store keeps none: the host's file does.
        Kind::Embedded => {
            assert!(!shared);
            assert_eq!(a.always_rule("deploy").await.unwrap(), None);
        }
        #[cfg(feature = "postgres")]
        Kind::Pg { .. } => {
            assert!(shared);
            assert!(a.persist_always(&always_rule_of("deploy", false, "r2", "")).await.unwrap());
            let r = a.always_rule("deploy").await.unwrap().unwrap();
            assert_eq!(r.decision, car_runtime::gate::Decision::Deny, "the latest decision wins");
            assert!(r.reason.contains("by r2"), "{}", r.reason);
            assert_eq!(a.always_rule("other").await.unwrap(), None);
            // Another handle on the database reads the same rule.
            let b = second_handle(u).await;
            assert_eq!(b.always_rule("deploy").await.unwrap().unwrap().decision, car_runtime::gate::Decision::Deny);
        }
    }
}

fn checkpoint(id: &str, n: u32) -> car_runtime::checkpoint::Checkpoint {
    let proposal = car_runtime::ir::parse_proposal(
        &json!({"id": "p", "actions": [{"id": "a", "type": "tool_call", "tool": "t"}]}).to_string(),
    )
    .unwrap();
    let now = chrono::Utc::now();
    car_runtime::checkpoint::Checkpoint {
        id: id.to_string(),
        proposal,
        tenant: None,
        owner: Some("agent:x".into()),
        results: vec![None],
        writes: vec![car_runtime::checkpoint::StateWrite {
            key: "k".into(),
            before: None,
            after: Some(json!("\u{0}nul")),
            earlier: vec![Some(json!(1)), None],
        }],
        pending: vec![car_runtime::checkpoint::PendingAction {
            action_id: "a".into(),
            tool: Some("t".into()),
            approval_key: "t:abc".into(),
        }],
        waiting: vec![],
        tool_calls: 0,
        retries: 0,
        duration_ms: 1.5,
        created_at: now + chrono::Duration::milliseconds(i64::from(n)),
        suspended_at: now,
        suspensions: n,
        running: false,
    }
}

async fn checkpoints_claim_by_lease(u: &Under) {
    use car_runtime::checkpoint::Claim;
    let c = &u.b.checkpoints;
    let long = Duration::from_secs(60);
    assert_eq!(c.claim("susp-none", "a", long).await.unwrap(), Claim::NotFound);
    let one = checkpoint("susp-1", 1);
    c.save(&one).await.unwrap();
    c.save(&checkpoint("susp-2", 2)).await.unwrap();
    // Read back exactly as saved (a NUL in a value included).
    assert_eq!(c.get("susp-1").await.unwrap(), Some(one));
    let ids: Vec<String> = c.list().await.unwrap().into_iter().map(|x| x.id).collect();
    assert_eq!(ids, ["susp-1", "susp-2"]);
    // 16 racing claimants: exactly one wins.
    let mut tasks = Vec::new();
    for i in 0..16 {
        let c = c.clone();
        tasks.push(tokio::spawn(
            async move { c.claim("susp-1", &format!("r{i}"), Duration::from_secs(60)).await.unwrap() },
        ));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Claim::Claimed(cp) => {
                won += 1;
                assert_eq!(cp.pending[0].approval_key, "t:abc");
            }
            Claim::Held { by, .. } => assert!(by.starts_with('r')),
            Claim::NotFound => panic!("found"),
        }
    }
    assert_eq!(won, 1);
    // Only the claimant removes; a release frees it; an expired lease is taken over.
    c.save(&checkpoint("susp-3", 3)).await.unwrap();
    assert!(matches!(c.claim("susp-3", "a", Duration::from_millis(1)).await.unwrap(), Claim::Claimed(_)));
    c.remove("susp-3", "b").await.unwrap();
    assert!(c.get("susp-3").await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(matches!(c.claim("susp-3", "b", long).await.unwrap(), Claim::Claimed(_)));
    assert!(matches!(c.claim("susp-3", "a", long).await.unwrap(), Claim::Held { .. }));
    c.release("susp-3", "b").await.unwrap();
    assert!(matches!(c.claim("susp-3", "a", long).await.unwrap(), Claim::Claimed(_)));
    c.remove("susp-3", "a").await.unwrap();
    assert_eq!(c.claim("susp-3", "a", long).await.unwrap(), Claim::NotFound);
    // Saving again (a re-suspension) replaces the body and frees the claim.
    assert!(matches!(c.claim("susp-2", "a", long).await.unwrap(), Claim::Claimed(_)));
    c.save(&checkpoint("susp-2", 7)).await.unwrap();
    match c.claim("susp-2", "b", long).await.unwrap() {
        Claim::Claimed(cp) => assert_eq!(cp.suspensions, 7),
        other => panic!("{other:?}"),
    }
    #[cfg(feature = "postgres")]
    if let Kind::Pg { pg, url, schema } = &u.kind {
        // A database of schema 1 (before checkpoints and shared rules) is migrated at start-up.
        pg.execute_raw("DROP TABLE car_checkpoints; DROP TABLE car_always_rules; UPDATE car_schema SET version = 1")
            .await
            .unwrap();
        let again = car_runtime::store::postgres::PgBackends::connect(url, schema, "w2").await.unwrap();
        let b = again.backends();
        assert_eq!(b.checkpoints.list().await.unwrap(), vec![]);
        b.checkpoints.save(&checkpoint("susp-9", 9)).await.unwrap();
        assert_eq!(b.checkpoints.list().await.unwrap().len(), 1);
    }
}

async fn cas(u: &Under) {
    let s = &u.b.state;
    assert_eq!(s.put(None, "k", Some(json!(1)), Expect::Absent).await.unwrap(), CasOutcome::Written { version: 1 });
    assert_eq!(s.put(None, "k", Some(json!(2)), Expect::Absent).await.unwrap(), CasOutcome::Conflict { current: 1 });
    assert_eq!(
        s.put(None, "k", Some(json!(2)), Expect::Version(0)).await.unwrap(),
        CasOutcome::Conflict { current: 1 }
    );
    assert_eq!(
        s.put(None, "k", Some(json!(2)), Expect::Version(7)).await.unwrap(),
        CasOutcome::Conflict { current: 1 }
    );
    // Nothing was written by the conflicts.
    assert_eq!(s.get(None, "k").await.unwrap().value, Some(json!(1)));
    assert_eq!(s.put(None, "k", Some(json!(2)), Expect::Version(1)).await.unwrap(), CasOutcome::Written { version: 2 });
    assert_eq!(s.put(None, "k", Some(json!(3)), Expect::Any).await.unwrap(), CasOutcome::Written { version: 3 });
    // A delete keeps the version; the key is absent again.
    assert_eq!(s.put(None, "k", None, Expect::Version(3)).await.unwrap(), CasOutcome::Written { version: 4 });
    let got = s.get(None, "k").await.unwrap();
    assert_eq!((got.value, got.version), (None, 4));
    assert!(s.keys(None).await.unwrap().is_empty());
    assert_eq!(s.put(None, "k", Some(json!(null)), Expect::Absent).await.unwrap(), CasOutcome::Written { version: 5 });
    // JSON null is a value.
    assert_eq!(s.get(None, "k").await.unwrap().value, Some(json!(null)));
    assert_eq!(s.keys(None).await.unwrap(), ["k"]);
    // Version 0 expects a key never written.
    assert_eq!(
        s.put(None, "fresh", Some(json!("x")), Expect::Version(0)).await.unwrap(),
        CasOutcome::Written { version: 1 }
    );

    // Racing writers with the same expected version: exactly one wins.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let st = u.b.state.clone();
        tasks
            .push(tokio::spawn(async move { st.put(None, "race", Some(json!(i)), Expect::Version(0)).await.unwrap() }));
    }
    let mut wins = 0;
    for t in tasks {
        if matches!(t.await.unwrap(), CasOutcome::Written { .. }) {
            wins += 1;
        }
    }
    assert_eq!(wins, 1);
}

async fn tenancy(u: &Under) {
    let s = &u.b.state;
    s.put(Some("acme"), "k", Some(json!("a")), Expect::Any).await.unwrap();
    assert_eq!(s.get(Some("acme"), "k").await.unwrap().value, Some(json!("a")));
    assert_eq!(s.get(Some("globex"), "k").await.unwrap().value, None);
    assert_eq!(s.get(None, "k").await.unwrap().value, None);
    assert!(s.put(None, "tenant:acme:k", Some(json!(1)), Expect::Any).await.is_err());
    assert!(s.put(Some("a:b"), "k", Some(json!(1)), Expect::Any).await.is_err());
    assert_eq!(s.keys(Some("acme")).await.unwrap(), ["k"]);
    assert!(s.keys(Some("globex")).await.unwrap().is_empty());
    assert!(s.keys(None).await.unwrap().is_empty());

    // One tenant's approval never applies to another tenant's identical call.
    let a = &u.b.approvals;
    let Ticket::Pending(p) = a.request(Some("acme"), "deploy", "d1", None).await.unwrap() else { panic!("pending") };
    assert!(a.resolve(&p.key, ApprovalDecision::Allow, "ok").await.unwrap().applied);
    match a.request(Some("globex"), "deploy", "d1", None).await.unwrap() {
        Ticket::Pending(q) => assert_ne!(q.key, p.key),
        Ticket::Resolved(r) => panic!("globex got acme's approval: {r:?}"),
    }
    match a.request(None, "deploy", "d1", None).await.unwrap() {
        Ticket::Pending(q) => assert_ne!(q.key, p.key),
        Ticket::Resolved(r) => panic!("the unscoped call got acme's approval: {r:?}"),
    }
    assert!(matches!(a.request(Some("acme"), "deploy", "d1", None).await.unwrap(), Ticket::Resolved(_)));

    // Rate windows are per tenant.
    let r = &u.b.rates;
    let w = Duration::from_secs(60);
    assert_eq!(r.try_acquire(Some("acme"), "tool", 1, w).await.unwrap(), None);
    assert!(r.try_acquire(Some("acme"), "tool", 1, w).await.unwrap().is_some());
    assert_eq!(r.try_acquire(Some("globex"), "tool", 1, w).await.unwrap(), None);
    assert_eq!(r.try_acquire(None, "tool", 1, w).await.unwrap(), None);
}

/// A rollback written as the engine does it: restore a key only when it is
/// still at the version this writer left it (a compare-and-set), and
/// report the keys another writer moved.
async fn rollback_restores_only_unmoved_keys(u: &Under) {
    let s = &u.b.state;
    for k in ["mine", "theirs"] {
        s.put(None, k, Some(json!("orig")), Expect::Any).await.unwrap();
    }
    let mut left = Vec::new();
    for k in ["mine", "theirs"] {
        let before = s.get(None, k).await.unwrap();
        let CasOutcome::Written { version } =
            s.put(None, k, Some(json!("tx")), Expect::Version(before.version)).await.unwrap()
        else {
            panic!("write")
        };
        left.push((k, before.value, version));
    }
    // Another writer moves one key.
    s.put(None, "theirs", Some(json!("other")), Expect::Any).await.unwrap();
    let mut not_restored = Vec::new();
    for (k, prior, version) in left {
        match s.put(None, k, prior, Expect::Version(version)).await.unwrap() {
            CasOutcome::Written { .. } => {}
            CasOutcome::Conflict { .. } => not_restored.push(k),
        }
    }
    assert_eq!(not_restored, ["theirs"]);
    assert_eq!(s.get(None, "mine").await.unwrap().value, Some(json!("orig")));
    assert_eq!(s.get(None, "theirs").await.unwrap().value, Some(json!("other")));
}

/// More racing resolutions than a backend has connections (PostgreSQL's
/// pool holds 16): every one is answered, exactly one per approval applied.
/// A losing resolution once held its connection while asking for another,
/// so 16 losers at once deadlocked the pool.
async fn many_racing_resolutions(u: &Under) {
    let mut keys = Vec::new();
    for i in 0..40 {
        let Ticket::Pending(p) = u.b.approvals.request(None, "tool", &format!("many{i}"), None).await.unwrap() else {
            panic!("pending")
        };
        keys.push(p.key);
    }
    let mut tasks = Vec::new();
    for key in &keys {
        for d in [ApprovalDecision::Allow, ApprovalDecision::Deny] {
            let (ap, key) = (u.b.approvals.clone(), key.clone());
            tasks.push(tokio::spawn(async move { ap.resolve(&key, d, "race").await.unwrap().applied }));
        }
    }
    let all = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(tasks))
        .await
        .expect("every resolution is answered");
    let applied: Vec<bool> = all.into_iter().map(Result::unwrap).collect();
    for pair in applied.chunks(2) {
        assert_eq!(pair.iter().filter(|a| **a).count(), 1, "{applied:?}");
    }
}

async fn first_closing_wins(u: &Under) {
    let a = &u.b.approvals;
    for round in 0..5 {
        let digest = format!("race{round}");
        let Ticket::Pending(p) = a.request(None, "tool", &digest, None).await.unwrap() else { panic!("pending") };
        let mut tasks = Vec::new();
        for i in 0..6 {
            let ap = u.b.approvals.clone();
            let key = p.key.clone();
            let d = if i % 2 == 0 { ApprovalDecision::Allow } else { ApprovalDecision::Deny };
            tasks.push(tokio::spawn(async move { ap.resolve(&key, d, &format!("r{i}")).await.unwrap() }));
        }
        let mut outcomes = Vec::new();
        for t in tasks {
            outcomes.push(t.await.unwrap());
        }
        let applied: Vec<_> = outcomes.iter().filter(|o| o.applied).collect();
        assert_eq!(applied.len(), 1, "exactly one resolution closes the approval: {outcomes:?}");
        // Every caller is told the same resolution in force.
        for o in &outcomes {
            assert_eq!(o.resolution.decision, applied[0].resolution.decision);
            assert_eq!(o.resolution.reason, applied[0].resolution.reason);
        }
        let r = a.wait(&p.key, None).await.unwrap();
        assert_eq!(r.decision, applied[0].resolution.decision);
    }
    // A waiter is woken by a resolution made through another handle.
    let Ticket::Pending(p) = a.request(None, "tool", "wake", None).await.unwrap() else { panic!("pending") };
    let other = second_handle(u).await;
    let key = p.key.clone();
    let resolver = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        other.resolve(&key, ApprovalDecision::Allow, "from the other host").await.unwrap()
    });
    let r = a.wait(&p.key, None).await.unwrap();
    assert_eq!(r.decision, ApprovalDecision::Allow);
    assert!(resolver.await.unwrap().applied);
}

/// Another handle on the same approvals: another store of the same
/// directory (embedded) or another pool and listener, as a second host
/// (PostgreSQL).
async fn second_handle(u: &Under) -> Arc<dyn car_runtime::store::ApprovalBackend> {
    match &u.kind {
        Kind::Embedded => {
            let dir = u._dir.as_ref().unwrap().0.clone();
            let s = ApprovalStore::open(&dir).unwrap();
            Arc::new(s)
        }
        #[cfg(feature = "postgres")]
        Kind::Pg { url, schema, .. } => {
            let b = car_runtime::store::postgres::PgBackends::connect(url, schema, "writer-b").await.unwrap();
            b.backends().approvals
        }
    }
}

async fn deadline_closes_as_a_deny(u: &Under) {
    let a = &u.b.approvals;
    let deadline = chrono::Utc::now() + chrono::Duration::milliseconds(150);
    let Ticket::Pending(p) = a.request(None, "tool", "late", Some(deadline)).await.unwrap() else { panic!("pending") };
    let r = a.wait(&p.key, None).await.unwrap();
    assert_eq!((r.decision, r.by), (ApprovalDecision::Deny, ResolvedBy::Timeout));
    // A resolution after the deadline is not applied.
    let o = a.resolve(&p.key, ApprovalDecision::Allow, "too late").await.unwrap_or_else(|e| {
        // Used up already (embedded keeps it; either way it is not applied).
        panic!("resolve after the deadline: {e}")
    });
    assert!(!o.applied);
    assert_eq!(o.resolution.by, ResolvedBy::Timeout);

    // The deadline given to wait applies to an approval that has none.
    let Ticket::Pending(p) = a.request(None, "tool", "late2", None).await.unwrap() else { panic!("pending") };
    let r = a.wait(&p.key, Some(chrono::Utc::now() + chrono::Duration::milliseconds(100))).await.unwrap();
    assert_eq!(r.decision, ApprovalDecision::Deny);
    assert!(a.pending().await.unwrap().iter().all(|q| q.key != p.key));
}

async fn consume_once(u: &Under) {
    let a = &u.b.approvals;
    let Ticket::Pending(p) = a.request(None, "tool", "once", None).await.unwrap() else { panic!("pending") };
    assert_eq!(a.pending().await.unwrap().iter().filter(|q| q.key == p.key).count(), 1);
    assert!(a.resolve(&p.key, ApprovalDecision::Allow, "yes").await.unwrap().applied);
    assert!(a.pending().await.unwrap().iter().all(|q| q.key != p.key));
    assert_eq!(a.wait(&p.key, None).await.unwrap().decision, ApprovalDecision::Allow);
    // Used up: a second wait finds nothing; the next request asks afresh.
    assert!(a.wait(&p.key, None).await.is_err());
    assert!(matches!(a.request(None, "tool", "once", None).await.unwrap(), Ticket::Pending(_)));
    // A resolution met by a request (no waiter) is used up by that request:
    // the next request asks afresh instead of applying it again.
    let Ticket::Pending(p) = a.request(None, "tool", "met", None).await.unwrap() else { panic!("pending") };
    assert!(a.resolve(&p.key, ApprovalDecision::Allow, "yes").await.unwrap().applied);
    assert!(
        matches!(a.request(None, "tool", "met", None).await.unwrap(), Ticket::Resolved(r) if r.decision == ApprovalDecision::Allow)
    );
    assert!(matches!(a.request(None, "tool", "met", None).await.unwrap(), Ticket::Pending(_)));
    assert!(a.wait(&p.key, Some(chrono::Utc::now())).await.is_ok_and(|r| r.decision == ApprovalDecision::Deny));
}

async fn rate_windows(u: &Under) {
    let r = &u.b.rates;
    let w = Duration::from_secs(60);
    for _ in 0..3 {
        assert_eq!(r.try_acquire(None, "t", 3, w).await.unwrap(), None);
    }
    let wait = r.try_acquire(None, "t", 3, w).await.unwrap().expect("the window is full");
    assert!(wait > Duration::ZERO && wait <= w, "{wait:?}");
    assert_eq!(r.try_acquire(None, "other", 3, w).await.unwrap(), None);
    // A short window frees its slots; `acquire` waits for one.
    let short = Duration::from_millis(100);
    assert_eq!(r.try_acquire(None, "s", 1, short).await.unwrap(), None);
    r.acquire(None, "s", 1, short).await.unwrap();
    assert!(r.acquire(None, "z", 0, short).await.is_err());
    // Racing callers never take more than the window allows.
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let rr = u.b.rates.clone();
        tasks.push(tokio::spawn(async move { rr.try_acquire(None, "burst", 5, w).await.unwrap().is_none() }));
    }
    let mut granted = 0;
    for t in tasks {
        granted += usize::from(t.await.unwrap());
    }
    assert_eq!(granted, 5);
}

async fn events_chain_query_and_retention(u: &Under) {
    let e = &u.b.events;
    assert_eq!(e.chain_head().await.unwrap(), None);
    let batch: Vec<NewEvent> = (0..5)
        .map(|i| NewEvent {
            kind: if i % 2 == 0 { EventKind::StateChanged } else { EventKind::ActionSucceeded },
            proposal_id: Some(format!("p{}", i % 2)),
            action_id: Some(format!("a{i}")),
            data: json!({"n": i}),
        })
        .collect();
    let ids = e.append(batch).await.unwrap();
    assert_eq!(ids.len(), 5);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    e.append(vec![NewEvent::new(EventKind::ProposalCompleted, json!({"aborted": false}))]).await.unwrap();
    let head = e.chain_head().await.unwrap().expect("a chain head");
    assert_eq!(e.verify().await.unwrap(), ChainVerification::Verified(6));
    let q = EventQuery { kinds: vec!["StateChanged".into()], ..EventQuery::default() };
    let got = e.query(&q).await.unwrap();
    assert_eq!(got.len(), 3);
    // Newest first.
    assert!(got.windows(2).all(|w| w[0].id > w[1].id));
    let q = EventQuery { proposal_id: Some("p1".into()), ..EventQuery::default() };
    assert_eq!(e.query(&q).await.unwrap().len(), 2);
    let mut m = serde_json::Map::new();
    m.insert("n".into(), json!(4));
    let q = EventQuery { data_matches: m, ..EventQuery::default() };
    let got = e.query(&q).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].action_id.as_deref(), Some("a4"));
    assert_eq!(e.query(&EventQuery { limit: 2, ..EventQuery::default() }).await.unwrap().len(), 2);
    assert!(e.query(&EventQuery { kinds: vec!["Nope".into()], ..EventQuery::default() }).await.is_err());
    let all = e.query(&EventQuery::default()).await.unwrap();
    assert_eq!(all[0].hash(), Some(head.hash.as_str()));
    // Retention keeps the newest; what is left still verifies.
    let removed = e.apply_retention(&RetentionPolicy { max_events: Some(2), max_age_secs: None }).await.unwrap();
    assert_eq!(removed, 4);
    assert_eq!(e.query(&EventQuery::default()).await.unwrap().len(), 2);
    assert_eq!(e.verify().await.unwrap(), ChainVerification::Verified(2));
    // The chain continues from its head.
    e.append(vec![NewEvent::new(EventKind::StateChanged, json!({"n": 9}))]).await.unwrap();
    assert_eq!(e.verify().await.unwrap(), ChainVerification::Verified(3));
}

async fn tamper_detection(u: &Under) {
    let e = &u.b.events;
    let batch: Vec<NewEvent> = (0..4).map(|i| NewEvent::new(EventKind::StateChanged, json!({"n": i}))).collect();
    e.append(batch).await.unwrap();
    assert_eq!(e.verify().await.unwrap(), ChainVerification::Verified(4));
    match &u.kind {
        Kind::Embedded => {
            // Alter a copy of the log and verify it.
            let q = e.query(&EventQuery::default()).await.unwrap();
            let mut evs: Vec<_> = q.into_iter().rev().collect();
            evs[2].data = car_runtime::events::EventData::Value(Box::new(json!({"n": 99})));
            assert_eq!(car_runtime::events::verify_chain(&evs), ChainVerification::TamperedAt(2));
            let mut evs: Vec<_> = e.query(&EventQuery::default()).await.unwrap().into_iter().rev().collect();
            evs.remove(1);
            assert_eq!(car_runtime::events::verify_chain(&evs), ChainVerification::TamperedAt(1));
        }
        #[cfg(feature = "postgres")]
        Kind::Pg { pg, url, schema } => {
            // The application role cannot update or delete events.
            assert!(pg.execute_raw("UPDATE car_events SET kind = 'X'").await.is_err());
            assert!(pg.execute_raw("DELETE FROM car_events").await.is_err());
            // With the trigger bypassed (an owner), an altered row is caught.
            pg.execute_raw(
                "ALTER TABLE car_events DISABLE TRIGGER car_events_append_only; \
                 UPDATE car_events SET body = replace(body, '\"n\":2', '\"n\":99') WHERE seq = 3; \
                 ALTER TABLE car_events ENABLE TRIGGER car_events_append_only;",
            )
            .await
            .unwrap();
            assert_eq!(e.verify().await.unwrap(), ChainVerification::TamperedAt(2));
            // A newer schema than the binary knows refuses to start.
            pg.execute_raw("UPDATE car_schema SET version = 99").await.unwrap();
            let err = car_runtime::store::postgres::PgBackends::connect(url, schema, "w").await.unwrap_err();
            assert_eq!(err.code(), "store_schema_newer", "{err}");
        }
    }
}

/// A second handle on the tier ledger backend: the same one (embedded, as
/// one process's store) or another pool (PostgreSQL, a second host).
async fn second_ledger(u: &Under) -> Arc<dyn car_runtime::store::TierLedgerBackend> {
    match &u.kind {
        Kind::Embedded => u.b.ledger.clone(),
        #[cfg(feature = "postgres")]
        Kind::Pg { url, schema, .. } => {
            car_runtime::store::postgres::PgBackends::connect(url, schema, "writer-b").await.unwrap().backends().ledger
        }
    }
}

/// Two hosts' ledgers shared through one store: a record on either holds
/// on both (after a refresh, which every run does first), the latest
/// decision wins, concurrent appends are all seen, nothing is decided on a
/// copy never read, and (PostgreSQL) a store that cannot be read refuses.
async fn tier_ledger_shared_by_two_hosts(u: &Under) {
    use car_runtime::policy::{ApprovalRecord, ApprovalVerdict, JsonlLedger, PermissionTier};
    use car_runtime::store::ledger::{SharedLedger, TierLedger};
    let dir = temp_dir("tier");
    let host = |n: &str, b: Arc<dyn car_runtime::store::TierLedgerBackend>| {
        Arc::new(SharedLedger::shared(Arc::new(JsonlLedger::new(dir.0.join(n).join("tier.jsonl"))), b))
    };
    let (h1, h2) = (host("a", u.b.ledger.clone()), host("b", second_ledger(u).await));
    assert!(h2.latest_shared().is_err(), "a copy never read decides nothing");
    h2.refresh().await.unwrap();
    assert!(h2.latest_shared().unwrap().is_empty());
    let rec = |fp: &str, ok: bool, who: &str| {
        ApprovalRecord::new(fp, PermissionTier::FullAccess, ok, who, "r", None).unwrap()
    };
    h1.append(&rec("tool_call|deploy|{}", true, "alice")).await.unwrap();
    h2.refresh().await.unwrap();
    let got = h2.latest_shared().unwrap();
    assert_eq!(got["tool_call|deploy|{}"].decision, ApprovalVerdict::Approved);
    assert_eq!(got["tool_call|deploy|{}"].reviewer, "alice");
    h2.append(&rec("tool_call|deploy|{}", false, "bob")).await.unwrap();
    h1.refresh().await.unwrap();
    assert_eq!(h1.latest_shared().unwrap()["tool_call|deploy|{}"].decision, ApprovalVerdict::Rejected);

    // 40 appends at once from both hosts: each host then sees every one.
    let mut tasks = Vec::new();
    for i in 0..40 {
        let h = if i % 2 == 0 { h1.clone() } else { h2.clone() };
        tasks.push(tokio::spawn(async move { h.append(&rec(&format!("fp-{i}"), true, "r")).await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    for h in [&h1, &h2] {
        h.refresh().await.unwrap();
        let seen = h.latest_shared().unwrap();
        assert_eq!((0..40).filter(|i| seen.contains_key(&format!("fp-{i}"))).count(), 40);
    }
    let (all, next) = u.b.ledger.since(0).await.unwrap();
    assert_eq!(all.len(), 42);
    let (none, again) = u.b.ledger.since(next).await.unwrap();
    assert!(none.is_empty() && again == next, "nothing after the end");

    // A runtime deciding on host 2 admits what host 1 approves, at its next run.
    let rt = car_runtime::api::runtime::CarRuntime::new();
    rt.register_tool_schema(&json!({"name": "ship", "parameters": {"type": "object"}}).to_string()).unwrap();
    rt.permission_set_tier("read_only").unwrap();
    rt.set_tier_ledger(Some(TierLedger::Shared(h2.clone()))).unwrap();
    let action: car_runtime::ir::Action = serde_json::from_value(
        json!({"id": "s", "type": "tool_call", "tool": "ship", "parameters": {"v": 1}, "failure_behavior": "skip"}),
    )
    .unwrap();
    let status = |rt: &car_runtime::api::runtime::CarRuntime, a: &car_runtime::ir::Action| {
        let p = json!({"id": format!("p-{}", uuid_like()), "actions": [a]}).to_string();
        let rt = rt.clone();
        async move {
            let exec = Arc::new(car_runtime::engine::FnExecutor(|_c: car_runtime::engine::ToolCall| Ok(json!({}))));
            let out: serde_json::Value =
                serde_json::from_str(&rt.execute_proposal(&p, exec, None, None).await.unwrap()).unwrap();
            out["results"][0]["status"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(status(&rt, &action).await, "rejected");
    let required = car_runtime::policy::PermissionGate::new().required_tier(&action);
    let fp = car_runtime::policy::fingerprint(&action);
    h1.append(&ApprovalRecord::new(&fp, required, true, "carol", "ok", None).unwrap()).await.unwrap();
    assert_eq!(status(&rt, &action).await, "succeeded", "host 1's approval holds on host 2");
    h1.append(&ApprovalRecord::new(&fp, required, false, "carol", "no", None).unwrap()).await.unwrap();
    assert_eq!(status(&rt, &action).await, "rejected", "and so does its rejection");

    #[cfg(feature = "postgres")]
    if let Kind::Pg { url, schema, .. } = &u.kind {
        // The store gone: the refresh fails and the copy refuses.
        car_runtime::store::postgres::PgBackends::drop_schema(url, schema).await.unwrap();
        assert!(h2.refresh().await.is_err());
        let e = h2.latest_shared().unwrap_err().to_string();
        assert!(e.contains("cannot be read"), "{e}");
        assert_eq!(status(&rt, &action).await, "rejected", "nothing runs on a stale copy");
        assert!(h1.append(&rec("fp-late", true, "r")).await.is_err(), "the store refused the record");
        assert!(!h1.file().latest_shared().unwrap().contains_key("fp-late"), "so the file holds nothing of it");
    }
}
