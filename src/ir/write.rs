//! Direct JSON writing: the bytes serde_json's compact serializer writes,
//! without its per-key work. The primitives here (strings, numbers, values,
//! objects) serve every direct writer of the IR: a proposal
//! (`api::proposal_to_json`: `optimize`, `normalize_proposal`), `verify`'s
//! result, `simulate`'s state, and a proposal's result
//! (`ProposalResult::to_json_string`, in `result.rs`).
//!
//! `optimize` returns the whole proposal with every default filled, about
//! 300 bytes an action, and through serde most of that time went to
//! escaping the field names (static strings) byte by byte. Here the names
//! are literals, a string with nothing to escape (ids, tools, keys nearly
//! always) is copied whole, and what is rare or intricate (an escape, a
//! timestamp, a compensation, an assumption) goes through serde_json
//! itself, so the output is byte for byte what the derived `Serialize`
//! gives (the IR property test holds the two together).

use serde_json::{Map, Value};

use super::{Action, ActionProposal, Precondition, VerificationIssue, VerificationResult};

/// A JSON string. serde_json escapes exactly `"`, `\` and the control
/// characters below 0x20; a string containing one of those takes
/// serde_json's own path, any other is copied whole.
pub(crate) fn str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    str_contents(out, s);
    out.push('"');
}

/// The inside of a JSON string (no quotes): `s` as serde_json escapes it
/// ([`str`] quotes it; a string written in pieces writes each piece so).
pub(crate) fn str_contents(out: &mut String, s: &str) {
    if escapes(s) {
        let quoted = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        out.push_str(&quoted[1..quoted.len() - 1]);
    } else {
        out.push_str(s);
    }
}

/// A list of strings its owner writes as a JSON list itself, without making
/// each string first (`verify`'s untested regions).
pub(crate) trait StrList {
    /// About how many bytes its JSON takes.
    fn json_bytes(&self) -> usize;
    /// Appends its JSON: what `serde_json` writes for the strings as a list.
    fn write_json(&self, out: &mut String);
}

/// Whether serde_json would escape anything in `s` (`"`, `\\` or a control
/// character below 0x20). A short string (nearly every id, tool and key)
/// is tested eight bytes at a time; a long one in a pass with no early
/// exit, which compiles to a vectorised one.
pub(crate) fn escapes(s: &str) -> bool {
    if s.len() <= 32 {
        super::fast::scan(s.as_bytes(), 0) < s.len()
    } else {
        s.bytes().fold(false, |acc, b| acc | (b < 0x20) | (b == b'"') | (b == b'\\'))
    }
}

/// A number as serde_json writes it: integers in plain decimal, floats as
/// its `Display` writes them (the shortest round-trip form its serializer
/// writes too), with no string allocated on the way.
pub(crate) fn number(out: &mut String, n: &serde_json::Number) {
    if let Some(u) = n.as_u64() {
        uint(out, u);
    } else if let Some(i) = n.as_i64() {
        out.push('-');
        uint(out, i.unsigned_abs());
    } else {
        use std::fmt::Write as _;
        // Writing to a String cannot fail.
        let _ = write!(out, "{n}");
    }
}

/// Decimal digits of `n`, without `fmt`.
pub(crate) fn uint(out: &mut String, mut n: u64) {
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
    // ASCII digits only.
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or_default());
}

/// An `f64` field: non-finite values are `null`, as in serde_json; a finite
/// one in the shortest form that reads back exactly, by the formatter
/// serde_json's own `Display` and serializer call (`zmij`), without going
/// through `fmt` (an action's `duration_ms` is one in every result).
pub(crate) fn f64(out: &mut String, f: f64) {
    if f.is_finite() {
        out.push_str(zmij::Buffer::new().format_finite(f));
    } else {
        out.push_str("null");
    }
}

/// A JSON value.
pub(crate) fn value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => number(out, n),
        Value::String(s) => str(out, s),
        Value::Array(items) => list(out, items, value),
        Value::Object(m) => map(out, m),
    }
}

/// A JSON array of `items`, each written by `each`.
pub(crate) fn list<T>(out: &mut String, items: impl IntoIterator<Item = T>, mut each: impl FnMut(&mut String, T)) {
    out.push('[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        each(out, item);
    }
    out.push(']');
}

/// A JSON object (a `serde_json::Map` or an [`super::Object`]), entries in order.
pub(crate) fn map<'a, M>(out: &mut String, m: &'a M)
where
    &'a M: IntoIterator<Item = (&'a String, &'a Value)>,
{
    object(out, m, value);
}

/// A JSON object of `entries` in order, each value written by `each`.
pub(crate) fn object<'a, V: 'a>(
    out: &mut String,
    entries: impl IntoIterator<Item = (&'a String, &'a V)>,
    mut each: impl FnMut(&mut String, &'a V),
) {
    out.push('{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        str(out, k);
        out.push(':');
        each(out, v);
    }
    out.push('}');
}

/// A list of strings.
fn strs(out: &mut String, items: &[String]) {
    list(out, items, |out, s| str(out, s));
}

/// serde_json's compact form of `v`, appended: for the rare and intricate
/// parts (every type here serialises: string keys, finite numbers).
fn serde_into<T: serde::Serialize + ?Sized>(out: &mut String, v: &T) {
    out.push_str(&serde_json::to_string(v).unwrap_or_else(|_| "null".into()));
}

/// `serde_json::to_string(proposal)`, written directly (see the module docs);
/// public as `api::proposal_to_json`.
pub(crate) fn proposal_to_json(p: &ActionProposal) -> String {
    // About 320 bytes an action with every default, more with
    // preconditions and dependencies: room for 512, so that the answer is
    // not copied to a larger buffer halfway (pages never written cost no
    // memory).
    let mut out = String::with_capacity(256 + 512 * p.actions.len());
    out.push_str("{\"id\":");
    str(&mut out, &p.id);
    out.push_str(",\"source\":");
    str(&mut out, &p.source);
    out.push_str(",\"actions\":");
    list(&mut out, &p.actions, action);
    out.push_str(",\"timestamp\":");
    serde_into(&mut out, &p.timestamp);
    out.push_str(",\"context\":");
    map(&mut out, &p.context);
    out.push('}');
    out
}

/// The RFC 8785 text of `p` (what `canonical_json` gives for its value),
/// written straight from it: members in code-unit order, the free-form maps
/// through the canonical writer. Returns whether that text reads back as
/// the proposal's value (see [`crate::canonical::reads_back`]).
pub(crate) fn proposal_canonical(p: &ActionProposal, out: &mut Vec<u8>) -> bool {
    let mut m = crate::canonical::Members::new(out);
    let mut exact = true;
    m.list("actions", &p.actions, |out, a| exact &= action_canonical(a, out));
    m.object("context", &p.context);
    m.str("id", &p.id);
    m.str("source", &p.source);
    crate::events::write_timestamp(m.raw("timestamp"), &p.timestamp);
    exact &= m.exact;
    m.end();
    exact
}

/// An action's RFC 8785 text; whether it reads back exactly.
fn action_canonical(a: &Action, out: &mut Vec<u8>) -> bool {
    // Rare parts through their value.
    fn as_value<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap_or(Value::Null)
    }
    let mut m = crate::canonical::Members::new(out);
    if a.assumptions.is_empty() {
        m.raw("assumptions").extend_from_slice(b"[]");
    } else {
        m.value("assumptions", &as_value(&a.assumptions));
    }
    if let Some(c) = &a.compensation {
        m.value("compensation", &as_value(c));
    }
    if !a.dependencies.is_empty() {
        m.strs("dependencies", &a.dependencies);
    }
    m.object("expected_effects", &a.expected_effects);
    m.str("failure_behavior", a.failure_behavior.as_str());
    m.str("id", &a.id);
    m.bool("idempotent", a.idempotent);
    m.str("invocation_mode", a.invocation_mode.as_str());
    m.value("max_retries", &Value::from(a.max_retries));
    m.object("metadata", &a.metadata);
    m.object("parameters", &a.parameters);
    let mut exact = true;
    m.list("preconditions", &a.preconditions, |out, pc| {
        let mut p = crate::canonical::Members::new(out);
        p.str("description", &pc.description);
        p.str("key", &pc.key);
        p.str("operator", pc.operator.as_str());
        p.value("value", &pc.value);
        exact &= p.exact;
        p.end();
    });
    m.strs("read_set", &a.read_set);
    m.str("reversibility", a.reversibility.as_str());
    m.strs("state_dependencies", &a.state_dependencies);
    if let Some(ms) = a.timeout_ms {
        m.value("timeout_ms", &Value::from(ms));
    }
    if let Some(t) = &a.tool {
        m.str("tool", t);
    }
    m.str("type", a.action_type.as_str());
    m.strs("write_set", &a.write_set);
    exact &= m.exact;
    m.end();
    exact
}

fn action(out: &mut String, a: &Action) {
    out.push_str("{\"id\":");
    str(out, &a.id);
    out.push_str(",\"type\":\"");
    out.push_str(a.action_type.as_str());
    out.push('"');
    if let Some(tool) = &a.tool {
        out.push_str(",\"tool\":");
        str(out, tool);
    }
    out.push_str(",\"parameters\":");
    map(out, &a.parameters);
    out.push_str(",\"preconditions\":");
    list(out, &a.preconditions, precondition);
    out.push_str(",\"expected_effects\":");
    map(out, &a.expected_effects);
    out.push_str(",\"state_dependencies\":");
    strs(out, &a.state_dependencies);
    if !a.dependencies.is_empty() {
        out.push_str(",\"dependencies\":");
        strs(out, &a.dependencies);
    }
    if has_default_tail(a) {
        out.push_str(DEFAULT_TAIL);
    } else {
        tail(out, a);
    }
    if let Some(ms) = a.timeout_ms {
        out.push_str(",\"timeout_ms\":");
        uint(out, ms);
    }
    out.push_str(",\"metadata\":");
    map(out, &a.metadata);
    out.push('}');
}

/// The fields from `read_set` to `failure_behavior` of an action that
/// leaves them all at their defaults, as [`tail`] writes them.
const DEFAULT_TAIL: &str = ",\"read_set\":[],\"write_set\":[],\"assumptions\":[],\"invocation_mode\":\"one_shot\",\
    \"reversibility\":\"irreversible\",\"idempotent\":false,\"max_retries\":3,\"failure_behavior\":\"abort\"";

/// Whether [`DEFAULT_TAIL`] is `a`'s (most actions': one literal instead of
/// nine fields).
fn has_default_tail(a: &Action) -> bool {
    a.read_set.is_empty()
        && a.write_set.is_empty()
        && a.assumptions.is_empty()
        && a.invocation_mode == super::ToolInvocationMode::OneShot
        && a.reversibility == super::Reversibility::Irreversible
        && a.compensation.is_none()
        && !a.idempotent
        && a.max_retries == 3
        && a.failure_behavior == super::FailureBehavior::Abort
}

/// An action's fields from `read_set` to `failure_behavior`.
fn tail(out: &mut String, a: &Action) {
    out.push_str(",\"read_set\":");
    strs(out, &a.read_set);
    out.push_str(",\"write_set\":");
    strs(out, &a.write_set);
    out.push_str(",\"assumptions\":");
    if a.assumptions.is_empty() {
        out.push_str("[]");
    } else {
        serde_into(out, &a.assumptions);
    }
    out.push_str(",\"invocation_mode\":\"");
    out.push_str(a.invocation_mode.as_str());
    out.push_str("\",\"reversibility\":\"");
    out.push_str(a.reversibility.as_str());
    out.push('"');
    if let Some(c) = &a.compensation {
        out.push_str(",\"compensation\":");
        serde_into(out, c);
    }
    out.push_str(if a.idempotent { ",\"idempotent\":true" } else { ",\"idempotent\":false" });
    out.push_str(",\"max_retries\":");
    uint(out, u64::from(a.max_retries));
    out.push_str(",\"failure_behavior\":\"");
    out.push_str(a.failure_behavior.as_str());
    out.push('"');
}

fn precondition(out: &mut String, pc: &Precondition) {
    out.push_str("{\"key\":");
    str(out, &pc.key);
    out.push_str(",\"operator\":");
    str(out, pc.operator.as_str());
    out.push_str(",\"value\":");
    value(out, &pc.value);
    out.push_str(",\"description\":");
    str(out, &pc.description);
    out.push('}');
}

/// `serde_json::to_string(map)` for a JSON object (`simulate`'s state),
/// written directly.
pub(crate) fn map_to_json(m: &Map<String, Value>) -> String {
    let mut out = String::with_capacity(2 + 24 * m.len());
    map(&mut out, m);
    out
}

/// `serde_json::to_string(result)` for a verification result, written
/// directly: `verify`'s answer lists every action's id, every key of the
/// simulated state and every untested region.
/// With `untested`, the untested regions are the ones it writes, in place of
/// `r`'s own (which are then not read).
pub(crate) fn verification_to_json(r: &VerificationResult, untested: Option<&dyn StrList>) -> String {
    let ev = &r.evidence;
    // Sized from what it holds (the untested regions, the issues' messages),
    // so that the answer is not copied to a larger buffer halfway.
    let regions = match untested {
        Some(u) => u.json_bytes(),
        None => ev.untested_regions.iter().map(|s| 3 + s.len()).sum::<usize>(),
    };
    let mut out = String::with_capacity(
        1024 + 24 * r.simulated_state.len()
            + r.issues.iter().map(|i| 96 + i.message.len() + i.action_id.len()).sum::<usize>()
            + regions
            + 16 * r.execution_levels.iter().map(Vec::len).sum::<usize>(),
    );
    out.push_str(if r.valid { "{\"valid\":true,\"issues\":" } else { "{\"valid\":false,\"issues\":" });
    list(&mut out, &r.issues, verification_issue);
    out.push_str(",\"simulated_state\":");
    map(&mut out, &r.simulated_state);
    out.push_str(",\"execution_levels\":");
    list(&mut out, &r.execution_levels, |out, level| strs(out, level));
    out.push_str(",\"conflicts\":");
    list(&mut out, &r.conflicts, |out, (a, b, key)| list(out, [a, b, key], |out, s| str(out, s)));
    out.push_str(",\"evidence\":{\"checks\":");
    serde_into(&mut out, &ev.checks);
    out.push_str(",\"assumptions\":");
    strs(&mut out, &ev.assumptions);
    out.push_str(",\"untested_regions\":");
    match untested {
        Some(u) => u.write_json(&mut out),
        None => strs(&mut out, &ev.untested_regions),
    }
    out.push_str(",\"residual_risks\":");
    strs(&mut out, &ev.residual_risks);
    out.push_str(",\"confidence\":");
    f64(&mut out, ev.confidence);
    out.push_str("}}");
    out
}

fn verification_issue(out: &mut String, issue: &VerificationIssue) {
    out.push_str("{\"action_id\":");
    str(out, &issue.action_id);
    out.push_str(",\"severity\":\"");
    out.push_str(issue.severity.as_str());
    out.push_str("\",\"message\":");
    str(out, &issue.message);
    if let Some(tier) = issue.tier {
        out.push_str(",\"tier\":\"");
        out.push_str(tier.as_str());
        out.push('"');
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Compensation, Operator, StateAssumption};
    use serde_json::json;

    fn same(p: &ActionProposal) {
        assert_eq!(proposal_to_json(p), serde_json::to_string(p).unwrap());
    }

    /// `f64` and `number` write what serde_json writes for the same value:
    /// generated floats of every magnitude, their bit patterns' edges, and
    /// non-finite values (`null`).
    #[test]
    fn floats_are_written_as_serde_writes_them() {
        use proptest::prelude::*;
        fn check(f: f64) {
            let mut out = String::new();
            f64(&mut out, f);
            assert_eq!(out, serde_json::to_string(&f).unwrap(), "{f:e}");
            if let Some(n) = serde_json::Number::from_f64(f) {
                let mut out = String::new();
                number(&mut out, &n);
                assert_eq!(out, serde_json::to_string(&n).unwrap(), "{f:e}");
            }
        }
        for f in [
            0.0,
            -0.0,
            1.0,
            0.1,
            2.5,
            1e300,
            1e-300,
            5e-324,
            f64::MAX,
            f64::MIN,
            f64::EPSILON,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            check(f);
        }
        proptest!(ProptestConfig::with_cases(2000), |(bits in any::<u64>(), ms in 0.0f64..1e7)| {
            check(f64::from_bits(bits));
            check(ms);
        });
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

    /// The literal tail of an action with default settings, and each of its
    /// fields changed alone (which takes the field-by-field writer).
    #[test]
    fn the_default_tail_and_each_departure_from_it_match_serde() {
        use crate::ir::{FailureBehavior, Reversibility, ToolInvocationMode};
        let base = Action::tool_call("t").with_id("a").with_param("n", 1);
        assert!(has_default_tail(&base));
        let changes: [fn(&mut Action); 9] = [
            |a| a.read_set.push("r".into()),
            |a| a.write_set.push("w".into()),
            |a| a.assumptions.push(StateAssumption::new("k")),
            |a| a.invocation_mode = ToolInvocationMode::Streaming,
            |a| a.reversibility = Reversibility::Reversible,
            |a| a.compensation = Some(Box::new(Compensation::ActionRef { action_id: "b".into() })),
            |a| a.idempotent = true,
            |a| a.max_retries = 4,
            |a| a.failure_behavior = FailureBehavior::Skip,
        ];
        let mut actions = vec![base.clone(), base.clone().with_timeout_ms(5).with_metadata("m", 1)];
        for change in changes {
            let mut a = base.clone();
            change(&mut a);
            assert!(!has_default_tail(&a));
            actions.push(a);
        }
        same(&ActionProposal::new(actions));
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
            assert_eq!(verification_to_json(&r, None), serde_json::to_string(&r).unwrap());
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
        assert_eq!(verification_to_json(&r, None), serde_json::to_string(&r).unwrap());
    }
}
