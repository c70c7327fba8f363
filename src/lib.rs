#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
pub mod api;
pub mod approval;
mod bytesort;
pub mod canonical;
pub mod checkpoint;
pub mod dag;
pub mod engine;
pub mod error;
pub mod events;
pub mod gate;
pub mod ir;
pub mod isolation;
pub mod mcp;
pub mod permission;
pub mod planning;
pub mod policy;
pub mod runs;
pub mod sandbox;
#[cfg(feature = "server")]
pub mod server;
pub mod state;
pub mod store;
pub mod terminal;
pub mod tools;
pub mod verify;

pub use error::{Error, Result};
pub use ir::{Action, ActionProposal, ActionResult, ActionStatus, ActionType, ProposalResult};

/// The package version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
