//! The permission part of the JSON facade: `match_shell_command`,
//! `evaluate_permission`, `toolset_hash`, `compile_permission_preset`.

use serde_json::Value;

use super::{json_arg, required};
use crate::permission::{PermissionChain, ShellRules, ToolDefinition, Toolset, compile_permission_preset as compile};

fn shell(command: &str, rules: &Value) -> crate::Result<String> {
    Ok(ShellRules::from_json(rules)?.check(command).as_str().to_string())
}

fn tool_of(v: Value) -> crate::Result<ToolDefinition> {
    match v {
        // A bare name: a tool with no contract and undeclared risk.
        Value::String(name) => {
            crate::permission::validate_tool_name(&name)?;
            Ok(ToolDefinition::undeclared(name))
        }
        other => ToolDefinition::from_value(other),
    }
}

fn evaluate(chain: &Value, tool: Value, input: &Value) -> crate::Result<Value> {
    let chain = PermissionChain::from_json(chain)?;
    Ok(chain.evaluate(&tool_of(tool)?, input).to_json())
}

fn hash(tools: &Value) -> crate::Result<String> {
    let list = tools.as_array().ok_or_else(|| crate::Error::invalid_argument("tools", "expected an array of tools"))?;
    let defs = list.iter().cloned().map(ToolDefinition::from_value).collect::<crate::Result<Vec<_>>>()?;
    Toolset::new(defs)?.hash()
}

fn preset(name: &str) -> crate::Result<Value> {
    serde_json::to_value(compile(name)?)
        .map_err(|e| crate::Error::runtime("serialization_failed", format!("cannot render preset `{name}`: {e}")))
}

/// `match_shell_command(command, rules_json)` → `"allow" | "ask" | "deny"`.
pub fn match_shell_command(command: &str, rules_json: &str) -> crate::Result<String> {
    shell(command, &crate::ir::from_json_str(rules_json)?)
}

/// `evaluate_permission(chain_json, tool_json, input_json)` → the dry-run
/// `{verdict, decided_by, rule, input, advisory, reason}` as JSON text.
pub fn evaluate_permission(chain_json: &str, tool_json: &str, input_json: &str) -> crate::Result<String> {
    let chain: Value = crate::ir::from_json_str(chain_json)?;
    let tool: Value = crate::ir::from_json_str(tool_json)?;
    let input: Value = crate::ir::from_json_str(input_json)?;
    Ok(evaluate(&chain, tool, &input)?.to_string())
}

/// `toolset_hash(tools_json)` → lowercase hex SHA-256.
pub fn toolset_hash(tools_json: &str) -> crate::Result<String> {
    hash(&crate::ir::from_json_str(tools_json)?)
}

/// `compile_permission_preset(name)` → `{deny: [rules], ask: [rules]}` as JSON text.
pub fn compile_permission_preset(name: &str) -> crate::Result<String> {
    Ok(preset(name)?.to_string())
}

fn str_arg<'a>(params: &'a Value, name: &str) -> crate::Result<&'a str> {
    required(params, name)?.as_str().ok_or_else(|| crate::Error::invalid_argument(name, "expected a string"))
}

/// Answers the stateless methods of this area; `None` for any other name.
pub(crate) fn call(method: &str, params: &Value) -> Option<crate::Result<Value>> {
    let r = match method {
        "match_shell_command" => (|| {
            let rules = json_arg(required(params, "rules")?)?;
            Ok(Value::String(shell(str_arg(params, "command")?, &rules)?))
        })(),
        "evaluate_permission" => (|| {
            let chain = json_arg(required(params, "chain")?)?;
            // A tool given as a plain string is a name, not JSON text.
            let tool = match required(params, "tool")? {
                Value::String(s) if s.trim_start().starts_with('{') => json_arg(&Value::String(s.clone()))?,
                other => other.clone(),
            };
            let input = match params.get("input") {
                None | Some(Value::Null) => crate::permission::chain::empty_input(),
                Some(v) => json_arg(v)?,
            };
            evaluate(&chain, tool, &input)
        })(),
        "toolset_hash" => (|| Ok(Value::String(hash(&json_arg(required(params, "tools")?)?)?)))(),
        "compile_permission_preset" => (|| preset(str_arg(params, "name")?))(),
        _ => return None,
    };
    Some(r)
}

/// The key a host hook's answer substitutes the input with: `modified_input`
/// (Python, UniFFI) or `modifiedInput` (Node).
const MODIFIED_INPUT_KEYS: [&str; 2] = ["modified_input", "modifiedInput"];

/// A host answer's substituted input: an object `{"modified_input": {...}}`
/// (or `modifiedInput`) with that one key whose value is an object.
fn modified_input(answer: &Value) -> Option<Value> {
    let obj = answer.as_object()?;
    if obj.len() != 1 {
        return None;
    }
    let (key, v) = obj.iter().next()?;
    (MODIFIED_INPUT_KEYS.contains(&key.as_str()) && v.is_object()).then(|| v.clone())
}

/// Translates a host hook's answer (already turned into JSON by a binding)
/// into a [`HookDecision`](crate::permission::HookDecision): `null` passes;
/// `"allow"`, `"deny"`, `"ask"` are decisive; `{"modified_input": {...}}`
/// (or `{"modifiedInput": {...}}`) substitutes the input. Anything else —
/// another string, another shape, a non-object input — denies (fail closed).
/// Every binding uses this one translation.
pub fn hook_decision_from_json(answer: &Value) -> crate::permission::HookDecision {
    use crate::permission::HookDecision;
    match answer {
        Value::Null => HookDecision::Pass,
        Value::String(s) => match s.as_str() {
            "allow" => HookDecision::Allow,
            "ask" => HookDecision::Ask,
            _ => HookDecision::Deny,
        },
        other => modified_input(other).map_or(HookDecision::Deny, HookDecision::ModifiedInput),
    }
}

/// [`hook_decision_from_json`] for `can_use_tool`: the same vocabulary
/// without `"ask"` (which, like anything unrecognised, denies).
pub fn can_use_decision_from_json(answer: &Value) -> crate::permission::CanUseDecision {
    use crate::permission::CanUseDecision;
    match answer {
        Value::Null => CanUseDecision::Pass,
        Value::String(s) if s == "allow" => CanUseDecision::Allow,
        Value::String(_) => CanUseDecision::Deny,
        other => modified_input(other).map_or(CanUseDecision::Deny, CanUseDecision::ModifiedInput),
    }
}

/// [`hook_decision_from_json`] for an answer given as JSON text (UniFFI);
/// text that is not JSON denies.
pub fn hook_decision_from_text(answer: &str) -> crate::permission::HookDecision {
    serde_json::from_str::<Value>(answer).map_or(crate::permission::HookDecision::Deny, |v| hook_decision_from_json(&v))
}

/// [`can_use_decision_from_json`] for an answer given as JSON text (UniFFI);
/// text that is not JSON denies.
pub fn can_use_decision_from_text(answer: &str) -> crate::permission::CanUseDecision {
    serde_json::from_str::<Value>(answer)
        .map_or(crate::permission::CanUseDecision::Deny, |v| can_use_decision_from_json(&v))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::permission::{CanUseDecision, HookDecision};

    #[test]
    fn a_host_answer_translates_and_anything_unrecognised_denies() {
        assert_eq!(hook_decision_from_json(&Value::Null), HookDecision::Pass);
        assert_eq!(hook_decision_from_json(&json!("allow")), HookDecision::Allow);
        assert_eq!(hook_decision_from_json(&json!("deny")), HookDecision::Deny);
        assert_eq!(hook_decision_from_json(&json!("ask")), HookDecision::Ask);
        let sub = json!({"command": "touch x"});
        assert_eq!(hook_decision_from_json(&json!({"modified_input": sub})), HookDecision::ModifiedInput(sub.clone()));
        assert_eq!(hook_decision_from_json(&json!({"modifiedInput": sub})), HookDecision::ModifiedInput(sub.clone()));
        for bad in [
            json!("Allow"),
            json!(""),
            json!(true),
            json!(1),
            json!([]),
            json!({}),
            json!({"modified_input": "x"}),
            json!({"modified_input": null}),
            json!({"modified_input": sub, "verdict": "allow"}),
            json!({"verdict": "allow"}),
        ] {
            assert_eq!(hook_decision_from_json(&bad), HookDecision::Deny, "{bad}");
            assert_eq!(can_use_decision_from_json(&bad), CanUseDecision::Deny, "{bad}");
        }
        assert_eq!(can_use_decision_from_json(&Value::Null), CanUseDecision::Pass);
        assert_eq!(can_use_decision_from_json(&json!("allow")), CanUseDecision::Allow);
        assert_eq!(can_use_decision_from_json(&json!("ask")), CanUseDecision::Deny);
        assert_eq!(can_use_decision_from_json(&json!({"modified_input": sub})), CanUseDecision::ModifiedInput(sub));
        assert_eq!(hook_decision_from_text("\"allow\""), HookDecision::Allow);
        assert_eq!(hook_decision_from_text("null"), HookDecision::Pass);
        assert_eq!(hook_decision_from_text("allow"), HookDecision::Deny);
        assert_eq!(can_use_decision_from_text("not json"), CanUseDecision::Deny);
    }
}
