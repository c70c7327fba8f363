//! Times Monte Carlo on a 100-action proposal (a chain of readers over
//! flaky tools, some independent actions and a goal): 100,000 trials.
//!
//! `cargo run --release --example montecarlo_scale [trials] [actions]`

use std::time::Instant;

use car_runtime::planning::{GoalCondition, MonteCarloInput, simulate_monte_carlo};
use serde_json::json;

fn main() {
    let mut args = std::env::args().skip(1);
    let trials: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let actions: Vec<_> = (0..n)
        .map(|i| {
            let mut a = json!({"id": format!("a{i}"), "type": "tool_call", "tool": format!("t{}", i % 7),
                "parameters": {"i": i}, "expected_effects": {format!("k{i}"): i}});
            if i % 3 != 0 && i > 0 {
                a["state_dependencies"] = json!([format!("k{}", i - 1)]);
            }
            a
        })
        .collect();
    let proposal = car_runtime::ir::parse_proposal_value(json!({"actions": actions})).unwrap();
    let mut input = MonteCarloInput::default();
    for t in 0..7 {
        input.success_rates.insert(format!("t{t}"), 0.9 + f64::from(t) * 0.01);
    }
    input.goal = Some(GoalCondition::StatePredicate { key: format!("k{}", n - 1), equals: json!(n - 1) });
    input.config.trials = trials;
    let start = Instant::now();
    let r = simulate_monte_carlo(&proposal, &input).unwrap();
    let took = start.elapsed();
    println!(
        "{trials} trials x {n} actions: {:.1} ms (p_goal_reached {:?}, tool calls mean {:.2})",
        took.as_secs_f64() * 1000.0,
        r.p_goal_reached,
        r.tool_calls.mean
    );
}
