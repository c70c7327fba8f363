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

pub(crate) struct Context {
    /// Some action is a tool call.
    pub has_tool_calls: bool,
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
/// state key a tool call sets, gathered action by action ([`Regions::add`])
/// and listed sorted, without repeats ([`Regions::finish`]).
///
/// Every "runtime output ..." line sorts before every "state key ..." line,
/// so each kind is sorted on its own. Within a kind the lines differ only in
/// the tool or key and the action id; those two are copied back to back into
/// one buffer per kind, and [`bytesort`](crate::bytesort) orders the lines
/// as if written out whole (reading the constant middle from the constant),
/// which keeps the memory the sort walks small for large proposals.
pub(crate) struct Regions {
    tools: Lines,
    keys: Lines,
}

/// Lines `PREFIX + name + MID + id + ")"` of one kind: the `name` and `id`
/// of line `j` are `text[starts[j].0..starts[j].1]` and
/// `text[starts[j].1..starts[j + 1].0]` (the last one ending at the end).
#[derive(Default)]
struct Lines {
    text: String,
    starts: Vec<(usize, usize)>,
}

impl Lines {
    fn with_capacity(lines: usize, bytes: usize) -> Lines {
        Lines { text: String::with_capacity(bytes), starts: Vec::with_capacity(lines) }
    }

    fn push(&mut self, name: &str, id: &str) {
        let start = self.text.len();
        self.text.push_str(name);
        self.starts.push((start, self.text.len()));
        self.text.push_str(id);
    }

    /// Line `j`'s name and id.
    fn parts(&self, j: usize) -> (&str, &str) {
        let (start, mid) = self.starts[j];
        let end = self.starts.get(j + 1).map_or(self.text.len(), |s| s.0);
        (&self.text[start..mid], &self.text[mid..end])
    }

    /// Appends the lines, sorted and without repeats, to `out`.
    fn finish(&self, prefix: &str, mid: &str, out: &mut Vec<String>) {
        let items = (0..self.starts.len())
            .map(|j| {
                let (name, id) = self.parts(j);
                crate::bytesort::parts_chunk(&[name.as_bytes(), mid.as_bytes(), id.as_bytes(), b")"], 0) | j as u128
            })
            .collect();
        let sorted = crate::bytesort::sort_chunked(items, |j, depth| {
            let (name, id) = self.parts(j);
            crate::bytesort::parts_chunk(&[name.as_bytes(), mid.as_bytes(), id.as_bytes(), b")"], depth)
        });
        out.reserve(self.starts.len());
        for (&j, &same) in sorted.order.iter().zip(&sorted.same) {
            if same {
                continue;
            }
            let (name, id) = self.parts(j as usize);
            let mut line = String::with_capacity(prefix.len() + name.len() + mid.len() + id.len() + 1);
            line.push_str(prefix);
            line.push_str(name);
            line.push_str(mid);
            line.push_str(id);
            line.push(')');
            out.push(line);
        }
    }
}

impl Regions {
    /// Room for about `n` actions.
    pub(crate) fn with_capacity(n: usize) -> Regions {
        Regions { tools: Lines::with_capacity(n, n * 16), keys: Lines::with_capacity(n, n * 16) }
    }

    /// Adds the regions of a tool call (other actions have none).
    pub(crate) fn add(&mut self, a: &Action) {
        if a.action_type != ActionType::ToolCall {
            return;
        }
        self.tools.push(a.tool.as_deref().unwrap_or_default(), &a.id);
        for k in a.expected_effects.keys() {
            self.keys.push(k, &a.id);
        }
    }

    /// The regions' descriptions, sorted, without repeats.
    pub(crate) fn finish(self) -> Vec<String> {
        let mut out = Vec::new();
        self.tools.finish(TOOL_PREFIX, TOOL_MID, &mut out);
        self.keys.finish(KEY_PREFIX, KEY_MID, &mut out);
        out
    }
}

pub(crate) fn build(
    ctx: &Context,
    regions: Regions,
    f: &Findings,
    issues: &[VerificationIssue],
    conflicts: usize,
) -> Evidence {
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

    let has_tool_calls = ctx.has_tool_calls;
    let mut assumptions = vec![
        "supplied initial-state values are accurate".to_string(),
        "tool implementations honor their declared effects and side effects".to_string(),
    ];
    if has_tool_calls && !ctx.schemas_supplied {
        assumptions.push("tool_call parameters are well-formed (no schemas supplied to check them)".to_string());
    }
    let untested = regions.finish();
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
        let mut regions = Regions::with_capacity(0);
        for a in &actions {
            regions.add(a);
        }
        let got = regions.finish();
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
