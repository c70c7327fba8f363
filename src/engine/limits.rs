//! Result caches (idempotency, TTL) and per-tool rate limits.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::ir::ToolRateLimit;

/// The cache key of a call: tool name and canonical parameters.
pub fn cache_key(tool: &str, canonical_params: &[u8]) -> String {
    let mut k = String::with_capacity(tool.len() + 1 + canonical_params.len());
    k.push_str(tool);
    k.push('\u{0}');
    k.push_str(&String::from_utf8_lossy(canonical_params));
    k
}

/// Successful results by call; entries may expire.
#[derive(Debug, Default)]
pub struct ResultCache {
    entries: Mutex<HashMap<String, (Option<Instant>, Value)>>,
}

impl ResultCache {
    /// The cached result of a call, when present and not expired.
    pub fn get(&self, key: &str) -> Option<Value> {
        let mut m = self.entries.lock().ok()?;
        match m.get(key) {
            Some((Some(exp), _)) if *exp <= Instant::now() => {
                m.remove(key);
                None
            }
            Some((_, v)) => Some(v.clone()),
            None => None,
        }
    }

    /// Stores a successful result, forever (`ttl = None`) or for `ttl`.
    pub fn put(&self, key: String, value: Value, ttl: Option<Duration>) {
        if let Ok(mut m) = self.entries.lock() {
            let now = Instant::now();
            if m.len() >= 4096 {
                m.retain(|_, (exp, _)| exp.is_none_or(|e| e > now));
            }
            m.insert(key, (ttl.map(|t| now + t), value));
        }
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry.
    pub fn clear(&self) {
        if let Ok(mut m) = self.entries.lock() {
            m.clear();
        }
    }
}

/// The window length of a tool's `rate_limit`; `max_calls = 0` is refused
/// (it would wait forever).
pub(crate) fn window_of(tool: &str, limit: &ToolRateLimit) -> Result<Duration, String> {
    if limit.max_calls == 0 {
        return Err(format!("tool '{tool}' is rate-limited to 0 calls per {} s", limit.interval_secs));
    }
    Ok(Duration::try_from_secs_f64(limit.interval_secs.max(0.0)).unwrap_or(Duration::MAX))
}

/// Sliding-window call limits per tool: at most `max_calls` starts within any
/// trailing `interval_secs`. A call over the limit waits for a slot.
#[derive(Debug, Default)]
pub struct RateLimiter {
    windows: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl RateLimiter {
    /// Takes a slot of the window `key` (at most `max_calls` starts within
    /// any trailing `interval`) when one is free: `None`. Otherwise nothing
    /// is taken and the answer is how long until the oldest start leaves the
    /// window.
    pub fn try_take(&self, key: &str, max_calls: usize, interval: Duration) -> Result<Option<Duration>, String> {
        let mut w = self.windows.lock().map_err(|_| "rate limiter lock poisoned".to_string())?;
        let q = match w.get_mut(key) {
            Some(q) => q,
            None => w.entry(key.to_string()).or_default(),
        };
        let now = Instant::now();
        while q.front().is_some_and(|t| now.duration_since(*t) >= interval) {
            q.pop_front();
        }
        if q.len() < max_calls {
            q.push_back(now);
            return Ok(None);
        }
        Ok(Some(match q.front() {
            Some(oldest) => (*oldest + interval).saturating_duration_since(now),
            None => Duration::ZERO,
        }))
    }

    /// Waits until the tool may be called, then takes a slot. `max_calls = 0`
    /// is refused (it would wait forever).
    pub async fn acquire(&self, tool: &str, limit: &ToolRateLimit) -> Result<(), String> {
        let interval = window_of(tool, limit)?;
        loop {
            let wait = match self.try_take(tool, limit.max_calls as usize, interval)? {
                None => return Ok(()),
                Some(wait) => wait,
            };
            tokio::time::sleep(wait.max(Duration::from_micros(100))).await;
        }
    }
}
