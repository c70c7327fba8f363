//! ToolSchema: what the runtime knows about a registered tool.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Stable origin category of a tool, assigned by the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolSource {
    /// Shipped with the runtime.
    Builtin,
    /// Registered by the host (default).
    #[default]
    UserDefined,
    /// Served by a subprocess.
    Subprocess,
    /// Served by an MCP server.
    Mcp,
}

/// `{max_calls, interval_secs}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRateLimit {
    /// Calls permitted within the interval.
    pub max_calls: u32,
    /// Window length in seconds.
    pub interval_secs: f64,
}

/// A registered tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Unique within a runtime.
    pub name: String,
    /// Origin category; default `user_defined`.
    #[serde(default)]
    pub source: ToolSource,
    /// Human-readable; default "".
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the parameters; default `{}`.
    #[serde(default = "empty_object")]
    pub parameters: Value,
    /// JSON Schema of the return value, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Value>,
    /// Enables cache + retry safety.
    #[serde(default)]
    pub idempotent: bool,
    /// Results are cached this long when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_ttl_secs: Option<u64>,
    /// Call-rate bound, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<ToolRateLimit>,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

impl ToolSchema {
    /// A schema with only a name: no parameter schema, every default.
    pub fn named(name: impl Into<String>) -> Self {
        ToolSchema {
            name: name.into(),
            source: ToolSource::UserDefined,
            description: String::new(),
            parameters: empty_object(),
            returns: None,
            idempotent: false,
            cache_ttl_secs: None,
            rate_limit: None,
        }
    }
}
