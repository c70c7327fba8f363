//! Tool contracts, the layered permission chain, presets and shell command
//! matching (`tools-and-permissions.md`, `shell-matching.md`).
//!
//! Everything here is pure: no I/O, no clock, no async.

pub mod shell;

use serde::{Deserialize, Serialize};

/// The three verdicts, ordered from least to most strict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The call is dispatched.
    Allow,
    /// The call waits for an approval.
    Ask,
    /// The call never executes.
    Deny,
}

impl Verdict {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}
