//! Parsing, normalising and serialising proposals.

use serde_json::Value;

use crate::Result;
use crate::ir::ActionProposal;

/// Parses a proposal (JSON text), filling every default.
pub fn parse_proposal(proposal_json: &str) -> Result<ActionProposal> {
    crate::ir::parse_proposal(proposal_json)
}

/// Serialises a proposal to JSON text.
pub fn proposal_to_json(p: &ActionProposal) -> String {
    // Serialising plain data with string keys cannot fail.
    serde_json::to_string(p).unwrap_or_default()
}

/// Parses a proposal and returns it with every default filled in.
pub fn normalize_proposal(proposal_json: &str) -> Result<String> {
    Ok(proposal_to_json(&parse_proposal(proposal_json)?))
}

pub(crate) fn call(method: &str, params: &Value) -> Option<Result<Value>> {
    match method {
        "proposal.normalize" => Some((|| {
            let p = crate::ir::parse_proposal_value(super::json_arg(super::required(params, "proposal")?)?)?;
            Ok(serde_json::to_value(p).unwrap_or(Value::Null))
        })()),
        _ => None,
    }
}
