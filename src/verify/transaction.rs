//! `transaction_check`: transactional hazards of a proposal against shared
//! state — unordered writers of one key (`write_write`), a read unordered with
//! a write of the same key (`read_write`), and assumptions the shared state has
//! moved past (`stale_assumption`).
//!
//! Read and write sets are the actions' explicit `read_set` / `write_set`, or
//! the derived ones (`Action::effective_read_set` / `effective_write_set`).
//! "Ordered" means a path of the proposal's graph joins the two actions.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::reach::Reach;
use crate::dag::Dag;
use crate::ir::{ActionProposal, json_eq};

/// A key's readers × writers at most this many are compared pairwise; above
/// it each reader is compared with its closest earlier and later writer.
const PAIRWISE_READ_WRITE: usize = 256;

/// The kind of a transactional conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictKind {
    /// Two unordered actions write the same key.
    WriteWrite,
    /// An action reads a key another, unordered, action writes.
    ReadWrite,
    /// An assumption the shared state no longer satisfies.
    StaleAssumption,
}

/// One conflict found by [`transaction_check`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransactionConflict {
    /// What kind of hazard.
    pub kind: ConflictKind,
    /// The state key.
    pub key: String,
    /// The actions involved: both writers; reader then writer; or the assuming action.
    pub actions: Vec<String>,
    /// Why it is a hazard.
    pub explanation: String,
    /// How to resolve it.
    pub resolution: String,
}

/// The result of [`transaction_check`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransactionReport {
    /// True iff there are no conflicts.
    pub consistent: bool,
    /// The conflicts: pairwise ones by action pair, then stale assumptions in action order.
    pub conflicts: Vec<TransactionConflict>,
}

fn write_write(a: &str, b: &str, key: &str) -> TransactionConflict {
    TransactionConflict {
        kind: ConflictKind::WriteWrite,
        key: key.to_string(),
        actions: vec![a.to_string(), b.to_string()],
        explanation: format!(
            "actions '{a}' and '{b}' both write '{key}' with no ordering dependency \u{2014} last-writer-wins is nondeterministic"
        ),
        resolution: "declare an ordering (add the writer's key to the other action's state_dependencies), split into distinct keys, or define a semantic merge for this key".to_string(),
    }
}

fn read_write(reader: &str, writer: &str, key: &str) -> TransactionConflict {
    TransactionConflict {
        kind: ConflictKind::ReadWrite,
        key: key.to_string(),
        actions: vec![reader.to_string(), writer.to_string()],
        explanation: format!(
            "action '{reader}' reads '{key}' while '{writer}' writes it, unordered \u{2014} the read may observe the pre- or post-write value"
        ),
        resolution: format!(
            "sequence the reader after the writer (add '{key}' to '{reader}'.state_dependencies) if the fresh value is intended, or before it if the prior value is"
        ),
    }
}

/// Checks a proposal for transactional conflicts. `versions` maps key →
/// current version (a missing key is "absent"); `state`, when supplied, maps
/// key → current value and is what `expected_value` assumptions are checked
/// against.
pub fn transaction_check(
    proposal: &ActionProposal,
    versions: &HashMap<String, u64>,
    state: Option<&Map<String, Value>>,
) -> TransactionReport {
    let actions = &proposal.actions;
    let dag = Dag::build(actions);
    let mut reach = Reach::new(&dag);

    // Keys in order of first mention, with their readers and writers.
    let mut order: Vec<String> = Vec::new();
    let mut slot: HashMap<String, usize> = HashMap::new();
    let mut readers: Vec<Vec<usize>> = Vec::new();
    let mut writers: Vec<Vec<usize>> = Vec::new();
    let mut index = |k: String, order: &mut Vec<String>, r: &mut Vec<Vec<usize>>, w: &mut Vec<Vec<usize>>| -> usize {
        if let Some(&s) = slot.get(&k) {
            return s;
        }
        let s = order.len();
        slot.insert(k.clone(), s);
        order.push(k);
        r.push(Vec::new());
        w.push(Vec::new());
        s
    };
    for (i, a) in actions.iter().enumerate() {
        for k in a.effective_write_set() {
            let s = index(k, &mut order, &mut readers, &mut writers);
            writers[s].push(i);
        }
        for k in a.effective_read_set() {
            let s = index(k, &mut order, &mut readers, &mut writers);
            readers[s].push(i);
        }
    }

    // (low index, high index, kind rank, key slot, conflict)
    let mut pairwise: Vec<(usize, usize, u8, usize, TransactionConflict)> = Vec::new();
    for (s, key) in order.iter().enumerate() {
        let (rs, ws) = (&readers[s], &writers[s]);
        let mut ww = |i: usize, j: usize, reach: &mut Reach<'_>| {
            if !reach.ordered(i, j) {
                pairwise.push((i, j, 0, s, write_write(&actions[i].id, &actions[j].id, key)));
            }
        };
        if ws.len() <= super::PAIRWISE_WRITERS {
            for (x, &i) in ws.iter().enumerate() {
                for &j in &ws[x + 1..] {
                    ww(i, j, &mut reach);
                }
            }
        } else {
            for p in ws.windows(2) {
                ww(p[0], p[1], &mut reach);
            }
        }
        let mut rw = |r: usize, w: usize, reach: &mut Reach<'_>| {
            if r != w && !reach.ordered(r, w) {
                pairwise.push((r.min(w), r.max(w), 1, s, read_write(&actions[r].id, &actions[w].id, key)));
            }
        };
        if rs.len().saturating_mul(ws.len()) <= PAIRWISE_READ_WRITE {
            for &r in rs {
                for &w in ws {
                    rw(r, w, &mut reach);
                }
            }
        } else {
            // Closest writer before and after each reader (both lists ascend).
            let mut x = 0;
            for &r in rs {
                while x < ws.len() && ws[x] < r {
                    x += 1;
                }
                if x > 0 {
                    rw(r, ws[x - 1], &mut reach);
                }
                let after = if x < ws.len() && ws[x] == r { x + 1 } else { x };
                if after < ws.len() {
                    rw(r, ws[after], &mut reach);
                }
            }
        }
    }
    pairwise.sort_by_key(|a| (a.0, a.1, a.2, a.3));
    let mut conflicts: Vec<TransactionConflict> = pairwise.into_iter().map(|t| t.4).collect();

    for a in actions {
        for asm in &a.assumptions {
            let key = &asm.key;
            if let Some(rv) = asm.read_version {
                let now = versions.get(key);
                if now != Some(&rv) {
                    let now = now.map_or_else(|| "absent".to_string(), u64::to_string);
                    conflicts.push(TransactionConflict {
                        kind: ConflictKind::StaleAssumption,
                        key: key.clone(),
                        actions: vec![a.id.clone()],
                        explanation: format!(
                            "action '{}' planned against '{key}' at version {rv} but the shared state is now at {now} \u{2014} the plan is based on a stale read",
                            a.id
                        ),
                        resolution: "re-verify the action against current state and reconcile its belief (re-plan from the new version) before executing".to_string(),
                    });
                    continue;
                }
            }
            if let (Some(expected), Some(state)) = (&asm.expected_value, state) {
                let current = state.get(key);
                let holds = match current {
                    Some(v) => json_eq(v, expected),
                    None => expected.is_null(),
                };
                if !holds {
                    let now = current.map_or_else(|| "absent".to_string(), Value::to_string);
                    conflicts.push(TransactionConflict {
                        kind: ConflictKind::StaleAssumption,
                        key: key.clone(),
                        actions: vec![a.id.clone()],
                        explanation: format!(
                            "action '{}' assumes '{key}' == {expected} but the shared state holds {now} \u{2014} belief divergence",
                            a.id
                        ),
                        resolution: "reconcile the assumption against the current value (semantic merge or re-plan); do not execute on the stale belief".to_string(),
                    });
                }
            }
        }
    }
    TransactionReport { consistent: conflicts.is_empty(), conflicts }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_proposal_value;
    use serde_json::json;

    fn p(actions: Value) -> ActionProposal {
        parse_proposal_value(json!({ "actions": actions })).unwrap()
    }

    fn kinds(r: &TransactionReport) -> Vec<(ConflictKind, String, Vec<String>)> {
        r.conflicts.iter().map(|c| (c.kind, c.key.clone(), c.actions.clone())).collect()
    }

    #[test]
    fn ordered_actions_do_not_conflict_transitively() {
        let r = transaction_check(
            &p(json!([
                {"id":"a","type":"tool_call","tool":"t","expected_effects":{"x":1,"y":1}},
                {"id":"m","type":"tool_call","tool":"t","state_dependencies":["y"],"expected_effects":{"z":1}},
                {"id":"b","type":"tool_call","tool":"t","state_dependencies":["z"],"read_set":["x"],"write_set":["x"]}
            ])),
            &HashMap::new(),
            None,
        );
        assert!(r.consistent, "{:?}", r.conflicts);
    }

    #[test]
    fn explicit_sets_replace_derived_ones() {
        // b's explicit write_set names only k: its expected effect on x is not a write here.
        let r = transaction_check(
            &p(json!([
                {"id":"a","type":"tool_call","tool":"t","expected_effects":{"x":1}},
                {"id":"b","type":"tool_call","tool":"t","expected_effects":{"x":2},"write_set":["k"]}
            ])),
            &HashMap::new(),
            None,
        );
        assert!(r.consistent, "{:?}", r.conflicts);
    }

    #[test]
    fn pair_conflicts_then_stale_assumptions() {
        let versions: HashMap<String, u64> = [("y".to_string(), 2)].into_iter().collect();
        let state = json!({"x": 3}).as_object().cloned().unwrap();
        let r = transaction_check(
            &p(json!([
                {"id":"a","type":"tool_call","tool":"t","assumptions":[{"key":"y","read_version":1},{"key":"x","expected_value":1}]},
                {"id":"b","type":"tool_call","tool":"t","expected_effects":{"x":1}},
                {"id":"c","type":"tool_call","tool":"t","expected_effects":{"x":1}}
            ])),
            &versions,
            Some(&state),
        );
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            kinds(&r),
            vec![
                (ConflictKind::ReadWrite, "x".into(), s(&["a", "b"])),
                (ConflictKind::ReadWrite, "x".into(), s(&["a", "c"])),
                (ConflictKind::WriteWrite, "x".into(), s(&["b", "c"])),
                (ConflictKind::StaleAssumption, "y".into(), s(&["a"])),
                (ConflictKind::StaleAssumption, "x".into(), s(&["a"])),
            ]
        );
        assert!(r.conflicts[4].explanation.contains("assumes 'x' == 1 but the shared state holds 3"));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["conflicts"][0]["kind"], "read_write");
    }

    #[test]
    fn many_readers_and_writers_stay_linear() {
        let mut acts = Vec::new();
        for i in 0..40 {
            acts.push(json!({"id": format!("w{i}"), "type":"tool_call","tool":"t","write_set":["x"]}));
            acts.push(json!({"id": format!("r{i}"), "type":"tool_call","tool":"t","read_set":["x"]}));
        }
        let r = transaction_check(&p(Value::Array(acts)), &HashMap::new(), None);
        let ww = r.conflicts.iter().filter(|c| c.kind == ConflictKind::WriteWrite).count();
        let rw = r.conflicts.iter().filter(|c| c.kind == ConflictKind::ReadWrite).count();
        // 40 writers: consecutive pairs only; 40 readers: closest writer before and after.
        assert_eq!(ww, 39);
        assert_eq!(rw, 40 + 39);
    }
}
