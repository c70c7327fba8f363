//! The runtime's own files in a run's root, held so they can be mounted
//! read-only in the run's mount namespace, including those that do not
//! exist yet.
//!
//! A bind mount needs something to mount on, and Landlock cannot refuse one
//! name inside a writable directory. So a protected name that is absent
//! (`.car/`, `approvals.jsonl`, `tier-approvals.jsonl`) gets a placeholder
//! (an empty directory or an empty file, mode 0700 / 0600) for the run,
//! which the child mounts read-only over itself: it can then neither write
//! it, nor remove, rename or replace it (a mount point is busy).
//!
//! A placeholder is shared by every run that needs it and removed only by
//! the run that made it, after the last of them, and only when it is still
//! the same empty inode. Across processes the runs hold a shared `flock`
//! on it and the remover needs an exclusive one (without waiting), so a run
//! of another runtime whose mount a removal would detach keeps it in place;
//! a run that finds a placeholder already there takes its lock and then
//! checks that the name still leads to the inode it locked. A placeholder
//! whose maker could not remove it (another process still held it) stays,
//! empty.
//!
//! A placeholder no run holds lingers for [`LINGER`] before it is removed
//! (by a thread that waits for that), so back-to-back runs do not create
//! and remove the same files each time: on a loaded disk that was a
//! millisecond of every run. A process that exits inside that window leaves
//! its placeholders behind, empty.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::FlockOperation;

/// How long a placeholder no run holds is kept for the next run.
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_millis(500);

struct Entry {
    users: usize,
    /// When the last run holding it ended (`users` is 0).
    idle_since: Option<std::time::Instant>,
    made: bool,
    dir: bool,
    /// Holds the shared lock for this process's runs.
    file: File,
    id: (u64, u64),
}

static HELD: Mutex<Option<HashMap<PathBuf, Entry>>> = Mutex::new(None);
/// Woken when a placeholder becomes idle.
static IDLE: std::sync::Condvar = std::sync::Condvar::new();

/// Removes `e`, the entry of `p`, when it is a placeholder we made that no
/// other process holds and is still the same empty inode.
fn remove_placeholder(p: &Path, e: Entry) {
    if !e.made || rustix::fs::flock(&e.file, FlockOperation::NonBlockingLockExclusive).is_err() {
        return;
    }
    if !std::fs::symlink_metadata(p).is_ok_and(|m| id_of(&m) == e.id) {
        return;
    }
    if e.dir {
        // Fails unless empty.
        let _ = std::fs::remove_dir(p);
    } else if e.file.metadata().is_ok_and(|m| m.len() == 0) {
        let _ = std::fs::remove_file(p);
    }
    // The lock goes with the descriptor, after the name.
    drop(e.file);
}

/// The thread that removes placeholders idle for [`LINGER`].
fn reaper() {
    let mut g = HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let now = std::time::Instant::now();
        let map = g.get_or_insert_with(HashMap::new);
        let due: Vec<PathBuf> = map
            .iter()
            .filter(|(_, e)| e.idle_since.is_some_and(|t| now.duration_since(t) >= LINGER))
            .map(|(p, _)| p.clone())
            .collect();
        for p in due {
            if let Some(e) = map.remove(&p) {
                remove_placeholder(&p, e);
            }
        }
        let next = map.values().filter_map(|e| e.idle_since).min();
        g = match next {
            Some(t) => {
                IDLE.wait_timeout(g, (t + LINGER).saturating_duration_since(now)).unwrap_or_else(|e| e.into_inner()).0
            }
            None => IDLE.wait(g).unwrap_or_else(std::sync::PoisonError::into_inner),
        };
    }
}

fn id_of(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

fn open_existing(path: &Path) -> std::io::Result<File> {
    // Following a symlink, as the bind mount does.
    File::open(path)
}

fn make(path: &Path, dir: bool) -> std::io::Result<File> {
    if dir {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(path)?;
        File::open(path)
    } else {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)
    }
}

/// The protected paths of one run; released (placeholders removed when the
/// last run holding them ends) on drop.
#[derive(Default)]
pub(crate) struct Protected {
    paths: Vec<PathBuf>,
}

impl Protected {
    /// Holds `path` (a directory when `dir`), making a placeholder when it
    /// does not exist.
    pub(crate) fn hold(&mut self, path: &Path, dir: bool) -> Result<(), String> {
        let mut g = HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let map = g.get_or_insert_with(HashMap::new);
        if let Some(e) = map.get_mut(path) {
            // An idle one is taken again only if the name still leads to it.
            if e.users > 0 || std::fs::metadata(path).is_ok_and(|m| id_of(&m) == e.id) {
                e.users += 1;
                e.idle_since = None;
                self.paths.push(path.to_path_buf());
                return Ok(());
            }
            map.remove(path);
        }
        let what = |e: &dyn std::fmt::Display| format!("cannot hold `{}` to protect it: {e}", path.display());
        for _ in 0..20 {
            let (file, made) = match make(path, dir) {
                Ok(f) => (f, true),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match open_existing(path) {
                    Ok(f) => (f, false),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(what(&e)),
                },
                Err(e) => return Err(what(&e)),
            };
            rustix::fs::flock(&file, FlockOperation::LockShared).map_err(|e| what(&e))?;
            let locked = file.metadata().map_err(|e| what(&e))?;
            // Removed (by another process's last run) between our open and
            // our lock: start again.
            match std::fs::metadata(path) {
                Ok(now) if id_of(&now) == id_of(&locked) => {
                    map.insert(
                        path.to_path_buf(),
                        Entry { users: 1, idle_since: None, made, dir: locked.is_dir(), file, id: id_of(&locked) },
                    );
                    self.paths.push(path.to_path_buf());
                    return Ok(());
                }
                Ok(_) | Err(_) => continue,
            }
        }
        Err(what(&"it kept being replaced"))
    }
}

impl Drop for Protected {
    fn drop(&mut self) {
        static REAPER: std::sync::Once = std::sync::Once::new();
        let mut g = HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(map) = g.as_mut() else { return };
        let mut idle = false;
        for p in self.paths.drain(..) {
            let Some(e) = map.get_mut(&p) else { continue };
            e.users -= 1;
            if e.users > 0 {
                continue;
            }
            if e.made {
                e.idle_since = Some(std::time::Instant::now());
                idle = true;
            } else {
                // Not ours to remove: just let go of it.
                map.remove(&p);
            }
        }
        drop(g);
        if idle {
            REAPER.call_once(|| {
                let _ = std::thread::Builder::new().name("car-sandbox-placeholders".into()).spawn(reaper);
            });
            IDLE.notify_all();
        }
    }
}

/// Removes now every placeholder this process made that no run holds (a
/// process about to exit: the reaper's [`LINGER`] would outlive it and
/// leave the empty files behind in the run's root).
pub fn release_idle_placeholders() {
    let mut g = HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(map) = g.as_mut() else { return };
    let idle: Vec<PathBuf> = map.iter().filter(|(_, e)| e.users == 0 && e.made).map(|(p, _)| p.clone()).collect();
    for p in idle {
        if let Some(e) = map.remove(&p) {
            remove_placeholder(&p, e);
        }
    }
}

/// Opens one of the runtime's append-only files (`approvals.jsonl`, the
/// tier ledger) for appending, creating it when absent, with a shared
/// `flock` held until the file is closed: a sandbox run's empty placeholder
/// of that name is then never removed under a record being written (the
/// remover needs the exclusive lock), and a placeholder removed between
/// the open and the lock is noticed (the name no longer leads to the inode
/// locked) and the file opened again.
pub fn open_append_locked(path: &Path) -> std::io::Result<File> {
    for _ in 0..20 {
        let f = std::fs::OpenOptions::new().create(true).read(true).append(true).open(path)?;
        rustix::fs::flock(&f, FlockOperation::LockShared)?;
        let locked = f.metadata()?;
        match std::fs::metadata(path) {
            Ok(now) if id_of(&now) == id_of(&locked) => return Ok(f),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!("`{}` kept being replaced while it was opened", path.display())))
}
