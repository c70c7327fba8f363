//! The PostgreSQL backends (feature `postgres`): one database shared by
//! every daemon, through a `deadpool-postgres` pool of `tokio-postgres`
//! connections.
//!
//! - [`PgBackends::connect`] applies the schema migrations at start-up, in
//!   one transaction under an advisory lock, and refuses a schema newer than
//!   this binary knows ([`SCHEMA_VERSION`]).
//! - State rows carry versions; a compare-and-set is one conditional
//!   statement.
//! - Events are append-only: a trigger refuses `UPDATE` always and `DELETE`
//!   unless the transaction set `car.retention` (the retention path). Each
//!   writing daemon has its own chain (`writer`, `seq`); a batch is one
//!   `INSERT`.
//! - Approvals are resolved by one conditional `UPDATE` with `pg_notify` in
//!   the same commit, so waiting daemons wake at once; a waiter also re-reads
//!   every [`APPROVAL_POLL`] (the fallback when a notification is lost, e.g.
//!   while PostgreSQL restarts).
//! - Rate windows slide on the database's clock (`clock_timestamp()`), under
//!   a transaction-scoped advisory lock per window.
//! - The tenant is a column of every key (`''`: unscoped).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures::StreamExt;
use serde_json::{Map, Value};
use tokio::sync::{Mutex as AsyncMutex, broadcast};
use tokio_postgres::{AsyncMessage, NoTls};

use super::{
    ApprovalBackend, Backends, CasOutcome, ChainHead, EventBackend, Expect, NewEvent, RateLimitBackend, StateBackend,
    TierLedgerBackend, Versioned, stored_event, tenant_tool,
};
use crate::approval::ledger::ApprovalRecord;
use crate::approval::store::{
    ApprovalDecision, ApprovalEvent, PendingApproval, Resolution, ResolveOutcome, ResolvedBy, Ticket, approval_key,
};
use crate::events::{ChainVerification, Event, EventKind, EventQuery, RetentionPolicy};
use crate::state::{Scope, TENANT_PREFIX};
use crate::{Error, Result};

/// The schema version this binary writes and reads.
pub const SCHEMA_VERSION: i32 = 3;

/// How often a waiting approval re-reads its row when no notification came.
pub const APPROVAL_POLL: Duration = Duration::from_secs(1);

const MIGRATION_1: &str = r#"
CREATE TABLE car_state (
    tenant text NOT NULL,
    key text NOT NULL,
    value jsonb,
    version bigint NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE TABLE car_events (
    id bigserial PRIMARY KEY,
    writer text NOT NULL,
    seq bigint NOT NULL,
    kind text NOT NULL,
    ts timestamptz NOT NULL,
    proposal_id text,
    action_id text,
    body text NOT NULL,
    hash text NOT NULL,
    UNIQUE (writer, seq)
);
CREATE INDEX car_events_proposal ON car_events (proposal_id);
CREATE FUNCTION car_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('car.retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'car_events is append-only: % refused', TG_OP;
END $$;
CREATE TRIGGER car_events_append_only BEFORE UPDATE OR DELETE ON car_events
    FOR EACH ROW EXECUTE FUNCTION car_events_append_only();
CREATE TABLE car_approvals (
    key text PRIMARY KEY,
    tool text NOT NULL,
    input_digest text NOT NULL,
    requested_at timestamptz NOT NULL,
    deadline timestamptz,
    decision text,
    reason text,
    resolved_by text,
    resolved_at timestamptz,
    consumed_at timestamptz
);
CREATE TABLE car_rate_starts (
    tenant text NOT NULL,
    key text NOT NULL,
    at timestamptz NOT NULL
);
CREATE INDEX car_rate_starts_window ON car_rate_starts (tenant, key, at);
CREATE TABLE car_tier_ledger (
    id bigserial PRIMARY KEY,
    fingerprint text NOT NULL,
    record jsonb NOT NULL
);
CREATE INDEX car_tier_ledger_fp ON car_tier_ledger (fingerprint, id);
"#;

/// Suspended proposals (`crate::checkpoint`), claimed by lease.
const MIGRATION_2: &str = r#"
CREATE TABLE car_checkpoints (
    id text PRIMARY KEY,
    body text NOT NULL,
    claimant text,
    lease_until timestamptz,
    created_at timestamptz NOT NULL
);
"#;

/// `always` decisions shared by every daemon of the store.
const MIGRATION_3: &str = r#"
CREATE TABLE car_always_rules (
    id bigserial PRIMARY KEY,
    tool text NOT NULL,
    rule jsonb NOT NULL
);
CREATE INDEX car_always_rules_tool ON car_always_rules (tool, id);
"#;

fn db_err(e: impl std::fmt::Display) -> Error {
    Error::runtime("store_unavailable", format!("PostgreSQL store: {e}"))
}

fn valid_schema(schema: &str) -> Result<()> {
    let ok = !schema.is_empty()
        && schema.len() <= 48
        && schema.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_argument("schema", format!("invalid schema name `{schema}`: use [a-z_][a-z0-9_]*")))
    }
}

/// The shared parts of every PostgreSQL backend.
struct Shared {
    pool: Pool,
    config: tokio_postgres::Config,
    channel: String,
    events: broadcast::Sender<ApprovalEvent>,
}

/// The five PostgreSQL backends over one pool.
#[derive(Clone)]
pub struct PgBackends {
    shared: Arc<Shared>,
    writer: String,
    head: Arc<AsyncMutex<Option<(i64, String)>>>,
    listener: Arc<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for PgBackends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgBackends").field("writer", &self.writer).field("channel", &self.shared.channel).finish()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.pool.close();
    }
}

impl PgBackends {
    /// Connects to `url` (`postgres://...`), in schema `schema` (created when
    /// missing; `public` for a plain deployment), as the event writer
    /// `writer` (one chain per writer: give each daemon its own), and applies
    /// the migrations. A schema newer than [`SCHEMA_VERSION`] is refused.
    pub async fn connect(url: &str, schema: &str, writer: &str) -> Result<PgBackends> {
        valid_schema(schema)?;
        if writer.is_empty() {
            return Err(Error::invalid_argument("writer", "the event writer id must be non-empty"));
        }
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e| Error::invalid_argument("store", format!("invalid PostgreSQL URL: {e}")))?;
        // Create the schema first, then pin every pooled connection to it.
        {
            let (client, conn) = config.connect(NoTls).await.map_err(db_err)?;
            let task = tokio::spawn(conn);
            client.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}")).await.map_err(db_err)?;
            drop(client);
            let _ = task.await;
        }
        config.options(format!("-c search_path={schema}"));
        let mgr =
            Manager::from_config(config.clone(), NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(mgr).max_size(16).build().map_err(db_err)?;
        migrate(&pool).await?;
        let channel = format!("car_approvals_{schema}");
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared { pool, config, channel, events });
        let listener = Arc::new(tokio::spawn(listen(Arc::downgrade(&shared))));
        let backends =
            PgBackends { shared, writer: writer.to_string(), head: Arc::new(AsyncMutex::new(None)), listener };
        // This writer's chain continues where it stopped.
        let client = backends.client().await?;
        let row = client
            .query_opt("SELECT seq, hash FROM car_events WHERE writer = $1 ORDER BY seq DESC LIMIT 1", &[&writer])
            .await
            .map_err(db_err)?;
        *backends.head.lock().await = row.map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)));
        Ok(backends)
    }

    /// The backends as a [`Backends`] set.
    pub fn backends(&self) -> Backends {
        let me = Arc::new(self.clone());
        Backends {
            state: me.clone(),
            events: me.clone(),
            approvals: me.clone(),
            ledger: me.clone(),
            rates: me.clone(),
            checkpoints: me,
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.shared.pool.get().await.map_err(db_err)
    }

    /// Drops this binary's tables' schema (tests: a schema per test).
    pub async fn drop_schema(url: &str, schema: &str) -> Result<()> {
        valid_schema(schema)?;
        let config: tokio_postgres::Config =
            url.parse().map_err(|e| Error::invalid_argument("store", format!("invalid PostgreSQL URL: {e}")))?;
        let (client, conn) = config.connect(NoTls).await.map_err(db_err)?;
        let task = tokio::spawn(conn);
        client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await.map_err(db_err)?;
        drop(client);
        let _ = task.await;
        Ok(())
    }

    /// Runs SQL as the application (tests: tampering, schema checks).
    pub async fn execute_raw(&self, sql: &str) -> Result<()> {
        self.client().await?.batch_execute(sql).await.map_err(db_err)
    }
}

async fn migrate(pool: &Pool) -> Result<()> {
    let mut client = pool.get().await.map_err(db_err)?;
    let tx = client.transaction().await.map_err(db_err)?;
    tx.batch_execute(
        "SELECT pg_advisory_xact_lock(727222); \
         CREATE TABLE IF NOT EXISTS car_schema (id int PRIMARY KEY CHECK (id = 1), version int NOT NULL)",
    )
    .await
    .map_err(db_err)?;
    let current: i32 =
        tx.query_opt("SELECT version FROM car_schema", &[]).await.map_err(db_err)?.map_or(0, |r| r.get(0));
    if current > SCHEMA_VERSION {
        return Err(Error::runtime(
            "store_schema_newer",
            format!(
                "the database schema is version {current}, newer than this binary knows ({SCHEMA_VERSION}); \
                 refusing to start (upgrade car-server)"
            ),
        ));
    }
    if current < 1 {
        tx.batch_execute(MIGRATION_1).await.map_err(db_err)?;
    }
    if current < 2 {
        tx.batch_execute(MIGRATION_2).await.map_err(db_err)?;
    }
    if current < 3 {
        tx.batch_execute(MIGRATION_3).await.map_err(db_err)?;
    }
    tx.execute(
        "INSERT INTO car_schema (id, version) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET version = $1",
        &[&SCHEMA_VERSION],
    )
    .await
    .map_err(db_err)?;
    tx.commit().await.map_err(db_err)
}

/// The notification listener: one connection of its own (LISTEN cannot go
/// through the pool), reconnecting while the backends live.
async fn listen(shared: std::sync::Weak<Shared>) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let (config, channel, tx) = (s.config.clone(), s.channel.clone(), s.events.clone());
        drop(s);
        if let Ok((client, mut conn)) = config.connect(NoTls).await {
            let (ntx, mut nrx) = tokio::sync::mpsc::unbounded_channel::<String>();
            let pump = tokio::spawn(async move {
                let mut stream = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
                while let Some(m) = stream.next().await {
                    match m {
                        Ok(AsyncMessage::Notification(n)) => {
                            if ntx.send(n.payload().to_string()).is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(_) => return,
                    }
                }
            });
            if client.batch_execute(&format!("LISTEN {channel}")).await.is_ok() {
                while let Some(payload) = nrx.recv().await {
                    if let Ok(ev) = serde_json::from_str::<ApprovalEvent>(&payload) {
                        let _ = tx.send(ev);
                    }
                    if shared.strong_count() == 0 {
                        return;
                    }
                }
            }
            pump.abort();
        }
        if shared.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl Drop for PgBackends {
    fn drop(&mut self) {
        // The last handle stops the listener.
        if Arc::strong_count(&self.listener) == 1 {
            self.listener.abort();
        }
    }
}

/// `''` for the unscoped view, else the validated tenant id.
fn tenant_col(tenant: Option<&str>) -> Result<String> {
    match tenant {
        None => Ok(String::new()),
        Some(t) => {
            Scope::tenant(t)?;
            Ok(t.to_string())
        }
    }
}

fn check_key(tenant: Option<&str>, key: &str) -> Result<()> {
    if tenant.is_none() && key.starts_with(TENANT_PREFIX) {
        return Err(Error::invalid_argument(
            "key",
            format!("`{key}` is a tenant key; pass the tenant instead of the prefix"),
        ));
    }
    Ok(())
}

fn to_version(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[async_trait]
impl StateBackend for PgBackends {
    async fn get(&self, tenant: Option<&str>, key: &str) -> Result<Versioned> {
        check_key(tenant, key)?;
        let t = tenant_col(tenant)?;
        let row = self
            .client()
            .await?
            .query_opt("SELECT value, version FROM car_state WHERE tenant = $1 AND key = $2", &[&t, &key])
            .await
            .map_err(db_err)?;
        Ok(row.map_or_else(Versioned::default, |r| Versioned {
            value: r.get::<_, Option<Value>>(0),
            version: to_version(r.get(1)),
        }))
    }

    async fn snapshot(&self, tenant: Option<&str>) -> Result<Vec<(String, Versioned)>> {
        let t = tenant_col(tenant)?;
        let rows = self
            .client()
            .await?
            .query("SELECT key, value, version FROM car_state WHERE tenant = $1 ORDER BY key", &[&t])
            .await
            .map_err(db_err)?;
        Ok(rows
            .iter()
            .map(|r| {
                let v = Versioned { value: r.get::<_, Option<Value>>(1), version: to_version(r.get(2)) };
                (r.get::<_, String>(0), v)
            })
            .collect())
    }

    async fn put(&self, tenant: Option<&str>, key: &str, value: Option<Value>, expect: Expect) -> Result<CasOutcome> {
        check_key(tenant, key)?;
        let t = tenant_col(tenant)?;
        let client = self.client().await?;
        let row = match expect {
            Expect::Any => {
                client
                    .query_opt(
                        "INSERT INTO car_state (tenant, key, value, version) VALUES ($1, $2, $3, 1) \
                     ON CONFLICT (tenant, key) DO UPDATE SET value = EXCLUDED.value, version = car_state.version + 1 \
                     RETURNING version",
                        &[&t, &key, &value],
                    )
                    .await
            }
            Expect::Absent => {
                client
                    .query_opt(
                        "INSERT INTO car_state (tenant, key, value, version) VALUES ($1, $2, $3, 1) \
                     ON CONFLICT (tenant, key) DO UPDATE SET value = EXCLUDED.value, version = car_state.version + 1 \
                     WHERE car_state.value IS NULL RETURNING version",
                        &[&t, &key, &value],
                    )
                    .await
            }
            Expect::Version(0) => {
                client
                    .query_opt(
                        "INSERT INTO car_state (tenant, key, value, version) VALUES ($1, $2, $3, 1) \
                     ON CONFLICT (tenant, key) DO NOTHING RETURNING version",
                        &[&t, &key, &value],
                    )
                    .await
            }
            Expect::Version(n) => {
                let n = i64::try_from(n).map_err(|_| Error::invalid_argument("expect", "version out of range"))?;
                client
                    .query_opt(
                        "UPDATE car_state SET value = $3, version = version + 1 \
                         WHERE tenant = $1 AND key = $2 AND version = $4 RETURNING version",
                        &[&t, &key, &value, &n],
                    )
                    .await
            }
        }
        .map_err(db_err)?;
        match row {
            Some(r) => Ok(CasOutcome::Written { version: to_version(r.get(0)) }),
            None => {
                let current = client
                    .query_opt("SELECT version FROM car_state WHERE tenant = $1 AND key = $2", &[&t, &key])
                    .await
                    .map_err(db_err)?
                    .map_or(0, |r| to_version(r.get(0)));
                Ok(CasOutcome::Conflict { current })
            }
        }
    }

    async fn keys(&self, tenant: Option<&str>) -> Result<Vec<String>> {
        let t = tenant_col(tenant)?;
        let rows = self
            .client()
            .await?
            .query("SELECT key FROM car_state WHERE tenant = $1 AND value IS NOT NULL ORDER BY key", &[&t])
            .await
            .map_err(db_err)?;
        Ok(rows.into_iter().map(|r| r.get(0)).collect())
    }
}

/// Microseconds: what `timestamptz` keeps, so the hashed time is the stored one.
fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

fn record_hash(content: &Map<String, Value>) -> String {
    crate::canonical::sha256_hex(&crate::canonical::canonical_object(content))
}

fn event_from_body(body: &str) -> Result<Event> {
    let v: Map<String, Value> = serde_json::from_str(body).map_err(db_err)?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let kind = s("kind").and_then(|k| EventKind::parse(&k)).ok_or_else(|| db_err("an event row has no valid kind"))?;
    let ts = s("timestamp")
        .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| t.with_timezone(&Utc))
        .ok_or_else(|| db_err("an event row has no valid timestamp"))?;
    Ok(stored_event(
        v.get("id").and_then(Value::as_u64).unwrap_or(0),
        kind,
        ts,
        s("proposal_id"),
        s("action_id"),
        v.get("data").cloned().unwrap_or(Value::Null),
        s("prev_hash"),
        s("hash"),
    ))
}

#[async_trait]
impl EventBackend for PgBackends {
    async fn append(&self, events: Vec<NewEvent>) -> Result<Vec<u64>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut head = self.head.lock().await;
        let mut client = self.client().await?;
        let n = i64::try_from(events.len()).map_err(db_err)?;
        let ids: Vec<i64> = client
            .query("SELECT nextval(pg_get_serial_sequence('car_events', 'id')) FROM generate_series(1::bigint, $1::bigint)", &[&n])
            .await
            .map_err(db_err)?
            .into_iter()
            .map(|r| r.get(0))
            .collect();
        let (mut seq, mut prev) = head.clone().map_or((0, None), |(s, h)| (s, Some(h)));
        let (mut c_id, mut c_seq, mut c_kind, mut c_ts, mut c_pid, mut c_aid, mut c_body, mut c_hash) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        let now = micros(Utc::now());
        for (e, id) in events.into_iter().zip(&ids) {
            seq += 1;
            let mut m = Map::new();
            m.insert("id".into(), Value::from(*id));
            m.insert("kind".into(), Value::String(e.kind.as_str().into()));
            m.insert("timestamp".into(), serde_json::json!(now));
            m.insert("proposal_id".into(), e.proposal_id.clone().map_or(Value::Null, Value::String));
            m.insert("action_id".into(), e.action_id.clone().map_or(Value::Null, Value::String));
            m.insert("data".into(), e.data);
            if let Some(p) = &prev {
                m.insert("prev_hash".into(), Value::String(p.clone()));
            }
            let hash = record_hash(&m);
            m.insert("hash".into(), Value::String(hash.clone()));
            c_id.push(*id);
            c_seq.push(seq);
            c_kind.push(e.kind.as_str().to_string());
            c_ts.push(now);
            c_pid.push(e.proposal_id);
            c_aid.push(e.action_id);
            c_body.push(Value::Object(m).to_string());
            c_hash.push(hash.clone());
            prev = Some(hash);
        }
        let tx = client.transaction().await.map_err(db_err)?;
        tx.execute(
            "INSERT INTO car_events (id, writer, seq, kind, ts, proposal_id, action_id, body, hash) \
             SELECT u.id, $2, u.seq, u.kind, u.ts, u.pid, u.aid, u.body, u.hash \
             FROM unnest($1::bigint[], $3::bigint[], $4::text[], $5::timestamptz[], $6::text[], $7::text[], $8::text[], $9::text[]) \
             AS u(id, seq, kind, ts, pid, aid, body, hash)",
            &[&c_id, &self.writer, &c_seq, &c_kind, &c_ts, &c_pid, &c_aid, &c_body, &c_hash],
        )
        .await
        .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        *head = prev.map(|h| (seq, h));
        Ok(ids.into_iter().map(to_version).collect())
    }

    async fn query(&self, q: &EventQuery) -> Result<Vec<Event>> {
        let mut kinds = Vec::with_capacity(q.kinds.len());
        for k in &q.kinds {
            EventKind::parse(k).ok_or_else(|| Error::invalid_argument("kinds", format!("unknown event kind `{k}`")))?;
            kinds.push(k.clone());
        }
        let rows = self
            .client()
            .await?
            .query(
                "SELECT body FROM car_events \
                 WHERE (cardinality($1::text[]) = 0 OR kind = ANY($1)) \
                 AND ($2::text IS NULL OR action_id = $2) AND ($3::text IS NULL OR proposal_id = $3) \
                 AND ($4::timestamptz IS NULL OR ts >= $4) AND ($5::timestamptz IS NULL OR ts < $5) \
                 ORDER BY id DESC",
                &[&kinds, &q.action_id, &q.proposal_id, &q.since, &q.until],
            )
            .await
            .map_err(db_err)?;
        let mut out = Vec::new();
        for r in rows {
            let e = event_from_body(r.get(0))?;
            let data = e.data.to_value();
            if !q.data_matches.iter().all(|(k, v)| data.get(k).is_some_and(|d| crate::ir::json_eq(d, v))) {
                continue;
            }
            out.push(e);
            if q.limit > 0 && out.len() >= q.limit {
                break;
            }
        }
        Ok(out)
    }

    async fn apply_retention(&self, policy: &RetentionPolicy) -> Result<usize> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_err)?;
        tx.batch_execute("SET LOCAL car.retention = 'on'").await.map_err(db_err)?;
        let mut removed = 0u64;
        if let Some(age) = policy.max_age_secs {
            let age = i64::try_from(age).unwrap_or(i64::MAX / 1_000_000);
            removed += tx
                .execute("DELETE FROM car_events WHERE ts < now() - make_interval(secs => $1::bigint)", &[&age])
                .await
                .map_err(db_err)?;
        }
        if let Some(max) = policy.max_events {
            let max = i64::try_from(max).unwrap_or(i64::MAX);
            removed += tx
                .execute(
                    "DELETE FROM car_events WHERE id < (SELECT min(id) FROM \
                     (SELECT id FROM car_events ORDER BY id DESC LIMIT $1) newest)",
                    &[&max],
                )
                .await
                .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    async fn chain_head(&self) -> Result<Option<ChainHead>> {
        let row = self
            .client()
            .await?
            .query_opt("SELECT id, hash FROM car_events WHERE writer = $1 ORDER BY seq DESC LIMIT 1", &[&self.writer])
            .await
            .map_err(db_err)?;
        Ok(row.map(|r| ChainHead { id: to_version(r.get(0)), hash: r.get(1) }))
    }

    /// Every writer's chain, in `seq` order; `TamperedAt` names the index
    /// of the first bad event in the log ordered by (writer, seq). The first
    /// event left of a chain (after retention) is checked but not linked.
    async fn verify(&self) -> Result<ChainVerification> {
        let rows = self
            .client()
            .await?
            .query("SELECT writer, seq, body, hash FROM car_events ORDER BY writer, seq", &[])
            .await
            .map_err(db_err)?;
        let mut prev: Option<(String, i64, String)> = None;
        for (i, r) in rows.iter().enumerate() {
            let (writer, seq, body, hash): (String, i64, String, String) = (r.get(0), r.get(1), r.get(2), r.get(3));
            let Ok(mut m) = serde_json::from_str::<Map<String, Value>>(&body) else {
                return Ok(ChainVerification::TamperedAt(i));
            };
            let stored = m.remove("hash");
            if stored.as_ref().and_then(Value::as_str) != Some(hash.as_str()) || record_hash(&m) != hash {
                return Ok(ChainVerification::TamperedAt(i));
            }
            let link = m.get("prev_hash").and_then(Value::as_str);
            if let Some((pw, ps, ph)) = &prev
                && *pw == writer
                && (seq != ps + 1 || link != Some(ph.as_str()))
            {
                return Ok(ChainVerification::TamperedAt(i));
            }
            prev = Some((writer, seq, hash));
        }
        Ok(ChainVerification::Verified(rows.len()))
    }
}

fn resolution_of(row: &tokio_postgres::Row) -> Option<Resolution> {
    let decision: Option<String> = row.get("decision");
    let decision = match decision.as_deref()? {
        "allow" => ApprovalDecision::Allow,
        _ => ApprovalDecision::Deny,
    };
    let by = match row.get::<_, Option<String>>("resolved_by").as_deref() {
        Some("host") => ResolvedBy::Host,
        _ => ResolvedBy::Timeout,
    };
    Some(Resolution {
        key: row.get("key"),
        decision,
        reason: row.get::<_, Option<String>>("reason").unwrap_or_default(),
        by,
        at: row.get::<_, Option<DateTime<Utc>>>("resolved_at").unwrap_or_else(Utc::now),
    })
}

fn pending_of(row: &tokio_postgres::Row) -> PendingApproval {
    PendingApproval {
        key: row.get("key"),
        tool: row.get("tool"),
        input_digest: row.get("input_digest"),
        requested_at: row.get("requested_at"),
        deadline: row.get("deadline"),
    }
}

const TIMEOUT_REASON: &str = "approval deadline passed without a resolution";

/// Uses a closed approval up, once: the update that sets `consumed_at` wins.
const CONSUME: &str = "UPDATE car_approvals SET consumed_at = clock_timestamp() \
                       WHERE key = $1 AND consumed_at IS NULL AND decision IS NOT NULL RETURNING *";

impl PgBackends {
    /// Closes every open approval past its deadline as a timeout deny (one
    /// conditional update with its notifications in the same commit).
    async fn expire_due(&self) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_err)?;
        let rows = tx
            .query(
                "UPDATE car_approvals SET decision = 'deny', reason = $1, resolved_by = 'timeout', resolved_at = deadline \
                 WHERE decision IS NULL AND consumed_at IS NULL AND deadline <= clock_timestamp() RETURNING *",
                &[&TIMEOUT_REASON],
            )
            .await
            .map_err(db_err)?;
        for r in &rows {
            if let Some(res) = resolution_of(r) {
                self.notify(&tx, &ApprovalEvent::Resolved(res)).await?;
            }
        }
        tx.commit().await.map_err(db_err)
    }

    async fn notify(&self, tx: &tokio_postgres::Transaction<'_>, ev: &ApprovalEvent) -> Result<()> {
        let payload = serde_json::to_string(ev).map_err(db_err)?;
        tx.execute("SELECT pg_notify($1, $2)", &[&self.shared.channel, &payload]).await.map_err(db_err)?;
        Ok(())
    }

    /// Closes `key` by its timeout unless something closed it first.
    async fn close_by_timeout(&self, key: &str, at: DateTime<Utc>) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_err)?;
        let row = tx
            .query_opt(
                "UPDATE car_approvals SET decision = 'deny', reason = $2, resolved_by = 'timeout', resolved_at = $3 \
                 WHERE key = $1 AND decision IS NULL AND consumed_at IS NULL RETURNING *",
                &[&key, &TIMEOUT_REASON, &at],
            )
            .await
            .map_err(db_err)?;
        if let Some(res) = row.as_ref().and_then(resolution_of) {
            self.notify(&tx, &ApprovalEvent::Resolved(res)).await?;
        }
        tx.commit().await.map_err(db_err)
    }
}

/// How long a waiter waits before asking a database that failed again.
const WAIT_RETRY: Duration = Duration::from_millis(250);

/// One look of a waiter at its approval.
enum WaitStep {
    /// Closed, and used up by this waiter.
    Closed(Resolution),
    /// Look again at once.
    Again,
    /// Still open: sleep this long (or until a notification).
    Sleep(Duration),
}

impl PgBackends {
    /// Uses the approval up when it is closed, closes it when its deadline
    /// passed, else says how long to sleep.
    async fn wait_step(&self, key: &str, deadline: Option<DateTime<Utc>>) -> Result<WaitStep> {
        let gone = || Error::not_found("approval_not_found", format!("no open approval `{key}`"));
        let client = self.client().await?;
        // Closed: use it up, once, in one statement (the update that sets
        // `consumed_at` wins).
        let used = client.query_opt(CONSUME, &[&key]).await.map_err(db_err)?;
        if let Some(res) = used.as_ref().and_then(resolution_of) {
            return Ok(WaitStep::Closed(res));
        }
        let row = client
            .query_opt("SELECT *, clock_timestamp() AS now FROM car_approvals WHERE key = $1", &[&key])
            .await
            .map_err(db_err)?
            .ok_or_else(gone)?;
        drop(client);
        if row.get::<_, Option<DateTime<Utc>>>("consumed_at").is_some() {
            return Err(gone());
        }
        if row.get::<_, Option<String>>("decision").is_some() {
            // Closed between the two statements: consume it.
            return Ok(WaitStep::Again);
        }
        let now: DateTime<Utc> = row.get("now");
        let due = row.get::<_, Option<DateTime<Utc>>>("deadline").or(deadline);
        if let Some(d) = due
            && d <= now
        {
            self.close_by_timeout(key, d).await?;
            return Ok(WaitStep::Again);
        }
        Ok(WaitStep::Sleep(due.map_or(APPROVAL_POLL, |d| (d - now).to_std().unwrap_or_default().min(APPROVAL_POLL))))
    }
}

#[async_trait]
impl ApprovalBackend for PgBackends {
    async fn request(
        &self,
        tenant: Option<&str>,
        tool: &str,
        input_digest: &str,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Ticket> {
        let tool = tenant_tool(tenant, tool)?;
        let key = approval_key(&tool, input_digest);
        self.expire_due().await?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_err)?;
        // A fresh request replaces a used-up approval of the same key.
        let inserted = tx
            .query_opt(
                "INSERT INTO car_approvals (key, tool, input_digest, requested_at, deadline) \
                 VALUES ($1, $2, $3, clock_timestamp(), $4) \
                 ON CONFLICT (key) DO UPDATE SET requested_at = EXCLUDED.requested_at, deadline = EXCLUDED.deadline, \
                   decision = NULL, reason = NULL, resolved_by = NULL, resolved_at = NULL, consumed_at = NULL \
                 WHERE car_approvals.consumed_at IS NOT NULL RETURNING *",
                &[&key, &&*tool, &input_digest, &deadline],
            )
            .await
            .map_err(db_err)?;
        let ticket = match inserted {
            Some(row) => {
                let p = pending_of(&row);
                self.notify(&tx, &ApprovalEvent::Pending(p.clone())).await?;
                Ticket::Pending(p)
            }
            None => {
                // A resolution not yet used applies to this request and is
                // used up by it (one conditional update: consume once).
                let used = tx.query_opt(CONSUME, &[&key]).await.map_err(db_err)?;
                match used.as_ref().and_then(resolution_of) {
                    Some(r) => Ticket::Resolved(r),
                    None => {
                        let row = tx
                            .query_one("SELECT * FROM car_approvals WHERE key = $1", &[&key])
                            .await
                            .map_err(db_err)?;
                        Ticket::Pending(pending_of(&row))
                    }
                }
            }
        };
        tx.commit().await.map_err(db_err)?;
        Ok(ticket)
    }

    async fn resolve(&self, key: &str, decision: ApprovalDecision, reason: &str) -> Result<ResolveOutcome> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_err)?;
        // First-closing-wins: one conditional update; a deadline already
        // passed (on the database's clock) closed it first.
        let row = tx
            .query_opt(
                "UPDATE car_approvals SET decision = $2, reason = $3, resolved_by = 'host', resolved_at = clock_timestamp() \
                 WHERE key = $1 AND decision IS NULL AND consumed_at IS NULL \
                   AND (deadline IS NULL OR deadline > clock_timestamp()) RETURNING *",
                &[&key, &decision.as_str(), &reason],
            )
            .await
            .map_err(db_err)?;
        if let Some(res) = row.as_ref().and_then(resolution_of) {
            self.notify(&tx, &ApprovalEvent::Resolved(res.clone())).await?;
            tx.commit().await.map_err(db_err)?;
            return Ok(ResolveOutcome { resolution: res, applied: true });
        }
        tx.commit().await.map_err(db_err)?;
        // One pooled connection at a time: holding this one while
        // `expire_due` takes another deadlocks a full pool.
        drop(client);
        self.expire_due().await?;
        let row = self
            .client()
            .await?
            .query_opt("SELECT * FROM car_approvals WHERE key = $1", &[&key])
            .await
            .map_err(db_err)?
            .ok_or_else(|| Error::not_found("approval_not_found", format!("no approval `{key}`")))?;
        match resolution_of(&row) {
            Some(res) => Ok(ResolveOutcome { resolution: res, applied: false }),
            None => Err(Error::not_found("approval_not_found", format!("no open approval `{key}`"))),
        }
    }

    async fn wait(&self, key: &str, deadline: Option<DateTime<Utc>>) -> Result<Resolution> {
        let mut rx = self.shared.events.subscribe();
        loop {
            let left = match self.wait_step(key, deadline).await {
                Ok(WaitStep::Closed(res)) => return Ok(res),
                Ok(WaitStep::Again) => continue,
                Ok(WaitStep::Sleep(left)) => left,
                Err(e) if e.code() == "approval_not_found" => return Err(e),
                // The database is away (restarting, a dropped connection):
                // the waiter stays until its deadline, then it is a deny.
                Err(e) => {
                    if deadline.is_some_and(|d| Utc::now() >= d) {
                        return Err(e);
                    }
                    WAIT_RETRY
                }
            };
            let woken = async {
                loop {
                    match rx.recv().await {
                        Ok(ApprovalEvent::Resolved(r)) if r.key == key => return,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => return,
                        Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                    }
                }
            };
            let _ = tokio::time::timeout(left, woken).await;
        }
    }

    async fn pending(&self) -> Result<Vec<PendingApproval>> {
        self.expire_due().await?;
        let rows = self
            .client()
            .await?
            .query(
                "SELECT * FROM car_approvals WHERE decision IS NULL AND consumed_at IS NULL ORDER BY requested_at, key",
                &[],
            )
            .await
            .map_err(db_err)?;
        Ok(rows.iter().map(pending_of).collect())
    }

    async fn persist_always(&self, rule: &crate::gate::GateRule) -> Result<bool> {
        let tool = rule.operation_name.clone().unwrap_or_default();
        let v = serde_json::to_value(rule).map_err(db_err)?;
        self.client()
            .await?
            .execute("INSERT INTO car_always_rules (tool, rule) VALUES ($1, $2)", &[&tool, &v])
            .await
            .map_err(db_err)?;
        Ok(true)
    }

    async fn always_rule(&self, tool: &str) -> Result<Option<crate::gate::GateRule>> {
        let row = self
            .client()
            .await?
            .query_opt("SELECT rule FROM car_always_rules WHERE tool = $1 ORDER BY id DESC LIMIT 1", &[&tool])
            .await
            .map_err(db_err)?;
        row.map(|r| serde_json::from_value(r.get::<_, Value>(0)).map_err(db_err)).transpose()
    }

    fn subscribe(&self) -> broadcast::Receiver<ApprovalEvent> {
        self.shared.events.subscribe()
    }
}

#[async_trait]
impl TierLedgerBackend for PgBackends {
    async fn latest(&self, fingerprint: &str) -> Result<Option<ApprovalRecord>> {
        let row = self
            .client()
            .await?
            .query_opt(
                "SELECT record FROM car_tier_ledger WHERE fingerprint = $1 ORDER BY id DESC LIMIT 1",
                &[&fingerprint],
            )
            .await
            .map_err(db_err)?;
        row.map(|r| serde_json::from_value(r.get::<_, Value>(0)).map_err(db_err)).transpose()
    }

    async fn append(&self, record: &ApprovalRecord) -> Result<()> {
        let v = serde_json::to_value(record).map_err(db_err)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_err)?;
        // Appends one at a time, so ids become visible in order and a
        // reader's cursor (`since`) never passes one still committing.
        // Reads do not wait on it; appends are human decisions, rare.
        tx.batch_execute("LOCK TABLE car_tier_ledger IN SHARE ROW EXCLUSIVE MODE").await.map_err(db_err)?;
        tx.execute("INSERT INTO car_tier_ledger (fingerprint, record) VALUES ($1, $2)", &[&record.fingerprint, &v])
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)
    }

    async fn since(&self, cursor: u64) -> Result<(Vec<ApprovalRecord>, u64)> {
        let from = i64::try_from(cursor).unwrap_or(i64::MAX);
        let rows = self
            .client()
            .await?
            .query("SELECT id, record FROM car_tier_ledger WHERE id > $1 ORDER BY id", &[&from])
            .await
            .map_err(db_err)?;
        let mut next = cursor;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            next = next.max(u64::try_from(r.get::<_, i64>(0)).unwrap_or(0));
            out.push(serde_json::from_value(r.get::<_, Value>(1)).map_err(db_err)?);
        }
        Ok((out, next))
    }
}

fn checkpoint_of(body: &str) -> Result<crate::checkpoint::Checkpoint> {
    serde_json::from_str(body).map_err(|e| Error::runtime("checkpoint_unreadable", format!("checkpoint: {e}")))
}

#[async_trait]
impl crate::checkpoint::CheckpointBackend for PgBackends {
    async fn save(&self, cp: &crate::checkpoint::Checkpoint) -> Result<()> {
        let body = serde_json::to_string(cp).map_err(db_err)?;
        self.client()
            .await?
            .execute(
                "INSERT INTO car_checkpoints (id, body, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, claimant = NULL, lease_until = NULL",
                &[&cp.id, &body, &cp.created_at],
            )
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn save_claimed(&self, cp: &crate::checkpoint::Checkpoint, claimant: &str, lease: Duration) -> Result<()> {
        let body = serde_json::to_string(cp).map_err(db_err)?;
        let ms = lease.as_secs_f64() * 1000.0;
        self.client()
            .await?
            .execute(
                "INSERT INTO car_checkpoints (id, body, created_at, claimant, lease_until) \
                 VALUES ($1, $2, $3, $4, clock_timestamp() + $5::float8 * interval '1 millisecond') \
                 ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, claimant = EXCLUDED.claimant, \
                 lease_until = EXCLUDED.lease_until",
                &[&cp.id, &body, &cp.created_at, &claimant, &ms],
            )
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn claim(&self, id: &str, claimant: &str, lease: Duration) -> Result<crate::checkpoint::Claim> {
        use crate::checkpoint::Claim;
        let client = self.client().await?;
        let ms = lease.as_secs_f64() * 1000.0;
        // One conditional update: the first claimant wins, an expired lease is taken over.
        let row = client
            .query_opt(
                "UPDATE car_checkpoints SET claimant = $2, \
                 lease_until = clock_timestamp() + $3::float8 * interval '1 millisecond' \
                 WHERE id = $1 AND (claimant IS NULL OR claimant = $2 OR lease_until < clock_timestamp()) \
                 RETURNING body",
                &[&id, &claimant, &ms],
            )
            .await
            .map_err(db_err)?;
        if let Some(r) = row {
            return Ok(Claim::Claimed(Box::new(checkpoint_of(r.get::<_, &str>(0))?)));
        }
        let held = client
            .query_opt("SELECT claimant, lease_until FROM car_checkpoints WHERE id = $1", &[&id])
            .await
            .map_err(db_err)?;
        Ok(match held {
            None => Claim::NotFound,
            Some(r) => Claim::Held {
                by: r.get::<_, Option<String>>(0).unwrap_or_default(),
                until: r.get::<_, Option<DateTime<Utc>>>(1).unwrap_or_else(Utc::now),
            },
        })
    }

    async fn release(&self, id: &str, claimant: &str) -> Result<()> {
        self.client()
            .await?
            .execute(
                "UPDATE car_checkpoints SET claimant = NULL, lease_until = NULL WHERE id = $1 AND claimant = $2",
                &[&id, &claimant],
            )
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn remove(&self, id: &str, claimant: &str) -> Result<()> {
        self.client()
            .await?
            .execute("DELETE FROM car_checkpoints WHERE id = $1 AND claimant = $2", &[&id, &claimant])
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<crate::checkpoint::Checkpoint>> {
        let row = self
            .client()
            .await?
            .query_opt("SELECT body FROM car_checkpoints WHERE id = $1", &[&id])
            .await
            .map_err(db_err)?;
        row.map(|r| checkpoint_of(r.get::<_, &str>(0))).transpose()
    }

    async fn list(&self) -> Result<Vec<crate::checkpoint::Checkpoint>> {
        let rows = self
            .client()
            .await?
            .query("SELECT body FROM car_checkpoints ORDER BY created_at, id", &[])
            .await
            .map_err(db_err)?;
        rows.iter().map(|r| checkpoint_of(r.get::<_, &str>(0))).collect()
    }
}

#[async_trait]
impl RateLimitBackend for PgBackends {
    async fn try_acquire(
        &self,
        tenant: Option<&str>,
        key: &str,
        max_calls: u32,
        interval: Duration,
    ) -> Result<Option<Duration>> {
        let t = tenant_col(tenant)?;
        let secs = interval.as_secs_f64();
        let max = i64::from(max_calls);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_err)?;
        // One window at a time; the clock is read after the lock is held.
        tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2, 0))", &[&t, &key])
            .await
            .map_err(db_err)?;
        let row = tx
            .query_one(
                "WITH now AS (SELECT clock_timestamp() AS t), \
                 gone AS (DELETE FROM car_rate_starts WHERE tenant = $1 AND key = $2 \
                          AND at <= (SELECT t FROM now) - make_interval(secs => $3::float8)) \
                 SELECT (SELECT t FROM now), count(*), min(at) FROM car_rate_starts \
                 WHERE tenant = $1 AND key = $2 AND at > (SELECT t FROM now) - make_interval(secs => $3::float8)",
                &[&t, &key, &secs],
            )
            .await
            .map_err(db_err)?;
        let (now, count, oldest): (DateTime<Utc>, i64, Option<DateTime<Utc>>) = (row.get(0), row.get(1), row.get(2));
        let answer = if count < max {
            tx.execute("INSERT INTO car_rate_starts (tenant, key, at) VALUES ($1, $2, $3)", &[&t, &key, &now])
                .await
                .map_err(db_err)?;
            None
        } else {
            let until = oldest.map(|o| o + chrono::Duration::from_std(interval).unwrap_or_default());
            Some(until.and_then(|u| (u - now).to_std().ok()).unwrap_or_default())
        };
        tx.commit().await.map_err(db_err)?;
        Ok(answer)
    }
}

enum SinkMsg {
    Event(NewEvent),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// An [`crate::events::EventSink`] writing a daemon's events to the events
/// table in batches, off the per-action path: recording hands the event to
/// a writer task, which appends everything queued in one `INSERT`; a
/// [`crate::events::EventSink::durable`] ticket resolves once the batch
/// holding everything before it has committed (the engine awaits it before
/// a proposal answers).
pub struct PgEventSink {
    tx: tokio::sync::mpsc::UnboundedSender<SinkMsg>,
}

impl std::fmt::Debug for PgEventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgEventSink")
    }
}

/// The most events one batch holds.
pub const SINK_BATCH: usize = 512;

impl PgEventSink {
    /// Starts the writer task on the current tokio runtime.
    pub fn spawn(backends: PgBackends) -> Arc<PgEventSink> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<SinkMsg>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = Vec::new();
                let mut tickets = Vec::new();
                let mut next = Some(first);
                while let Some(m) = next.take() {
                    match m {
                        SinkMsg::Event(e) => batch.push(e),
                        SinkMsg::Flush(t) => tickets.push(t),
                    }
                    if batch.len() < SINK_BATCH {
                        next = rx.try_recv().ok();
                    }
                }
                let mut delay = Duration::from_millis(50);
                while !batch.is_empty() {
                    match EventBackend::append(&backends, batch.clone()).await {
                        Ok(_) => break,
                        Err(e) => {
                            // Kept and retried: the audit log must not lose
                            // a batch while the database restarts.
                            eprintln!("car-server: event store: {e}; retrying the batch of {}", batch.len());
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(5));
                        }
                    }
                }
                for t in tickets {
                    let _ = t.send(());
                }
            }
        });
        Arc::new(PgEventSink { tx })
    }
}

impl crate::events::EventSink for PgEventSink {
    fn record(&self, event: &Event) {
        let e = NewEvent {
            kind: event.kind,
            proposal_id: event.proposal_id.as_deref().map(str::to_string),
            action_id: event.action_id.as_deref().map(str::to_string),
            data: event.data.to_value(),
        };
        let _ = self.tx.send(SinkMsg::Event(e));
    }

    fn durable(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let (t, rx) = tokio::sync::oneshot::channel();
        self.tx.send(SinkMsg::Flush(t)).ok()?;
        Some(rx)
    }
}
