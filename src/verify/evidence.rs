//! The evidence bundle of `verify`: what each check verifies and cannot, how
//! many findings it produced, what the verdict assumes and leaves untested, and
//! a confidence in [0, 1].

use crate::ir::{Action, ActionType, Evidence, EvidenceCheck, EvidenceTier, Severity, VerificationIssue};

use super::Findings;

/// Confidence lost when tool calls are checked against no registry.
const NO_REGISTRY_PENALTY: f64 = 0.15;
/// Confidence lost when tool-call parameters are checked against no schema.
const NO_SCHEMAS_PENALTY: f64 = 0.2;
/// Per untested region, up to [`UNTESTED_CAP`].
const UNTESTED_PENALTY: f64 = 0.02;
const UNTESTED_CAP: f64 = 0.25;
/// Per warning, up to [`WARNING_CAP`].
const WARNING_PENALTY: f64 = 0.05;
const WARNING_CAP: f64 = 0.2;

pub(crate) struct Context<'a> {
    pub actions: &'a [Action],
    pub max_actions: u64,
    pub registry_supplied: bool,
    pub schemas_supplied: bool,
    pub compensation_ran: bool,
    pub explicit_deps_ran: bool,
}

fn check(
    name: &str,
    ran: bool,
    verifies: String,
    cannot_verify: &str,
    findings: u64,
    tier: EvidenceTier,
) -> EvidenceCheck {
    EvidenceCheck { name: name.to_string(), ran, verifies, cannot_verify: cannot_verify.to_string(), findings, tier }
}

const TOOL_PREFIX: &str = "runtime output of tool '";
const TOOL_MID: &str = "' (action ";
const KEY_PREFIX: &str = "state key '";
const KEY_MID: &str = "' (value set at runtime by action ";

/// What no static check can see: each tool call's runtime output and each
/// state key a tool call sets. Sorted, without repeats.
///
/// The entries are written once into a contiguous buffer, without their
/// common prefixes (a leading `r` or `s` keeps "runtime output ..." before
/// "state key ..."), and ordered there by [`bytesort`](crate::bytesort),
/// which keeps the sort's memory traffic small for large proposals.
fn untested_regions(actions: &[Action]) -> Vec<String> {
    let mut arena = String::with_capacity(actions.len() * 48);
    let mut spans: Vec<(usize, usize)> = Vec::with_capacity(actions.len() * 2);
    let mut push = |arena: &mut String, group: char, a: &str, mid: &str, b: &str| {
        let start = arena.len();
        arena.push(group);
        arena.push_str(a);
        arena.push_str(mid);
        arena.push_str(b);
        arena.push(')');
        spans.push((start, arena.len()));
    };
    for a in actions {
        if a.action_type != ActionType::ToolCall {
            continue;
        }
        push(&mut arena, 'r', a.tool.as_deref().unwrap_or_default(), TOOL_MID, &a.id);
        for k in a.expected_effects.keys() {
            push(&mut arena, 's', k, KEY_MID, &a.id);
        }
    }
    let sorted = crate::bytesort::sort(spans.len(), |j| &arena.as_bytes()[spans[j].0..spans[j].1]);
    let mut out: Vec<String> = Vec::with_capacity(spans.len());
    for (&j, &same) in sorted.order.iter().zip(&sorted.same) {
        if same {
            continue;
        }
        let (s, e) = spans[j as usize];
        let t = &arena[s..e];
        let (prefix, rest) = match t.strip_prefix('r') {
            Some(rest) => (TOOL_PREFIX, rest),
            None => (KEY_PREFIX, t.strip_prefix('s').unwrap_or(t)),
        };
        let mut line = String::with_capacity(prefix.len() + rest.len());
        line.push_str(prefix);
        line.push_str(rest);
        out.push(line);
    }
    out
}

pub(crate) fn build(ctx: &Context<'_>, f: &Findings, issues: &[VerificationIssue], conflicts: usize) -> Evidence {
    use EvidenceTier::{DecisionProcedure as Dp, Heuristic};
    let mut checks = vec![
        check(
            "resource_bounds",
            true,
            format!("action count is within the limit ({})", ctx.max_actions),
            "per-action cost, wall-clock time, or memory at runtime",
            f.resource,
            Dp,
        ),
        check(
            "loop_detection",
            true,
            "no identical tool call is repeated enough to look like a loop".into(),
            "semantically redundant calls with differing arguments",
            f.loops,
            Heuristic,
        ),
        check(
            "preconditions",
            true,
            "declared preconditions hold against the statically-known state".into(),
            "preconditions over keys whose values are only known at runtime",
            f.preconditions,
            Dp,
        ),
        check(
            "state_dependencies",
            true,
            "each declared state dependency is produced before it is read".into(),
            "undeclared reads \u{2014} state a tool consumes without listing it",
            f.state_deps,
            Dp,
        ),
    ];
    if ctx.explicit_deps_ran {
        checks.push(check(
            "explicit_dependencies",
            true,
            "each explicit dependency names an action of this proposal and no dependency cycle exists".into(),
            "whether the declared order is the order the tools actually need",
            f.explicit_deps,
            Dp,
        ));
    }
    if f.duplicate_ids > 0 {
        checks.push(check(
            "unique_action_ids",
            true,
            "no two actions of the proposal share an id".into(),
            "whether two differently named actions do the same thing",
            f.duplicate_ids,
            Dp,
        ));
    }
    checks.push(check(
        "tool_existence",
        ctx.registry_supplied,
        if ctx.registry_supplied {
            "every tool_call names a registered tool".into()
        } else {
            "(skipped \u{2014} no tool registry supplied)".into()
        },
        "whether the registered tool behaves as its name/description implies",
        f.tools,
        Dp,
    ));
    checks.push(check(
        "param_schema",
        ctx.schemas_supplied,
        if ctx.schemas_supplied {
            "tool_call parameters match the registered JSON Schema (types + required)".into()
        } else {
            "(skipped \u{2014} no tool schemas supplied; existence only)".into()
        },
        "value-level constraints beyond type/required (ranges, formats, cross-field)",
        f.params,
        Dp,
    ));
    checks.push(check(
        "compensation_resolution",
        ctx.compensation_ran,
        "a declared compensation names a registered tool or an action in this proposal, and a `compensable` action declares one at all".into(),
        "whether the named compensation actually undoes the effect \u{2014} that it is the right inverse, and that it will still work later",
        f.compensation,
        Dp,
    ));
    checks.push(check(
        "write_conflicts",
        true,
        "concurrent writers to the same key declare an ordering dependency".into(),
        "semantic conflicts \u{2014} two actions whose effects are logically incompatible",
        f.conflicts,
        Dp,
    ));

    let has_tool_calls = ctx.actions.iter().any(|a| a.action_type == ActionType::ToolCall);
    let mut assumptions = vec![
        "supplied initial-state values are accurate".to_string(),
        "tool implementations honor their declared effects and side effects".to_string(),
    ];
    if has_tool_calls && !ctx.schemas_supplied {
        assumptions.push("tool_call parameters are well-formed (no schemas supplied to check them)".to_string());
    }
    let untested = untested_regions(ctx.actions);
    let warnings = issues.iter().filter(|i| i.severity == Severity::Warning).count();
    let mut risks = Vec::new();
    if conflicts > 0 {
        risks.push(format!("{conflicts} undeclared write conflict(s) \u{2014} last-writer-wins at runtime"));
    }
    if warnings > 0 {
        risks.push(format!("{warnings} warning(s) not blocking the verdict"));
    }
    if !untested.is_empty() {
        risks.push("outcomes depending on runtime tool output or runtime-set state are unverified".to_string());
    }

    let mut confidence = 1.0_f64;
    if has_tool_calls && !ctx.registry_supplied {
        confidence -= NO_REGISTRY_PENALTY;
    }
    if has_tool_calls && !ctx.schemas_supplied {
        confidence -= NO_SCHEMAS_PENALTY;
    }
    confidence -= (UNTESTED_PENALTY * untested.len() as f64).min(UNTESTED_CAP);
    confidence -= (WARNING_PENALTY * warnings as f64).min(WARNING_CAP);
    let confidence = confidence.clamp(0.0, 1.0);

    Evidence { checks, assumptions, untested_regions: untested, residual_risks: risks, confidence }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untested_regions_sort_like_the_formatted_strings() {
        let names = ["t", "t!", "t'", "t'x", "t x", "a", "t(", "", "tt", "t'(action"];
        let ids = ["a", "a1", "a)", "b", "a!", ""];
        let mut actions = Vec::new();
        for (n, tool) in names.iter().enumerate() {
            for id in ids {
                let mut a = Action::tool_call(*tool);
                a.id = format!("{id}{}", n % 2);
                a.expected_effects.insert(tool.to_string(), serde_json::json!(1));
                actions.push(a.clone());
                actions.push(a);
            }
        }
        let got = untested_regions(&actions);
        let mut want: Vec<String> = actions
            .iter()
            .flat_map(|a| {
                let t = format!("runtime output of tool '{}' (action {})", a.tool.as_deref().unwrap_or_default(), a.id);
                let k = a
                    .expected_effects
                    .keys()
                    .map(|k| format!("state key '{k}' (value set at runtime by action {})", a.id));
                std::iter::once(t).chain(k).collect::<Vec<_>>()
            })
            .collect();
        want.sort();
        want.dedup();
        assert_eq!(got, want);
    }
}
