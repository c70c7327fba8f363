//! The rollback contract of an action: `Reversibility` and `Compensation`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Can this action's effect be undone? Default `irreversible`, deliberately.
///
/// `#[non_exhaustive]`: contracts may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reversibility {
    /// Undone by restoring the scope the action ran in.
    Reversible,
    /// Undone only by running a compensating action.
    Compensable,
    /// Cannot be undone once it reaches the world.
    #[default]
    Irreversible,
}

impl Reversibility {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Reversibility::Reversible => "reversible",
            Reversibility::Compensable => "compensable",
            Reversibility::Irreversible => "irreversible",
        }
    }

    /// Parses a wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "reversible" => Some(Reversibility::Reversible),
            "compensable" => Some(Reversibility::Compensable),
            "irreversible" => Some(Reversibility::Irreversible),
            _ => None,
        }
    }

    /// How hard to recover from: reversible 0 < compensable 1 < irreversible 2.
    pub fn severity(self) -> u8 {
        match self {
            Reversibility::Reversible => 0,
            Reversibility::Compensable => 1,
            Reversibility::Irreversible => 2,
        }
    }

    /// The worse (less recoverable) of two.
    pub fn worst(self, other: Self) -> Self {
        if other.severity() > self.severity() { other } else { self }
    }
}

/// How to undo an action once it has run. Tagged by `type`.
///
/// `#[non_exhaustive]`: kinds of compensation may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Compensation {
    /// Invoke a tool that reverses the effect.
    Tool {
        /// Tool name.
        tool: String,
        /// Parameters; default `{}`.
        #[serde(default, deserialize_with = "super::strict::strict_map")]
        parameters: Map<String, Value>,
    },
    /// Run another action of the same proposal.
    ActionRef {
        /// The `id` of that action.
        action_id: String,
    },
}
