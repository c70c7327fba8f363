//! Approvals, in one place:
//!
//! - [`store`]: the approvals store. An `ask` verdict creates a pending
//!   approval keyed by the tool and the digest of its post-hook input; a host,
//!   a person or a timeout resolves it (first closing wins), and the
//!   admission stage's `approval` layer applies the resolution. Durable in
//!   `approvals.jsonl` ([`store::APPROVALS_FILE`]) under its directory.
//! - [`ledger`]: the tier approvals ledger. Reviewers' verdicts on an
//!   operation (by fingerprint) that the tier layer reads when an action needs
//!   more than the granted tier. Durable in `tier-approvals.jsonl`
//!   ([`ledger::TIER_LEDGER_FILE`]) under a daemon's `CAR_HOME`, optionally
//!   authenticated (HMAC) with a [`ledger::LedgerKey`].
//!
//! - [`rules`]: `always`-scoped decisions, persisted as rules next to the
//!   store's file ([`rules::ALWAYS_RULES_FILE`]) that every front end's
//!   `approval` layer reads.
//!
//! Both digest their inputs over the one canonical JSON form
//! ([`crate::canonical`]).

pub mod ledger;
pub mod rules;
pub mod store;
pub mod view;

pub use ledger::{
    ApprovalLedger, ApprovalRecord, ApprovalVerdict, JsonlLedger, LEDGER_KEY_ENV, LatestRecords, LedgerContents,
    LedgerKey, MemoryLedger, TIER_LEDGER_FILE, fingerprint,
};
pub use store::{
    APPROVALS_FILE, ApprovalCallback, ApprovalDecision, ApprovalEvent, ApprovalStore, DEFAULT_APPROVAL_TIMEOUT_MS,
    PendingApproval, Resolution, ResolveOutcome, ResolvedBy, Ticket, approval_key, input_digest,
};
