//! ToolSchema: what the runtime knows about a registered tool.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Stable origin category of a tool, assigned by the runtime.
///
/// `#[non_exhaustive]`: categories may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`ToolRateLimit::new`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolRateLimit {
    /// Calls permitted within the interval.
    pub max_calls: u32,
    /// Window length in seconds.
    pub interval_secs: f64,
}

impl ToolRateLimit {
    /// At most `max_calls` calls per `interval_secs` seconds.
    pub fn new(max_calls: u32, interval_secs: f64) -> Self {
        ToolRateLimit { max_calls, interval_secs }
    }
}

/// A registered tool.
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`ToolSchema::named`] and the `with_*` setters.
///
/// ```
/// use car_runtime::ir::{ToolRateLimit, ToolSchema};
///
/// let s = ToolSchema::named("search")
///     .with_description("Full-text search")
///     .with_parameters(serde_json::json!({"type": "object", "required": ["q"]}))
///     .with_idempotent(true)
///     .with_cache_ttl_secs(60)
///     .with_rate_limit(ToolRateLimit::new(10, 1.0));
/// assert_eq!(serde_json::to_value(&s).unwrap()["rate_limit"], serde_json::json!({"max_calls": 10, "interval_secs": 1.0}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
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

    /// The same schema with this origin category.
    #[must_use]
    pub fn with_source(mut self, source: ToolSource) -> Self {
        self.source = source;
        self
    }

    /// The same schema with this human-readable `description`.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// The same schema with this JSON Schema of the parameters.
    #[must_use]
    pub fn with_parameters(mut self, parameters: Value) -> Self {
        self.parameters = parameters;
        self
    }

    /// The same schema with this JSON Schema of the return value.
    #[must_use]
    pub fn with_returns(mut self, returns: Value) -> Self {
        self.returns = Some(returns);
        self
    }

    /// The same schema with `idempotent` set to `idempotent`.
    #[must_use]
    pub fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// The same schema, caching results for `secs` seconds.
    #[must_use]
    pub fn with_cache_ttl_secs(mut self, secs: u64) -> Self {
        self.cache_ttl_secs = Some(secs);
        self
    }

    /// The same schema with this call-rate bound.
    #[must_use]
    pub fn with_rate_limit(mut self, rate_limit: ToolRateLimit) -> Self {
        self.rate_limit = Some(rate_limit);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_builders_build_what_the_struct_literals_build() {
        assert_eq!(ToolRateLimit::new(5, 2.5), ToolRateLimit { max_calls: 5, interval_secs: 2.5 });
        let built = ToolSchema::named("search")
            .with_source(ToolSource::Mcp)
            .with_description("d")
            .with_parameters(json!({"type": "object"}))
            .with_returns(json!({"type": "string"}))
            .with_idempotent(true)
            .with_cache_ttl_secs(60)
            .with_rate_limit(ToolRateLimit::new(5, 2.5));
        let literal = ToolSchema {
            name: "search".into(),
            source: ToolSource::Mcp,
            description: "d".into(),
            parameters: json!({"type": "object"}),
            returns: Some(json!({"type": "string"})),
            idempotent: true,
            cache_ttl_secs: Some(60),
            rate_limit: Some(ToolRateLimit { max_calls: 5, interval_secs: 2.5 }),
        };
        assert_eq!(built, literal);
        assert_eq!(serde_json::to_value(&built).unwrap(), serde_json::to_value(&literal).unwrap());
        // `named` alone is every default, as the wire form with only a name parses.
        assert_eq!(ToolSchema::named("x"), serde_json::from_value::<ToolSchema>(json!({"name": "x"})).unwrap());
    }
}
