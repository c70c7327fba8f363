//! The planning part of the JSON facade: `simulate_monte_carlo`,
//! `rank_proposals`, `simulate_with_predictions` and
//! `transaction_check_with_predictions`, JSON text in and out. Argument
//! order here is Python's; the Node binding reorders where the original's
//! Node signatures differ.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use crate::planning::{self, CostTarget, EffectPrediction, GoalCondition, MonteCarloConfig, MonteCarloInput};
use crate::{Error, Result};

fn to_text<T: serde::Serialize>(v: &T) -> String {
    // Plain data with string keys: serialising cannot fail.
    serde_json::to_string(v).unwrap_or_default()
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

use super::verify::{parse_arg, proposal_arg, value_arg};

/// Where the Monte Carlo arguments come from: their JSON texts (the
/// bindings) or the fields of one JSON value (the daemon, `api::call`).
trait Args {
    fn arg<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>>;
}

/// `(name, text)` pairs; a name not listed is absent.
impl Args for [(&str, Option<&str>)] {
    fn arg<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        parse_arg(name, self.iter().find(|(n, _)| *n == name).and_then(|(_, t)| *t))
    }
}

impl Args for Value {
    fn arg<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        value_arg(self, name)
    }
}

/// The one reader of the Monte Carlo arguments, whatever their form.
fn read_monte_carlo(args: &(impl Args + ?Sized)) -> Result<MonteCarloInput> {
    Ok(MonteCarloInput {
        initial_state: args.arg("initial_state")?.unwrap_or_default(),
        success_rates: args.arg("tool_success_rates")?.unwrap_or_default(),
        history: HashMap::new(),
        goal: args.arg::<GoalCondition>("goal")?,
        config: args.arg::<MonteCarloConfig>("config")?.unwrap_or_default(),
    })
}

/// The Monte Carlo inputs from their JSON texts (`None` = absent).
pub fn monte_carlo_input(
    initial_state_json: Option<&str>,
    tool_success_rates_json: Option<&str>,
    goal_json: Option<&str>,
    config_json: Option<&str>,
) -> Result<MonteCarloInput> {
    read_monte_carlo(
        &[
            ("initial_state", initial_state_json),
            ("tool_success_rates", tool_success_rates_json),
            ("goal", goal_json),
            ("config", config_json),
        ][..],
    )
}

/// `simulate_monte_carlo(proposal, initial_state?, tool_success_rates?, goal?, config?)`
/// → the `MonteCarloResult` as JSON text. Rates not given use the config's
/// `default_success_rate` (a runtime's method also consults its event log).
pub fn simulate_monte_carlo(
    proposal_json: &str,
    initial_state_json: Option<&str>,
    tool_success_rates_json: Option<&str>,
    goal_json: Option<&str>,
    config_json: Option<&str>,
) -> Result<String> {
    let p = crate::ir::parse_proposal_transient(proposal_json)?;
    let input = monte_carlo_input(initial_state_json, tool_success_rates_json, goal_json, config_json)?;
    Ok(to_text(&planning::simulate_monte_carlo(&p, &input)?))
}

/// Runs Monte Carlo with `history` (from an event log) under the given rates.
pub(crate) fn simulate_monte_carlo_with_history(
    proposal_json: &str,
    mut input: MonteCarloInput,
    history: HashMap<String, (u64, u64)>,
) -> Result<String> {
    let p = crate::ir::parse_proposal_transient(proposal_json)?;
    input.history = history;
    Ok(to_text(&planning::simulate_monte_carlo(&p, &input)?))
}

/// The daemon's `verify.monte_carlo` params (`{proposal, initial_state?,
/// tool_success_rates?, goal?, config?}`) with `history` from its event log.
pub fn monte_carlo_call(params: &Value, history: HashMap<String, (u64, u64)>) -> Result<Value> {
    let p = proposal_arg(params, "proposal")?;
    let mut input = read_monte_carlo(params)?;
    input.history = history;
    Ok(to_value(&planning::simulate_monte_carlo(&p, &input)?))
}

/// `rank_proposals(candidates, tools?, cost_weight?)` → `[ScoredProposal]`
/// as JSON text, best first. `candidates_json` is an array of proposals.
pub fn rank_proposals(candidates_json: &str, tools: Option<Vec<String>>, cost_weight: Option<f64>) -> Result<String> {
    let v: Value = crate::ir::from_json_str(candidates_json)?;
    Ok(to_text(&rank_value(v, tools, cost_weight)?))
}

fn rank_value(v: Value, tools: Option<Vec<String>>, cost_weight: Option<f64>) -> Result<Vec<planning::ScoredProposal>> {
    let Value::Array(items) = v else {
        return Err(Error::invalid_argument("candidates", "must be an array of proposals"));
    };
    let candidates = items
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            crate::ir::parse_proposal_value(super::json_arg(&c)?)
                .map_err(|e| Error::invalid_argument(format!("candidates[{i}]"), e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(planning::rank_proposals(&candidates, tools.as_deref(), cost_weight, &CostTarget::default()))
}

/// `simulate_with_predictions(proposal, predictions, min_accuracy, initial_state?)`
/// → the final state as JSON text. `predictions_json` maps action id →
/// `{effects, accuracy}`.
pub fn simulate_with_predictions(
    proposal_json: &str,
    predictions_json: &str,
    min_accuracy: f64,
    initial_state_json: Option<&str>,
) -> Result<String> {
    let p = crate::ir::parse_proposal_transient(proposal_json)?;
    let preds: BTreeMap<String, EffectPrediction> =
        parse_arg("predictions", Some(predictions_json))?.unwrap_or_default();
    let state: Map<String, Value> = parse_arg("initial_state", initial_state_json)?.unwrap_or_default();
    Ok(to_text(&planning::simulate_with_predictions(&p, &preds, min_accuracy, &state)?))
}

/// `transaction_check_with_predictions(proposal, predictions, versions?, state?)`
/// → `{consistent, conflicts}` as JSON text. `predictions_json` maps action
/// id → predicted write keys.
pub fn transaction_check_with_predictions(
    proposal_json: &str,
    predictions_json: &str,
    versions_json: Option<&str>,
    state_json: Option<&str>,
) -> Result<String> {
    let p = crate::ir::parse_proposal_transient(proposal_json)?;
    let preds: BTreeMap<String, Vec<String>> = parse_arg("predictions", Some(predictions_json))?.unwrap_or_default();
    let versions: HashMap<String, u64> = parse_arg("versions", versions_json)?.unwrap_or_default();
    let state: Option<Map<String, Value>> = parse_arg("state", state_json)?;
    Ok(to_text(&planning::transaction_check_with_predictions(&p, &preds, &versions, state.as_ref())?))
}

const METHODS: &[&str] =
    &["simulate_monte_carlo", "rank_proposals", "simulate_with_predictions", "transaction_check_with_predictions"];

/// Answers the stateless methods of this area; `None` for any other name.
pub(crate) fn call(method: &str, params: &Value) -> Option<Result<Value>> {
    if !METHODS.contains(&method) {
        return None;
    }
    let run = || -> Result<Value> {
        match method {
            "simulate_monte_carlo" => monte_carlo_call(params, HashMap::new()),
            "rank_proposals" => {
                let c = super::json_arg(super::required(params, "candidates")?)?;
                Ok(to_value(&rank_value(c, value_arg(params, "tools")?, value_arg(params, "cost_weight")?)?))
            }
            "simulate_with_predictions" => {
                let p = proposal_arg(params, "proposal")?;
                let preds: BTreeMap<String, EffectPrediction> = value_arg(params, "predictions")?
                    .ok_or_else(|| Error::invalid_argument("predictions", "is required"))?;
                let min: f64 = value_arg(params, "min_accuracy")?
                    .ok_or_else(|| Error::invalid_argument("min_accuracy", "is required"))?;
                let state: Map<String, Value> = value_arg(params, "initial_state")?.unwrap_or_default();
                Ok(Value::Object(planning::simulate_with_predictions(&p, &preds, min, &state)?))
            }
            _ => {
                let p = proposal_arg(params, "proposal")?;
                let preds: BTreeMap<String, Vec<String>> = value_arg(params, "predictions")?
                    .ok_or_else(|| Error::invalid_argument("predictions", "is required"))?;
                let versions: HashMap<String, u64> = value_arg(params, "versions")?.unwrap_or_default();
                let state: Option<Map<String, Value>> = value_arg(params, "state")?;
                Ok(to_value(&planning::transaction_check_with_predictions(&p, &preds, &versions, state.as_ref())?))
            }
        }
    };
    Some(run())
}
