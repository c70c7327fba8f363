//! [`Object`]: a JSON object as an action holds its `parameters`,
//! `expected_effects` and `metadata`: its entries in one vector, in
//! document order.
//!
//! Nearly every action carries one or two small objects (`{"path": ...}`,
//! `{"k": v}`), and reading each into a `serde_json::Map` (an `IndexMap`:
//! a hash table, an entries vector, a SipHash of every key) was half of the
//! instructions of parsing a proposal. A vector of entries is one
//! allocation and no hashing; lookups scan it, which for the few keys an
//! action has is what a hash lookup costs. Objects that are large are
//! handled without anything quadratic: the repeated-key check, equality and
//! [`Object::from_iter`]-style building switch to a hash set of the keys.
//!
//! It reads and writes as a JSON object exactly as `serde_json::Map` does
//! (keys in insertion order; a repeated key refused, see [`super::strict`]),
//! compares equal to another object or `Map` with the same entries in any
//! order, and converts to and from `Map` and `Value`.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// Up to this many entries, a repeated key or an equal entry is found by
/// comparing pairs; above it, through a hash set of the keys.
pub(super) const SCAN_MAX: usize = 16;

/// A JSON object with its entries in insertion order (see the module docs).
#[derive(Clone, Default)]
pub struct Object {
    entries: Vec<(String, Value)>,
}

impl Object {
    /// An empty object (allocates nothing).
    pub const fn new() -> Self {
        Object { entries: Vec::new() }
    }

    /// These entries, as read (the caller has checked that no key repeats).
    pub(super) fn from_unique_entries(entries: Vec<(String, Value)>) -> Self {
        Object { entries }
    }

    /// An empty object with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        Object { entries: Vec::with_capacity(n) }
    }

    /// The slots the entries' list holds (a test's view of spare room).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.entries.iter().position(|(k, _)| k == key)
    }

    /// The value at `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.position(key).map(|i| &self.entries[i].1)
    }

    /// The value at `key`, mutably.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.position(key).map(|i| &mut self.entries[i].1)
    }

    /// True when `key` has an entry.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Sets `key` to `value`: an existing entry keeps its place and its old
    /// value is returned; a new one goes last.
    pub fn insert(&mut self, key: String, value: Value) -> Option<Value> {
        match self.position(&key) {
            Some(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            None => {
                self.entries.push((key, value));
                None
            }
        }
    }

    /// Removes `key`'s entry, keeping the order of the others.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.position(key).map(|i| self.entries.remove(i).1)
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Keeps the entries for which `f` is true, in order.
    pub fn retain(&mut self, mut f: impl FnMut(&String, &mut Value) -> bool) {
        self.entries.retain_mut(|(k, v)| f(k, v));
    }

    /// The entries, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries.iter())
    }

    /// The entries with mutable values, in order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Value)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values, in order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Value> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(_, v)| v)
    }

    /// A `serde_json::Map` of the same entries, in the same order.
    pub fn to_map(&self) -> Map<String, Value> {
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// [`Object::to_map`] without the copies.
    pub fn into_map(self) -> Map<String, Value> {
        self.entries.into_iter().collect()
    }

    /// The same entries as a JSON value (`Value::Object`).
    pub fn to_value(&self) -> Value {
        Value::Object(self.to_map())
    }

    /// The first key that repeats an earlier one, in order.
    pub(super) fn first_repeat(&self) -> Option<&str> {
        first_repeat(&self.entries)
    }

    /// Builds from entries that may repeat a key, the way `Map` does: a
    /// repeat replaces the earlier value in the earlier place.
    fn from_entries(entries: Vec<(String, Value)>) -> Self {
        Object { entries: fold_repeats(entries) }
    }
}

/// The entries of an [`Object`], in order.
#[derive(Clone)]
pub struct Iter<'a>(std::slice::Iter<'a, (String, Value)>);

/// The first key of `entries` that repeats an earlier one, in order: by
/// comparing pairs up to [`SCAN_MAX`] entries, else through a hash set.
fn first_repeat<V>(entries: &[(String, V)]) -> Option<&str> {
    if entries.len() <= SCAN_MAX {
        (1..entries.len())
            .find(|&j| entries[..j].iter().any(|(k, _)| *k == entries[j].0))
            .map(|j| entries[j].0.as_str())
    } else {
        let mut seen = HashSet::with_capacity(entries.len());
        entries.iter().map(|(k, _)| k.as_str()).find(|k| !seen.insert(*k))
    }
}

/// `entries` with each repeated key folded the way `Map` reads them: the
/// later value replaces the earlier in the earlier's place. (Shared by
/// [`Object`] and [`super::StateChanges`], both vectors of entries.)
pub(super) fn fold_repeats<V>(entries: Vec<(String, V)>) -> Vec<(String, V)> {
    if first_repeat(&entries).is_none() {
        return entries;
    }
    let mut out: Vec<(String, V)> = Vec::with_capacity(entries.len());
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::with_capacity(entries.len());
    for (k, v) in entries {
        match at.get(&k) {
            Some(&i) => out[i].1 = v,
            None => {
                at.insert(k.clone(), out.len());
                out.push((k, v));
            }
        }
    }
    out
}

/// Whether two vectors of entries, each without a repeated key, hold the
/// same keys with equal values in any order: by scanning up to
/// [`SCAN_MAX`] entries, else through a hash map of `b`'s.
pub(super) fn same_entries<V: PartialEq>(a: &[(String, V)], b: &[(String, V)]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a.len() <= SCAN_MAX {
        return a.iter().all(|(k, v)| b.iter().any(|(bk, bv)| bk == k && bv == v));
    }
    let theirs: std::collections::HashMap<&str, &V> = b.iter().map(|(k, v)| (k.as_str(), v)).collect();
    a.iter().all(|(k, v)| theirs.get(k.as_str()) == Some(&v))
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a Value);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k, v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
    fn nth(&mut self, n: usize) -> Option<Self::Item> {
        self.0.nth(n).map(|(k, v)| (k, v))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k, v))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Object {
    type Item = (&'a String, &'a Value);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Object {
    type Item = (String, Value);
    type IntoIter = std::vec::IntoIter<(String, Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl FromIterator<(String, Value)> for Object {
    /// A repeated key replaces the earlier value in its place, as `Map` does.
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Object::from_entries(iter.into_iter().collect())
    }
}

impl Extend<(String, Value)> for Object {
    /// As [`Object::insert`] for each entry, in one pass however many.
    fn extend<I: IntoIterator<Item = (String, Value)>>(&mut self, iter: I) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.extend(iter);
        *self = Object::from_entries(entries);
    }
}

impl From<Map<String, Value>> for Object {
    fn from(m: Map<String, Value>) -> Self {
        // A Map's keys are unique already.
        Object { entries: m.into_iter().collect() }
    }
}

impl From<&Map<String, Value>> for Object {
    fn from(m: &Map<String, Value>) -> Self {
        Object { entries: m.iter().map(|(k, v)| (k.clone(), v.clone())).collect() }
    }
}

impl From<Object> for Map<String, Value> {
    fn from(o: Object) -> Self {
        o.into_map()
    }
}

impl From<Object> for Value {
    fn from(o: Object) -> Self {
        Value::Object(o.into_map())
    }
}

impl std::ops::Index<&str> for Object {
    type Output = Value;
    /// The value at `key`, `null` when there is none (as `Map`'s index by
    /// `&str` on a `Value` reads).
    fn index(&self, key: &str) -> &Value {
        static NULL: Value = Value::Null;
        self.get(key).unwrap_or(&NULL)
    }
}

impl PartialEq for Object {
    /// The same keys with equal values, in any order (keys are unique on
    /// both sides, so equal sizes and every entry found is the same set).
    fn eq(&self, other: &Object) -> bool {
        same_entries(&self.entries, &other.entries)
    }
}

impl PartialEq<Map<String, Value>> for Object {
    /// As between two objects; the map's own lookup is a hash.
    fn eq(&self, other: &Map<String, Value>) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl PartialEq<Object> for Map<String, Value> {
    fn eq(&self, other: &Object) -> bool {
        other == self
    }
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.len()))?;
        for (k, v) in self {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Object {
    /// A JSON object with no repeated key (in it or in any value inside
    /// it); anything else is refused as `invalid type: ..., expected a
    /// JSON object`, a repeat as `duplicate key `k``.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl ObjectVisitor {
    fn refuse<E: de::Error>(unexpected: de::Unexpected<'_>) -> Result<Object, E> {
        Err(E::invalid_type(unexpected, &"a JSON object"))
    }
}

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Object;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(SCAN_MAX));
        while let Some(k) = map.next_key::<String>()? {
            // A small object is checked as it is read, so the error comes
            // where the repeat is; a large one once, by hash, at its end.
            if entries.len() < SCAN_MAX && entries.iter().any(|(e, _): &(String, Value)| *e == k) {
                return Err(de::Error::custom(format!("duplicate key `{k}`")));
            }
            let v = map.next_value::<super::strict::StrictValue>()?.0;
            entries.push((k, v));
        }
        // Kept as long as the proposal is: no spare slots.
        entries.shrink_to_fit();
        let o = Object { entries };
        if o.len() > SCAN_MAX
            && let Some(k) = o.first_repeat()
        {
            return Err(de::Error::custom(format!("duplicate key `{k}`")));
        }
        Ok(o)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Object, E> {
        Self::refuse(de::Unexpected::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Object, E> {
        Self::refuse(de::Unexpected::Other("number"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Object, E> {
        Self::refuse(de::Unexpected::Other("number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Object, E> {
        Self::refuse(de::Unexpected::Other("number"))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Object, E> {
        Self::refuse(de::Unexpected::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Object, E> {
        Self::refuse(de::Unexpected::Unit)
    }
    fn visit_none<E: de::Error>(self) -> Result<Object, E> {
        Self::refuse(de::Unexpected::Unit)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Object, D::Error> {
        d.deserialize_any(ObjectVisitor)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Object, A::Error> {
        Self::refuse(de::Unexpected::Seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Result<Object, String> {
        serde_json::from_str::<Object>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_and_writes_like_a_map_in_document_order() {
        let text = r#"{"z":1,"a":{"y":[1,2],"b":null},"m":"s"}"#;
        let o = parse(text).unwrap();
        assert_eq!(serde_json::to_string(&o).unwrap(), text);
        let m: Map<String, Value> = serde_json::from_str(text).unwrap();
        assert_eq!(o, m);
        assert_eq!(m, o);
        assert_eq!(o.to_map(), m);
        assert_eq!(Object::from(m.clone()), o);
        assert_eq!(Value::from(o.clone()), Value::Object(m));
        assert_eq!(o.keys().collect::<Vec<_>>(), ["z", "a", "m"]);
    }

    #[test]
    fn insert_keeps_the_place_remove_keeps_the_order() {
        let mut o = Object::new();
        assert_eq!(o.insert("a".into(), json!(1)), None);
        assert_eq!(o.insert("b".into(), json!(2)), None);
        assert_eq!(o.insert("c".into(), json!(3)), None);
        assert_eq!(o.insert("a".into(), json!(9)), Some(json!(1)));
        assert_eq!(serde_json::to_string(&o).unwrap(), r#"{"a":9,"b":2,"c":3}"#);
        assert_eq!(o.remove("a"), Some(json!(9)));
        assert_eq!(o.remove("a"), None);
        assert_eq!(serde_json::to_string(&o).unwrap(), r#"{"b":2,"c":3}"#);
        assert_eq!(o["b"], json!(2));
        assert_eq!(o["nope"], Value::Null);
    }

    #[test]
    fn extend_inserts_each_entry_in_place_or_last() {
        let mut o: Object = (0..40).map(|i| (format!("k{i}"), json!(i))).collect();
        o.extend([("k3".to_string(), json!("x")), ("new".to_string(), json!(1)), ("k3".to_string(), json!("y"))]);
        assert_eq!(o.len(), 41);
        assert_eq!(o.keys().position(|k| k == "k3"), Some(3));
        assert_eq!(o["k3"], json!("y"));
        assert_eq!(o.keys().last().map(String::as_str), Some("new"));
    }

    #[test]
    fn equality_ignores_order_and_counts_entries() {
        let a: Object = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        let b: Object = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
        let c: Object = serde_json::from_str(r#"{"b":2,"a":1,"c":3}"#).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(c, a);
        // Large objects (compared through a hash set) alike.
        let big: Object = (0..100).map(|i| (format!("k{i}"), json!(i))).collect();
        let rev: Object = (0..100).rev().map(|i| (format!("k{i}"), json!(i))).collect();
        let mut other = rev.clone();
        other.insert("k50".into(), json!("x"));
        assert_eq!(big, rev);
        assert_ne!(big, other);
        assert_eq!(big, rev.to_map());
    }

    #[test]
    fn a_repeated_key_is_refused_in_small_and_large_objects() {
        assert_eq!(parse(r#"{"a":1,"a":2}"#).unwrap_err(), "duplicate key `a` at line 1 column 10");
        assert!(parse(r#"{"a":{"x":1,"x":2}}"#).unwrap_err().starts_with("duplicate key `x`"));
        for n in [SCAN_MAX - 1, SCAN_MAX, SCAN_MAX + 1, 1000] {
            for (first, again) in [(0, n - 1), (n / 2, n), (3, n + 5)] {
                let mut keys: Vec<String> = (0..n + 10).map(|i| format!("k{i}")).collect();
                keys[again] = keys[first].clone();
                let body: Vec<String> = keys.iter().map(|k| format!("\"{k}\":1")).collect();
                let e = parse(&format!("{{{}}}", body.join(","))).unwrap_err();
                assert!(e.starts_with(&format!("duplicate key `k{first}`")), "{n} {first} {again}: {e}");
            }
        }
        // Built from entries (not parsed), a repeat replaces, as Map's does.
        let o: Object =
            [("a".to_string(), json!(1)), ("b".into(), json!(2)), ("a".into(), json!(3))].into_iter().collect();
        assert_eq!(serde_json::to_string(&o).unwrap(), r#"{"a":3,"b":2}"#);
    }

    #[test]
    fn anything_but_an_object_is_refused_naming_what_it_is() {
        for (text, what) in [
            ("null", "null"),
            ("true", "boolean `true`"),
            ("5", "number"),
            ("-5", "number"),
            ("1.5", "number"),
            (r#""s""#, "string \"s\""),
            ("[1]", "sequence"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.starts_with(&format!("invalid type: {what}, expected a JSON object")), "{text}: {e}");
        }
    }
}
