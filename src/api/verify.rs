//! The verify part of the JSON facade: `verify`, `simulate`, `optimize`,
//! `equivalent` and `transaction_check`, JSON text in and out.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::ir::{ActionProposal, ToolSchema};
use crate::verify::{self, VerifyOptions};
use crate::{Error, Result};

fn to_text<T: serde::Serialize>(v: &T) -> String {
    // Plain data with string keys: serialising cannot fail.
    serde_json::to_string(v).unwrap_or_default()
}

/// Parses an optional argument given as JSON text, naming it on error.
pub(crate) fn parse_arg<T: serde::de::DeserializeOwned>(name: &str, text: Option<&str>) -> Result<Option<T>> {
    text.map(|t| crate::ir::from_json_str::<T>(t).map_err(|e| Error::invalid_argument(name, e.to_string()))).transpose()
}

/// Converts an optional argument given as a JSON value, naming it on error.
pub(crate) fn value_arg<T: serde::de::DeserializeOwned>(params: &Value, name: &str) -> Result<Option<T>> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let v = super::json_arg(v).map_err(|e| Error::invalid_argument(name, e.to_string()))?;
            crate::ir::from_value::<T>(v).map(Some).map_err(|e| Error::invalid_argument(name, e.to_string()))
        }
    }
}

pub(crate) fn proposal_arg(params: &Value, name: &str) -> Result<ActionProposal> {
    crate::ir::parse_proposal_value(super::json_arg(super::required(params, name)?)?)
}

/// [`proposal_arg`] with the proposal's unknown fields, in one parse
/// (JSON text or a value alike).
fn proposal_arg_reporting(params: &Value, name: &str) -> Result<(ActionProposal, Vec<crate::ir::UnknownField>)> {
    match super::required(params, name)? {
        Value::String(text) => crate::ir::parse_proposal_reporting_transient(text),
        other => crate::ir::parse_proposal_value_reporting(other.clone()),
    }
}

fn options(
    initial_state: Option<Map<String, Value>>,
    tool_names: Option<Vec<String>>,
    max_actions: Option<u64>,
    tool_schemas: Option<Vec<ToolSchema>>,
) -> VerifyOptions {
    VerifyOptions { initial_state: initial_state.unwrap_or_default(), tool_names, max_actions, tool_schemas }
}

/// `verify(proposal, initial_state?, tool_names?, max_actions?, tool_schemas?)`
/// → the `VerificationResult` as JSON text. `tool_schemas_json` is an array
/// of `ToolSchema`.
pub fn verify(
    proposal_json: &str,
    initial_state_json: Option<&str>,
    tool_names: Option<Vec<String>>,
    max_actions: Option<u64>,
    tool_schemas_json: Option<&str>,
) -> Result<String> {
    let (p, unknown) = crate::ir::parse_proposal_reporting_transient(proposal_json)?;
    let state = parse_arg("initial_state", initial_state_json)?;
    let schemas = parse_arg("tool_schemas", tool_schemas_json)?;
    Ok(answer(&p, &options(state, tool_names, max_actions, schemas), &unknown))
}

/// `verify`'s answer as JSON text, with a warning for each unknown field:
/// what the pure `verify` and a runtime's `verify_proposal` return. The
/// untested regions (two lines an action of a wide proposal) are written
/// from their names and ids, no string made for each.
pub(crate) fn answer(p: &ActionProposal, opts: &VerifyOptions, unknown: &[crate::ir::UnknownField]) -> String {
    let (r, untested) = verify::verify_parts(p, opts);
    crate::ir::verification_to_json(&with_unknown(r, unknown), Some(&untested))
}

/// A verification result with a `warning` for each unknown field of the
/// proposal (after the checks' own issues; warnings leave `valid` as it is).
pub(crate) fn with_unknown(
    mut r: crate::ir::VerificationResult,
    unknown: &[crate::ir::UnknownField],
) -> crate::ir::VerificationResult {
    r.issues.extend(unknown.iter().map(crate::ir::UnknownField::issue));
    r
}

/// `simulate(proposal, initial_state?)` → the final state as JSON text.
pub fn simulate(proposal_json: &str, initial_state_json: Option<&str>) -> Result<String> {
    let p = crate::ir::parse_proposal_transient(proposal_json)?;
    let state: Map<String, Value> = parse_arg("initial_state", initial_state_json)?.unwrap_or_default();
    Ok(crate::ir::map_to_json(&verify::simulate(&p, &state)))
}

/// `optimize(proposal)` → the proposal with phantom `state_dependencies`
/// dropped, as JSON text.
pub fn optimize(proposal_json: &str) -> Result<String> {
    let p = crate::ir::parse_proposal_transient(proposal_json)?;
    Ok(super::proposal_to_json(&optimize_proposal(p)))
}

/// `optimize` on a parsed proposal, pruned in place (the CLI prints it).
pub fn optimize_proposal(mut proposal: ActionProposal) -> ActionProposal {
    verify::optimize_in_place(&mut proposal);
    proposal
}

/// `equivalent(p1, p2, test_states?)`: `test_states_json` is an array of
/// state objects; default `[{}, {"x":1,"y":2}]`.
pub fn equivalent(p1_json: &str, p2_json: &str, test_states_json: Option<&str>) -> Result<bool> {
    let p1 = crate::ir::parse_proposal_transient(p1_json)?;
    let p2 = crate::ir::parse_proposal_transient(p2_json)?;
    let probes: Option<Vec<Map<String, Value>>> = parse_arg("test_states", test_states_json)?;
    Ok(verify::equivalent(&p1, &p2, probes.as_deref()))
}

/// `transaction_check(proposal, versions?, state?)` →
/// `{consistent, conflicts}` as JSON text. `versions_json` maps key → version.
pub fn transaction_check(proposal_json: &str, versions_json: Option<&str>, state_json: Option<&str>) -> Result<String> {
    let p = crate::ir::parse_proposal_transient(proposal_json)?;
    let versions: HashMap<String, u64> = parse_arg("versions", versions_json)?.unwrap_or_default();
    let state: Option<Map<String, Value>> = parse_arg("state", state_json)?;
    Ok(to_text(&verify::transaction_check(&p, &versions, state.as_ref())))
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Answers the stateless methods of this area; `None` for any other name.
pub(crate) fn call(method: &str, params: &Value) -> Option<Result<Value>> {
    let run = || -> Result<Value> {
        match method {
            "verify" => {
                let (p, unknown) = proposal_arg_reporting(params, "proposal")?;
                let opts = options(
                    value_arg(params, "initial_state")?,
                    value_arg(params, "tool_names")?,
                    value_arg(params, "max_actions")?,
                    value_arg(params, "tool_schemas")?,
                );
                Ok(to_value(&with_unknown(verify::verify(&p, &opts), &unknown)))
            }
            "simulate" => {
                let p = proposal_arg(params, "proposal")?;
                let state: Map<String, Value> = value_arg(params, "initial_state")?.unwrap_or_default();
                Ok(Value::Object(verify::simulate(&p, &state)))
            }
            "optimize" => Ok(to_value(&optimize_proposal(proposal_arg(params, "proposal")?))),
            "equivalent" => {
                let p1 = proposal_arg(params, "p1")?;
                let p2 = proposal_arg(params, "p2")?;
                let probes: Option<Vec<Map<String, Value>>> = value_arg(params, "test_states")?;
                Ok(Value::Bool(verify::equivalent(&p1, &p2, probes.as_deref())))
            }
            "transaction_check" => {
                let p = proposal_arg(params, "proposal")?;
                let versions: HashMap<String, u64> = value_arg(params, "versions")?.unwrap_or_default();
                let state: Option<Map<String, Value>> = value_arg(params, "state")?;
                Ok(to_value(&verify::transaction_check(&p, &versions, state.as_ref())))
            }
            _ => Err(Error::not_found("unknown_method", format!("unknown method `{method}`"))),
        }
    };
    match method {
        "verify" | "simulate" | "optimize" | "equivalent" | "transaction_check" => Some(run()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_facade_round_trips() {
        let p = r#"{"actions":[{"id":"a","type":"tool_call","tool":"t","expected_effects":{"x":1}}]}"#;
        let r: Value = serde_json::from_str(&verify(p, None, None, None, None).unwrap()).unwrap();
        assert_eq!(r["valid"], true);
        assert_eq!(r["simulated_state"], serde_json::json!({"x": 1}));
        assert_eq!(simulate(p, Some(r#"{"y":2}"#)).unwrap(), r#"{"x":1,"y":2}"#);
        assert!(equivalent(p, p, None).unwrap());
        assert!(equivalent(p, p, Some("[1]")).is_err());
        assert_eq!(transaction_check(p, None, None).unwrap(), r#"{"consistent":true,"conflicts":[]}"#);
        let e = simulate(p, Some("[1]")).unwrap_err();
        assert_eq!(e.code(), "invalid_argument");
        assert!(e.to_string().contains("`initial_state`"));
        assert_eq!(verify("nope", None, None, None, None).unwrap_err().code(), "invalid_json");
        assert_eq!(transaction_check(p, Some(r#"{"x":"v1"}"#), None).unwrap_err().code(), "invalid_argument");
    }
}
