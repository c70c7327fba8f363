//! The embedded stores implement the store traits by calling their own
//! synchronous APIs (which stay the engine's fast path).

use std::borrow::Cow;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::broadcast;

use super::{
    ApprovalBackend, CasOutcome, ChainHead, EventBackend, Expect, NewEvent, RateLimitBackend, StateBackend,
    TierLedgerBackend, Versioned,
};
use crate::approval::ledger::{ApprovalLedger, ApprovalRecord, JsonlLedger, MemoryLedger};
use crate::approval::store::{
    ApprovalDecision, ApprovalEvent, ApprovalStore, PendingApproval, Resolution, ResolveOutcome, Ticket,
};
use crate::engine::RateLimiter;
use crate::events::{ChainVerification, Event, EventData, EventLog, EventQuery, RetentionPolicy};
use crate::state::{Scope, StateStore};
use crate::{Error, Result};

/// The tool name an approval of `tool` is keyed by for `tenant`:
/// `tenant:<id>:<tool>` (so the approval key is
/// `tenant:<id>:<tool>:<digest>`), the tool itself when unscoped. The tenant
/// id follows the state store's rule (non-empty, no `:`).
pub fn tenant_tool<'a>(tenant: Option<&str>, tool: &'a str) -> Result<Cow<'a, str>> {
    match tenant {
        None => Ok(Cow::Borrowed(tool)),
        Some(t) => {
            Scope::tenant(t)?;
            Ok(Cow::Owned(format!("{}{t}:{tool}", crate::state::TENANT_PREFIX)))
        }
    }
}

fn refused(key: &str) -> Error {
    Error::invalid_argument("key", format!("`{key}` is a tenant key; pass the tenant instead of the prefix"))
}

#[async_trait]
impl StateBackend for StateStore {
    async fn get(&self, tenant: Option<&str>, key: &str) -> Result<Versioned> {
        let scope = Scope::from_option(tenant)?;
        let phys = scope.physical(key).ok_or_else(|| refused(key))?;
        let (value, version) = self.versioned_physical(&phys);
        Ok(Versioned { value, version })
    }

    async fn put(&self, tenant: Option<&str>, key: &str, value: Option<Value>, expect: Expect) -> Result<CasOutcome> {
        let scope = Scope::from_option(tenant)?;
        let phys = scope.physical(key).ok_or_else(|| refused(key))?;
        self.compare_and_set_physical(&phys, value, expect, None)
    }

    async fn keys(&self, tenant: Option<&str>) -> Result<Vec<String>> {
        Ok(StateStore::keys(self, &Scope::from_option(tenant)?))
    }
}

#[async_trait]
impl EventBackend for EventLog {
    async fn append(&self, events: Vec<NewEvent>) -> Result<Vec<u64>> {
        // The trait's log is chained.
        self.enable_chaining();
        let mut ids = Vec::with_capacity(events.len());
        for e in events {
            let pid = e.proposal_id.map(std::sync::Arc::from);
            let aid = e.action_id.map(std::sync::Arc::from);
            ids.push(EventLog::append(self, e.kind, pid.as_ref(), aid.as_ref(), EventData::Value(Box::new(e.data))));
        }
        Ok(ids)
    }

    async fn query(&self, q: &EventQuery) -> Result<Vec<Event>> {
        EventLog::query(self, q)
    }

    async fn apply_retention(&self, policy: &RetentionPolicy) -> Result<usize> {
        // Once, now: the log's standing policy stays as it was.
        let standing = self.retention();
        let removed = self.set_retention(policy.clone());
        self.set_retention(standing);
        Ok(removed)
    }

    async fn chain_head(&self) -> Result<Option<ChainHead>> {
        Ok(self
            .events()
            .into_iter()
            .rev()
            .find_map(|e| e.hash().map(|hash| ChainHead { id: e.id, hash: hash.to_string() })))
    }

    async fn verify(&self) -> Result<ChainVerification> {
        Ok(self.verify_chain())
    }
}

#[async_trait]
impl ApprovalBackend for ApprovalStore {
    async fn request(
        &self,
        tenant: Option<&str>,
        tool: &str,
        input_digest: &str,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Ticket> {
        ApprovalStore::request(self, &tenant_tool(tenant, tool)?, input_digest, deadline)
    }

    async fn resolve(&self, key: &str, decision: ApprovalDecision, reason: &str) -> Result<ResolveOutcome> {
        ApprovalStore::resolve(self, key, decision, reason)
    }

    async fn wait(&self, key: &str, deadline: Option<DateTime<Utc>>) -> Result<Resolution> {
        let open: Option<PendingApproval> = ApprovalStore::pending(self)?.into_iter().find(|p| p.key == key);
        match open {
            Some(p) => self.wait_pending(&p, deadline).await,
            None => ApprovalStore::wait(self, key).await,
        }
    }

    async fn pending(&self) -> Result<Vec<PendingApproval>> {
        ApprovalStore::pending(self)
    }

    fn subscribe(&self) -> broadcast::Receiver<ApprovalEvent> {
        ApprovalStore::subscribe(self)
    }
}

/// The records of an append-only list after position `cursor`.
fn since_in(all: Vec<ApprovalRecord>, cursor: u64) -> Result<(Vec<ApprovalRecord>, u64)> {
    let n = all.len() as u64;
    let from = usize::try_from(cursor.min(n)).unwrap_or(usize::MAX);
    Ok((all.into_iter().skip(from).collect(), n.max(cursor)))
}

#[async_trait]
impl TierLedgerBackend for JsonlLedger {
    async fn latest(&self, fingerprint: &str) -> Result<Option<ApprovalRecord>> {
        ApprovalLedger::latest(self, fingerprint)
    }

    async fn append(&self, record: &ApprovalRecord) -> Result<()> {
        ApprovalLedger::append(self, record)
    }

    async fn since(&self, cursor: u64) -> Result<(Vec<ApprovalRecord>, u64)> {
        since_in(self.records()?, cursor)
    }
}

#[async_trait]
impl TierLedgerBackend for MemoryLedger {
    async fn latest(&self, fingerprint: &str) -> Result<Option<ApprovalRecord>> {
        ApprovalLedger::latest(self, fingerprint)
    }

    async fn append(&self, record: &ApprovalRecord) -> Result<()> {
        ApprovalLedger::append(self, record)
    }

    async fn since(&self, cursor: u64) -> Result<(Vec<ApprovalRecord>, u64)> {
        since_in(self.all()?, cursor)
    }
}

#[async_trait]
impl RateLimitBackend for RateLimiter {
    async fn try_acquire(
        &self,
        tenant: Option<&str>,
        key: &str,
        max_calls: u32,
        interval: Duration,
    ) -> Result<Option<Duration>> {
        let window = tenant_tool(tenant, key)?;
        self.try_take(&window, max_calls as usize, interval).map_err(|e| Error::runtime("rate_limiter_poisoned", e))
    }
}
