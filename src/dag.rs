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
//! [`Dag::writes`]). Building is linear in the total size of the proposal.

use std::collections::HashMap;

use crate::ir::Action;

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
    /// Linear in total size.
    pub fn build(actions: &[Action]) -> Dag {
        let n = actions.len();
        let mut first_with_id: HashMap<&str, usize> = HashMap::new();
        if actions.iter().any(|a| !a.dependencies.is_empty()) {
            first_with_id.reserve(n);
            for (i, a) in actions.iter().enumerate() {
                first_with_id.entry(a.id.as_str()).or_insert(i);
            }
        }
        // Per written key: the most recent writer (`last_writer`, for
        // `state_dependencies`) and the most recent `state_write` of it; one
        // map, so a `state_write` costs one lookup.
        let mut writers: HashMap<&str, Writers> = HashMap::with_capacity(n);
        let mut preds: Vec<usize> = Vec::with_capacity(n);
        let mut pred_start: Vec<usize> = Vec::with_capacity(n + 1);
        let mut unknown = Vec::new();
        let mut shared_writes = false;
        let mut note_write = |w: &mut Writers, j: usize| {
            if let Some(prev) = w.last_writer.replace(j) {
                shared_writes |= prev != j;
            }
        };
        for (j, a) in actions.iter().enumerate() {
            let start = preds.len();
            pred_start.push(start);
            for key in &a.state_dependencies {
                if let Some(&Writers { last_writer: Some(i), .. }) = writers.get(key.as_str()) {
                    preds.push(i);
                }
            }
            for dep in &a.dependencies {
                match first_with_id.get(dep.as_str()) {
                    Some(&i) => preds.push(i),
                    None => unknown.push((j, dep.clone())),
                }
            }
            // This action's own writes are noted after its reads were looked up.
            if let Some(key) = a.state_write_key() {
                let w = writers.entry(key).or_default();
                if let Some(i) = w.last_state_write.replace(j) {
                    preds.push(i);
                }
                note_write(w, j);
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
            for key in a.expected_effects.keys() {
                note_write(writers.entry(key.as_str()).or_default(), j);
            }
        }
        pred_start.push(preds.len());
        let (levels, cyclic) = layer(&preds, &pred_start);
        Dag { preds, pred_start, levels, cyclic, unknown, shared_writes }
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

/// The latest writers of one key while the graph is built.
#[derive(Default, Clone, Copy)]
struct Writers {
    last_writer: Option<usize>,
    last_state_write: Option<usize>,
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
    // Exact capacities: one allocation per level, none for growth.
    let mut sizes = vec![0usize; if queue.is_empty() { 0 } else { max_depth + 1 }];
    for i in 0..n {
        if done[i] {
            sizes[depth[i]] += 1;
        }
    }
    let mut levels: Vec<Vec<usize>> = sizes.iter().map(|&c| Vec::with_capacity(c)).collect();
    let mut cyclic = Vec::with_capacity(n - queue.len());
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
