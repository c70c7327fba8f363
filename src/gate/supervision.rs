//! Supervision: an out-of-process supervisor subscribes (filtered by tools,
//! sessions and minimum reversibility), receives an intent for every matching
//! proposal — parameter key names and a digest, never values — and decides
//! allow, deny or escalate. A matching proposal is parked until a decision
//! arrives or the decision timeout rejects it (fail closed); with no matching
//! subscriber the gate is a no-op.
//!
//! The daemon maps this onto `supervision.subscribe`, `.unsubscribe`,
//! `.pending`, `.decide` and the `supervision.intent` notification; the engine
//! calls [`SupervisionHub::admit`] before executing a proposal and awaits
//! [`SupervisionHub::wait`] for a parked one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::approval::store::{Clock, input_digest};
use crate::ir::{ActionProposal, ActionType, Reversibility};
use crate::{Error, Result};

/// The default decision timeout: 30 seconds.
pub const DEFAULT_DECISION_TIMEOUT: Duration = Duration::from_secs(30);

/// Which proposals a supervisor sees. Every field set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisionFilter {
    /// Proposals with an action calling one of these tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Proposals submitted in one of these sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Vec<String>>,
    /// Proposals whose rollback contract is at least this severe
    /// (`reversible` < `compensable` < `irreversible`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_reversibility: Option<Reversibility>,
}

impl SupervisionFilter {
    /// True when `proposal`, submitted in `session_id`, matches.
    pub fn matches(&self, proposal: &ActionProposal, session_id: Option<&str>) -> bool {
        self.matches_contract(proposal, session_id, proposal.rollback_contract())
    }

    /// [`SupervisionFilter::matches`] judging `min_reversibility` against
    /// `contract` instead of the proposal's declared rollback contract.
    pub fn matches_contract(
        &self,
        proposal: &ActionProposal,
        session_id: Option<&str>,
        contract: Reversibility,
    ) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|t| proposal.actions.iter().any(|a| a.tool.as_ref().is_some_and(|n| t.contains(n))))
            && self.sessions.as_ref().is_none_or(|s| session_id.is_some_and(|id| s.iter().any(|x| x == id)))
            && self.min_reversibility.is_none_or(|m| contract.severity() >= m.severity())
    }
}

/// One action of an intent: names and a digest, never parameter values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentAction {
    /// The action id.
    pub id: String,
    /// The action type.
    pub action_type: ActionType,
    /// The tool, for a tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Its declared reversibility.
    pub reversibility: Reversibility,
    /// The parameter names, sorted.
    pub parameter_keys: Vec<String>,
    /// SHA-256 (hex) of the RFC 8785 canonical parameters.
    pub parameters_digest: String,
}

/// A parked proposal, as a supervisor sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The intent id.
    pub id: String,
    /// The proposal.
    pub proposal_id: String,
    /// The proposal's source.
    pub source: String,
    /// The session it was submitted in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The proposal's rollback contract (its worst reversibility).
    pub reversibility: Reversibility,
    /// When it was parked.
    pub created_at: DateTime<Utc>,
    /// Its actions.
    pub actions: Vec<IntentAction>,
}

/// What a supervisor decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SupervisorVerdict {
    /// The proposal proceeds.
    Allow,
    /// The proposal is rejected.
    Deny,
    /// The proposal is rejected and handed to a human.
    Escalate,
}

/// A supervisor's decision `{kind, reason?}`; deny and escalate need a reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorDecision {
    /// allow, deny or escalate.
    pub kind: SupervisorVerdict,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How a parked proposal ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum IntentOutcome {
    /// A supervisor allowed it.
    Allowed {
        /// The supervisor's reason, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A supervisor denied it.
    Denied {
        /// Why.
        reason: String,
    },
    /// A supervisor escalated it.
    Escalated {
        /// Why.
        reason: String,
    },
    /// Nobody decided within the decision timeout.
    Expired,
}

impl IntentOutcome {
    /// True only for an allow: everything else rejects the proposal.
    pub fn admits(&self) -> bool {
        matches!(self, IntentOutcome::Allowed { .. })
    }

    /// The rejection reason the proposal's actions carry; `None` for an allow.
    pub fn rejection_reason(&self) -> Option<String> {
        match self {
            IntentOutcome::Allowed { .. } => None,
            IntentOutcome::Denied { reason } => Some(format!("denied by supervisor: {reason}")),
            IntentOutcome::Escalated { reason } => Some(format!("escalated by supervisor: {reason}")),
            IntentOutcome::Expired => Some("no supervisor decision within the decision timeout".to_string()),
        }
    }
}

/// The answer to a subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// Always true.
    pub subscribed: bool,
    /// The decision timeout in milliseconds.
    pub decision_timeout_ms: u64,
    /// How many supervisors are subscribed now.
    pub supervisors: usize,
}

struct Parked {
    intent: Intent,
    audience: Vec<String>,
    deadline: DateTime<Utc>,
    outcome: watch::Sender<Option<IntentOutcome>>,
}

#[derive(Default)]
struct HubInner {
    subscribers: BTreeMap<String, (SupervisionFilter, mpsc::UnboundedSender<Intent>)>,
    intents: HashMap<String, Parked>,
    order: Vec<String>,
}

/// The supervision gate of one runtime or daemon.
pub struct SupervisionHub {
    inner: Mutex<HubInner>,
    timeout: Duration,
    clock: Clock,
}

impl std::fmt::Debug for SupervisionHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisionHub").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl Default for SupervisionHub {
    fn default() -> Self {
        SupervisionHub::new(DEFAULT_DECISION_TIMEOUT)
    }
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

impl SupervisionHub {
    /// A hub rejecting unanswered intents after `decision_timeout`.
    pub fn new(decision_timeout: Duration) -> Self {
        SupervisionHub::with_clock(decision_timeout, Arc::new(Utc::now))
    }

    /// [`SupervisionHub::new`] with a clock.
    pub fn with_clock(decision_timeout: Duration, clock: Clock) -> Self {
        SupervisionHub { inner: Mutex::new(HubInner::default()), timeout: decision_timeout, clock }
    }

    fn lock(&self) -> Result<MutexGuard<'_, HubInner>> {
        self.inner.lock().map_err(|_| Error::runtime("supervision_unavailable", "supervision lock poisoned"))
    }

    /// Subscribes (or re-subscribes, replacing the filter) the supervisor
    /// `subscriber`; intents arrive on the returned receiver.
    pub fn subscribe(
        &self,
        subscriber: &str,
        filter: SupervisionFilter,
    ) -> Result<(Subscription, mpsc::UnboundedReceiver<Intent>)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inner = self.lock()?;
        inner.subscribers.insert(subscriber.to_string(), (filter, tx));
        let sub = Subscription {
            subscribed: true,
            decision_timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            supervisors: inner.subscribers.len(),
        };
        Ok((sub, rx))
    }

    /// Unsubscribes; returns whether it was subscribed.
    pub fn unsubscribe(&self, subscriber: &str) -> Result<bool> {
        Ok(self.lock()?.subscribers.remove(subscriber).is_some())
    }

    /// Parks `proposal` when a subscribed supervisor's filter matches it and
    /// announces the intent to every such supervisor; `None` (admit at once)
    /// when none matches.
    pub fn admit(&self, proposal: &ActionProposal, session_id: Option<&str>) -> Result<Option<Intent>> {
        let declared: Vec<Reversibility> = proposal.actions.iter().map(|a| a.reversibility).collect();
        self.admit_effective(proposal, session_id, &declared)
    }

    /// [`SupervisionHub::admit`] where each action counts as the worse of its
    /// declared reversibility and `classified[i]` (a classifier's verdict;
    /// a missing entry leaves the declared value). The intent and the
    /// `min_reversibility` filters see that worse value, so a proposal cannot
    /// slip past supervision by declaring itself reversible.
    pub fn admit_classified(
        &self,
        proposal: &ActionProposal,
        session_id: Option<&str>,
        classified: &[Reversibility],
    ) -> Result<Option<Intent>> {
        let effective: Vec<Reversibility> = proposal
            .actions
            .iter()
            .enumerate()
            .map(|(i, a)| classified.get(i).map_or(a.reversibility, |c| a.reversibility.worst(*c)))
            .collect();
        self.admit_effective(proposal, session_id, &effective)
    }

    fn admit_effective(
        &self,
        proposal: &ActionProposal,
        session_id: Option<&str>,
        effective: &[Reversibility],
    ) -> Result<Option<Intent>> {
        let contract = effective.iter().fold(Reversibility::Reversible, |acc, r| acc.worst(*r));
        let now = (self.clock)();
        let mut inner = self.lock()?;
        inner.subscribers.retain(|_, (_, tx)| !tx.is_closed());
        let audience: Vec<String> = inner
            .subscribers
            .iter()
            .filter(|(_, (f, _))| f.matches_contract(proposal, session_id, contract))
            .map(|(id, _)| id.clone())
            .collect();
        if audience.is_empty() {
            return Ok(None);
        }
        let mut actions = Vec::with_capacity(proposal.actions.len());
        for (i, a) in proposal.actions.iter().enumerate() {
            let mut parameter_keys: Vec<String> = a.parameters.keys().cloned().collect();
            parameter_keys.sort();
            actions.push(IntentAction {
                id: a.id.clone(),
                action_type: a.action_type,
                tool: a.tool.clone(),
                reversibility: effective.get(i).copied().unwrap_or(a.reversibility),
                parameter_keys,
                parameters_digest: input_digest(&a.parameters.to_value())?,
            });
        }
        let intent = Intent {
            id: format!("intent-{}", uuid::Uuid::new_v4().simple()),
            proposal_id: proposal.id.clone(),
            source: proposal.source.clone(),
            session_id: session_id.map(str::to_string),
            reversibility: contract,
            created_at: now,
            actions,
        };
        for id in &audience {
            if let Some((_, tx)) = inner.subscribers.get(id) {
                let _ = tx.send(intent.clone());
            }
        }
        inner.order.push(intent.id.clone());
        inner.intents.insert(
            intent.id.clone(),
            Parked {
                intent: intent.clone(),
                audience,
                deadline: now + chrono_duration(self.timeout),
                outcome: watch::channel(None).0,
            },
        );
        Ok(Some(intent))
    }

    fn expire_locked(inner: &mut HubInner, now: DateTime<Utc>) {
        for p in inner.intents.values_mut() {
            if p.outcome.borrow().is_none() && now >= p.deadline {
                p.outcome.send_replace(Some(IntentOutcome::Expired));
            }
        }
    }

    /// Undecided intents, oldest first; with `subscriber`, only those
    /// announced to it.
    pub fn pending(&self, subscriber: Option<&str>) -> Result<Vec<Intent>> {
        let now = (self.clock)();
        let mut inner = self.lock()?;
        Self::expire_locked(&mut inner, now);
        Ok(inner
            .order
            .iter()
            .filter_map(|id| inner.intents.get(id))
            .filter(|p| p.outcome.borrow().is_none())
            .filter(|p| subscriber.is_none_or(|s| p.audience.iter().any(|a| a == s)))
            .map(|p| p.intent.clone())
            .collect())
    }

    /// Decides an intent. Errors: `invalid_argument` (deny or escalate
    /// without a reason), `intent_not_found`, `intent_already_decided`,
    /// `intent_expired`. The first decision wins.
    pub fn decide(&self, intent_id: &str, decision: &SupervisorDecision) -> Result<IntentOutcome> {
        let reason = decision.reason.clone().filter(|r| !r.trim().is_empty());
        let outcome = match (decision.kind, reason) {
            (SupervisorVerdict::Allow, reason) => IntentOutcome::Allowed { reason },
            (SupervisorVerdict::Deny, Some(reason)) => IntentOutcome::Denied { reason },
            (SupervisorVerdict::Escalate, Some(reason)) => IntentOutcome::Escalated { reason },
            (_, None) => {
                return Err(Error::invalid_argument("decision.reason", "is required for `deny` and `escalate`"));
            }
        };
        let now = (self.clock)();
        let mut inner = self.lock()?;
        Self::expire_locked(&mut inner, now);
        let Some(p) = inner.intents.get(intent_id) else {
            return Err(Error::not_found("intent_not_found", format!("no intent `{intent_id}`")));
        };
        match &*p.outcome.borrow() {
            Some(IntentOutcome::Expired) => {
                return Err(Error::runtime("intent_expired", format!("intent `{intent_id}` expired undecided")));
            }
            Some(_) => {
                return Err(Error::runtime(
                    "intent_already_decided",
                    format!("intent `{intent_id}` is already decided"),
                ));
            }
            None => {}
        }
        p.outcome.send_replace(Some(outcome.clone()));
        Ok(outcome)
    }

    /// The outcome of an intent, once it has one.
    pub fn outcome(&self, intent_id: &str) -> Result<Option<IntentOutcome>> {
        let now = (self.clock)();
        let mut inner = self.lock()?;
        Self::expire_locked(&mut inner, now);
        match inner.intents.get(intent_id) {
            Some(p) => Ok(p.outcome.borrow().clone()),
            None => Err(Error::not_found("intent_not_found", format!("no intent `{intent_id}`"))),
        }
    }

    /// Waits for the outcome of a parked proposal: a decision, or
    /// [`IntentOutcome::Expired`] at the decision timeout. Needs tokio.
    pub async fn wait(&self, intent_id: &str) -> Result<IntentOutcome> {
        let (mut rx, deadline) = {
            let inner = self.lock()?;
            let Some(p) = inner.intents.get(intent_id) else {
                return Err(Error::not_found("intent_not_found", format!("no intent `{intent_id}`")));
            };
            (p.outcome.subscribe(), p.deadline)
        };
        let left = (deadline - (self.clock)()).to_std().unwrap_or_default();
        let decided = async { rx.wait_for(Option::is_some).await.ok().and_then(|o| o.clone()) };
        if let Ok(Some(o)) = tokio::time::timeout(left, decided).await {
            return Ok(o);
        }
        // The timeout closes it unless a decision got in first.
        let inner = self.lock()?;
        let Some(p) = inner.intents.get(intent_id) else {
            return Ok(IntentOutcome::Expired);
        };
        let mut outcome = IntentOutcome::Expired;
        p.outcome.send_if_modified(|o| match o {
            Some(existing) => {
                outcome = existing.clone();
                false
            }
            None => {
                *o = Some(IntentOutcome::Expired);
                true
            }
        });
        Ok(outcome)
    }

    /// The decision timeout.
    pub fn decision_timeout(&self) -> Duration {
        self.timeout
    }

    /// True when at least one supervisor is subscribed (a cheap check before
    /// classifying a proposal for [`SupervisionHub::admit_classified`]).
    pub fn has_subscribers(&self) -> bool {
        self.inner.lock().map(|i| i.subscribers.values().any(|(_, tx)| !tx.is_closed())).unwrap_or(false)
    }

    /// True when `subscriber` is subscribed (and still receiving).
    pub fn is_subscribed(&self, subscriber: &str) -> Result<bool> {
        Ok(self.lock()?.subscribers.get(subscriber).is_some_and(|(_, tx)| !tx.is_closed()))
    }

    /// Closes an undecided intent as [`IntentOutcome::Expired`] before its
    /// deadline (its submitter went away); returns whether it was undecided.
    /// A decided intent keeps its outcome.
    pub fn withdraw(&self, intent_id: &str) -> Result<bool> {
        let inner = self.lock()?;
        Ok(inner.intents.get(intent_id).is_some_and(|p| {
            p.outcome.send_if_modified(|o| {
                if o.is_none() {
                    *o = Some(IntentOutcome::Expired);
                    true
                } else {
                    false
                }
            })
        }))
    }

    /// Forgets the oldest decided intents beyond the newest `keep` (so a
    /// late decision on a recent one is still answered precisely); returns
    /// how many were forgotten.
    pub fn prune_decided_keep(&self, keep: usize) -> Result<usize> {
        let now = (self.clock)();
        let mut inner = self.lock()?;
        Self::expire_locked(&mut inner, now);
        let HubInner { intents, order, .. } = &mut *inner;
        let decided = order.iter().filter(|id| intents.get(*id).is_some_and(|p| p.outcome.borrow().is_some())).count();
        let mut excess = decided.saturating_sub(keep);
        let before = intents.len();
        order.retain(|id| {
            if excess > 0 && intents.get(id).is_some_and(|p| p.outcome.borrow().is_some()) {
                intents.remove(id);
                excess -= 1;
                false
            } else {
                true
            }
        });
        Ok(before - intents.len())
    }

    /// Forgets decided intents (their outcomes were delivered).
    pub fn prune_decided(&self) -> Result<usize> {
        let now = (self.clock)();
        let mut inner = self.lock()?;
        Self::expire_locked(&mut inner, now);
        let before = inner.intents.len();
        inner.intents.retain(|_, p| p.outcome.borrow().is_none());
        let HubInner { intents, order, .. } = &mut *inner;
        order.retain(|id| intents.contains_key(id));
        Ok(before - inner.intents.len())
    }
}
