//! A proposal as compact JSON text, written directly: the same bytes as
//! `serde_json::to_string(&proposal)`, without serde's per-key work.
//!
//! `optimize` returns the whole proposal with every default filled, about
//! 300 bytes an action, and through serde most of that time went to
//! escaping the field names (static strings) byte by byte. Here the names
//! are written as literals, a string with nothing to escape (ids, tools,
//! keys nearly always) is copied whole, and anything else (an escape, the
//! timestamp, a compensation, the free-form `context` and `metadata`) goes
//! through serde_json itself, so the output is byte for byte what the
//! derived `Serialize` gives (a property test holds the two together).

use serde_json::Value;

use super::{Action, ActionProposal, Object, Precondition, VerificationIssue, VerificationResult};

/// `serde_json::to_string(proposal)`, written directly (see the module docs);
/// public as `api::proposal_to_json`.
pub(crate) fn proposal_to_json(p: &ActionProposal) -> String {
    let mut out = Vec::with_capacity(256 + 320 * p.actions.len());
    write_proposal(p, &mut out);
    into_string(out)
}

/// `serde_json::to_string(result)` for a verification result, written
/// directly: `verify`'s answer lists every action's id, every key of the
/// simulated state and every untested region.
pub(crate) fn verification_to_json(r: &VerificationResult) -> String {
    let ev = &r.evidence;
    let mut out = Vec::with_capacity(
        1024 + 24 * (r.simulated_state.len() + r.issues.len() + ev.untested_regions.len())
            + 16 * r.execution_levels.iter().map(Vec::len).sum::<usize>(),
    );
    out.extend_from_slice(if r.valid { b"{\"valid\":true,\"issues\":[" } else { b"{\"valid\":false,\"issues\":[" });
    for (i, issue) in r.issues.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_issue(issue, &mut out);
    }
    out.extend_from_slice(b"],\"simulated_state\":");
    write_value_object(&r.simulated_state, &mut out);
    out.extend_from_slice(b",\"execution_levels\":[");
    for (i, level) in r.execution_levels.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_strs(level, &mut out);
    }
    out.extend_from_slice(b"],\"conflicts\":[");
    for (i, (a, b, key)) in r.conflicts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'[');
        write_str(a, &mut out);
        out.push(b',');
        write_str(b, &mut out);
        out.push(b',');
        write_str(key, &mut out);
        out.push(b']');
    }
    out.extend_from_slice(b"],\"evidence\":{\"checks\":");
    serde_into(&ev.checks, &mut out);
    out.extend_from_slice(b",\"assumptions\":");
    write_strs(&ev.assumptions, &mut out);
    out.extend_from_slice(b",\"untested_regions\":");
    write_strs(&ev.untested_regions, &mut out);
    out.extend_from_slice(b",\"residual_risks\":");
    write_strs(&ev.residual_risks, &mut out);
    out.extend_from_slice(b",\"confidence\":");
    serde_into(&ev.confidence, &mut out);
    out.extend_from_slice(b"}}");
    into_string(out)
}

/// `serde_json::to_string(map)` for a JSON object (`simulate`'s state),
/// written directly.
pub(crate) fn map_to_json(m: &serde_json::Map<String, Value>) -> String {
    let mut out = Vec::with_capacity(2 + 24 * m.len());
    write_value_object(m, &mut out);
    into_string(out)
}

fn write_value_object(m: &serde_json::Map<String, Value>, out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, (k, x)) in m.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(k, out);
        out.push(b':');
        write_value(x, out);
    }
    out.push(b'}');
}

fn write_issue(issue: &VerificationIssue, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"action_id\":");
    write_str(&issue.action_id, out);
    out.extend_from_slice(b",\"severity\":\"");
    out.extend_from_slice(issue.severity.as_str().as_bytes());
    out.extend_from_slice(b"\",\"message\":");
    write_str(&issue.message, out);
    if let Some(tier) = &issue.tier {
        out.extend_from_slice(b",\"tier\":");
        serde_into(tier, out);
    }
    out.push(b'}');
}

/// The written bytes as text: only UTF-8 is written (the strings come
/// from `&str`, the rest is ASCII or serde_json's own UTF-8 output).
fn into_string(out: Vec<u8>) -> String {
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn write_proposal(p: &ActionProposal, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"id\":");
    write_str(&p.id, out);
    out.extend_from_slice(b",\"source\":");
    write_str(&p.source, out);
    out.extend_from_slice(b",\"actions\":[");
    for (i, a) in p.actions.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_action(a, out);
    }
    out.extend_from_slice(b"],\"timestamp\":");
    serde_into(&p.timestamp, out);
    out.extend_from_slice(b",\"context\":");
    serde_into(&p.context, out);
    out.push(b'}');
}

fn write_action(a: &Action, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"id\":");
    write_str(&a.id, out);
    out.extend_from_slice(b",\"type\":\"");
    out.extend_from_slice(a.action_type.as_str().as_bytes());
    out.push(b'"');
    if let Some(tool) = &a.tool {
        out.extend_from_slice(b",\"tool\":");
        write_str(tool, out);
    }
    out.extend_from_slice(b",\"parameters\":");
    write_object(&a.parameters, out);
    out.extend_from_slice(b",\"preconditions\":[");
    for (i, pc) in a.preconditions.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_precondition(pc, out);
    }
    out.extend_from_slice(b"],\"expected_effects\":");
    write_object(&a.expected_effects, out);
    out.extend_from_slice(b",\"state_dependencies\":");
    write_strs(&a.state_dependencies, out);
    if !a.dependencies.is_empty() {
        out.extend_from_slice(b",\"dependencies\":");
        write_strs(&a.dependencies, out);
    }
    out.extend_from_slice(b",\"read_set\":");
    write_strs(&a.read_set, out);
    out.extend_from_slice(b",\"write_set\":");
    write_strs(&a.write_set, out);
    out.extend_from_slice(b",\"assumptions\":");
    if a.assumptions.is_empty() {
        out.extend_from_slice(b"[]");
    } else {
        serde_into(&a.assumptions, out);
    }
    out.extend_from_slice(b",\"invocation_mode\":");
    serde_into(&a.invocation_mode, out);
    out.extend_from_slice(b",\"reversibility\":");
    serde_into(&a.reversibility, out);
    if let Some(c) = &a.compensation {
        out.extend_from_slice(b",\"compensation\":");
        serde_into(c, out);
    }
    out.extend_from_slice(if a.idempotent { b",\"idempotent\":true" } else { b",\"idempotent\":false" });
    out.extend_from_slice(b",\"max_retries\":");
    write_u64(u64::from(a.max_retries), out);
    out.extend_from_slice(b",\"failure_behavior\":");
    serde_into(&a.failure_behavior, out);
    if let Some(ms) = a.timeout_ms {
        out.extend_from_slice(b",\"timeout_ms\":");
        write_u64(ms, out);
    }
    out.extend_from_slice(b",\"metadata\":");
    write_object(&a.metadata, out);
    out.push(b'}');
}

fn write_precondition(pc: &Precondition, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"key\":");
    write_str(&pc.key, out);
    out.extend_from_slice(b",\"operator\":");
    write_str(pc.operator.as_str(), out);
    out.extend_from_slice(b",\"value\":");
    write_value(&pc.value, out);
    out.extend_from_slice(b",\"description\":");
    write_str(&pc.description, out);
    out.push(b'}');
}

fn write_strs(items: &[String], out: &mut Vec<u8>) {
    out.push(b'[');
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(s, out);
    }
    out.push(b']');
}

fn write_object(o: &Object, out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, (k, v)) in o.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(k, out);
        out.push(b':');
        write_value(v, out);
    }
    out.push(b'}');
}

/// A JSON value as serde_json writes it (strings through [`write_str`]).
fn write_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => match n.as_u64() {
            Some(u) => write_u64(u, out),
            None => serde_into(n, out),
        },
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(x, out);
            }
            out.push(b']');
        }
        Value::Object(m) => write_value_object(m, out),
    }
}

/// A JSON string: copied whole when no byte needs an escape (serde_json
/// escapes exactly `"`, `\` and the control bytes below 0x20), else
/// serde_json's own escaping.
fn write_str(s: &str, out: &mut Vec<u8>) {
    let b = s.as_bytes();
    // No early exit, so the check compiles to a vectorised pass.
    let special = b.iter().fold(false, |acc, &c| acc | (c < 0x20) | (c == b'"') | (c == b'\\'));
    if special {
        serde_into(s, out);
    } else {
        out.reserve(b.len() + 2);
        out.push(b'"');
        out.extend_from_slice(b);
        out.push(b'"');
    }
}

fn write_u64(mut n: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// serde_json's compact form of `v`, appended (writing into a `Vec` cannot
/// fail, and every type here serialises: string keys, finite numbers).
fn serde_into<T: serde::Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Compensation, Operator, StateAssumption};
    use serde_json::json;

    fn same(p: &ActionProposal) {
        assert_eq!(proposal_to_json(p), serde_json::to_string(p).unwrap());
    }

    #[test]
    fn every_field_and_every_escape_match_serde() {
        let nasty = "q\"b\\s/\n\t\u{1}\u{1f}\u{7f} é ✓ 𝄞";
        let mut a = Action::tool_call(nasty)
            .with_id(nasty)
            .with_param(nasty, json!({"x": [1, -2, 2.5, 1e300, u64::MAX, i64::MIN, null, true, nasty]}))
            .with_precondition(
                Precondition::new(nasty, Operator::Unknown(nasty.into()), json!(-0.0)).with_description(nasty),
            )
            .with_precondition(Precondition::new("k", Operator::Exists, Value::Null))
            .with_expected_effect(nasty, json!({nasty: nasty}))
            .with_state_dependency(nasty)
            .with_assumption(StateAssumption::new(nasty).with_expected_value(json!(null)).with_read_version(7))
            .with_compensation(Compensation::Tool {
                tool: nasty.into(),
                parameters: json!({"a": 1}).as_object().cloned().unwrap(),
            })
            .with_timeout_ms(u64::MAX)
            .with_max_retries(u32::MAX)
            .with_metadata(nasty, nasty);
        a.dependencies.push(nasty.into());
        a.read_set.push(nasty.into());
        a.write_set.push(String::new());
        let b = Action::state_write("k", 1).with_compensation(Compensation::ActionRef { action_id: "a".into() });
        let p = ActionProposal::new(vec![a, b, Action::state_read("")]).with_source(nasty).with_context(nasty, nasty);
        same(&p);
        same(&ActionProposal::new(vec![]));
    }

    #[test]
    fn verification_results_match_serde() {
        use crate::verify::{VerifyOptions, verify};
        let nasty = "q\"b\\s\n\u{1} é";
        // A chain with a failed precondition, a missing dependency, a write
        // conflict, a repeated id and an unregistered tool.
        let text = format!(
            r#"{{"actions":[
            {{"id":"{n}","type":"tool_call","tool":"{n}","parameters":{{"x":1}},"expected_effects":{{"{n}":[1.5,null]}}}},
            {{"id":"{n}","type":"tool_call","tool":"t","expected_effects":{{"{n}":2}},"state_dependencies":["nope"]}},
            {{"id":"c","type":"state_write","parameters":{{"key":"k","value":{{"a":"{n}"}}}},
              "preconditions":[{{"key":"k","operator":"eq","value":3}}]}}]}}"#,
            n = nasty.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").replace('\u{1}', "\\u0001")
        );
        let p = crate::ir::parse_proposal(&text).unwrap();
        for opts in [
            VerifyOptions::default(),
            VerifyOptions { tool_names: Some(vec!["t".into()]), max_actions: Some(1), ..VerifyOptions::default() },
        ] {
            let r = verify(&p, &opts);
            assert!(!r.issues.is_empty() && !r.conflicts.is_empty());
            assert_eq!(verification_to_json(&r), serde_json::to_string(&r).unwrap());
            assert_eq!(map_to_json(&r.simulated_state), serde_json::to_string(&r.simulated_state).unwrap());
        }
        let mut r = verify(&ActionProposal::new(vec![]), &VerifyOptions::default());
        r.evidence.confidence = 0.1 + 0.2;
        r.evidence.assumptions.push(nasty.into());
        r.evidence.residual_risks.push(nasty.into());
        r.issues.push(VerificationIssue {
            action_id: nasty.into(),
            severity: crate::ir::Severity::Info,
            message: nasty.into(),
            tier: None,
        });
        assert_eq!(verification_to_json(&r), serde_json::to_string(&r).unwrap());
    }
}
