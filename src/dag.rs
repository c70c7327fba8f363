//! The dependency graph of a proposal's actions.
//!
//! An edge `i -> j` means action `i` must finish before action `j` starts. Edges
//! come from two places:
//!
//! - `state_dependencies`: action `j` reads key `k`, and action `i` is the most
//!   recent action *before* `j` in the proposal that writes `k`. A key written
//!   only by a later action (or by `j` itself) orders nothing: it is a missing
//!   dependency, which `verify` reports, not an edge.
//! - `dependencies`: action `j` lists the id of action `i` (earlier or later).
//!   An id no action carries is recorded in
//!   [`unknown_dependencies`](Dag::unknown_dependencies); when ids repeat, the
//!   first action carrying the id is the one depended on.
//!
//! - a `state_write` follows the previous `state_write` of the same `key`, so
//!   direct writes to one key land in proposal order (as in the original
//!   runtime).
//!
//! What an action writes, for ordering, is what the forward model applies: the
//! keys of its `expected_effects` plus a `state_write`'s `key` parameter (see
//! [`Dag::writes`]). Building gathers every key mention in one pass, orders the
//! mentions once by their bytes ([`bytesort`](crate::bytesort)) to give each
//! key an id, and is otherwise linear in the total size of the proposal;
//! action ids are hashed only when some action lists `dependencies`.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::ir::{Action, Precondition};

/// The dependency graph of a proposal's actions, by index into the action list.
#[derive(Debug, Clone, Default)]
pub struct Dag {
    /// Predecessors of action `i`: `preds[pred_start[i]..pred_start[i + 1]]`.
    preds: Vec<usize>,
    pred_start: Vec<usize>,
    levels: Vec<Vec<usize>>,
    cyclic: Vec<usize>,
    unknown: Vec<(usize, String)>,
    /// Some key is written by two or more actions.
    shared_writes: bool,
}

impl Dag {
    /// Builds the graph of a proposal's actions: an edge i -> j when action j
    /// lists in `state_dependencies` a key that an earlier action i writes (the
    /// most recent earlier writer), and when j lists i's id in `dependencies`.
    pub fn build(actions: &[Action]) -> Dag {
        build(actions, None, |_, _| {}).0
    }

    /// [`Dag::build`], also calling `visit(i, action)` for each action in
    /// order, in the pass that reads it anyway; with the graph, how many
    /// writes the actions make (each `state_write`'s key and every
    /// `expected_effects` entry).
    pub(crate) fn build_visiting<'a>(actions: &'a [Action], visit: impl FnMut(usize, &'a Action)) -> (Dag, usize) {
        let (dag, keys) = build(actions, None, visit);
        (dag, keys.initial_at - keys.writes_at)
    }

    /// [`Dag::build`], also returning the state keys of the proposal and of
    /// `initial` as small ids (see [`Keys`]), so that a walk over the graph
    /// can keep its state in a vector.
    pub(crate) fn build_keyed<'a>(actions: &'a [Action], initial: &'a Map<String, Value>) -> (Dag, Keys<'a>) {
        build(actions, Some(initial), |_, _| {})
    }

    /// [`Dag::build_keyed`], also calling `visit(i, action)` for each action
    /// in order, in the pass that reads it anyway: a caller that needs more
    /// from every action reads a large proposal from memory once, not twice.
    pub(crate) fn build_keyed_visiting<'a>(
        actions: &'a [Action],
        initial: &'a Map<String, Value>,
        visit: impl FnMut(usize, &'a Action),
    ) -> (Dag, Keys<'a>) {
        build(actions, Some(initial), visit)
    }

    /// The keys an action writes for ordering purposes: its `expected_effects`
    /// keys, then a `state_write`'s `key` parameter.
    pub fn writes(action: &Action) -> impl Iterator<Item = &str> {
        action.expected_effects.keys().map(String::as_str).chain(action.state_write_key())
    }

    /// Layered topological order as indices into `actions`; actions in the
    /// same level are independent and listed in proposal order. Actions in or
    /// behind a cycle are in no level.
    pub fn levels(&self) -> &[Vec<usize>] {
        &self.levels
    }

    /// Direct predecessors of action i (ascending, no repeats); empty for an
    /// index out of range.
    pub fn predecessors(&self, i: usize) -> &[usize] {
        match (self.pred_start.get(i), self.pred_start.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.preds[a..b],
            _ => &[],
        }
    }

    /// Indices of actions that are part of (or depend on) a cycle, ascending.
    pub fn cyclic(&self) -> &[usize] {
        &self.cyclic
    }

    /// `(action index, missing id)` for each explicit dependency on an unknown
    /// action id, in proposal order.
    pub fn unknown_dependencies(&self) -> &[(usize, String)] {
        &self.unknown
    }

    /// True when some key is written by two or more actions (so writers of one
    /// key may conflict).
    pub fn has_shared_writes(&self) -> bool {
        self.shared_writes
    }

    /// The number of actions the graph was built from.
    pub fn len(&self) -> usize {
        self.pred_start.len().saturating_sub(1)
    }

    /// True when the graph was built from no actions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `(action index, index of the first action with the same id)` for each
/// action whose id an earlier action already carries, in proposal order.
///
/// Ids are meant to be unique within a proposal; `verify` reports a repeat
/// and the engine refuses to run a proposal with one. The graph itself is by
/// position, so a repeat never merges two actions, and a dependency on a
/// repeated id names its first action.
pub fn duplicate_ids(actions: &[Action]) -> Vec<(usize, usize)> {
    duplicates(&crate::bytesort::sort(actions.len(), |i| actions[i].id.as_bytes()))
}

/// [`duplicate_ids`] from the actions' ids in byte order.
pub(crate) fn duplicates(sorted: &crate::bytesort::Sorted) -> Vec<(usize, usize)> {
    // Sorting the ids puts the actions sharing one next to each other, first
    // action first.
    let mut out = Vec::new();
    let mut first = 0;
    for (&i, &same) in sorted.order.iter().zip(&sorted.same) {
        if same {
            out.push((i as usize, first));
        } else {
            first = i as usize;
        }
    }
    out.sort_unstable();
    out
}

/// `null`: the value a `state_write` without a `value` parameter writes.
static NULL: Value = Value::Null;

/// Marks "no action" in the `u32` tables below.
const NONE: u32 = u32::MAX;

/// The state keys of a proposal (and of the state it starts from), each with
/// a small id, and per action the ids of the keys it reads, tests and writes,
/// so that a walk over the graph keeps the modelled state in a vector and
/// never looks a key up. Built by [`Dag::build_keyed`].
///
/// Ids follow the byte order of the key names, so a walk's final state comes
/// out sorted by key. They are found by sorting every mention of a key
/// ([`bytesort`](crate::bytesort)) rather than by hashing each one into a
/// table, which keeps the memory traffic sequential for large proposals.
#[derive(Debug, Default)]
pub(crate) struct Keys<'a> {
    /// Key names by id, ascending.
    names: Vec<&'a str>,
    /// Key ids of every mention: all actions' reads (`state_dependencies`),
    /// then all their tests (`preconditions`' keys), then all their writes,
    /// then the initial state's keys. An action's writes are in the order
    /// they are applied: a `state_write`'s `key`, then the `expected_effects`
    /// keys (so an effect on the same key wins).
    ids: Vec<u32>,
    /// Where the tests, the writes and the initial keys start in `ids`.
    tests_at: usize,
    writes_at: usize,
    initial_at: usize,
    /// Per action, where its reads, tests and writes end, each counted from
    /// the start of its group.
    ends: Vec<[u32; 3]>,
    /// The preconditions, in parallel with the tests.
    conditions: Vec<&'a Precondition>,
    /// The values written, in parallel with the writes.
    values: Vec<&'a Value>,
    /// The initial state's values, in parallel with its keys.
    initial: Vec<&'a Value>,
    /// Per action, the actions its `dependencies` name, in order (the first
    /// action carrying each id), without the unknown ids (the graph records
    /// those): `deps[dep_start[i]..dep_start[i + 1]]`. Empty when no action
    /// has explicit dependencies.
    deps: Vec<u32>,
    dep_start: Vec<u32>,
}

impl<'a> Keys<'a> {
    /// The key names, by id (ascending).
    pub(crate) fn names(&self) -> &[&'a str] {
        &self.names
    }

    /// Action `i`'s range in group `g` (0 reads, 1 tests, 2 writes), counted
    /// from the start of the group.
    fn range(&self, i: usize, g: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { 0 } else { self.ends[i - 1][g] as usize };
        start..self.ends[i][g] as usize
    }

    /// Ids of action `i`'s `state_dependencies`, in order.
    pub(crate) fn reads(&self, i: usize) -> &[u32] {
        &self.ids[self.range(i, 0)]
    }

    /// Action `i`'s `preconditions` with the ids of their keys, in order.
    pub(crate) fn tests(&self, i: usize) -> impl Iterator<Item = (&'a Precondition, u32)> + '_ {
        let r = self.range(i, 1);
        let ids = &self.ids[self.tests_at..self.writes_at][r.clone()];
        self.conditions[r].iter().copied().zip(ids.iter().copied())
    }

    /// The modelled effects of action `i` in the order they are applied:
    /// `(key id, value)` for a `state_write`'s `key` parameter (its `value`
    /// parameter, `null` when absent), then for each `expected_effects` entry.
    pub(crate) fn effects(&self, i: usize) -> impl Iterator<Item = (u32, &'a Value)> + '_ {
        let r = self.range(i, 2);
        let ids = &self.ids[self.writes_at..self.initial_at][r.clone()];
        ids.iter().copied().zip(self.values[r].iter().copied())
    }

    /// The initial state as `(key id, value)`.
    pub(crate) fn initial(&self) -> impl Iterator<Item = (u32, &'a Value)> + '_ {
        self.ids[self.initial_at..].iter().copied().zip(self.initial.iter().copied())
    }

    /// The actions action `i` names in `dependencies` (the first action
    /// carrying each id), without the unknown ids.
    pub(crate) fn deps(&self, i: usize) -> &[u32] {
        match (self.dep_start.get(i), self.dep_start.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.deps[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// Builds the graph and the [`Keys`] of `actions` and `initial`.
///
/// One pass over the actions gathers every key mention; sorting the mentions
/// gives the key ids; a second pass over the gathered ids (not the actions)
/// gives the edges. Action ids are hashed only when some action lists
/// explicit `dependencies`.
fn build<'a>(
    actions: &'a [Action],
    initial: Option<&'a Map<String, Value>>,
    mut visit: impl FnMut(usize, &'a Action),
) -> (Dag, Keys<'a>) {
    let n = actions.len();
    let mut reads: Vec<&str> = Vec::new();
    let mut tests: Vec<&str> = Vec::new();
    let mut writes: Vec<&str> = Vec::with_capacity(n);
    let mut keys = Keys { values: Vec::with_capacity(n), ends: Vec::with_capacity(n), ..Keys::default() };
    // Per action: does its first write come from a `state_write`'s key?
    let mut state_write = vec![false; n];
    let mut any_deps = false;
    for (i, a) in actions.iter().enumerate() {
        reads.extend(a.state_dependencies.iter().map(String::as_str));
        for pc in &a.preconditions {
            tests.push(&pc.key);
            keys.conditions.push(pc);
        }
        if let Some(key) = a.state_write_key() {
            writes.push(key);
            keys.values.push(a.parameters.get("value").unwrap_or(&NULL));
            state_write[i] = true;
        }
        for (key, value) in &a.expected_effects {
            writes.push(key);
            keys.values.push(value);
        }
        keys.ends.push([reads.len() as u32, tests.len() as u32, writes.len() as u32]);
        any_deps |= !a.dependencies.is_empty();
        visit(i, a);
    }
    let initial_keys: Vec<&str> = initial.map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
    keys.initial = initial.map(|m| m.values().collect()).unwrap_or_default();
    keys.tests_at = reads.len();
    keys.writes_at = keys.tests_at + tests.len();
    keys.initial_at = keys.writes_at + writes.len();
    let total = keys.initial_at + initial_keys.len();
    let key = |m: usize| -> &str {
        if m < keys.tests_at {
            reads[m]
        } else if m < keys.writes_at {
            tests[m - keys.tests_at]
        } else if m < keys.initial_at {
            writes[m - keys.writes_at]
        } else {
            initial_keys[m - keys.initial_at]
        }
    };
    let sorted = crate::bytesort::sort(total, |m| key(m).as_bytes());
    let mut ids = vec![0u32; total];
    let mut names: Vec<&str> = Vec::new();
    for (&m, &same) in sorted.order.iter().zip(&sorted.same) {
        if !same {
            names.push(key(m as usize));
        }
        ids[m as usize] = names.len() as u32 - 1;
    }
    drop(sorted);
    keys.names = names;
    keys.ids = ids;

    // Explicit dependencies, resolved to the first action carrying each id.
    let mut unknown = Vec::new();
    if any_deps {
        let mut first: HashMap<&str, u32> = HashMap::with_capacity(n);
        for (i, a) in actions.iter().enumerate() {
            first.entry(a.id.as_str()).or_insert(i as u32);
        }
        keys.dep_start.reserve(n + 1);
        keys.dep_start.push(0);
        for (j, a) in actions.iter().enumerate() {
            for dep in &a.dependencies {
                match first.get(dep.as_str()) {
                    Some(&i) => keys.deps.push(i),
                    None => unknown.push((j, dep.clone())),
                }
            }
            keys.dep_start.push(keys.deps.len() as u32);
        }
    }

    // By key id: the most recent writer so far, and the most recent
    // `state_write` of the key.
    let mut last_writer: Vec<u32> = vec![NONE; keys.names.len()];
    let mut last_state_write: Vec<u32> = Vec::new();
    let mut preds: Vec<usize> = Vec::new();
    let mut pred_start: Vec<usize> = Vec::with_capacity(n + 1);
    // Depth of each action while every edge points backwards (then the
    // levels need no second pass); a forward edge needs Kahn's algorithm.
    let mut depth: Vec<u32> = Vec::with_capacity(n);
    let mut forward = false;
    let mut shared_writes = false;
    for (j, &sets_state) in state_write.iter().enumerate() {
        let start = preds.len();
        pred_start.push(start);
        for &k in keys.reads(j) {
            let i = last_writer[k as usize];
            if i != NONE {
                preds.push(i as usize);
            }
        }
        for &i in keys.deps(j) {
            forward |= i as usize >= j;
            preds.push(i as usize);
        }
        let w = keys.range(j, 2);
        let write_ids = &keys.ids[keys.writes_at..keys.initial_at][w];
        if sets_state {
            let k = write_ids[0] as usize;
            if last_state_write.is_empty() {
                last_state_write = vec![NONE; keys.names.len()];
            }
            let prev = std::mem::replace(&mut last_state_write[k], j as u32);
            if prev != NONE {
                preds.push(prev as usize);
            }
        }
        let mine = &mut preds[start..];
        if mine.len() > 1 {
            mine.sort_unstable();
            let mut w = 1;
            for r in 1..mine.len() {
                if mine[r] != mine[w - 1] {
                    mine[w] = mine[r];
                    w += 1;
                }
            }
            preds.truncate(start + w);
        }
        if !forward {
            depth.push(preds[start..].iter().map(|&i| depth[i] + 1).max().unwrap_or(0));
        }
        for &k in write_ids {
            let prev = std::mem::replace(&mut last_writer[k as usize], j as u32);
            shared_writes |= prev != NONE && prev != j as u32;
        }
    }
    pred_start.push(preds.len());
    let (levels, cyclic) = if forward { layer(&preds, &pred_start) } else { (by_depth(&depth), Vec::new()) };
    (Dag { preds, pred_start, levels, cyclic, unknown, shared_writes }, keys)
}

/// The levels of actions of known depth, each in proposal order.
fn by_depth(depth: &[u32]) -> Vec<Vec<usize>> {
    let Some(&max) = depth.iter().max() else { return Vec::new() };
    let mut count = vec![0usize; max as usize + 1];
    for &d in depth {
        count[d as usize] += 1;
    }
    let mut levels: Vec<Vec<usize>> = count.into_iter().map(Vec::with_capacity).collect();
    for (i, &d) in depth.iter().enumerate() {
        levels[d as usize].push(i);
    }
    levels
}

/// Kahn's algorithm: depth of each node is 1 + the deepest predecessor; nodes
/// never reaching in-degree 0 are cyclic (in or behind a cycle).
fn layer(preds: &[usize], pred_start: &[usize]) -> (Vec<Vec<usize>>, Vec<usize>) {
    let n = pred_start.len().saturating_sub(1);
    let of = |j: usize| &preds[pred_start[j]..pred_start[j + 1]];
    let mut succ_count = vec![0usize; n];
    for &i in preds {
        succ_count[i] += 1;
    }
    // Compressed successor lists (CSR) to keep allocation linear and small.
    let mut offset = Vec::with_capacity(n + 1);
    let mut acc = 0usize;
    for &c in &succ_count {
        offset.push(acc);
        acc += c;
    }
    offset.push(acc);
    let mut fill = offset.clone();
    let mut succ = vec![0usize; acc];
    for j in 0..n {
        for &i in of(j) {
            succ[fill[i]] = j;
            fill[i] += 1;
        }
    }
    let mut indeg: Vec<usize> = (0..n).map(|j| of(j).len()).collect();
    let mut depth = vec![0usize; n];
    let mut queue: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut head = 0;
    let mut done = vec![false; n];
    let mut max_depth = 0;
    while head < queue.len() {
        let i = queue[head];
        head += 1;
        done[i] = true;
        max_depth = max_depth.max(depth[i]);
        for &j in &succ[offset[i]..offset[i + 1]] {
            depth[j] = depth[j].max(depth[i] + 1);
            indeg[j] -= 1;
            if indeg[j] == 0 {
                queue.push(j);
            }
        }
    }
    let mut levels: Vec<Vec<usize>> = if queue.is_empty() { Vec::new() } else { vec![Vec::new(); max_depth + 1] };
    let mut cyclic = Vec::new();
    for i in 0..n {
        if done[i] {
            levels[depth[i]].push(i);
        } else {
            cyclic.push(i);
        }
    }
    (levels, cyclic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn act(id: &str, writes: &[&str], reads: &[&str], deps: &[&str]) -> Action {
        let mut a = Action::tool_call("t");
        a.id = id.into();
        for w in writes {
            a.expected_effects.insert((*w).into(), json!(1));
        }
        a.state_dependencies = reads.iter().map(|s| s.to_string()).collect();
        a.dependencies = deps.iter().map(|s| s.to_string()).collect();
        a
    }

    #[test]
    fn chain_and_wide() {
        let d = Dag::build(&[act("a", &["x"], &[], &[]), act("b", &["y"], &["x"], &[]), act("c", &[], &["y"], &[])]);
        assert_eq!(d.levels(), &[vec![0], vec![1], vec![2]]);
        assert_eq!(d.predecessors(2), &[1]);
        assert!(!d.has_shared_writes());
        let d = Dag::build(&[act("a", &["x"], &[], &[]), act("b", &["y"], &[], &[])]);
        assert_eq!(d.levels(), &[vec![0, 1]]);
        assert!(Dag::build(&[]).levels().is_empty());
    }

    #[test]
    fn most_recent_earlier_writer_only() {
        let d = Dag::build(&[act("a", &["x"], &[], &[]), act("b", &["x"], &[], &[]), act("c", &[], &["x"], &[])]);
        assert_eq!(d.predecessors(2), &[1]);
        assert_eq!(d.levels(), &[vec![0, 1], vec![2]]);
        assert!(d.has_shared_writes());
        // A later writer and the reader itself order nothing.
        let d = Dag::build(&[act("a", &[], &["x"], &[]), act("b", &["x"], &["x"], &[])]);
        assert!(d.predecessors(0).is_empty() && d.predecessors(1).is_empty());
    }

    #[test]
    fn state_write_key_is_a_write() {
        let mut w = Action::new(crate::ir::ActionType::StateWrite);
        w.parameters.insert("key".into(), json!("k"));
        let d = Dag::build(&[w, act("r", &[], &["k"], &[])]);
        assert_eq!(d.predecessors(1), &[0]);
    }

    /// The visiting build is the plain build, visits every action once in
    /// order, and counts the writes a transaction will hold: a
    /// `state_write`'s key and every expected effect.
    #[test]
    fn the_visiting_build_visits_in_order_and_counts_the_writes() {
        let mut w = Action::new(crate::ir::ActionType::StateWrite);
        w.id = "w".into();
        w.parameters.insert("key".into(), json!("k"));
        w.expected_effects.insert("e".into(), json!(2));
        let mut no_key = Action::new(crate::ir::ActionType::StateWrite);
        no_key.id = "n".into();
        let acts = [w, act("a", &["x", "y"], &["k"], &[]), no_key, act("r", &[], &["x"], &["w"])];
        let mut seen = Vec::new();
        let (d, writes) = Dag::build_visiting(&acts, |i, a| seen.push((i, a.id.clone())));
        assert_eq!(seen, [(0, "w"), (1, "a"), (2, "n"), (3, "r")].map(|(i, s)| (i, s.to_string())));
        assert_eq!(writes, 4);
        let plain = Dag::build(&acts);
        assert_eq!(d.levels(), plain.levels());
        assert!((0..acts.len()).all(|i| d.predecessors(i) == plain.predecessors(i)));
        assert_eq!(Dag::build_visiting(&[], |_, _| {}).1, 0);
    }

    #[test]
    fn state_writes_of_one_key_are_chained() {
        let sw = |key: &str| {
            let mut w = Action::new(crate::ir::ActionType::StateWrite);
            w.parameters.insert("key".into(), json!(key));
            w
        };
        let d = Dag::build(&[sw("k"), act("b", &["k"], &[], &[]), sw("k"), sw("j")]);
        assert_eq!(d.predecessors(2), &[0]);
        assert_eq!(d.levels(), &[vec![0, 1, 3], vec![2]]);
    }

    #[test]
    fn duplicate_ids_name_the_first_action_and_keep_nodes_apart() {
        let acts = [
            act("a", &["x"], &[], &[]),
            act("b", &[], &[], &[]),
            act("a", &[], &["x"], &[]),
            act("a", &[], &[], &["a"]),
        ];
        assert_eq!(duplicate_ids(&acts), vec![(2, 0), (3, 0)]);
        assert!(duplicate_ids(&acts[..2]).is_empty());
        assert!(duplicate_ids(&[]).is_empty());
        // By position: the second "a" reads what the first wrote; a dependency
        // on "a" names the first.
        let d = Dag::build(&acts);
        assert_eq!(d.predecessors(2), &[0]);
        assert_eq!(d.predecessors(3), &[0]);
        assert_eq!(d.levels(), &[vec![0, 1], vec![2, 3]]);
    }

    #[test]
    fn explicit_dependencies_cycles_and_unknown_ids() {
        let d = Dag::build(&[act("a", &[], &[], &["b"]), act("b", &[], &[], &[])]);
        assert_eq!(d.levels(), &[vec![1], vec![0]]);
        let d = Dag::build(&[
            act("a", &[], &[], &["b"]),
            act("b", &[], &[], &["a"]),
            act("c", &[], &[], &["a"]),
            act("d", &[], &[], &["zz"]),
        ]);
        assert_eq!(d.cyclic(), &[0, 1, 2]);
        assert_eq!(d.levels(), &[vec![3]]);
        assert_eq!(d.unknown_dependencies(), &[(3, "zz".to_string())]);
        let d = Dag::build(&[act("a", &[], &[], &["a"])]);
        assert_eq!(d.cyclic(), &[0]);
        assert!(d.levels().is_empty());
    }
}
