//! The embedded audit log on disk: every event an [`crate::events::EventLog`]
//! records, appended to one JSONL file (`events.jsonl` under `$CAR_HOME` for
//! `car-server` and `car run`), hash-chained across restarts.
//!
//! - One record a line: `{id, kind, timestamp, proposal_id, action_id, data,
//!   prev_hash?, hash}` with the file's own sequence (`id` from 1) and chain
//!   (`hash` is the SHA-256 of the JCS form of the record without `hash`;
//!   `prev_hash` is the previous record's hash, absent on the first), so the
//!   chain is one per file whatever writes to it (every connection of a
//!   daemon appends to the daemon's file).
//! - On open the file is read and verified; appends continue its chain. A
//!   torn last record (bytes after the last newline: a write cut short) is
//!   reported, moved aside to `<file>.torn-<unix seconds>` and cut from the
//!   file, never merged with the next record. A record that does not parse or
//!   breaks the chain anywhere else refuses the open, naming the line.
//! - Records are written in batches by one writer thread of the file (one
//!   `flock`, one `write` a batch) when a durability ticket asks or within
//!   10 ms, and synced by group commit (one `fsync` for every durability ticket waiting); the engine
//!   takes a ticket at the end of every proposal, so a proposal answers only
//!   after its events are durable. Where a sync is measured to be quick
//!   (under [`INLINE_SYNC`]) and no batch is being written, the ticket's
//!   caller writes and syncs the batch itself instead of waking the thread.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::events::Event;
use crate::{Error, Result};

/// The file name of the audit log under a state directory.
pub const EVENTS_FILE: &str = "events.jsonl";

/// A torn last record found when a file was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornRecord {
    /// Its 1-based line number.
    pub line: usize,
    /// How many bytes it had.
    pub bytes: usize,
    /// Where it was moved (when the file was opened for appending).
    pub moved_to: Option<PathBuf>,
}

/// What reading (or verifying) an audit file found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileReport {
    /// Complete records that verify.
    pub records: usize,
    /// The first record (1-based line) that does not verify, when any.
    pub tampered_at: Option<usize>,
    /// Why it does not.
    pub problem: Option<String>,
    /// A torn last record, skipped.
    pub torn: Option<TornRecord>,
    /// The hash of the last record that verifies.
    pub head: Option<String>,
}

impl FileReport {
    /// True when every complete record verifies.
    pub fn intact(&self) -> bool {
        self.tampered_at.is_none()
    }

    /// `{records, verified, tampered_at?, problem?, torn_line?, head?}`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("records".into(), Value::from(self.records));
        m.insert("verified".into(), Value::Bool(self.intact()));
        if let Some(t) = self.tampered_at {
            m.insert("tampered_at".into(), Value::from(t));
        }
        if let Some(p) = &self.problem {
            m.insert("problem".into(), Value::String(p.clone()));
        }
        if let Some(t) = &self.torn {
            m.insert("torn_line".into(), Value::from(t.line));
        }
        if let Some(h) = &self.head {
            m.insert("head".into(), Value::String(h.clone()));
        }
        Value::Object(m)
    }
}

/// The hash of a record: SHA-256 of the JCS form of everything but `hash`.
fn record_hash(record: &Map<String, Value>) -> String {
    let mut content = record.clone();
    content.remove("hash");
    crate::canonical::sha256_hex(&crate::canonical::canonical_object(&content))
}

/// Reads records from `reader`, verifying the chain: each complete line is
/// one record whose hash matches, whose `id` is one more than the previous
/// record's (1 first) and whose `prev_hash` is the previous record's hash
/// (absent first). Stops at the first record that does not. `each` sees
/// every verified record with its raw line.
pub fn verify_reader(mut reader: impl BufRead, mut each: impl FnMut(&Map<String, Value>, &str)) -> Result<FileReport> {
    let mut report = FileReport::default();
    let mut prev: Option<String> = None;
    let mut line_no = 0usize;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::runtime("event_file_io_error", format!("cannot read the event file: {e}")))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if buf.last() != Some(&b'\n') {
            // Bytes after the last newline: a write cut short.
            report.torn = Some(TornRecord { line: line_no, bytes: buf.len(), moved_to: None });
            break;
        }
        let text = String::from_utf8_lossy(&buf[..buf.len() - 1]).into_owned();
        let fail = |report: &mut FileReport, why: String| {
            report.tampered_at = Some(line_no);
            report.problem = Some(why);
        };
        let rec = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                fail(&mut report, format!("line {line_no} is not a JSON object"));
                break;
            }
            Err(e) => {
                fail(&mut report, format!("line {line_no} is not a record: {e}"));
                break;
            }
        };
        let want_id = report.records as u64 + 1;
        if rec.get("id").and_then(Value::as_u64) != Some(want_id) {
            fail(&mut report, format!("line {line_no}: id is not {want_id} (a record was removed or inserted)"));
            break;
        }
        if rec.get("prev_hash").and_then(Value::as_str) != prev.as_deref() {
            fail(&mut report, format!("line {line_no}: prev_hash does not link to the previous record"));
            break;
        }
        let Some(hash) = rec.get("hash").and_then(Value::as_str) else {
            fail(&mut report, format!("line {line_no}: no hash"));
            break;
        };
        if record_hash(&rec) != hash {
            fail(&mut report, format!("line {line_no}: hash does not match the record (altered)"));
            break;
        }
        prev = Some(hash.to_string());
        report.records += 1;
        each(&rec, &text);
    }
    report.head = prev;
    Ok(report)
}

/// Verifies an audit file (or an export of one) without changing it.
pub fn verify_file(path: &Path) -> Result<FileReport> {
    let f = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    verify_reader(std::io::BufReader::new(f), |_, _| {})
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::runtime("event_file_io_error", format!("event file `{}`: {e}", path.display()))
}

/// How long the writer thread waits, idle, before it ends (the next record
/// or ticket starts another).
const IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a record waits for a ticket before it is written without one
/// (and unsynced): the writer wakes for tickets, not for every record.
const LINGER: std::time::Duration = std::time::Duration::from_millis(10);

/// Records queued without a ticket that wake the writer at once.
const WAKE_AT: usize = 1024;

/// A sync measured to take less than this is made by the ticket's caller
/// (when no batch is being written) rather than by the writer thread: on a
/// file system that syncs this quickly (tmpfs, a disk with a write cache)
/// waking the thread and being woken by it costs more than the write and
/// the sync themselves (about 40 µs a proposal through the daemon,
/// `docs/performance.md`), and a caller on an async worker is held no
/// longer than this. A slower sync sends the next tickets to the thread
/// again, which goes on measuring.
pub const INLINE_SYNC: Duration = Duration::from_micros(100);

/// No sync measured yet.
const UNMEASURED: u64 = u64::MAX;

/// An append-only, hash-chained audit file shared by event logs.
///
/// [`AuditFile::record`] only queues the event (a clone: its payload is
/// rendered later); one writer thread of the file takes everything queued
/// at once and appends it as one batch: one `flock`, one `fstat` (folding in
/// what other processes appended), the records rendered, hashed and chained,
/// one `write`, and, when a durability ticket ([`AuditFile::durable`]) is
/// waiting, one `fsync` for all of them (group commit) before the tickets
/// resolve. The engine awaits a ticket at the end of every proposal, so a
/// result is returned only once its events are on disk; concurrent
/// proposals share the batch. The writer wakes for a ticket (or for
/// [`WAKE_AT`] records queued), not for each record: a record no ticket
/// asks for is written, unsynced, within [`LINGER`] (10 ms). Where the
/// file's last sync took under [`INLINE_SYNC`], a ticket's caller that finds
/// no batch being written writes and syncs everything queued itself, and
/// its ticket is resolved when `durable` returns.
pub struct AuditFile {
    path: PathBuf,
    shared: Arc<Shared>,
}

/// What the file's callers and its writer thread share.
struct Shared {
    path: PathBuf,
    /// The same open file as [`Writer::file`] (a duplicated descriptor), to
    /// sync without holding the writer.
    sync_file: std::fs::File,
    /// Taken first by whoever writes a batch (the writer thread, or
    /// [`AuditFile::sync`] and drop inline), then the queue: so batches
    /// reach the file in the order they were queued.
    writer: Mutex<Writer>,
    queue: Mutex<Queue>,
    wake: std::sync::Condvar,
    /// How long the last sync took, in nanoseconds ([`UNMEASURED`] before
    /// the first).
    last_sync_ns: AtomicU64,
    /// Syncs quicker than this are made inline ([`INLINE_SYNC`]; the tests
    /// set both ends).
    inline_below: Duration,
}

/// The events and tickets waiting for the next batch.
#[derive(Default)]
struct Queue {
    events: Vec<Event>,
    tickets: Vec<tokio::sync::oneshot::Sender<()>>,
    /// A writer thread exists.
    running: bool,
    /// It is waiting for work (the next record or ticket wakes it).
    idle: bool,
}

/// The file's end as this process knows it.
struct Writer {
    file: std::fs::File,
    next_id: u64,
    last_hash: Option<String>,
    /// The first write error; later records are not written (the log on
    /// disk would have a hole) and [`AuditFile::sync`] reports it.
    failed: Option<String>,
    /// The file's length after this process's last read or write.
    len: u64,
    /// The batch's bytes (kept for its capacity).
    buf: Vec<u8>,
    /// A record's parts as it is written (kept for their capacity).
    scratch: Scratch,
    /// The batch's events, taken from the queue (kept for its capacity).
    batch: Vec<Event>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Writes everything queued (and syncs when a ticket waits), until the
    /// queue stays empty for [`IDLE`].
    fn run(self: Arc<Self>) {
        loop {
            {
                let mut q = lock(&self.queue);
                let mut idle_for = std::time::Duration::ZERO;
                while q.tickets.is_empty() && q.events.len() < WAKE_AT {
                    q.idle = true;
                    let (g, waited) =
                        self.wake.wait_timeout(q, LINGER).unwrap_or_else(std::sync::PoisonError::into_inner);
                    q = g;
                    q.idle = false;
                    if !waited.timed_out() {
                        continue;
                    }
                    if !q.events.is_empty() {
                        break;
                    }
                    idle_for += LINGER;
                    if idle_for >= IDLE {
                        q.running = false;
                        return;
                    }
                }
            }
            let mut w = lock(&self.writer);
            let tickets = self.take_queued(&mut w);
            if tickets.is_empty() {
                continue;
            }
            // The sync holds no lock: the next batch queues meanwhile.
            drop(w);
            if let Err(e) = self.sync() {
                eprintln!("car: event file `{}`: sync failed: {e}", self.path.display());
            }
            for t in tickets {
                let _ = t.send(());
            }
        }
    }

    /// Writes everything queued and syncs, on the caller's thread.
    fn flush(&self) -> std::io::Result<()> {
        self.flush_locked(lock(&self.writer))
    }

    /// [`Shared::flush`] with the writer already held; the sync is made
    /// without it, as the writer thread's.
    fn flush_locked(&self, mut w: std::sync::MutexGuard<'_, Writer>) -> std::io::Result<()> {
        let tickets = self.take_queued(&mut w);
        drop(w);
        let synced = self.sync();
        for t in tickets {
            let _ = t.send(());
        }
        synced
    }

    /// Writes what is queued and returns the tickets waiting on it (for the
    /// caller to resolve once it has synced). The tickets are taken first:
    /// every record a ticket covers was queued before it, so the records
    /// taken next include them.
    fn take_queued(&self, w: &mut Writer) -> Vec<tokio::sync::oneshot::Sender<()>> {
        let tickets = std::mem::take(&mut lock(&self.queue).tickets);
        self.write_queued(w);
        tickets
    }

    /// Writes the records queued, taken with the writer held (`w`), so
    /// batches reach the file in the order they were queued; whether there
    /// were any. The queue and the batch swap vectors, so neither allocates
    /// again once grown.
    fn write_queued(&self, w: &mut Writer) -> bool {
        let mut events = std::mem::take(&mut w.batch);
        std::mem::swap(&mut events, &mut lock(&self.queue).events);
        self.write_batch(w, &events);
        let wrote = !events.is_empty();
        events.clear();
        w.batch = events;
        wrote
    }

    /// Syncs the file's data, recording how long it took.
    fn sync(&self) -> std::io::Result<()> {
        let start = Instant::now();
        let synced = self.sync_file.sync_data();
        let took = u64::try_from(start.elapsed().as_nanos()).unwrap_or(UNMEASURED - 1);
        self.last_sync_ns.store(took, Ordering::Relaxed);
        synced
    }

    /// True when the last sync was quick enough to make the next inline.
    fn inline_syncs(&self) -> bool {
        let last = self.last_sync_ns.load(Ordering::Relaxed);
        last != UNMEASURED && u128::from(last) < self.inline_below.as_nanos()
    }

    /// Appends `events` as the file's next records, under one `flock`, with
    /// one `write`; the first failure stops this and every later batch.
    fn write_batch(&self, w: &mut Writer, events: &[Event]) {
        if events.is_empty() || w.failed.is_some() {
            return;
        }
        let locked = rustix::fs::flock(&w.file, rustix::fs::FlockOperation::LockExclusive);
        let outcome = locked.map_err(std::io::Error::from).and_then(|()| {
            // The file's end (an `lseek`, cheaper than a `stat`): the
            // file's length, as it is open for appending.
            let cur = std::io::Seek::seek(&mut w.file, std::io::SeekFrom::End(0))?;
            if cur != w.len {
                self.catch_up(w, cur)?;
            }
            let mut buf = std::mem::take(&mut w.buf);
            buf.clear();
            let mut id = w.next_id;
            // The hash the next record links to: the file's head, then
            // each record's as it is written.
            let mut last: Option<[u8; 64]> = None;
            for e in events {
                let prev = match &last {
                    Some(h) => Some(crate::canonical::hex_text(h)),
                    None => w.last_hash.as_deref(),
                };
                last = Some(write_record(&mut buf, &mut w.scratch, e, id, prev)?);
                id += 1;
            }
            let written = w.file.write_all(&buf);
            if written.is_ok() {
                w.len += buf.len() as u64;
                w.next_id = id;
                if let Some(h) = &last {
                    let head = w.last_hash.get_or_insert_with(String::new);
                    head.clear();
                    head.push_str(crate::canonical::hex_text(h));
                }
            }
            w.buf = buf;
            written
        });
        let _ = rustix::fs::flock(&w.file, rustix::fs::FlockOperation::Unlock);
        if let Err(e) = outcome {
            eprintln!("car: event file `{}`: write failed, no further events recorded: {e}", self.path.display());
            w.failed = Some(e.to_string());
        }
    }

    /// Folds in the records another process appended after `w.len`,
    /// verifying each links to the chain.
    fn catch_up(&self, w: &mut Writer, cur: u64) -> std::io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(&self.path)?;
        f.seek(SeekFrom::Start(w.len))?;
        let mut buf = Vec::with_capacity(usize::try_from(cur.saturating_sub(w.len)).unwrap_or(0));
        f.take(cur.saturating_sub(w.len)).read_to_end(&mut buf)?;
        if buf.last().is_some_and(|b| *b != b'\n') {
            return Err(std::io::Error::other("another writer left a torn record; reopen the file to skip it"));
        }
        for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let bad = || std::io::Error::other("a record another writer appended does not continue the chain");
            let Ok(Value::Object(rec)) = serde_json::from_slice::<Value>(line) else { return Err(bad()) };
            let hash = rec.get("hash").and_then(Value::as_str).ok_or_else(bad)?;
            if rec.get("id").and_then(Value::as_u64) != Some(w.next_id)
                || rec.get("prev_hash").and_then(Value::as_str) != w.last_hash.as_deref()
                || record_hash(&rec) != hash
            {
                return Err(bad());
            }
            w.next_id += 1;
            w.last_hash = Some(hash.to_string());
        }
        w.len = cur;
        Ok(())
    }
}

/// Buffers [`write_record`] reuses from one record to the next.
#[derive(Default)]
struct Scratch {
    canonical: Vec<u8>,
    data: Vec<u8>,
    timestamp: Vec<u8>,
}

/// Appends `e` to `buf` as the file's record `id` linked to `prev` (one
/// line: `{id, kind, timestamp, proposal_id, action_id, data, prev_hash?,
/// hash}`); returns its hash, the SHA-256 of the JCS form of the record
/// without `hash` ([`record_hash`] of the line read back). Both forms are
/// written straight from the event: its `data` is rendered once, in RFC
/// 8785 form, and the line holds that text too unless it would not read
/// back as the data (a number the canonical form changes), when the line
/// has the data as serde writes it.
fn write_record(
    buf: &mut Vec<u8>,
    s: &mut Scratch,
    e: &Event,
    id: u64,
    prev: Option<&str>,
) -> std::io::Result<[u8; 64]> {
    fn string(out: &mut Vec<u8>, v: Option<&str>) {
        match v {
            Some(v) => crate::canonical::write_str(out, v),
            None => out.extend_from_slice(b"null"),
        }
    }
    s.data.clear();
    let exact_data = e.data.write_canonical(&mut s.data);
    s.timestamp.clear();
    crate::events::write_timestamp(&mut s.timestamp, &e.timestamp);
    // The canonical form: members in code-unit order.
    let c = &mut s.canonical;
    c.clear();
    e.write_canonical(id, prev, &s.data, &s.timestamp, c);
    let hash = crate::canonical::sha256_hex_bytes(c);
    // The line, in the record's own order.
    buf.extend_from_slice(br#"{"id":"#);
    buf.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
    buf.extend_from_slice(br#","kind":"#);
    string(buf, Some(e.kind.as_str()));
    buf.extend_from_slice(br#","timestamp":"#);
    buf.extend_from_slice(&s.timestamp);
    buf.extend_from_slice(br#","proposal_id":"#);
    string(buf, e.proposal_id.as_deref());
    buf.extend_from_slice(br#","action_id":"#);
    string(buf, e.action_id.as_deref());
    buf.extend_from_slice(br#","data":"#);
    match &exact_data {
        None => buf.extend_from_slice(&s.data),
        Some(data) => serde_json::to_writer(&mut *buf, data).map_err(std::io::Error::other)?,
    }
    if prev.is_some() {
        buf.extend_from_slice(br#","prev_hash":"#);
        string(buf, prev);
    }
    buf.extend_from_slice(br#","hash":""#);
    buf.extend_from_slice(&hash);
    buf.extend_from_slice(b"\"}\n");
    Ok(hash)
}

impl std::fmt::Debug for AuditFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditFile").field("path", &self.path).finish()
    }
}

impl AuditFile {
    /// Opens (creating) the audit file at `path` and continues its chain.
    /// Returns the report of what it held (a torn last record is moved
    /// aside and named there); a broken chain refuses the open.
    pub fn open(path: impl Into<PathBuf>) -> Result<(AuditFile, FileReport)> {
        let path = path.into();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io_err(&path, e))?;
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(|e| io_err(&path, e))?;
        // Read and repair under the lock appends take.
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io_err(&path, std::io::Error::from(e)))?;
        let read = Self::read_for_append(&path);
        let _ = rustix::fs::flock(&file, rustix::fs::FlockOperation::Unlock);
        let (report, len) = read?;
        let sync_file = file.try_clone().map_err(|e| io_err(&path, e))?;
        let writer = Writer {
            file,
            next_id: report.records as u64 + 1,
            last_hash: report.head.clone(),
            failed: None,
            len,
            buf: Vec::new(),
            scratch: Scratch::default(),
            batch: Vec::new(),
        };
        let shared = Arc::new(Shared {
            path: path.clone(),
            sync_file,
            writer: Mutex::new(writer),
            queue: Mutex::new(Queue::default()),
            wake: std::sync::Condvar::new(),
            last_sync_ns: AtomicU64::new(UNMEASURED),
            inline_below: INLINE_SYNC,
        });
        Ok((AuditFile { path, shared }, report))
    }

    /// Verifies the file, moves a torn last record aside and cuts it off;
    /// returns the report and the length of the complete records.
    fn read_for_append(path: &Path) -> Result<(FileReport, u64)> {
        let mut good_len = 0u64;
        let f = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
        let mut report = verify_reader(std::io::BufReader::new(f), |_, text| good_len += text.len() as u64 + 1)?;
        if let (Some(line), Some(why)) = (report.tampered_at, &report.problem) {
            return Err(Error::runtime(
                "event_file_tampered",
                format!(
                    "event file `{}` fails verification at line {line}: {why}; refusing to append to a broken chain",
                    path.display()
                ),
            ));
        }
        if let Some(torn) = report.torn.as_mut() {
            let data = std::fs::read(path).map_err(|e| io_err(path, e))?;
            let stamp =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            let aside = PathBuf::from(format!("{}.torn-{stamp}", path.display()));
            let tail = data.get(good_len as usize..).unwrap_or_default();
            std::fs::write(&aside, tail).map_err(|e| io_err(&aside, e))?;
            let f = std::fs::OpenOptions::new().write(true).open(path).map_err(|e| io_err(path, e))?;
            f.set_len(good_len).map_err(|e| io_err(path, e))?;
            f.sync_all().map_err(|e| io_err(path, e))?;
            torn.moved_to = Some(aside);
        }
        Ok((report, good_len))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues `event` as the file's next record (its own id and chain link
    /// are given when its batch is written); [`AuditFile::durable`] makes it
    /// durable. Other processes may append to the same file (two `car run`s
    /// of one `$CAR_HOME`): each batch holds an exclusive `flock` and first
    /// folds in (and verifies) the records appended since this process's
    /// last one, so the chain stays one.
    pub fn record(&self, event: &Event) {
        let mut q = lock(&self.shared.queue);
        q.events.push(event.clone());
        let now = q.events.len() >= WAKE_AT;
        self.wake_writer(q, now);
    }

    /// A ticket resolving once every record queued so far is on disk: the
    /// file's writer thread writes them and makes one `fsync` for all the
    /// tickets waiting. When the last sync took under [`INLINE_SYNC`] and no
    /// batch is being written, this call writes and syncs everything queued
    /// itself (resolving the other tickets waiting too) and returns its
    /// ticket resolved.
    pub fn durable(&self) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.shared.inline_syncs()
            && let Ok(w) = self.shared.writer.try_lock()
        {
            let mut q = lock(&self.shared.queue);
            q.tickets.push(tx);
            drop(q);
            if let Err(e) = self.shared.flush_locked(w) {
                eprintln!("car: event file `{}`: sync failed: {e}", self.path.display());
            }
            return rx;
        }
        let mut q = lock(&self.shared.queue);
        q.tickets.push(tx);
        self.wake_writer(q, true);
        rx
    }

    /// Writes the records queued so far on the caller's thread, without
    /// syncing them, when no batch is being written (else nothing: that
    /// writer takes them). For a caller with nothing else to do, such as
    /// the daemon's connection while its client runs a tool: the proposal's
    /// [`AuditFile::durable`] then finds less to write. Returns whether it
    /// wrote.
    pub fn write_behind(&self) -> bool {
        // Under the writer, as every batch: a ticket queued meanwhile is
        // synced after this write.
        let Ok(mut w) = self.shared.writer.try_lock() else { return false };
        self.shared.write_queued(&mut w)
    }

    /// Starts the writer, or wakes it (`now`) when it waits.
    fn wake_writer(&self, mut q: std::sync::MutexGuard<'_, Queue>, now: bool) {
        if q.running {
            if now && q.idle {
                q.idle = false;
                self.shared.wake.notify_one();
            }
            return;
        }
        q.running = true;
        let s = self.shared.clone();
        if let Err(e) = std::thread::Builder::new().name("car-event-sync".into()).spawn(move || s.run()) {
            // No thread: write and sync here rather than not at all.
            q.running = false;
            drop(q);
            eprintln!("car: event file `{}`: no writer thread ({e}); writing inline", self.path.display());
            if let Err(e) = self.shared.flush() {
                eprintln!("car: event file `{}`: sync failed: {e}", self.path.display());
            }
        }
    }

    /// Writes every record queued so far and syncs the file to disk, on the
    /// caller's thread; reports an earlier write failure.
    pub fn sync(&self) -> Result<()> {
        let synced = self.shared.flush();
        if let Some(e) = &lock(&self.shared.writer).failed {
            return Err(io_err(&self.path, format!("an earlier write failed: {e}")));
        }
        synced.map_err(|e| io_err(&self.path, e))
    }
}

impl Drop for AuditFile {
    /// The records still queued are written (and synced) before the file
    /// goes.
    fn drop(&mut self) {
        if let Err(e) = self.shared.flush() {
            eprintln!("car: event file `{}`: sync failed: {e}", self.path.display());
        }
    }
}

/// Copies the complete, verified records of `path` to `out` as JSONL (a torn
/// last record is skipped and reported). Stops at the first record that
/// does not verify (the report names it).
pub fn export(path: &Path, out: &mut dyn Write) -> Result<FileReport> {
    let f = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    let mut werr: Option<std::io::Error> = None;
    let report = verify_reader(std::io::BufReader::new(f), |_, text| {
        if werr.is_none()
            && let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.write_all(b"\n"))
        {
            werr = Some(e);
        }
    })?;
    if let Some(e) = werr {
        return Err(Error::runtime("event_file_io_error", format!("cannot write the export: {e}")));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventData, EventKind};
    use std::sync::Arc;

    fn event(data: Value, proposal: Option<&str>, action: Option<&str>) -> Event {
        Event {
            id: 7,
            kind: EventKind::StateChanged,
            timestamp: crate::events::wall_now(),
            proposal_id: proposal.map(Arc::from),
            action_id: action.map(Arc::from),
            data: EventData::Value(Box::new(data)),
            chain: crate::events::ChainLink::boxed(Some("in-memory chain, not the file's".into()), Some("x".into())),
        }
    }

    /// The record written straight from the event, read back: the line is
    /// the record in its own order with the event's data, and its hash is
    /// the one verification computes.
    fn check(e: &Event, prev: Option<&str>) -> std::result::Result<(), proptest::test_runner::TestCaseError> {
        let mut buf = Vec::new();
        let hash = crate::canonical::hex_text(&write_record(&mut buf, &mut Scratch::default(), e, 42, prev).unwrap())
            .to_string();
        let line = std::str::from_utf8(&buf).unwrap();
        proptest::prop_assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        let Value::Object(rec) = serde_json::from_str::<Value>(line).unwrap() else { panic!("{line}") };
        let mut want = Map::new();
        want.insert("id".into(), Value::from(42));
        want.insert("kind".into(), Value::from(e.kind.as_str()));
        want.insert("timestamp".into(), serde_json::json!(e.timestamp));
        want.insert("proposal_id".into(), e.proposal_id.as_deref().map_or(Value::Null, Value::from));
        want.insert("action_id".into(), e.action_id.as_deref().map_or(Value::Null, Value::from));
        want.insert("data".into(), e.data.to_value());
        if let Some(p) = prev {
            want.insert("prev_hash".into(), Value::from(p));
        }
        want.insert("hash".into(), Value::from(hash.clone()));
        // The record's members in its own order; its data as the event's
        // (an object's members in any order, every number exact).
        proptest::prop_assert_eq!(rec.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        proptest::prop_assert_eq!(&rec, &want);
        proptest::prop_assert_eq!(record_hash(&rec), hash.clone());
        proptest::prop_assert_eq!(record_hash(&want), hash);
        Ok(())
    }

    #[test]
    fn records_written_directly_are_the_records_verification_reads() {
        let cases = [
            (
                serde_json::json!({"a": 1, "b": [1.5, -0.0, 1e21, 9007199254740993_u64, "é\u{1}\"\\/\u{2028}"]}),
                None,
                None,
            ),
            (serde_json::json!({}), Some("p-1"), Some("a\"1")),
            (serde_json::json!({"\u{e000}": {"z": null, "a": true}, "": 0.1}), Some("πρόταση"), None),
        ];
        for (data, p, a) in cases {
            let e = event(data, p, a);
            check(&e, None).unwrap();
            check(&e, Some("00ff")).unwrap();
        }
    }

    /// A file under a fresh directory of the system's temporary one, its
    /// inline threshold set to `inline_below`.
    fn open_temp(name: &str, inline_below: Duration) -> (AuditFile, PathBuf) {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("car-file-{name}-{}-{stamp}", std::process::id()));
        let (mut file, _) = AuditFile::open(dir.join(EVENTS_FILE)).unwrap();
        Arc::get_mut(&mut file.shared).expect("the only handle").inline_below = inline_below;
        (file, dir)
    }

    #[test]
    fn a_sync_is_made_inline_only_once_one_was_measured_quicker_than_the_threshold() {
        let (file, dir) = open_temp("decide", Duration::from_micros(100));
        let s = &file.shared;
        // Nothing measured yet: the thread syncs (and measures).
        assert!(!s.inline_syncs());
        for (ns, inline) in [(0, true), (99_999, true), (100_000, false), (5_000_000, false), (UNMEASURED - 1, false)] {
            s.last_sync_ns.store(ns, Ordering::Relaxed);
            assert_eq!(s.inline_syncs(), inline, "last sync {ns} ns");
        }
        drop(file);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_writer_threads_sync_is_measured() {
        let (file, dir) = open_temp("measure", Duration::MAX);
        assert_eq!(file.shared.last_sync_ns.load(Ordering::Relaxed), UNMEASURED);
        // The first ticket goes to the thread, which measures its sync.
        file.record(&event(serde_json::json!({"n": 0}), Some("p"), None));
        file.durable().blocking_recv().unwrap();
        assert!(file.shared.inline_syncs());
        drop(file);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn after_a_quick_sync_the_caller_writes_and_syncs_and_its_ticket_is_resolved_on_return() {
        let (file, dir) = open_temp("inline", Duration::MAX);
        let path = dir.join(EVENTS_FILE);
        file.shared.last_sync_ns.store(0, Ordering::Relaxed);
        // No writer thread may take a batch between a record and its
        // ticket here: `record` finds one "running" and starts none.
        lock(&file.shared.queue).running = true;
        for n in 1..=20 {
            file.record(&event(serde_json::json!({"n": n}), Some("p"), Some("a")));
            file.record(&event(serde_json::json!({"n": n, "second": true}), Some("p"), Some("a")));
            let mut ticket = file.durable();
            // Resolved before `durable` returned, and its records are in the
            // file, chained.
            assert_eq!(ticket.try_recv(), Ok(()), "ticket {n}");
            let r = verify_file(&path).unwrap();
            assert!(r.intact(), "{r:?}");
            assert_eq!(r.records, 2 * n);
        }
        lock(&file.shared.queue).running = false;
        drop(file);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_caller_finding_a_batch_being_written_leaves_its_ticket_to_the_thread() {
        let (file, dir) = open_temp("busy", Duration::MAX);
        file.shared.last_sync_ns.store(0, Ordering::Relaxed);
        file.record(&event(serde_json::json!({"n": 1}), None, None));
        let ticket = {
            let _writing = lock(&file.shared.writer);
            let mut t = file.durable();
            // Not written inline: the writer was held.
            assert_eq!(t.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Empty));
            t
        };
        ticket.blocking_recv().unwrap();
        let r = verify_file(&dir.join(EVENTS_FILE)).unwrap();
        assert!(r.intact() && r.records == 1, "{r:?}");
        drop(file);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn written_behind_records_are_in_the_file_before_their_ticket_and_the_chain_continues() {
        let (file, dir) = open_temp("behind", Duration::MAX);
        let path = dir.join(EVENTS_FILE);
        file.shared.last_sync_ns.store(0, Ordering::Relaxed);
        // No writer thread takes a batch here (as above).
        lock(&file.shared.queue).running = true;
        // Nothing queued: nothing written.
        assert!(!file.write_behind());
        for n in 1..=5 {
            file.record(&event(serde_json::json!({"n": n}), Some("p"), Some("a")));
            file.record(&event(serde_json::json!({"n": n, "second": true}), Some("p"), Some("a")));
            assert!(file.write_behind(), "round {n}");
            // On file (unsynced), chained, and the queue is empty.
            let r = verify_file(&path).unwrap();
            assert!(r.intact() && r.records == 4 * n - 2, "{r:?}");
            assert!(lock(&file.shared.queue).events.is_empty());
            // A batch being written takes the queue: write-behind leaves it.
            file.record(&event(serde_json::json!({"n": n, "third": true}), Some("p"), None));
            {
                let _writing = lock(&file.shared.writer);
                assert!(!file.write_behind());
            }
            // The proposal's durable point writes what is left and syncs.
            file.record(&event(serde_json::json!({"n": n, "last": true}), Some("p"), None));
            assert_eq!(file.durable().try_recv(), Ok(()));
            let r = verify_file(&path).unwrap();
            assert!(r.intact() && r.records == 4 * n, "{r:?}");
        }
        lock(&file.shared.queue).running = false;
        drop(file);
        let _ = std::fs::remove_dir_all(dir);
    }

    proptest::proptest! {
        #[test]
        fn generated_records_verify(data in crate::canonical::tests::any_json(), ids in proptest::option::of("\\PC{0,6}")) {
            let e = event(data, ids.as_deref(), ids.as_deref());
            check(&e, Some("ab12"))?;
        }
    }
}
