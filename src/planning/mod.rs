//! Planning functions: pure analyses that help choose and size a proposal
//! before it runs. Monte Carlo rollouts with failing tools
//! ([`montecarlo`]), ranking candidates by verification and cost
//! ([`rank`]), and simulation / transaction checks with a world model's
//! predictions ([`predict`]). They build on [`verify`](crate::verify) and
//! never execute anything.

pub mod montecarlo;
pub mod predict;
pub mod rank;

pub use montecarlo::{
    GoalCondition, MonteCarloConfig, MonteCarloInput, MonteCarloResult, RateSource, ToolRate, simulate_monte_carlo,
};
pub use predict::{EffectPrediction, simulate_with_predictions, transaction_check_with_predictions};
pub use rank::{CostTarget, ScoredProposal, rank_proposals};
