//! The versioned state store: every write bumps the key's version (for
//! `read_version` assumptions), tenants live under `tenant:<id>:` and are
//! isolated both ways, and a proposal writes through a [`Transaction`] that
//! records the prior value of each key it touches so an abort restores
//! exactly those keys and nothing else.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{Map, Value};

use crate::{Error, Result};

/// The prefix under which every tenant's keys live.
pub const TENANT_PREFIX: &str = "tenant:";

#[derive(Debug, Clone)]
struct Slot {
    /// The slot's own key (shared with the map and undo records: no copies).
    key: Arc<str>,
    /// `None` once deleted (the version survives the delete).
    value: Option<Value>,
    version: u64,
    /// The id of the last transaction that recorded this slot's prior value
    /// (0: none), so a transaction records each key once without a lookup.
    tx_mark: u64,
    /// The id of the transaction of the last write (0: a write outside any
    /// transaction, or a rollback): a rollback restores the key only while
    /// its own transaction is still the last writer.
    writer: u64,
}

/// A tenant scope: `None` is the unscoped view, which hides every `tenant:` key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scope {
    prefix: Option<String>,
}

impl Scope {
    /// The unscoped view.
    pub fn global() -> Self {
        Scope { prefix: None }
    }

    /// A tenant's view. The id must be non-empty and must not contain `:`
    /// (which would make `tenant:<a>:<b>:<key>` ambiguous).
    pub fn tenant(id: &str) -> Result<Self> {
        if id.is_empty() || id.contains(':') {
            return Err(Error::invalid_argument(
                "tenant",
                format!("invalid tenant id `{id}`: must be non-empty without `:`"),
            ));
        }
        Ok(Scope { prefix: Some(format!("{TENANT_PREFIX}{id}:")) })
    }

    /// `Scope::tenant` for `Some`, the unscoped view for `None`.
    pub fn from_option(tenant: Option<&str>) -> Result<Self> {
        match tenant {
            Some(t) => Scope::tenant(t),
            None => Ok(Scope::global()),
        }
    }

    /// The key as this scope names it, when the physical key belongs to it.
    pub fn visible_key<'a>(&self, physical: &'a str) -> Option<&'a str> {
        self.visible(physical)
    }

    /// The tenant id, when scoped.
    pub fn tenant_id(&self) -> Option<&str> {
        self.prefix.as_deref().map(|p| &p[TENANT_PREFIX.len()..p.len() - 1])
    }

    /// The physical key of `key` in this scope; `None` when the unscoped view
    /// is asked for a `tenant:` key (tenants are invisible from outside).
    pub fn physical<'k>(&self, key: &'k str) -> Option<Cow<'k, str>> {
        match &self.prefix {
            Some(p) => Some(Cow::Owned(format!("{p}{key}"))),
            None if key.starts_with(TENANT_PREFIX) => None,
            None => Some(Cow::Borrowed(key)),
        }
    }

    /// The key as this scope shows it, when the physical key belongs to it.
    fn visible<'a>(&self, physical: &'a str) -> Option<&'a str> {
        match &self.prefix {
            Some(p) => physical.strip_prefix(p.as_str()),
            None if physical.starts_with(TENANT_PREFIX) => None,
            None => Some(physical),
        }
    }
}

/// Prior values of the keys a proposal wrote, restored on abort.
///
/// An undo log: the first write of a key through the transaction appends the
/// key's prior value (moved out of the store, not copied). A key's slot
/// remembers the last transaction that recorded it, so later writes of the
/// same key through the same transaction record nothing and cost no lookup.
/// When another transaction records the key in between, the key may appear
/// twice; the first record (the value before this transaction's first write)
/// is the one restored.
#[derive(Debug)]
pub struct Transaction {
    id: u64,
    undo: Mutex<Vec<(Arc<str>, Option<Value>)>>,
}

/// Transaction ids, unique over the process's life; 0 marks "none".
static NEXT_TX: AtomicU64 = AtomicU64::new(1);

impl Default for Transaction {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl Transaction {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty transaction with room for `keys` keys.
    pub fn with_capacity(keys: usize) -> Self {
        Transaction { id: NEXT_TX.fetch_add(1, Ordering::Relaxed), undo: Mutex::new(Vec::with_capacity(keys)) }
    }

    /// Number of keys the transaction touched.
    pub fn len(&self) -> usize {
        self.undo.lock().map(|u| u.iter().map(|(k, _)| &**k).collect::<HashSet<&str>>().len()).unwrap_or(0)
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.undo.lock().map(|u| u.is_empty()).unwrap_or(true)
    }
}

/// What a compare-and-set expects of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Whatever the key holds.
    Any,
    /// The key holds no value (never written, or deleted).
    Absent,
    /// The key's version is exactly this (0: never written).
    Version(u64),
}

impl Expect {
    /// True when a key holding a value (`held`) at `version` meets it.
    pub fn holds(self, held: bool, version: u64) -> bool {
        match self {
            Expect::Any => true,
            Expect::Absent => !held,
            Expect::Version(v) => v == version,
        }
    }
}

/// The outcome of a compare-and-set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasOutcome {
    /// Written; the key's new version.
    Written {
        /// The new version.
        version: u64,
    },
    /// Not written: the key did not meet the expectation.
    Conflict {
        /// The key's current version.
        current: u64,
    },
}

/// What a rollback did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rollback {
    /// Keys restored to their value before the transaction.
    pub restored: Vec<String>,
    /// Keys another writer moved after the transaction's last write, left as
    /// that writer set them.
    pub not_restored: Vec<String>,
}

/// The state store. Cheap reads, one lock; never held across an await.
#[derive(Debug, Default)]
pub struct StateStore {
    slots: RwLock<HashMap<Arc<str>, Slot>>,
}

/// Writes `value` to the slot of `phys` (created when missing), recording
/// the prior value in `tx`'s undo log the first time the transaction touches
/// it; the new version. The caller holds the write lock.
fn write_slot(
    slots: &mut HashMap<Arc<str>, Slot>,
    phys: &str,
    value: Option<Value>,
    tx: Option<&Transaction>,
) -> Result<u64> {
    // One hash on the common path (the key exists); no key allocation.
    let slot = match slots.get_mut(phys) {
        Some(slot) => slot,
        None => {
            let key: Arc<str> = Arc::from(phys);
            slots.entry(key.clone()).or_insert(Slot { key, value: None, version: 0, tx_mark: 0, writer: 0 })
        }
    };
    // The undo log is locked before anything changes (a poisoned log
    // refuses the write). Checked and written under one lock.
    let mut undo = match tx.filter(|t| slot.tx_mark != t.id) {
        Some(t) => Some((t.id, t.undo.lock().map_err(|_| poisoned())?)),
        None => None,
    };
    let prior = std::mem::replace(&mut slot.value, value);
    if let Some((id, undo)) = undo.as_mut() {
        undo.push((slot.key.clone(), prior));
        slot.tx_mark = *id;
    }
    slot.writer = tx.map_or(0, |t| t.id);
    slot.version += 1;
    Ok(slot.version)
}

fn poisoned() -> Error {
    Error::runtime("state_poisoned", "the state store lock was poisoned by a panic")
}

impl StateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key` in `scope` (`None` when absent).
    pub fn get(&self, scope: &Scope, key: &str) -> Option<Value> {
        let phys = scope.physical(key)?;
        self.get_physical(&phys)
    }

    /// The value under a physical key.
    pub fn get_physical(&self, phys: &str) -> Option<Value> {
        let slots = self.slots.read().ok()?;
        slots.get(phys).and_then(|s| s.value.clone())
    }

    /// Evaluates `f` on the current value of a physical key without cloning it.
    pub fn with_physical<R>(&self, phys: &str, f: impl FnOnce(Option<&Value>) -> R) -> R {
        match self.slots.read() {
            Ok(slots) => f(slots.get(phys).and_then(|s| s.value.as_ref())),
            Err(_) => f(None),
        }
    }

    /// True when `key` holds a value (`null` included) in `scope`.
    pub fn exists(&self, scope: &Scope, key: &str) -> bool {
        let Some(phys) = scope.physical(key) else { return false };
        self.with_physical(&phys, |v| v.is_some())
    }

    /// The version of `key` (0 when never written). Deletes bump it too.
    pub fn version(&self, scope: &Scope, key: &str) -> u64 {
        let Some(phys) = scope.physical(key) else { return 0 };
        self.slots.read().ok().and_then(|s| s.get(phys.as_ref()).map(|s| s.version)).unwrap_or(0)
    }

    /// Sets `key` in `scope`; returns the new version.
    pub fn set(&self, scope: &Scope, key: &str, value: Value) -> Result<u64> {
        let phys = scope.physical(key).ok_or_else(|| tenant_key_refused(key))?;
        self.write_physical(&phys, Some(value), None)
    }

    /// Deletes `key` in `scope`; returns true when it held a value.
    pub fn delete(&self, scope: &Scope, key: &str) -> Result<bool> {
        let phys = scope.physical(key).ok_or_else(|| tenant_key_refused(key))?;
        let existed = self.with_physical(&phys, |v| v.is_some());
        self.write_physical(&phys, None, None)?;
        Ok(existed)
    }

    /// Writes (`Some`) or deletes (`None`) a physical key, recording its prior
    /// value in `tx` the first time the transaction touches it.
    pub fn write_physical(&self, phys: &str, value: Option<Value>, tx: Option<&Transaction>) -> Result<u64> {
        let mut slots = self.slots.write().map_err(|_| poisoned())?;
        write_slot(&mut slots, phys, value, tx)
    }

    /// Compare-and-set of a physical key: writes (`Some`) or deletes
    /// (`None`) only when the key's current state meets `expect`, checked
    /// and written under one lock. Returns the new version, or
    /// [`CasOutcome::Conflict`] with the current version (nothing written).
    pub fn compare_and_set_physical(
        &self,
        phys: &str,
        value: Option<Value>,
        expect: Expect,
        tx: Option<&Transaction>,
    ) -> Result<CasOutcome> {
        let mut slots = self.slots.write().map_err(|_| poisoned())?;
        let (held, version) = slots.get(phys).map_or((false, 0), |s| (s.value.is_some(), s.version));
        if !expect.holds(held, version) {
            return Ok(CasOutcome::Conflict { current: version });
        }
        Ok(CasOutcome::Written { version: write_slot(&mut slots, phys, value, tx)? })
    }

    /// Mirrors a shared store's `(value, version)` of a physical key (a
    /// runtime whose state lives in a shared store, `Runtime::set_shared_state`):
    /// a key whose version moved takes the store's value and version, and
    /// no transaction of this runtime is its last writer any more (a
    /// rollback leaves it as the other writer set it).
    pub fn mirror_physical(&self, phys: &str, value: Option<Value>, version: u64) {
        let Ok(mut slots) = self.slots.write() else { return };
        if slots.get(phys).is_some_and(|s| s.version == version) {
            return;
        }
        let key: Arc<str> = Arc::from(phys);
        let slot = slots.entry(key.clone()).or_insert(Slot { key, value: None, version: 0, tx_mark: 0, writer: 0 });
        slot.value = value;
        slot.version = version;
        slot.writer = 0;
    }

    /// True when `tx` is still the last writer of a physical key.
    pub fn last_writer_is(&self, phys: &str, tx: &Transaction) -> bool {
        self.slots.read().ok().is_some_and(|s| s.get(phys).is_some_and(|s| s.writer == tx.id))
    }

    /// [`StateStore::write_physical`] at the version a shared store gave the
    /// write (instead of the next local one).
    pub fn write_versioned_physical(
        &self,
        phys: &str,
        value: Option<Value>,
        version: u64,
        tx: Option<&Transaction>,
    ) -> Result<u64> {
        let mut slots = self.slots.write().map_err(|_| poisoned())?;
        write_slot(&mut slots, phys, value, tx)?;
        if let Some(s) = slots.get_mut(phys) {
            s.version = version;
        }
        Ok(version)
    }

    /// `(value, version)` of a physical key under one lock (version 0: never
    /// written).
    pub fn versioned_physical(&self, phys: &str) -> (Option<Value>, u64) {
        match self.slots.read() {
            Ok(slots) => slots.get(phys).map_or((None, 0), |s| (s.value.clone(), s.version)),
            Err(_) => (None, 0),
        }
    }

    /// The version of a physical key (0 when never written).
    pub fn version_physical(&self, phys: &str) -> u64 {
        self.slots.read().ok().and_then(|s| s.get(phys).map(|s| s.version)).unwrap_or(0)
    }

    /// Restores every key the transaction wrote to its prior value (a new
    /// version each), as [`StateStore::rollback_report`]; returns the keys
    /// restored.
    pub fn rollback(&self, tx: &Transaction) -> Vec<String> {
        self.rollback_report(tx).restored
    }

    /// Restores every key the transaction wrote to its prior value (a new
    /// version each), but only a key the transaction is still the last
    /// writer of: a key another writer moved since is left as that writer
    /// set it and reported in [`Rollback::not_restored`]. Other keys are
    /// untouched. Both lists are sorted physical keys.
    pub fn rollback_report(&self, tx: &Transaction) -> Rollback {
        let undo = match tx.undo.lock() {
            Ok(mut u) => std::mem::take(&mut *u),
            Err(_) => return Rollback::default(),
        };
        let Ok(mut slots) = self.slots.write() else { return Rollback::default() };
        let mut seen: HashSet<Arc<str>> = HashSet::with_capacity(undo.len());
        let mut out = Rollback { restored: Vec::with_capacity(undo.len()), not_restored: Vec::new() };
        for (k, v) in undo {
            // The first record of a key holds its value before the transaction.
            if !seen.insert(k.clone()) {
                continue;
            }
            let slot = slots.entry(k.clone()).or_insert_with(|| Slot {
                key: k.clone(),
                value: None,
                version: 0,
                tx_mark: 0,
                writer: 0,
            });
            if slot.tx_mark == tx.id {
                slot.tx_mark = 0;
            }
            if slot.writer != tx.id {
                out.not_restored.push(k.to_string());
                continue;
            }
            slot.value = v;
            slot.version += 1;
            slot.writer = 0;
            out.restored.push(k.to_string());
        }
        out.restored.sort();
        out.not_restored.sort();
        out
    }

    /// The keys `tx` wrote, each with its value before the transaction and
    /// its value now (the undo records of a suspended proposal), in the
    /// order first written.
    pub fn transaction_writes(&self, tx: &Transaction) -> Vec<crate::checkpoint::StateWrite> {
        let undo = match tx.undo.lock() {
            Ok(u) => u.clone(),
            Err(_) => return Vec::new(),
        };
        let Ok(slots) = self.slots.read() else { return Vec::new() };
        let mut seen: HashSet<Arc<str>> = HashSet::with_capacity(undo.len());
        let mut out = Vec::with_capacity(undo.len());
        for (k, before) in undo {
            if !seen.insert(k.clone()) {
                continue;
            }
            let after = slots.get(&k).and_then(|s| s.value.clone());
            out.push(crate::checkpoint::StateWrite { key: k.to_string(), before, after, earlier: Vec::new() });
        }
        out
    }

    /// Takes over the writes of a suspended proposal into `tx`, so that a
    /// rollback of `tx` restores them: a key that holds the proposal's value
    /// keeps it (its undo record is the checkpoint's), a key that holds the
    /// value from before the proposal (a store that never saw the write: a
    /// fresh runtime) gets the proposal's value again (its undo record is
    /// that value). A key another writer moved to anything else is a
    /// conflict: nothing is taken over and the keys are returned.
    ///
    /// `strict` (a state mirrored from a shared store, which holds the
    /// proposal's writes): only a key holding the proposal's value is taken
    /// over; any other is a conflict.
    pub fn adopt(
        &self,
        tx: &Transaction,
        writes: &[crate::checkpoint::StateWrite],
        strict: bool,
    ) -> Result<(), Vec<String>> {
        let Ok(mut slots) = self.slots.write() else { return Err(vec!["(the state lock is poisoned)".into()]) };
        let conflicts: Vec<String> = writes
            .iter()
            .filter(|w| {
                let now = slots.get(w.key.as_str()).and_then(|s| s.value.as_ref());
                now != w.after.as_ref() && (strict || now != w.before.as_ref())
            })
            .map(|w| w.key.clone())
            .collect();
        if !conflicts.is_empty() {
            return Err(conflicts);
        }
        let Ok(mut undo) = tx.undo.lock() else { return Err(vec!["(the transaction is poisoned)".into()]) };
        for w in writes {
            let key: Arc<str> = Arc::from(w.key.as_str());
            let slot = slots.entry(key.clone()).or_insert(Slot {
                key: key.clone(),
                value: None,
                version: 0,
                tx_mark: 0,
                writer: 0,
            });
            let before = if slot.value.as_ref() == w.after.as_ref() { w.before.clone() } else { slot.value.clone() };
            if slot.value != w.after {
                slot.value = w.after.clone();
                slot.version += 1;
            }
            undo.push((slot.key.clone(), before));
            slot.tx_mark = tx.id;
            slot.writer = tx.id;
        }
        Ok(())
    }

    /// Keys visible in `scope`, sorted (tenant keys without their prefix).
    pub fn keys(&self, scope: &Scope) -> Vec<String> {
        let Ok(slots) = self.slots.read() else { return Vec::new() };
        let mut out: Vec<String> = slots
            .iter()
            .filter(|(_, s)| s.value.is_some())
            .filter_map(|(k, _)| scope.visible(k).map(str::to_string))
            .collect();
        out.sort();
        out
    }

    /// `{key: value}` of `scope`, sorted by key.
    pub fn snapshot(&self, scope: &Scope) -> Map<String, Value> {
        let Ok(slots) = self.slots.read() else { return Map::new() };
        let mut pairs: Vec<(&str, &Value)> =
            slots.iter().filter_map(|(k, s)| Some((scope.visible(k)?, s.value.as_ref()?))).collect();
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        pairs.into_iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    /// `{key: version}` of `scope` for keys that hold a value.
    pub fn versions(&self, scope: &Scope) -> Map<String, Value> {
        let Ok(slots) = self.slots.read() else { return Map::new() };
        let mut pairs: Vec<(&str, u64)> = slots
            .iter()
            .filter(|(_, s)| s.value.is_some())
            .filter_map(|(k, s)| Some((scope.visible(k)?, s.version)))
            .collect();
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        pairs.into_iter().map(|(k, v)| (k.to_string(), Value::from(v))).collect()
    }
}

fn tenant_key_refused(key: &str) -> Error {
    Error::invalid_argument("key", format!("`{key}` is a tenant key; pass the tenant instead of the prefix"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_tenants_and_rollback() {
        let s = StateStore::new();
        let g = Scope::global();
        let t = Scope::tenant("acme").unwrap();
        assert_eq!(s.set(&g, "a", json!(1)).unwrap(), 1);
        assert_eq!(s.set(&g, "a", json!(2)).unwrap(), 2);
        s.set(&t, "a", json!("t")).unwrap();
        assert_eq!(s.get(&g, "a"), Some(json!(2)));
        assert_eq!(s.get(&t, "a"), Some(json!("t")));
        assert_eq!(s.keys(&g), ["a"]);
        assert_eq!(s.keys(&t), ["a"]);
        assert!(!s.exists(&g, "tenant:acme:a"));
        assert!(s.set(&g, "tenant:acme:b", json!(1)).is_err());
        assert!(Scope::tenant("a:b").is_err());
        assert_eq!(t.tenant_id(), Some("acme"));

        let tx = Transaction::new();
        s.write_physical("a", Some(json!(3)), Some(&tx)).unwrap();
        s.write_physical("a", Some(json!(4)), Some(&tx)).unwrap();
        s.write_physical("new", Some(Value::Null), Some(&tx)).unwrap();
        s.set(&g, "other", json!(9)).unwrap();
        assert_eq!(s.rollback(&tx), ["a", "new"]);
        assert_eq!(s.get(&g, "a"), Some(json!(2)));
        assert!(!s.exists(&g, "new"));
        assert_eq!(s.get(&g, "other"), Some(json!(9)));
        assert_eq!(s.version(&g, "a"), 5);
        assert!(s.delete(&g, "a").unwrap());
        assert!(!s.exists(&g, "a"));
    }

    #[test]
    fn interleaved_transactions_restore_their_own_prior_values() {
        let s = StateStore::new();
        let g = Scope::global();
        s.set(&g, "k", json!("orig")).unwrap();
        let a = Transaction::new();
        let b = Transaction::new();
        s.write_physical("k", Some(json!("a1")), Some(&a)).unwrap();
        s.write_physical("k", Some(json!("b1")), Some(&b)).unwrap();
        // A second write of `a` after `b` recorded the key: `a` still restores
        // the value from before its own first write.
        s.write_physical("k", Some(json!("a2")), Some(&a)).unwrap();
        s.write_physical("k", None, Some(&a)).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(b.len(), 1);
        let v = s.version(&g, "k");
        assert_eq!(s.rollback(&a), ["k"]);
        assert_eq!(s.get(&g, "k"), Some(json!("orig")));
        // One new version per restored key, however often it was recorded.
        assert_eq!(s.version(&g, "k"), v + 1);
        // `b` is no longer the last writer of `k` (`a` wrote after it, then
        // rolled back): `b` leaves the key alone and reports it.
        let r = s.rollback_report(&b);
        assert!(r.restored.is_empty());
        assert_eq!(r.not_restored, ["k"]);
        assert_eq!(s.get(&g, "k"), Some(json!("orig")));
        assert_eq!(s.version(&g, "k"), v + 1);
        // A rolled-back transaction records afresh if it writes again.
        s.write_physical("k", Some(json!("a3")), Some(&a)).unwrap();
        assert_eq!(s.rollback(&a), ["k"]);
        assert_eq!(s.get(&g, "k"), Some(json!("orig")));
        assert!(a.is_empty());
    }

    #[test]
    fn rollback_skips_keys_another_writer_moved() {
        let s = StateStore::new();
        let g = Scope::global();
        s.set(&g, "mine", json!(0)).unwrap();
        s.set(&g, "theirs", json!(0)).unwrap();
        let tx = Transaction::new();
        s.write_physical("mine", Some(json!(1)), Some(&tx)).unwrap();
        s.write_physical("theirs", Some(json!(1)), Some(&tx)).unwrap();
        // Another writer (outside the transaction) moves one key.
        s.set(&g, "theirs", json!("other")).unwrap();
        let r = s.rollback_report(&tx);
        assert_eq!(r.restored, ["mine"]);
        assert_eq!(r.not_restored, ["theirs"]);
        assert_eq!(s.get(&g, "mine"), Some(json!(0)));
        assert_eq!(s.get(&g, "theirs"), Some(json!("other")));
    }

    #[test]
    fn compare_and_set_checks_under_the_lock() {
        let s = StateStore::new();
        assert_eq!(
            s.compare_and_set_physical("k", Some(json!(1)), Expect::Absent, None).unwrap(),
            CasOutcome::Written { version: 1 }
        );
        assert_eq!(
            s.compare_and_set_physical("k", Some(json!(2)), Expect::Absent, None).unwrap(),
            CasOutcome::Conflict { current: 1 }
        );
        assert_eq!(
            s.compare_and_set_physical("k", Some(json!(2)), Expect::Version(0), None).unwrap(),
            CasOutcome::Conflict { current: 1 }
        );
        assert_eq!(
            s.compare_and_set_physical("k", Some(json!(2)), Expect::Version(1), None).unwrap(),
            CasOutcome::Written { version: 2 }
        );
        assert_eq!(s.get_physical("k"), Some(json!(2)));
        assert_eq!(
            s.compare_and_set_physical("k", None, Expect::Any, None).unwrap(),
            CasOutcome::Written { version: 3 }
        );
        // Deleted: absent again, the version survives.
        assert_eq!(
            s.compare_and_set_physical("k", Some(json!(3)), Expect::Absent, None).unwrap(),
            CasOutcome::Written { version: 4 }
        );
        assert_eq!(s.versioned_physical("k"), (Some(json!(3)), 4));
    }

    #[test]
    fn rollback_of_a_new_key_deletes_it_and_keeps_its_version() {
        let s = StateStore::new();
        let g = Scope::global();
        let tx = Transaction::with_capacity(4);
        assert!(tx.is_empty());
        assert_eq!(s.write_physical("n", Some(json!(1)), Some(&tx)).unwrap(), 1);
        assert_eq!(s.write_physical("n", Some(json!(2)), Some(&tx)).unwrap(), 2);
        assert_eq!(tx.len(), 1);
        assert_eq!(s.rollback(&tx), ["n"]);
        assert!(!s.exists(&g, "n"));
        assert_eq!(s.version(&g, "n"), 3);
        assert!(s.keys(&g).is_empty());
    }
}
