//! Presets: `strict`, `standard`, `open`, compiled into ordinary deny and ask
//! rules (never a fifth layer, never an allow).

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::chain::{OneOrMany, RiskClass, RuleSpec};

/// A named preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// Ask on write, network, execute and undeclared; deny destructive.
    Strict,
    /// Ask on network, execute, destructive and undeclared.
    Standard,
    /// No rules: exactly the chain without a preset.
    Open,
}

impl Preset {
    /// Parses a preset name; an unknown one is an `unknown_preset` error.
    pub fn parse(name: &str) -> crate::Result<Self> {
        match name {
            "strict" => Ok(Preset::Strict),
            "standard" => Ok(Preset::Standard),
            "open" => Ok(Preset::Open),
            other => Err(crate::Error::config(
                "unknown_preset",
                format!("unknown permission preset `{other}`; expected `strict`, `standard` or `open`"),
                json!({"preset": other}),
            )),
        }
    }

    /// The preset's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Strict => "strict",
            Preset::Standard => "standard",
            Preset::Open => "open",
        }
    }

    /// The rules this preset compiles into.
    pub fn compile(self) -> CompiledPreset {
        use RiskClass::*;
        let rule = |risks: Vec<RiskClass>| RuleSpec { risk: Some(OneOrMany::Many(risks)), ..RuleSpec::default() };
        match self {
            Preset::Strict => CompiledPreset {
                deny: vec![rule(vec![Destructive])],
                ask: vec![rule(vec![Write, Network, Execute, Undeclared])],
            },
            Preset::Standard => {
                CompiledPreset { deny: vec![], ask: vec![rule(vec![Network, Execute, Destructive, Undeclared])] }
            }
            Preset::Open => CompiledPreset { deny: vec![], ask: vec![] },
        }
    }
}

/// The deny and ask rules of a preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompiledPreset {
    /// Appended after the user's deny rules.
    pub deny: Vec<RuleSpec>,
    /// Appended after the user's ask rules.
    pub ask: Vec<RuleSpec>,
}

/// `compile_permission_preset(name)`: the preset's rules, or `unknown_preset`.
pub fn compile_permission_preset(name: &str) -> crate::Result<CompiledPreset> {
    Ok(Preset::parse(name)?.compile())
}
