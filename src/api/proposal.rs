//! Parsing, normalising and serialising proposals.

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
