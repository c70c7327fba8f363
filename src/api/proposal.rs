//! Parsing, normalising and serialising proposals and the other IR documents.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ir::{self, ActionProposal};
use crate::{Error, Result};

/// Parses a proposal (JSON text), filling every default.
pub fn parse_proposal(proposal_json: &str) -> Result<ActionProposal> {
    ir::parse_proposal(proposal_json)
}

/// Serialises a proposal to JSON text: the bytes of
/// `serde_json::to_string(p)`, written directly (field names as literals,
/// strings without escapes copied whole), several times faster.
pub fn proposal_to_json(p: &ActionProposal) -> String {
    crate::ir::proposal_to_json(p)
}

/// Parses a proposal and returns it with every default filled in.
pub fn normalize_proposal(proposal_json: &str) -> Result<String> {
    Ok(proposal_to_json(&parse_proposal(proposal_json)?))
}

/// Parses any IR document named by `type_name` (`Action`, `ToolSchema`,
/// `ActionResult`, ...) and returns it with every default filled in.
pub fn normalize_document(type_name: &str, value: Value) -> Result<Value> {
    fn norm<T: DeserializeOwned + Serialize>(v: Value) -> Result<Value> {
        let t: T = ir::from_value(v)?;
        Ok(to_value(&t))
    }
    match type_name {
        "ActionProposal" => Ok(to_value(&ir::parse_proposal_value(value)?)),
        "Action" => {
            let a: ir::Action = ir::from_value(value)?;
            if a.action_type == ir::ActionType::ToolCall && a.tool.is_none() {
                return Err(crate::error::InputError::MissingField { path: "tool".into(), field: "tool".into() }.into());
            }
            Ok(to_value(&a))
        }
        "Precondition" => norm::<ir::Precondition>(value),
        "StateAssumption" => norm::<ir::StateAssumption>(value),
        "Compensation" => norm::<ir::Compensation>(value),
        "ToolSchema" => norm::<ir::ToolSchema>(value),
        "ActionResult" => norm::<ir::ActionResult>(value),
        "StateMutation" => norm::<ir::StateMutation>(value),
        "ProposalResult" => norm::<ir::ProposalResult>(value),
        "CostSummary" => norm::<ir::CostSummary>(value),
        "CostTarget" => norm::<ir::CostTarget>(value),
        "CostBudget" => norm::<ir::CostBudget>(value),
        "VerificationResult" => norm::<ir::VerificationResult>(value),
        "ToolFailure" => norm::<ir::ToolFailure>(value),
        "ToolHandle" => norm::<ir::ToolHandle>(value),
        "ToolStreamChunk" => norm::<ir::ToolStreamChunk>(value),
        "ToolStreamEvent" => norm::<ir::ToolStreamEvent>(value),
        "ToolPollResult" => norm::<ir::ToolPollResult>(value),
        "ToolControl" => norm::<ir::ToolControl>(value),
        "ToolStatus" => norm::<ir::ToolStatus>(value),
        "ToolInvocationMode" => norm::<ir::ToolInvocationMode>(value),
        "Reversibility" => norm::<ir::Reversibility>(value),
        "ActionType" => norm::<ir::ActionType>(value),
        "ActionStatus" => norm::<ir::ActionStatus>(value),
        "FailureBehavior" => norm::<ir::FailureBehavior>(value),
        "EvidenceTier" => norm::<ir::EvidenceTier>(value),
        "Severity" => norm::<ir::Severity>(value),
        other => Err(Error::invalid_argument("type", format!("unknown IR type `{other}`"))),
    }
}

/// Evaluates a precondition against a state object.
pub fn evaluate_precondition(precondition: Value, state: Value) -> Result<bool> {
    let p: ir::Precondition = ir::from_value(precondition)?;
    let Value::Object(state) = state else {
        return Err(Error::invalid_argument("state", "must be a JSON object"));
    };
    Ok(p.evaluate(&state))
}

fn to_value<T: Serialize>(t: &T) -> Value {
    // IR types are plain data with string keys: serialising cannot fail.
    serde_json::to_value(t).unwrap_or(Value::Null)
}

pub(crate) fn call(method: &str, params: &Value) -> Option<Result<Value>> {
    use super::{json_arg, required};
    let run = || -> Option<Result<Value>> {
        Some(match method {
            "normalize_proposal" => {
                required(params, "proposal").and_then(json_arg).and_then(ir::parse_proposal_value).map(|p| to_value(&p))
            }
            "normalize" => (|| {
                let ty = required(params, "type")?
                    .as_str()
                    .ok_or_else(|| Error::invalid_argument("type", "must be a string"))?;
                normalize_document(ty, required(params, "value")?.clone())
            })(),
            "evaluate_precondition" => (|| {
                let p = json_arg(required(params, "precondition")?)?;
                let state = params.get("state").map(json_arg).transpose()?.unwrap_or(Value::Object(Default::default()));
                evaluate_precondition(p, state).map(Value::Bool)
            })(),
            "client_version" => Ok(Value::String(crate::VERSION.to_string())),
            _ => return None,
        })
    };
    run()
}
