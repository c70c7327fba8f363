//! Plan mode: a session or turn restricted to data-source calls. Resource
//! (and interactive) tools are removed from the tool list offered to the
//! model, so it cannot attempt them at all.

use serde_json::Value;

use super::plan::{OperationSpec, ToolKind};

/// The specs offered to the model in plan mode: data-source operations only.
pub fn plan_mode_tools(specs: &[OperationSpec]) -> Vec<OperationSpec> {
    specs.iter().filter(|s| s.kind == ToolKind::DataSource).cloned().collect()
}

/// [`plan_mode_tools`] over JSON tool specs: keeps those whose `kind` is
/// `"data_source"`. A spec without a `kind` counts as a resource (fail
/// closed) and is removed.
pub fn plan_mode_filter_json(specs: &[Value]) -> Vec<Value> {
    specs.iter().filter(|s| s.get("kind").and_then(Value::as_str) == Some("data_source")).cloned().collect()
}
