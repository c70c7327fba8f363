//! Property tests of the DAG, verify, simulate and optimize over generated
//! proposals.

use std::collections::HashMap;

use car_runtime::dag::Dag;
use car_runtime::ir::{Action, ActionProposal, ActionType, Operator, Precondition};
use car_runtime::verify::{VerifyOptions, optimize, simulate, verify};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const KEYS: [&str; 4] = ["k0", "k1", "k2", "k3"];
/// No generated action writes this key and no initial state holds it.
const NEVER: &str = "never_written";

#[derive(Debug, Clone)]
struct Spec {
    state_write: bool,
    writes: Vec<usize>,
    reads: Vec<usize>,
    pre: Vec<(usize, u8, i64)>,
    deps: Vec<usize>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        any::<bool>(),
        prop::collection::vec(0..4usize, 0..3),
        prop::collection::vec(0..4usize, 0..3),
        prop::collection::vec((0..5usize, 0..6u8, -2..3i64), 0..3),
        prop::collection::vec(0..14usize, 0..2),
    )
        .prop_map(|(state_write, writes, reads, pre, deps)| Spec { state_write, writes, reads, pre, deps })
}

/// Builds action `i`. Every value it writes is the marker `"v{i}"`, so a final
/// state shows which actions' effects landed.
fn build(i: usize, s: &Spec, n: usize) -> Action {
    let mut a = if s.state_write {
        let mut a = Action::new(ActionType::StateWrite);
        a.parameters.insert("key".into(), json!(KEYS[s.writes.first().copied().unwrap_or(0)]));
        a.parameters.insert("value".into(), json!(format!("v{i}")));
        a
    } else {
        let mut a = Action::tool_call(format!("t{}", i % 3));
        a.parameters.insert("n".into(), json!(i % 2));
        a
    };
    a.id = format!("a{i}");
    for &w in &s.writes {
        a.expected_effects.insert(KEYS[w].into(), json!(format!("v{i}")));
    }
    a.state_dependencies = s.reads.iter().map(|&r| KEYS[r].to_string()).collect();
    a.preconditions = s
        .pre
        .iter()
        .map(|&(k, op, v)| {
            let key = if k == 4 { NEVER } else { KEYS[k] };
            let op = ["eq", "gt", "lt", "exists", "not_exists", "gte"][op as usize];
            Precondition::new(key, Operator::parse(op), json!(v))
        })
        .collect();
    // Explicit dependencies: ids of other actions, or (>= n) an unknown id.
    a.dependencies = s.deps.iter().map(|&d| if d < n { format!("a{d}") } else { format!("missing{d}") }).collect();
    a
}

fn proposal(specs: &[Spec]) -> ActionProposal {
    let n = specs.len();
    ActionProposal::new(specs.iter().enumerate().map(|(i, s)| build(i, s, n)).collect())
}

fn initial() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((0..4usize, -2..3i64), 0..3)
        .prop_map(|kv| kv.into_iter().map(|(k, v)| (KEYS[k].to_string(), json!(v))).collect())
}

/// A precondition on a key nothing writes and the initial state lacks that no
/// absent key can satisfy.
fn provably_fails(a: &Action) -> bool {
    a.preconditions.iter().any(|p| p.key == NEVER && !p.evaluate(&Map::new()))
}

fn level_of(dag: &Dag) -> HashMap<usize, usize> {
    dag.levels().iter().enumerate().flat_map(|(d, l)| l.iter().map(move |&i| (i, d))).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn simulate_never_shows_a_provably_blocked_effect(specs in prop::collection::vec(spec(), 0..12), init in initial()) {
        let p = proposal(&specs);
        let state = simulate(&p, &init);
        for (i, a) in p.actions.iter().enumerate() {
            if provably_fails(a) {
                let marker = json!(format!("v{i}"));
                prop_assert!(!state.values().any(|v| *v == marker), "effect of blocked a{} in {:?}", i, state);
            }
        }
        // simulate only ever adds what some unblocked action claims.
        for (k, v) in &state {
            prop_assert!(init.get(k) == Some(v) || v.as_str().is_some_and(|s| s.starts_with('v')));
        }
    }

    #[test]
    fn execution_levels_respect_every_edge(specs in prop::collection::vec(spec(), 0..14)) {
        let p = proposal(&specs);
        let dag = Dag::build(&p.actions);
        let level = level_of(&dag);
        let n = p.actions.len();
        // Every action is in exactly one level or reported cyclic.
        let placed: usize = dag.levels().iter().map(Vec::len).sum();
        prop_assert_eq!(placed + dag.cyclic().len(), n);
        for &c in dag.cyclic() {
            prop_assert!(!level.contains_key(&c));
        }
        for j in 0..n {
            for &i in dag.predecessors(j) {
                if let (Some(li), Some(lj)) = (level.get(&i), level.get(&j)) {
                    prop_assert!(li < lj, "edge a{} -> a{} but levels {} >= {}", i, j, li, lj);
                } else {
                    // An action behind a cyclic one is cyclic too.
                    prop_assert!(!level.contains_key(&j));
                }
            }
        }
        // The edges themselves, recomputed independently: the most recent
        // earlier writer of each key read, and each explicit dependency.
        let mut last: HashMap<String, usize> = HashMap::new();
        for (j, a) in p.actions.iter().enumerate() {
            for k in &a.state_dependencies {
                if let Some(&i) = last.get(k) {
                    prop_assert!(dag.predecessors(j).contains(&i));
                }
            }
            for d in &a.dependencies {
                match p.actions.iter().position(|b| &b.id == d) {
                    Some(i) => prop_assert!(dag.predecessors(j).contains(&i)),
                    None => prop_assert!(dag.unknown_dependencies().contains(&(j, d.clone()))),
                }
            }
            for k in a.expected_effects.keys().map(String::as_str).chain(a.state_write_key()) {
                last.insert(k.to_string(), j);
            }
        }
        // verify reports the same layering by id.
        let r = verify(&p, &VerifyOptions::default());
        let ids: Vec<Vec<String>> = dag.levels().iter().map(|l| l.iter().map(|&i| p.actions[i].id.clone()).collect()).collect();
        prop_assert_eq!(r.execution_levels, ids);
        prop_assert_eq!(r.valid, !r.issues.iter().any(|i| i.severity == car_runtime::ir::Severity::Error));
    }

    #[test]
    fn optimize_keeps_actions_and_never_adds_edges(specs in prop::collection::vec(spec(), 0..14)) {
        let p = proposal(&specs);
        let o = optimize(&p);
        prop_assert_eq!(o.actions.len(), p.actions.len());
        for (a, b) in p.actions.iter().zip(&o.actions) {
            let mut a2 = a.clone();
            a2.state_dependencies = b.state_dependencies.clone();
            prop_assert_eq!(&a2, b, "only state_dependencies may change");
            // What is kept is a sub-sequence of what was there.
            let mut it = a.state_dependencies.iter();
            prop_assert!(b.state_dependencies.iter().all(|k| it.any(|x| x == k)));
        }
        let before = Dag::build(&p.actions);
        let after = Dag::build(&o.actions);
        for j in 0..p.actions.len() {
            for i in after.predecessors(j) {
                prop_assert!(before.predecessors(j).contains(i), "optimize added edge a{} -> a{}", i, j);
            }
        }
        prop_assert!(after.levels().len() <= before.levels().len() || !before.cyclic().is_empty());
    }
}
