//! The proposals of `benches/verify.rs`, shared with `examples/verify_scale.rs`
//! so the profile runs exactly what the benchmark times: a chain (each action
//! reads what the previous one wrote) or a wide proposal (independent actions).

use car_runtime::ir::{Action, ActionProposal, Operator, Precondition};
use serde_json::json;

/// Action `i` of a chain or of a wide proposal.
pub fn action(i: usize, chain: bool) -> Action {
    let mut a = Action::tool_call(format!("tool_{}", i % 50));
    a.id = format!("a{i}");
    a.parameters.insert("n".into(), json!(i));
    a.expected_effects.insert(format!("k{i}"), json!(i));
    if chain && i > 0 {
        a.state_dependencies.push(format!("k{}", i - 1));
        a.preconditions.push(Precondition::new(format!("k{}", i - 1), Operator::Exists, json!(null)));
    }
    a
}

/// A chain or wide proposal of `n` actions.
pub fn proposal(n: usize, chain: bool) -> ActionProposal {
    ActionProposal::new((0..n).map(|i| action(i, chain)).collect())
}
