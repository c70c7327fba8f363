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
/// and listed sorted, without repeats ([`Regions::sorted`]).
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
        let (start, mid, end) = self.bounds(j);
        (&self.text[start..mid], &self.text[mid..end])
    }

    /// [`Lines::parts`] as bytes (for the sort: no character boundary to
    /// check).
    fn part_bytes(&self, j: usize) -> (&[u8], &[u8]) {
        let (start, mid, end) = self.bounds(j);
        let b = self.text.as_bytes();
        (&b[start..mid], &b[mid..end])
    }

    /// Where line `j`'s name starts, its id starts and its id ends in `text`.
    fn bounds(&self, j: usize) -> (usize, usize, usize) {
        let (start, mid) = self.starts[j];
        (start, mid, self.starts.get(j + 1).map_or(self.text.len(), |s| s.0))
    }

    /// The lines in order, each once: their indices.
    fn order(&self, mid: &str) -> Vec<u32> {
        let chunk = |j: usize, depth: usize| {
            let (name, id) = self.part_bytes(j);
            crate::bytesort::parts_chunk(&[name, mid.as_bytes(), id, b")"], depth)
        };
        let items = (0..self.starts.len()).map(|j| chunk(j, 0) | j as u128).collect();
        let sorted = crate::bytesort::sort_chunked(items, chunk);
        sorted.order.iter().zip(&sorted.same).filter(|&(_, &same)| !same).map(|(&j, _)| j).collect()
    }

    /// Line `j` written out.
    fn line(&self, prefix: &str, mid: &str, j: u32) -> String {
        let (name, id) = self.parts(j as usize);
        let mut line = String::with_capacity(prefix.len() + name.len() + mid.len() + id.len() + 1);
        line.push_str(prefix);
        line.push_str(name);
        line.push_str(mid);
        line.push_str(id);
        line.push(')');
        line
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

    /// The regions sorted, without repeats.
    pub(crate) fn sorted(self) -> Untested {
        let tool_order = self.tools.order(TOOL_MID);
        let key_order = self.keys.order(KEY_MID);
        Untested { tools: self.tools, tool_order, keys: self.keys, key_order }
    }
}

/// The untested regions in order ([`Regions::sorted`]), not written out yet:
/// as strings ([`Untested::into_strings`], `Evidence::untested_regions`) or
/// straight into `verify`'s JSON answer ([`crate::ir::StrList`]), which
/// then makes no string of its own for each.
pub(crate) struct Untested {
    tools: Lines,
    tool_order: Vec<u32>,
    keys: Lines,
    key_order: Vec<u32>,
}

impl Untested {
    /// How many regions.
    pub(crate) fn len(&self) -> usize {
        self.tool_order.len() + self.key_order.len()
    }

    /// Each kind's lines, prefix, middle and order.
    fn kinds(&self) -> [(&Lines, &'static str, &'static str, &[u32]); 2] {
        [(&self.tools, TOOL_PREFIX, TOOL_MID, &self.tool_order), (&self.keys, KEY_PREFIX, KEY_MID, &self.key_order)]
    }

    /// The regions as `Evidence::untested_regions` lists them.
    pub(crate) fn into_strings(self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.len());
        for (lines, prefix, mid, order) in self.kinds() {
            out.extend(order.iter().map(|&j| lines.line(prefix, mid, j)));
        }
        out
    }
}

impl crate::ir::StrList for Untested {
    fn json_bytes(&self) -> usize {
        // Each line's name and id (repeats included), its constant parts,
        // its quotes and its comma.
        self.kinds()
            .iter()
            .map(|(lines, prefix, mid, order)| lines.text.len() + order.len() * (prefix.len() + mid.len() + 4))
            .sum::<usize>()
            + 2
    }

    fn write_json(&self, out: &mut String) {
        // The prefix and middle need no escape: each line is escaped as its
        // name and id are.
        out.push('[');
        let mut first = true;
        for (lines, prefix, mid, order) in self.kinds() {
            for &j in order {
                if !first {
                    out.push(',');
                }
                first = false;
                let (name, id) = lines.parts(j as usize);
                out.push('"');
                out.push_str(prefix);
                crate::ir::str_contents(out, name);
                out.push_str(mid);
                crate::ir::str_contents(out, id);
                out.push_str(")\"");
            }
        }
        out.push(']');
    }
}

/// The evidence, but for its `untested_regions`, left empty: `untested` is
/// how many there are (the caller writes them, [`Untested`]).
pub(crate) fn build(
    ctx: &Context,
    untested: usize,
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
    let warnings = issues.iter().filter(|i| i.severity == Severity::Warning).count();
    let mut risks = Vec::new();
    if conflicts > 0 {
        risks.push(format!("{conflicts} undeclared write conflict(s) \u{2014} last-writer-wins at runtime"));
    }
    if warnings > 0 {
        risks.push(format!("{warnings} warning(s) not blocking the verdict"));
    }
    if untested > 0 {
        risks.push("outcomes depending on runtime tool output or runtime-set state are unverified".to_string());
    }

    let mut confidence = 1.0_f64;
    if has_tool_calls && !ctx.registry_supplied {
        confidence -= NO_REGISTRY_PENALTY;
    }
    if has_tool_calls && !ctx.schemas_supplied {
        confidence -= NO_SCHEMAS_PENALTY;
    }
    confidence -= (UNTESTED_PENALTY * untested as f64).min(UNTESTED_CAP);
    confidence -= (WARNING_PENALTY * warnings as f64).min(WARNING_CAP);
    let confidence = confidence.clamp(0.0, 1.0);

    Evidence { checks, assumptions, untested_regions: Vec::new(), residual_risks: risks, confidence }
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
        let untested = regions.sorted();
        let mut json = String::new();
        crate::ir::StrList::write_json(&untested, &mut json);
        let got = untested.into_strings();
        assert_eq!(json, serde_json::to_string(&got).unwrap());
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
