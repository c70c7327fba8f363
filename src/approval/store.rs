//! The approvals store: pending approvals created by `ask` verdicts, keyed by
//! the tool name and a digest of the post-hook input, resolved by the host.
//!
//! - Resolution fails closed: anything but an explicit allow is a deny.
//! - Racing resolutions are settled first-closing-wins: the first resolution
//!   recorded closes the approval, later ones are reported as not applied,
//!   and a host resolution recorded after the deadline loses to the timeout
//!   (which closed at the deadline), so a live decision and the timeout
//!   default can never both apply.
//! - Durable: every request, resolution and consumption is one line appended
//!   to `approvals.jsonl` under the state directory, replayed on open (and
//!   re-read before each request), so pending approvals and resolutions
//!   survive a restart, and a resolution recorded while the process was down
//!   applies on the next request without asking again.
//! - With no approver attached (no subscriber, no callback) a request is
//!   rejected with `approval_required` naming the key, and the pending
//!   approval stays recorded (without a deadline) so it can be approved for
//!   the next submission.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use crate::{Error, Result};
use serde_json::error::Category;

/// The file name of the store under the state directory.
pub const APPROVALS_FILE: &str = "approvals.jsonl";

/// How often [`ApprovalStore::wait`] re-reads the file for resolutions
/// recorded by another store of the same directory.
pub const FILE_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// The default deadline of an approval a live approver is asked for: five
/// minutes (`approval_timeout_ms` of `CarRuntime::set_permissions`).
pub const DEFAULT_APPROVAL_TIMEOUT_MS: u64 = 300_000;

/// The decision an approval resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// The action proceeds.
    Allow,
    /// The action is rejected.
    Deny,
}

impl ApprovalDecision {
    /// Normalizes a resolution value, failing closed: only the string
    /// `"allow"` or an object whose `decision` is `"allow"` is an allow;
    /// anything else (other strings, `true`, null, typos) is a deny.
    pub fn normalize(value: &Value) -> Self {
        let d = match value {
            Value::String(s) => Some(s.as_str()),
            Value::Object(m) => m.get("decision").and_then(Value::as_str),
            _ => None,
        };
        if d == Some("allow") { ApprovalDecision::Allow } else { ApprovalDecision::Deny }
    }

    /// `allow` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::Allow => "allow",
            ApprovalDecision::Deny => "deny",
        }
    }
}

/// Who closed an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolvedBy {
    /// A host resolution.
    Host,
    /// The deadline passed (deny).
    Timeout,
}

/// The SHA-256 (hex) of the RFC 8785 canonical JSON of `input`.
pub fn input_digest(input: &Value) -> Result<String> {
    Ok(crate::canonical::digest(input))
}

/// The approval key of a tool and its input digest: `<tool>:<digest>`.
pub fn approval_key(tool: &str, input_digest: &str) -> String {
    format!("{tool}:{input_digest}")
}

/// An approval waiting for a resolution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// `<tool>:<digest>`.
    pub key: String,
    /// The tool name.
    pub tool: String,
    /// The digest of the post-hook input.
    pub input_digest: String,
    /// When it was requested.
    pub requested_at: DateTime<Utc>,
    /// When it is denied if unanswered; `None` = never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
}

/// How an approval was closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// The key.
    pub key: String,
    /// The decision.
    pub decision: ApprovalDecision,
    /// Why.
    #[serde(default)]
    pub reason: String,
    /// Who closed it.
    pub by: ResolvedBy,
    /// When.
    pub at: DateTime<Utc>,
}

/// The outcome of [`ApprovalStore::resolve`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolveOutcome {
    /// The resolution in force (the first to close the approval).
    pub resolution: Resolution,
    /// True when this call's resolution is the one in force.
    pub applied: bool,
}

/// What [`ApprovalStore::request`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ticket {
    /// Waiting for a resolution; await [`ApprovalStore::wait`].
    Pending(PendingApproval),
    /// Already resolved (e.g. while the process was down); applied now.
    Resolved(Resolution),
}

/// A notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ApprovalEvent {
    /// An approval is pending (`approval:pending`).
    Pending(PendingApproval),
    /// An approval was closed.
    Resolved(Resolution),
}

/// A notification callback.
pub type ApprovalCallback = Arc<dyn Fn(&ApprovalEvent) + Send + Sync>;

/// The clock of the store.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Record {
    Requested(PendingApproval),
    Resolved(Resolution),
    Consumed { key: String, at: DateTime<Utc> },
}

#[derive(Debug, Clone)]
struct Entry {
    pending: PendingApproval,
    resolution: Option<Resolution>,
    consumed: bool,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    order: Vec<String>,
    watchers: HashMap<String, watch::Sender<Option<Resolution>>>,
    read_len: u64,
}

impl Inner {
    /// The replay fold; returns the resolution a record closed, if any.
    fn apply(&mut self, rec: Record) -> Option<Resolution> {
        match rec {
            Record::Requested(p) => {
                let fresh = self.entries.get(&p.key).is_none_or(|e| e.consumed);
                if fresh {
                    self.order.retain(|k| *k != p.key);
                    self.order.push(p.key.clone());
                    self.entries.insert(p.key.clone(), Entry { pending: p, resolution: None, consumed: false });
                }
                None
            }
            Record::Resolved(mut r) => {
                let e = self.entries.get_mut(&r.key)?;
                if e.resolution.is_some() || e.consumed {
                    return None;
                }
                if let Some(d) = e.pending.deadline.filter(|d| r.by == ResolvedBy::Host && r.at > *d) {
                    // The timeout closed first.
                    r = timeout_resolution(&r.key, d);
                }
                e.resolution = Some(r.clone());
                if let Some(w) = self.watchers.get(&r.key) {
                    w.send_replace(Some(r.clone()));
                }
                Some(r)
            }
            Record::Consumed { key, .. } => {
                if let Some(e) = self.entries.get_mut(&key).filter(|e| e.resolution.is_some()) {
                    e.consumed = true;
                    // Waiters already hold the resolution (sent before this).
                    self.watchers.remove(&key);
                }
                None
            }
        }
    }
}

fn timeout_resolution(key: &str, at: DateTime<Utc>) -> Resolution {
    Resolution {
        key: key.to_string(),
        decision: ApprovalDecision::Deny,
        reason: "approval deadline passed without a resolution".to_string(),
        by: ResolvedBy::Timeout,
        at,
    }
}

/// The durable approvals store of one state directory.
pub struct ApprovalStore {
    path: PathBuf,
    inner: Mutex<Inner>,
    events: broadcast::Sender<ApprovalEvent>,
    callbacks: Mutex<Vec<(u64, ApprovalCallback)>>,
    next_callback: Mutex<u64>,
    clock: Clock,
}

impl std::fmt::Debug for ApprovalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalStore").field("path", &self.path).finish_non_exhaustive()
    }
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::runtime("approval_store_io", format!("approval store `{}`: {e}", path.display()))
}

impl ApprovalStore {
    /// Opens the store of `state_dir` and replays its file (the directory
    /// and file are created by the first write). Uses the system clock.
    pub fn open(state_dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with_clock(state_dir, Arc::new(Utc::now))
    }

    /// [`ApprovalStore::open`] with a clock.
    pub fn open_with_clock(state_dir: impl AsRef<Path>, clock: Clock) -> Result<Self> {
        let dir = state_dir.as_ref();
        let (events, _) = broadcast::channel(256);
        let store = ApprovalStore {
            path: dir.join(APPROVALS_FILE),
            inner: Mutex::new(Inner::default()),
            events,
            callbacks: Mutex::new(Vec::new()),
            next_callback: Mutex::new(0),
            clock,
        };
        {
            let mut inner = store.lock()?;
            store.refresh(&mut inner)?;
        }
        Ok(store)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        self.inner.lock().map_err(|_| Error::runtime("approval_store_io", "approval store lock poisoned"))
    }

    /// Applies records appended to the file since the last read (by this
    /// process or another one, e.g. a host resolving while we were down).
    fn refresh(&self, inner: &mut Inner) -> Result<Vec<Resolution>> {
        let mut f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&self.path, e)),
        };
        f.seek(SeekFrom::Start(inner.read_len)).map_err(|e| io_err(&self.path, e))?;
        let mut buf = String::new();
        f.read_to_string(&mut buf).map_err(|e| io_err(&self.path, e))?;
        // Only complete lines; a torn last line is read again next time.
        let complete = buf.rfind('\n').map_or(0, |i| i + 1);
        let mut closed = Vec::new();
        for (n, line) in buf[..complete].lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let rec: Record = match serde_json::from_str(line) {
                Ok(r) => r,
                // A torn write of a crashed writer (completed by the next
                // append's newline) never committed: skip it.
                Err(e) if matches!(e.classify(), Category::Syntax | Category::Eof) => {
                    eprintln!(
                        "car-runtime: warning: approval store `{}`: ignoring an incomplete record \
                         (an interrupted write): {e}",
                        self.path.display()
                    );
                    continue;
                }
                Err(e) => {
                    return Err(Error::runtime(
                        "approval_store_corrupt",
                        format!("approval store `{}`: bad record {}: {e}", self.path.display(), n + 1),
                    ));
                }
            };
            closed.extend(inner.apply(rec));
        }
        inner.read_len += complete as u64;
        Ok(closed)
    }

    /// Appends a record, then folds in everything the file holds up to and
    /// including it, in file order (records other processes appended first
    /// are folded first: file order is the first-closing-wins order).
    /// Returns every resolution the fold closed.
    fn record(&self, inner: &mut Inner, rec: Record) -> Result<Vec<Resolution>> {
        let line = serde_json::to_string(&rec).map_err(|e| io_err(&self.path, e))?;
        append_record(&self.path, &line).map_err(|e| io_err(&self.path, e))?;
        self.refresh(inner)
    }

    fn emit(&self, events: Vec<ApprovalEvent>) {
        let callbacks: Vec<ApprovalCallback> = match self.callbacks.lock() {
            Ok(c) => c.iter().map(|(_, cb)| cb.clone()).collect(),
            Err(_) => Vec::new(),
        };
        for ev in events {
            let _ = self.events.send(ev.clone());
            for cb in &callbacks {
                cb(&ev);
            }
        }
    }

    /// True when an approver is attached: a live subscriber or a callback.
    pub fn approver_attached(&self) -> bool {
        self.events.receiver_count() > 0 || self.callbacks.lock().map(|c| !c.is_empty()).unwrap_or(false)
    }

    /// Subscribes to notifications; a live subscription attaches an approver.
    pub fn subscribe(&self) -> broadcast::Receiver<ApprovalEvent> {
        self.events.subscribe()
    }

    /// Registers a notification callback (it attaches an approver); returns
    /// its id. Callbacks run outside the store's lock and may resolve.
    pub fn on_event(&self, callback: ApprovalCallback) -> u64 {
        let id = match self.next_callback.lock() {
            Ok(mut n) => {
                *n += 1;
                *n
            }
            Err(_) => 0,
        };
        if let Ok(mut c) = self.callbacks.lock() {
            c.push((id, callback));
        }
        id
    }

    /// Removes a callback.
    pub fn remove_callback(&self, id: u64) {
        if let Ok(mut c) = self.callbacks.lock() {
            c.retain(|(i, _)| *i != id);
        }
    }

    /// Closes every pending approval whose deadline has passed, as a deny.
    fn expire_locked(&self, inner: &mut Inner, now: DateTime<Utc>) -> Result<Vec<Resolution>> {
        let due: Vec<(String, DateTime<Utc>)> = inner
            .entries
            .values()
            .filter(|e| e.resolution.is_none() && !e.consumed)
            .filter_map(|e| e.pending.deadline.filter(|d| *d <= now).map(|d| (e.pending.key.clone(), d)))
            .collect();
        let mut out = Vec::new();
        for (key, d) in due {
            out.extend(self.record(inner, Record::Resolved(timeout_resolution(&key, d)))?);
        }
        Ok(out)
    }

    /// Denies every unanswered approval past its deadline; returns them.
    pub fn expire_due(&self) -> Result<Vec<Resolution>> {
        let now = (self.clock)();
        let closed = {
            let mut inner = self.lock()?;
            let mut c = self.refresh(&mut inner)?;
            c.extend(self.expire_locked(&mut inner, now)?);
            c
        };
        self.emit(closed.iter().cloned().map(ApprovalEvent::Resolved).collect());
        Ok(closed)
    }

    /// Asks for an approval of `tool` with the post-hook input digest
    /// `input_digest`, denied at `deadline` when unanswered.
    ///
    /// - An earlier resolution of the same key not yet used (e.g. made while
    ///   the process was down) applies at once: [`Ticket::Resolved`].
    /// - An approval already pending for the key is joined.
    /// - Otherwise a pending approval is recorded and announced.
    ///
    /// With no approver attached the answer is the error `approval_required`
    /// naming the key; the approval stays recorded, without a deadline.
    pub fn request(&self, tool: &str, input_digest: &str, deadline: Option<DateTime<Utc>>) -> Result<Ticket> {
        let key = approval_key(tool, input_digest);
        let now = (self.clock)();
        let attached = self.approver_attached();
        let mut events = Vec::new();
        let ticket = {
            let mut inner = self.lock()?;
            events.extend(self.refresh(&mut inner)?.into_iter().map(ApprovalEvent::Resolved));
            events.extend(self.expire_locked(&mut inner, now)?.into_iter().map(ApprovalEvent::Resolved));
            match inner.entries.get(&key).filter(|e| !e.consumed).cloned() {
                Some(Entry { resolution: Some(r), .. }) => {
                    let closed = self.record(&mut inner, Record::Consumed { key: key.clone(), at: now })?;
                    events.extend(closed.into_iter().map(ApprovalEvent::Resolved));
                    Ticket::Resolved(r)
                }
                Some(Entry { pending, .. }) => {
                    // Joined: announced again so a newly attached approver sees it.
                    events.push(ApprovalEvent::Pending(pending.clone()));
                    Ticket::Pending(pending)
                }
                None => {
                    let p = PendingApproval {
                        key: key.clone(),
                        tool: tool.to_string(),
                        input_digest: input_digest.to_string(),
                        requested_at: now,
                        deadline: if attached { deadline } else { None },
                    };
                    let closed = self.record(&mut inner, Record::Requested(p.clone()))?;
                    events.extend(closed.into_iter().map(ApprovalEvent::Resolved));
                    events.push(ApprovalEvent::Pending(p.clone()));
                    Ticket::Pending(p)
                }
            }
        };
        self.emit(events);
        match ticket {
            Ticket::Pending(_) if !attached => Err(Error::runtime(
                "approval_required",
                format!("approval required: no approver is attached; resolve approval `{key}` and resubmit"),
            )),
            t => Ok(t),
        }
    }

    /// Resolves the approval `key`. First-closing-wins: when it is already
    /// closed (by an earlier resolution or its deadline), the earlier
    /// resolution stays in force and `applied` is false.
    pub fn resolve(&self, key: &str, decision: ApprovalDecision, reason: &str) -> Result<ResolveOutcome> {
        let now = (self.clock)();
        let mut events = Vec::new();
        let outcome = {
            let mut inner = self.lock()?;
            events.extend(self.refresh(&mut inner)?.into_iter().map(ApprovalEvent::Resolved));
            events.extend(self.expire_locked(&mut inner, now)?.into_iter().map(ApprovalEvent::Resolved));
            let Some(entry) = inner.entries.get(key).cloned() else {
                return Err(Error::not_found("approval_not_found", format!("no approval `{key}`")));
            };
            match entry.resolution {
                Some(r) => ResolveOutcome { resolution: r, applied: false },
                None => {
                    let r = Resolution {
                        key: key.to_string(),
                        decision,
                        reason: reason.to_string(),
                        by: ResolvedBy::Host,
                        at: now,
                    };
                    let closed = self.record(&mut inner, Record::Resolved(r.clone()))?;
                    let winner = closed.iter().find(|c| c.key == key).cloned();
                    events.extend(closed.into_iter().map(ApprovalEvent::Resolved));
                    let applied = winner.as_ref() == Some(&r);
                    // Not closed by the fold at all: report the stored state.
                    let resolution = match winner {
                        Some(w) => w,
                        None => inner.entries.get(key).and_then(|e| e.resolution.clone()).unwrap_or(r),
                    };
                    ResolveOutcome { resolution, applied }
                }
            }
        };
        self.emit(events);
        Ok(outcome)
    }

    /// [`ApprovalStore::resolve`] with a raw resolution value, normalized
    /// fail-closed by [`ApprovalDecision::normalize`].
    pub fn resolve_value(&self, key: &str, value: &Value, reason: &str) -> Result<ResolveOutcome> {
        self.resolve(key, ApprovalDecision::normalize(value), reason)
    }

    /// Pending approvals, oldest first (after closing the overdue ones).
    pub fn pending(&self) -> Result<Vec<PendingApproval>> {
        self.expire_due()?;
        let inner = self.lock()?;
        Ok(inner
            .order
            .iter()
            .filter_map(|k| inner.entries.get(k))
            .filter(|e| e.resolution.is_none() && !e.consumed)
            .map(|e| e.pending.clone())
            .collect())
    }

    /// The resolution of `key`, if closed and not yet used.
    pub fn resolution(&self, key: &str) -> Result<Option<Resolution>> {
        let mut inner = self.lock()?;
        self.refresh(&mut inner)?;
        Ok(inner.entries.get(key).filter(|e| !e.consumed).and_then(|e| e.resolution.clone()))
    }

    /// Closes `key` by its timeout unless something closed it first; returns
    /// the resolution in force.
    fn close_by_timeout(&self, key: &str) -> Result<Resolution> {
        let now = (self.clock)();
        let (r, fresh) = {
            let mut inner = self.lock()?;
            self.refresh(&mut inner)?;
            match inner.entries.get(key).and_then(|e| e.resolution.clone()) {
                Some(r) => (r, false),
                None => {
                    let t = timeout_resolution(key, now);
                    let closed = self.record(&mut inner, Record::Resolved(t.clone()))?;
                    let winner = closed.iter().find(|c| c.key == key).cloned();
                    (winner.unwrap_or(t), true)
                }
            }
        };
        if fresh {
            self.emit(vec![ApprovalEvent::Resolved(r.clone())]);
        }
        Ok(r)
    }

    /// Waits until the approval `key` is closed, by a resolution or by its
    /// deadline (a deny), and uses it up. Needs a tokio runtime.
    pub async fn wait(&self, key: &str) -> Result<Resolution> {
        self.wait_inner(key, None, None).await
    }

    /// Waits for the approval a [`Ticket::Pending`] names, like
    /// [`ApprovalStore::wait`], with two differences:
    /// - every holder of a ticket of the same request gets its resolution,
    ///   also when another holder (or a request joining it) already used it
    ///   up: two identical calls waiting on one approval share its answer;
    /// - an approval recorded without a deadline (requested while no approver
    ///   was attached, now waited for) is closed as a deny at `deadline`; a
    ///   recorded deadline is kept. First-closing-wins still decides between
    ///   that deny and a host resolution.
    pub async fn wait_pending(&self, pending: &PendingApproval, deadline: Option<DateTime<Utc>>) -> Result<Resolution> {
        self.wait_inner(&pending.key, Some(pending), deadline).await
    }

    async fn wait_inner(
        &self,
        key: &str,
        ticket: Option<&PendingApproval>,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Resolution> {
        let (mut rx, deadline) = {
            let mut inner = self.lock()?;
            self.refresh(&mut inner)?;
            let not_found = || Error::not_found("approval_not_found", format!("no open approval `{key}`"));
            let entry = inner.entries.get(key).cloned().ok_or_else(not_found)?;
            if let Some(p) = ticket
                && entry.pending != *p
            {
                // A later request replaced the one this ticket was for.
                return Err(not_found());
            }
            if entry.consumed {
                return match (entry.resolution, ticket) {
                    (Some(r), Some(_)) => Ok(r),
                    _ => Err(not_found()),
                };
            }
            let tx = inner.watchers.entry(key.to_string()).or_insert_with(|| watch::channel(None).0);
            if let Some(r) = &entry.resolution {
                tx.send_replace(Some(r.clone()));
            }
            (tx.subscribe(), entry.pending.deadline.or(deadline))
        };
        // Woken by this store's own folds at once; resolutions another store
        // of the same file records (another process, or the stateless
        // `approval_resolve(state_dir, ..)`) are folded in by re-reading the
        // file every `FILE_POLL`.
        let closed = async {
            loop {
                match tokio::time::timeout(FILE_POLL, rx.wait_for(Option::is_some)).await {
                    Ok(r) => return Ok::<_, Error>(r.ok().and_then(|r| r.clone())),
                    Err(_) => {
                        let folded = {
                            let mut inner = self.lock()?;
                            self.refresh(&mut inner)?
                        };
                        self.emit(folded.into_iter().map(ApprovalEvent::Resolved).collect());
                    }
                }
            }
        };
        let resolution = match deadline {
            None => closed.await?,
            Some(d) => {
                let left = (d - (self.clock)()).to_std().unwrap_or_default();
                match tokio::time::timeout(left, closed).await {
                    Ok(r) => r?,
                    Err(_) => Some(self.close_by_timeout(key)?),
                }
            }
        };
        let Some(r) = resolution else {
            // Fail closed: a wait that cannot learn the outcome is a deny.
            return Ok(timeout_resolution(key, (self.clock)()));
        };
        let mut inner = self.lock()?;
        if inner.entries.get(key).is_some_and(|e| !e.consumed) {
            let now = (self.clock)();
            self.record(&mut inner, Record::Consumed { key: key.to_string(), at: now })?;
        }
        Ok(r)
    }
}

/// Appends one record line in a single write, first completing a torn last
/// line (so it stays a line of its own), then syncs.
fn append_record(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = crate::sandbox::open_append_locked(path)?;
    let len = f.metadata()?.len();
    let mut buf = String::with_capacity(line.len() + 2);
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        if last[0] != b'\n' {
            buf.push('\n');
        }
    }
    buf.push_str(line);
    buf.push('\n');
    f.write_all(buf.as_bytes())?;
    f.sync_data()
}
