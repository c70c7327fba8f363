//! The registered built-in rules: `deny_tool`, `deny_tool_param`,
//! `require_state`, `deny_tool_callback`.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::PolicyFn;
use crate::ir::{Action, json_eq};

/// The string form of a parameter value: strings as they are, anything else
/// as its JSON text.
pub fn coerce_to_string(v: &Value) -> std::borrow::Cow<'_, str> {
    match v {
        Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
        other => std::borrow::Cow::Owned(other.to_string()),
    }
}

/// Deny any action whose `tool` is `target`.
pub fn deny_tool(target: impl Into<String>) -> PolicyFn {
    let target = target.into();
    Arc::new(move |a: &Action, _: &Map<String, Value>| {
        (a.tool.as_deref() == Some(target.as_str())).then(|| format!("tool '{target}' is denied by policy"))
    })
}

/// Deny when `tool == target` and parameter `key`'s string form contains `pattern`.
pub fn deny_tool_param(target: impl Into<String>, key: impl Into<String>, pattern: impl Into<String>) -> PolicyFn {
    let (target, key, pattern) = (target.into(), key.into(), pattern.into());
    Arc::new(move |a: &Action, _: &Map<String, Value>| {
        if a.tool.as_deref() != Some(target.as_str()) {
            return None;
        }
        let v = a.parameters.get(&key)?;
        coerce_to_string(v)
            .contains(pattern.as_str())
            .then(|| format!("param '{key}' matches denied pattern '{pattern}'"))
    })
}

/// Deny every action unless `state[key] == value`.
pub fn require_state(key: impl Into<String>, value: Value) -> PolicyFn {
    let key = key.into();
    Arc::new(move |_: &Action, state: &Map<String, Value>| match state.get(&key) {
        Some(v) if json_eq(v, &value) => None,
        _ => Some(format!("state '{key}' must equal {value}")),
    })
}

/// A host callback deciding whether to deny an action (`Ok(true)` denies).
pub type DenyCallback = Arc<dyn Fn(&Action) -> Result<bool, String> + Send + Sync>;

/// Deny when `tool == target` and the host callback returns true for the
/// action. The callback receives the action; its failure denies (fail closed).
pub fn deny_tool_callback(target: impl Into<String>, callback: DenyCallback) -> PolicyFn {
    let target = target.into();
    Arc::new(move |a: &Action, _: &Map<String, Value>| {
        if a.tool.as_deref() != Some(target.as_str()) {
            return None;
        }
        match callback(a) {
            Ok(false) => None,
            Ok(true) => Some(format!("tool '{target}' denied by callback")),
            Err(e) => Some(format!("policy callback for '{target}' failed: {e}")),
        }
    })
}
