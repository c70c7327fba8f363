//! Static analysis of a proposal: `verify`, `simulate`, `equivalent`,
//! `optimize` and `transaction_check`.
//!
//! Everything here is a pure function of its inputs and linear in the size of
//! the proposal (plus sorting keys and findings): the graph and the key ids
//! come from [`Dag`](crate::dag::Dag), the walk keeps the modelled state in a
//! vector indexed by key id (borrowing values, copying only into the final
//! state), repeated calls are found by hashing a canonical form of `(tool,
//! parameters)`, and "are these two writers ordered?" is answered by [`reach`]
//! without an all-pairs closure. `examples/verify_scale.rs` and
//! `benches/verify.rs` measure chains and wide proposals up to 100,000
//! actions.
//!
//! `verify` and `simulate` walk the same layered order applying
//! `expected_effects`, but differ on an action that cannot run (a failing
//! precondition or a state dependency not yet available): `verify` applies its
//! effects anyway so that it reports every problem in one pass, `simulate`
//! skips them and the skip cascades through data dependencies (spec, "verify
//! and simulate treat blocked actions differently").

mod evidence;
pub(crate) use evidence::Untested;
mod precondition;
mod reach;
mod schema;
mod transaction;

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use serde_json::{Map, Value};

use crate::dag::{Dag, Keys};
use crate::ir::{
    Action, ActionProposal, ActionType, Compensation, EvidenceTier, Severity, ToolSchema, VerificationIssue,
    VerificationResult, json_eq,
};

pub use transaction::{ConflictKind, TransactionConflict, TransactionReport, transaction_check};

/// `max_actions` when the caller gives none (the original runtime's limit).
pub const DEFAULT_MAX_ACTIONS: u64 = 30;

/// A tool call repeated this many times (same tool, same parameters) is an
/// error ("likely loop"); twice is a warning.
pub const LOOP_ERROR_REPEATS: usize = 3;

/// The probe states `equivalent` uses when the caller supplies none.
pub fn default_test_states() -> Vec<Map<String, Value>> {
    let mut xy = Map::new();
    xy.insert("x".into(), Value::from(1));
    xy.insert("y".into(), Value::from(2));
    vec![Map::new(), xy]
}

/// Writers of one key with at most this many members are compared pairwise
/// (as the original runtime does); a key with more writers is checked
/// writer-by-writer against the closest earlier writer only, which keeps the
/// analysis linear.
pub(crate) const PAIRWISE_WRITERS: usize = 16;

/// The optional inputs of [`verify`].
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// The state before the proposal runs; default `{}`.
    pub initial_state: Map<String, Value>,
    /// Names of the registered tools; `None` skips `tool_existence`.
    pub tool_names: Option<Vec<String>>,
    /// Action-count limit; default [`DEFAULT_MAX_ACTIONS`].
    pub max_actions: Option<u64>,
    /// Registered tool schemas; `None` skips `param_schema`. When supplied,
    /// their names are the registry `tool_existence` checks against (in place
    /// of `tool_names`).
    pub tool_schemas: Option<Vec<ToolSchema>>,
}

/// Findings per evidence check, in the order the bundle lists them.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub resource: u64,
    pub loops: u64,
    pub preconditions: u64,
    pub state_deps: u64,
    pub explicit_deps: u64,
    pub duplicate_ids: u64,
    pub tools: u64,
    pub params: u64,
    pub compensation: u64,
    pub conflicts: u64,
}

fn issue(action_id: &str, severity: Severity, message: String, tier: EvidenceTier) -> VerificationIssue {
    VerificationIssue { action_id: action_id.to_string(), severity, message, tier: Some(tier) }
}

fn decided(action_id: &str, severity: Severity, message: String) -> VerificationIssue {
    issue(action_id, severity, message, EvidenceTier::DecisionProcedure)
}

/// The modelled state of the layered walk: each key's value by key id
/// ([`Keys`]), borrowed from the initial state and the actions' effects, so
/// nothing is copied until the final state is built.
type Model<'a> = Vec<Option<&'a Value>>;

/// The model of the initial state ([`Keys::initial`]).
fn start_model<'a>(keys: &Keys<'a>) -> Model<'a> {
    let mut model = vec![None; keys.names().len()];
    for (k, v) in keys.initial() {
        model[k as usize] = Some(v);
    }
    model
}

/// Applies action `i`'s modelled effects ([`Keys::effects`]).
fn apply_effects<'a>(keys: &Keys<'a>, i: usize, model: &mut Model<'a>) {
    for (k, v) in keys.effects(i) {
        model[k as usize] = Some(v);
    }
}

/// The final state of a walk, keys sorted (key ids follow the names' order).
fn final_state(keys: &Keys<'_>, model: &Model<'_>) -> Map<String, Value> {
    let mut state = Map::with_capacity(model.iter().filter(|v| v.is_some()).count());
    for (name, v) in keys.names().iter().zip(model) {
        if let Some(v) = v {
            state.insert((*name).to_string(), (*v).clone());
        }
    }
    state
}

/// Appends the canonical JSON of an object (keys sorted, compact) to `out`.
fn canonical_map<'a, M>(m: &'a M, out: &mut Vec<u8>)
where
    &'a M: IntoIterator<Item = (&'a String, &'a Value), IntoIter: ExactSizeIterator>,
{
    let members = m.into_iter();
    if members.len() <= 1 {
        out.push(b'{');
        for (k, v) in members {
            // Writing JSON into a Vec<u8> cannot fail.
            let _ = serde_json::to_writer(&mut *out, k);
            out.push(b':');
            canonical(v, out);
        }
        out.push(b'}');
        return;
    }
    let mut sorted: Vec<(&String, &Value)> = members.collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    for (n, (k, x)) in sorted.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        // Writing JSON into a Vec<u8> cannot fail.
        let _ = serde_json::to_writer(&mut *out, k);
        out.push(b':');
        canonical(x, out);
    }
    out.push(b'}');
}

/// Appends the canonical JSON of `v` (object keys sorted, compact) to `out`.
pub(crate) fn canonical_json(v: &Value, out: &mut Vec<u8>) {
    canonical(v, out)
}

/// Appends the canonical JSON of `v` (object keys sorted, compact) to `out`.
fn canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => canonical_map(m, out),
        Value::Array(items) => {
            out.push(b'[');
            for (n, x) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                canonical(x, out);
            }
            out.push(b']');
        }
        // Writing JSON into a Vec<u8> cannot fail.
        other => {
            let _ = serde_json::to_writer(&mut *out, other);
        }
    }
}

/// Groups of identical tool calls (same tool, canonically equal parameters),
/// gathered call by call ([`CallGroups::add`]).
///
/// Each call's canonical form is written into one shared buffer and hashed;
/// groups with the same hash are told apart by comparing their bytes, so
/// nothing is allocated per call.
struct CallGroups<'a> {
    hasher: std::collections::hash_map::RandomState,
    arena: Vec<u8>,
    groups: Vec<Group<'a>>,
    /// The latest group of each hash; the hash is already a good one, so the
    /// table uses it as is.
    head: HashMap<u64, usize, std::hash::BuildHasherDefault<Prehashed>>,
}

struct Group<'a> {
    tool: &'a str,
    count: usize,
    span: std::ops::Range<usize>,
    next: Option<usize>,
}

/// A [`Hasher`](std::hash::Hasher) for keys that are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, h: u64) {
        self.0 = h;
    }
}

impl<'a> CallGroups<'a> {
    /// Room for about `n` calls.
    fn with_capacity(n: usize) -> CallGroups<'a> {
        CallGroups {
            hasher: std::collections::hash_map::RandomState::new(),
            arena: Vec::with_capacity(n * 24),
            groups: Vec::new(),
            head: HashMap::with_capacity_and_hasher(n, Default::default()),
        }
    }

    /// Adds one call.
    fn add(&mut self, tool: &'a str, parameters: &crate::ir::Object) {
        let arena = &mut self.arena;
        let start = arena.len();
        arena.extend_from_slice(tool.as_bytes());
        arena.push(0);
        canonical_map(parameters, arena);
        let h = self.hasher.hash_one(&arena[start..]);
        let mut at = self.head.get(&h).copied();
        while let Some(g) = at {
            let group = &mut self.groups[g];
            if arena[group.span.clone()] == arena[start..] {
                group.count += 1;
                arena.truncate(start);
                return;
            }
            at = group.next;
        }
        let next = self.head.insert(h, self.groups.len());
        self.groups.push(Group { tool, count: 1, span: start..arena.len(), next });
    }

    /// `(tool, count)` for each call made more than once, in order of first
    /// occurrence.
    fn repeated(self) -> Vec<(String, usize)> {
        self.groups.into_iter().filter(|g| g.count >= 2).map(|g| (g.tool.to_string(), g.count)).collect()
    }
}

/// Calls `f` with each key an action writes (for ordering and conflicts),
/// in name order, without repeats.
fn for_each_write<'a>(a: &'a Action, mut f: impl FnMut(&'a str)) {
    if a.expected_effects.len() + usize::from(a.state_write_key().is_some()) <= 1 {
        Dag::writes(a).for_each(f);
        return;
    }
    let mut w: Vec<&str> = Dag::writes(a).collect();
    w.sort_unstable();
    w.dedup();
    w.into_iter().for_each(&mut f);
}

/// `(writer_a, writer_b, key)` for writers of one key that no path of the
/// graph orders, as indices; grouped by key in order of first write.
pub(crate) fn write_conflicts(actions: &[Action], dag: &Dag) -> Vec<(usize, usize, String)> {
    if !dag.has_shared_writes() {
        return Vec::new();
    }
    // Key -> (first writer, slot of the full writer list once a second appears).
    let mut first: HashMap<&str, (usize, usize)> = HashMap::with_capacity(actions.len());
    let mut shared: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, a) in actions.iter().enumerate() {
        for_each_write(a, |k| match first.get_mut(k) {
            None => {
                first.insert(k, (i, usize::MAX));
            }
            Some((w0, slot)) => {
                if *slot == usize::MAX {
                    *slot = shared.len();
                    shared.push((k, vec![*w0]));
                }
                shared[*slot].1.push(i);
            }
        });
    }
    let mut out = Vec::new();
    if shared.is_empty() {
        return out;
    }
    // Keys in order of their first write.
    shared.sort_by_key(|(k, ws)| (ws[0], *k));
    let mut reach = reach::Reach::new(dag);
    for (key, ws) in &shared {
        if ws.len() <= PAIRWISE_WRITERS {
            for (x, &i) in ws.iter().enumerate() {
                for &j in &ws[x + 1..] {
                    if !reach.ordered(i, j) {
                        out.push((i, j, key.to_string()));
                    }
                }
            }
        } else {
            for pair in ws.windows(2) {
                if !reach.ordered(pair[0], pair[1]) {
                    out.push((pair[0], pair[1], key.to_string()));
                }
            }
        }
    }
    out
}

/// Checks a proposal without running it. See the spec's "What verify detects".
pub fn verify(proposal: &ActionProposal, opts: &VerifyOptions) -> VerificationResult {
    let (mut r, untested) = verify_parts(proposal, opts);
    r.evidence.untested_regions = untested.into_strings();
    r
}

/// [`verify`], its evidence's `untested_regions` left empty and given apart,
/// not yet written out: the JSON facade writes them straight into its
/// answer (`ir::verification_to_json`).
pub(crate) fn verify_parts(proposal: &ActionProposal, opts: &VerifyOptions) -> (VerificationResult, Untested) {
    let actions = &proposal.actions;
    let n = actions.len();
    // What the checks below need from every action's strings is gathered in
    // the pass that builds the graph, so that a proposal too large for the
    // caches streams through them once: the tool calls (for repeats), the
    // untested regions, the ids (for repeats) and a few flags.
    let mut calls = CallGroups::with_capacity(n);
    let mut regions = evidence::Regions::with_capacity(n);
    let mut id_items: Vec<u128> = Vec::with_capacity(n);
    let (mut has_tool_calls, mut uses_explicit_deps, mut compensation_refs) = (false, false, false);
    let (dag, keys) = Dag::build_keyed_visiting(actions, &opts.initial_state, |i, a| {
        id_items.push(crate::bytesort::item(a.id.as_bytes(), i));
        if a.action_type == ActionType::ToolCall {
            has_tool_calls = true;
            if let Some(tool) = a.tool.as_deref() {
                calls.add(tool, &a.parameters);
            }
            regions.add(a);
        }
        uses_explicit_deps |= !a.dependencies.is_empty();
        compensation_refs |= matches!(a.compensation.as_deref(), Some(Compensation::ActionRef { .. }));
    });
    let max = opts.max_actions.unwrap_or(DEFAULT_MAX_ACTIONS);
    let mut f = Findings::default();
    let mut issues: Vec<VerificationIssue> = Vec::new();

    if n as u64 > max
        && let Some(first) = actions.first()
    {
        issues.push(decided(&first.id, Severity::Warning, format!("excessive actions: {n} (limit {max})")));
        f.resource += 1;
    }

    for (tool, count) in calls.repeated() {
        let (severity, message) = if count >= LOOP_ERROR_REPEATS {
            (Severity::Error, format!("repeated identical tool call: {tool} ({count}x) \u{2014} likely loop"))
        } else {
            (Severity::Warning, format!("duplicate tool call: {tool} ({count}x)"))
        };
        issues.push(issue("proposal", severity, message, EvidenceTier::Heuristic));
        f.loops += 1;
    }

    // Ids must be unique within a proposal: one finding per repeated id, in
    // order of its first action.
    let ids_sorted = crate::bytesort::sort_items(id_items, |i| actions[i].id.as_bytes());
    let mut firsts: Vec<usize> = crate::dag::duplicates(&ids_sorted).into_iter().map(|(_, first)| first).collect();
    drop(ids_sorted);
    firsts.sort_unstable();
    for run in firsts.chunk_by(|a, b| a == b) {
        let id = &actions[run[0]].id;
        let count = run.len() + 1;
        issues.push(decided(
            id,
            Severity::Error,
            format!("action id '{id}' is used by {count} actions; ids must be unique within a proposal"),
        ));
        f.duplicate_ids += 1;
    }

    // The registry: the schemas when supplied (they are the richer
    // description of the registered tools), else the names.
    let registry: Option<HashSet<&str>> = match (&opts.tool_schemas, &opts.tool_names) {
        (Some(schemas), _) => Some(schemas.iter().map(|s| s.name.as_str()).collect()),
        (None, Some(names)) => Some(names.iter().map(String::as_str).collect()),
        (None, None) => None,
    };
    let schemas: Option<HashMap<&str, &Value>> =
        opts.tool_schemas.as_ref().map(|ss| ss.iter().map(|s| (s.name.as_str(), &s.parameters)).collect());
    let ids: HashSet<&str> =
        if compensation_refs { actions.iter().map(|a| a.id.as_str()).collect() } else { HashSet::new() };
    let mut unknown_deps: HashMap<usize, Vec<&str>> = HashMap::new();
    for (i, id) in dag.unknown_dependencies() {
        unknown_deps.entry(*i).or_default().push(id.as_str());
    }
    let mut compensation_checkable = false;

    let mut static_checks = |i: usize, a: &Action, issues: &mut Vec<VerificationIssue>, f: &mut Findings| {
        for id in unknown_deps.get(&i).into_iter().flatten() {
            issues.push(decided(&a.id, Severity::Error, format!("dependency on unknown action '{id}'")));
            f.explicit_deps += 1;
        }
        if a.action_type == ActionType::ToolCall
            && let Some(tool) = a.tool.as_deref()
        {
            if let Some(reg) = &registry
                && !reg.contains(tool)
            {
                issues.push(decided(&a.id, Severity::Error, format!("tool '{tool}' is not registered")));
                f.tools += 1;
            }
            if let Some(schema) = schemas.as_ref().and_then(|s| s.get(tool)) {
                for m in schema::check(tool, schema, &a.parameters) {
                    issues.push(decided(&a.id, Severity::Error, m));
                    f.params += 1;
                }
            }
        }
        if a.missing_required_compensation() {
            compensation_checkable = true;
            issues.push(decided(
                &a.id,
                Severity::Error,
                "action declares reversibility 'compensable' but no compensation".to_string(),
            ));
            f.compensation += 1;
        }
        match a.compensation.as_deref() {
            Some(Compensation::Tool { tool, .. }) => {
                if let Some(reg) = &registry
                    && !reg.contains(tool.as_str())
                {
                    issues.push(decided(
                        &a.id,
                        Severity::Error,
                        format!("compensation names tool '{tool}', which is not registered"),
                    ));
                    f.compensation += 1;
                }
            }
            Some(Compensation::ActionRef { action_id }) => {
                compensation_checkable = true;
                if !ids.contains(action_id.as_str()) {
                    issues.push(decided(
                        &a.id,
                        Severity::Error,
                        format!("compensation references action '{action_id}', which is not in this proposal"),
                    ));
                    f.compensation += 1;
                }
            }
            None => {}
        }
    };

    let mut model = start_model(&keys);
    // The execution levels as ids, built in the walk that reads each action
    // anyway.
    let mut execution_levels: Vec<Vec<String>> = Vec::with_capacity(dag.levels().len());
    for level in dag.levels() {
        let mut ids = Vec::with_capacity(level.len());
        for &i in level {
            let a = &actions[i];
            ids.push(a.id.clone());
            for (pc, k) in keys.tests(i) {
                let current = model[k as usize];
                if !pc.evaluate_value(current) {
                    let m = precondition::failure_message(pc, current);
                    issues.push(decided(&a.id, Severity::Error, m));
                    f.preconditions += 1;
                }
            }
            for (j, &k) in keys.reads(i).iter().enumerate() {
                if model[k as usize].is_none() {
                    let key = &a.state_dependencies[j];
                    let m = format!("state dependency '{key}' not available at this point");
                    issues.push(decided(&a.id, Severity::Error, m));
                    f.state_deps += 1;
                }
            }
            static_checks(i, a, &mut issues, &mut f);
            apply_effects(&keys, i, &mut model);
        }
        execution_levels.push(ids);
    }
    for &i in dag.cyclic() {
        let a = &actions[i];
        issues.push(decided(
            &a.id,
            Severity::Error,
            "action is in or behind a cycle of explicit `dependencies` and can never run".to_string(),
        ));
        f.explicit_deps += 1;
        static_checks(i, a, &mut issues, &mut f);
    }
    let state = final_state(&keys, &model);

    let conflicts: Vec<(String, String, String)> = write_conflicts(actions, &dag)
        .into_iter()
        .map(|(i, j, key)| {
            let (a, b) = (&actions[i].id, &actions[j].id);
            issues.push(decided(
                a,
                Severity::Warning,
                format!("write conflict on '{key}' with action {b} (no dependency declared)"),
            ));
            (a.clone(), b.clone(), key)
        })
        .collect();
    f.conflicts = conflicts.len() as u64;

    let ctx = evidence::Context {
        has_tool_calls,
        max_actions: max,
        registry_supplied: registry.is_some(),
        schemas_supplied: schemas.is_some(),
        compensation_ran: registry.is_some() || compensation_checkable,
        explicit_deps_ran: uses_explicit_deps || !dag.cyclic().is_empty(),
    };
    let untested = regions.sorted();
    let evidence = evidence::build(&ctx, untested.len(), &f, &issues, conflicts.len());
    let valid = !issues.iter().any(|i| i.severity == Severity::Error);
    (VerificationResult { valid, issues, simulated_state: state, execution_levels, conflicts, evidence }, untested)
}

/// The state the executor would leave behind: the layered walk of [`verify`],
/// except that an action that cannot run (a precondition fails, a state
/// dependency is not available, an explicit dependency was itself blocked,
/// names no action, or is part of a cycle) contributes nothing. Keys sorted.
pub fn simulate(proposal: &ActionProposal, initial_state: &Map<String, Value>) -> Map<String, Value> {
    let actions = &proposal.actions;
    let (dag, keys) = Dag::build_keyed(actions, initial_state);
    let mut blocked = vec![false; actions.len()];
    for &i in dag.cyclic() {
        blocked[i] = true;
    }
    for (i, _) in dag.unknown_dependencies() {
        blocked[*i] = true;
    }
    let mut model = start_model(&keys);
    for level in dag.levels() {
        for &i in level {
            // An unknown dependency already blocked the action.
            let runs = !blocked[i]
                && keys.deps(i).iter().all(|&j| !blocked[j as usize])
                && keys.tests(i).all(|(pc, k)| pc.evaluate_value(model[k as usize]))
                && keys.reads(i).iter().all(|&k| model[k as usize].is_some());
            if runs {
                apply_effects(&keys, i, &mut model);
            } else {
                blocked[i] = true;
            }
        }
    }
    final_state(&keys, &model)
}

/// True when `simulate` gives equal final states (numbers by value) for both
/// proposals from every probe state; [`default_test_states`] when `None`.
/// This samples: it does not decide equivalence over all starting states.
pub fn equivalent(p1: &ActionProposal, p2: &ActionProposal, test_states: Option<&[Map<String, Value>]>) -> bool {
    let defaults;
    let probes = match test_states {
        Some(s) => s,
        None => {
            defaults = default_test_states();
            &defaults
        }
    };
    probes.iter().all(|s| {
        let a = Value::Object(simulate(p1, s));
        let b = Value::Object(simulate(p2, s));
        json_eq(&a, &b)
    })
}

/// Drops phantom `state_dependencies` (keys no action of the proposal writes:
/// they order nothing) so independent actions share a level. Never reorders,
/// adds or drops actions, and keeps explicit `dependencies`.
pub fn optimize(proposal: &ActionProposal) -> ActionProposal {
    let mut out = proposal.clone();
    optimize_in_place(&mut out);
    out
}

/// [`optimize`] without the copy: prunes the proposal's own phantom
/// `state_dependencies`. A proposal without state dependencies is left as it
/// is without building anything.
pub fn optimize_in_place(proposal: &mut ActionProposal) {
    if proposal.actions.iter().all(|a| a.state_dependencies.is_empty()) {
        return;
    }
    // Which dependencies each action with a phantom one keeps (the written
    // keys are borrowed from the proposal, so the pruning happens after).
    let prune: Vec<(usize, Vec<bool>)> = {
        let mut written: HashSet<&str> = HashSet::with_capacity(proposal.actions.len());
        written.extend(proposal.actions.iter().flat_map(Dag::writes));
        proposal
            .actions
            .iter()
            .enumerate()
            .filter(|(_, a)| !a.state_dependencies.iter().all(|k| written.contains(k.as_str())))
            .map(|(i, a)| (i, a.state_dependencies.iter().map(|k| written.contains(k.as_str())).collect()))
            .collect()
    };
    for (i, keep) in prune {
        let mut keep = keep.into_iter();
        proposal.actions[i].state_dependencies.retain(|_| keep.next().unwrap_or(true));
    }
}

#[cfg(test)]
mod tests;
