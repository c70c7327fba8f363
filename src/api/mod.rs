//! The JSON facade: one function per binding method, JSON text in, JSON text
//! out. Every binding and the daemon call these and nothing deeper.

pub mod permission;
pub mod policy;
mod proposal;
pub mod runtime;
pub mod verify;

pub use proposal::{normalize_proposal, parse_proposal, proposal_to_json};

/// Renders an error as the facade's `{code, family, message, details}` JSON text.
pub fn error_json(e: &crate::Error) -> String {
    e.to_json().to_string()
}

/// The package version (`clientVersion()` / `client_version()`).
pub fn client_version() -> String {
    crate::VERSION.to_string()
}
