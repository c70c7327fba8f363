//! Running one command: under a profile (Landlock, namespaces, rlimits, a
//! pids cgroup, a scrubbed environment) or unconfined (`none`), always in a
//! process group of its own that is killed when the run ends.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

use super::{Filesystem, Network, Profile};

/// What to run.
#[derive(Debug, Clone)]
pub struct RunSpec<'a> {
    /// The program and its arguments (never a shell string built from input).
    pub argv: &'a [String],
    /// The working directory: the root the profile's writes are confined to.
    pub root: &'a Path,
    /// The profile; `None` runs unconfined (the operator's `sandbox = "none"`).
    pub profile: Option<&'a Profile>,
    /// The call's own timeout, if any (the profile's bounds it).
    pub timeout: Option<Duration>,
    /// Most bytes of stdout and of stderr kept.
    pub max_output: usize,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The exit status, when the command exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Its stdout (capped).
    pub stdout: String,
    /// Its stderr (capped).
    pub stderr: String,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// The timeout that applied, in milliseconds.
    pub timeout_ms: u64,
    /// The limit it hit (`cpu`, `file_size`, `processes`), when known.
    pub limit: Option<&'static str>,
    /// The command exited but left processes holding its output until the
    /// timeout; they were killed.
    pub background_killed: bool,
    /// Connections carried to the host's loopback (`loopback_ports`).
    pub forwarded_connections: usize,
}

/// Why a command did not run.
#[derive(Debug, Clone, PartialEq)]
pub enum RunError {
    /// The profile cannot be enforced here; the message names what is missing.
    Unavailable(String),
    /// The command could not be started (or a sandbox step failed in the child).
    Spawn(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Unavailable(m) | RunError::Spawn(m) => f.write_str(m),
        }
    }
}

/// A spawn error, naming the sandbox step that failed when one did.
pub(crate) fn spawn_error(e: &std::io::Error) -> String {
    match car_sandbox_child::failed_step(e) {
        Some((step, errno)) => format!("{step} failed in the child: {errno}"),
        None => e.to_string(),
    }
}

fn abi_of(n: i32) -> ABI {
    ABI::from(n.min(5))
}

/// The Landlock ruleset of `profile`, built (hard requirements: a right the
/// kernel lacks fails here, naming it) but not applied. `writable` are the
/// directories writes are allowed under; `readable` are added to a profile
/// that reads only listed paths.
pub(crate) fn landlock_ruleset(
    abi: i32,
    profile: &Profile,
    writable: &[PathBuf],
    readable: Option<&[PathBuf]>,
) -> Result<Option<OwnedFd>, String> {
    let le = |what: &str, e: &dyn std::fmt::Display| format!("Landlock: {what}: {e}");
    let fs_abi = abi_of(abi);
    let mut rs = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    let mut handled_any = false;
    if profile.filesystem != Filesystem::Open {
        rs = rs.handle_access(AccessFs::from_all(fs_abi)).map_err(|e| le("filesystem rights", &e))?;
        handled_any = true;
    }
    if profile.network == Network::Off && abi >= 4 {
        rs = rs.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp).map_err(|e| le("TCP rights", &e))?;
        handled_any = true;
    }
    if abi >= 6 {
        rs = rs.scope(Scope::AbstractUnixSocket | Scope::Signal).map_err(|e| le("scopes", &e))?;
        handled_any = true;
    }
    if !handled_any {
        return Ok(None);
    }
    let mut c = rs.create().map_err(|e| le("creating the ruleset", &e))?;
    if profile.filesystem != Filesystem::Open {
        let read = AccessFs::from_read(fs_abi);
        let all = AccessFs::from_all(fs_abi);
        let add = |c: landlock::RulesetCreated, p: &Path, access| -> Result<landlock::RulesetCreated, String> {
            let fd = PathFd::new(p).map_err(|e| le(&format!("opening `{}`", p.display()), &e))?;
            c.add_rule(PathBeneath::new(fd, access)).map_err(|e| le(&format!("rule for `{}`", p.display()), &e))
        };
        match &profile.read {
            None => c = add(c, Path::new("/"), read)?,
            Some(list) => {
                for p in list.iter().chain(readable.unwrap_or(&[])) {
                    if p.exists() {
                        c = add(c, p, read)?;
                    }
                }
            }
        }
        for p in writable {
            c = add(c, p, all)?;
        }
        // The null and zero devices, written by redirections everywhere.
        for dev in ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"] {
            if Path::new(dev).exists() {
                c = add(c, Path::new(dev), AccessFs::from_file(fs_abi))?;
            }
        }
    }
    Ok(c.into())
}

/// The directory the private temp directories are mounted on: made once
/// per process (`$TMPDIR/car-sandbox-tmp-<pid>`, mode 0700, empty on the
/// host), after removing those of processes that are gone.
pub(crate) fn tmp_mountpoint() -> Result<PathBuf, String> {
    static DIR: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::temp_dir();
        if let Ok(rd) = std::fs::read_dir(&base) {
            for e in rd.flatten() {
                let name = e.file_name();
                let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("car-sandbox-tmp-")) else { continue };
                if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
        let d = base.join(format!("car-sandbox-tmp-{}", std::process::id()));
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // A directory left by an earlier process with our pid: ours
                // only if it is a plain directory we own.
                use std::os::unix::fs::MetadataExt;
                let m = std::fs::symlink_metadata(&d).map_err(|e| format!("`{}`: {e}", d.display()))?;
                if !m.is_dir() || m.uid() != rustix::process::geteuid().as_raw() {
                    return Err(format!("`{}` exists and is not a directory of this user", d.display()));
                }
                std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                    .map_err(|e| format!("`{}`: {e}", d.display()))?;
            }
            Err(e) => {
                return Err(format!("cannot create the private temp directory's mount point `{}`: {e}", d.display()));
            }
        }
        d.canonicalize().map_err(|e| format!("cannot resolve `{}`: {e}", d.display()))
    })
    .clone()
}

fn cstring(p: &Path) -> Result<CString, RunError> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| RunError::Spawn(format!("path `{}` contains a NUL byte", p.display())))
}

/// What a run set up and must undo.
struct Cleanup {
    cgroup: Option<super::cgroup::RunCgroup>,
    protected: Option<super::protect::Protected>,
    /// The runtime's end of the channel the forwarded listeners come over.
    forward_channel: Option<OwnedFd>,
    forwarder: Option<super::forward::Forwarder>,
}

impl Cleanup {
    fn kill_cgroup(&self) {
        if let Some(cg) = &self.cgroup {
            cg.kill_all();
        }
    }

    fn processes_limit_hit(&self) -> bool {
        self.cgroup.as_ref().is_some_and(|c| c.limit_hit())
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        // The cgroup first: no process of the run is left when the rest goes.
        drop(self.cgroup.take());
        drop(self.forwarder.take());
        // Then the protected names (a placeholder made for the run goes
        // when no run needs it any more).
        drop(self.protected.take());
    }
}

fn confine(cmd: &mut Command, spec: &RunSpec<'_>, profile: &Profile, cleanup: &mut Cleanup) -> Result<(), RunError> {
    let probe = super::probe();
    let missing = probe.missing(profile);
    if !missing.is_empty() {
        return Err(RunError::Unavailable(format!(
            "sandbox profile `{}` cannot be enforced on this machine: missing {}; the operator can run this tool unconfined with sandbox = \"none\"",
            profile.name,
            missing.join("; ")
        )));
    }
    let root = spec
        .root
        .canonicalize()
        .map_err(|e| RunError::Spawn(format!("cannot resolve the root `{}`: {e}", spec.root.display())))?;
    // Each run mounts a tmpfs of its own on this directory, in its own
    // mount namespace: private, and gone when the run's last process is.
    let tmp = tmp_mountpoint().map_err(RunError::Spawn)?;
    let mut tmp_opts = "mode=0700".to_string();
    if let Some(m) = profile.limits.memory_bytes {
        tmp_opts.push_str(&format!(",size={m}"));
    }
    let tmpfs = Some((cstring(&tmp)?, CString::new(tmp_opts).map_err(|e| RunError::Spawn(e.to_string()))?));

    // The runtime's own files, read-only in the child's mount namespace;
    // those that do not exist yet get a placeholder for the run.
    let mut readonly = Vec::new();
    let mut held = super::protect::Protected::default();
    let config_dir = root.join(crate::tools::CONFIG_DIR);
    held.hold(&config_dir, true).map_err(RunError::Spawn)?;
    readonly.push(cstring(&config_dir)?);
    for name in crate::tools::PROTECTED_FILE_NAMES {
        let f = root.join(name);
        held.hold(&f, false).map_err(RunError::Spawn)?;
        readonly.push(cstring(&f)?);
    }
    cleanup.protected = Some(held);

    let mut writable = Vec::new();
    if profile.filesystem == Filesystem::WorkspaceWrite {
        writable.push(root.clone());
    }
    writable.extend(profile.write.iter().cloned());
    let readable = [root.clone()];
    let landlock =
        landlock_ruleset(probe.landlock_abi, profile, &writable, Some(&readable)).map_err(RunError::Unavailable)?;

    let l = profile.limits;
    let mut rlimits = Vec::new();
    for (res, v) in [
        (libc::RLIMIT_CPU, l.cpu_seconds),
        (libc::RLIMIT_AS, l.memory_bytes),
        (libc::RLIMIT_FSIZE, l.file_size_bytes),
        (libc::RLIMIT_NOFILE, l.open_files),
    ] {
        if let Some(v) = v {
            rlimits.push((res as i32, v));
        }
    }
    let mut cgroup_procs = None;
    if let Some(n) = l.processes {
        if !probe.root {
            rlimits.push((libc::RLIMIT_NPROC as i32, n));
        }
        if let Ok(parent) = &probe.pids_cgroup {
            let cg = super::cgroup::RunCgroup::new(parent, n).map_err(RunError::Spawn)?;
            cgroup_procs = cg.join_path().map_err(RunError::Spawn)?;
            cleanup.cgroup = Some(cg);
        }
    }
    let mut forward_socket = None;
    if profile.network == Network::Loopback && !profile.loopback_ports.is_empty() {
        let (ours, theirs) = car_sandbox_child::forward_channel()
            .map_err(|e| RunError::Spawn(format!("cannot create the loopback forwarding channel: {e}")))?;
        cleanup.forward_channel = Some(ours);
        forward_socket = Some(theirs);
    }
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    car_sandbox_child::install(
        cmd,
        car_sandbox_child::Setup {
            cgroup_procs,
            rlimits,
            user_ns: true,
            net_ns: profile.network != Network::On,
            loopback_up: profile.network == Network::Loopback,
            forward_ports: if forward_socket.is_some() { profile.loopback_ports.clone() } else { Vec::new() },
            forward_socket,
            uid_map: CString::new(format!("{uid} {uid} 1")).ok(),
            gid_map: CString::new(format!("{gid} {gid} 1")).ok(),
            readonly_paths: readonly,
            tmpfs,
            tmpfs_access: if profile.filesystem == Filesystem::Open {
                0
            } else {
                AccessFs::from_all(abi_of(probe.landlock_abi)).bits()
            },
            landlock,
        },
    );
    cmd.env_clear();
    for k in &profile.env {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    for k in ["TMPDIR", "TMP", "TEMP"] {
        cmd.env(k, &tmp);
    }
    Ok(())
}

/// How long readers get after the process group is killed to hand over
/// what is still in the pipes.
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// Runs `spec.argv` (see the module docs) and waits for it, at most until
/// the timeout: the smaller of the call's and the profile's. When the
/// command exits, or at the deadline, whatever is left of its process group
/// (and of its cgroup) is killed: a run's processes do not outlive it.
pub fn run(spec: &RunSpec<'_>) -> Result<Outcome, RunError> {
    let Some(program) = spec.argv.first() else {
        return Err(RunError::Spawn("empty command".into()));
    };
    let bound = spec.profile.map(|p| p.timeout);
    let timeout = match (spec.timeout, bound) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) => a,
        (None, Some(b)) => b,
        (None, None) => Duration::from_millis(super::DEFAULT_TIMEOUT_MS),
    }
    .max(Duration::from_millis(1));
    let mut cmd = Command::new(program);
    cmd.args(&spec.argv[1..]).current_dir(spec.root).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut cleanup = Cleanup { cgroup: None, protected: None, forward_channel: None, forwarder: None };
    if let Some(p) = spec.profile {
        confine(&mut cmd, spec, p, &mut cleanup)?;
    }
    let start = Instant::now();
    let deadline = start + timeout;
    let spawned = match &cleanup.cgroup {
        Some(cg) => cg.spawn(cmd),
        None => cmd.spawn(),
    };
    let mut child = spawned.map_err(|e| RunError::Spawn(format!("cannot start `{program}`: {}", spawn_error(&e))))?;
    if let (Some(ch), Some(p)) = (cleanup.forward_channel.take(), spec.profile) {
        // The child listened before `exec`, so the listeners are there.
        match super::forward::receive(&ch, p.loopback_ports.len()) {
            Ok(ls) => cleanup.forwarder = Some(super::forward::Forwarder::start(ls, &p.loopback_ports)),
            Err(m) => {
                let _ = kill_run(&mut child, &cleanup);
                return Err(RunError::Spawn(m));
            }
        }
    }
    let mut out = Output::new(child.stdout.take(), child.stderr.take(), spec.max_output);
    let pid = rustix::process::Pid::from_child(&child);
    // One thread waits on the child's exit (a pidfd) and its two pipes with
    // poll(2): no reader threads, no sleeping between checks.
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok();
    let (exited, background) = out.wait(pid, pidfd.as_ref(), deadline);
    let status =
        kill_run(&mut child, &cleanup).map_err(|e| RunError::Spawn(format!("cannot wait for the command: {e}")))?;
    let forwarded_connections = cleanup.forwarder.as_ref().map_or(0, |f| f.connections());
    // Stops accepting and closes every carried connection.
    drop(cleanup.forwarder.take());
    let (stdout, stderr) = out.finish(Instant::now() + DRAIN_GRACE);
    use std::os::unix::process::ExitStatusExt;
    let (code, signal) = if exited { (status.code(), status.signal()) } else { (None, None) };
    let limits = spec.profile.map(|p| p.limits).unwrap_or_default();
    let limit = match signal {
        Some(s) if s == libc::SIGXCPU => Some("cpu"),
        Some(s) if s == libc::SIGXFSZ => Some("file_size"),
        Some(s) if s == libc::SIGKILL && limits.cpu_seconds.is_some() => Some("cpu"),
        _ if code != Some(0) && cleanup.processes_limit_hit() => Some("processes"),
        _ => None,
    };
    Ok(Outcome {
        exit_code: code,
        signal,
        stdout,
        stderr,
        timed_out: !exited,
        timeout_ms: timeout.as_millis() as u64,
        limit,
        background_killed: background,
        forwarded_connections,
    })
}

/// Kills whatever is left of a run: its process group (the child is still
/// unreaped, a zombie or running, so the group id is ours), the child, and
/// the processes that left the group (`setsid`) but not the cgroup; reaps
/// the child.
fn kill_run(child: &mut std::process::Child, cleanup: &Cleanup) -> std::io::Result<std::process::ExitStatus> {
    let _ = rustix::process::kill_process_group(rustix::process::Pid::from_child(child), rustix::process::Signal::KILL);
    let _ = child.kill();
    let status = child.wait();
    cleanup.kill_cgroup();
    status
}

/// Whether the child `pid` has exited, without reaping it.
fn exited_unreaped(pid: rustix::process::Pid) -> bool {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let opts = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    // An error (no such child) means there is nothing left to wait for.
    !matches!(waitid(WaitId::Pid(pid), opts), Ok(None))
}

/// The command's stdout and stderr, read on the waiting thread: the first
/// `cap` bytes of each kept, the rest drained so the command never blocks
/// on a full pipe.
struct Output {
    out: Option<std::process::ChildStdout>,
    err: Option<std::process::ChildStderr>,
    bufs: [Vec<u8>; 2],
    cap: usize,
}

impl Output {
    fn new(o: Option<std::process::ChildStdout>, e: Option<std::process::ChildStderr>, cap: usize) -> Output {
        Output { out: o, err: e, bufs: [Vec::new(), Vec::new()], cap }
    }

    fn open(&self) -> bool {
        self.out.is_some() || self.err.is_some()
    }

    /// Reads what is ready on either pipe (closing one at its end of file).
    fn read_ready(&mut self, which: usize) {
        let mut chunk = [0u8; 16384];
        let r = match which {
            0 => self.out.as_mut().map(|p| p.read(&mut chunk)),
            _ => self.err.as_mut().map(|p| p.read(&mut chunk)),
        };
        match r {
            Some(Ok(n)) if n > 0 => {
                let b = &mut self.bufs[which];
                let room = self.cap.saturating_sub(b.len());
                b.extend_from_slice(&chunk[..n.min(room)]);
            }
            Some(Err(e))
                if e.kind() == std::io::ErrorKind::Interrupted || e.kind() == std::io::ErrorKind::WouldBlock => {}
            None => {}
            // End of file, or a read error: this pipe is done.
            Some(_) => {
                if which == 0 {
                    self.out = None;
                } else {
                    self.err = None;
                }
            }
        }
    }

    /// Polls the pipes (and the child's pidfd, while `watch_exit`) once, for
    /// at most `until`; returns whether the child has exited.
    fn poll_once(&mut self, pidfd: Option<&OwnedFd>, watch_exit: bool, until: Instant) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let left = until.saturating_duration_since(Instant::now());
        // Without a pidfd (a kernel before 5.3) exit is checked every millisecond.
        let left = if watch_exit && pidfd.is_none() { left.min(Duration::from_millis(1)) } else { left };
        let ts = Timespec { tv_sec: left.as_secs() as _, tv_nsec: left.subsec_nanos() as _ };
        let flags = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
        let (mut ready_out, mut ready_err, mut ready_pid) = (false, false, false);
        {
            let mut fds = Vec::with_capacity(3);
            let mut which = Vec::with_capacity(3);
            if let Some(p) = &self.out {
                fds.push(PollFd::new(p, flags));
                which.push(0);
            }
            if let Some(p) = &self.err {
                fds.push(PollFd::new(p, flags));
                which.push(1);
            }
            if watch_exit && let Some(p) = pidfd {
                fds.push(PollFd::new(p, PollFlags::IN));
                which.push(2);
            }
            if fds.is_empty() {
                std::thread::sleep(left);
                return false;
            }
            if rustix::event::poll(&mut fds, Some(&ts)).is_ok() {
                for (fd, w) in fds.iter().zip(which) {
                    if !fd.revents().is_empty() {
                        match w {
                            0 => ready_out = true,
                            1 => ready_err = true,
                            _ => ready_pid = true,
                        }
                    }
                }
            }
        }
        if ready_out {
            self.read_ready(0);
        }
        if ready_err {
            self.read_ready(1);
        }
        ready_pid
    }

    /// Waits until the child has exited and both pipes are at their end, or
    /// the deadline: `(exited, exited but the pipes were held open)`.
    fn wait(&mut self, pid: rustix::process::Pid, pidfd: Option<&OwnedFd>, deadline: Instant) -> (bool, bool) {
        let mut exited = false;
        loop {
            if !exited && pidfd.is_none() {
                exited = exited_unreaped(pid);
            }
            if exited && !self.open() {
                return (true, false);
            }
            if Instant::now() >= deadline {
                return (exited, exited);
            }
            if self.poll_once(pidfd, !exited, deadline) {
                exited = true;
            }
        }
    }

    /// What was read, after giving the pipes until `until` to reach their end.
    fn finish(mut self, until: Instant) -> (String, String) {
        while self.open() && Instant::now() < until {
            self.poll_once(None, false, until);
        }
        let [o, e] = self.bufs;
        (String::from_utf8_lossy(&o).into_owned(), String::from_utf8_lossy(&e).into_owned())
    }
}
