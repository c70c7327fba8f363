//! Building a plan (policy per item, prechecks, scopes, breaker) and applying
//! client decisions to it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::plan::{Call, Decision, OperationCatalog, Plan, PlanItem, ToolKind};
use super::policy::{GateRule, ItemPolicy, PolicyDecision, PolicyStore, always_refused, strictest};
use super::preview::{PreviewProvider, attach_previews};
use super::session::{GateSession, Scope, SessionRule, apply_corrections, corrections_between, validate_input};
use crate::{Error, Result};

/// A client's decision on one plan item (`plan_decision`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanDecision {
    /// `allow` or `deny`.
    pub decision: Decision,
    /// Arguments to execute instead of the model's (allow only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrected_input: Option<Value>,
    /// How durably the decision applies; default `once`.
    #[serde(default)]
    pub scope: Scope,
    /// Why (reported as the item's reason); default "".
    #[serde(default)]
    pub reason: String,
}

impl PlanDecision {
    /// A `once` decision without corrections.
    pub fn once(decision: Decision) -> Self {
        PlanDecision { decision, corrected_input: None, scope: Scope::Once, reason: String::new() }
    }

    /// The same decision with `scope`.
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// The same decision with corrected arguments.
    pub fn with_corrected_input(mut self, input: Value) -> Self {
        self.corrected_input = Some(input);
        self
    }
}

/// The gate: the policy evaluated for every item, and the optional writable
/// policy store `always` decisions persist to (and whose rules every later
/// plan reads).
#[derive(Clone, Copy)]
pub struct Gate<'a> {
    policy: &'a dyn ItemPolicy,
    store: Option<&'a dyn PolicyStore>,
    previews: Option<(&'a dyn PreviewProvider, Duration)>,
}

impl<'a> Gate<'a> {
    /// A gate evaluating `policy`, without a policy store.
    pub fn new(policy: &'a dyn ItemPolicy) -> Self {
        Gate { policy, store: None, previews: None }
    }

    /// The same gate requesting previews from `provider`, each bounded by `deadline`.
    pub fn with_previews(mut self, provider: &'a dyn PreviewProvider, deadline: Duration) -> Self {
        self.previews = Some((provider, deadline));
        self
    }

    /// The same gate with a policy store.
    pub fn with_store(mut self, store: &'a dyn PolicyStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Builds the plan of a turn: one item per call, snapshot fields taken
    /// from `catalog` now, policy evaluated per item. Starts a new turn of the
    /// session's breaker. No previews (see [`Gate::build_plan_with_previews`]).
    pub fn build_plan(
        &self,
        turn_id: &str,
        calls: &[Call],
        catalog: &dyn OperationCatalog,
        session: &mut GateSession,
        now: DateTime<Utc>,
    ) -> Plan {
        session.expire(now);
        session.breaker.begin_turn();
        let persisted = match self.store {
            Some(s) => s.rules(),
            None => Ok(Vec::new()),
        };
        let mut plan = Plan { turn_id: turn_id.to_string(), items: Vec::with_capacity(calls.len()), breaker: None };
        for (n, call) in calls.iter().enumerate() {
            let spec = catalog.lookup(&call.provider, &call.operation_name);
            let mut item = PlanItem::from_call(format!("{turn_id}.{n}"), call, spec.as_ref());
            if let Some(trip) = &session.breaker.tripped {
                // The turn has ended: the rest of its calls are not evaluated.
                set(&mut item, Decision::Deny, "circuit_breaker", trip.message.clone());
            } else if spec.is_none() {
                set(
                    &mut item,
                    Decision::Deny,
                    "gate",
                    format!("unknown operation `{}` of provider `{}`", call.operation_name, call.provider),
                );
            } else {
                self.evaluate(&mut item, session, &persisted, now);
            }
            account(&mut plan, &mut item, session, now);
            plan.items.push(item);
        }
        plan
    }

    /// [`Gate::build_plan`], then (with [`Gate::with_previews`]) a preview
    /// for every resource item, each bounded by the deadline: a slow or
    /// failing preview leaves it absent and never aborts the plan.
    pub async fn build_plan_with_previews(
        &self,
        turn_id: &str,
        calls: &[Call],
        catalog: &dyn OperationCatalog,
        session: &mut GateSession,
        now: DateTime<Utc>,
    ) -> Plan {
        let mut plan = self.build_plan(turn_id, calls, catalog, session, now);
        if let Some((provider, deadline)) = self.previews {
            attach_previews(&mut plan, provider, deadline).await;
        }
        plan
    }

    /// The per-item decision: the policy, then persisted (`always`) rules and
    /// the session's rule as overlays (a deny anywhere wins; an allow only
    /// answers an ask), then the read precheck's ask→deny downgrade.
    fn evaluate(
        &self,
        item: &mut PlanItem,
        session: &GateSession,
        persisted: &Result<Vec<GateRule>>,
        now: DateTime<Utc>,
    ) {
        let mut base = self.policy.decide(item);
        if base.decision == Decision::Pending {
            base.decision = Decision::Ask;
        }
        let always: Option<PolicyDecision> = match persisted {
            Ok(rules) => strictest(rules, item).map(|r| {
                let reason =
                    if r.reason.is_empty() { format!("persisted rule `{}`", r.name) } else { r.reason.clone() };
                PolicyDecision::new(r.decision, r.name.clone(), reason)
            }),
            Err(e) => Some(PolicyDecision::new(Decision::Ask, "policy_store", format!("policy store unreadable: {e}"))),
        };
        let session_rule = session.rule(&item.provider, &item.operation_name, now).cloned();
        let session_dec = session_rule.as_ref().map(|r| {
            PolicyDecision::new(r.decision, "session", format!("session decision from item `{}`", r.source_item))
        });
        let overlays = [session_dec.as_ref(), always.as_ref()];
        let chosen = if let Some(deny) = [Some(&base), always.as_ref(), session_dec.as_ref()]
            .into_iter()
            .flatten()
            .find(|d| d.decision == Decision::Deny)
        {
            deny.clone()
        } else if let Some(ask) = overlays.into_iter().flatten().find(|d| d.decision != Decision::Allow) {
            // A stored ask rule is stricter than any allow.
            PolicyDecision { decision: Decision::Ask, ..ask.clone() }
        } else if base.decision == Decision::Ask
            && let Some(allow) = overlays.into_iter().flatten().find(|d| d.decision == Decision::Allow)
        {
            // An allow scope answers an ask of the policy, never a deny.
            allow.clone()
        } else {
            base
        };
        set(item, chosen.decision, chosen.decided_by, chosen.reason);
        // A session allow with corrections re-validates them against this call.
        if item.decision == Decision::Allow
            && let Some(rule) = session_rule.filter(|r| r.decision == Decision::Allow && !r.corrections.is_empty())
        {
            let fitted = apply_corrections(&item.input, &rule.corrections).and_then(|v| match &item.parameters {
                Some(schema) => validate_input(schema, &v).map(|_| v),
                None => Ok(v),
            });
            match fitted {
                Ok(v) => item.corrected_input = Some(v),
                Err(why) => set(
                    item,
                    Decision::Ask,
                    "session",
                    format!("the session's corrected input does not fit call `{}`: {why}", item.call_id),
                ),
            }
        }
        if item.kind != ToolKind::Resource && matches!(item.decision, Decision::Ask | Decision::Pending) {
            item.decision = Decision::Deny;
            item.downgraded_from_ask = true;
            item.reason =
                format!("ask downgraded to deny: {} calls have no approval step ({})", item.kind.as_str(), item.reason);
        }
    }

    /// Applies a client decision to the item `item_id` of `plan`. Only an
    /// item awaiting a decision (`ask` or `pending`) can be decided. Scope
    /// `session` remembers the verdict for the session; scope `always`
    /// persists it as a policy rule, and without a writable store is refused
    /// with `always_scope_unavailable` (the item stays undecided).
    pub fn decide(
        &self,
        plan: &mut Plan,
        item_id: &str,
        decision: &PlanDecision,
        session: &mut GateSession,
        now: DateTime<Utc>,
    ) -> Result<PlanItem> {
        let Some(idx) = plan.items.iter().position(|i| i.id == item_id) else {
            return Err(Error::not_found("plan_item_not_found", format!("no plan item `{item_id}`")));
        };
        let item = &plan.items[idx];
        if !matches!(item.decision, Decision::Ask | Decision::Pending) {
            return Err(Error::runtime(
                "plan_item_not_awaiting_decision",
                format!("plan item `{item_id}` is already decided ({})", item.decision.as_str()),
            ));
        }
        if !matches!(decision.decision, Decision::Allow | Decision::Deny) {
            return Err(Error::invalid_argument(
                "decision",
                format!("must be `allow` or `deny`, not `{}`", decision.decision.as_str()),
            ));
        }
        if let Some(corrected) = &decision.corrected_input {
            if decision.decision != Decision::Allow {
                return Err(Error::invalid_argument(
                    "corrected_input",
                    "only an `allow` decision can correct the input",
                ));
            }
            if let Some(schema) = &item.parameters {
                validate_input(schema, corrected).map_err(|why| {
                    Error::invalid_argument(
                        "corrected_input",
                        format!("does not validate against the parameters of `{}`: {why}", item.operation_name),
                    )
                })?;
            }
        }
        if decision.scope == Scope::Always {
            let store = match self.store {
                Some(s) if s.writable() => s,
                Some(_) => return Err(always_refused("the configured policy store is read-only")),
                None => return Err(always_refused("no policy store is configured")),
            };
            store.persist(GateRule {
                name: format!("always:{}/{}", item.provider, item.operation_name),
                provider: Some(item.provider.clone()),
                operation_name: Some(item.operation_name.clone()),
                kind: None,
                risk: None,
                decision: decision.decision,
                reason: format!("{} always, decided on plan item `{}`", decision.decision.as_str(), item.id),
            })?;
        }
        if decision.scope == Scope::Session {
            let corrections =
                decision.corrected_input.as_ref().map(|c| corrections_between(&item.input, c)).unwrap_or_default();
            session.remember(SessionRule {
                provider: item.provider.clone(),
                operation_name: item.operation_name.clone(),
                decision: decision.decision,
                corrections,
                source_item: item.id.clone(),
                decided_at: now,
            });
        }
        let mut item = plan.items[idx].clone();
        let reason = if decision.reason.is_empty() {
            format!("client decided {} (scope {})", decision.decision.as_str(), scope_str(decision.scope))
        } else {
            decision.reason.clone()
        };
        set(&mut item, decision.decision, "client", reason);
        item.corrected_input = decision.corrected_input.clone();
        account(plan, &mut item, session, now);
        plan.items[idx] = item.clone();
        Ok(item)
    }
}

fn scope_str(s: Scope) -> &'static str {
    match s {
        Scope::Once => "once",
        Scope::Session => "session",
        Scope::Always => "always",
    }
}

fn set(item: &mut PlanItem, decision: Decision, by: impl Into<String>, reason: impl Into<String>) {
    item.decision = decision;
    item.decided_by = by.into();
    item.reason = reason.into();
}

/// Feeds a final decision to the breaker. While the breaker is open, an item
/// is denied by it (and not counted again).
fn account(plan: &mut Plan, item: &mut PlanItem, session: &mut GateSession, now: DateTime<Utc>) {
    if let Some(trip) = session.breaker.tripped.clone() {
        if item.decision != Decision::Deny {
            item.corrected_input = None;
            set(item, Decision::Deny, "circuit_breaker", trip.message.clone());
        }
        plan.breaker.get_or_insert(trip);
        return;
    }
    match item.decision {
        Decision::Deny => {
            if let Some(trip) = session.breaker.record_denial(now) {
                plan.breaker = Some(trip);
            }
        }
        Decision::Allow => session.breaker.record_allow(),
        Decision::Ask | Decision::Pending => {}
    }
}

/// The synthesized tool result of a denied item, so the model sees the denial
/// in its own history; `None` for any other item.
pub fn denial_result(item: &PlanItem) -> Option<Value> {
    if item.decision != Decision::Deny {
        return None;
    }
    let reason = if item.reason.is_empty() { "denied by policy" } else { item.reason.as_str() };
    Some(json!({
        "type": "tool_result",
        "tool_use_id": item.call_id,
        "is_error": true,
        "content": format!("tool call `{}` was denied: {reason}", item.operation_name),
        "denied": true,
        "decided_by": item.decided_by,
        "reason": reason,
        "downgraded_from_ask": item.downgraded_from_ask,
    }))
}
