//! Monte Carlo simulation of a proposal whose tools may fail.
//!
//! [`simulate`](crate::verify::simulate) answers "what state does the plan
//! leave, if every tool succeeds?"; this samples trials in which each
//! dispatched `tool_call` attempt succeeds with its tool's success rate, and
//! failures cascade the way `simulate` gates actions: an action whose
//! preconditions fail, whose state dependencies are missing, or whose
//! explicit `dependencies` did not land is rejected before dispatch. Like
//! `simulate`, the walk models gating, not `failure_behavior` (an `abort`
//! does not stop a trial).
//!
//! Trials draw from one SplitMix64 stream seeded by `seed` (default
//! [`DEFAULT_SEED`]): one draw per dispatched attempt, actions in the graph's
//! layered order, trials one after another; an attempt succeeds when
//! `(next >> 11) * 2^-53 < rate`. The same seed gives the same result on
//! every platform and front end, and the same draws as the original runtime.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dag::Dag;
use crate::ir::{ActionProposal, ActionType, json_eq};
use crate::{Error, Result};

/// The seed when the configuration gives none (echoed in the result).
pub const DEFAULT_SEED: u64 = 0x0CA1_0CA1_0CA1_0CA1;
/// Trials when the configuration gives none.
pub const DEFAULT_TRIALS: u32 = 1000;
/// The success rate of a tool with no given rate and no history.
pub const DEFAULT_SUCCESS_RATE: f64 = 0.5;
/// The most trials one call may ask for.
pub const MAX_TRIALS: u32 = 10_000_000;
/// The most retries per action one call may ask for.
pub const MAX_RETRY_ATTEMPTS: u32 = 100;

/// `{trials, seed, default_success_rate, retry_attempts}`, each optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MonteCarloConfig {
    /// Number of trials, 1..=[`MAX_TRIALS`]; default 1000.
    pub trials: u32,
    /// The PRNG seed; default [`DEFAULT_SEED`].
    pub seed: u64,
    /// Rate for a tool with no given rate and no history; default 0.5.
    pub default_success_rate: f64,
    /// Extra attempts after a failed one, 0..=[`MAX_RETRY_ATTEMPTS`]; default 0.
    pub retry_attempts: u32,
}

impl Default for MonteCarloConfig {
    fn default() -> Self {
        MonteCarloConfig {
            trials: DEFAULT_TRIALS,
            seed: DEFAULT_SEED,
            default_success_rate: DEFAULT_SUCCESS_RATE,
            retry_attempts: 0,
        }
    }
}

impl MonteCarloConfig {
    /// Checks the ranges, naming the bad field.
    pub fn validate(&self) -> Result<()> {
        if self.trials == 0 || self.trials > MAX_TRIALS {
            return Err(Error::invalid_argument(
                "config.trials",
                format!("must be 1..={MAX_TRIALS}, got {}", self.trials),
            ));
        }
        check_rate("config.default_success_rate", self.default_success_rate)?;
        if self.retry_attempts > MAX_RETRY_ATTEMPTS {
            return Err(Error::invalid_argument(
                "config.retry_attempts",
                format!("must be 0..={MAX_RETRY_ATTEMPTS}, got {}", self.retry_attempts),
            ));
        }
        Ok(())
    }
}

fn check_rate(name: &str, r: f64) -> Result<()> {
    if r.is_finite() && (0.0..=1.0).contains(&r) {
        Ok(())
    } else {
        Err(Error::invalid_argument(name, format!("must be a rate in 0.0..=1.0, got {r}")))
    }
}

/// A goal evaluated against each trial's final state.
///
/// `state_predicate` is decided on the simulated state; the other leaves
/// (tool receipts, plan achievement, state consistency, command exits, model
/// judges) cannot be decided by a simulation: they fail closed and are named
/// in `goal_underivable_conditions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GoalCondition {
    /// Every condition holds.
    AllOf {
        /// The conditions.
        conditions: Vec<GoalCondition>,
    },
    /// Some condition holds.
    AnyOf {
        /// The conditions.
        conditions: Vec<GoalCondition>,
    },
    /// `state[key] == equals` (numbers by value); false when absent.
    StatePredicate {
        /// The key.
        key: String,
        /// The value it must equal.
        equals: Value,
    },
    /// Underivable here.
    ToolReceiptsGrounded,
    /// Underivable here.
    PlanAchieved,
    /// Underivable here.
    StateConsistent,
    /// Underivable here.
    Command {
        /// The command's id.
        id: String,
        /// The exit status it must have.
        expect_exit: i64,
    },
    /// Underivable here.
    ModelJudge {
        /// The judge's id.
        id: String,
    },
}

impl GoalCondition {
    fn underivable(&self, out: &mut BTreeSet<String>) {
        match self {
            GoalCondition::AllOf { conditions } | GoalCondition::AnyOf { conditions } => {
                conditions.iter().for_each(|c| c.underivable(out))
            }
            GoalCondition::StatePredicate { .. } => {}
            GoalCondition::ToolReceiptsGrounded => {
                out.insert("tool_receipts_grounded".into());
            }
            GoalCondition::PlanAchieved => {
                out.insert("plan_achieved".into());
            }
            GoalCondition::StateConsistent => {
                out.insert("state_consistent".into());
            }
            GoalCondition::Command { id, .. } => {
                out.insert(format!("command:{id}"));
            }
            GoalCondition::ModelJudge { id } => {
                out.insert(format!("model_judge:{id}"));
            }
        }
    }
}

/// The goal compiled against the key ids of one walk.
enum Goal<'g> {
    All(Vec<Goal<'g>>),
    Any(Vec<Goal<'g>>),
    Equals(Option<u32>, &'g Value),
    False,
}

impl<'g> Goal<'g> {
    fn compile(c: &'g GoalCondition, id_of: &dyn Fn(&str) -> Option<u32>) -> Goal<'g> {
        match c {
            GoalCondition::AllOf { conditions } => {
                Goal::All(conditions.iter().map(|c| Goal::compile(c, id_of)).collect())
            }
            GoalCondition::AnyOf { conditions } => {
                Goal::Any(conditions.iter().map(|c| Goal::compile(c, id_of)).collect())
            }
            GoalCondition::StatePredicate { key, equals } => Goal::Equals(id_of(key), equals),
            _ => Goal::False,
        }
    }

    fn holds(&self, model: &[Option<&Value>]) -> bool {
        match self {
            Goal::All(gs) => gs.iter().all(|g| g.holds(model)),
            Goal::Any(gs) => gs.iter().any(|g| g.holds(model)),
            Goal::Equals(Some(k), want) => model[*k as usize].is_some_and(|v| json_eq(v, want)),
            Goal::Equals(None, _) | Goal::False => false,
        }
    }
}

/// Where a tool's success rate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateSource {
    /// Given by the caller.
    Given,
    /// Derived from this runtime's event log, Laplace-smoothed:
    /// `(successes + 1) / (successes + failures + 2)`.
    EventLog,
    /// The configuration's `default_success_rate`.
    Default,
}

/// One tool's rate and its origin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRate {
    /// The tool.
    pub tool: String,
    /// The per-attempt success probability used.
    pub rate: f64,
    /// Where it came from.
    pub source: RateSource,
    /// Succeeded attempts in the event log (`event_log` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successes: Option<u64>,
    /// Failed attempts in the event log (`event_log` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<u64>,
}

/// `{mean, min, p50, p95, max}` of a per-trial count (nearest-rank percentiles).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// The mean.
    pub mean: f64,
    /// The minimum.
    pub min: u64,
    /// The median (nearest rank).
    pub p50: u64,
    /// The 95th percentile (nearest rank).
    pub p95: u64,
    /// The maximum.
    pub max: u64,
}

impl Distribution {
    fn of(mut xs: Vec<u32>) -> Distribution {
        xs.sort_unstable();
        let n = xs.len();
        if n == 0 {
            return Distribution { mean: 0.0, min: 0, p50: 0, p95: 0, max: 0 };
        }
        let sum: u64 = xs.iter().map(|&x| u64::from(x)).sum();
        let rank = |q: f64| {
            let r = (q * n as f64).ceil() as usize;
            u64::from(xs[r.clamp(1, n) - 1])
        };
        Distribution {
            mean: sum as f64 / n as f64,
            min: u64::from(xs[0]),
            p50: rank(0.5),
            p95: rank(0.95),
            max: u64::from(xs[n - 1]),
        }
    }
}

/// A value of a key and how often a trial ended with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValueFrequency {
    /// The value.
    pub value: Value,
    /// Trials ending with it / trials.
    pub probability: f64,
}

/// The final-state distribution of one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyOutcome {
    /// The key.
    pub key: String,
    /// Trials ending with the key present / trials.
    pub p_present: f64,
    /// Its values, most frequent first (ties by canonical JSON).
    pub values: Vec<ValueFrequency>,
}

/// What happened to one action across the trials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionOutcome {
    /// The action.
    pub action_id: String,
    /// Rejected before dispatch / trials.
    pub p_rejected: f64,
    /// Every attempt failed / trials.
    pub p_failed: f64,
    /// Ran and its effects landed / trials.
    pub p_effects_landed: f64,
    /// In the trials where it failed, the mean number of actions rejected
    /// because of it (through state dependencies or explicit dependencies,
    /// transitively); 0 when it never failed.
    pub mean_blast_radius: f64,
}

/// The result of [`simulate_monte_carlo`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MonteCarloResult {
    /// Trials run.
    pub trials: u32,
    /// The seed used.
    pub seed: u64,
    /// Trials whose final state met the goal / trials; `null` without a goal.
    pub p_goal_reached: Option<f64>,
    /// The goal's conditions a simulation cannot decide (they fail closed), sorted.
    pub goal_underivable_conditions: Vec<String>,
    /// Trials in which every action landed / trials.
    pub p_all_effects_landed: f64,
    /// Tool dispatches per trial, retries included.
    pub tool_calls: Distribution,
    /// Actions that ran per trial: landed plus failed (not rejected), as
    /// `CostSummary.actions_executed` counts them.
    pub actions_executed: Distribution,
    /// Per key of the final states, sorted by key.
    pub state_distribution: Vec<KeyOutcome>,
    /// Per action, in proposal order.
    pub action_outcomes: Vec<ActionOutcome>,
    /// The rate of each tool the proposal calls, sorted by tool.
    pub success_rates: Vec<ToolRate>,
}

/// The inputs of [`simulate_monte_carlo`] besides the proposal.
#[derive(Debug, Clone, Default)]
pub struct MonteCarloInput {
    /// The state before the proposal runs.
    pub initial_state: Map<String, Value>,
    /// Caller-given rates by tool (win over history and default).
    pub success_rates: HashMap<String, f64>,
    /// `(successes, failures)` of attempts by tool, from an event log.
    pub history: HashMap<String, (u64, u64)>,
    /// The goal.
    pub goal: Option<GoalCondition>,
    /// The configuration.
    pub config: MonteCarloConfig,
}

/// SplitMix64.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The per-attempt rate of `tool` and where it came from.
pub fn resolve_rate(tool: &str, input: &MonteCarloInput) -> ToolRate {
    if let Some(&r) = input.success_rates.get(tool) {
        return ToolRate { tool: tool.into(), rate: r, source: RateSource::Given, successes: None, failures: None };
    }
    if let Some(&(s, f)) = input.history.get(tool)
        && s + f > 0
    {
        let rate = (s as f64 + 1.0) / ((s + f) as f64 + 2.0);
        return ToolRate {
            tool: tool.into(),
            rate,
            source: RateSource::EventLog,
            successes: Some(s),
            failures: Some(f),
        };
    }
    ToolRate {
        tool: tool.into(),
        rate: input.config.default_success_rate,
        source: RateSource::Default,
        successes: None,
        failures: None,
    }
}

/// What happened to an action in one trial.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    Landed,
    Failed,
    Rejected,
}

/// Runs the trials. Rates and configuration are checked first; a bad one is
/// an `invalid_argument` naming it.
pub fn simulate_monte_carlo(proposal: &ActionProposal, input: &MonteCarloInput) -> Result<MonteCarloResult> {
    input.config.validate()?;
    for (tool, &r) in &input.success_rates {
        check_rate(&format!("tool_success_rates.{tool}"), r)?;
    }
    let actions = &proposal.actions;
    let n = actions.len();
    let (dag, keys) = Dag::build_keyed(actions, &input.initial_state);
    let names = keys.names();
    let id_of = |k: &str| names.binary_search(&k).ok().map(|i| i as u32);

    // Per action: its rate when it is a tool call, else None (always lands).
    let mut rates_by_tool: BTreeMap<&str, ToolRate> = BTreeMap::new();
    let mut rate: Vec<Option<f64>> = Vec::with_capacity(n);
    for a in actions {
        if a.action_type == ActionType::ToolCall {
            let tool = a.tool.as_deref().unwrap_or("");
            let r = rates_by_tool.entry(tool).or_insert_with(|| resolve_rate(tool, input)).rate;
            rate.push(Some(r));
        } else {
            rate.push(None);
        }
    }
    let mut never = vec![false; n];
    for &i in dag.cyclic() {
        never[i] = true;
    }
    for (i, _) in dag.unknown_dependencies() {
        never[*i] = true;
    }
    let order: Vec<usize> = dag.levels().iter().flatten().copied().collect();
    // Actions in no level (cycles, unknown dependencies) are rejected in every trial.
    let unplaced: Vec<usize> = {
        let mut placed = vec![false; n];
        order.iter().for_each(|&i| placed[i] = true);
        (0..n).filter(|&i| !placed[i]).collect()
    };

    let goal = input.goal.as_ref().map(|g| Goal::compile(g, &id_of));
    let mut underivable = BTreeSet::new();
    if let Some(g) = &input.goal {
        g.underivable(&mut underivable);
    }

    // Candidate values per key (pointers into the proposal and the initial
    // state), so a trial's final value is counted by index.
    let mut candidates: Vec<Vec<&Value>> = vec![Vec::new(); names.len()];
    for (k, v) in keys.initial() {
        candidates[k as usize].push(v);
    }
    for i in 0..n {
        for (k, v) in keys.effects(i) {
            let c = &mut candidates[k as usize];
            if !c.iter().any(|x| std::ptr::eq(*x, v)) {
                c.push(v);
            }
        }
    }
    let mut value_counts: Vec<Vec<u64>> = candidates.iter().map(|c| vec![0; c.len()]).collect();
    let mut present = vec![0u64; names.len()];

    let trials = input.config.trials;
    let attempts = input.config.retry_attempts + 1;
    let mut rng = SplitMix(input.config.seed);
    let mut tool_calls = Vec::with_capacity(trials as usize);
    let mut executed = Vec::with_capacity(trials as usize);
    let mut rejected = vec![0u64; n];
    let mut failed = vec![0u64; n];
    let mut landed = vec![0u64; n];
    let mut blast_sum = vec![0u64; n];
    let mut all_landed = 0u64;
    let mut goal_met = 0u64;

    let start = {
        let mut m = vec![None; names.len()];
        for (k, v) in keys.initial() {
            m[k as usize] = Some(v);
        }
        m
    };
    let mut model: Vec<Option<&Value>> = start.clone();
    // Per key, the failed actions whose loss left it unwritten (the roots of
    // the cascade that reaches it).
    let mut blame: Vec<Vec<u32>> = vec![Vec::new(); names.len()];
    let mut fate = vec![Fate::Rejected; n];
    // Per action, the root failures that caused its rejection.
    let mut cause: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut blast = vec![0u32; n];
    let mut roots: Vec<u32> = Vec::new();

    for _ in 0..trials {
        model.clone_from(&start);
        blame.iter_mut().for_each(Vec::clear);
        cause.iter_mut().for_each(Vec::clear);
        blast.iter_mut().for_each(|b| *b = 0);
        let mut calls = 0u32;
        let mut ran = 0u32;
        for &i in &unplaced {
            fate[i] = Fate::Rejected;
        }
        for &i in &order {
            // Gating: explicit dependencies, state dependencies, then
            // preconditions. A rejected action is in the blast radius of
            // every failure behind a dependency it misses (a failed
            // precondition blames no one, as in the original).
            roots.clear();
            let mut ok = !never[i];
            for &j in keys.deps(i) {
                match fate[j as usize] {
                    Fate::Landed => {}
                    Fate::Failed => {
                        ok = false;
                        roots.push(j);
                    }
                    Fate::Rejected => {
                        ok = false;
                        roots.extend_from_slice(&cause[j as usize]);
                    }
                }
            }
            for &k in keys.reads(i) {
                if model[k as usize].is_none() {
                    ok = false;
                    roots.extend_from_slice(&blame[k as usize]);
                }
            }
            if ok && !keys.tests(i).all(|(pc, k)| pc.evaluate_value(model[k as usize])) {
                ok = false;
            }
            let f = if !ok {
                Fate::Rejected
            } else if let Some(r) = rate[i] {
                let mut success = false;
                for _ in 0..attempts {
                    calls += 1;
                    if rng.unit() < r {
                        success = true;
                        break;
                    }
                }
                if success { Fate::Landed } else { Fate::Failed }
            } else {
                Fate::Landed
            };
            fate[i] = f;
            match f {
                Fate::Landed => {
                    ran += 1;
                    for (k, v) in keys.effects(i) {
                        model[k as usize] = Some(v);
                        blame[k as usize].clear();
                    }
                }
                Fate::Failed => {
                    ran += 1;
                    for (k, _) in keys.effects(i) {
                        if model[k as usize].is_none() && !blame[k as usize].contains(&(i as u32)) {
                            blame[k as usize].push(i as u32);
                        }
                    }
                }
                Fate::Rejected => {
                    roots.sort_unstable();
                    roots.dedup();
                    for &r in &roots {
                        blast[r as usize] += 1;
                    }
                    if !roots.is_empty() {
                        for (k, _) in keys.effects(i) {
                            if model[k as usize].is_none() {
                                let b = &mut blame[k as usize];
                                b.extend_from_slice(&roots);
                                b.sort_unstable();
                                b.dedup();
                            }
                        }
                    }
                    cause[i].clone_from(&roots);
                }
            }
        }
        let mut every = true;
        for i in 0..n {
            match fate[i] {
                Fate::Landed => landed[i] += 1,
                Fate::Failed => {
                    failed[i] += 1;
                    blast_sum[i] += u64::from(blast[i]);
                    every = false;
                }
                Fate::Rejected => {
                    rejected[i] += 1;
                    every = false;
                }
            }
        }
        all_landed += u64::from(every);
        if let Some(g) = &goal {
            goal_met += u64::from(g.holds(&model));
        }
        for (k, v) in model.iter().enumerate() {
            if let Some(v) = v {
                present[k] += 1;
                if let Some(at) = candidates[k].iter().position(|c| std::ptr::eq(*c, *v)) {
                    value_counts[k][at] += 1;
                }
            }
        }
        tool_calls.push(calls);
        executed.push(ran);
    }

    let t = f64::from(trials);
    let mut state_distribution = Vec::new();
    for (k, name) in names.iter().enumerate() {
        if present[k] == 0 {
            continue;
        }
        // Merge candidates with equal canonical forms.
        let mut by_form: BTreeMap<Vec<u8>, (u64, &Value)> = BTreeMap::new();
        for (c, &count) in candidates[k].iter().zip(&value_counts[k]) {
            if count == 0 {
                continue;
            }
            let mut form = Vec::new();
            crate::verify::canonical_json(c, &mut form);
            by_form.entry(form).or_insert((0, c)).0 += count;
        }
        let mut values: Vec<(Vec<u8>, u64, &Value)> = by_form.into_iter().map(|(f, (c, v))| (f, c, v)).collect();
        values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        state_distribution.push(KeyOutcome {
            key: (*name).to_string(),
            p_present: present[k] as f64 / t,
            values: values
                .into_iter()
                .map(|(_, c, v)| ValueFrequency { value: v.clone(), probability: c as f64 / t })
                .collect(),
        });
    }
    let action_outcomes = actions
        .iter()
        .enumerate()
        .map(|(i, a)| ActionOutcome {
            action_id: a.id.clone(),
            p_rejected: rejected[i] as f64 / t,
            p_failed: failed[i] as f64 / t,
            p_effects_landed: landed[i] as f64 / t,
            mean_blast_radius: if failed[i] == 0 { 0.0 } else { blast_sum[i] as f64 / failed[i] as f64 },
        })
        .collect();
    Ok(MonteCarloResult {
        trials,
        seed: input.config.seed,
        p_goal_reached: goal.as_ref().map(|_| goal_met as f64 / t),
        goal_underivable_conditions: underivable.into_iter().collect(),
        p_all_effects_landed: all_landed as f64 / t,
        tool_calls: Distribution::of(tool_calls),
        actions_executed: Distribution::of(executed),
        state_distribution,
        action_outcomes,
        success_rates: rates_by_tool.into_values().collect(),
    })
}

/// `(successes, failures)` of tool attempts by tool, from event-log records:
/// an `ActionSucceeded` not served from a cache is a success, each
/// `ActionRetrying` and `ActionFailed` of a tool call is a failed attempt.
pub fn tool_history(events: &[crate::events::Event]) -> HashMap<String, (u64, u64)> {
    use crate::events::{EventData, EventKind};
    let mut out: HashMap<String, (u64, u64)> = HashMap::new();
    for e in events {
        let EventData::Action(a) = &e.data else { continue };
        let Some(action) = a.proposal.actions.get(a.index) else { continue };
        if action.action_type != ActionType::ToolCall {
            continue;
        }
        let Some(tool) = action.tool.as_deref() else { continue };
        match e.kind {
            EventKind::ActionSucceeded if a.cached().is_none() => out.entry(tool.to_string()).or_default().0 += 1,
            EventKind::ActionRetrying | EventKind::ActionFailed => out.entry(tool.to_string()).or_default().1 += 1,
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: Value) -> ActionProposal {
        crate::ir::parse_proposal_value(v).unwrap()
    }

    #[test]
    fn splitmix_matches_reference_values() {
        // First draws of seed 0 (the reference SplitMix64 sequence).
        let mut r = SplitMix(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn certain_rates_are_exact_and_failures_cascade() {
        let prop = p(serde_json::json!({"actions": [
            {"id": "a", "type": "tool_call", "tool": "t", "expected_effects": {"x": 1}},
            {"id": "b", "type": "tool_call", "tool": "u", "state_dependencies": ["x"], "expected_effects": {"y": 2}},
            {"id": "c", "type": "tool_call", "tool": "u", "state_dependencies": ["y"], "expected_effects": {"z": 3}},
            {"id": "d", "type": "state_write", "parameters": {"key": "w", "value": 4}}
        ]}));
        let mut input = MonteCarloInput::default();
        input.success_rates.insert("t".into(), 0.0);
        input.success_rates.insert("u".into(), 1.0);
        input.config.trials = 10;
        let r = simulate_monte_carlo(&prop, &input).unwrap();
        assert_eq!(r.p_all_effects_landed, 0.0);
        assert_eq!(r.tool_calls.max, 1);
        assert_eq!(r.actions_executed.mean, 2.0, "a failed and d landed; b and c were rejected");
        assert_eq!(r.action_outcomes[0].p_failed, 1.0);
        assert_eq!(r.action_outcomes[0].mean_blast_radius, 2.0);
        assert_eq!(r.action_outcomes[1].p_rejected, 1.0);
        assert_eq!(r.action_outcomes[2].p_rejected, 1.0);
        assert_eq!(r.state_distribution.len(), 1);
        assert_eq!(r.state_distribution[0].key, "w");
        assert_eq!(r.success_rates[0].source, RateSource::Given);
    }

    #[test]
    fn bad_inputs_are_named() {
        let prop = p(serde_json::json!({"actions": []}));
        let mut input = MonteCarloInput::default();
        input.config.trials = 0;
        assert!(simulate_monte_carlo(&prop, &input).unwrap_err().to_string().contains("config.trials"));
        let mut input = MonteCarloInput::default();
        input.success_rates.insert("t".into(), 1.5);
        assert!(simulate_monte_carlo(&prop, &input).unwrap_err().to_string().contains("tool_success_rates.t"));
    }

    #[test]
    fn history_is_laplace_smoothed_and_given_wins() {
        let mut input = MonteCarloInput::default();
        input.history.insert("t".into(), (3, 1));
        let r = resolve_rate("t", &input);
        assert_eq!((r.rate, r.source), (4.0 / 6.0, RateSource::EventLog));
        input.success_rates.insert("t".into(), 0.1);
        assert_eq!(resolve_rate("t", &input).source, RateSource::Given);
        assert_eq!(resolve_rate("other", &input).source, RateSource::Default);
    }
}
