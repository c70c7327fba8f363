//! The Agent IR: the wire types models propose and the runtime returns.
//!
//! Field names, enum spellings and defaults follow `agent-ir-spec.md`
//! exactly; unknown fields are ignored everywhere (and reported: `verify`
//! warns of each, strict mode refuses them; see [`parse_proposal_reporting`]).

mod fast;
mod object;
mod parse;
mod precondition;
mod proposal;
mod result;
mod reversibility;
mod stream;
pub mod strict;
mod tool;
mod unknown;
mod verification;
pub(crate) mod write;

pub use object::Object;
pub(crate) use parse::parse_proposal_transient;
pub use parse::{from_json_str, from_value, parse_proposal, parse_proposal_value, to_json_path_error};
pub use precondition::{Operator, Precondition, json_eq};
pub use proposal::{Action, ActionProposal, ActionType, FailureBehavior, StateAssumption, short_id};
pub(crate) use result::push_decimal;
pub use result::{
    ActionResult, ActionStatus, CostBudget, CostSummary, CostTarget, ProposalResult, StateChanges, StateMutation,
    ToolFailure, ToolFailureClassification,
};
pub use reversibility::{Compensation, Reversibility};
pub use stream::{
    ToolControl, ToolHandle, ToolInvocationMode, ToolPollResult, ToolStatus, ToolStreamChunk, ToolStreamEvent,
};
pub use tool::{ToolRateLimit, ToolSchema, ToolSource};
pub(crate) use unknown::parse_proposal_reporting_transient;
pub use unknown::{UnknownField, parse_proposal_reporting, parse_proposal_value_reporting, refuse_unknown};
pub use verification::{Evidence, EvidenceCheck, EvidenceTier, Severity, VerificationIssue, VerificationResult};
pub(crate) use write::{StrList, map_to_json, proposal_to_json, str_contents, verification_to_json};
