//! Why a precondition fails, worded as the original runtime words it.

use serde_json::Value;

use crate::ir::{Operator, Precondition};

/// The finding for a precondition that does not hold against `current` (the
/// key's value, `None` when absent). The verdict itself is
/// [`Precondition::evaluate_value`], the one the executor uses; this only
/// explains it.
pub(crate) fn failure_message(pc: &Precondition, current: Option<&Value>) -> String {
    let key = &pc.key;
    let reason = match (&pc.operator, current) {
        (Operator::Exists, _) => format!("key '{key}' does not exist"),
        (Operator::NotExists, _) => format!("key '{key}' exists"),
        (Operator::Contains, None) => format!("key '{key}' has no value, cannot check contains"),
        (_, None) => format!("key '{key}' has no value"),
        (Operator::Eq, Some(cur)) => format!("'{key}' is {cur:?}, need {:?}", pc.value),
        (Operator::Neq, Some(cur)) => format!("'{key}' is {cur:?}, must not be"),
        (op @ (Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte), Some(cur)) => {
            if cur.is_number() && pc.value.is_number() {
                format!("'{key}' is {cur:?}, need {} {:?}", op.as_str(), pc.value)
            } else {
                format!("cannot compare '{key}': {cur:?} {} {:?}", op.as_str(), pc.value)
            }
        }
        (Operator::Contains, Some(_)) => format!("key '{key}' does not contain {:?}", pc.value),
        (Operator::Unknown(op), Some(_)) => format!("unknown operator '{op}'"),
    };
    format!("precondition will fail: {reason}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(op: &str, value: Value, current: Option<Value>) -> String {
        failure_message(&Precondition::new("k", Operator::parse(op), value), current.as_ref())
    }

    #[test]
    fn wording() {
        assert_eq!(
            msg("eq", json!(true), Some(json!(false))),
            "precondition will fail: 'k' is Bool(false), need Bool(true)"
        );
        assert_eq!(msg("eq", json!(true), None), "precondition will fail: key 'k' has no value");
        assert_eq!(msg("exists", Value::Null, None), "precondition will fail: key 'k' does not exist");
        assert_eq!(msg("gt", json!(7), Some(json!(5))), "precondition will fail: 'k' is Number(5), need gt Number(7)");
        assert_eq!(
            msg("gte", json!("x"), Some(json!(5))),
            "precondition will fail: cannot compare 'k': Number(5) gte String(\"x\")"
        );
        assert_eq!(msg("neq", json!(5), Some(json!(5))), "precondition will fail: 'k' is Number(5), must not be");
        assert_eq!(
            msg("contains", json!("z"), None),
            "precondition will fail: key 'k' has no value, cannot check contains"
        );
        assert_eq!(msg("weird", json!(1), Some(json!(1))), "precondition will fail: unknown operator 'weird'");
        assert_eq!(
            msg("eq", json!({"q": 2}), Some(json!({"q": 1}))),
            "precondition will fail: 'k' is Object {\"q\": Number(1)}, need Object {\"q\": Number(2)}"
        );
    }
}
