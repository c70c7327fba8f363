//! Session state of the gate: `session`-scoped decisions (in memory, lapsing
//! at session end or expiry) and the session's circuit breaker.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::breaker::{BreakerConfig, CircuitBreaker};
use super::plan::Decision;

/// How durably a client decision applies beyond the item it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// This item only (the default).
    #[default]
    Once,
    /// Every later item of the session with the same `(provider, operation_name)`.
    Session,
    /// Persisted as a policy rule for future sessions.
    Always,
}

/// One corrected argument: the call said `from`, the client wants `to`
/// (`None` = absent). `field` is `None` when the whole input was replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldCorrection {
    /// The top-level argument, or `None` for the whole input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The value the corrected call had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Value>,
    /// The value the client chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Value>,
}

/// A remembered `session`-scoped verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRule {
    /// The provider it applies to.
    pub provider: String,
    /// The operation it applies to.
    pub operation_name: String,
    /// `allow` or `deny`.
    pub decision: Decision,
    /// The corrections of an allow with corrected input, re-validated against
    /// each later call's own arguments (a verdict, not frozen arguments).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corrections: Vec<FieldCorrection>,
    /// The item whose decision created the rule.
    pub source_item: String,
    /// When.
    pub decided_at: DateTime<Utc>,
}

/// The gate's state for one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateSession {
    /// The session id.
    pub session_id: String,
    /// When the session started.
    pub started_at: DateTime<Utc>,
    /// Lifetime in seconds; `None` = until ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Set once the session ended.
    #[serde(default)]
    pub ended: bool,
    /// Remembered `session`-scoped verdicts.
    #[serde(default)]
    pub rules: Vec<SessionRule>,
    /// The denial circuit breaker.
    #[serde(default)]
    pub breaker: CircuitBreaker,
}

impl GateSession {
    /// A session started at `now`, no expiry, default breaker.
    pub fn new(session_id: impl Into<String>, now: DateTime<Utc>) -> Self {
        GateSession {
            session_id: session_id.into(),
            started_at: now,
            ttl_secs: None,
            ended: false,
            rules: Vec::new(),
            breaker: CircuitBreaker::default(),
        }
    }

    /// The session expires `ttl_secs` after its start.
    pub fn with_ttl(mut self, ttl_secs: u64) -> Self {
        self.ttl_secs = Some(ttl_secs);
        self
    }

    /// The breaker thresholds.
    pub fn with_breaker(mut self, config: BreakerConfig) -> Self {
        self.breaker = CircuitBreaker::new(config);
        self
    }

    /// True until the session ended or expired.
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        if self.ended {
            return false;
        }
        match self.ttl_secs {
            None => true,
            Some(ttl) => {
                let ttl = i64::try_from(ttl).ok().and_then(Duration::try_seconds).unwrap_or(Duration::MAX);
                self.started_at.checked_add_signed(ttl).is_none_or(|end| now < end)
            }
        }
    }

    /// Ends the session: its `session`-scoped rules lapse.
    pub fn end(&mut self) {
        self.ended = true;
        self.rules.clear();
    }

    /// Drops the remembered rules when the session is no longer active.
    pub fn expire(&mut self, now: DateTime<Utc>) {
        if !self.is_active(now) {
            self.rules.clear();
        }
    }

    /// The live session rule of `(provider, operation_name)`.
    pub fn rule(&self, provider: &str, operation_name: &str, now: DateTime<Utc>) -> Option<&SessionRule> {
        if !self.is_active(now) {
            return None;
        }
        self.rules.iter().find(|r| r.provider == provider && r.operation_name == operation_name)
    }

    /// Remembers a rule, replacing an older one for the same pair.
    pub fn remember(&mut self, rule: SessionRule) {
        self.rules.retain(|r| !(r.provider == rule.provider && r.operation_name == rule.operation_name));
        self.rules.push(rule);
    }
}

/// The corrections turning `original` into `corrected`: per top-level key when
/// both are objects, else one whole-input correction.
pub fn corrections_between(original: &Value, corrected: &Value) -> Vec<FieldCorrection> {
    match (original, corrected) {
        (Value::Object(o), Value::Object(c)) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.extend(c.keys().filter(|k| !o.contains_key(*k)));
            keys.into_iter()
                .filter(|k| o.get(*k) != c.get(*k))
                .map(|k| FieldCorrection { field: Some(k.clone()), from: o.get(k).cloned(), to: c.get(k).cloned() })
                .collect()
        }
        _ if original == corrected => Vec::new(),
        _ => vec![FieldCorrection { field: None, from: Some(original.clone()), to: Some(corrected.clone()) }],
    }
}

/// Re-applies corrections to a new call's own arguments. A correction fits
/// only where the new call says what the corrected call said; otherwise the
/// error names the argument that differs.
pub fn apply_corrections(input: &Value, corrections: &[FieldCorrection]) -> Result<Value, String> {
    let mut out = input.clone();
    for c in corrections {
        match &c.field {
            None => {
                if c.from.as_ref() != Some(&out) {
                    return Err("the call's arguments differ from the corrected call's".to_string());
                }
                out = c.to.clone().unwrap_or(Value::Null);
            }
            Some(k) => {
                let Value::Object(map) = &mut out else {
                    return Err("the call's arguments are not an object".to_string());
                };
                if map.get(k) != c.from.as_ref() {
                    return Err(format!("argument `{k}` differs from the corrected call's"));
                }
                match &c.to {
                    Some(v) => {
                        map.insert(k.clone(), v.clone());
                    }
                    None => {
                        map.remove(k);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Validates arguments against a parameters JSON Schema. An invalid schema
/// fails (closed).
pub fn validate_input(schema: &Value, input: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|e| format!("invalid parameters schema: {e}"))?;
    validator.validate(input).map_err(|e| {
        let path = e.instance_path().to_string();
        if path.is_empty() { e.to_string() } else { format!("{path}: {e}") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn corrections_round_trip_and_refuse_other_arguments() {
        let orig = json!({"path": "/etc/hosts", "content": "x", "mode": 1});
        let corr = json!({"path": "/tmp/hosts", "content": "x"});
        let cs = corrections_between(&orig, &corr);
        assert_eq!(cs.len(), 2);
        assert_eq!(apply_corrections(&orig, &cs).unwrap(), corr);
        let other = json!({"path": "/etc/hosts", "content": "y", "mode": 1});
        assert_eq!(apply_corrections(&other, &cs).unwrap(), json!({"path": "/tmp/hosts", "content": "y"}));
        let err = apply_corrections(&json!({"path": "/home/x", "content": "y", "mode": 1}), &cs).unwrap_err();
        assert!(err.contains("`path`"), "{err}");
    }

    #[test]
    fn session_expires_after_ttl_and_on_end() {
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().with_timezone(&Utc);
        let mut s = GateSession::new("s", t0).with_ttl(60);
        assert!(s.is_active(t0 + Duration::seconds(59)));
        assert!(!s.is_active(t0 + Duration::seconds(60)));
        s.ttl_secs = None;
        assert!(s.is_active(t0 + Duration::days(9)));
        s.end();
        assert!(!s.is_active(t0));
    }
}
