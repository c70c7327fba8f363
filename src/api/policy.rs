//! The policy part of the JSON facade: policy files (`load_policies`,
//! `check_policies`, `lint_policies`) and the permission gate
//! (`permission_classify`, `permission_evaluate`, recording approvals).

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::ir::{Action, ActionProposal};
use crate::policy::file::{PolicySet, load_policy_set, parse_policy_text, policy_files};
use crate::policy::{JsonlLedger, PermissionGate, PermissionTier, PolicyEngine, classify};
use crate::{Error, Result};

/// Loads every `*.toml` of `dir` and returns the number of rules. A missing
/// directory is 0; a malformed file is an error naming the file and key.
pub fn load_policies(dir: &str) -> Result<usize> {
    Ok(load_policy_set(Path::new(dir))?.rule_count())
}

/// Where the rules of [`check_policies`] come from.
#[derive(Debug, Clone, Copy)]
pub enum RuleSource<'a> {
    /// A `.car/policies`-style directory.
    Dir(&'a str),
    /// The text of one policy file.
    Toml(&'a str),
    /// The nearest `.car/policies` found walking up from this directory (no
    /// rules when there is none).
    DiscoverFrom(&'a str),
}

/// Every violation each action of `proposal_json` would meet under the rules,
/// with stable rule names: `{rule_count, violations: [{policy_name,
/// action_id, reason}], denied_actions: [ids], by_action: {id: [rule
/// names]}}`.
///
/// Actions are checked in proposal order against a fresh engine (so rate
/// limits start empty and count this proposal's calls); trace rules are
/// evaluated as if every admitted `tool_call` ran and succeeded in that order.
pub fn check_policies(rules: RuleSource<'_>, proposal_json: &str) -> Result<String> {
    let proposal = crate::ir::parse_proposal_transient(proposal_json)?;
    Ok(check_policies_value(rules, &proposal)?.to_string())
}

fn check_policies_value(rules: RuleSource<'_>, proposal: &ActionProposal) -> Result<Value> {
    let mut engine = PolicyEngine::new();
    let count = match rules {
        RuleSource::Dir(d) => engine.load_policy_dir(Path::new(d))?,
        RuleSource::Toml(t) => engine.apply_policy_set(&parse_policy_text(t, "<rules>")?),
        RuleSource::DiscoverFrom(start) => match crate::policy::discover_policy_dir(Path::new(start)) {
            Some(dir) => engine.load_policy_dir(&dir)?,
            None => 0,
        },
    };
    let state = Map::new();
    let mut violations = Vec::new();
    let mut denied = Vec::new();
    let mut by_action = Map::new();
    for action in &proposal.actions {
        let mut v = engine.check(action, &state);
        if v.is_empty() && action.tool.is_some() {
            v = engine.check_dispatch(action, None);
            if v.is_empty() {
                engine.record_dispatch(action, None, true);
            }
        }
        if !v.is_empty() {
            denied.push(Value::String(action.id.clone()));
            let names: Vec<Value> = v.iter().map(|x| Value::String(x.policy_name.clone())).collect();
            by_action.insert(action.id.clone(), Value::Array(names));
        }
        violations.extend(v);
    }
    Ok(json!({"rule_count": count, "violations": violations, "denied_actions": denied, "by_action": by_action}))
}

/// Lints a policy directory: `{rule_count, files: [{file, rules}], warnings:
/// [{file, key, message}]}`. Malformed files are an error, as when loading;
/// warnings flag rules that load but probably do not do what was meant.
pub fn lint_policies(dir: &str) -> Result<String> {
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    let mut total = 0;
    for path in policy_files(Path::new(dir))? {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::config("policy_io_error", format!("policy file `{shown}`: cannot read: {e}"), json!({"file": shown}))
        })?;
        let set = parse_policy_text(&text, &shown)?;
        total += set.rule_count();
        files.push(json!({"file": shown, "rules": set.rule_count()}));
        for w in lint_set(&set) {
            warnings.push(json!({"file": shown, "key": w.0, "message": w.1}));
        }
    }
    Ok(json!({"rule_count": total, "files": files, "warnings": warnings}).to_string())
}

fn lint_set(set: &PolicySet) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, t) in set.deny_tool.iter().enumerate() {
        if !seen.insert(t) {
            out.push((format!("deny_tool[{i}]"), format!("`{t}` is listed twice")));
        }
    }
    for (i, r) in set.deny_tool_param.iter().enumerate() {
        if r.equals.is_none() && r.contains.is_none() {
            out.push((
                format!("deny_tool_param[{i}]"),
                format!(
                    "neither `equals` nor `contains` is set: any call to `{}` carrying `{}` is denied",
                    r.tool, r.param
                ),
            ));
        }
    }
    for (i, r) in set.allow_tool_param.iter().enumerate() {
        if r.allow.is_empty() {
            out.push((
                format!("allow_tool_param[{i}].allow"),
                format!("empty allowlist: every call to `{}` is denied", r.tool),
            ));
        }
    }
    for (i, r) in set.deny_tool_param_matching.iter().enumerate() {
        if let Err(e) = crate::policy::file::compile_pattern(&r.matches) {
            let first = e.to_string().lines().last().unwrap_or_default().trim().to_string();
            out.push((
                format!("deny_tool_param_matching[{i}].matches"),
                format!("the pattern does not compile ({first}): every call to `{}` is denied", r.tool),
            ));
        }
    }
    for (i, r) in set.rate_limit_tool.iter().enumerate() {
        if r.max_calls == 0 {
            out.push((
                format!("rate_limit_tool[{i}].max_calls"),
                format!("`max_calls = 0`: every call to `{}` is denied", r.tool),
            ));
        }
        if r.interval_secs == 0.0 {
            out.push((
                format!("rate_limit_tool[{i}].interval_secs"),
                format!("a zero-length window never limits `{}`", r.tool),
            ));
        }
    }
    for (i, r) in set.trace_rule.iter().enumerate() {
        if r.forbid_after.contains(&r.tool) && r.max_per_session.is_none() {
            out.push((
                format!("trace_rule[{i}].forbid_after"),
                format!("`{}` forbids itself after its own first run; `max_per_session = 1` says so directly", r.tool),
            ));
        }
    }
    out
}

/// Classifies each action of a proposal on both axes: `{classifications:
/// [{action_id, tool, required_tier, reversibility, missing_compensation}],
/// declared_rollback_contract}`.
pub fn permission_classify(proposal_json: &str) -> Result<String> {
    Ok(classify_value(&crate::ir::parse_proposal_transient(proposal_json)?).to_string())
}

fn classify_value(p: &ActionProposal) -> Value {
    let classifier = classify::RiskClassifier::shared();
    let rows: Vec<Value> = p
        .actions
        .iter()
        .map(|a| {
            let f = classify::flatten(a);
            json!({
                "action_id": a.id,
                "tool": a.tool,
                "required_tier": classifier.classify_flat(&f),
                "reversibility": classify::classify_reversibility_flat(&f),
                "missing_compensation": a.missing_required_compensation(),
            })
        })
        .collect();
    json!({"classifications": rows, "declared_rollback_contract": p.rollback_contract()})
}

fn parse_tier(s: &str) -> Result<PermissionTier> {
    PermissionTier::parse(s).ok_or_else(|| {
        Error::invalid_argument(
            "granted_tier",
            format!("unknown permission tier `{s}`; expected `read_only`, `sandbox_edit` or `full_access`"),
        )
    })
}

/// The gate over the ledger at `ledger_path`, keyed by the file at
/// `ledger_key_path`, else by `CAR_LEDGER_KEY`, else by the default key
/// file (`JsonlLedger::open`).
fn gate(ledger_path: Option<&str>, ledger_key_path: Option<&str>) -> Result<PermissionGate> {
    Ok(match ledger_path {
        Some(p) => PermissionGate::new().with_ledger(Box::new(JsonlLedger::open(p, ledger_key_path.map(Path::new))?)),
        None => PermissionGate::new(),
    })
}

/// Decides each action against a granted tier and, when given, the JSONL
/// approvals ledger: `{decisions: [{action_id, fingerprint, decision,
/// required, granted, reversibility, reason?}]}`.
pub fn permission_evaluate(proposal_json: &str, granted_tier: &str, ledger_path: Option<&str>) -> Result<String> {
    let p = crate::ir::parse_proposal_transient(proposal_json)?;
    Ok(evaluate_value(&p, parse_tier(granted_tier)?, ledger_path, None)?.to_string())
}

fn evaluate_value(
    p: &ActionProposal,
    granted: PermissionTier,
    ledger_path: Option<&str>,
    ledger_key_path: Option<&str>,
) -> Result<Value> {
    let gate = gate(ledger_path, ledger_key_path)?;
    let rows = gate.evaluate_all(&p.actions, granted)?;
    Ok(json!({ "decisions": rows }))
}

/// Appends a reviewer's verdict on the operation `action_json` represents to
/// the JSONL ledger at `ledger_path`; returns the stored record.
pub fn permission_record_decision(
    action_json: &str,
    approve: bool,
    reviewer: &str,
    reason: &str,
    ledger_path: &str,
    evidence: Option<&str>,
) -> Result<String> {
    permission_record_decision_keyed(action_json, approve, reviewer, reason, ledger_path, None, evidence)
}

/// [`permission_record_decision`] on a ledger keyed by the file at
/// `ledger_key_path` (`None`: `CAR_LEDGER_KEY`, else the default key file).
pub fn permission_record_decision_keyed(
    action_json: &str,
    approve: bool,
    reviewer: &str,
    reason: &str,
    ledger_path: &str,
    ledger_key_path: Option<&str>,
    evidence: Option<&str>,
) -> Result<String> {
    let action: Action = crate::ir::from_json_str(action_json)?;
    let rec = gate(Some(ledger_path), ledger_key_path)?.record(
        &action,
        approve,
        reviewer,
        reason,
        evidence.map(|e| Value::String(e.into())),
    )?;
    Ok(serde_json::to_string(&rec).unwrap_or_default())
}

/// Like [`permission_record_decision`], keyed by an explicit fingerprint.
pub fn permission_record_for_fingerprint(
    fingerprint: &str,
    required_tier: &str,
    approve: bool,
    reviewer: &str,
    reason: &str,
    ledger_path: &str,
    evidence: Option<&str>,
) -> Result<String> {
    permission_record_for_fingerprint_keyed(
        fingerprint,
        required_tier,
        approve,
        reviewer,
        reason,
        ledger_path,
        None,
        evidence,
    )
}

/// [`permission_record_for_fingerprint`] on a ledger keyed by the file at
/// `ledger_key_path` (`None`: `CAR_LEDGER_KEY`, else the default key file).
#[allow(clippy::too_many_arguments)]
pub fn permission_record_for_fingerprint_keyed(
    fingerprint: &str,
    required_tier: &str,
    approve: bool,
    reviewer: &str,
    reason: &str,
    ledger_path: &str,
    ledger_key_path: Option<&str>,
    evidence: Option<&str>,
) -> Result<String> {
    let tier = PermissionTier::parse(required_tier).ok_or_else(|| {
        Error::invalid_argument("required_tier", format!("unknown permission tier `{required_tier}`"))
    })?;
    let rec = gate(Some(ledger_path), ledger_key_path)?.record_fingerprint(
        fingerprint,
        tier,
        approve,
        reviewer,
        reason,
        evidence.map(|e| Value::String(e.into())),
    )?;
    Ok(serde_json::to_string(&rec).unwrap_or_default())
}

fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str> {
    super::required(params, name)?.as_str().ok_or_else(|| Error::invalid_argument(name, "must be a string"))
}

fn opt_str_param<'a>(params: &'a Value, name: &str) -> Result<Option<&'a str>> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::invalid_argument(name, "must be a string")),
    }
}

fn proposal_param(params: &Value) -> Result<ActionProposal> {
    crate::ir::parse_proposal_value(super::json_arg(super::required(params, "proposal")?)?)
}

/// Answers the stateless methods of this area; `None` for any other name.
pub(crate) fn call(method: &str, params: &Value) -> Option<Result<Value>> {
    Some(match method {
        "load_policies" => str_param(params, "dir").and_then(load_policies).map(Value::from),
        "lint_policies" => str_param(params, "dir").and_then(lint_policies).and_then(|t| crate::ir::from_json_str(&t)),
        "check_policies" => (|| {
            let proposal = proposal_param(params)?;
            let source = match (
                opt_str_param(params, "dir")?,
                opt_str_param(params, "rules")?,
                opt_str_param(params, "discover_from")?,
            ) {
                (Some(d), None, None) => RuleSource::Dir(d),
                (None, Some(t), None) => RuleSource::Toml(t),
                (None, None, Some(c)) => RuleSource::DiscoverFrom(c),
                _ => {
                    return Err(Error::invalid_argument(
                        "dir",
                        "give exactly one of `dir`, `rules` and `discover_from`",
                    ));
                }
            };
            check_policies_value(source, &proposal)
        })(),
        "permission_classify" => proposal_param(params).map(|p| classify_value(&p)),
        "permission_evaluate" => (|| {
            let proposal = proposal_param(params)?;
            let tier = parse_tier(str_param(params, "granted_tier")?)?;
            evaluate_value(
                &proposal,
                tier,
                opt_str_param(params, "ledger_path")?,
                opt_str_param(params, "ledger_key_path")?,
            )
        })(),
        "permission_record_decision" => (|| {
            let action: Action = crate::ir::from_value(super::json_arg(super::required(params, "action")?)?)?;
            let approve = super::required(params, "approve")?
                .as_bool()
                .ok_or_else(|| Error::invalid_argument("approve", "must be a boolean"))?;
            let reviewer = str_param(params, "reviewer")?;
            let reason = opt_str_param(params, "reason")?.unwrap_or("");
            let ledger = str_param(params, "ledger_path")?;
            let evidence = params.get("evidence").filter(|v| !v.is_null()).cloned();
            let key = opt_str_param(params, "ledger_key_path")?;
            let rec = gate(Some(ledger), key)?.record(&action, approve, reviewer, reason, evidence)?;
            Ok(serde_json::to_value(rec).unwrap_or(Value::Null))
        })(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_shape() {
        let out = permission_classify(
            r#"{"actions":[{"id":"a","type":"tool_call","tool":"deploy","reversibility":"compensable"},
                          {"id":"b","type":"state_read"}]}"#,
        )
        .unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["declared_rollback_contract"], "irreversible");
        assert_eq!(v["classifications"][0]["required_tier"], "full_access");
        assert_eq!(v["classifications"][0]["missing_compensation"], true);
        assert_eq!(v["classifications"][1]["required_tier"], "read_only");
        assert_eq!(v["classifications"][1]["tool"], Value::Null);
    }

    #[test]
    fn lint_flags_rules_that_deny_everything() {
        let out: Value = serde_json::from_str(&lint_policies("tests/policy_fixtures/badpattern").unwrap()).unwrap();
        assert_eq!(out["rule_count"], 2);
        let keys: Vec<&str> = out["warnings"].as_array().unwrap().iter().filter_map(|w| w["key"].as_str()).collect();
        assert_eq!(keys, ["allow_tool_param[0].allow", "deny_tool_param_matching[0].matches"]);
        assert!(out["warnings"][1]["message"].as_str().unwrap().contains("every call to `t` is denied"));
        let e = lint_policies("tests/policy_fixtures/malformed").unwrap_err();
        assert_eq!(e.code(), "unknown_policy_key");
    }

    #[test]
    fn evaluate_rejects_unknown_tier() {
        let e = permission_evaluate(r#"{"actions":[]}"#, "root", None).unwrap_err();
        assert_eq!(e.code(), "invalid_argument");
        assert!(e.to_string().contains("`root`"));
    }
}
