//! The store traits: where the runtime keeps what must outlive a call.
//!
//! Five backends, each an async trait, so the embedded stores (in memory or
//! in files, the default) and a shared database (`postgres` feature,
//! [`postgres`]) are interchangeable:
//!
//! - [`StateBackend`]: versioned keys with compare-and-set ([`Expect`]:
//!   absent, version `n`, or any), tenant-scoped.
//! - [`EventBackend`]: the event log: append (in batches), query, retention,
//!   hash-chain head and verification.
//! - [`ApprovalBackend`]: ask-approvals: request, resolve first-closing-wins,
//!   wait with a deadline (using the resolution up, once), pending,
//!   subscribe to changes.
//! - [`TierLedgerBackend`]: the tier approvals ledger.
//! - [`RateLimitBackend`]: sliding rate-limit windows.
//!
//! The embedded implementations are the existing types
//! ([`crate::state::StateStore`], [`crate::events::EventLog`],
//! [`crate::approval::store::ApprovalStore`], every
//! [`crate::approval::ledger::ApprovalLedger`],
//! [`crate::engine::RateLimiter`]); their own synchronous APIs stay as they
//! were (the engine calls them directly, so the embedded per-action cost does
//! not change). [`Backends`] is one set of the five; see `docs/stores.md`.
//!
//! Tenants are part of every key: a backend never lets one tenant's key,
//! approval or window answer for another tenant's identical one.

mod embedded;
pub mod file;
pub mod ledger;
#[cfg(feature = "postgres")]
pub mod postgres;

pub use embedded::tenant_tool;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::Result;
use crate::approval::ledger::ApprovalRecord;
use crate::approval::store::{ApprovalDecision, ApprovalEvent, PendingApproval, Resolution, ResolveOutcome, Ticket};
use crate::events::{ChainVerification, Event, EventKind, EventQuery, RetentionPolicy};
pub use crate::state::{CasOutcome, Expect};

/// A key's value and version (0 and `None`: never written; a deleted key
/// keeps its version and has no value).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Versioned {
    /// The value, when the key holds one.
    pub value: Option<Value>,
    /// The version: bumped by every write and delete.
    pub version: u64,
}

/// Versioned state with compare-and-set.
#[async_trait]
pub trait StateBackend: Send + Sync {
    /// The value and version of `key` in the tenant's scope (`None`: the
    /// unscoped view).
    async fn get(&self, tenant: Option<&str>, key: &str) -> Result<Versioned>;
    /// Writes (`Some`) or deletes (`None`) `key` when it meets `expect`,
    /// checked and written atomically; a conflict writes nothing.
    async fn put(&self, tenant: Option<&str>, key: &str, value: Option<Value>, expect: Expect) -> Result<CasOutcome>;
    /// Keys holding a value in the tenant's scope, sorted.
    async fn keys(&self, tenant: Option<&str>) -> Result<Vec<String>>;
    /// Every key of the tenant's scope with its value and version (a
    /// deleted key with `value: None` where the store keeps its version).
    async fn snapshot(&self, tenant: Option<&str>) -> Result<Vec<(String, Versioned)>> {
        let mut out = Vec::new();
        for k in self.keys(tenant).await? {
            let v = self.get(tenant, &k).await?;
            out.push((k, v));
        }
        Ok(out)
    }
}

/// An event to append.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// What happened.
    pub kind: EventKind,
    /// The proposal, when any.
    pub proposal_id: Option<String>,
    /// The action, when any.
    pub action_id: Option<String>,
    /// The payload.
    pub data: Value,
}

impl NewEvent {
    /// An event of `kind` with `data` and no proposal or action.
    pub fn new(kind: EventKind, data: Value) -> Self {
        NewEvent { kind, proposal_id: None, action_id: None, data }
    }
}

/// The last link of a hash chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    /// The id of the last chained event.
    pub id: u64,
    /// Its hash.
    pub hash: String,
}

/// The event log.
#[async_trait]
pub trait EventBackend: Send + Sync {
    /// Appends events in order, chained (each links to the previous event
    /// of the same writer); answers once they are durable, with their ids.
    async fn append(&self, events: Vec<NewEvent>) -> Result<Vec<u64>>;
    /// Events matching the query, newest first.
    async fn query(&self, q: &EventQuery) -> Result<Vec<Event>>;
    /// Applies a retention policy now; returns how many events it removed.
    async fn apply_retention(&self, policy: &RetentionPolicy) -> Result<usize>;
    /// The head of this writer's chain (`None`: nothing chained yet).
    async fn chain_head(&self) -> Result<Option<ChainHead>>;
    /// Verifies every chain the log holds.
    async fn verify(&self) -> Result<ChainVerification>;
}

/// Ask-approvals, shared by every front end (and every host, with a shared
/// backend).
#[async_trait]
pub trait ApprovalBackend: Send + Sync {
    /// Asks for an approval of `tool` with the input digest `input_digest`
    /// for `tenant`, denied at `deadline` when unanswered. An approval
    /// already pending for the same key is joined; a resolution of it not
    /// yet used applies at once ([`Ticket::Resolved`]).
    async fn request(
        &self,
        tenant: Option<&str>,
        tool: &str,
        input_digest: &str,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Ticket>;
    /// Resolves `key`; first-closing-wins (a later resolution, or one after
    /// the deadline, is not applied and the first stays in force).
    async fn resolve(&self, key: &str, decision: ApprovalDecision, reason: &str) -> Result<ResolveOutcome>;
    /// Waits until `key` is closed (by a resolution or at its deadline, a
    /// deny; `deadline` applies when the approval has none) and uses the
    /// resolution up: a second wait for the same approval finds nothing.
    async fn wait(&self, key: &str, deadline: Option<DateTime<Utc>>) -> Result<Resolution>;
    /// Open approvals, oldest first (the overdue ones closed first).
    async fn pending(&self) -> Result<Vec<PendingApproval>>;
    /// Notifications of requests and resolutions.
    fn subscribe(&self) -> broadcast::Receiver<ApprovalEvent>;
    /// Records an `always` decision (`rule`) for every host of the store;
    /// `false` when this backend keeps none (the host keeps its rules
    /// itself, `always-rules.jsonl` beside its approvals).
    async fn persist_always(&self, rule: &crate::gate::GateRule) -> Result<bool> {
        let _ = rule;
        Ok(false)
    }
    /// The latest `always` rule on `tool` in the store (`None`: none, or
    /// this backend keeps none).
    async fn always_rule(&self, tool: &str) -> Result<Option<crate::gate::GateRule>> {
        let _ = tool;
        Ok(None)
    }
}

/// The tier approvals ledger.
#[async_trait]
pub trait TierLedgerBackend: Send + Sync {
    /// The latest record of a fingerprint.
    async fn latest(&self, fingerprint: &str) -> Result<Option<ApprovalRecord>>;
    /// Appends a record. Records become readable through [`Self::since`]
    /// in the order of their positions (a reader never skips one appended
    /// before the last it read).
    async fn append(&self, record: &ApprovalRecord) -> Result<()>;
    /// The records after position `cursor` (0: all), oldest first, and the
    /// position after the last of them.
    async fn since(&self, cursor: u64) -> Result<(Vec<ApprovalRecord>, u64)>;
}

/// Sliding rate-limit windows: at most `max_calls` starts within any trailing
/// `interval` per window key.
#[async_trait]
pub trait RateLimitBackend: Send + Sync {
    /// Takes a slot of the tenant's window `key` when one is free (`None`);
    /// otherwise takes nothing and answers how long to wait before trying
    /// again.
    async fn try_acquire(
        &self,
        tenant: Option<&str>,
        key: &str,
        max_calls: u32,
        interval: Duration,
    ) -> Result<Option<Duration>>;

    /// Waits for a slot, then takes it. `max_calls = 0` is refused.
    async fn acquire(&self, tenant: Option<&str>, key: &str, max_calls: u32, interval: Duration) -> Result<()> {
        if max_calls == 0 {
            return Err(crate::Error::invalid_argument(
                "max_calls",
                format!("window `{key}` allows 0 calls: it would wait forever"),
            ));
        }
        loop {
            match self.try_acquire(tenant, key, max_calls, interval).await? {
                None => return Ok(()),
                Some(wait) => tokio::time::sleep(wait.max(Duration::from_micros(100))).await,
            }
        }
    }
}

/// One set of backends.
#[derive(Clone)]
pub struct Backends {
    /// Versioned state.
    pub state: Arc<dyn StateBackend>,
    /// The event log.
    pub events: Arc<dyn EventBackend>,
    /// Ask-approvals.
    pub approvals: Arc<dyn ApprovalBackend>,
    /// The tier ledger.
    pub ledger: Arc<dyn TierLedgerBackend>,
    /// Rate-limit windows.
    pub rates: Arc<dyn RateLimitBackend>,
    /// Suspended proposals (`crate::checkpoint`).
    pub checkpoints: Arc<dyn crate::checkpoint::CheckpointBackend>,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Backends { .. }")
    }
}

impl Backends {
    /// The embedded set: state, events (chained), tier ledger and rate
    /// windows in memory; approvals in `approvals_dir` (the durable JSONL
    /// store) and suspended proposals in its `checkpoints` directory.
    pub fn embedded(approvals_dir: impl AsRef<std::path::Path>) -> Result<Self> {
        let checkpoints = crate::checkpoint::FileCheckpoints::open(approvals_dir.as_ref().join("checkpoints"))?;
        let events = crate::events::EventLog::new();
        events.enable_chaining();
        Ok(Backends {
            state: Arc::new(crate::state::StateStore::new()),
            events: Arc::new(events),
            approvals: Arc::new(crate::approval::store::ApprovalStore::open(approvals_dir)?),
            ledger: Arc::new(crate::approval::ledger::MemoryLedger::default()),
            rates: Arc::new(crate::engine::RateLimiter::default()),
            checkpoints: Arc::new(checkpoints),
        })
    }
}

/// The event a backend returns for a stored record.
#[cfg(feature = "postgres")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn stored_event(
    id: u64,
    kind: EventKind,
    timestamp: DateTime<Utc>,
    proposal_id: Option<String>,
    action_id: Option<String>,
    data: Value,
    prev_hash: Option<String>,
    hash: Option<String>,
) -> Event {
    Event {
        id,
        kind,
        timestamp,
        proposal_id: proposal_id.map(Arc::from),
        action_id: action_id.map(Arc::from),
        data: crate::events::EventData::Value(Box::new(data)),
        chain: crate::events::ChainLink::boxed(prev_hash, hash),
    }
}
