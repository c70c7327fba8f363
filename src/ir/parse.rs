//! Parsing with JSON-path errors: `actions[3].failure_behavior: unknown variant ...`.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::proposal::{ActionProposal, ActionType};
use crate::error::{Error, InputError};

/// Renders a serde_path_to_error path: the root is `$`.
fn render_path(path: &serde_path_to_error::Path) -> String {
    let p = path.to_string();
    if p == "." || p.is_empty() { "$".to_string() } else { p }
}

/// serde_json appends " at line L column C"; the path already says where.
fn strip_location(e: &serde_json::Error) -> String {
    let s = e.to_string();
    if e.line() > 0
        && let Some(i) = s.rfind(" at line ")
    {
        return s[..i].to_string();
    }
    s
}

/// Converts a path-tracking serde_json error into our input error.
pub fn to_json_path_error(e: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let path = render_path(e.path());
    let inner = e.into_inner();
    match inner.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof | serde_json::error::Category::Io => {
            InputError::Json { message: strip_location(&inner), line: inner.line(), column: inner.column() }.into()
        }
        serde_json::error::Category::Data => InputError::Shape { path, message: strip_location(&inner) }.into(),
    }
}

/// Parses JSON text into `T`; errors name the JSON path.
///
/// Valid input takes serde_json's plain path; only input that fails is
/// parsed again with path tracking, which is several times slower (it
/// allocates every key it passes) and exists only to name where it failed.
pub fn from_json_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    if let Ok(v) = serde_json::from_str(text) {
        return Ok(v);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let v: T = serde_path_to_error::deserialize(&mut de).map_err(to_json_path_error)?;
    de.end().map_err(|e| InputError::Json { message: strip_location(&e), line: e.line(), column: e.column() })?;
    Ok(v)
}

/// Converts a JSON value into `T`; errors name the JSON path.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(value).map_err(to_json_path_error)
}

/// Checks what the type system cannot: `tool` is required on a `tool_call`.
fn validate(p: ActionProposal) -> Result<ActionProposal, Error> {
    for (i, a) in p.actions.iter().enumerate() {
        if a.action_type == ActionType::ToolCall && a.tool.is_none() {
            return Err(InputError::MissingField { path: format!("actions[{i}].tool"), field: "tool".into() }.into());
        }
    }
    Ok(p)
}

/// Parses a proposal from JSON text, filling every default.
pub fn parse_proposal(text: &str) -> Result<ActionProposal, Error> {
    validate(from_json_str(text)?)
}

/// Parses a proposal from a JSON value, filling every default.
pub fn parse_proposal_value(value: Value) -> Result<ActionProposal, Error> {
    validate(from_value(value)?)
}
