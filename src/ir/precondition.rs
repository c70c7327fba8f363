//! Preconditions: state predicates that must hold before an action runs.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A precondition operator. Unknown operators are kept verbatim (so they
/// round-trip) and always evaluate to a failed check.
///
/// `#[non_exhaustive]`: operators may be added, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Operator {
    /// `state[key] == value`
    #[default]
    Eq,
    /// `state[key] != value`
    Neq,
    /// numeric `>`
    Gt,
    /// numeric `<`
    Lt,
    /// numeric `>=`
    Gte,
    /// numeric `<=`
    Lte,
    /// `key` is present in state
    Exists,
    /// `key` is absent from state
    NotExists,
    /// substring (string) or membership (array)
    Contains,
    /// An operator this runtime does not know: always a failed check.
    Unknown(String),
}

impl Operator {
    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Operator::Eq => "eq",
            Operator::Neq => "neq",
            Operator::Gt => "gt",
            Operator::Lt => "lt",
            Operator::Gte => "gte",
            Operator::Lte => "lte",
            Operator::Exists => "exists",
            Operator::NotExists => "not_exists",
            Operator::Contains => "contains",
            Operator::Unknown(s) => s,
        }
    }

    /// Parses a wire spelling; never fails.
    pub fn parse(s: &str) -> Operator {
        match s {
            "eq" => Operator::Eq,
            "neq" => Operator::Neq,
            "gt" => Operator::Gt,
            "lt" => Operator::Lt,
            "gte" => Operator::Gte,
            "lte" => Operator::Lte,
            "exists" => Operator::Exists,
            "not_exists" => Operator::NotExists,
            "contains" => Operator::Contains,
            other => Operator::Unknown(other.to_string()),
        }
    }
}

impl Serialize for Operator {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Operator {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read in place: no string is allocated for a known spelling.
        struct Spelling;
        impl serde::de::Visitor<'_> for Spelling {
            type Value = Operator;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Operator, E> {
                Ok(Operator::parse(v))
            }
        }
        d.deserialize_str(Spelling)
    }
}

/// A state predicate that must hold before the action runs.
///
/// `#[non_exhaustive]`: fields may be added, so code outside this crate
/// builds one with [`Precondition::new`] and the `with_*` setters.
///
/// ```
/// use car_runtime::ir::{Operator, Precondition};
///
/// let p = Precondition::new("count", Operator::Gte, serde_json::json!(3)).with_description("enough items");
/// assert_eq!(p.describe(), "enough items");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Precondition {
    /// State key to evaluate.
    pub key: String,
    /// Operator; default `eq`.
    #[serde(default)]
    pub operator: Operator,
    /// Compared per the operator; default `null`.
    #[serde(default, deserialize_with = "super::strict::strict_value")]
    pub value: Value,
    /// Human-readable; surfaced in errors.
    #[serde(default)]
    pub description: String,
}

impl Precondition {
    /// A precondition `key <op> value`.
    pub fn new(key: impl Into<String>, operator: Operator, value: Value) -> Self {
        Precondition { key: key.into(), operator, value, description: String::new() }
    }

    /// The same precondition with this human-readable `description` (used
    /// in error messages instead of the generated one).
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Evaluates against a state map. Never errors: an unknown operator or
    /// incomparable values are a failed check.
    pub fn evaluate(&self, state: &Map<String, Value>) -> bool {
        self.evaluate_value(state.get(&self.key))
    }

    /// Evaluates against the current value of the key (`None` = absent).
    pub fn evaluate_value(&self, current: Option<&Value>) -> bool {
        match &self.operator {
            Operator::Exists => current.is_some(),
            Operator::NotExists => current.is_none(),
            // An absent key has no value: it neither equals nor differs from
            // anything (so `eq null` is not `not_exists`), as in the original.
            Operator::Eq => current.is_some_and(|c| json_eq(c, &self.value)),
            Operator::Neq => current.is_some_and(|c| !json_eq(c, &self.value)),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let (Some(a), Some(b)) = (current.and_then(as_f64), as_f64(&self.value)) else {
                    return false;
                };
                match self.operator {
                    Operator::Gt => a > b,
                    Operator::Lt => a < b,
                    Operator::Gte => a >= b,
                    _ => a <= b,
                }
            }
            Operator::Contains => match current {
                Some(Value::String(s)) => match &self.value {
                    Value::String(needle) => s.contains(needle.as_str()),
                    _ => false,
                },
                Some(Value::Array(items)) => items.iter().any(|v| json_eq(v, &self.value)),
                _ => false,
            },
            Operator::Unknown(_) => false,
        }
    }

    /// A one-line human description of the check, for error messages.
    pub fn describe(&self) -> String {
        if !self.description.is_empty() {
            return self.description.clone();
        }
        match self.operator {
            Operator::Exists | Operator::NotExists => format!("`{}` {}", self.key, self.operator.as_str()),
            _ => format!("`{}` {} {}", self.key, self.operator.as_str(), self.value),
        }
    }
}

/// Numeric coercion: JSON numbers only. Strings and booleans do not coerce.
fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// JSON equality where numbers compare by value (`1 == 1.0`).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(i), Some(j)) = (x.as_i64(), y.as_i64()) {
                i == j
            } else if let (Some(i), Some(j)) = (x.as_u64(), y.as_u64()) {
                i == j
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn st(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn operators() {
        let s = st(json!({"n": 5, "s": "hello", "a": [1, "x"], "b": true, "z": null}));
        let p = |k: &str, op: &str, v: Value| Precondition::new(k, Operator::parse(op), v).evaluate(&s);
        assert!(p("n", "eq", json!(5)));
        assert!(p("n", "eq", json!(5.0)));
        assert!(!p("n", "neq", json!(5)));
        assert!(p("n", "gt", json!(4)));
        assert!(!p("n", "gt", json!("4")));
        assert!(!p("s", "lt", json!(4)));
        assert!(p("n", "gte", json!(5)));
        assert!(p("n", "lte", json!(5)));
        assert!(!p("missing", "lte", json!(5)));
        assert!(p("z", "exists", Value::Null));
        assert!(p("missing", "not_exists", Value::Null));
        assert!(p("s", "contains", json!("ell")));
        assert!(p("a", "contains", json!("x")));
        assert!(!p("a", "contains", json!("y")));
        assert!(!p("n", "contains", json!(5)));
        assert!(!p("n", "weird", json!(5)));
        assert!(!p("missing", "eq", Value::Null));
        assert!(!p("missing", "neq", json!(1)));
        assert!(p("z", "eq", Value::Null));
    }

    #[test]
    fn the_constructor_builds_what_the_struct_literal_builds() {
        let built = Precondition::new("n", Operator::Gte, json!(3)).with_description("enough");
        let literal =
            Precondition { key: "n".into(), operator: Operator::Gte, value: json!(3), description: "enough".into() };
        assert_eq!(built, literal);
        assert_eq!(serde_json::to_value(&built).unwrap(), serde_json::to_value(&literal).unwrap());
    }
}
