//! JSON with no repeated key in any object, for every text a proposal comes
//! in: serde_json alone keeps the last of two equal keys silently, so
//! `{"command": "ls", "command": "rm -rf x"}` would be read as the second by
//! us and possibly as the first by whatever showed it to a reviewer. The
//! proposal's own fields refuse a repeat by their derive; the free-form maps
//! (`parameters`, `context`, `expected_effects`, `metadata`, a compensation's
//! `parameters`, a precondition's `value`) are read through [`StrictValue`],
//! and the daemon reads whole frames with [`parse_strict`]. The error is a
//! data error naming the key (`duplicate key `x``).

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// Parses JSON text into a value, refusing an object with a repeated key
/// anywhere in it (`serde_json` alone keeps the last one silently, while a
/// proposal given as text is refused for a repeated field): the error is a
/// data error naming the key.
pub fn parse_strict(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = StrictValue::deserialize(&mut de)?.0;
    de.end()?;
    Ok(v)
}

/// A JSON value read with no repeated key in any of its objects.
pub struct StrictValue(pub Value);

impl<'de> serde::Deserialize<'de> for StrictValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(d).map(|v| v.0)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(StrictValue(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        use serde::de::Error;
        let mut o = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            match o.entry(k) {
                serde_json::map::Entry::Occupied(e) => {
                    return Err(A::Error::custom(format!("duplicate key `{}`", e.key())));
                }
                serde_json::map::Entry::Vacant(e) => {
                    e.insert(map.next_value::<StrictValue>()?.0);
                }
            }
        }
        Ok(Value::Object(o))
    }
}

/// `deserialize_with` for a free-form object field.
pub(crate) fn strict_map<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    use serde::de::Error;
    match StrictValue::deserialize(d)?.0 {
        Value::Object(m) => Ok(m),
        other => Err(D::Error::invalid_type(unexpected(&other), &"a JSON object")),
    }
}

/// `deserialize_with` for a free-form value field.
pub(crate) fn strict_value<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    StrictValue::deserialize(d).map(|v| v.0)
}

fn unexpected(v: &Value) -> serde::de::Unexpected<'_> {
    use serde::de::Unexpected;
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}
