//! The execution engine: a [`Runtime`] owns a tool registry, the policy
//! engine, the state store and the event log, and executes proposals with a
//! host-supplied [`ToolExecutor`].
//!
//! Execution runs admission first (unknown tools, parameter schemas, policy
//! violations, cycles, the cost budget: a refused action is `rejected` and its
//! `failure_behavior` applies), then the DAG level by level with independent
//! actions running concurrently. Each proposal writes state through its own
//! transaction, restored on abort without touching other proposals' keys.

mod detached;
mod executor;
mod limits;
mod registry;
mod run;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{Value, json};
use tokio::sync::broadcast;

pub use detached::DetachedTools;
pub use executor::{CancelToken, ChunkStream, FnExecutor, ToolCall, ToolExecutor};
pub use limits::{RateLimiter, ResultCache, cache_key};
pub use registry::{RegisteredTool, ToolRegistry};

use crate::events::{EventKind, EventLog, RetentionPolicy};
use crate::ir::{CostBudget, ToolPollResult, ToolSchema, ToolSource, ToolStreamEvent};
use crate::policy::PolicyEngine;
use crate::state::{Scope, StateStore};
use crate::{Error, Result};

/// The warning on a succeeded action of an aborted proposal.
pub const ROLLBACK_WARNING: &str =
    "proposal aborted; state effects were rolled back; external effects may remain and were not undone";

/// Runtime options.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Run the compensation of every succeeded `compensable` action, in
    /// reverse completion order, when a proposal aborts. Off by default.
    pub compensate_on_abort: bool,
    /// Event log retention.
    pub event_retention: RetentionPolicy,
    /// Chunks a detached tool handle buffers before dropping the oldest.
    pub chunk_buffer_size: usize,
    /// A hard budget: proposals over `max_actions` / `max_tool_calls` are
    /// refused before anything runs; `max_duration_ms` stops dispatching.
    pub cost_budget: Option<CostBudget>,
    /// At most this many independent actions of a proposal in flight at once
    /// (default 256).
    pub max_concurrency: usize,
    /// At most this many retries of one action, whatever its `max_retries`
    /// says (default [`DEFAULT_RETRY_CAP`]).
    pub retry_cap: u32,
    /// The first retry waits about this long (half to all of it, jittered);
    /// each later one twice as long, at most [`MAX_RETRY_BACKOFF_MS`]. 0: no wait.
    pub retry_backoff_ms: u64,
}

/// The default cap on retries of one action.
pub const DEFAULT_RETRY_CAP: u32 = 10;
/// The default base of the retry backoff.
pub const DEFAULT_RETRY_BACKOFF_MS: u64 = 10;
/// The longest wait between two attempts.
pub const MAX_RETRY_BACKOFF_MS: u64 = 5_000;

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            compensate_on_abort: false,
            event_retention: RetentionPolicy::default(),
            chunk_buffer_size: 1024,
            cost_budget: None,
            max_concurrency: 256,
            retry_cap: DEFAULT_RETRY_CAP,
            retry_backoff_ms: DEFAULT_RETRY_BACKOFF_MS,
        }
    }
}

impl RuntimeOptions {
    /// Sets `compensate_on_abort`.
    pub fn compensate_on_abort(mut self, on: bool) -> Self {
        self.compensate_on_abort = on;
        self
    }

    /// Sets the event retention.
    pub fn event_retention(mut self, r: RetentionPolicy) -> Self {
        self.event_retention = r;
        self
    }

    /// Sets the detached chunk buffer size (at least 1).
    pub fn chunk_buffer_size(mut self, n: usize) -> Self {
        self.chunk_buffer_size = n.max(1);
        self
    }

    /// Sets the in-flight window for independent actions (at least 1).
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.max(1);
        self
    }

    /// Sets the retry cap.
    pub fn retry_cap(mut self, n: u32) -> Self {
        self.retry_cap = n;
        self
    }

    /// Sets the retry backoff base (0: retry at once).
    pub fn retry_backoff_ms(mut self, ms: u64) -> Self {
        self.retry_backoff_ms = ms;
        self
    }

    /// Sets the cost budget.
    pub fn cost_budget(mut self, b: CostBudget) -> Self {
        self.cost_budget = Some(b);
        self
    }
}

/// A verdict hook run for every action at admission, before anything runs:
/// the permission chain and gate plug in here. `Some(reason)` refuses the
/// action (`rejected`, then its failure behavior). It receives the action and
/// the execution's policy session.
pub type AdmissionCheck = Arc<dyn Fn(&crate::ir::Action, Option<&str>) -> Option<String> + Send + Sync>;

/// What an [`AdmissionHook`] decides for one action.
pub enum AdmissionVerdict {
    /// The action is admitted.
    Admit,
    /// The action is refused (`rejected`, then its failure behavior).
    Refuse(String),
    /// The action is held until the future settles: `None` admits it,
    /// `Some(reason)` refuses it. The future is awaited when the action's
    /// turn to dispatch comes, on the engine's async runtime (no worker
    /// thread blocks), while the proposal's other actions go on. When the
    /// proposal aborts while the action is held, the hold is dropped and the
    /// action is skipped; an action the proposal never reaches drops it too.
    Hold(futures::future::BoxFuture<'static, Option<String>>),
}

impl std::fmt::Debug for AdmissionVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdmissionVerdict::Admit => f.write_str("Admit"),
            AdmissionVerdict::Refuse(r) => f.debug_tuple("Refuse").field(r).finish(),
            AdmissionVerdict::Hold(_) => f.write_str("Hold(..)"),
        }
    }
}

/// The admission hook with holds: like [`AdmissionCheck`], but an action may
/// be put on hold (an `ask` waiting for a live approver).
pub type AdmissionHook = Arc<dyn Fn(&crate::ir::Action, Option<&str>) -> AdmissionVerdict + Send + Sync>;

/// Per-execution options.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// The policy session scope (its policies apply on top of the global ones).
    pub session_id: Option<String>,
    /// The state tenant the proposal reads and writes.
    pub tenant: Option<String>,
    /// The isolation working directory every tool call gets (`cwd`).
    pub cwd: Option<String>,
    /// The declared isolation every tool call names (`isolation`).
    pub isolation: Option<Value>,
    /// Suspend instead of waiting on an ask approval nobody answered yet
    /// (`on_ask = "suspend"`, [`crate::checkpoint`]): the proposal settles
    /// with status `suspended` once every branch that can run has run.
    pub suspend: bool,
    /// Who submits the proposal (recorded in a checkpoint: only they, or an
    /// operator, may resume it).
    pub owner: Option<String>,
}

pub(crate) struct Inner {
    pub(crate) options: RuntimeOptions,
    pub(crate) tools: RwLock<ToolRegistry>,
    pub(crate) policies: RwLock<PolicyEngine>,
    pub(crate) state: StateStore,
    pub(crate) events: EventLog,
    pub(crate) idempotency: ResultCache,
    pub(crate) ttl_cache: ResultCache,
    pub(crate) rate: RateLimiter,
    /// Rate windows kept elsewhere (a daemon's one set, or a shared
    /// store's): when set, tool `rate_limit`s take their slots there.
    pub(crate) shared_rates: RwLock<Option<Arc<dyn crate::store::RateLimitBackend>>>,
    pub(crate) detached: Arc<DetachedTools>,
    pub(crate) request_seq: AtomicU64,
    pub(crate) admission: RwLock<Option<AdmissionHook>>,
    /// The admission stage (`crate::admission`): tier, chain, approvals, inspectors.
    pub(crate) stage: RwLock<Arc<crate::admission::AdmissionStage>>,
    /// Where suspended proposals wait (`crate::checkpoint`).
    pub(crate) checkpoints: RwLock<Arc<dyn crate::checkpoint::CheckpointBackend>>,
    /// The shared state store, when the state lives there (`set_shared_state`).
    pub(crate) shared_state: RwLock<Option<Arc<dyn crate::store::StateBackend>>>,
    /// The lease of a checkpoint claim, in milliseconds.
    pub(crate) lease_ms: AtomicU64,
    /// `ModelRetry` failures per call chain (policy session and tool), until
    /// the chain's next success.
    pub(crate) model_retries: Mutex<HashMap<String, u32>>,
    /// Whether `model_retries` holds any chain (a success looks only then).
    pub(crate) model_retries_held: AtomicBool,
}

/// How many `ModelRetry` failures a call chain (a policy session's calls of
/// one tool) reports as retryable before a success; later ones say the
/// limit is reached (tools-and-permissions.md: "bounded to 2 attempts per
/// call chain").
pub const MODEL_RETRY_LIMIT: u32 = 2;

/// How many call chains' `ModelRetry` counts a runtime keeps at once.
const MODEL_RETRY_CHAINS: usize = 4096;

/// An in-process runtime. Cheap to clone (shared state); Send + Sync.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("options", &self.inner.options).finish_non_exhaustive()
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::new(RuntimeOptions::default())
    }
}

fn poisoned(what: &str) -> Error {
    Error::runtime("lock_poisoned", format!("the {what} lock was poisoned by a panic"))
}

impl Runtime {
    /// A runtime with these options.
    pub fn new(options: RuntimeOptions) -> Self {
        let events = EventLog::with_retention(options.event_retention.clone());
        let detached = Arc::new(DetachedTools::new(options.chunk_buffer_size));
        Runtime {
            inner: Arc::new(Inner {
                options,
                tools: RwLock::new(ToolRegistry::default()),
                policies: RwLock::new(PolicyEngine::new()),
                state: StateStore::new(),
                events,
                idempotency: ResultCache::default(),
                ttl_cache: ResultCache::default(),
                rate: RateLimiter::default(),
                shared_rates: RwLock::new(None),
                detached,
                request_seq: AtomicU64::new(0),
                model_retries: Mutex::new(HashMap::new()),
                model_retries_held: AtomicBool::new(false),
                admission: RwLock::new(None),
                stage: RwLock::new(Arc::new(crate::admission::AdmissionStage::empty())),
                checkpoints: RwLock::new(Arc::new(crate::checkpoint::MemoryCheckpoints::default())),
                shared_state: RwLock::new(None),
                lease_ms: AtomicU64::new(crate::checkpoint::DEFAULT_LEASE.as_millis() as u64),
            }),
        }
    }

    /// Installs (or removes) the admission verdict hook. It shares one slot
    /// with [`Runtime::set_admission_hook`]: the last one set is in force.
    pub fn set_admission_check(&self, check: Option<AdmissionCheck>) {
        self.set_admission_hook(check.map(|c| -> AdmissionHook {
            Arc::new(move |a, s| match c(a, s) {
                Some(reason) => AdmissionVerdict::Refuse(reason),
                None => AdmissionVerdict::Admit,
            })
        }));
    }

    /// Installs (or removes) an admission hook that may hold actions.
    pub fn set_admission_hook(&self, hook: Option<AdmissionHook>) {
        if let Ok(mut a) = self.inner.admission.write() {
            *a = hook;
        }
    }

    /// Takes every tool `rate_limit` slot from `backend` (shared with other
    /// runtimes: a daemon's connections, or every daemon of a shared
    /// store) instead of this runtime's own windows; `None` goes back to
    /// them. A backend that cannot answer fails the call (it never runs
    /// unlimited).
    pub fn set_rate_backend(&self, backend: Option<Arc<dyn crate::store::RateLimitBackend>>) {
        match self.inner.shared_rates.write() {
            Ok(mut r) => *r = backend,
            Err(p) => *p.into_inner() = backend,
        }
    }

    /// Waits for a slot of `tool`'s rate window (its `rate_limit`), in the
    /// shared backend when one is set.
    pub(crate) async fn take_rate_slot(&self, tool: &str, limit: &crate::ir::ToolRateLimit) -> Result<(), String> {
        let shared = self.inner.shared_rates.read().map(|r| r.clone()).unwrap_or_else(|p| p.into_inner().clone());
        match shared {
            None => self.inner.rate.acquire(tool, limit).await,
            Some(b) => {
                let interval = limits::window_of(tool, limit)?;
                b.acquire(None, tool, limit.max_calls, interval)
                    .await
                    .map_err(|e| format!("tool '{tool}': rate window: {e}"))
            }
        }
    }

    /// Keeps suspended proposals in `backend` (default: in memory, this
    /// runtime only). A proposal already suspended stays where it was saved.
    pub fn set_checkpoints(&self, backend: Arc<dyn crate::checkpoint::CheckpointBackend>) {
        match self.inner.checkpoints.write() {
            Ok(mut c) => *c = backend,
            Err(p) => *p.into_inner() = backend,
        }
    }

    /// Keeps the state in `backend`, shared with other runtimes (every
    /// daemon of one database, `car-server --shared-state`), instead of
    /// this runtime alone: a proposal starts from the store's state, reads
    /// the keys an action checks again before it runs, writes each key by
    /// compare-and-set in the store (a `read_version` that moved is a
    /// `conflict` there too), and a rollback restores a key in the store
    /// only while its version is still the one the proposal wrote. The
    /// runtime's own state mirrors the store's. `None`: back to this
    /// runtime's state alone.
    pub fn set_shared_state(&self, backend: Option<Arc<dyn crate::store::StateBackend>>) {
        match self.inner.shared_state.write() {
            Ok(mut s) => *s = backend,
            Err(p) => *p.into_inner() = backend,
        }
    }

    /// How long a claim on a checkpoint holds before another may take it
    /// (a resumer's, a journaled run's; renewed every third of it while the
    /// claimant runs). Default [`crate::checkpoint::DEFAULT_LEASE`]; at
    /// least 100 ms.
    pub fn set_checkpoint_lease(&self, lease: std::time::Duration) {
        self.inner.lease_ms.store(lease.as_millis().max(100) as u64, Ordering::Relaxed);
    }

    /// The lease of a checkpoint claim.
    pub fn checkpoint_lease(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.inner.lease_ms.load(Ordering::Relaxed))
    }

    /// The shared state store, when set.
    pub fn shared_state(&self) -> Option<Arc<dyn crate::store::StateBackend>> {
        self.inner.shared_state.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Where suspended proposals wait.
    pub fn checkpoints(&self) -> Arc<dyn crate::checkpoint::CheckpointBackend> {
        self.inner.checkpoints.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Installs the admission stage every later proposal is decided by
    /// (a proposal already running keeps the stage it started with).
    pub fn set_admission_stage(&self, stage: Arc<crate::admission::AdmissionStage>) {
        match self.inner.stage.write() {
            Ok(mut s) => *s = stage,
            Err(p) => *p.into_inner() = stage,
        }
    }

    /// The admission stage in force.
    pub fn admission_stage(&self) -> Arc<crate::admission::AdmissionStage> {
        self.inner.stage.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The options.
    pub fn options(&self) -> &RuntimeOptions {
        &self.inner.options
    }

    /// Registers (or replaces) a tool from its schema; the runtime assigns
    /// `source: user_defined`. An invalid JSON Schema is a config error.
    pub fn register_tool(&self, schema: ToolSchema) -> Result<()> {
        self.register_tool_with_source(schema, ToolSource::UserDefined)
    }

    /// Registers a tool with an explicit source (built-ins, subprocess, MCP).
    pub fn register_tool_with_source(&self, schema: ToolSchema, source: ToolSource) -> Result<()> {
        let tool = RegisteredTool::new(schema, source)?;
        self.inner.tools.write().map_err(|_| poisoned("tool registry"))?.register(tool);
        Ok(())
    }

    /// Registers a tool with no parameter schema.
    pub fn register_tool_name(&self, name: &str) -> Result<()> {
        self.register_tool(ToolSchema::named(name))
    }

    /// Removes a tool; the count removed (0 is not an error).
    pub fn unregister_tool(&self, name: &str) -> usize {
        self.inner.tools.write().map(|mut t| t.unregister(name)).unwrap_or(0)
    }

    /// Every tool schema, sorted by name.
    pub fn list_tools(&self) -> Vec<ToolSchema> {
        self.inner.tools.read().map(|t| t.list()).unwrap_or_default()
    }

    /// The schema of one tool.
    pub fn tool(&self, name: &str) -> Option<ToolSchema> {
        self.inner.tools.read().ok()?.get(name).map(|t| t.schema.clone())
    }

    /// Reads the policy engine.
    pub fn with_policies<R>(&self, f: impl FnOnce(&PolicyEngine) -> R) -> Result<R> {
        Ok(f(&*self.inner.policies.read().map_err(|_| poisoned("policy engine"))?))
    }

    /// Changes the policy engine.
    pub fn with_policies_mut<R>(&self, f: impl FnOnce(&mut PolicyEngine) -> R) -> Result<R> {
        Ok(f(&mut *self.inner.policies.write().map_err(|_| poisoned("policy engine"))?))
    }

    /// The state store (reads; writes through [`Runtime::state_set`] are logged).
    pub fn state(&self) -> &StateStore {
        &self.inner.state
    }

    /// Sets a state key (tenant-scoped when given) and logs `StateChanged`.
    pub fn state_set(&self, key: &str, value: Value, tenant: Option<&str>) -> Result<u64> {
        let scope = Scope::from_option(tenant)?;
        let version = self.inner.state.set(&scope, key, value.clone())?;
        self.inner.events.record(
            EventKind::StateChanged,
            None,
            None,
            json!({"key": key, "tenant": tenant, "op": "set", "value": value, "version": version}),
        );
        Ok(version)
    }

    /// Deletes a state key and logs `StateChanged`; true when it held a value.
    pub fn state_delete(&self, key: &str, tenant: Option<&str>) -> Result<bool> {
        let scope = Scope::from_option(tenant)?;
        let existed = self.inner.state.delete(&scope, key)?;
        let version = self.inner.state.version(&scope, key);
        self.inner.events.record(
            EventKind::StateChanged,
            None,
            None,
            json!({"key": key, "tenant": tenant, "op": "delete", "version": version}),
        );
        Ok(existed)
    }

    /// The event log.
    pub fn events(&self) -> &EventLog {
        &self.inner.events
    }

    /// Polls a detached tool: drains its chunks; `None` once its terminal
    /// status has been reported (or for an unknown handle).
    pub fn tool_poll(&self, handle: &str) -> Option<ToolPollResult> {
        self.inner.detached.poll(handle)
    }

    /// Cooperatively cancels a detached tool; false when unknown or finished.
    pub fn tool_cancel(&self, handle: &str) -> bool {
        self.inner.detached.cancel(handle)
    }

    /// Subscribes to `{handle, chunk}` events of every detached tool.
    pub fn subscribe_tool_stream(&self) -> broadcast::Receiver<ToolStreamEvent> {
        self.inner.detached.subscribe()
    }

    /// Empties the idempotency and TTL result caches.
    pub fn clear_caches(&self) {
        self.inner.idempotency.clear();
        self.inner.ttl_cache.clear();
    }

    /// Counts a `ModelRetry` of `chain`: how many it has had since its last success.
    pub(crate) fn model_retry_counted(&self, chain: &str) -> u32 {
        let mut m = self.inner.model_retries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Bounded: past this many open chains the counts start again.
        if m.len() >= MODEL_RETRY_CHAINS && !m.contains_key(chain) {
            m.clear();
        }
        let n = m.entry(chain.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        self.inner.model_retries_held.store(true, Ordering::Relaxed);
        *n
    }

    /// A success of `chain`: its count starts again.
    pub(crate) fn model_retry_chain_ends(&self, chain: &str) {
        let mut m = self.inner.model_retries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.remove(chain);
        if m.is_empty() {
            self.inner.model_retries_held.store(false, Ordering::Relaxed);
        }
    }

    /// `req-<n>`, written without the formatting machinery (once per call).
    pub(crate) fn next_request_id(&self) -> String {
        let n = self.inner.request_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let mut s = String::with_capacity(24);
        s.push_str("req-");
        crate::ir::push_decimal(&mut s, n);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_count_from_one() {
        let rt = Runtime::default();
        assert_eq!(rt.next_request_id(), "req-1");
        assert_eq!(rt.next_request_id(), "req-2");
        rt.inner.request_seq.store(9, Ordering::Relaxed);
        assert_eq!(rt.next_request_id(), "req-10");
        rt.inner.request_seq.store(u64::MAX - 1, Ordering::Relaxed);
        assert_eq!(rt.next_request_id(), format!("req-{}", u64::MAX));
    }
}
