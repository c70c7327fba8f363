//! Simulation and transaction checks with a world model's predictions
//! folded in (the original's "Code World Models" slices 2 and 3b).
//!
//! Both rewrite the proposal and hand it to the one implementation in
//! [`verify`](crate::verify): a prediction that passes the accuracy gate
//! replaces the action's declared `expected_effects` (a `state_write`'s own
//! write stays), and predicted write keys are added to the action's
//! transactional write set.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ir::ActionProposal;
use crate::verify::{self, TransactionReport};
use crate::{Error, Result};

/// A world model's prediction of what one action writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffectPrediction {
    /// The predicted effects, `{key: value}`.
    pub effects: Map<String, Value>,
    /// The model's measured accuracy, 0.0..=1.0.
    pub accuracy: f64,
}

fn unit(name: &str, x: f64) -> Result<()> {
    if x.is_finite() && (0.0..=1.0).contains(&x) {
        Ok(())
    } else {
        Err(Error::invalid_argument(name, format!("must be in 0.0..=1.0, got {x}")))
    }
}

fn known_ids<'a>(p: &'a ActionProposal, ids: impl Iterator<Item = &'a String>) -> Result<()> {
    let have: HashSet<&str> = p.actions.iter().map(|a| a.id.as_str()).collect();
    for id in ids {
        if !have.contains(id.as_str()) {
            return Err(Error::invalid_argument(
                format!("predictions.{id}"),
                format!("no action '{id}' in the proposal"),
            ));
        }
    }
    Ok(())
}

/// The final state, applying each prediction whose `accuracy >= min_accuracy`
/// in place of that action's `expected_effects`; other actions keep their
/// declared effects, so an inaccurate model never changes the result.
pub fn simulate_with_predictions(
    proposal: &ActionProposal,
    predictions: &BTreeMap<String, EffectPrediction>,
    min_accuracy: f64,
    initial_state: &Map<String, Value>,
) -> Result<Map<String, Value>> {
    unit("min_accuracy", min_accuracy)?;
    for (id, p) in predictions {
        unit(&format!("predictions.{id}.accuracy"), p.accuracy)?;
    }
    known_ids(proposal, predictions.keys())?;
    let mut p = proposal.clone();
    for a in &mut p.actions {
        if let Some(pred) = predictions.get(&a.id)
            && pred.accuracy >= min_accuracy
        {
            a.expected_effects = (&pred.effects).into();
        }
    }
    Ok(verify::simulate(&p, initial_state))
}

/// `transaction_check` with each action's write set the union of its
/// effective write set and the keys predicted for it.
pub fn transaction_check_with_predictions(
    proposal: &ActionProposal,
    predictions: &BTreeMap<String, Vec<String>>,
    versions: &HashMap<String, u64>,
    state: Option<&Map<String, Value>>,
) -> Result<TransactionReport> {
    known_ids(proposal, predictions.keys())?;
    let mut p = proposal.clone();
    for a in &mut p.actions {
        if let Some(keys) = predictions.get(&a.id) {
            let mut w = a.effective_write_set();
            for k in keys {
                if !w.contains(k) {
                    w.push(k.clone());
                }
            }
            a.write_set = w;
        }
    }
    Ok(verify::transaction_check(&p, versions, state))
}
