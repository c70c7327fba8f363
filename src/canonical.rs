//! Canonical JSON: the one canonical form of a JSON value in this crate,
//! RFC 8785 (JCS). Event digests (`params_digest`), approval keys (the
//! digest of a tool's post-hook input), tier ledger fingerprints and the
//! ledger's MACs are all computed over it.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The RFC 8785 canonical text of any JSON value.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    match value {
        Value::Object(m) => canonical_object(m),
        other => {
            let mut out = Vec::with_capacity(16);
            if write_value(other, &mut out) { out } else { serde_jcs::to_vec(other).unwrap_or_default() }
        }
    }
}

/// [`canonical_json`] as a `String`.
pub fn canonical_string(value: &Value) -> String {
    // The canonical form is UTF-8 JSON text by construction.
    String::from_utf8(canonical_json(value)).unwrap_or_default()
}

/// Lowercase hex SHA-256 of the canonical form of `value`.
pub fn digest(value: &Value) -> String {
    sha256_hex(&canonical_json(value))
}

/// The RFC 8785 canonical text of a parameters object.
///
/// A direct writer handles every value: null, booleans, strings, arrays,
/// objects (members sorted by UTF-16 code units), integers of magnitude at
/// most 2^53 as integers and every other number as the nearest double in
/// ES6 form (`ryu-js`, as `serde_jcs`); should it ever refuse a value, the
/// whole value goes through `serde_jcs`, so the output is always the JCS form.
/// It takes a `serde_json::Map` or an action's [`crate::ir::Object`] alike.
pub fn canonical_object<'a, M>(value: &'a M) -> Vec<u8>
where
    M: serde::Serialize + ?Sized,
    &'a M: IntoIterator<Item = (&'a String, &'a Value)>,
{
    let members: Vec<(&String, &Value)> = value.into_iter().collect();
    if members.is_empty() {
        return b"{}".to_vec();
    }
    let mut out = Vec::with_capacity(64);
    if write_members(members, &mut out) { out } else { serde_jcs::to_vec(value).unwrap_or_default() }
}

/// Appends the RFC 8785 canonical text of `value` to `out`.
pub(crate) fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    let start = out.len();
    if !write_value(value, out) {
        out.truncate(start);
        out.extend_from_slice(&serde_jcs::to_vec(value).unwrap_or_default());
    }
}

const MAX_EXACT_INT: u64 = 1 << 53;

/// Appends the RFC 8785 text of the JSON number `n` (past 2^53, the
/// nearest double's).
pub(crate) fn write_u64(out: &mut Vec<u8>, n: u64) {
    if n <= MAX_EXACT_INT {
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    } else {
        write_canonical(&Value::from(n), out);
    }
}

/// Appends the RFC 8785 text of a string (JSON's own escaping).
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    if crate::ir::write::escapes(s) {
        // A string always serialises.
        let _ = serde_json::to_writer(&mut *out, s);
    } else {
        // Nothing to escape (nearly every string of a record): copied whole.
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

/// Whether the canonical text of `v` reads back as `v` itself: every number
/// an integer of magnitude at most 2^53 or a float that is not integral
/// below 1e21 (RFC 8785 writes a larger integer as the nearest double, and
/// an integral float such as `2.0` or `-0.0` as an integer).
pub(crate) fn reads_back(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.unsigned_abs() <= MAX_EXACT_INT
            } else if let Some(u) = n.as_u64() {
                u <= MAX_EXACT_INT
            } else {
                n.as_f64().is_some_and(|f| f.fract() != 0.0 || f.abs() >= 1e21)
            }
        }
        Value::Array(items) => items.iter().all(reads_back),
        Value::Object(m) => m.values().all(reads_back),
        Value::Null | Value::Bool(_) | Value::String(_) => true,
    }
}

/// An object written member by member in RFC 8785 form, for a writer that
/// knows its keys: they must come in code-unit order (checked in debug
/// builds). Tracks whether every value written reads back as itself
/// ([`reads_back`]).
pub(crate) struct Members<'a> {
    out: &'a mut Vec<u8>,
    last: Option<&'static str>,
    /// Every value so far reads back exactly.
    pub(crate) exact: bool,
}

impl<'a> Members<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>) -> Members<'a> {
        Members { out, last: None, exact: true }
    }

    fn key(&mut self, key: &'static str) -> &mut Vec<u8> {
        debug_assert!(self.last.is_none_or(|l| l < key), "members out of order: `{key}` after {:?}", self.last);
        self.out.push(if self.last.is_none() { b'{' } else { b',' });
        self.last = Some(key);
        write_str(self.out, key);
        self.out.push(b':');
        self.out
    }

    /// A string member.
    pub(crate) fn str(&mut self, key: &'static str, v: &str) {
        let out = self.key(key);
        write_str(out, v);
    }

    /// A string member, `null` when absent.
    pub(crate) fn opt_str(&mut self, key: &'static str, v: Option<&str>) {
        let out = self.key(key);
        match v {
            Some(v) => write_str(out, v),
            None => out.extend_from_slice(b"null"),
        }
    }

    /// A boolean member.
    pub(crate) fn bool(&mut self, key: &'static str, v: bool) {
        let out = self.key(key);
        out.extend_from_slice(if v { b"true" } else { b"false" });
    }

    /// Any value.
    pub(crate) fn value(&mut self, key: &'static str, v: &Value) {
        self.exact &= reads_back(v);
        let out = self.key(key);
        write_canonical(v, out);
    }

    /// An object of these members (in any order).
    pub(crate) fn object<'m, M>(&mut self, key: &'static str, m: &'m M)
    where
        M: serde::Serialize + ?Sized,
        &'m M: IntoIterator<Item = (&'m String, &'m Value)>,
    {
        self.exact &= m.into_iter().all(|(_, v)| reads_back(v));
        let text = canonical_object(m);
        self.key(key).extend_from_slice(&text);
    }

    /// A member whose value the caller writes (in RFC 8785 form) to the
    /// buffer returned; it accounts for [`Members::exact`] itself.
    pub(crate) fn raw(&mut self, key: &'static str) -> &mut Vec<u8> {
        self.key(key)
    }

    /// An array, each item written (in RFC 8785 form) by `each`, which
    /// accounts for [`Members::exact`] itself.
    pub(crate) fn list<T>(
        &mut self,
        key: &'static str,
        items: impl IntoIterator<Item = T>,
        mut each: impl FnMut(&mut Vec<u8>, T),
    ) {
        let out = self.key(key);
        out.push(b'[');
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            each(out, item);
        }
        out.push(b']');
    }

    /// An array of strings.
    pub(crate) fn strs(&mut self, key: &'static str, items: &[String]) {
        self.list(key, items, |out, s| write_str(out, s));
    }

    /// Closes the object.
    pub(crate) fn end(self) {
        if self.last.is_none() {
            self.out.push(b'{');
        }
        self.out.push(b'}');
    }
}

fn write_value(v: &Value, out: &mut Vec<u8>) -> bool {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= MAX_EXACT_INT) {
                out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
            } else if let Some(u) = n.as_u64().filter(|u| *u <= MAX_EXACT_INT) {
                out.extend_from_slice(itoa::Buffer::new().format(u).as_bytes());
            } else {
                // Every other number as RFC 8785 (and `serde_jcs`) writes it:
                // the IEEE double nearest, in ECMAScript's shortest form.
                #[allow(clippy::cast_precision_loss)]
                let f = n.as_f64().or_else(|| n.as_u64().map(|u| u as f64)).or_else(|| n.as_i64().map(|i| i as f64));
                match f.filter(|f| f.is_finite()) {
                    Some(f) => out.extend_from_slice(ryu_js::Buffer::new().format_finite(f).as_bytes()),
                    None => return false,
                }
            }
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                if !write_value(item, out) {
                    return false;
                }
            }
            out.push(b']');
        }
        Value::Object(m) => return write_object(m, out),
    }
    true
}

fn write_object(m: &Map<String, Value>, out: &mut Vec<u8>) -> bool {
    write_members(m.iter().collect(), out)
}

/// Writes an object of these members, sorted as RFC 8785 sorts them.
fn write_members(mut members: Vec<(&String, &Value)>, out: &mut Vec<u8>) -> bool {
    if members.iter().all(|(k, _)| k.is_ascii()) {
        members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    } else {
        members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    }
    out.push(b'{');
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if serde_json::to_writer(&mut *out, k).is_err() {
            return false;
        }
        out.push(b':');
        if !write_value(v, out) {
            return false;
        }
    }
    out.push(b'}');
    true
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_text(&sha256_hex_bytes(bytes)).to_string()
}

/// [`sha256_hex_bytes`]'s digits as text.
pub(crate) fn hex_text(digits: &[u8; 64]) -> &str {
    // Hex digits are ASCII.
    std::str::from_utf8(digits).unwrap_or_default()
}

/// [`sha256_hex`]'s digits, without a `String` to hold them.
pub(crate) fn sha256_hex_bytes(bytes: &[u8]) -> [u8; 64] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 64];
    for (i, b) in Sha256::digest(bytes).iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 0xf)];
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_string_is_written_as_serde_writes_it() {
        // Every ASCII byte and a few others, at the start, middle and end of
        // strings either side of the short/long split (32 bytes).
        let others = ["é", "✓", "𝄞", "\u{7f}", "\u{2028}"];
        let mut specials: Vec<String> = (0u8..0x80).map(|b| char::from(b).to_string()).collect();
        specials.extend(others.iter().map(|s| s.to_string()));
        for len in [0usize, 1, 7, 8, 9, 31, 32, 33, 64, 200] {
            for sp in &specials {
                for at in [0, len / 2, len] {
                    let mut t: String = "a".repeat(len);
                    t.insert_str(at, sp);
                    let mut out = Vec::new();
                    write_str(&mut out, &t);
                    assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&t).unwrap(), "{t:?}");
                }
            }
        }
    }

    #[test]
    fn digest_of_empty_and_canonical_order() {
        let mut a = Map::new();
        a.insert("b".into(), json!(1));
        a.insert("a".into(), json!(2));
        assert_eq!(canonical_object(&a), br#"{"a":2,"b":1}"#);
        assert_eq!(sha256_hex(&canonical_object(&Map::new())), hex::encode(Sha256::digest(b"{}")));
    }

    #[test]
    fn direct_writer_matches_serde_jcs() {
        let cases = [
            json!({"b": 1, "a": [true, null, "x\u{0}\u{1f}\"\\/é"], "c": {"z": -3, "y": {}}}),
            json!({"\u{e000}": 1, "\u{1f600}": 2, "a": 3, "": 4}),
            json!({"big": 9007199254740993_u64, "neg": -9007199254740993_i64, "f": 1.5e1, "g": 1e21}),
            json!({"n": 9007199254740992_u64, "m": -9007199254740992_i64, "z": 0, "s": "\u{2028}\u{7f}"}),
        ];
        for c in cases {
            let m = c.as_object().unwrap();
            assert_eq!(String::from_utf8(canonical_object(m)).unwrap(), serde_jcs::to_string(m).unwrap(), "{c}");
        }
    }

    pub(crate) fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-(1i64 << 54)..(1i64 << 54)).prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            prop_oneof![Just(0.1f64), Just(-0.0), Just(1e21), Just(1e-7), Just(5e-324), Just(f64::MAX), Just(123.0)]
                .prop_map(Value::from),
            "\\PC{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec(("\\PC{0,4}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Numbers of every kind (integers past 2^53, doubles near the ES6
        /// form's switch to exponents, -0) and nested values: the direct
        /// writer is byte for byte `serde_jcs`, never its fallback.
        #[test]
        fn generated_values_match_serde_jcs(v in any_json()) {
            let mut direct = Vec::new();
            proptest::prop_assert!(write_value(&v, &mut direct), "the direct writer refused {}", v);
            proptest::prop_assert_eq!(String::from_utf8(direct).unwrap(), serde_jcs::to_string(&v).unwrap());
        }
    }

    #[test]
    fn any_value_matches_serde_jcs() {
        for v in [json!(null), json!([3, {"b": 1, "a": 1.5}]), json!("x\u{1}"), json!(1e300), json!({"k": [1e-7]})] {
            assert_eq!(canonical_string(&v), serde_jcs::to_string(&v).unwrap(), "{v}");
        }
    }
}
