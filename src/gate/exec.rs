//! Executing a decided plan: denied items yield their synthesized denial
//! result and never run; data-source items run concurrently; interactive
//! items run one at a time (asking a human two things at once confuses);
//! allowed resource items run one at a time in plan order; items still
//! awaiting a decision do not run.

use std::future::Future;

use serde::Serialize;
use serde_json::Value;

use super::decide::denial_result;
use super::plan::{Decision, Plan, PlanItem, ToolKind};

/// What happened to one plan item.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ItemOutcome {
    /// The item ran; its result.
    Executed {
        /// The item.
        item_id: String,
        /// What the executor returned.
        result: Value,
    },
    /// The item was denied; the synthesized tool result.
    Denied {
        /// The item.
        item_id: String,
        /// The `tool_result` block carrying the denial reason.
        result: Value,
    },
    /// The item waits for a client decision; it did not run.
    AwaitingDecision {
        /// The item.
        item_id: String,
    },
}

/// Runs the allowed items of `plan` with `exec` (which receives each item;
/// it should execute [`PlanItem::effective_input`]). Returns one outcome per
/// item, in plan order. When the breaker ended the turn, nothing runs that
/// was not allowed before the trip (such items were already denied).
pub async fn execute_plan<F, Fut>(plan: &Plan, exec: F) -> Vec<ItemOutcome>
where
    F: Fn(PlanItem) -> Fut,
    Fut: Future<Output = Value>,
{
    let mut out: Vec<Option<ItemOutcome>> = vec![None; plan.items.len()];
    for (n, item) in plan.items.iter().enumerate() {
        match item.decision {
            Decision::Deny => {
                let result = denial_result(item).unwrap_or(Value::Null);
                out[n] = Some(ItemOutcome::Denied { item_id: item.id.clone(), result });
            }
            Decision::Ask | Decision::Pending => {
                out[n] = Some(ItemOutcome::AwaitingDecision { item_id: item.id.clone() })
            }
            Decision::Allow => {}
        }
    }
    let allowed = |kind: ToolKind| plan.items.iter().enumerate().filter(move |(_, i)| i.is_allowed() && i.kind == kind);
    let reads = allowed(ToolKind::DataSource).map(|(n, i)| {
        let fut = exec(i.clone());
        async move { (n, fut.await) }
    });
    for (n, result) in futures::future::join_all(reads).await {
        out[n] = Some(ItemOutcome::Executed { item_id: plan.items[n].id.clone(), result });
    }
    for kind in [ToolKind::Interactive, ToolKind::Resource] {
        for (n, i) in allowed(kind) {
            let result = exec(i.clone()).await;
            out[n] = Some(ItemOutcome::Executed { item_id: i.id.clone(), result });
        }
    }
    out.into_iter().flatten().collect()
}
