//! The JSON facade: one function per binding method, JSON text in, JSON text
//! out. Every binding and the daemon call these and nothing deeper.
//!
//! Stateless methods are also reachable through [`call`], a dispatcher by
//! method name over JSON values, which the conformance corpus drives.

pub mod callback;
pub mod gate;
pub mod permission;
pub mod planning;
pub mod policy;
mod proposal;
pub mod runtime;
pub mod verify;

use serde_json::Value;

pub use proposal::{normalize_proposal, parse_proposal, proposal_to_json};

/// Renders an error as the facade's `{code, family, message, details}` JSON text.
pub fn error_json(e: &crate::Error) -> String {
    e.to_json().to_string()
}

/// The wire protocol version of the daemon (`protocolVersion()`).
pub const PROTOCOL_VERSION: u32 = 3;

/// The wire protocol version (`protocolVersion()` / `protocol_version()`).
pub fn protocol_version() -> u32 {
    PROTOCOL_VERSION
}

/// The package version (`clientVersion()` / `client_version()`).
pub fn client_version() -> String {
    crate::VERSION.to_string()
}

/// Calls a stateless facade method by name with named parameters.
///
/// Each area of the facade answers the methods it owns; an unknown name is an
/// `unknown_method` error.
pub fn call(method: &str, params: &Value) -> crate::Result<Value> {
    proposal::call(method, params)
        .or_else(|| verify::call(method, params))
        .or_else(|| planning::call(method, params))
        .or_else(|| policy::call(method, params))
        .or_else(|| permission::call(method, params))
        .or_else(|| gate::call(method, params))
        .unwrap_or_else(|| Err(crate::Error::not_found("unknown_method", format!("unknown method `{method}`"))))
}

/// The error a binding reports when a typed facade function failed: when one
/// of the binding's JSON text arguments (`(name, text)`, in argument order)
/// is not JSON at all, `invalid_argument` naming that argument (the binding's
/// own spelling, e.g. `proposal_json` or `proposalJson`); otherwise `e` as it
/// is. Only the error path reads the texts again.
pub fn name_bad_json(e: crate::Error, args: &[(&str, Option<&str>)]) -> crate::Error {
    for (name, text) in args {
        if let Some(text) = text
            && let Err(bad) = serde_json::from_str::<serde::de::IgnoredAny>(text)
        {
            return crate::Error::invalid_argument(*name, format!("is not valid JSON: {bad}"));
        }
    }
    e
}

/// Reads a required parameter of a [`call`].
pub(crate) fn required<'a>(params: &'a Value, name: &str) -> crate::Result<&'a Value> {
    params.get(name).filter(|v| !v.is_null()).ok_or_else(|| crate::Error::invalid_argument(name, "is required"))
}

/// Reads a parameter that is either JSON text or an already-parsed value.
pub(crate) fn json_arg(v: &Value) -> crate::Result<Value> {
    match v {
        Value::String(s) => crate::ir::from_json_str(s),
        other => Ok(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_bad_json_names_the_first_argument_that_is_not_json() {
        let e = crate::Error::invalid_argument("x", "whatever");
        let named = name_bad_json(e, &[("p1_json", Some("{}")), ("p2_json", Some("{nope")), ("s", Some("[1"))]);
        assert_eq!(named.code(), "invalid_argument");
        assert!(named.to_string().contains("`p2_json`"), "{named}");
        assert!(named.to_string().contains("is not valid JSON"), "{named}");
        // Every text is JSON (the error is about its content): kept as it is.
        let kept = name_bad_json(crate::Error::not_found("unknown_method", "m"), &[("a", Some("[1]")), ("b", None)]);
        assert_eq!(kept.code(), "unknown_method");
    }
}
