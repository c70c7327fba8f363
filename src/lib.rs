//! car-runtime: validate, verify, simulate, authorize and execute the batches
//! of actions AI models propose (the Agent IR).
//!
//! ```
//! let p = car_runtime::ir::parse_proposal(r#"{"actions":[{"type":"tool_call","tool":"x"}]}"#).unwrap();
//! assert_eq!(p.source, "unknown");
//! assert_eq!(p.actions[0].max_retries, 3);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod dag;
pub mod engine;
pub mod error;
pub mod events;
pub mod ir;
pub mod permission;
pub mod policy;
pub mod state;
pub mod verify;

pub use error::{Error, Result};
pub use ir::{Action, ActionProposal, ActionResult, ActionStatus, ActionType, ProposalResult};

/// The package version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
