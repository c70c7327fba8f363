//! Executing one proposal: admission, DAG levels, dispatch, retries,
//! timeouts, caches, rollback, compensation and cost accounting.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{Map, Value, json};

use super::executor::{CancelToken, ToolCall, ToolExecutor};
use super::registry::RegisteredTool;
use super::{AdmissionVerdict, ExecOptions, ROLLBACK_WARNING, Runtime, cache_key, detached};
use crate::Result;
use crate::admission::{AdmissionStage, Decision, Held, Parked, StageVerdict, layer};
use crate::canonical::canonical_object;
use crate::checkpoint::{Checkpoint, PendingAction};
use crate::dag::Dag;
use crate::events::{ActionDetail, ActionEvent, ActionPhase, EventData, EventKind};
use crate::ir::{
    Action, ActionProposal, ActionResult, ActionStatus, ActionType, Compensation, CostSummary, FailureBehavior,
    Operator, Precondition, ProposalResult, Reversibility, StateChanges, StateMutation, ToolFailure, json_eq,
};
use crate::permission::Verdict;
use crate::state::{CasOutcome, Expect, Scope, Transaction};

/// The normalized class of a post-dispatch failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorClass {
    Timeout,
    RejectedByPolicy,
    ToolError,
    Validation,
    Unknown,
    SandboxTimeout,
    SandboxLimit,
    SandboxUnavailable,
    /// A `read_version` assumption did not hold: the key moved since the
    /// action read it. Never retried.
    Conflict,
    /// The tool said the model called it wrongly (`ModelRetry`). Never
    /// retried by the engine.
    ModelRetry,
}

impl ErrorClass {
    fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Timeout => "timeout",
            ErrorClass::RejectedByPolicy => "rejected_by_policy",
            ErrorClass::ToolError => "tool_error",
            ErrorClass::Validation => "validation",
            ErrorClass::Unknown => "unknown",
            ErrorClass::SandboxTimeout => "sandbox_timeout",
            ErrorClass::SandboxLimit => "sandbox_limit",
            ErrorClass::SandboxUnavailable => "sandbox_unavailable",
            ErrorClass::Conflict => "conflict",
            ErrorClass::ModelRetry => "model_retry",
        }
    }
}

struct Fail {
    message: String,
    class: ErrorClass,
    terminal: bool,
}

impl Fail {
    fn new(message: impl Into<String>, class: ErrorClass) -> Self {
        Fail { message: message.into(), class, terminal: false }
    }
}

struct Done {
    output: Option<Value>,
    changes: StateChanges,
    cached: Option<&'static str>,
}

/// What the engine's own admission layers found.
struct FixedLayers {
    /// Boxed: most slots are empty, and a vector of unboxed decisions
    /// (192 bytes a slot) was written out in full for every proposal.
    refusals: Vec<Option<Box<Decision>>>,
    policy_refused: Vec<bool>,
    tools: Vec<Option<Arc<RegisteredTool>>>,
    /// `(action index, violations)` of every policy that denied.
    violations: Vec<(usize, Vec<crate::policy::PolicyViolation>)>,
}

/// How an action ended, for the scheduler.
struct Outcome {
    result: ActionResult,
    abort: bool,
}

struct Ctx {
    rt: Runtime,
    proposal: Arc<ActionProposal>,
    pid: Arc<str>,
    scope: Scope,
    tx: Transaction,
    executor: Arc<dyn ToolExecutor>,
    session_id: Option<String>,
    tools: Vec<Option<Arc<RegisteredTool>>>,
    action_ids: Vec<Arc<str>>,
    tenant: Option<Arc<str>>,
    /// `ToolCall.cwd` and `ToolCall.isolation` of every call.
    cwd: Option<String>,
    isolation: Option<Value>,
    tool_calls: AtomicU64,
    retries: AtomicU64,
    /// Actions the admission hook put on hold, by index (empty: none).
    holds: std::sync::Mutex<HashMap<usize, Held>>,
    /// Set when the run suspends on asks instead of waiting.
    suspend: Option<Suspending>,
    /// Who submitted the proposal (kept in a checkpoint).
    owner: Option<String>,
    /// The shared state store, when the state lives there.
    shared: Option<Arc<dyn crate::store::StateBackend>>,
    /// The run's undo journal (a run whose state lives in a shared store).
    journal: Option<Journal>,
    /// Held while an `interactive` tool runs: such calls run one at a time
    /// (`plan-apply-gate.md`: asking a person two things at once confuses).
    interactive: tokio::sync::Mutex<()>,
    /// Set when `holds` was ever non-empty (nothing to do otherwise): turns
    /// true when an action's outcome aborts the proposal, so an action still
    /// waiting on its hold is skipped instead of starting after the abort.
    abort_tx: Option<tokio::sync::watch::Sender<bool>>,
    /// `(action index, handle)` of every detached tool this proposal started.
    detached: Mutex<Vec<(usize, String)>>,
    /// The admission stage this proposal is decided by.
    stage: Arc<AdmissionStage>,
    /// Actions refused at admission (their compensation refs are refused too).
    refused: Vec<bool>,
    /// Actions whose input the permission chain substituted, by index
    /// (empty: none): the substituted action is what dispatch checks and
    /// what the tool receives.
    overrides: Vec<Option<Action>>,
}

/// The bookkeeping of a run that suspends on asks instead of waiting.
struct Suspending {
    /// The direct predecessors of every action.
    preds: Vec<Vec<usize>>,
    /// Per action: `Some(Some(key))` parked on the approval `key`,
    /// `Some(None)` waiting for a parked predecessor, `None` not deferred.
    deferred: Mutex<Vec<Option<Option<String>>>>,
}

impl Suspending {
    fn new(dag: &Dag) -> Self {
        let n = dag.len();
        Suspending {
            preds: (0..n).map(|i| dag.predecessors(i).to_vec()).collect(),
            deferred: Mutex::new(vec![None; n]),
        }
    }

    /// True when a predecessor of `i` is deferred.
    fn blocked(&self, i: usize) -> bool {
        let d = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
        self.preds.get(i).is_some_and(|p| p.iter().any(|&j| d.get(j).is_some_and(Option::is_some)))
    }

    /// Defers `a` (index `i`) to the resumption.
    fn defer(&self, a: &Action, i: usize, key: Option<String>) -> Outcome {
        if let Some(slot) = self.deferred.lock().unwrap_or_else(PoisonError::into_inner).get_mut(i) {
            *slot = Some(key);
        }
        Outcome { result: ActionResult::new(a.id.clone(), ActionStatus::Proposed), abort: false }
    }

    /// `(index, approval key)` of every deferred action, by index.
    fn list(&self) -> Vec<(usize, Option<String>)> {
        let d = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
        d.iter().enumerate().filter_map(|(i, k)| k.clone().map(|k| (i, k))).collect()
    }
}

/// A suspended proposal taken up again ([`Runtime::resume`]).
struct Resumed {
    checkpoint: Checkpoint,
    /// The transaction that adopted the checkpoint's writes.
    tx: Transaction,
}

/// The undo journal of a run whose state lives in a shared store: a
/// `running` checkpoint its runner holds by lease (renewed while it runs)
/// and rewrites before each write, so that a sweeper on any daemon rolls
/// the writes back if the runner dies ([`Runtime::sweep`]). Saved at the
/// run's first write: a run that writes no state costs the store nothing.
struct Journal {
    store: Arc<dyn crate::checkpoint::CheckpointBackend>,
    claimant: String,
    lease: Duration,
    /// The checkpoint, and whether it was saved.
    cp: tokio::sync::Mutex<(Checkpoint, bool)>,
    renew: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.stop_renewal();
    }
}

impl Journal {
    /// The journal of a run of `proposal` (saved, claimed, at its first write).
    fn start(rt: &Runtime, proposal: &ActionProposal, tenant: Option<&str>, owner: Option<&str>) -> Self {
        let (store, lease) = (rt.checkpoints(), rt.checkpoint_lease());
        let mut cp = Checkpoint::new(
            Checkpoint::new_id(),
            proposal.clone(),
            tenant.map(str::to_string),
            owner.map(str::to_string),
        );
        cp.running = true;
        let claimant = format!("run-{}", uuid::Uuid::new_v4());
        Journal { store, claimant, lease, cp: tokio::sync::Mutex::new((cp, false)), renew: Mutex::new(None) }
    }

    async fn id(&self) -> String {
        self.cp.lock().await.0.id.clone()
    }

    /// Records the undo of a write of `phys` (its value before the run,
    /// and the value it is about to get) before the write is made.
    async fn record(&self, phys: &str, before: Option<Value>, after: Option<Value>) -> Result<()> {
        let mut g = self.cp.lock().await;
        let (cp, saved) = &mut *g;
        match cp.writes.iter_mut().find(|w| w.key == phys) {
            Some(w) => {
                let landed = std::mem::replace(&mut w.after, after);
                w.earlier.push(landed);
            }
            None => cp.writes.push(crate::checkpoint::StateWrite {
                key: phys.to_string(),
                before,
                after,
                earlier: Vec::new(),
            }),
        }
        self.store.save_claimed(cp, &self.claimant, self.lease).await?;
        if !*saved {
            *saved = true;
            // Renewed while the run goes on, so only a dead runner's lease runs out.
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                let renew = crate::checkpoint::renew_claim(
                    self.store.clone(),
                    cp.id.clone(),
                    self.claimant.clone(),
                    self.lease,
                );
                *self.renew.lock().unwrap_or_else(PoisonError::into_inner) = Some(h.spawn(renew));
            }
        }
        Ok(())
    }

    fn stop_renewal(&self) {
        if let Some(r) = self.renew.lock().unwrap_or_else(PoisonError::into_inner).take() {
            r.abort();
        }
    }

    /// The run ended: its journal goes (when it was ever saved).
    async fn finish(&self) {
        self.stop_renewal();
        let g = self.cp.lock().await;
        if g.1 {
            let _ = self.store.remove(&g.0.id, &self.claimant).await;
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Runtime {
    /// Executes a proposal with the host's executor. Errors only for an
    /// invalid execution scope or a proposal in which two actions share an id
    /// (`invalid_document`, naming the id; nothing runs and nothing is
    /// logged); every action outcome is in the result.
    pub async fn execute(
        &self,
        proposal: ActionProposal,
        executor: Arc<dyn ToolExecutor>,
        opts: ExecOptions,
    ) -> Result<ProposalResult> {
        self.execute_from(proposal, executor, opts, None).await
    }

    /// Resumes the suspended proposal `id` ([`crate::checkpoint`]) with the
    /// host's executor: claims its checkpoint as `claimant` (one resumer at
    /// a time), takes over the state it wrote, and runs what had not run,
    /// through admission again (an approval resolved meanwhile applies at
    /// once); settled actions are not run again. In the checkpoint's
    /// tenant, whatever `opts` says. `opts.owner`, when set, must be the
    /// checkpoint's owner (`suspension_not_owned`). Errors
    /// `suspension_not_found`, `suspension_claimed` (another resumer holds
    /// it) and `suspension_conflict` (another writer moved a key it wrote:
    /// nothing runs) change nothing. The result is the whole proposal's, and
    /// may be `suspended` again (the same id).
    pub async fn resume(
        &self,
        id: &str,
        claimant: &str,
        executor: Arc<dyn ToolExecutor>,
        mut opts: ExecOptions,
    ) -> Result<ProposalResult> {
        use crate::checkpoint::Claim;
        let store = self.checkpoints();
        let lease = self.checkpoint_lease();
        let cp = match store.claim(id, claimant, lease).await? {
            Claim::Claimed(cp) => *cp,
            Claim::NotFound => {
                return Err(crate::Error::not_found(
                    "suspension_not_found",
                    format!("no suspended proposal `{id}` (never suspended, or already resumed to its end)"),
                ));
            }
            Claim::Held { by, until } => {
                return Err(crate::Error::config(
                    "suspension_claimed",
                    format!("suspended proposal `{id}` is being resumed by `{by}` (lease until {until})"),
                    json!({"id": id, "by": by, "until": until}),
                ));
            }
        };
        let tx = match self.take_up(&cp, &mut opts).await {
            Ok(tx) => tx,
            Err(e) => {
                let _ = store.release(id, claimant).await;
                return Err(e);
            }
        };
        let proposal = cp.proposal.clone();
        // The claim is renewed while the run goes on, so a long resume keeps
        // it; only a resumer that stopped lets its lease run out.
        let renew = crate::checkpoint::renew_claim(store.clone(), id.to_string(), claimant.to_string(), lease);
        let run = self.execute_from(proposal, executor, opts, Some(Resumed { checkpoint: cp, tx }));
        let outcome = tokio::select! {
            r = run => r,
            () = renew => unreachable!("the renewal never ends"),
        };
        match outcome {
            // Suspended again: the new checkpoint replaced the old (and the claim).
            Ok(r) if r.status.is_some() => Ok(r),
            Ok(r) => {
                store.remove(id, claimant).await?;
                Ok(r)
            }
            Err(e) => {
                let _ = store.release(id, claimant).await;
                Err(e)
            }
        }
    }

    /// The checks before a claimed checkpoint resumes, and the state it
    /// takes over: not a run in progress, the owner's (when `opts` names
    /// one), the state mirrored from a shared store, the checkpoint's writes
    /// adopted into a new transaction. Sets `opts` to the checkpoint's
    /// tenant and owner, suspending. An error changes nothing.
    async fn take_up(&self, cp: &Checkpoint, opts: &mut ExecOptions) -> Result<Transaction> {
        let id = &cp.id;
        if cp.running {
            // A run in progress (or whose runner died: the sweeper's).
            return Err(crate::Error::not_found(
                "suspension_not_found",
                format!("`{id}` is a run in progress, not a suspended proposal"),
            ));
        }
        if let Some(owner) = &opts.owner
            && cp.owner.as_ref() != Some(owner)
        {
            return Err(crate::Error::config(
                "suspension_not_owned",
                format!(
                    "suspended proposal `{id}` was submitted by another principal; only it or an operator may resume it"
                ),
                json!({"id": id}),
            ));
        }
        opts.tenant = cp.tenant.clone();
        opts.owner = cp.owner.clone();
        opts.suspend = true;
        self.pull_shared(&Scope::from_option(cp.tenant.as_deref())?).await?;
        let tx = Transaction::with_capacity(cp.writes.len());
        if let Err(keys) = self.inner.state.adopt(&tx, &cp.writes, self.shared_state().is_some()) {
            return Err(crate::Error::config(
                "suspension_conflict",
                format!(
                    "suspended proposal `{id}` cannot resume: another writer moved {} since it suspended; nothing ran",
                    keys.join(", ")
                ),
                json!({"id": id, "keys": keys}),
            ));
        }
        Ok(tx)
    }

    async fn execute_from(
        &self,
        proposal: ActionProposal,
        executor: Arc<dyn ToolExecutor>,
        opts: ExecOptions,
        resumed: Option<Resumed>,
    ) -> Result<ProposalResult> {
        let scope = Scope::from_option(opts.tenant.as_deref())?;
        let n = proposal.actions.len();
        // One pass over the actions builds the graph and gathers what the
        // run needs from each (a large proposal is read from memory once):
        // the ids, and how many writes the transaction will hold.
        let mut ids: Vec<&str> = Vec::with_capacity(n);
        let (dag, writes) = Dag::build_visiting(&proposal.actions, |_, a| ids.push(&a.id));
        // Results, events and compensation refer to actions by id, so ids must
        // be unique (agent-ir-spec: "unique within the proposal"); one action's is.
        if n > 1
            && let Some(&(i, first)) = crate::dag::duplicates(&crate::bytesort::sort(n, |i| ids[i].as_bytes())).first()
        {
            let id = &proposal.actions[i].id;
            return Err(crate::error::InputError::Shape {
                path: format!("actions[{i}].id"),
                message: format!(
                    "duplicate action id '{id}' (also actions[{first}].id); ids must be unique within a proposal"
                ),
            }
            .into());
        }
        let action_ids: Vec<Arc<str>> = ids.into_iter().map(Arc::from).collect();
        let start = Instant::now();
        // A shared store: the proposal starts from its state (a resumed one
        // pulled it before taking over its writes).
        if resumed.is_none() {
            self.pull_shared(&scope).await?;
        }
        let proposal = Arc::new(proposal);
        let pid: Arc<str> = Arc::from(proposal.id.as_str());
        let (resumed, resumed_tx) = match resumed {
            Some(r) => (Some(r.checkpoint), Some(r.tx)),
            None => (None, None),
        };
        match &resumed {
            None => self.inner.events.append(
                EventKind::ProposalReceived,
                Some(&pid),
                None,
                EventData::Proposal(proposal.clone()),
            ),
            Some(cp) => self.inner.events.record(
                EventKind::ProposalResumed,
                Some(&pid),
                None,
                json!({"suspension_id": cp.id, "settled": cp.results.iter().filter(|r| r.is_some()).count()}),
            ),
        };

        if opts.session_id.is_none()
            && let p = self.inner.policies.read().unwrap_or_else(PoisonError::into_inner)
            && !p.trace_rules().is_empty()
        {
            p.reset_trace(None);
        }
        let mut results: Vec<Option<ActionResult>> = match &resumed {
            Some(cp) if cp.results.len() == n => cp.results.clone(),
            Some(cp) => {
                return Err(crate::Error::runtime(
                    "checkpoint_unreadable",
                    format!("checkpoint `{}` has {} results for {n} actions", cp.id, cp.results.len()),
                ));
            }
            None => vec![None; n],
        };
        let mut ctx = Ctx {
            rt: self.clone(),
            proposal: proposal.clone(),
            pid: pid.clone(),
            scope,
            tx: match resumed_tx {
                Some(tx) => tx,
                None => Transaction::with_capacity(writes),
            },
            executor,
            session_id: opts.session_id,
            tools: vec![None; n],
            action_ids,
            tenant: opts.tenant.as_deref().map(Arc::from),
            cwd: opts.cwd,
            isolation: opts.isolation,
            tool_calls: AtomicU64::new(resumed.as_ref().map_or(0, |c| c.tool_calls)),
            retries: AtomicU64::new(resumed.as_ref().map_or(0, |c| c.retries)),
            holds: std::sync::Mutex::new(HashMap::new()),
            suspend: opts.suspend.then(|| Suspending::new(&dag)),
            owner: opts.owner,
            shared: self.shared_state(),
            journal: None,
            interactive: tokio::sync::Mutex::new(()),
            abort_tx: None,
            detached: Mutex::new(Vec::new()),
            stage: self.admission_stage(),
            refused: Vec::new(),
            overrides: Vec::new(),
        };
        // A tier ledger shared through a store: its records of other hosts
        // read before anything is decided (a stale copy refuses).
        if ctx.stage.ledger().is_some_and(crate::store::ledger::TierLedger::is_shared) {
            Box::pin(ctx.stage.refresh_ledger()).await;
        }
        // A run whose state lives in a shared store journals its writes
        // (a resumed one has its checkpoint already).
        if ctx.shared.is_some() && resumed.is_none() {
            ctx.journal = Some(Journal::start(self, &proposal, ctx.tenant.as_deref(), ctx.owner.as_deref()));
        }
        // The supervision layer: a supervisor sees a proposal the tier layer
        // does not refuse as a whole, and may park it until a person decides.
        // The tier's decisions made for that are the admission's own when the
        // supervisor answered at once (nothing can have changed between);
        // after a wait they are made again.
        let mut tier = None;
        let supervised = match ctx.stage.supervisor() {
            Some(sup) if !proposal.actions.is_empty() => {
                let decided = ctx.stage.tier_decisions(&proposal.actions);
                if decided.first().is_some_and(|(refused, _)| *refused) {
                    tier = Some(decided);
                    None
                } else {
                    let sup = sup.clone();
                    let mut verdict = AssertUnwindSafe(sup(&proposal, ctx.session_id.as_deref())).catch_unwind();
                    let verdict = match futures::poll!(&mut verdict) {
                        std::task::Poll::Ready(v) => {
                            tier = Some(decided);
                            v
                        }
                        std::task::Poll::Pending => verdict.await,
                    };
                    match verdict {
                        Ok(verdict) => verdict,
                        Err(_) => Some("the supervisor panicked; refused".to_string()),
                    }
                }
            }
            _ => None,
        };
        let mut aborted = self.admit(&mut ctx, &dag, &mut results, supervised, tier);

        // A resumed proposal's succeeded actions come first in completion
        // order (an abort compensates them too).
        let mut completion: Vec<usize> = match &resumed {
            Some(cp) => (0..n)
                .filter(|&i| cp.results[i].as_ref().is_some_and(|r| r.status == ActionStatus::Succeeded))
                .collect(),
            None => Vec::new(),
        };
        let mut budget_exhausted = false;
        let max_duration = ctx.budget().and_then(|b| b.max_duration_ms);
        let window = ctx.max_concurrency();
        if !aborted {
            for level in dag.levels() {
                if max_duration.is_some_and(|m| ms(start.elapsed()) > m) {
                    budget_exhausted = true;
                    break;
                }
                if let [i] = level[..] {
                    // A one-action level (every level of a chain): no list.
                    if results[i].is_none() {
                        let o = run_action(&ctx, i).await;
                        aborted |= record(o, i, &mut results, &mut completion);
                    }
                    if aborted {
                        break;
                    }
                    continue;
                }
                let runnable: Vec<usize> = level.iter().copied().filter(|&i| results[i].is_none()).collect();
                if runnable.len() == 1 {
                    let i = runnable[0];
                    let o = run_action(&ctx, i).await;
                    aborted |= record(o, i, &mut results, &mut completion);
                } else if runnable.iter().all(|&i| proposal.actions[i].action_type != ActionType::ToolCall) {
                    // State actions never suspend, so the concurrent path below
                    // would run them one after another in this order anyway:
                    // run them in place, with its window accounting (an abort
                    // lets exactly the actions already started finish), and
                    // without a task per action.
                    let mut started = window.min(runnable.len());
                    let mut k = 0;
                    while k < started {
                        let i = runnable[k];
                        let o = run_action(&ctx, i).await;
                        aborted |= record(o, i, &mut results, &mut completion);
                        if !aborted && started < runnable.len() {
                            started += 1;
                        }
                        k += 1;
                    }
                } else if !runnable.is_empty() {
                    // A window of at most `max_concurrency` actions in flight:
                    // concurrent, with memory bounded by the window, not the level.
                    let mut pending = runnable.iter().copied();
                    let ctx_ref = &ctx;
                    let start_one = move |i: usize| async move { (i, run_action(ctx_ref, i).await) };
                    let mut futs = FuturesUnordered::new();
                    for i in pending.by_ref().take(window) {
                        futs.push(start_one(i));
                    }
                    while let Some((i, o)) = futs.next().await {
                        aborted |= record(o, i, &mut results, &mut completion);
                        // After an abort nothing new starts; what is in flight finishes.
                        if !aborted && let Some(j) = pending.next() {
                            futs.push(start_one(j));
                        }
                    }
                }
                if aborted {
                    break;
                }
            }
        }

        // Actions deferred to a resumption: a proposal that aborted skips
        // them like the rest; otherwise it suspends.
        let deferred = ctx.suspend.as_ref().map(Suspending::list).unwrap_or_default();
        let mut suspension: Option<Value> = None;
        if !deferred.is_empty() {
            if aborted || budget_exhausted {
                for (i, _) in &deferred {
                    results[*i] = None;
                }
            } else {
                // The journal becomes the suspension (same id, no runner).
                if let Some(j) = &ctx.journal {
                    j.stop_renewal();
                }
                match self.save_suspension(&ctx, &results, &deferred, start, resumed.as_ref()).await {
                    Ok(v) => suspension = Some(v),
                    Err(e) => {
                        // Without a checkpoint the run cannot suspend: the
                        // parked actions are refused (fail closed) and the
                        // proposal aborts.
                        for (i, key) in &deferred {
                            results[*i] = None;
                            if key.is_some() {
                                let a = ctx.action(*i);
                                let reason =
                                    format!("permission: approval pending and the suspension could not be saved: {e}");
                                let o = ctx.reject(a, Decision::deny(layer::APPROVAL, reason), "approval");
                                results[*i] = Some(o.result);
                            }
                        }
                        aborted = true;
                    }
                }
            }
        }

        let skip_reason = if budget_exhausted { "skipped: cost budget exhausted" } else { "skipped due to abort" };
        for (i, r) in results.iter_mut().enumerate() {
            if r.is_none() {
                let a = &proposal.actions[i];
                let mut res = ActionResult::new(a.id.clone(), ActionStatus::Skipped);
                res.error = Some(skip_reason.to_string());
                self.inner.events.record(
                    EventKind::ActionSkipped,
                    Some(&pid),
                    Some(&a.id),
                    json!({"reason": skip_reason}),
                );
                *r = Some(res);
            }
        }
        // Every slot is filled by now. `filter_map` (unlike `flatten`) collects
        // in place: no second buffer of n results.
        #[allow(clippy::filter_map_identity)]
        let mut results: Vec<ActionResult> = results.into_iter().filter_map(|r| r).collect();

        // Detached tools this proposal started and an abort cancelled.
        let mut cancelled_tools: Vec<Value> = Vec::new();
        if aborted {
            // Background work first: every detached tool the proposal started
            // that is still running gets the same cooperative cancel as
            // `tool_cancel` (a later poll reports `cancelled`), before the state
            // is restored so it stops writing through the runtime.
            let started = std::mem::take(&mut *ctx.detached.lock().unwrap_or_else(PoisonError::into_inner));
            for (i, handle) in started {
                if !self.inner.detached.cancel(&handle) {
                    continue;
                }
                if let Some(Value::Object(out)) = results[i].output.as_mut() {
                    out.insert("status".into(), Value::String("cancelled".into()));
                }
                let a = &proposal.actions[i];
                cancelled_tools.push(json!({"action_id": a.id, "tool": a.tool, "handle": handle}));
            }
            let rb = match &ctx.shared {
                Some(shared) => self.shared_rollback(&ctx, shared).await,
                None => self.inner.state.rollback_report(&ctx.tx),
            };
            let mut data = json!({"keys": rb.restored});
            if !rb.not_restored.is_empty() {
                // Keys another writer moved since this proposal wrote them:
                // left as that writer set them.
                data["not_restored"] = json!(rb.not_restored);
            }
            self.inner.events.record(EventKind::StateRolledBack, Some(&pid), None, data);
            for r in results.iter_mut().filter(|r| r.status == ActionStatus::Succeeded) {
                r.rolled_back = true;
                r.state_changes.clear();
                r.error = Some(ROLLBACK_WARNING.to_string());
            }
            if ctx.stage.compensate_on_abort().unwrap_or(self.inner.options.compensate_on_abort) {
                for &i in completion.iter().rev() {
                    let a = &proposal.actions[i];
                    if a.reversibility != Reversibility::Compensable {
                        continue;
                    }
                    let Some(comp) = a.compensation.as_deref() else { continue };
                    let outcome = compensate(&ctx, a, comp).await;
                    let (kind, data) = match &outcome {
                        Ok(()) => (EventKind::CompensationSucceeded, json!({"compensation": comp})),
                        Err(e) => (EventKind::CompensationFailed, json!({"compensation": comp, "error": e})),
                    };
                    self.inner.events.record(kind, Some(&pid), Some(&a.id), data);
                    match outcome {
                        Ok(()) => results[i].compensated = true,
                        Err(e) => results[i].compensation_error = Some(e),
                    }
                }
            }
        }

        let mut cost = CostSummary {
            tool_calls: ctx.tool_calls.load(Ordering::Relaxed),
            retries: ctx.retries.load(Ordering::Relaxed),
            ..CostSummary::default()
        };
        for r in &results {
            match r.status {
                ActionStatus::Succeeded | ActionStatus::Failed => cost.actions_executed += 1,
                ActionStatus::Rejected => cost.actions_rejected += 1,
                ActionStatus::Skipped => cost.actions_skipped += 1,
                _ => {}
            }
        }
        cost.total_duration_ms = ms(start.elapsed()) + resumed.as_ref().map_or(0.0, |c| c.duration_ms);
        if let Some(s) = &suspension {
            let mut data = s.clone();
            data["cost"] = json!(cost);
            self.inner.events.record(EventKind::ProposalSuspended, Some(&pid), None, data);
        } else {
            let completed = crate::events::CompletedData { aborted, cost: cost.clone(), cancelled_tools };
            self.inner.events.append(
                EventKind::ProposalCompleted,
                Some(&pid),
                None,
                crate::events::EventData::Completed(Box::new(completed)),
            );
        }
        // The proposal answers once its completion event is durable in the
        // audit log a daemon attached (a database sink writes in batches).
        self.inner.events.sink_durable().await;
        if let Some(j) = &ctx.journal
            && suspension.is_none()
        {
            j.finish().await;
        }
        Ok(ProposalResult {
            proposal_id: proposal.id.clone(),
            results,
            cost,
            artifacts: Vec::new(),
            status: suspension.is_some().then(|| "suspended".to_string()),
            suspension,
        })
    }

    /// Rolls back the runs whose runner died: every journaled run (a run
    /// whose state lives in the shared store) whose lease ran out is
    /// claimed as `claimant`, each key it wrote that still holds the value
    /// it wrote is restored in the shared store by compare-and-set (any
    /// other is left as its writer set it), its journal removed and a
    /// `ProposalSwept` event recorded. Runs whose runner is alive (lease
    /// held) and suspended proposals are left. One
    /// `{id, proposal_id, restored, not_restored}` per run swept.
    pub async fn sweep(&self, claimant: &str) -> Result<Vec<Value>> {
        use crate::checkpoint::Claim;
        let Some(shared) = self.shared_state() else { return Ok(Vec::new()) };
        let store = self.checkpoints();
        let mut out = Vec::new();
        for listed in store.list().await? {
            if !listed.running {
                continue;
            }
            let Claim::Claimed(cp) = store.claim(&listed.id, claimant, self.checkpoint_lease()).await? else {
                continue;
            };
            let scope = Scope::from_option(cp.tenant.as_deref())?;
            let tenant = scope.tenant_id();
            let (mut restored, mut not_restored) = (Vec::new(), Vec::new());
            for w in &cp.writes {
                let Some(key) = scope.visible_key(&w.key) else { continue };
                let now = shared.get(tenant, key).await?;
                // Ours when it holds a value this run wrote (the last, or
                // an earlier one when the runner died before the last landed).
                let put = if w.wrote(&now.value) {
                    shared.put(tenant, key, w.before.clone(), Expect::Version(now.version)).await?
                } else {
                    CasOutcome::Conflict { current: now.version }
                };
                match put {
                    CasOutcome::Written { .. } => restored.push(key.to_string()),
                    CasOutcome::Conflict { .. } => not_restored.push(key.to_string()),
                }
            }
            store.remove(&cp.id, claimant).await?;
            let data =
                json!({"id": cp.id, "proposal_id": cp.proposal.id, "restored": restored, "not_restored": not_restored});
            let pid: Arc<str> = Arc::from(cp.proposal.id.as_str());
            self.inner.events.record(EventKind::ProposalSwept, Some(&pid), None, data.clone());
            out.push(data);
        }
        self.inner.events.sink_durable().await;
        Ok(out)
    }

    /// Mirrors the shared state store's keys of `scope` into this runtime's
    /// state (nothing without a shared store). A store that cannot answer
    /// is an error: nothing runs on state that may be stale.
    async fn pull_shared(&self, scope: &Scope) -> Result<()> {
        let Some(shared) = self.shared_state() else { return Ok(()) };
        for (k, v) in shared.snapshot(scope.tenant_id()).await? {
            if let Some(phys) = scope.physical(&k) {
                self.inner.state.mirror_physical(&phys, v.value, v.version);
            }
        }
        Ok(())
    }

    /// The rollback of a proposal whose state lives in a shared store: each
    /// key it wrote is restored there by compare-and-set against the
    /// version it wrote (a key another writer moved since is left and
    /// reported), then here.
    async fn shared_rollback(&self, ctx: &Ctx, shared: &Arc<dyn crate::store::StateBackend>) -> crate::state::Rollback {
        let state = &self.inner.state;
        let mut out = crate::state::Rollback::default();
        let tenant = ctx.scope.tenant_id();
        for w in state.transaction_writes(&ctx.tx) {
            let Some(key) = ctx.scope.visible_key(&w.key).map(str::to_string) else { continue };
            // A key seen moved by another writer since is theirs.
            if !state.last_writer_is(&w.key, &ctx.tx) {
                out.not_restored.push(w.key.clone());
                continue;
            }
            let ours = state.version_physical(&w.key);
            match shared.put(tenant, &key, w.before.clone(), Expect::Version(ours)).await {
                Ok(CasOutcome::Written { .. }) => out.restored.push(w.key.clone()),
                Ok(CasOutcome::Conflict { .. }) | Err(_) => out.not_restored.push(w.key.clone()),
            }
        }
        let _ = state.rollback_report(&ctx.tx);
        // Here as there: the restored keys at the store's versions, the
        // others as the other writer set them.
        let _ = self.pull_shared(&ctx.scope).await;
        out.restored.sort();
        out.not_restored.sort();
        out
    }

    /// Saves the checkpoint of a run that suspends; its summary
    /// `{id, pending, waiting}`.
    async fn save_suspension(
        &self,
        ctx: &Ctx,
        results: &[Option<ActionResult>],
        deferred: &[(usize, Option<String>)],
        start: Instant,
        resumed: Option<&Checkpoint>,
    ) -> Result<Value> {
        let actions = &ctx.proposal.actions;
        let mut slots: Vec<Option<ActionResult>> = results.to_vec();
        let mut pending = Vec::new();
        let mut waiting = Vec::new();
        for (i, key) in deferred {
            slots[*i] = None;
            let a = &actions[*i];
            match key {
                Some(k) => pending.push(PendingAction {
                    action_id: a.id.clone(),
                    tool: a.tool.clone(),
                    approval_key: k.clone(),
                }),
                None => waiting.push(a.id.clone()),
            }
        }
        let journaled = match &ctx.journal {
            Some(j) => Some(j.id().await),
            None => None,
        };
        let id = match (resumed, journaled) {
            (Some(c), _) => c.id.clone(),
            (None, Some(id)) => id,
            (None, None) => Checkpoint::new_id(),
        };
        let tenant = ctx.tenant.as_deref().map(str::to_string);
        let mut cp = Checkpoint::new(id, (*ctx.proposal).clone(), tenant, ctx.owner.clone());
        cp.results = slots;
        cp.writes = self.inner.state.transaction_writes(&ctx.tx);
        cp.pending = pending;
        cp.waiting = waiting;
        cp.tool_calls = ctx.tool_calls.load(Ordering::Relaxed);
        cp.retries = ctx.retries.load(Ordering::Relaxed);
        cp.duration_ms = ms(start.elapsed()) + resumed.map_or(0.0, |c| c.duration_ms);
        if let Some(c) = resumed {
            cp.created_at = c.created_at;
        }
        cp.suspensions = resumed.map_or(0, |c| c.suspensions) + 1;
        self.checkpoints().save(&cp).await?;
        Ok(json!({"id": cp.id, "pending": cp.pending, "waiting": cp.waiting}))
    }

    /// The engine's own admission layers, in order: validation, budget, the
    /// tool contract, policies. Pure: nothing is recorded.
    fn fixed_layers(
        &self,
        actions: &[Action],
        dag: &Dag,
        budget: Option<&crate::ir::CostBudget>,
        session: Option<&str>,
        scope: &Scope,
    ) -> FixedLayers {
        let n = actions.len();
        let mut refusals: Vec<Option<Box<Decision>>> = vec![None; n];
        let mut policy_refused = vec![false; n];
        let mut tools_of = vec![None; n];
        let mut violations_of = Vec::new();
        for &i in dag.cyclic() {
            refusals[i] = Some(Box::new(Decision::deny(layer::VALIDATION, "action is part of a dependency cycle")));
        }
        for (i, dep) in dag.unknown_dependencies() {
            refusals[*i].get_or_insert_with(|| {
                Box::new(Decision::deny(
                    layer::VALIDATION,
                    format!("dependency '{dep}' is not an action of this proposal"),
                ))
            });
        }
        if let Some(b) = budget {
            let tool_calls = actions.iter().filter(|a| a.action_type == ActionType::ToolCall).count() as u64;
            let over = match (b.max_actions, b.max_tool_calls) {
                (Some(m), _) if n as u64 > m => Some(format!("cost budget exceeded: {n} actions > max_actions {m}")),
                (_, Some(m)) if tool_calls > m => {
                    Some(format!("cost budget exceeded: {tool_calls} tool calls > max_tool_calls {m}"))
                }
                _ => None,
            };
            if let Some(reason) = over {
                refusals.iter_mut().for_each(|r| *r = Some(Box::new(Decision::deny(layer::BUDGET, reason.clone()))));
            }
        }
        if let Ok(tools) = self.inner.tools.read() {
            for (i, a) in actions.iter().enumerate() {
                if a.action_type != ActionType::ToolCall {
                    continue;
                }
                let name = a.tool.as_deref().unwrap_or("");
                match tools.get(name) {
                    None => {
                        refusals[i].get_or_insert_with(|| {
                            Box::new(Decision::deny(layer::TOOL, format!("tool '{name}' is not registered")))
                        });
                    }
                    Some(t) => {
                        if t.validates_params()
                            && refusals[i].is_none()
                            && let Some(e) = t.check_params(&a.parameters.to_value())
                        {
                            refusals[i] = Some(Box::new(Decision::deny(
                                layer::TOOL,
                                format!("tool '{name}' parameter validation: {e}"),
                            )));
                        }
                        tools_of[i] = Some(t);
                    }
                }
            }
        }
        // A poisoned lock still holds every rule: keep enforcing (fail closed).
        let policies = self.inner.policies.read().unwrap_or_else(PoisonError::into_inner);
        if !policies.is_empty() || session.is_some() {
            let state = self.inner.state.snapshot(scope);
            for (i, a) in actions.iter().enumerate() {
                let violations = policies.check_in_session(a, &state, session);
                if violations.is_empty() {
                    continue;
                }
                policy_refused[i] = true;
                if refusals[i].is_none() {
                    let reasons: Vec<String> =
                        violations.iter().map(|v| format!("policy '{}': {}", v.policy_name, v.reason)).collect();
                    let mut d = Decision::deny(layer::POLICY, reasons.join("; "));
                    d.rule = Some(Value::String(violations[0].policy_name.clone()));
                    refusals[i] = Some(Box::new(d));
                }
                violations_of.push((i, violations));
            }
        }
        FixedLayers { refusals, policy_refused, tools: tools_of, violations: violations_of }
    }

    /// The plan of a proposal: what admission would decide for every action
    /// now, without running, recording or asking anything (the approvals
    /// store is not consulted: an `ask` stays `ask`). One entry per action:
    /// its decision by the first layer that refuses it, else by the stage's
    /// chain (or tier), else `allow` by `none`; with the post-hook input of
    /// a tool call the chain judged.
    pub fn plan(
        &self,
        proposal: &ActionProposal,
        session: Option<&str>,
        tenant: Option<&str>,
    ) -> Result<Vec<(Decision, Option<Value>)>> {
        let scope = Scope::from_option(tenant)?;
        let stage = self.admission_stage();
        let dag = Dag::build(&proposal.actions);
        let budget = stage.budget().or(self.inner.options.cost_budget.as_ref());
        let fixed = self.fixed_layers(&proposal.actions, &dag, budget, session, &scope);
        let tier = if stage.is_empty() { Vec::new() } else { stage.tier_decisions(&proposal.actions) };
        Ok(proposal
            .actions
            .iter()
            .enumerate()
            .map(|(i, a)| {
                if let Some(d) = fixed.refusals[i].as_deref() {
                    return (d.clone(), None);
                }
                let tier_d = tier.get(i).cloned();
                if let Some((true, d)) = tier_d {
                    return (d, None);
                }
                match stage.preview(a, session) {
                    Some((mut d, input)) => {
                        if let Some((_, t)) = &tier_d {
                            d.required_tier = t.required_tier;
                            d.granted_tier = t.granted_tier;
                        }
                        (d, Some(input))
                    }
                    None => (
                        tier_d
                            .map(|(_, d)| d)
                            .unwrap_or_else(|| Decision::new(Verdict::Allow, layer::NONE, "no layer refuses it")),
                        None,
                    ),
                }
            })
            .collect())
    }

    /// Admission before anything runs. Returns true when a refused action's
    /// failure behavior aborts the proposal. The layers and their order are
    /// those of [`crate::admission`]. `tier` holds the tier layer's
    /// decisions when this pass made them already, with no wait since (the
    /// supervision layer's look).
    fn admit(
        &self,
        ctx: &mut Ctx,
        dag: &Dag,
        results: &mut [Option<ActionResult>],
        supervised: Option<String>,
        tier: Option<Vec<(bool, Decision)>>,
    ) -> bool {
        let proposal = ctx.proposal.clone();
        let actions = &proposal.actions;
        let n = actions.len();
        let stage = ctx.stage.clone();
        // A resumed proposal's settled actions are not decided again.
        let settled: Vec<bool> = results.iter().map(Option::is_some).collect();
        let fixed = self.fixed_layers(actions, dag, ctx.budget(), ctx.session_id.as_deref(), &ctx.scope);
        for (i, violations) in &fixed.violations {
            if settled[*i] {
                continue;
            }
            for v in violations {
                self.inner.events.record(
                    EventKind::PolicyViolation,
                    Some(&ctx.pid),
                    Some(&actions[*i].id),
                    json!({"policy_name": v.policy_name, "action_id": v.action_id, "reason": v.reason}),
                );
            }
        }
        let FixedLayers { mut refusals, policy_refused, tools, .. } = fixed;
        ctx.tools = tools;
        for (r, _) in refusals.iter_mut().zip(&settled).filter(|(_, s)| **s) {
            *r = None;
        }

        // The stage's layers: the tier (the whole proposal), then the chain
        // and ask approvals per action.
        let mut allowed: Vec<Option<Decision>> = if stage.is_empty() { Vec::new() } else { vec![None; n] };
        let mut permission_refused = vec![false; n];
        if stage.is_empty() {
            for (i, a) in actions.iter().enumerate() {
                if refusals[i].is_none()
                    && let Some(d) = stage.protected(a)
                {
                    permission_refused[i] = true;
                    refusals[i] = Some(Box::new(Decision { reason: format!("permission: {}", d.reason), ..d }));
                }
            }
        } else {
            let tier = tier.unwrap_or_else(|| stage.tier_decisions(actions));
            for (i, (refused, d)) in tier.into_iter().enumerate() {
                if settled[i] {
                    continue;
                }
                if refused {
                    permission_refused[i] = true;
                    refusals[i].get_or_insert_with(|| Box::new(d));
                } else {
                    allowed[i] = Some(d);
                }
            }
            if let Some(reason) = supervised {
                for (i, r) in refusals.iter_mut().enumerate() {
                    if r.is_none() && !settled[i] {
                        permission_refused[i] = true;
                        *r = Some(Box::new(Decision::deny(layer::SUPERVISION, reason.clone())));
                    }
                }
            }
            let session = ctx.session_id.clone();
            for (i, a) in actions.iter().enumerate() {
                if refusals[i].is_some() || settled[i] {
                    continue;
                }
                let suspend = ctx.suspend.is_some();
                let verdict =
                    std::panic::catch_unwind(AssertUnwindSafe(|| stage.decide_in(a, session.as_deref(), suspend)))
                        .unwrap_or_else(|_| {
                            StageVerdict::Refuse(Decision::deny(layer::HOST, "the admission stage panicked; refused"))
                        });
                let substituted = match &verdict {
                    StageVerdict::Admit(Some(d)) | StageVerdict::Hold(d, _) => d.substituted.clone(),
                    _ => None,
                };
                if let Some(params) = substituted {
                    // The substituted input must satisfy the tool's contract too.
                    if let Some(t) = ctx.tools.get(i).cloned().flatten()
                        && t.validates_params()
                        && let Some(e) = t.check_params(&Value::Object(params.clone()))
                    {
                        let name = a.tool.as_deref().unwrap_or("");
                        refusals[i] = Some(Box::new(Decision::deny(
                            layer::TOOL,
                            format!("tool '{name}' parameter validation of the substituted input: {e}"),
                        )));
                        continue;
                    }
                    if ctx.overrides.is_empty() {
                        ctx.overrides = vec![None; n];
                    }
                    let mut b = a.clone();
                    b.parameters = params.into();
                    ctx.overrides[i] = Some(b);
                }
                match verdict {
                    StageVerdict::Admit(d) => {
                        if let Some(mut d) = d {
                            if let Some(t) = &allowed[i] {
                                d.required_tier = t.required_tier;
                                d.granted_tier = t.granted_tier;
                            }
                            allowed[i] = Some(d);
                        }
                    }
                    StageVerdict::Refuse(mut d) => {
                        if let Some(t) = &allowed[i] {
                            d.required_tier = t.required_tier;
                            d.granted_tier = t.granted_tier;
                        }
                        permission_refused[i] = true;
                        d.reason = format!("permission: {}", d.reason);
                        refusals[i] = Some(Box::new(d));
                    }
                    StageVerdict::Hold(d, held) => {
                        self.inner.events.append(
                            EventKind::AdmissionDecided,
                            Some(&ctx.pid),
                            Some(&Arc::from(a.id.as_str())),
                            d.event_data(a.tool.as_deref(), "admission"),
                        );
                        ctx.holds.get_mut().unwrap_or_else(PoisonError::into_inner).insert(i, held);
                        ctx.abort_tx.get_or_insert_with(|| tokio::sync::watch::channel(false).0);
                    }
                }
            }
        }

        let check = self.inner.admission.read().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(check) = check {
            for (i, a) in actions.iter().enumerate() {
                if refusals[i].is_some() || settled[i] {
                    continue;
                }
                let a = ctx.overrides.get(i).and_then(Option::as_ref).unwrap_or(a);
                let verdict = std::panic::catch_unwind(AssertUnwindSafe(|| check(a, ctx.session_id.as_deref())))
                    .unwrap_or_else(|_| AdmissionVerdict::Refuse("the admission check panicked; refused".to_string()));
                match verdict {
                    AdmissionVerdict::Admit => {}
                    AdmissionVerdict::Refuse(reason) => {
                        permission_refused[i] = true;
                        refusals[i] = Some(Box::new(Decision::deny(layer::HOST, format!("permission: {reason}"))));
                    }
                    AdmissionVerdict::Hold(wait) => {
                        let holds = ctx.holds.get_mut().unwrap_or_else(PoisonError::into_inner);
                        // Both the stage and the host hold: the host's wait runs
                        // after the stage's (a host hold cannot suspend).
                        let held = match holds.remove(&i) {
                            None => Held::waiting(wait),
                            Some(first) => Held::waiting(Box::pin(async move {
                                match first.wait.await {
                                    None => wait.await,
                                    refused => refused,
                                }
                            })),
                        };
                        holds.insert(i, held);
                        ctx.abort_tx.get_or_insert_with(|| tokio::sync::watch::channel(false).0);
                    }
                }
            }
        }

        // The breaker, over every decision above in action order.
        if !stage.is_empty() {
            let refused: Vec<Option<bool>> = refusals
                .iter()
                .zip(&settled)
                .map(|(r, s)| match r {
                    None if *s => None,
                    None => Some(false),
                    Some(d) if layer::is_deciding(d.layer) => Some(true),
                    Some(_) => None,
                })
                .collect();
            for (i, d) in stage.breaker_decisions(ctx.session_id.as_deref(), &refused).into_iter().enumerate() {
                if let Some(d) = d {
                    permission_refused[i] = true;
                    ctx.holds.get_mut().unwrap_or_else(PoisonError::into_inner).remove(&i);
                    refusals[i] = Some(Box::new(d));
                }
            }
        }

        let mut abort = false;
        let record_all = !stage.is_empty();
        ctx.refused = refusals.iter().map(Option::is_some).collect();
        for (i, refusal) in refusals.into_iter().enumerate() {
            if settled[i] {
                continue;
            }
            let a = &actions[i];
            let Some(d) = refusal else {
                if record_all && let Some(d) = allowed[i].take() {
                    self.inner.events.append(
                        EventKind::AdmissionDecided,
                        Some(&ctx.pid),
                        Some(&Arc::from(a.id.as_str())),
                        d.event_data(a.tool.as_deref(), "admission"),
                    );
                }
                continue;
            };
            self.inner.events.append(
                EventKind::AdmissionDecided,
                Some(&ctx.pid),
                Some(&Arc::from(a.id.as_str())),
                d.event_data(a.tool.as_deref(), "admission"),
            );
            let reason = d.reason;
            self.inner.events.record(
                EventKind::ActionRejected,
                Some(&ctx.pid),
                Some(&a.id),
                json!({"tool": a.tool, "reason": reason, "policy": policy_refused[i], "permission": permission_refused[i], "stage": "admission", "layer": d.layer}),
            );
            let mut r = ActionResult::new(a.id.clone(), ActionStatus::Rejected);
            r.error = Some(reason);
            results[i] = Some(r);
            // `retry` on a refusal acts as `abort`: retrying would refuse again.
            if a.failure_behavior != FailureBehavior::Skip {
                abort = true;
            }
        }
        abort
    }
}

impl Ctx {
    /// Action `i` as it runs: with the input the chain substituted, if any.
    fn action(&self, i: usize) -> &Action {
        self.overrides.get(i).and_then(Option::as_ref).unwrap_or(&self.proposal.actions[i])
    }

    /// The cost budget in force: the stage's, else the runtime's.
    fn budget(&self) -> Option<&crate::ir::CostBudget> {
        self.stage.budget().or(self.rt.inner.options.cost_budget.as_ref())
    }

    /// The in-flight window: the stage's, else the runtime's (at least 1).
    fn max_concurrency(&self) -> usize {
        self.stage.max_concurrency().unwrap_or(self.rt.inner.options.max_concurrency).max(1)
    }

    /// Records a refusal decided after admission (approval, dispatch) and
    /// builds the `rejected` outcome.
    fn reject(&self, a: &Action, d: Decision, stage: &'static str) -> Outcome {
        let events = &self.rt.inner.events;
        events.append(
            EventKind::AdmissionDecided,
            Some(&self.pid),
            Some(&Arc::from(a.id.as_str())),
            d.event_data(a.tool.as_deref(), stage),
        );
        let permission = matches!(d.layer, layer::APPROVAL | layer::HOST | layer::INSPECTOR);
        let policy = matches!(d.layer, layer::POLICY | layer::TRACE);
        events.record(
            EventKind::ActionRejected,
            Some(&self.pid),
            Some(&a.id),
            json!({"tool": a.tool, "reason": d.reason, "policy": policy, "permission": permission, "stage": stage, "layer": d.layer}),
        );
        let mut r = ActionResult::new(a.id.clone(), ActionStatus::Rejected);
        r.error = Some(d.reason);
        Outcome { result: r, abort: a.failure_behavior != FailureBehavior::Skip }
    }

    /// The dispatch-time layers for one attempt: inspectors, then trace rules.
    fn dispatch_layers(&self, a: &Action) -> Option<Decision> {
        if let Some(d) = self.stage.dispatch(a) {
            return Some(d);
        }
        if a.action_type != ActionType::ToolCall {
            return None;
        }
        let policies = self.rt.inner.policies.read().unwrap_or_else(PoisonError::into_inner);
        if policies.trace_rules().is_empty() {
            return None;
        }
        let violations = policies.check_dispatch(a, self.session_id.as_deref());
        if violations.is_empty() {
            return None;
        }
        let mut reasons = Vec::with_capacity(violations.len());
        for v in &violations {
            self.rt.inner.events.record(
                EventKind::PolicyViolation,
                Some(&self.pid),
                Some(&a.id),
                json!({"policy_name": v.policy_name, "action_id": v.action_id, "reason": v.reason, "stage": "dispatch"}),
            );
            reasons.push(format!("{}: {}", v.policy_name, v.reason));
        }
        let mut d = Decision::deny(layer::TRACE, format!("denied by policy: {}", reasons.join("; ")));
        d.rule = Some(Value::String(violations[0].policy_name.clone()));
        Some(d)
    }
}

fn record(o: Outcome, i: usize, results: &mut [Option<ActionResult>], completion: &mut Vec<usize>) -> bool {
    if o.result.status == ActionStatus::Succeeded {
        completion.push(i);
    }
    results[i] = Some(o.result);
    o.abort
}

/// Checks preconditions and state dependencies against live state.
fn dispatch_check(ctx: &Ctx, a: &Action) -> Option<String> {
    let state = &ctx.rt.inner.state;
    for p in &a.preconditions {
        let ok = match ctx.scope.physical(&p.key) {
            Some(k) => state.with_physical(&k, |v| p.evaluate_value(v)),
            None => p.evaluate_value(None),
        };
        if !ok {
            return Some(format!("precondition failed: {}", p.describe()));
        }
    }
    for k in &a.state_dependencies {
        let present = ctx.scope.physical(k).is_some_and(|p| state.with_physical(&p, |v| v.is_some()));
        if !present {
            return Some(format!("state dependency '{k}' not found"));
        }
    }
    None
}

/// Reads again from the shared store every key `a` checks or writes, so
/// its preconditions and `read_version`s see the store as it is now.
async fn refresh_keys(ctx: &Ctx, shared: &Arc<dyn crate::store::StateBackend>, a: &Action) -> Result<()> {
    let mut keys: Vec<&str> = a.preconditions.iter().map(|p| p.key.as_str()).collect();
    keys.extend(a.state_dependencies.iter().map(String::as_str));
    keys.extend(a.assumptions.iter().map(|s| s.key.as_str()));
    keys.extend(a.expected_effects.keys().map(String::as_str));
    if a.action_type != ActionType::ToolCall
        && let Some(k) = a.param("key").and_then(Value::as_str)
    {
        keys.push(k);
    }
    keys.sort_unstable();
    keys.dedup();
    let tenant = ctx.scope.tenant_id();
    for k in keys {
        let Some(phys) = ctx.scope.physical(k) else { continue };
        let v = shared.get(tenant, k).await?;
        ctx.rt.inner.state.mirror_physical(&phys, v.value, v.version);
    }
    Ok(())
}

/// The write of `key` in the shared store, when the state lives there
/// (`None`: no shared store, the write is local only); it yields the
/// version the store gave it. Boxed and built here, not awaited here: only
/// a shared store takes this await, and every action's future stays small.
fn shared_write<'a>(
    ctx: &'a Ctx,
    a: &'a Action,
    key: &'a str,
    value: &Option<Value>,
) -> Option<futures::future::BoxFuture<'a, Result<u64, Fail>>> {
    let shared = ctx.shared.as_ref()?;
    Some(Box::pin(shared_put(ctx, shared, a, key, value.clone())))
}

/// Writes `key` in the shared store (by compare-and-set against the version
/// the action read it at, when it did); the version the store gave it.
async fn shared_put(
    ctx: &Ctx,
    shared: &Arc<dyn crate::store::StateBackend>,
    a: &Action,
    key: &str,
    value: Option<Value>,
) -> Result<u64, Fail> {
    let read = a.assumptions.iter().find(|s| s.key == key).and_then(|s| s.read_version);
    let expect = read.map_or(Expect::Any, Expect::Version);
    // The key as `write_state` checks it: a tenant key of the unscoped
    // view never reaches the store or the journal.
    let phys = ctx.scope.physical(key).ok_or_else(|| {
        Fail::new(format!("state key '{key}' is a tenant key; use a tenant scope instead"), ErrorClass::Validation)
    })?;
    if let Some(j) = &ctx.journal {
        // Write-ahead: the undo is durable before the write.
        let before = ctx.rt.inner.state.get_physical(&phys);
        j.record(&phys, before, value.clone())
            .await
            .map_err(|e| Fail::new(format!("state key '{key}': the run's journal: {e}"), ErrorClass::Unknown))?;
    }
    match shared.put(ctx.scope.tenant_id(), key, value, expect).await {
        Ok(CasOutcome::Written { version }) => Ok(version),
        Ok(CasOutcome::Conflict { current }) => Err(conflict_fail(key, read.unwrap_or(0), current)),
        Err(e) => Err(Fail::new(format!("state key '{key}': the shared state store: {e}"), ErrorClass::Unknown)),
    }
}

/// How the admission hold of an action ended.
enum HoldEnd {
    /// No hold.
    Admitted,
    /// The hold admitted the action (an approval).
    Approved,
    /// The hold refused it.
    Refused(String),
    /// The proposal aborted while the action was held.
    Aborted,
    /// The run suspends: the approval (this key) is still pending.
    Parked(String),
}

/// Awaits the admission hold of action `i`, if any.
async fn await_hold(ctx: &Ctx, i: usize) -> HoldEnd {
    let Some(abort_tx) = &ctx.abort_tx else {
        return HoldEnd::Admitted;
    };
    let Some(hold) = ctx.holds.lock().unwrap_or_else(PoisonError::into_inner).remove(&i) else {
        return HoldEnd::Admitted;
    };
    let mut aborted = abort_tx.subscribe();
    if ctx.suspend.is_some()
        && let Some(park) = hold.park
    {
        let park = AssertUnwindSafe(park).catch_unwind();
        return tokio::select! {
            biased;
            _ = aborted.wait_for(|a| *a) => HoldEnd::Aborted,
            r = park => match r {
                Ok(Parked::Decided(None)) => HoldEnd::Approved,
                Ok(Parked::Decided(Some(reason))) => HoldEnd::Refused(reason),
                Ok(Parked::Pending(key)) => HoldEnd::Parked(key),
                Err(_) => HoldEnd::Refused("the admission hold panicked; refused".to_string()),
            },
        };
    }
    // A panicking hold refuses (fail closed).
    let hold = AssertUnwindSafe(hold.wait).catch_unwind();
    tokio::select! {
        biased;
        _ = aborted.wait_for(|a| *a) => HoldEnd::Aborted,
        r = hold => match r {
            Ok(None) => HoldEnd::Approved,
            Ok(Some(reason)) => HoldEnd::Refused(reason),
            Err(_) => HoldEnd::Refused("the admission hold panicked; refused".to_string()),
        },
    }
}

async fn run_action(ctx: &Ctx, i: usize) -> Outcome {
    let o = run_held_action(ctx, i).await;
    if o.abort
        && let Some(tx) = &ctx.abort_tx
    {
        tx.send_replace(true);
    }
    o
}

async fn run_held_action(ctx: &Ctx, i: usize) -> Outcome {
    let a = ctx.action(i);
    let events = &ctx.rt.inner.events;
    let t0 = Instant::now();
    if let Some(s) = &ctx.suspend
        && s.blocked(i)
    {
        // Waits for an action parked on an approval: deferred too.
        ctx.holds.lock().unwrap_or_else(PoisonError::into_inner).remove(&i);
        return s.defer(a, i, None);
    }
    let hold = await_hold(ctx, i).await;
    // Whether anything was waited on since `t0` was read (an approval
    // hold, the shared store's read, an interactive tool's turn): when
    // nothing was, `t0` is also when the action starts executing.
    let mut waited = !matches!(hold, HoldEnd::Admitted);
    match hold {
        HoldEnd::Parked(key) => {
            if let Some(s) = &ctx.suspend {
                return s.defer(a, i, Some(key));
            }
            let d = Decision::deny(layer::APPROVAL, "permission: the approval is pending".to_string());
            return ctx.reject(a, d, "approval");
        }
        HoldEnd::Admitted => {}
        HoldEnd::Approved => {
            let d = Decision::new(Verdict::Allow, layer::APPROVAL, "approved while held");
            events.append(
                EventKind::AdmissionDecided,
                Some(&ctx.pid),
                Some(&Arc::from(a.id.as_str())),
                d.event_data(a.tool.as_deref(), "approval"),
            );
        }
        HoldEnd::Refused(reason) => {
            let d = Decision::deny(layer::APPROVAL, format!("permission: {reason}"));
            return ctx.reject(a, d, "approval");
        }
        HoldEnd::Aborted => {
            let reason = "skipped due to abort";
            events.record(EventKind::ActionSkipped, Some(&ctx.pid), Some(&a.id), json!({"reason": reason}));
            let mut r = ActionResult::new(a.id.clone(), ActionStatus::Skipped);
            r.error = Some(reason.to_string());
            return Outcome { result: r, abort: false };
        }
    }
    waited |= ctx.shared.is_some();
    if let Some(shared) = &ctx.shared
        && let Err(e) = Box::pin(refresh_keys(ctx, shared, a)).await
    {
        let reason = format!("the shared state store cannot be read: {e}");
        return ctx.reject(a, Decision::deny(layer::DISPATCH, reason), "dispatch");
    }
    if let Some(reason) = dispatch_check(ctx, a) {
        return ctx.reject(a, Decision::deny(layer::DISPATCH, reason), "dispatch");
    }
    let traced = a.action_type == ActionType::ToolCall
        && !ctx.rt.inner.policies.read().unwrap_or_else(PoisonError::into_inner).trace_rules().is_empty();
    if (traced || ctx.stage.has_dispatch_layers())
        && let Some(d) = ctx.dispatch_layers(a)
    {
        return ctx.reject(a, d, "dispatch");
    }
    let one_at_a_time = match a.tool.as_deref() {
        Some(name) if ctx.stage.is_interactive(name) => Some(ctx.interactive.lock().await),
        _ => None,
    };
    waited |= one_at_a_time.is_some();
    let outcome = run_attempts(ctx, i, a, t0, (!waited).then_some(t0)).await;
    if traced {
        let p = ctx.rt.inner.policies.read().unwrap_or_else(PoisonError::into_inner);
        p.record_dispatch(a, ctx.session_id.as_deref(), outcome.result.status == ActionStatus::Succeeded);
    }
    outcome
}

/// Per-action event data; `params_digest` and the rest are rendered lazily
/// from the (immutable) proposal.
fn action_event(ctx: &Ctx, i: usize, phase: ActionPhase, attempt: u32) -> ActionEvent {
    ActionEvent {
        phase,
        proposal: ctx.proposal.clone(),
        index: i,
        attempt,
        duration_ms: None,
        detail: None,
        terminal: false,
    }
}

/// `started`: when the first attempt starts, if the caller read it (else
/// its `ActionExecuting` reads the clock).
async fn run_attempts(ctx: &Ctx, i: usize, a: &Action, t0: Instant, started: Option<Instant>) -> Outcome {
    let events = &ctx.rt.inner.events;
    let aid = &ctx.action_ids[i];
    let pid = Some(&ctx.pid);
    let opts = &ctx.rt.inner.options;
    // Retries are capped (a proposal may ask for 4294967295) and backed off.
    let retries = a.max_retries.min(ctx.stage.retry_cap().unwrap_or(opts.retry_cap));
    let max_attempts = if a.failure_behavior == FailureBehavior::Retry { retries.saturating_add(1) } else { 1 };
    let mut attempt: u32 = 1;
    loop {
        // A retry is dispatched again: the dispatch-time inspectors see it.
        if attempt > 1
            && ctx.stage.has_dispatch_layers()
            && let Some(d) = ctx.stage.dispatch(a)
        {
            return ctx.reject(a, d, "dispatch");
        }
        // Only the first attempt starts when the action did.
        let start = started.filter(|_| attempt == 1);
        let ev = action_event(ctx, i, ActionPhase::Executing, attempt);
        events.append_at(EventKind::ActionExecuting, pid, Some(aid), EventData::Action(ev), start);
        let attempted = match read_version_conflict(ctx, a) {
            Some(f) => Err(f),
            None => attempt_action(ctx, i, a, attempt, Some(&ctx.tx), start).await,
        };
        match attempted {
            Ok(done) => {
                if ctx.rt.inner.model_retries_held.load(Ordering::Relaxed) {
                    ctx.rt.model_retry_chain_ends(&model_retry_chain(ctx, a));
                }
                // One reading for the duration and the event's time.
                let end = Instant::now();
                let duration = ms(end.saturating_duration_since(t0));
                let mut ev = action_event(ctx, i, ActionPhase::Succeeded, attempt);
                ev.duration_ms = Some(duration);
                ev.detail = ActionDetail::boxed(None, None, done.cached);
                let (_, at) =
                    events.append_at(EventKind::ActionSucceeded, pid, Some(aid), EventData::Action(ev), Some(end));
                // The result carries its ActionSucceeded event's time.
                let r = ActionResult {
                    action_id: a.id.clone(),
                    status: ActionStatus::Succeeded,
                    output: done.output,
                    error: None,
                    state_changes: done.changes,
                    duration_ms: Some(duration),
                    timestamp: at,
                    rolled_back: false,
                    terminal: false,
                    compensated: false,
                    compensation_error: None,
                };
                return Outcome { result: r, abort: false };
            }
            Err(f) => {
                if !f.terminal
                    && !matches!(f.class, ErrorClass::Conflict | ErrorClass::ModelRetry)
                    && attempt < max_attempts
                {
                    ctx.retries.fetch_add(1, Ordering::Relaxed);
                    let mut ev = action_event(ctx, i, ActionPhase::Retrying, attempt + 1);
                    ev.detail = ActionDetail::boxed(Some(f.message), Some(f.class.as_str()), None);
                    events.append(EventKind::ActionRetrying, pid, Some(aid), EventData::Action(ev));
                    let base = ctx.stage.retry_backoff_ms().unwrap_or(opts.retry_backoff_ms);
                    if base > 0 {
                        // Boxed: the timer is large and most attempts never wait.
                        Box::pin(tokio::time::sleep(backoff(base, attempt))).await;
                    }
                    attempt += 1;
                    continue;
                }
                let mut f = f;
                if f.class == ErrorClass::ModelRetry {
                    model_retry_bound(ctx, a, &mut f);
                }
                let end = Instant::now();
                let duration = ms(end.saturating_duration_since(t0));
                let mut ev = action_event(ctx, i, ActionPhase::Failed, attempt);
                ev.duration_ms = Some(duration);
                ev.detail = ActionDetail::boxed(Some(f.message.clone()), Some(f.class.as_str()), None);
                ev.terminal = f.terminal;
                let (_, at) =
                    events.append_at(EventKind::ActionFailed, pid, Some(aid), EventData::Action(ev), Some(end));
                let skip = !f.terminal && a.failure_behavior == FailureBehavior::Skip;
                let mut r =
                    ActionResult::new(a.id.clone(), if skip { ActionStatus::Skipped } else { ActionStatus::Failed });
                r.error = Some(f.message);
                r.terminal = f.terminal;
                r.duration_ms = Some(duration);
                r.timestamp = at;
                return Outcome { result: r, abort: !skip };
            }
        }
    }
}

/// The call chain a `ModelRetry` counts in: the policy session and the tool.
fn model_retry_chain(ctx: &Ctx, a: &Action) -> String {
    format!("{}\u{0}{}", ctx.session_id.as_deref().unwrap_or(""), a.tool.as_deref().unwrap_or(""))
}

/// Words a `ModelRetry` failure for the model, within its chain's bound:
/// `model retry (n of 2): <message>`, and once the chain has had its two,
/// an ordinary tool error saying so (the model should stop retrying).
fn model_retry_bound(ctx: &Ctx, a: &Action, f: &mut Fail) {
    let n = ctx.rt.model_retry_counted(&model_retry_chain(ctx, a));
    let limit = super::MODEL_RETRY_LIMIT;
    if n <= limit {
        f.message = format!("model retry ({n} of {limit}): {}", f.message);
    } else {
        f.message =
            format!("model retry limit reached ({limit} per call chain; do not call it this way again): {}", f.message);
        f.class = ErrorClass::ToolError;
    }
}

/// The first `read_version` assumption of `a` whose key moved since: its
/// version is no longer the one the action read. `None` when every one holds
/// (or the action carries none).
fn read_version_conflict(ctx: &Ctx, a: &Action) -> Option<Fail> {
    for s in &a.assumptions {
        let Some(read) = s.read_version else { continue };
        let current = ctx.scope.physical(&s.key).map_or(0, |p| ctx.rt.inner.state.version_physical(&p));
        if current != read {
            return Some(conflict_fail(&s.key, read, current));
        }
    }
    None
}

fn conflict_fail(key: &str, read: u64, current: u64) -> Fail {
    Fail::new(
        format!("conflict: state key '{key}' moved since it was read (read_version {read}, current version {current})"),
        ErrorClass::Conflict,
    )
}

/// The wait before retry `attempt + 1`: exponential from `base_ms`, capped
/// at [`super::MAX_RETRY_BACKOFF_MS`], with jitter (between half and all of it).
fn backoff(base_ms: u64, attempt: u32) -> Duration {
    let exp = base_ms.saturating_mul(1u64 << attempt.saturating_sub(1).min(20)).min(super::MAX_RETRY_BACKOFF_MS);
    let jitter = (uuid::Uuid::new_v4().as_u128() % 1024) as u64;
    Duration::from_millis(exp / 2 + exp / 2 * jitter / 1023)
}

/// Writes one key through the proposal's transaction (when given), logs it
/// and records the mutation.
#[allow(clippy::too_many_arguments)]
fn write_state(
    ctx: &Ctx,
    a: &Action,
    i: usize,
    effect: Option<usize>,
    key: &str,
    value: Option<Value>,
    tx: Option<&Transaction>,
    changes: &mut StateChanges,
    remote: Option<u64>,
    at: Option<Instant>,
) -> Result<(), Fail> {
    let phys = ctx.scope.physical(key).ok_or_else(|| {
        Fail::new(format!("state key '{key}' is a tenant key; use a tenant scope instead"), ErrorClass::Validation)
    })?;
    let change = match &value {
        Some(v) => StateMutation::Set { value: v.clone() },
        None => StateMutation::Delete,
    };
    let state = &ctx.rt.inner.state;
    let read = a.assumptions.iter().find(|s| s.key == key).and_then(|s| s.read_version);
    let version = match (remote, read) {
        // Written in the shared store already: mirrored at its version.
        (Some(v), _) => state
            .write_versioned_physical(&phys, value, v, tx)
            .map_err(|e| Fail::new(e.to_string(), ErrorClass::Unknown))?,
        // The action read this key at a version: the write is a
        // compare-and-set against it, checked and written under one lock.
        (None, Some(read)) => match state.compare_and_set_physical(&phys, value, Expect::Version(read), tx) {
            Ok(CasOutcome::Written { version }) => version,
            Ok(CasOutcome::Conflict { current }) => return Err(conflict_fail(key, read, current)),
            Err(e) => return Err(Fail::new(e.to_string(), ErrorClass::Unknown)),
        },
        (None, None) => {
            state.write_physical(&phys, value, tx).map_err(|e| Fail::new(e.to_string(), ErrorClass::Unknown))?
        }
    };

    let data = EventData::ActionState {
        proposal: ctx.proposal.clone(),
        index: i,
        effect,
        tenant: ctx.tenant.clone(),
        version,
    };
    ctx.rt.inner.events.append_at(EventKind::StateChanged, Some(&ctx.pid), ctx.action_ids.get(i), data, at);
    changes.push_new(key.to_string(), change);
    Ok(())
}

/// `started`: when the action started, read by the caller with nothing
/// waited on since (a `state_write`'s change is stamped with it: the write
/// follows at once).
async fn attempt_action(
    ctx: &Ctx,
    i: usize,
    a: &Action,
    attempt: u32,
    tx: Option<&Transaction>,
    started: Option<Instant>,
) -> Result<Done, Fail> {
    match a.action_type {
        ActionType::StateWrite => {
            let key = a
                .state_write_key()
                .ok_or_else(|| Fail::new("state_write requires 'key' parameter", ErrorClass::Unknown))?;
            let value = if a.param("delete").and_then(Value::as_bool) == Some(true) {
                None
            } else {
                Some(a.param("value").cloned().unwrap_or(Value::Null))
            };
            let mut changes = StateChanges::with_capacity(1);
            let remote = match shared_write(ctx, a, key, &value) {
                Some(w) => Some(w.await?),
                None => None,
            };
            let at = started.filter(|_| remote.is_none());
            write_state(ctx, a, i, None, key, value, tx, &mut changes, remote, at)?;
            let mut out = String::with_capacity(9 + key.len());
            out.push_str("written: ");
            out.push_str(key);
            Ok(Done { output: Some(Value::String(out)), changes, cached: None })
        }
        ActionType::StateRead => {
            let key = a
                .param("key")
                .and_then(Value::as_str)
                .ok_or_else(|| Fail::new("state_read requires 'key' parameter", ErrorClass::Unknown))?;
            let v = ctx.scope.physical(key).and_then(|p| ctx.rt.inner.state.get_physical(&p));
            Ok(Done { output: Some(v.unwrap_or(Value::Null)), changes: StateChanges::new(), cached: None })
        }
        ActionType::Assertion => {
            let key = a
                .param("key")
                .and_then(Value::as_str)
                .ok_or_else(|| Fail::new("assertion requires 'key' parameter", ErrorClass::Unknown))?;
            let expected = a.param("expected").cloned().unwrap_or(Value::Null);
            let op = a.param("operator").and_then(Value::as_str).map(Operator::parse).unwrap_or_default();
            let current = ctx.scope.physical(key).and_then(|p| ctx.rt.inner.state.get_physical(&p));
            // `eq` compares the current value (absent reads as `null`) with
            // `expected`, as the original does; other operators are the
            // precondition operators.
            let holds = if op == Operator::Eq {
                json_eq(current.as_ref().unwrap_or(&Value::Null), &expected)
            } else {
                Precondition::new(key, op.clone(), expected.clone()).evaluate_value(current.as_ref())
            };
            if holds {
                Ok(Done {
                    output: Some(json!({"asserted": key, "value": current})),
                    changes: StateChanges::new(),
                    cached: None,
                })
            } else {
                let shown = current.map_or_else(|| "absent".to_string(), |v| v.to_string());
                let msg = if op == Operator::Eq {
                    format!("assertion failed: state['{key}'] = {shown}, expected {expected}")
                } else {
                    format!("assertion failed: state['{key}'] = {shown}, expected {} {expected}", op.as_str())
                };
                Err(Fail::new(msg, ErrorClass::Unknown))
            }
        }
        ActionType::ToolCall => tool_call(ctx, i, a, attempt, tx).await,
    }
}

fn classify(f: &ToolFailure) -> ErrorClass {
    if f.is_model_retry() {
        ErrorClass::ModelRetry
    } else if f.message.starts_with("denied by policy:") || f.message.starts_with("rejected by policy:") {
        ErrorClass::RejectedByPolicy
    } else if f.message.starts_with(crate::sandbox::TIMEOUT_PREFIX) {
        ErrorClass::SandboxTimeout
    } else if f.message.starts_with(crate::sandbox::LIMIT_PREFIX) {
        ErrorClass::SandboxLimit
    } else if f.message.starts_with(crate::sandbox::UNAVAILABLE_PREFIX) {
        ErrorClass::SandboxUnavailable
    } else {
        ErrorClass::ToolError
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Invokes the executor once, with the per-attempt timeout, catching panics.
///
/// Not an `async fn` taking the call: the executor gets the [`ToolCall`]
/// before the first await, so the call (some 200 bytes) is not part of every
/// action's future, which stays small enough for the allocator's fast path.
fn invoke(ctx: &Ctx, call: ToolCall) -> impl Future<Output = Result<Value, Fail>> {
    let timeout = call.timeout_ms;
    ctx.tool_calls.fetch_add(1, Ordering::Relaxed);
    let tool = call.tool.clone();
    let started = std::panic::catch_unwind(AssertUnwindSafe(|| ctx.executor.execute(call)))
        .map(|f| AssertUnwindSafe(f).catch_unwind())
        .map_err(|p| panic_message(&*p));
    async move {
        let fut = match started {
            Ok(f) => f,
            Err(p) => {
                return Err(Fail::new(format!("tool '{tool}' executor panicked: {p}"), ErrorClass::ToolError));
            }
        };
        let res = match timeout {
            // Boxed: the timer is large and most calls have no timeout.
            Some(t) => match Box::pin(tokio::time::timeout(Duration::from_millis(t), fut)).await {
                Ok(r) => r,
                Err(_) => return Err(Fail::new(format!("tool '{tool}' timed out after {t} ms"), ErrorClass::Timeout)),
            },
            None => fut.await,
        };
        match res {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(f)) => {
                let class = classify(&f);
                Err(Fail { terminal: f.is_terminal(), message: f.message, class })
            }
            Err(p) => Err(Fail::new(
                format!("tool '{tool}' executor panicked: {}", panic_message(&*p)),
                ErrorClass::ToolError,
            )),
        }
    }
}

fn make_call(ctx: &Ctx, tool: &str, params: Value, a: &Action, attempt: u32) -> ToolCall {
    ToolCall {
        tool: tool.to_string(),
        params,
        action_id: a.id.clone(),
        request_id: ctx.rt.next_request_id(),
        timeout_ms: a.timeout_ms,
        session_id: ctx.session_id.clone(),
        attempt,
        cwd: ctx.cwd.clone(),
        isolation: ctx.isolation.clone(),
        // None past what a timestamp holds (a `timeout_ms` of ages): no
        // deadline, rather than an overflow.
        deadline: a
            .timeout_ms
            .and_then(|t| chrono::Duration::try_milliseconds(i64::try_from(t).ok()?))
            .and_then(|d| chrono::Utc::now().checked_add_signed(d)),
    }
}

async fn tool_call(ctx: &Ctx, i: usize, a: &Action, attempt: u32, tx: Option<&Transaction>) -> Result<Done, Fail> {
    let name = a.tool.as_deref().unwrap_or("");
    let tool = match ctx.tools.get(i).cloned().flatten() {
        Some(t) => t,
        None => ctx
            .rt
            .inner
            .tools
            .read()
            .ok()
            .and_then(|t| t.get(name))
            .ok_or_else(|| Fail::new(format!("tool '{name}' is not registered"), ErrorClass::ToolError))?,
    };
    let inner = &ctx.rt.inner;
    if a.invocation_mode.is_detached() {
        return Box::pin(start_detached(ctx, i, &tool, a, attempt)).await;
    }

    let idempotent = a.idempotent || tool.schema.idempotent;
    let ttl = tool.schema.cache_ttl_secs;
    let key = (idempotent || ttl.is_some()).then(|| cache_key(name, &canonical_object(&a.parameters)));
    let mut cached = None;
    if let Some(k) = &key {
        if idempotent && let Some(v) = inner.idempotency.get(k) {
            cached = Some((v, "idempotency"));
        } else if ttl.is_some()
            && let Some(v) = inner.ttl_cache.get(k)
        {
            cached = Some((v, "ttl"));
        }
    }

    let (output, cached_by) = match cached {
        Some((v, by)) => (v, Some(by)),
        None => {
            if let Some(rl) = &tool.schema.rate_limit {
                Box::pin(ctx.rt.take_rate_slot(name, rl)).await.map_err(|e| Fail::new(e, ErrorClass::ToolError))?;
            }
            let v = invoke(ctx, make_call(ctx, name, a.parameters.to_value(), a, attempt)).await?;
            if let Some(e) = tool.check_output(&v) {
                return Err(Fail::new(format!("tool '{name}' output validation: {e}"), ErrorClass::Validation));
            }
            if let Some(k) = key {
                if idempotent {
                    inner.idempotency.put(k.clone(), v.clone(), None);
                }
                if let Some(t) = ttl {
                    inner.ttl_cache.put(k, v.clone(), Some(Duration::from_secs(t)));
                }
            }
            (v, None)
        }
    };

    let mut changes = StateChanges::with_capacity(a.expected_effects.len());
    for (e, (k, v)) in a.expected_effects.iter().enumerate() {
        let value = Some(v.clone());
        let remote = match shared_write(ctx, a, k, &value) {
            Some(w) => Some(w.await?),
            None => None,
        };
        write_state(ctx, a, i, Some(e), k, value, tx, &mut changes, remote, None)?;
    }
    Ok(Done { output: Some(output), changes, cached: cached_by })
}

async fn start_detached(ctx: &Ctx, i: usize, tool: &RegisteredTool, a: &Action, attempt: u32) -> Result<Done, Fail> {
    let name = tool.schema.name.as_str();
    let inner = &ctx.rt.inner;
    let Ok(handle_rt) = tokio::runtime::Handle::try_current() else {
        return Err(Fail::new(
            format!("tool '{name}': detached invocation needs a tokio runtime"),
            ErrorClass::ToolError,
        ));
    };
    if let Some(rl) = &tool.schema.rate_limit {
        Box::pin(ctx.rt.take_rate_slot(name, rl)).await.map_err(|e| Fail::new(e, ErrorClass::ToolError))?;
    }
    ctx.tool_calls.fetch_add(1, Ordering::Relaxed);
    let cancel = CancelToken::new();
    let call = make_call(ctx, name, a.parameters.to_value(), a, attempt);
    let fut = match std::panic::catch_unwind(AssertUnwindSafe(|| ctx.executor.execute_stream(call, cancel.clone()))) {
        Ok(f) => AssertUnwindSafe(f).catch_unwind(),
        Err(p) => {
            return Err(Fail::new(
                format!("tool '{name}' executor panicked: {}", panic_message(&*p)),
                ErrorClass::ToolError,
            ));
        }
    };
    let started = match a.timeout_ms {
        Some(t) => match tokio::time::timeout(Duration::from_millis(t), fut).await {
            Ok(r) => r,
            Err(_) => {
                return Err(Fail::new(format!("tool '{name}' timed out after {t} ms starting"), ErrorClass::Timeout));
            }
        },
        None => fut.await,
    };
    let stream = match started {
        Ok(Ok(s)) => s,
        Ok(Err(f)) => {
            let class = classify(&f);
            return Err(Fail { terminal: f.is_terminal(), message: f.message, class });
        }
        Err(p) => {
            return Err(Fail::new(
                format!("tool '{name}' executor panicked: {}", panic_message(&*p)),
                ErrorClass::ToolError,
            ));
        }
    };
    let handle = inner.detached.register(name, &a.id, cancel.clone());
    ctx.detached.lock().unwrap_or_else(PoisonError::into_inner).push((i, handle.id.clone()));
    inner.events.record(
        EventKind::ToolStarted,
        Some(&ctx.pid),
        Some(&a.id),
        json!({"tool": name, "handle": handle.id, "invocation_mode": a.invocation_mode}),
    );
    handle_rt.spawn(detached::drain(inner.detached.clone(), handle.clone(), stream, cancel));
    Ok(Done {
        output: Some(json!({"tool_handle": handle.id, "status": "running"})),
        changes: StateChanges::new(),
        cached: None,
    })
}

/// Runs one compensation once; its state writes are not transactional. A
/// compensation is an action like any other: it passes admission (tool,
/// policies, tier, chain, approvals, host hook) and the dispatch layers
/// before it runs, and an `action_ref` to an action refused at admission
/// never runs.
async fn compensate(ctx: &Ctx, a: &Action, comp: &Compensation) -> Result<(), String> {
    match comp {
        Compensation::Tool { tool, parameters } => {
            let mut c = Action::tool_call(tool.clone());
            c.id = a.id.clone();
            c.parameters = parameters.into();
            let params = admit_compensation(ctx, &c).await?.unwrap_or_else(|| parameters.clone());
            invoke(ctx, make_call(ctx, tool, Value::Object(params), a, 1)).await.map(|_| ()).map_err(|f| f.message)
        }
        Compensation::ActionRef { action_id } => {
            let Some((j, target)) = ctx.proposal.actions.iter().enumerate().find(|(_, b)| b.id == *action_id) else {
                return Err(format!("compensation action '{action_id}' is not in the proposal"));
            };
            if ctx.refused.get(j).copied().unwrap_or(true) {
                let d = Decision::deny(
                    layer::VALIDATION,
                    format!("compensation refused: action '{action_id}' was refused at admission"),
                );
                let events = &ctx.rt.inner.events;
                events.append(
                    EventKind::AdmissionDecided,
                    Some(&ctx.pid),
                    Some(&Arc::from(a.id.as_str())),
                    d.event_data(target.tool.as_deref(), "compensation"),
                );
                return Err(d.reason);
            }
            match admit_compensation(ctx, target).await? {
                None => attempt_action(ctx, j, target, 1, None, None).await,
                Some(params) => {
                    let mut b = target.clone();
                    b.parameters = params.into();
                    attempt_action(ctx, j, &b, 1, None, None).await
                }
            }
            .map(|_| ())
            .map_err(|f| f.message)
        }
    }
}

/// Admission of one compensation, recorded as an `AdmissionDecided` event
/// with `stage: "compensation"`; `Err` with the refusal, else the input the
/// chain substituted, if it did.
async fn admit_compensation(ctx: &Ctx, c: &Action) -> Result<Option<Map<String, Value>>, String> {
    let decision = decide_compensation(ctx, c).await;
    let events = &ctx.rt.inner.events;
    if let Some(d) = &decision {
        events.append(
            EventKind::AdmissionDecided,
            Some(&ctx.pid),
            Some(&Arc::from(c.id.as_str())),
            d.event_data(c.tool.as_deref(), "compensation"),
        );
    }
    match decision {
        Some(d) if d.verdict != Verdict::Allow => Err(format!("compensation refused: {}", d.reason)),
        Some(d) => Ok(d.substituted),
        None => Ok(None),
    }
}

/// The admission layers for a compensation, in order; `Some` with the
/// refusal (or the allow decision of the stage), `None` when nothing spoke.
async fn decide_compensation(ctx: &Ctx, c: &Action) -> Option<Decision> {
    let inner = &ctx.rt.inner;
    if c.action_type == ActionType::ToolCall {
        let name = c.tool.as_deref().unwrap_or("");
        let tool = inner.tools.read().ok().and_then(|t| t.get(name));
        match tool {
            None => return Some(Decision::deny(layer::TOOL, format!("tool '{name}' is not registered"))),
            Some(t) => {
                if t.validates_params()
                    && let Some(e) = t.check_params(&c.parameters.to_value())
                {
                    return Some(Decision::deny(layer::TOOL, format!("tool '{name}' parameter validation: {e}")));
                }
            }
        }
    }
    {
        let policies = inner.policies.read().unwrap_or_else(PoisonError::into_inner);
        let session = ctx.session_id.as_deref();
        if !policies.is_empty() || session.is_some() {
            let state = inner.state.snapshot(&ctx.scope);
            let violations = policies.check_in_session(c, &state, session);
            if let Some(v) = violations.first() {
                let reasons: Vec<String> =
                    violations.iter().map(|v| format!("policy '{}': {}", v.policy_name, v.reason)).collect();
                let mut d = Decision::deny(layer::POLICY, reasons.join("; "));
                d.rule = Some(Value::String(v.policy_name.clone()));
                return Some(d);
            }
        }
    }
    let mut allowed = None;
    if ctx.stage.is_empty() {
        if let Some(d) = ctx.stage.protected(c) {
            return Some(d);
        }
    } else {
        if let Some((refused, d)) = ctx.stage.tier_decisions(std::slice::from_ref(c)).into_iter().next() {
            if refused {
                return Some(d);
            }
            allowed = Some(d);
        }
        let session = ctx.session_id.as_deref();
        let verdict =
            std::panic::catch_unwind(AssertUnwindSafe(|| ctx.stage.decide(c, session))).unwrap_or_else(|_| {
                StageVerdict::Refuse(Decision::deny(layer::HOST, "the admission stage panicked; refused"))
            });
        match verdict {
            StageVerdict::Admit(d) => allowed = d.or(allowed),
            StageVerdict::Refuse(d) => return Some(d),
            StageVerdict::Hold(d, held) => match AssertUnwindSafe(held.wait).catch_unwind().await {
                Ok(None) => allowed = Some(Decision { verdict: Verdict::Allow, layer: layer::APPROVAL, ..d }),
                Ok(Some(reason)) => return Some(Decision::deny(layer::APPROVAL, reason)),
                Err(_) => return Some(Decision::deny(layer::APPROVAL, "the admission hold panicked; refused")),
            },
        }
    }
    let check = inner.admission.read().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(check) = check {
        let verdict = std::panic::catch_unwind(AssertUnwindSafe(|| check(c, ctx.session_id.as_deref())))
            .unwrap_or_else(|_| AdmissionVerdict::Refuse("the admission check panicked; refused".to_string()));
        match verdict {
            AdmissionVerdict::Admit => {}
            AdmissionVerdict::Refuse(reason) => return Some(Decision::deny(layer::HOST, reason)),
            AdmissionVerdict::Hold(wait) => match AssertUnwindSafe(wait).catch_unwind().await {
                Ok(None) => {}
                Ok(Some(reason)) => return Some(Decision::deny(layer::HOST, reason)),
                Err(_) => return Some(Decision::deny(layer::HOST, "the admission hold panicked; refused")),
            },
        }
    }
    // With a substituted input, the later checks see what the tool would receive.
    let substituted = allowed.as_ref().and_then(|d| d.substituted.clone()).map(|params| {
        let mut b = c.clone();
        b.parameters = params.into();
        b
    });
    let c = substituted.as_ref().unwrap_or(c);
    if substituted.is_some()
        && let Some(t) = inner.tools.read().ok().and_then(|t| t.get(c.tool.as_deref().unwrap_or("")))
        && t.validates_params()
        && let Some(e) = t.check_params(&c.parameters.to_value())
    {
        return Some(Decision::deny(layer::TOOL, format!("parameter validation of the substituted input: {e}")));
    }
    if let Some(d) = ctx.dispatch_layers(c) {
        return Some(d);
    }
    allowed
}

#[cfg(test)]
mod backoff_tests {
    use super::backoff;
    use crate::engine::MAX_RETRY_BACKOFF_MS;

    /// Exponential from the base, capped, and jittered between half and all
    /// of the wait: never zero for a non-zero base, never above the cap, and
    /// not the same every time.
    #[test]
    fn backoff_doubles_is_capped_and_jittered() {
        for base in [1u64, 50, 100, 1_000, 10_000] {
            for attempt in 1..=40u32 {
                let exp = base.saturating_mul(1u64 << (attempt - 1).min(20)).min(MAX_RETRY_BACKOFF_MS);
                for _ in 0..20 {
                    let w = backoff(base, attempt).as_millis() as u64;
                    assert!(w >= exp / 2 && w <= exp, "base {base} attempt {attempt}: {w} not in [{}, {exp}]", exp / 2);
                }
            }
        }
        let waits: std::collections::HashSet<u128> = (0..64).map(|_| backoff(1_000, 3).as_millis()).collect();
        assert!(waits.len() > 1, "no jitter: {waits:?}");
        assert_eq!(backoff(0, 5).as_millis(), 0);
    }
}
