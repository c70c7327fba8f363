//! The tool registry: schemas by unique name, with their parameter and return
//! JSON Schemas compiled once at registration.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::Error;
use crate::ir::{ToolSchema, ToolSource};

/// A registered tool with its compiled schemas.
pub struct RegisteredTool {
    /// The schema as registered, with the runtime-assigned `source`.
    pub schema: ToolSchema,
    params: Option<jsonschema::Validator>,
    returns: Option<jsonschema::Validator>,
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool").field("schema", &self.schema).finish()
    }
}

/// A schema that accepts everything needs no validator.
fn trivially_true(schema: &Value) -> bool {
    matches!(schema, Value::Bool(true)) || schema.as_object().is_some_and(|m| m.is_empty())
}

fn compile(tool: &str, field: &str, schema: &Value) -> Result<Option<jsonschema::Validator>, Error> {
    if trivially_true(schema) {
        return Ok(None);
    }
    jsonschema::validator_for(schema).map(Some).map_err(|e| {
        Error::config(
            "invalid_tool_schema",
            format!("tool `{tool}`: `{field}` is not a valid JSON Schema: {e}"),
            json!({"tool": tool, "field": field}),
        )
    })
}

fn first_error(v: &jsonschema::Validator, instance: &Value) -> Option<String> {
    let e = v.iter_errors(instance).next()?;
    let path = e.instance_path().to_string();
    Some(if path.is_empty() { e.to_string() } else { format!("{e} (at {path})") })
}

impl RegisteredTool {
    /// Compiles the schema's `parameters` and `returns`.
    pub fn new(mut schema: ToolSchema, source: ToolSource) -> Result<Self, Error> {
        if schema.name.is_empty() {
            return Err(Error::invalid_argument("name", "a tool name must be non-empty"));
        }
        schema.source = source;
        let params = compile(&schema.name, "parameters", &schema.parameters)?;
        let returns = match &schema.returns {
            Some(r) => compile(&schema.name, "returns", r)?,
            None => None,
        };
        Ok(RegisteredTool { schema, params, returns })
    }

    /// The first parameter-validation error, when the parameters are invalid.
    pub fn check_params(&self, params: &Value) -> Option<String> {
        self.params.as_ref().and_then(|v| first_error(v, params))
    }

    /// The first return-validation error, when the output does not match `returns`.
    pub fn check_output(&self, output: &Value) -> Option<String> {
        self.returns.as_ref().and_then(|v| first_error(v, output))
    }

    /// True when parameters need validating at all.
    pub fn validates_params(&self) -> bool {
        self.params.is_some()
    }
}

/// Tools by name.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    tools: HashMap<String, Arc<RegisteredTool>>,
}

impl ToolRegistry {
    /// Registers (or replaces) a tool; names stay unique.
    pub fn register(&mut self, tool: RegisteredTool) {
        self.tools.insert(tool.schema.name.clone(), Arc::new(tool));
    }

    /// Removes a tool; returns how many were removed (0 or 1).
    pub fn unregister(&mut self, name: &str) -> usize {
        usize::from(self.tools.remove(name).is_some())
    }

    /// The tool of that name.
    pub fn get(&self, name: &str) -> Option<Arc<RegisteredTool>> {
        self.tools.get(name).cloned()
    }

    /// Every schema, sorted by name.
    pub fn list(&self) -> Vec<ToolSchema> {
        let mut v: Vec<ToolSchema> = self.tools.values().map(|t| t.schema.clone()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Names of every tool, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.tools.keys().cloned().collect();
        v.sort();
        v
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
