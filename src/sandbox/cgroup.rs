//! The process-limit cgroup of a run.
//!
//! Moving a process into a cgroup (a write to `cgroup.procs` or `tasks`)
//! takes the kernel's global `cgroup_threadgroup_rwsem` for writing, which
//! waits for an RCU grace period: 1-2 ms on an idle machine, 10 ms and more
//! under load. A fork, in contrast, starts the child in the cgroup of the
//! thread that forked, with no migration at all. So on cgroup v1 (where a
//! thread can sit in a cgroup of its own) each run borrows a *slot*: a
//! cgroup kept for reuse with one thread of this process parked in it; the
//! command is spawned from that thread and starts inside, limited by the
//! slot's `pids.max` (the limit plus one, for the parked thread). A slot is
//! handed back only once every process of the run has been killed and the
//! cgroup holds nothing but its own thread; the slots of a process that has
//! gone are removed by the next one that makes slots under the same parent.
//!
//! On cgroup v2 (threads cannot leave their process's cgroup there) a run
//! makes a cgroup of its own, which the child joins before `exec`.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

/// The pids cgroup this process may create children of: cgroup v1's
/// `pids` hierarchy, else v2 when `pids` is in the cgroup's
/// `cgroup.subtree_control`. Tried by creating (and removing) a child.
pub(crate) fn pids_cgroup_parent() -> Result<PathBuf, String> {
    let text =
        std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let mut candidates = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrl, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let rel = path.trim_start_matches('/');
        if ctrl.split(',').any(|c| c == "pids") {
            candidates.push(Path::new("/sys/fs/cgroup/pids").join(rel));
        } else if ctrl.is_empty() {
            let d = Path::new("/sys/fs/cgroup").join(rel);
            let sub = std::fs::read_to_string(d.join("cgroup.subtree_control")).unwrap_or_default();
            if sub.split_whitespace().any(|c| c == "pids") {
                candidates.push(d);
            }
        }
    }
    if candidates.is_empty() {
        return Err("no pids cgroup controller is available to this process (cgroup v1 `pids`, or v2 with `pids` in cgroup.subtree_control)".into());
    }
    let mut why = Vec::new();
    for d in candidates {
        let test = d.join(format!("car-sandbox-probe-{}", uuid::Uuid::new_v4()));
        match std::fs::create_dir(&test) {
            Ok(()) => {
                let ok = test.join("pids.max").exists();
                let _ = std::fs::remove_dir(&test);
                if ok {
                    return Ok(d);
                }
                why.push(format!("{}: a child cgroup has no pids.max", d.display()));
            }
            Err(e) => why.push(format!("cannot create a child cgroup under {}: {e}", d.display())),
        }
    }
    Err(why.join("; "))
}

fn spawn_err(what: &str, p: &Path, e: impl std::fmt::Display) -> String {
    format!("{what} `{}`: {e}", p.display())
}

/// The `max` count of `pids.events`: how many forks the limit refused.
fn refused_forks(dir: &Path) -> u64 {
    let ev = std::fs::read_to_string(dir.join("pids.events")).unwrap_or_default();
    ev.lines().find_map(|l| l.strip_prefix("max ").and_then(|n| n.trim().parse().ok())).unwrap_or(0)
}

/// A job for a slot's thread: spawn this command from there.
type Job = (Command, mpsc::Sender<std::io::Result<Child>>);

/// A reusable cgroup with a thread of ours parked in it (cgroup v1).
pub(crate) struct Slot {
    dir: PathBuf,
    /// The parked thread's id (never killed with the run's processes).
    tid: i32,
    jobs: mpsc::Sender<Job>,
}

static FREE: Mutex<Vec<Slot>> = Mutex::new(Vec::new());
static NEXT: Mutex<u64> = Mutex::new(0);

/// Where this process keeps its slots: `<parent>/car-sandbox-<pid>`, made
/// once (removing the slot directories of processes that are gone).
fn slots_dir(parent: &Path) -> Result<PathBuf, String> {
    static DIR: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        if let Ok(rd) = std::fs::read_dir(parent) {
            for e in rd.flatten() {
                let name = e.file_name();
                let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("car-sandbox-pid-")) else { continue };
                if pid.parse::<u32>().is_err() || Path::new("/proc").join(pid).exists() {
                    continue;
                }
                if let Ok(slots) = std::fs::read_dir(e.path()) {
                    for s in slots.flatten() {
                        if s.path().is_dir() {
                            let _ = std::fs::remove_dir(s.path());
                        }
                    }
                }
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let d = parent.join(format!("car-sandbox-pid-{}", std::process::id()));
        match std::fs::create_dir(&d) {
            Ok(()) => Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(d),
            Err(e) => Err(spawn_err("cannot create the cgroup", &d, e)),
        }
    })
    .clone()
}

fn new_slot(parent: &Path) -> Result<Slot, String> {
    let base = slots_dir(parent)?;
    let n = {
        let mut g = NEXT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *g += 1;
        *g
    };
    let dir = base.join(n.to_string());
    std::fs::create_dir(&dir).map_err(|e| spawn_err("cannot create the cgroup", &dir, e))?;
    let (jobs, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready) = mpsc::channel::<Result<i32, String>>();
    let tasks = dir.join("tasks");
    let spawned = std::thread::Builder::new().name("car-sandbox-slot".into()).spawn(move || {
        // Writing 0 to a v1 `tasks` file moves the writing thread only.
        let joined = std::fs::write(&tasks, "0")
            .map_err(|e| spawn_err("cannot move the spawning thread into the cgroup", &tasks, e))
            .and_then(|()| {
                let me = std::fs::read_link("/proc/thread-self")
                    .map_err(|e| format!("cannot read /proc/thread-self: {e}"))?;
                me.file_name()
                    .and_then(|t| t.to_str())
                    .and_then(|t| t.parse::<i32>().ok())
                    .ok_or_else(|| format!("cannot tell this thread's id from `{}`", me.display()))
            });
        let ok = joined.is_ok();
        let _ = ready_tx.send(joined);
        if !ok {
            return;
        }
        for (mut cmd, reply) in rx {
            let _ = reply.send(cmd.spawn());
        }
    });
    if let Err(e) = spawned {
        let _ = std::fs::remove_dir(&dir);
        return Err(format!("cannot start the thread of cgroup `{}`: {e}", dir.display()));
    }
    match ready.recv() {
        Ok(Ok(tid)) => Ok(Slot { dir, tid, jobs }),
        Ok(Err(e)) => {
            let _ = std::fs::remove_dir(&dir);
            Err(e)
        }
        Err(_) => {
            let _ = std::fs::remove_dir(&dir);
            Err(format!("the thread of cgroup `{}` ended", dir.display()))
        }
    }
}

/// A run's cgroup.
pub(crate) enum RunCgroup {
    /// A borrowed slot (v1); `refused` is its `pids.events` count at the start.
    Slot { slot: Option<Slot>, refused: u64 },
    /// A cgroup of the run's own (v2), removed at the end; the child joins it.
    Own(PathBuf),
}

impl RunCgroup {
    /// The cgroup for a run limited to `processes` under `parent`.
    pub(crate) fn new(parent: &Path, processes: u64) -> Result<RunCgroup, String> {
        if parent.join("tasks").exists() {
            let popped = FREE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
            let slot = match popped {
                Some(s) => s,
                None => new_slot(parent)?,
            };
            // The parked thread is one of the cgroup's tasks.
            let max = slot.dir.join("pids.max");
            std::fs::write(&max, processes.saturating_add(1).to_string())
                .map_err(|e| spawn_err("cannot set", &max, e))?;
            let refused = refused_forks(&slot.dir);
            return Ok(RunCgroup::Slot { slot: Some(slot), refused });
        }
        let cg = parent.join(format!("car-sandbox-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&cg).map_err(|e| spawn_err("cannot create the cgroup", &cg, e))?;
        let own = RunCgroup::Own(cg.clone());
        std::fs::write(cg.join("pids.max"), processes.to_string())
            .map_err(|e| spawn_err("cannot set pids.max of", &cg, e))?;
        Ok(own)
    }

    /// The `cgroup.procs` the child writes itself into before `exec`, when
    /// it must join (v2).
    pub(crate) fn join_path(&self) -> Result<Option<CString>, String> {
        match self {
            RunCgroup::Slot { .. } => Ok(None),
            RunCgroup::Own(d) => CString::new(d.join("cgroup.procs").as_os_str().as_encoded_bytes())
                .map(Some)
                .map_err(|_| format!("cgroup path `{}` contains a NUL byte", d.display())),
        }
    }

    /// Spawns `cmd`, from the slot's thread when there is one.
    pub(crate) fn spawn(&self, mut cmd: Command) -> std::io::Result<Child> {
        let RunCgroup::Slot { slot: Some(s), .. } = self else { return cmd.spawn() };
        let (tx, rx) = mpsc::channel();
        let gone = || std::io::Error::other(format!("the spawning thread of cgroup `{}` is gone", s.dir.display()));
        s.jobs.send((cmd, tx)).map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())?
    }

    fn dir(&self) -> Option<&Path> {
        match self {
            RunCgroup::Slot { slot, .. } => slot.as_ref().map(|s| s.dir.as_path()),
            RunCgroup::Own(d) => Some(d),
        }
    }

    /// Kills every process in the cgroup (a `setsid` escapee too) and waits
    /// until it is empty (but for the parked thread); whether it is.
    pub(crate) fn kill_all(&self) -> bool {
        let Some(dir) = self.dir() else { return true };
        let ours = match self {
            RunCgroup::Slot { slot: Some(s), .. } => Some(s.tid),
            _ => None,
        };
        // v1 slots list threads (`tasks`, where ours is); v2 processes.
        let list = if ours.is_some() { dir.join("tasks") } else { dir.join("cgroup.procs") };
        for _ in 0..200 {
            let text = std::fs::read_to_string(&list).unwrap_or_default();
            let ids: Vec<i32> = text
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .filter(|&t| Some(t) != ours && !Path::new("/proc/self/task").join(t.to_string()).exists())
                .collect();
            if ids.is_empty() {
                return true;
            }
            for p in ids {
                // A thread id names its whole process to kill(2).
                if let Some(pid) = rustix::process::Pid::from_raw(p) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// Whether the process limit refused a fork during the run.
    pub(crate) fn limit_hit(&self) -> bool {
        match self {
            RunCgroup::Slot { slot: Some(s), refused } => refused_forks(&s.dir) > *refused,
            RunCgroup::Slot { slot: None, .. } => false,
            RunCgroup::Own(d) => refused_forks(d) > 0,
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        let empty = self.kill_all();
        match self {
            RunCgroup::Slot { slot, .. } => {
                // A slot with a process left in it is not reused (its thread
                // ends when the sender is dropped; the directory stays until
                // the process is gone).
                if let Some(s) = slot.take()
                    && empty
                {
                    FREE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(s);
                }
            }
            RunCgroup::Own(d) => {
                for _ in 0..200 {
                    if std::fs::remove_dir(&*d).is_ok() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}
