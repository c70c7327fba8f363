//! The plan/apply gate (`plan-apply-gate.md`) and the approvals store
//! (`tools-and-permissions.md`, "Ask approvals surface to the host").
//!
//! - [`Gate::build_plan`] turns a batch of calls into a [`Plan`], one
//!   [`PlanItem`] per call, snapshotting kind, risk, description (and, with
//!   [`Gate::build_plan_with_previews`], the preview) at plan time and
//!   evaluating policy per item: resource items get allow/ask/deny;
//!   data-source and interactive items a precheck where ask is downgraded to
//!   deny with `downgraded_from_ask: true`.
//! - [`Gate::decide`] applies a client decision with scope `once`, `session`
//!   (remembered in [`GateSession`], corrections re-validated against each
//!   later call) or `always` (persisted to a writable [`PolicyStore`], else
//!   refused with `always_scope_unavailable`).
//! - The session's [`CircuitBreaker`] ends a turn after N consecutive
//!   denials or M denials within a window.
//! - [`denial_result`] is the synthesized tool result of a denied item;
//!   [`execute_plan`] runs a decided plan; [`plan_mode_tools`] filters tool
//!   specs for plan mode.
//! - [`ApprovalStore`] holds the durable pending approvals an `ask` verdict
//!   creates.
//! - [`SupervisionHub`] parks proposals matching an out-of-process
//!   supervisor's filter until it decides (or the decision timeout rejects).
//!
//! Everything but previews, [`execute_plan`] and [`ApprovalStore::wait`] is
//! synchronous and takes the clock as an argument.

pub mod breaker;
pub mod builtin;
pub mod decide;
pub mod exec;
pub mod plan;
pub mod plan_mode;
pub mod policy;
pub mod preview;
pub mod session;
pub mod supervision;

// The approvals store, re-exported where the gate has always named it.
pub use crate::approval::store::{
    APPROVALS_FILE, ApprovalCallback, ApprovalDecision, ApprovalEvent, ApprovalStore, DEFAULT_APPROVAL_TIMEOUT_MS,
    PendingApproval, Resolution, ResolveOutcome, ResolvedBy, Ticket, approval_key, input_digest,
};
pub use breaker::{BREAKER_STATUS, BreakerConfig, CircuitBreaker};
pub use builtin::{BuiltinPreviews, builtin_operations};
pub use decide::{Gate, PlanDecision, denial_result};
pub use exec::{ItemOutcome, execute_plan};
pub use plan::{
    BreakerTrip, Call, Decision, OperationCatalog, OperationIndex, OperationSpec, Plan, PlanItem, ProducerCategory,
    RiskClass, ToolKind,
};
pub use plan_mode::{plan_mode_filter_json, plan_mode_tools};
pub use policy::{FilePolicyStore, GateRule, ItemPolicy, PolicyDecision, PolicyStore, RuleTable};
pub use preview::{
    DEFAULT_PREVIEW_DEADLINE, PreviewProvider, PreviewRouter, RenderField, RenderTree, attach_previews,
    file_write_preview, unified_diff,
};
pub use session::{FieldCorrection, GateSession, Scope, SessionRule};
pub use supervision::{
    DEFAULT_DECISION_TIMEOUT, Intent, IntentAction, IntentOutcome, SupervisionFilter, SupervisionHub,
    SupervisorDecision, SupervisorVerdict,
};
