//! The `param_schema` check: a tool call's parameters against the `type` and
//! `required` keywords of its tool's parameter schema.
//!
//! Only the top level of the schema is read: `required` (in its order), then
//! each declared property's `type` (properties in name order). Value-level
//! keywords (`enum`, ranges, formats, nested objects) are out of scope, as the
//! check's `cannot_verify` says; an unknown type name never fails.

use serde_json::Value;

/// The JSON type name of a value, as the findings spell it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `v` is an instance of the JSON Schema type `t`; `None` for a type
/// name JSON Schema does not define.
fn is_type(v: &Value, t: &str) -> Option<bool> {
    Some(match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "number" => v.is_number(),
        "integer" => match v {
            Value::Number(n) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
            _ => false,
        },
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => return None,
    })
}

/// The findings for one call of `tool` with `params` against `schema`.
pub(crate) fn check(tool: &str, schema: &Value, params: &crate::ir::Object) -> Vec<String> {
    let mut out = Vec::new();
    let Some(schema) = schema.as_object() else { return out };
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !params.contains_key(name) {
                out.push(format!("tool '{tool}': missing required parameter '{name}'"));
            }
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let mut names: Vec<&String> = props.keys().collect();
        names.sort();
        for name in names {
            let (Some(value), Some(declared)) = (params.get(name.as_str()), props.get(name.as_str())) else {
                continue;
            };
            let types: Vec<&str> = match declared.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => continue,
            };
            if types.is_empty() {
                continue;
            }
            let ok = types.iter().any(|t| is_type(value, t).unwrap_or(true));
            if !ok {
                out.push(format!(
                    "tool '{tool}': parameter '{name}' has wrong type: expected {}, got {}",
                    types.join("|"),
                    type_name(value)
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(schema: Value, params: Value) -> Vec<String> {
        check("t", &schema, &params.as_object().cloned().unwrap_or_default().into())
    }

    #[test]
    fn required_then_types_in_name_order() {
        let s =
            json!({"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}},"required":["z","b"]});
        assert_eq!(
            run(s, json!({"a": 1.5, "b": 2})),
            vec![
                "tool 't': missing required parameter 'z'",
                "tool 't': parameter 'a' has wrong type: expected integer, got number",
                "tool 't': parameter 'b' has wrong type: expected string, got number",
            ]
        );
    }

    #[test]
    fn integers_unions_unknown_types_and_value_keywords() {
        assert!(run(json!({"properties":{"n":{"type":"integer"}}}), json!({"n": 1.0})).is_empty());
        assert!(run(json!({"properties":{"n":{"type":["string","null"]}}}), json!({"n": null})).is_empty());
        assert_eq!(
            run(json!({"properties":{"n":{"type":["string","null"]}}}), json!({"n": 1})),
            vec!["tool 't': parameter 'n' has wrong type: expected string|null, got number"]
        );
        assert!(run(json!({"properties":{"n":{"type":"weird"}}}), json!({"n": 1})).is_empty());
        assert!(run(json!({"properties":{"n":{"type":"string","enum":["a"]}}}), json!({"n": "b"})).is_empty());
        assert!(run(json!({"properties":{"n":{"type":"integer"}}}), json!({})).is_empty());
        assert_eq!(
            run(json!({"properties":{"n":{"type":"integer"}}}), json!({"n": true})),
            vec!["tool 't': parameter 'n' has wrong type: expected integer, got boolean"]
        );
    }
}
