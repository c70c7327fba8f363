//! The permission gate: per-action decisions against a granted tier and a
//! durable approvals ledger.
//!
//! An action's operation is identified by its fingerprint,
//! `type|tool|canonical parameters` (`-` when there is no tool; parameters
//! with keys sorted recursively, compact). The gate decides:
//! 1. the latest ledger record for the fingerprint: `approved` → `allow`,
//!    `rejected` → `deny`;
//! 2. otherwise `full_access` always → `needs_approval`;
//! 3. otherwise a required tier above the granted one → `needs_approval`;
//! 4. otherwise `allow`.
//!
//! The embedded ledger is an append-only JSONL file of [`ApprovalRecord`]s.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::classify::{Axes, PermissionTier, RiskClassifier, classify_reversibility_flat, flatten};
use crate::Error;
use crate::ir::{Action, Reversibility};

/// A reviewer's verdict on one fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalVerdict {
    /// The operation may run.
    Approved,
    /// The operation may not run.
    Rejected,
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The operation's fingerprint.
    pub fingerprint: String,
    /// The tier the operation required when it was reviewed.
    pub required_tier: PermissionTier,
    /// The verdict.
    pub decision: ApprovalVerdict,
    /// Who decided.
    pub reviewer: String,
    /// Why.
    pub reason: String,
    /// Supporting evidence, as given.
    #[serde(default)]
    pub evidence: Option<Value>,
    /// When (RFC 3339).
    pub decided_at: chrono::DateTime<chrono::Utc>,
}

/// Where approvals are kept.
pub trait ApprovalLedger: Send + Sync {
    /// The latest record for a fingerprint.
    fn latest(&self, fingerprint: &str) -> crate::Result<Option<ApprovalRecord>>;
    /// The latest record of every fingerprint, read once.
    fn latest_all(&self) -> crate::Result<HashMap<String, ApprovalRecord>>;
    /// Appends a record.
    fn append(&self, record: &ApprovalRecord) -> crate::Result<()>;
}

/// The embedded ledger: an append-only JSONL file. A missing file is an
/// empty ledger; a line that is not a record fails the read (naming the file
/// and line) rather than being skipped.
///
/// Reads of the latest records go through a cache: the file is re-read and
/// re-parsed only when its length, modification time or inode changed (an
/// append always changes the length), so a long-lived ledger consulted on
/// every admission does not parse the whole file each time.
#[derive(Debug)]
pub struct JsonlLedger {
    path: PathBuf,
    lock: Mutex<()>,
    latest: Mutex<Option<(FileStamp, LatestRecords)>>,
}

/// The latest record of every fingerprint.
pub type LatestRecords = Arc<HashMap<String, ApprovalRecord>>;

/// What identifies one version of the ledger file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl JsonlLedger {
    /// A ledger at `path` (created on first append).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JsonlLedger { path: path.into(), lock: Mutex::new(()), latest: Mutex::new(None) }
    }

    /// The latest record of every fingerprint, shared: re-read only when the
    /// file changed since the last read. A missing file is empty; an
    /// unreadable or invalid one is an error (never cached, so it is reported
    /// again on the next call).
    pub fn latest_shared(&self) -> crate::Result<LatestRecords> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Arc::default()),
            Err(e) => {
                return Err(Error::runtime(
                    "ledger_io_error",
                    format!("cannot read approvals ledger `{}`: {e}", self.path.display()),
                ));
            }
        };
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        let stamp = FileStamp { len: meta.len(), modified: meta.modified().ok(), inode };
        if let Ok(slot) = self.latest.lock()
            && let Some((cached, latest)) = &*slot
            && *cached == stamp
        {
            return Ok(latest.clone());
        }
        // Read after the stat: the contents are at least as new as the
        // stamp, so a write racing this read is seen on the next call.
        let latest = Arc::new(latest_by_fingerprint(self.records()?));
        if let Ok(mut slot) = self.latest.lock() {
            *slot = Some((stamp, latest.clone()));
        }
        Ok(latest)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record, oldest first.
    pub fn records(&self) -> crate::Result<Vec<ApprovalRecord>> {
        let shown = self.path.display().to_string();
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(Error::runtime("ledger_io_error", format!("cannot read approvals ledger `{shown}`: {e}")));
            }
        };
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let rec: ApprovalRecord = match serde_json::from_str(line) {
                Ok(r) => r,
                // A record cut short (a writer killed mid-write) never
                // committed: it is skipped with a warning. Any other bad line
                // is an error, so no earlier record is ever lost silently.
                Err(e) if e.classify() == serde_json::error::Category::Eof => {
                    eprintln!(
                        "car-runtime: warning: approvals ledger `{shown}`: ignoring line {}, an incomplete record \
                         (an interrupted write): {e}",
                        i + 1
                    );
                    continue;
                }
                Err(e) => {
                    return Err(Error::config(
                        "invalid_ledger",
                        format!("approvals ledger `{shown}`: line {} is not an approval record: {e}", i + 1),
                        json!({"file": shown, "line": i + 1}),
                    ));
                }
            };
            out.push(rec);
        }
        Ok(out)
    }
}

impl ApprovalLedger for JsonlLedger {
    fn latest(&self, fingerprint: &str) -> crate::Result<Option<ApprovalRecord>> {
        Ok(self.latest_shared()?.get(fingerprint).cloned())
    }

    fn latest_all(&self) -> crate::Result<HashMap<String, ApprovalRecord>> {
        Ok(HashMap::clone(&*self.latest_shared()?))
    }

    fn append(&self, record: &ApprovalRecord) -> crate::Result<()> {
        let shown = self.path.display().to_string();
        let io = |e: std::io::Error| {
            Error::runtime("ledger_io_error", format!("cannot write approvals ledger `{shown}`: {e}"))
        };
        let _guard =
            self.lock.lock().map_err(|_| Error::runtime("ledger_io_error", "approvals ledger lock poisoned"))?;
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let mut line = serde_json::to_string(record).map_err(|e| Error::runtime("ledger_io_error", e.to_string()))?;
        line.push('\n');
        let mut f = std::fs::OpenOptions::new().create(true).read(true).append(true).open(&self.path).map_err(io)?;
        // Complete a torn last line first, so the new record stays a line of
        // its own instead of being glued to the fragment.
        let len = f.metadata().map_err(io)?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(len - 1)).map_err(io)?;
            f.read_exact(&mut last).map_err(io)?;
            if last[0] != b'\n' {
                line.insert(0, '\n');
            }
        }
        f.write_all(line.as_bytes()).map_err(io)?;
        f.flush().map_err(io)
    }
}

/// An in-memory ledger (tests, embedders without a file).
#[derive(Debug, Default)]
pub struct MemoryLedger {
    records: Mutex<Vec<ApprovalRecord>>,
}

fn latest_by_fingerprint(records: impl IntoIterator<Item = ApprovalRecord>) -> HashMap<String, ApprovalRecord> {
    let mut out = HashMap::new();
    for r in records {
        out.insert(r.fingerprint.clone(), r);
    }
    out
}

impl ApprovalLedger for MemoryLedger {
    fn latest(&self, fingerprint: &str) -> crate::Result<Option<ApprovalRecord>> {
        let g = self.records.lock().map_err(|_| Error::runtime("ledger_io_error", "approvals ledger lock poisoned"))?;
        Ok(g.iter().rev().find(|r| r.fingerprint == fingerprint).cloned())
    }

    fn latest_all(&self) -> crate::Result<HashMap<String, ApprovalRecord>> {
        let g = self.records.lock().map_err(|_| Error::runtime("ledger_io_error", "approvals ledger lock poisoned"))?;
        Ok(latest_by_fingerprint(g.iter().cloned()))
    }
    fn append(&self, record: &ApprovalRecord) -> crate::Result<()> {
        let mut g =
            self.records.lock().map_err(|_| Error::runtime("ledger_io_error", "approvals ledger lock poisoned"))?;
        g.push(record.clone());
        Ok(())
    }
}

/// Parameters as canonical JSON: keys sorted recursively, compact.
pub fn canonical_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

/// The fingerprint of the operation an action represents:
/// `type|tool|canonical parameters`.
pub fn fingerprint(action: &Action) -> String {
    format!(
        "{}|{}|{}",
        action.action_type.as_str(),
        action.tool.as_deref().unwrap_or("-"),
        canonical_json(&Value::Object(action.parameters.clone()))
    )
}

/// A gate decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// May run.
    Allow,
    /// Needs a human approval first.
    NeedsApproval,
    /// May not run.
    Deny,
}

/// One row of `permission_evaluate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionDecision {
    /// The action.
    pub action_id: String,
    /// Its operation's fingerprint.
    pub fingerprint: String,
    /// The decision.
    pub decision: Decision,
    /// The tier the action requires.
    pub required: PermissionTier,
    /// The tier the session is granted.
    pub granted: PermissionTier,
    /// Whether the action can be undone (classified, not enforced).
    pub reversibility: Reversibility,
    /// Why, unless allowed by tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The gate: a classifier plus an optional ledger.
#[derive(Default)]
pub struct PermissionGate {
    classifier: Option<RiskClassifier>,
    ledger: Option<Box<dyn ApprovalLedger>>,
}

impl std::fmt::Debug for PermissionGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermissionGate").field("ledger", &self.ledger.is_some()).finish()
    }
}

impl PermissionGate {
    /// A gate with the default classifier and no ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses this ledger.
    pub fn with_ledger(mut self, ledger: Box<dyn ApprovalLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Uses this classifier.
    pub fn with_classifier(mut self, classifier: RiskClassifier) -> Self {
        self.classifier = Some(classifier);
        self
    }

    /// Both axes of an action from one flattening.
    pub fn axes(&self, action: &Action) -> Axes {
        let f = flatten(action);
        let classifier = self.classifier.as_ref().unwrap_or_else(|| RiskClassifier::shared());
        Axes { required_tier: classifier.classify_flat(&f), reversibility: classify_reversibility_flat(&f) }
    }

    /// Decides one action. A ledger that cannot be read is an error (the
    /// caller must not proceed).
    pub fn evaluate(&self, action: &Action, granted: PermissionTier) -> crate::Result<PermissionDecision> {
        let fp = fingerprint(action);
        let record = match &self.ledger {
            Some(l) => l.latest(&fp)?,
            None => None,
        };
        Ok(self.decide(action, fp, record.as_ref(), granted))
    }

    /// Decides every action, reading the ledger once.
    pub fn evaluate_all(&self, actions: &[Action], granted: PermissionTier) -> crate::Result<Vec<PermissionDecision>> {
        let latest = match &self.ledger {
            Some(l) => l.latest_all()?,
            None => HashMap::new(),
        };
        Ok(self.evaluate_with(actions, granted, &latest))
    }

    /// [`Self::evaluate_all`] against `latest`, the latest record of every
    /// fingerprint (as [`ApprovalLedger::latest_all`] reads it), for callers
    /// that hold the ledger's contents already; this gate's own ledger is
    /// not read.
    pub fn evaluate_with(
        &self,
        actions: &[Action],
        granted: PermissionTier,
        latest: &HashMap<String, ApprovalRecord>,
    ) -> Vec<PermissionDecision> {
        actions
            .iter()
            .map(|a| {
                let fp = fingerprint(a);
                let record = latest.get(&fp);
                self.decide(a, fp, record, granted)
            })
            .collect()
    }

    fn decide(
        &self,
        action: &Action,
        fp: String,
        record: Option<&ApprovalRecord>,
        granted: PermissionTier,
    ) -> PermissionDecision {
        let axes = self.axes(action);
        let required = axes.required_tier;
        let (decision, reason) = match record {
            Some(r) if r.decision == ApprovalVerdict::Approved => (Decision::Allow, None),
            Some(r) => (Decision::Deny, Some(format!("previously rejected by {} ({})", r.reviewer, r.reason))),
            None if required == PermissionTier::FullAccess => (
                Decision::NeedsApproval,
                Some("full_access actions require human approval before execution".to_string()),
            ),
            None if required > granted => (
                Decision::NeedsApproval,
                Some(format!("action requires {required} but session is granted only {granted}")),
            ),
            None => (Decision::Allow, None),
        };
        PermissionDecision {
            action_id: action.id.clone(),
            fingerprint: fp,
            decision,
            required,
            granted,
            reversibility: axes.reversibility,
            reason,
        }
    }

    /// Tier admission of a whole proposal: `Ok(None)` when every action may
    /// run at `granted`, else the refusal reason naming the actions and tiers.
    /// It admits exactly what [`PermissionGate::evaluate`] allows: an action
    /// that `needs_approval` (its required tier exceeds `granted`, or it is
    /// `full_access`, which always needs an approval) is refused unless the
    /// ledger holds an approval of its operation, and a rejected operation is
    /// refused at any tier. A ledger that cannot be read is an error: the
    /// caller must not run.
    pub fn admit_tier(&self, actions: &[Action], granted: PermissionTier) -> crate::Result<Option<String>> {
        Ok(Self::tier_refusal(self.evaluate_all(actions, granted)?, granted))
    }

    /// [`Self::admit_tier`] against `latest` (see [`Self::evaluate_with`]).
    pub fn admit_tier_with(
        &self,
        actions: &[Action],
        granted: PermissionTier,
        latest: &HashMap<String, ApprovalRecord>,
    ) -> Option<String> {
        Self::tier_refusal(self.evaluate_with(actions, granted, latest), granted)
    }

    /// The refusal reason of a proposal whose per-action decisions are
    /// `decisions` (see [`Self::admit_tier`]), `None` when it may run.
    pub fn tier_refusal_of(decisions: Vec<PermissionDecision>, granted: PermissionTier) -> Option<String> {
        Self::tier_refusal(decisions, granted)
    }

    fn tier_refusal(decisions: Vec<PermissionDecision>, granted: PermissionTier) -> Option<String> {
        let mut escalated: Vec<String> = Vec::new();
        let mut unapproved: Vec<String> = Vec::new();
        let mut rejected: Vec<String> = Vec::new();
        for d in decisions {
            match d.decision {
                Decision::Allow => {}
                Decision::Deny => rejected.push(format!(
                    "action `{}` was {}",
                    d.action_id,
                    d.reason.as_deref().unwrap_or("rejected by a reviewer")
                )),
                Decision::NeedsApproval if d.required > granted => {
                    escalated.push(format!("`{}` requires `{}`", d.action_id, d.required));
                }
                Decision::NeedsApproval => unapproved.push(format!("`{}`", d.action_id)),
            }
        }
        if !rejected.is_empty() {
            return Some(format!("refused: {}", rejected.join("; ")));
        }
        let mut parts = Vec::new();
        if !escalated.is_empty() {
            parts.push(format!(
                "permission tier escalated: action {} but the session is granted only `{granted}`",
                escalated.join(", action ")
            ));
        }
        if !unapproved.is_empty() {
            parts.push(format!(
                "approval required: action {} is `full_access`, which always needs an approval",
                unapproved.join(", action ")
            ));
        }
        if parts.is_empty() {
            return None;
        }
        let fix = if escalated.is_empty() {
            "approve the action (permission.approve)"
        } else {
            "raise the tier (permission.set_tier) or approve the action (permission.approve)"
        };
        Some(format!("{}; {fix}", parts.join("; ")))
    }

    /// Records a reviewer's verdict for an action's operation.
    pub fn record(
        &self,
        action: &Action,
        approve: bool,
        reviewer: &str,
        reason: &str,
        evidence: Option<Value>,
    ) -> crate::Result<ApprovalRecord> {
        let required = self.axes(action).required_tier;
        self.record_fingerprint(&fingerprint(action), required, approve, reviewer, reason, evidence)
    }

    /// Records a verdict for an explicit fingerprint.
    pub fn record_fingerprint(
        &self,
        fingerprint: &str,
        required_tier: PermissionTier,
        approve: bool,
        reviewer: &str,
        reason: &str,
        evidence: Option<Value>,
    ) -> crate::Result<ApprovalRecord> {
        let ledger =
            self.ledger.as_ref().ok_or_else(|| Error::runtime("no_ledger", "no approvals ledger is configured"))?;
        if fingerprint.is_empty() {
            return Err(Error::invalid_argument("fingerprint", "must not be empty"));
        }
        let rec = ApprovalRecord {
            fingerprint: fingerprint.to_string(),
            required_tier,
            decision: if approve { ApprovalVerdict::Approved } else { ApprovalVerdict::Rejected },
            reviewer: reviewer.to_string(),
            reason: reason.to_string(),
            evidence,
            decided_at: chrono::Utc::now(),
        };
        ledger.append(&rec)?;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn act(id: &str, tool: &str, params: Value) -> Action {
        let mut a = Action::tool_call(tool);
        a.id = id.into();
        a.parameters = params.as_object().cloned().unwrap_or_default();
        a
    }

    #[test]
    fn the_latest_records_are_reread_when_the_ledger_changes() {
        let dir = std::env::temp_dir().join(format!("car-approvals-cache-{}", uuid::Uuid::new_v4()));
        let path = dir.join("approvals.jsonl");
        let ledger = JsonlLedger::new(&path);
        assert!(ledger.latest_shared().unwrap().is_empty(), "a missing ledger is empty");
        let verdict = |l: &HashMap<String, ApprovalRecord>| l.values().next().unwrap().decision;
        let deploy = act("d", "deploy", json!({"target": "prod"}));

        // Recorded through another ledger of the same file.
        let gate = PermissionGate::new().with_ledger(Box::new(JsonlLedger::new(&path)));
        gate.record(&deploy, true, "al", "ok", None).unwrap();
        let first = ledger.latest_shared().unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(verdict(&first), ApprovalVerdict::Approved);
        assert!(Arc::ptr_eq(&first, &ledger.latest_shared().unwrap()), "an unchanged ledger is not re-read");

        // A later verdict for the same operation wins once it is appended.
        gate.record(&deploy, false, "bob", "not today", None).unwrap();
        let second = ledger.latest_shared().unwrap();
        assert_eq!(verdict(&second), ApprovalVerdict::Rejected);
        assert_eq!(ledger.latest(&fingerprint(&deploy)).unwrap().unwrap().decision, ApprovalVerdict::Rejected);

        // A corrupt ledger is an error every time, not a stale answer.
        std::fs::write(&path, "not a record\n").unwrap();
        assert!(ledger.latest_shared().is_err());
        assert!(ledger.latest_shared().is_err());
        std::fs::remove_file(&path).unwrap();
        assert!(ledger.latest_shared().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fingerprint_is_canonical() {
        let a = act("a", "deploy", json!({"z": 1, "a": {"y": 2, "b": [1, "x"]}}));
        assert_eq!(fingerprint(&a), r#"tool_call|deploy|{"a":{"b":[1,"x"],"y":2},"z":1}"#);
        let mut s = Action::new(crate::ir::ActionType::StateRead);
        s.parameters = Default::default();
        assert_eq!(fingerprint(&s), "state_read|-|{}");
    }

    #[test]
    fn gate_decisions_and_ledger() {
        let gate = PermissionGate::new().with_ledger(Box::<MemoryLedger>::default());
        let deploy = act("d", "deploy", json!({"target": "prod"}));
        let read = act("r", "read_file", json!({"path": "x"}));
        let d = gate.evaluate(&deploy, PermissionTier::FullAccess).unwrap();
        assert_eq!(d.decision, Decision::NeedsApproval, "full_access always needs approval");
        let r = gate.evaluate(&read, PermissionTier::ReadOnly).unwrap();
        assert_eq!(r.decision, Decision::NeedsApproval);
        assert_eq!(r.reason.as_deref(), Some("action requires sandbox_edit but session is granted only read_only"));
        assert_eq!(gate.evaluate(&read, PermissionTier::SandboxEdit).unwrap().decision, Decision::Allow);
        gate.record(&deploy, false, "bob", "no", None).unwrap();
        let d = gate.evaluate(&deploy, PermissionTier::FullAccess).unwrap();
        assert_eq!(d.decision, Decision::Deny);
        assert_eq!(d.reason.as_deref(), Some("previously rejected by bob (no)"));
        gate.record(&deploy, true, "al", "ok", None).unwrap();
        assert_eq!(gate.evaluate(&deploy, PermissionTier::ReadOnly).unwrap().decision, Decision::Allow, "latest wins");
        assert!(PermissionGate::new().record(&deploy, true, "x", "y", None).is_err());
    }

    #[test]
    fn admit_tier_refuses_above_the_granted_tier_unless_approved() {
        let gate = PermissionGate::new().with_ledger(Box::<MemoryLedger>::default());
        let deploy = act("d", "deploy", json!({"target": "prod"}));
        let read = act("r", "read_file", json!({"path": "x"}));
        let both = [read.clone(), deploy.clone()];
        assert_eq!(gate.admit_tier(std::slice::from_ref(&read), PermissionTier::SandboxEdit).unwrap(), None);
        assert_eq!(
            gate.admit_tier(&both, PermissionTier::SandboxEdit).unwrap().as_deref(),
            Some(
                "permission tier escalated: action `d` requires `full_access` but the session is granted only `sandbox_edit`; raise the tier (permission.set_tier) or approve the action (permission.approve)"
            )
        );
        let r = gate.admit_tier(&both, PermissionTier::ReadOnly).unwrap().unwrap();
        assert!(r.contains("action `r` requires `sandbox_edit`, action `d` requires `full_access`"), "{r}");
        assert_eq!(
            gate.admit_tier(&both, PermissionTier::FullAccess).unwrap().as_deref(),
            Some(
                "approval required: action `d` is `full_access`, which always needs an approval; approve the action (permission.approve)"
            ),
            "granted full_access: admits exactly what evaluate allows"
        );
        for granted in [PermissionTier::ReadOnly, PermissionTier::SandboxEdit, PermissionTier::FullAccess] {
            let allowed = gate.evaluate_all(&both, granted).unwrap().iter().all(|d| d.decision == Decision::Allow);
            assert_eq!(gate.admit_tier(&both, granted).unwrap().is_none(), allowed, "{granted}");
        }
        gate.record(&deploy, true, "al", "ok", None).unwrap();
        assert_eq!(gate.admit_tier(&both, PermissionTier::SandboxEdit).unwrap(), None, "approved");
        assert_eq!(gate.admit_tier(&both, PermissionTier::FullAccess).unwrap(), None, "approved, at full_access too");
        gate.record(&read, false, "bob", "no reads today", None).unwrap();
        assert_eq!(
            gate.admit_tier(&both, PermissionTier::FullAccess).unwrap().as_deref(),
            Some("refused: action `r` was previously rejected by bob (no reads today)"),
            "a rejection refuses at any tier"
        );
    }

    #[test]
    fn evaluate_all_reads_the_ledger_once_and_agrees() {
        let gate = PermissionGate::new().with_ledger(Box::<MemoryLedger>::default());
        let acts = vec![
            act("a", "deploy", json!({"t": 1})),
            act("b", "deploy", json!({"t": 2})),
            act("c", "read_file", json!({})),
        ];
        gate.record(&acts[0], true, "r", "ok", None).unwrap();
        gate.record(&acts[1], true, "r", "ok", None).unwrap();
        gate.record(&acts[1], false, "r", "changed my mind", None).unwrap();
        let all = gate.evaluate_all(&acts, PermissionTier::SandboxEdit).unwrap();
        let one: Vec<_> = acts.iter().map(|a| gate.evaluate(a, PermissionTier::SandboxEdit).unwrap()).collect();
        assert_eq!(all, one);
        let kinds: Vec<_> = all.iter().map(|d| d.decision).collect();
        assert_eq!(kinds, [Decision::Allow, Decision::Deny, Decision::Allow]);
    }
}
