//! The steps car-runtime's sandbox takes in a forked child before `exec`.
//!
//! `car-runtime` forbids `unsafe` code; installing a `pre_exec` hook and
//! calling the few syscalls that have no safe wrapper (`unshare`, `mount`,
//! `landlock_restrict_self`, an interface ioctl) needs it, so those lines
//! live here, in one small crate, and nowhere else. Everything the child
//! does is prepared by the parent (paths as C strings, the map lines, the
//! Landlock ruleset's file descriptor): the hook itself only makes
//! syscalls, which is what is allowed between `fork` and `exec`.
//!
//! The order is fixed: join the cgroup, set the rlimits, enter new user
//! (and network and mount) namespaces and write the id maps, bring the new
//! network namespace's loopback up (and listen on the ports forwarded to
//! the host's loopback, handing the listeners to the runtime), mount the
//! private temp directory and the protected paths read-only,
//! then restrict the process with Landlock (no new privileges), so that the
//! mounts can no longer be undone.
//!
//! A step that fails makes `spawn` fail with an error whose raw OS code is
//! `STEP_BASE * step + errno`; [`failed_step`] decodes it.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// What the child does before `exec`.
#[derive(Debug, Default)]
pub struct Setup {
    /// `cgroup.procs` of a cgroup to join (writing `0` moves the caller).
    pub cgroup_procs: Option<CString>,
    /// `(RLIMIT_*, value)`: soft and hard limit both set to the value.
    pub rlimits: Vec<(i32, u64)>,
    /// Enter a new user namespace (needed for the two below when not
    /// privileged, and so that the child holds no capability on the host).
    pub user_ns: bool,
    /// Enter a new network namespace (only loopback, and it down unless
    /// `loopback_up`).
    pub net_ns: bool,
    /// Bring `lo` up in the new network namespace.
    pub loopback_up: bool,
    /// Ports to listen on at `127.0.0.1` in the new network namespace
    /// (after `lo` is up, before `exec`, so they exist before the command
    /// runs); the listeners are sent over `forward_socket` and closed in
    /// the child. At most [`MAX_FORWARDED`].
    pub forward_ports: Vec<u16>,
    /// The child's end of a unix socket pair ([`forward_channel`]) the
    /// listeners are sent over (`SCM_RIGHTS`, one message).
    pub forward_socket: Option<OwnedFd>,
    /// The `uid_map` line (`inside outside 1`), written after `unshare`.
    pub uid_map: Option<CString>,
    /// The `gid_map` line, written after `setgroups` is set to `deny`.
    pub gid_map: Option<CString>,
    /// Paths bind-mounted read-only over themselves (needs a mount namespace,
    /// which is entered when this or `tmpfs` is set).
    pub readonly_paths: Vec<CString>,
    /// A fresh tmpfs mounted on this directory (the target, and the mount's
    /// options such as `mode=0700`): a private temp directory that goes
    /// with the mount namespace, when the last process of the run exits.
    pub tmpfs: Option<(CString, CString)>,
    /// The Landlock filesystem rights granted beneath the tmpfs, added to
    /// `landlock` (whose rules name inodes, and the tmpfs is new) once it
    /// is mounted; 0 adds no rule.
    pub tmpfs_access: u64,
    /// A Landlock ruleset, already built; the child restricts itself with it.
    pub landlock: Option<OwnedFd>,
}

/// `struct landlock_path_beneath_attr` (packed, as the kernel declares it).
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// The multiplier of the step number in a failed spawn's raw OS error.
pub const STEP_BASE: i32 = 100_000;

/// The most ports one run may forward.
pub const MAX_FORWARDED: usize = 16;

/// The steps, by number.
pub const STEPS: [&str; 10] = [
    "",
    "joining the process-limit cgroup",
    "setting a resource limit",
    "entering new namespaces (unshare)",
    "writing the user namespace's id maps",
    "bringing the network namespace's loopback up",
    "mounting a protected path read-only",
    "applying the Landlock ruleset",
    "mounting the private temp directory (tmpfs)",
    "listening on a forwarded loopback port",
];

/// The step and the errno of a spawn error made by the hook, if it was.
pub fn failed_step(e: &io::Error) -> Option<(&'static str, io::Error)> {
    let code = e.raw_os_error()?;
    let step = code / STEP_BASE;
    if step <= 0 || step as usize >= STEPS.len() {
        return None;
    }
    Some((STEPS[step as usize], io::Error::from_raw_os_error(code % STEP_BASE)))
}

fn fail(step: i32) -> io::Error {
    let errno = io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
    io::Error::from_raw_os_error(step * STEP_BASE + errno)
}

fn check(step: i32, rc: libc::c_int) -> io::Result<()> {
    if rc < 0 { Err(fail(step)) } else { Ok(()) }
}

fn write_file(step: i32, path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a valid NUL-terminated string; the descriptor is
    // ours and closed on every path.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(fail(step));
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = if n < 0 { Some(fail(step)) } else { None };
        libc::close(fd);
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The mount flags a bind remount must keep (they are locked in a user
/// namespace), from `statvfs`.
fn kept_flags(path: &CString) -> libc::c_ulong {
    // Linux's `ST_RELATIME` (`<bits/statvfs.h>`); the libc crate defines it
    // for glibc only, and musl's statvfs reports the same kernel bit.
    const ST_RELATIME: libc::c_ulong = 0x1000;
    // SAFETY: `st` is a plain C struct filled by the kernel.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    let f = st.f_flag;
    let mut m = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f & st_flag != 0 {
            m |= ms_flag;
        }
    }
    m
}

fn loopback_up() -> io::Result<()> {
    // SAFETY: an ifreq zeroed then filled with "lo" and flags; the socket is
    // ours and closed.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(fail(5));
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
        // The request's type is `c_ulong` in glibc's prototype and `c_int` in musl's.
        let rc = libc::ioctl(s, libc::SIOCSIFFLAGS as _, &ifr);
        let err = if rc < 0 { Some(fail(5)) } else { None };
        libc::close(s);
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Listens on `127.0.0.1:port` for each port (in the calling process's
/// network namespace) and sends the listeners over `sock` in one message.
fn forward_listeners(ports: &[u16], sock: &OwnedFd) -> io::Result<()> {
    if ports.is_empty() || ports.len() > MAX_FORWARDED {
        return Err(io::Error::from_raw_os_error(9 * STEP_BASE + libc::EINVAL));
    }
    let mut fds = [-1 as libc::c_int; MAX_FORWARDED];
    let close_all = |fds: &[libc::c_int]| {
        for &fd in fds.iter().filter(|&&fd| fd >= 0) {
            // SAFETY: descriptors this function opened.
            unsafe { libc::close(fd) };
        }
    };
    for (i, &port) in ports.iter().enumerate() {
        // SAFETY: a socket, a sockaddr_in on the stack, bind and listen.
        let ok = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            fds[i] = fd;
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_port = port.to_be();
            addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
            fd >= 0
                && libc::bind(
                    fd,
                    (&addr as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                ) == 0
                && libc::listen(fd, 128) == 0
        };
        if !ok {
            let e = fail(9);
            close_all(&fds);
            return Err(e);
        }
    }
    // One message: a byte of data and the descriptors as SCM_RIGHTS.
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    const CONTROL_LEN: usize =
        unsafe { libc::CMSG_SPACE((MAX_FORWARDED * std::mem::size_of::<libc::c_int>()) as libc::c_uint) } as usize;
    #[repr(C, align(8))]
    struct Control([u8; CONTROL_LEN]);
    let mut control = Control([0; CONTROL_LEN]);
    let n = ports.len();
    let mut byte = [b'L'];
    // SAFETY: the control buffer is aligned for cmsghdr and CMSG_SPACE of
    // MAX_FORWARDED descriptors long (n is at most that); the iovec and the
    // message header point at locals that outlive the sendmsg call.
    let rc = unsafe {
        let data_len = (n * std::mem::size_of::<libc::c_int>()) as libc::c_uint;
        let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(data_len) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), n);
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    let err = if rc < 0 { Some(fail(9)) } else { None };
    // The runtime holds them now; the command never does.
    close_all(&fds);
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A unix socket pair for [`Setup::forward_socket`]: `(the runtime's end,
/// the child's end)`, both close-on-exec.
pub fn forward_channel() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: socketpair fills two descriptors we then own.
    unsafe {
        if libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) < 0 {
            return Err(io::Error::last_os_error());
        }
        use std::os::fd::FromRawFd;
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

fn run(s: &Setup) -> io::Result<()> {
    if let Some(p) = &s.cgroup_procs {
        write_file(1, p.as_c_str(), b"0")?;
    }
    for &(res, v) in &s.rlimits {
        let lim = libc::rlimit { rlim_cur: v as libc::rlim_t, rlim_max: v as libc::rlim_t };
        // SAFETY: a plain struct passed by pointer.
        check(2, unsafe { libc::setrlimit(res as _, &lim) })?;
    }
    let mount_ns = !s.readonly_paths.is_empty() || s.tmpfs.is_some();
    if s.user_ns || s.net_ns || mount_ns {
        let mut flags = 0;
        if s.user_ns {
            flags |= libc::CLONE_NEWUSER;
        }
        if s.net_ns {
            flags |= libc::CLONE_NEWNET;
        }
        if mount_ns {
            flags |= libc::CLONE_NEWNS;
        }
        // SAFETY: the child is single-threaded after fork.
        check(3, unsafe { libc::unshare(flags) })?;
    }
    if s.user_ns {
        if let Some(u) = &s.uid_map {
            write_file(4, c"/proc/self/uid_map", u.as_bytes())?;
        }
        if let Some(g) = &s.gid_map {
            write_file(4, c"/proc/self/setgroups", b"deny")?;
            write_file(4, c"/proc/self/gid_map", g.as_bytes())?;
        }
    }
    if s.net_ns && s.loopback_up {
        loopback_up()?;
    }
    if !s.forward_ports.is_empty() {
        // Only inside a network namespace of the run's own: listening on
        // the host's loopback would take the very ports being forwarded.
        if !s.net_ns {
            return Err(io::Error::from_raw_os_error(9 * STEP_BASE + libc::EINVAL));
        }
        let Some(sock) = &s.forward_socket else {
            return Err(io::Error::from_raw_os_error(9 * STEP_BASE + libc::EBADF));
        };
        forward_listeners(&s.forward_ports, sock)?;
    }
    if mount_ns {
        // SAFETY: NUL-terminated paths; null pointers where mount(2) allows them.
        unsafe {
            check(
                6,
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ),
            )?;
            if let Some((target, opts)) = &s.tmpfs {
                check(
                    8,
                    libc::mount(
                        c"tmpfs".as_ptr(),
                        target.as_ptr(),
                        c"tmpfs".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        opts.as_ptr().cast(),
                    ),
                )?;
                if let Some(ruleset) = &s.landlock
                    && s.tmpfs_access != 0
                {
                    let fd = libc::open(target.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(fail(8));
                    }
                    let attr = PathBeneath { allowed_access: s.tmpfs_access, parent_fd: fd };
                    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
                    let rc = libc::syscall(
                        libc::SYS_landlock_add_rule,
                        ruleset.as_raw_fd(),
                        LANDLOCK_RULE_PATH_BENEATH,
                        &attr as *const PathBeneath,
                        0u32,
                    );
                    let err = if rc < 0 { Some(fail(8)) } else { None };
                    libc::close(fd);
                    if let Some(e) = err {
                        return Err(e);
                    }
                }
            }
            for p in &s.readonly_paths {
                let kept = kept_flags(p);
                check(
                    6,
                    libc::mount(
                        p.as_ptr(),
                        p.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ),
                )?;
                check(
                    6,
                    libc::mount(
                        std::ptr::null(),
                        p.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | kept,
                        std::ptr::null(),
                    ),
                )?;
            }
        }
    }
    if let Some(fd) = &s.landlock {
        // SAFETY: prctl and the Landlock syscall with a ruleset descriptor we own.
        unsafe {
            check(7, libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            check(7, libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) as libc::c_int)?;
        }
    }
    Ok(())
}

/// Makes `cmd`'s child run `setup` between `fork` and `exec`.
pub fn install(cmd: &mut Command, setup: Setup) {
    // SAFETY: the hook only makes syscalls on data prepared before the fork
    // (no allocation, no lock), which is what may run in a forked child of
    // a multi-threaded process.
    unsafe {
        cmd.pre_exec(move || run(&setup));
    }
}

/// The Landlock ABI version of the running kernel (0: none, Landlock not
/// built in or not enabled at boot).
pub fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: the version query takes no attribute pointer.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 { 0 } else { v as i32 }
}

/// Restores the default action of `SIGPIPE` (terminate quietly) for a
/// command-line program, as C programs have it: Rust starts with it
/// ignored, so `car ... | head` would otherwise panic on the closed pipe
/// instead of stopping.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler
    // code; it is called once at start-up, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
