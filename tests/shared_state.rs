//! State in a shared store (`Runtime::set_shared_state`, `car-server
//! --shared-state`): several runtimes (daemons) over one store. Run against
//! the embedded store shared in-process and against PostgreSQL
//! (`CAR_TEST_PG_URL`, a schema per test).
//!
//! - 50 rounds of two runtimes writing one key with the same `read_version`:
//!   exactly one wins each round, the other fails with `conflict`.
//! - A run whose runner died mid-run is rolled back by a sweeper once its
//!   lease runs out (`Runtime::sweep`); a live one is left.
//! - A proposal starts from the store's state and sees another runtime's
//!   writes; a rollback restores the store, except a key another runtime
//!   moved since (left, and reported `not_restored`).

use std::sync::Arc;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall, ToolExecutor};
use car_runtime::store::{Expect, StateBackend};
use serde_json::{Value, json};

fn exec() -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(|call: ToolCall| {
        if call.tool == "fail" {
            Err(car_runtime::ir::ToolFailure::ordinary("failed on purpose"))
        } else {
            Ok(json!("ok"))
        }
    }))
}

fn runtime(shared: &Arc<dyn StateBackend>) -> CarRuntime {
    let rt = CarRuntime::new();
    rt.register_tool("fail").unwrap();
    rt.register_tool("noop").unwrap();
    rt.runtime().set_shared_state(Some(shared.clone()));
    rt
}

async fn submit(rt: &CarRuntime, p: Value) -> Value {
    serde_json::from_str(&rt.execute_proposal(&p.to_string(), exec(), None, None).await.unwrap()).unwrap()
}

async fn one_winner_per_round(shared: Arc<dyn StateBackend>) {
    let (a, b) = (runtime(&shared), runtime(&shared));
    shared.put(None, "counter", Some(json!(0)), Expect::Any).await.unwrap();
    for round in 0..50 {
        let v = shared.get(None, "counter").await.unwrap().version;
        let p = |who: &str| {
            json!({"id": format!("{who}-{round}"), "actions": [{"id": "w", "type": "state_write",
                "parameters": {"key": "counter", "value": format!("{who}-{round}")},
                "assumptions": [{"key": "counter", "read_version": v}]}]})
        };
        let (ra, rb) = tokio::join!(submit(&a, p("a")), submit(&b, p("b")));
        let won: Vec<&Value> = [&ra, &rb].into_iter().filter(|r| r["results"][0]["status"] == "succeeded").collect();
        assert_eq!(won.len(), 1, "round {round}: {ra} {rb}");
        let lost = if ra["results"][0]["status"] == "succeeded" { &rb } else { &ra };
        assert!(lost["results"][0]["error"].as_str().unwrap().starts_with("conflict:"), "{lost}");
        let now = shared.get(None, "counter").await.unwrap();
        assert_eq!(now.version, v + 1, "round {round}: one write");
        let winner = if ra["results"][0]["status"] == "succeeded" { "a" } else { "b" };
        assert_eq!(now.value, Some(json!(format!("{winner}-{round}"))));
    }
}

async fn start_from_the_store_and_roll_back_in_it(shared: Arc<dyn StateBackend>) {
    let (a, b) = (runtime(&shared), runtime(&shared));
    // B's write is what A's proposal starts from (its precondition holds).
    let r = submit(
        &b,
        json!({"id": "b1", "actions": [{"id": "w", "type": "state_write",
        "parameters": {"key": "stage", "value": "built"}}]}),
    )
    .await;
    assert_eq!(r["results"][0]["status"], "succeeded", "{r}");
    let r = submit(
        &a,
        json!({"id": "a1", "actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "release", "value": "1.2"},
         "preconditions": [{"key": "stage", "operator": "eq", "value": "built"}]},
        {"id": "x", "type": "tool_call", "tool": "fail", "dependencies": ["w"]}]}),
    )
    .await;
    assert_eq!(r["results"][0]["status"], "succeeded", "{r}");
    assert_eq!(r["results"][0]["rolled_back"], true, "{r}");
    // The abort restored the store, not only A's mirror.
    assert_eq!(shared.get(None, "release").await.unwrap().value, None);
    assert_eq!(b.state_get("release", None).unwrap(), "null");
    // A key another runtime moved after A wrote it stays as that writer set it.
    let r = submit(
        &a,
        json!({"id": "a2", "actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "owner", "value": "a"}},
        {"id": "r", "type": "state_read", "parameters": {"key": "owner"}, "dependencies": ["w"]}]}),
    )
    .await;
    assert_eq!(r["results"][1]["output"], "a", "{r}");
    let moved = shared.put(None, "owner", Some(json!("b")), Expect::Any).await.unwrap();
    assert!(matches!(moved, car_runtime::store::CasOutcome::Written { .. }));
    let r = submit(
        &a,
        json!({"id": "a3", "actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "owner", "value": "a-again"},
         "assumptions": [{"key": "owner", "read_version": 1}]}]}),
    )
    .await;
    assert!(r["results"][0]["error"].as_str().unwrap().starts_with("conflict:"), "the version moved: {r}");
    assert_eq!(shared.get(None, "owner").await.unwrap().value, Some(json!("b")));
    let events: Value = serde_json::from_str(&a.event_query(r#"{"kinds":["StateRolledBack"]}"#).unwrap()).unwrap();
    let first = events["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(first["data"]["keys"], json!(["release"]), "{first}");

    // Another writer moves a key while A's proposal runs; A aborts: that
    // key stays as the other writer set it and is reported, A's other
    // write is restored.
    let mover: Arc<dyn ToolExecutor> = Arc::new(Mover(shared.clone()));
    let p = json!({"id": "a4", "actions": [
        {"id": "w1", "type": "state_write", "parameters": {"key": "k1", "value": "a"}},
        {"id": "w2", "type": "state_write", "parameters": {"key": "k2", "value": "a"}, "dependencies": ["w1"]},
        {"id": "m", "type": "tool_call", "tool": "noop", "dependencies": ["w2"]},
        {"id": "x", "type": "tool_call", "tool": "fail", "dependencies": ["m"]}]});
    let r: Value = serde_json::from_str(&a.execute_proposal(&p.to_string(), mover, None, None).await.unwrap()).unwrap();
    assert_eq!(r["results"][3]["status"], "failed", "{r}");
    assert_eq!(shared.get(None, "k1").await.unwrap().value, None, "restored");
    assert_eq!(shared.get(None, "k2").await.unwrap().value, Some(json!("moved")), "left as the other writer set it");
    let events: Value = serde_json::from_str(&a.event_query(r#"{"kinds":["StateRolledBack"]}"#).unwrap()).unwrap();
    let last = &events["events"][0]["data"];
    assert_eq!(last["keys"], json!(["k1"]), "{last}");
    assert_eq!(last["not_restored"], json!(["k2"]), "{last}");
}

/// `noop` moves `k2` in the shared store (another writer); `fail` fails.
struct Mover(Arc<dyn StateBackend>);

#[async_trait::async_trait]
impl ToolExecutor for Mover {
    async fn execute(&self, call: ToolCall) -> Result<Value, car_runtime::ir::ToolFailure> {
        if call.tool == "fail" {
            return Err(car_runtime::ir::ToolFailure::ordinary("failed on purpose"));
        }
        self.0.put(None, "k2", Some(json!("moved")), Expect::Any).await.unwrap();
        Ok(json!("ok"))
    }
}

async fn embedded() -> Arc<dyn StateBackend> {
    Arc::new(car_runtime::state::StateStore::new())
}

#[cfg(feature = "postgres")]
async fn postgres(test: &str) -> Option<(Arc<dyn StateBackend>, String, String)> {
    use car_runtime::store::postgres::PgBackends;
    let url = match std::env::var("CAR_TEST_PG_URL").ok().filter(|u| !u.is_empty()) {
        Some(u) => u,
        None if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("CI=true and CAR_TEST_PG_URL is not set"),
        None => {
            eprintln!("skipped: CAR_TEST_PG_URL is not set");
            return None;
        }
    };
    let schema = format!("shared_{test}_{}", std::process::id());
    PgBackends::drop_schema(&url, &schema).await.unwrap();
    let pg = PgBackends::connect(&url, &schema, "w").await.unwrap();
    Some((pg.backends().state, url, schema))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_one_winner_per_round() {
    one_winner_per_round(embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_start_from_the_store_and_roll_back_in_it() {
    start_from_the_store_and_roll_back_in_it(embedded().await).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_winner_per_round() {
    let Some((s, url, schema)) = postgres("round").await else { return };
    one_winner_per_round(s).await;
    car_runtime::store::postgres::PgBackends::drop_schema(&url, &schema).await.unwrap();
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_start_from_the_store_and_roll_back_in_it() {
    let Some((s, url, schema)) = postgres("rollback").await else { return };
    start_from_the_store_and_roll_back_in_it(s).await;
    car_runtime::store::postgres::PgBackends::drop_schema(&url, &schema).await.unwrap();
}

/// `hang` never answers (its runner is "killed" by dropping the run).
struct Hang;

#[async_trait::async_trait]
impl ToolExecutor for Hang {
    async fn execute(&self, _call: ToolCall) -> Result<Value, car_runtime::ir::ToolFailure> {
        std::future::pending().await
    }
}

/// `hang` answers after 1.2 s: four leases of 300 ms.
struct Slow;

#[async_trait::async_trait]
impl ToolExecutor for Slow {
    async fn execute(&self, _call: ToolCall) -> Result<Value, car_runtime::ir::ToolFailure> {
        tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
        Ok(json!("ok"))
    }
}

async fn a_dead_runners_writes_are_swept_back(shared: Arc<dyn StateBackend>) {
    let journals: Arc<dyn car_runtime::checkpoint::CheckpointBackend> =
        Arc::new(car_runtime::checkpoint::MemoryCheckpoints::default());
    let (a, b) = (runtime(&shared), runtime(&shared));
    for rt in [&a, &b] {
        rt.register_tool("hang").unwrap();
        rt.set_checkpoints(journals.clone());
        rt.runtime().set_checkpoint_lease(std::time::Duration::from_millis(300));
    }
    shared.put(None, "base", Some(json!("before")), Expect::Any).await.unwrap();
    let p = json!({"id": "dies", "actions": [
        {"id": "w1", "type": "state_write", "parameters": {"key": "base", "value": "mid-run"}},
        {"id": "w2", "type": "state_write", "parameters": {"key": "fresh", "value": "x"}, "dependencies": ["w1"]},
        {"id": "h", "type": "tool_call", "tool": "hang", "dependencies": ["w2"]}]})
    .to_string();
    let hang: Arc<dyn ToolExecutor> = Arc::new(Hang);
    // The runner "dies" mid-run: its future is dropped with the writes made.
    let run = a.execute_proposal(&p, hang, None, None);
    assert!(tokio::time::timeout(std::time::Duration::from_millis(400), run).await.is_err());
    assert_eq!(shared.get(None, "base").await.unwrap().value, Some(json!("mid-run")));
    let listed = journals.list().await.unwrap();
    assert!(listed.len() == 1 && listed[0].running, "{listed:?}");
    // A journal is not a suspended proposal: not listed, not resumable.
    assert_eq!(b.suspended_proposals(None).await.unwrap(), r#"{"suspended":[]}"#);
    let e = b.resume_proposal(&listed[0].id, exec()).await.unwrap_err();
    assert!(matches!(e.code(), "suspension_not_found" | "suspension_claimed"), "{e}");
    // Once its lease ran out, the sweeper rolls it back.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let swept = b.runtime().sweep("sweeper").await.unwrap();
    assert_eq!(swept.len(), 1, "{swept:?}");
    assert_eq!(swept[0]["restored"], json!(["base", "fresh"]), "{swept:?}");
    assert_eq!(shared.get(None, "base").await.unwrap().value, Some(json!("before")));
    assert_eq!(shared.get(None, "fresh").await.unwrap().value, None);
    assert!(journals.list().await.unwrap().is_empty());
    assert!(b.runtime().sweep("sweeper").await.unwrap().is_empty(), "swept once");
    // A live run longer than its lease is never swept: the lease is renewed.
    let slow: Arc<dyn ToolExecutor> = Arc::new(Slow);
    let p = json!({"id": "alive", "actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "live", "value": 1}},
        {"id": "s", "type": "tool_call", "tool": "hang", "dependencies": ["w"]}]})
    .to_string();
    let sweeping = async {
        for _ in 0..20 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            assert!(b.runtime().sweep("sweeper").await.unwrap().is_empty(), "a live run was swept");
        }
    };
    let (r, ()) = tokio::join!(a.execute_proposal(&p, slow, None, None), sweeping);
    let r: Value = serde_json::from_str(&r.unwrap()).unwrap();
    assert_eq!(r["results"][1]["status"], "succeeded", "{r}");
    assert_eq!(shared.get(None, "live").await.unwrap().value, Some(json!(1)));
    // A run that finishes leaves no journal; one whose key another writer
    // moved after the run died leaves that key.
    let r = submit(
        &a,
        json!({"id": "ok", "actions": [{"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 1}}]}),
    )
    .await;
    assert_eq!(r["results"][0]["status"], "succeeded");
    assert!(journals.list().await.unwrap().is_empty());
    // A run that writes no state journals nothing.
    let r = submit(&a, json!({"id": "reads", "actions": [{"id": "n", "type": "tool_call", "tool": "noop"}]})).await;
    assert_eq!(r["results"][0]["status"], "succeeded");
    assert!(journals.list().await.unwrap().is_empty());
    let hang: Arc<dyn ToolExecutor> = Arc::new(Hang);
    let p = json!({"id": "dies2", "actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 2}},
        {"id": "h", "type": "tool_call", "tool": "hang", "dependencies": ["w"]}]})
    .to_string();
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(200), a.execute_proposal(&p, hang, None, None))
            .await
            .is_err()
    );
    shared.put(None, "k", Some(json!(3)), Expect::Any).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let swept = b.runtime().sweep("sweeper").await.unwrap();
    assert_eq!(swept[0]["not_restored"], json!(["k"]), "{swept:?}");
    assert_eq!(shared.get(None, "k").await.unwrap().value, Some(json!(3)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_a_dead_runners_writes_are_swept_back() {
    a_dead_runners_writes_are_swept_back(embedded().await).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_dead_runners_writes_are_swept_back() {
    let Some((s, url, schema)) = postgres("sweep").await else { return };
    a_dead_runners_writes_are_swept_back(s).await;
    car_runtime::store::postgres::PgBackends::drop_schema(&url, &schema).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journaled_run_that_suspends_becomes_its_suspension_and_resumes() {
    let shared = embedded().await;
    let dir = std::env::temp_dir().join(format!("car-shared-susp-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let rt = runtime(&shared);
    rt.register_tool("gate").unwrap();
    rt.set_permissions(Some(r#"{"ask":[{"tool":"gate"}],"on_ask":"suspend"}"#), Some(dir.to_str().unwrap())).unwrap();
    let r = submit(
        &rt,
        json!({"id": "s", "actions": [
        {"id": "w", "type": "state_write", "parameters": {"key": "stage", "value": "built"}},
        {"id": "g", "type": "tool_call", "tool": "gate", "dependencies": ["w"]}]}),
    )
    .await;
    assert_eq!(r["status"], "suspended", "{r}");
    let id = r["suspension"]["id"].as_str().unwrap();
    // Suspended, not running: listed, and never swept while it waits.
    let listed: Value = serde_json::from_str(&rt.suspended_proposals(None).await.unwrap()).unwrap();
    assert_eq!(listed["suspended"][0]["id"], id, "{listed}");
    assert!(rt.runtime().sweep("sweeper").await.unwrap().is_empty());
    assert_eq!(shared.get(None, "stage").await.unwrap().value, Some(json!("built")));
    rt.approval_resolve(r["suspension"]["pending"][0]["approval_key"].as_str().unwrap(), "allow", "ok").unwrap();
    let done: Value = serde_json::from_str(&rt.resume_proposal(id, exec()).await.unwrap()).unwrap();
    assert!(done.get("status").is_none(), "{done}");
    assert_eq!(done["results"][1]["status"], "succeeded", "{done}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shared store whose put of `key` with `value` never returns: the
/// runner "dies" between journaling that write and making it.
struct DiesOnPut {
    inner: Arc<dyn StateBackend>,
    key: &'static str,
    value: Value,
}

#[async_trait::async_trait]
impl StateBackend for DiesOnPut {
    async fn get(&self, tenant: Option<&str>, key: &str) -> car_runtime::Result<car_runtime::store::Versioned> {
        self.inner.get(tenant, key).await
    }

    async fn put(
        &self,
        tenant: Option<&str>,
        key: &str,
        value: Option<Value>,
        expect: Expect,
    ) -> car_runtime::Result<car_runtime::store::CasOutcome> {
        if key == self.key && value.as_ref() == Some(&self.value) {
            std::future::pending::<()>().await;
        }
        self.inner.put(tenant, key, value, expect).await
    }

    async fn keys(&self, tenant: Option<&str>) -> car_runtime::Result<Vec<String>> {
        self.inner.keys(tenant).await
    }
}

/// A key a run wrote twice, its runner dead after journaling the second
/// write and before making it: the store holds the run's first value, and
/// the sweeper still restores the key (it was left before: the value was
/// not the journal's last).
async fn a_key_written_twice_by_a_runner_that_died_before_the_second_is_restored(shared: Arc<dyn StateBackend>) {
    let journals: Arc<dyn car_runtime::checkpoint::CheckpointBackend> =
        Arc::new(car_runtime::checkpoint::MemoryCheckpoints::default());
    let dying: Arc<dyn StateBackend> =
        Arc::new(DiesOnPut { inner: shared.clone(), key: "twice", value: json!("second") });
    let (a, b) = (runtime(&dying), runtime(&shared));
    for rt in [&a, &b] {
        rt.set_checkpoints(journals.clone());
        rt.runtime().set_checkpoint_lease(std::time::Duration::from_millis(300));
    }
    shared.put(None, "twice", Some(json!("orig")), Expect::Any).await.unwrap();
    let p = json!({"id": "twice", "actions": [
        {"id": "w1", "type": "state_write", "parameters": {"key": "twice", "value": "first"}},
        {"id": "w2", "type": "state_write", "parameters": {"key": "twice", "value": "second"}, "dependencies": ["w1"]}]})
    .to_string();
    let run = a.execute_proposal(&p, exec(), None, None);
    assert!(tokio::time::timeout(std::time::Duration::from_millis(400), run).await.is_err());
    assert_eq!(shared.get(None, "twice").await.unwrap().value, Some(json!("first")));
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let swept = b.runtime().sweep("sweeper").await.unwrap();
    assert_eq!(swept.len(), 1, "{swept:?}");
    assert_eq!(swept[0]["restored"], json!(["twice"]), "{swept:?}");
    assert_eq!(shared.get(None, "twice").await.unwrap().value, Some(json!("orig")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_a_key_written_twice_by_a_runner_that_died_before_the_second_is_restored() {
    a_key_written_twice_by_a_runner_that_died_before_the_second_is_restored(embedded().await).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_key_written_twice_by_a_runner_that_died_before_the_second_is_restored() {
    let Some((s, url, schema)) = postgres("twice").await else { return };
    a_key_written_twice_by_a_runner_that_died_before_the_second_is_restored(s).await;
    car_runtime::store::postgres::PgBackends::drop_schema(&url, &schema).await.unwrap();
}
