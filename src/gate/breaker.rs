//! The circuit breaker on repeated denials: N consecutive denials, or M
//! denials within a sliding window, in one session end the turn gracefully.
//!
//! Pure: the clock is passed in.

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::plan::BreakerTrip;

/// The status a tripped breaker gives the turn.
pub const BREAKER_STATUS: &str = "denial_circuit_open";

/// Thresholds of the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive denials that trip it (N); default 3. 0 disables the condition.
    #[serde(default = "d_consecutive")]
    pub max_consecutive_denials: u32,
    /// Denials within the window that trip it (M); default 5. 0 disables the condition.
    #[serde(default = "d_window_denials")]
    pub max_window_denials: u32,
    /// The sliding window in seconds; default 300.
    #[serde(default = "d_window_secs")]
    pub window_secs: u64,
}

fn d_consecutive() -> u32 {
    3
}
fn d_window_denials() -> u32 {
    5
}
fn d_window_secs() -> u64 {
    300
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            max_consecutive_denials: d_consecutive(),
            max_window_denials: d_window_denials(),
            window_secs: d_window_secs(),
        }
    }
}

/// The breaker of one session. Counts persist across the session's turns; a
/// trip ends the current turn, and [`CircuitBreaker::begin_turn`] re-closes
/// it for the next one (a further denial trips it again while the counts are
/// still over the thresholds).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CircuitBreaker {
    /// Thresholds.
    #[serde(default)]
    pub config: BreakerConfig,
    /// Denials since the last non-denial decision.
    #[serde(default)]
    pub consecutive: u32,
    /// Times of the denials still inside the window.
    #[serde(default)]
    pub recent: VecDeque<DateTime<Utc>>,
    /// Set while the breaker is open for the current turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tripped: Option<BreakerTrip>,
}

impl CircuitBreaker {
    /// A closed breaker with `config`.
    pub fn new(config: BreakerConfig) -> Self {
        CircuitBreaker { config, ..CircuitBreaker::default() }
    }

    /// True while the breaker is open.
    pub fn is_open(&self) -> bool {
        self.tripped.is_some()
    }

    /// Records a non-denial decision: the consecutive count restarts.
    pub fn record_allow(&mut self) {
        self.consecutive = 0;
    }

    /// Records a denial at `now`; returns the trip when this denial opened the breaker.
    pub fn record_denial(&mut self, now: DateTime<Utc>) -> Option<BreakerTrip> {
        self.consecutive = self.consecutive.saturating_add(1);
        self.recent.push_back(now);
        self.prune(now);
        if self.tripped.is_some() {
            return None;
        }
        let c = self.config;
        let window = self.recent.len() as u32;
        let trip = if c.max_consecutive_denials > 0 && self.consecutive >= c.max_consecutive_denials {
            Some(BreakerTrip {
                status: BREAKER_STATUS.to_string(),
                condition: "consecutive".to_string(),
                denials: self.consecutive,
                message: format!(
                    "turn ended: {} consecutive denials reached the limit of {}",
                    self.consecutive, c.max_consecutive_denials
                ),
            })
        } else if c.max_window_denials > 0 && window >= c.max_window_denials {
            Some(BreakerTrip {
                status: BREAKER_STATUS.to_string(),
                condition: "window".to_string(),
                denials: window,
                message: format!(
                    "turn ended: {window} denials within {}s reached the limit of {}",
                    c.window_secs, c.max_window_denials
                ),
            })
        } else {
            None
        };
        self.tripped = trip.clone();
        trip
    }

    /// Re-closes the breaker for a new turn; the counts stay.
    pub fn begin_turn(&mut self) {
        self.tripped = None;
    }

    /// Forgets everything.
    pub fn reset(&mut self) {
        self.consecutive = 0;
        self.recent.clear();
        self.tripped = None;
    }

    fn prune(&mut self, now: DateTime<Utc>) {
        let window =
            i64::try_from(self.config.window_secs).ok().and_then(Duration::try_seconds).unwrap_or(Duration::MAX);
        while let Some(t) = self.recent.front() {
            if now.signed_duration_since(*t) > window {
                self.recent.pop_front();
            } else {
                break;
            }
        }
    }
}
