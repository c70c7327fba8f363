//! The built-in tools (`crate::tools`) seen by the gate: their operation
//! specs (risk `read` tools are data sources, the others resources) and a
//! preview provider rendering the unified diff a `write_file` or `edit_file`
//! call would make, computed without writing.

use serde_json::Value;

use super::plan::{Call, OperationSpec, RiskClass, ToolKind};
use super::preview::{PreviewProvider, RenderTree};
use crate::tools::{Root, builtin_tools};
use crate::{Error, Result};

/// The operation specs of every built-in tool, served by `provider`.
pub fn builtin_operations(provider: &str) -> Vec<OperationSpec> {
    builtin_tools()
        .into_iter()
        .map(|t| {
            let risk = match t.risk {
                "read" => RiskClass::Read,
                "write" => RiskClass::Write,
                "network" => RiskClass::Network,
                "execute" => RiskClass::Execute,
                "destructive" => RiskClass::Destructive,
                _ => RiskClass::Undeclared,
            };
            OperationSpec {
                provider: provider.to_string(),
                operation_name: t.schema.name.clone(),
                kind: if risk == RiskClass::Read { ToolKind::DataSource } else { ToolKind::Resource },
                risk,
                description: t.schema.description.clone(),
                parameters: Some(t.schema.parameters.clone()),
            }
        })
        .collect()
}

/// Previews of the built-in file tools under a root.
#[derive(Debug, Clone)]
pub struct BuiltinPreviews {
    root: Root,
}

impl BuiltinPreviews {
    /// Previews of calls confined to `root`.
    pub fn new(root: Root) -> Self {
        BuiltinPreviews { root }
    }
}

#[async_trait::async_trait]
impl PreviewProvider for BuiltinPreviews {
    /// A [`RenderTree::Diff`] for `write_file` and `edit_file`; nothing for
    /// other tools; an error when the call itself would fail. The file work
    /// runs on the blocking pool, so the gate's deadline bounds it.
    async fn preview(&self, call: &Call) -> Result<Option<RenderTree>> {
        let Value::Object(params) = &call.input else { return Ok(None) };
        let (root, name, params) = (self.root.clone(), call.operation_name.clone(), params.clone());
        let path = params.get("path").and_then(Value::as_str).unwrap_or_default().to_string();
        let out =
            tokio::task::spawn_blocking(move || crate::tools::preview(&root, &name, &params)).await.map_err(|e| {
                Error::runtime("preview_failed", format!("preview of `{}` did not finish: {e}", call.operation_name))
            })?;
        match out {
            Ok(Some(unified)) => Ok(Some(RenderTree::Diff { path, unified })),
            Ok(None) => Ok(None),
            Err(f) => {
                Err(Error::runtime("preview_failed", format!("preview of `{}`: {}", call.operation_name, f.message)))
            }
        }
    }
}
