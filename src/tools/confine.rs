//! Confinement of file paths to a root directory.
//!
//! A path is first normalised lexically: `..` may not climb above the root,
//! an absolute path must lie under it, NUL bytes are refused. Every file
//! operation then opens the path relative to a directory handle taken when
//! the [`Root`] was made, one component at a time, following no symlink on
//! any component (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS` where the kernel has it, else `openat` with
//! `O_NOFOLLOW` per component). A symlink swapped in between a check and a
//! write cannot redirect it: there is no separate check. Writes refuse a file
//! with more than one hard link (it may be an outside file's other name), and
//! the runtime's own configuration, policies and approvals are protected
//! paths the tools do not write (see [`protected_path`]).

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};
#[cfg(unix)]
use std::sync::Arc;

use crate::ir::ToolFailure;

/// The directory holding the runtime's configuration, policies and state.
pub const CONFIG_DIR: &str = ".car";

/// File names the runtime keeps approvals and its audit trail in (the
/// plan/apply approvals store, the permission gate's ledger, the event
/// file), protected wherever they lie.
pub const PROTECTED_FILE_NAMES: &[&str] = &[
    crate::approval::store::APPROVALS_FILE,
    crate::approval::ledger::TIER_LEDGER_FILE,
    crate::store::file::EVENTS_FILE,
];

/// A root directory that file tools may not leave.
#[derive(Debug, Clone)]
pub struct Root {
    canonical: PathBuf,
    #[cfg(unix)]
    handle: Arc<rustix::fd::OwnedFd>,
    allow_protected: bool,
}

/// A path inside the root after lexical normalisation: its components
/// (no `.`, `..`, or empty ones) and the text the caller gave.
#[derive(Debug, Clone)]
pub(crate) struct RelPath {
    pub(crate) parts: Vec<OsString>,
    pub(crate) given: String,
}

impl RelPath {
    /// The path relative to the root, `/`-separated (`.` for the root).
    pub(crate) fn shown(&self) -> String {
        if self.parts.is_empty() {
            return ".".to_string();
        }
        self.parts.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join("/")
    }
}

impl Root {
    /// Opens a root; it must exist and be a directory. Writes to protected
    /// paths are refused (see [`Root::allow_protected_writes`]).
    pub fn new(dir: impl AsRef<Path>) -> crate::Result<Root> {
        let dir = dir.as_ref();
        let open_err = |e: std::io::Error| {
            crate::Error::invalid_argument("root", format!("`{}` cannot be opened: {e}", dir.display()))
        };
        let canonical = dir.canonicalize().map_err(open_err)?;
        if !canonical.is_dir() {
            return Err(crate::Error::invalid_argument("root", format!("`{}` is not a directory", dir.display())));
        }
        #[cfg(unix)]
        let handle = {
            use rustix::fs::{Mode, OFlags};
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            Arc::new(rustix::fs::open(&canonical, flags, Mode::empty()).map_err(|e| open_err(e.into()))?)
        };
        Ok(Root {
            canonical,
            #[cfg(unix)]
            handle,
            allow_protected: false,
        })
    }

    /// Lets (or stops) the file tools write protected paths: the `.car`
    /// directory and approvals files (see [`protected_path`]). Off by default.
    /// This is the operator's switch: no tool parameter can turn it on.
    pub fn allow_protected_writes(mut self, allow: bool) -> Root {
        self.allow_protected = allow;
        self
    }

    /// Whether [`Root::allow_protected_writes`] turned protected writes on.
    pub fn protected_writes_allowed(&self) -> bool {
        self.allow_protected
    }

    /// The canonical root path.
    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Whether `rel` (relative to the root, or absolute) names a protected
    /// path of this root. See [`protected_path`].
    pub fn is_protected(&self, rel: &str) -> bool {
        protected_path(&self.canonical, Path::new(rel))
    }

    /// Resolves `rel` lexically inside the root: the absolute path it names.
    /// Refuses absolute paths outside the root, `..` that climbs above it and
    /// NUL bytes. It does not look at the file system: the file tools open
    /// paths through the root's handle without following symlinks, so a
    /// symlink on the way is refused when the path is used.
    pub fn resolve(&self, rel: &str) -> Result<PathBuf, ToolFailure> {
        let r = self.rel(rel)?;
        let mut full = self.canonical.clone();
        full.extend(&r.parts);
        Ok(full)
    }

    /// The path relative to the root, for display.
    pub fn display(&self, p: &Path) -> String {
        let s = p.strip_prefix(&self.canonical).unwrap_or(p).display().to_string();
        if s.is_empty() { ".".to_string() } else { s }
    }

    /// Lexical normalisation of `rel` against the root.
    pub(crate) fn rel(&self, rel: &str) -> Result<RelPath, ToolFailure> {
        if rel.contains('\0') {
            return Err(escape(rel, "contains a NUL byte"));
        }
        let given = Path::new(rel);
        let relative: &Path = if given.is_absolute() {
            match given.strip_prefix(&self.canonical) {
                Ok(r) => r,
                Err(_) => return Err(escape(rel, "is outside the root")),
            }
        } else {
            given
        };
        let mut parts: Vec<OsString> = Vec::new();
        for c in relative.components() {
            match c {
                Component::Normal(p) => parts.push(p.to_os_string()),
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err(escape(rel, "climbs above the root"));
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(escape(rel, "is outside the root")),
            }
        }
        Ok(RelPath { parts, given: rel.to_string() })
    }

    /// Refuses a write to a protected path unless the operator allowed it.
    pub(crate) fn check_writable(&self, r: &RelPath) -> Result<(), ToolFailure> {
        if !self.allow_protected && (under_config_dir(&self.canonical) || protected_parts(&r.parts)) {
            return Err(ToolFailure::ordinary(format!(
                "path `{}` is protected (the runtime's configuration, policies or approvals); \
                 the built-in tools do not write it; refused",
                r.given
            )));
        }
        Ok(())
    }
}

/// Whether `path` names a protected path of the root `root`: the runtime's
/// configuration, policies and approvals, which the built-in tools never
/// write unless the operator allows it ([`Root::allow_protected_writes`]).
///
/// Protected are: anything at or under a directory named `.car` inside the
/// root (at any depth: a nested `.car` configures a run rooted there), files
/// named `approvals.jsonl` anywhere under the root, and everything when the
/// root itself lies inside a `.car` directory. Names compare ASCII
/// case-insensitively (`.CAR` is `.car` on a case-insensitive file system).
///
/// Pure: `path` (relative to `root`, or absolute) is normalised lexically,
/// `..` and `.` included; the file system is not consulted. A path outside
/// the root is not protected by this function (it is outside). Symlinks and
/// hard links are for the caller: the built-in tools follow no symlink and
/// refuse to write a file with more than one link. A directory that merely
/// contains a protected path (the root itself, `.`) is not protected here,
/// so a recursive delete of it must be judged by the caller.
pub fn protected_path(root: &Path, path: &Path) -> bool {
    let root = lexical(root);
    let full = lexical(&root.join(path));
    let Ok(rel) = full.strip_prefix(&root) else { return false };
    if under_config_dir(&root) {
        return true;
    }
    let parts: Vec<OsString> = rel.components().map(|c| c.as_os_str().to_os_string()).collect();
    protected_parts(&parts)
}

/// `p` with `.` and `..` removed lexically (`..` at the top stays at the top).
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn is_config_dir(name: &OsStr) -> bool {
    name.to_str().is_some_and(|s| s.eq_ignore_ascii_case(CONFIG_DIR))
}

fn under_config_dir(root: &Path) -> bool {
    root.components().any(|c| is_config_dir(c.as_os_str()))
}

fn protected_parts(parts: &[OsString]) -> bool {
    if parts.iter().any(|p| is_config_dir(p)) {
        return true;
    }
    parts
        .last()
        .and_then(|p| p.to_str())
        .is_some_and(|n| PROTECTED_FILE_NAMES.iter().any(|f| n.eq_ignore_ascii_case(f)))
}

pub(crate) fn escape(rel: &str, why: &str) -> ToolFailure {
    ToolFailure::ordinary(format!("path `{rel}` {why}; refused"))
}

/// The failure of a confined operation on `rel`: a symlink on the way or an
/// escape is a refusal; anything else an ordinary I/O failure.
pub(crate) fn op_err(what: &str, rel: &str, e: std::io::Error) -> ToolFailure {
    match e.raw_os_error() {
        #[cfg(unix)]
        Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => escape(rel, "passes through a symlink"),
        #[cfg(unix)]
        Some(code) if code == rustix::io::Errno::XDEV.raw_os_error() => {
            escape(rel, "resolves outside the root through a symlink")
        }
        _ => ToolFailure::ordinary(format!("cannot {what} `{rel}`: {e}")),
    }
}

#[cfg(unix)]
pub(crate) use handle::*;

/// Operations through the root's directory handle.
#[cfg(unix)]
mod handle {
    use std::ffi::{OsStr, OsString};
    use std::fs::File;
    use std::io::{self, Read, Write};
    #[cfg(target_os = "linux")]
    use std::sync::atomic::{AtomicBool, Ordering};

    use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
    use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
    use rustix::io::Errno;

    use super::{RelPath, Root, escape};
    use crate::ir::ToolFailure;

    /// Set when `openat2` is missing (old kernel, seccomp): the per-component
    /// walk is used from then on.
    #[cfg(target_os = "linux")]
    static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

    const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

    /// What a confined open found.
    pub(crate) struct Opened {
        pub(crate) fd: OwnedFd,
        pub(crate) stat: Stat,
    }

    impl Opened {
        pub(crate) fn kind(&self) -> FileType {
            FileType::from_raw_mode(self.stat.st_mode)
        }
    }

    /// Opens the directory `name` of `dir` without following a symlink; a
    /// symlink there is `ELOOP` (the kernel says `ENOTDIR` for
    /// `O_DIRECTORY | O_NOFOLLOW` on a symlink).
    fn open_subdir(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
        match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
            Err(Errno::NOTDIR) => match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => Err(Errno::LOOP),
                _ => Err(Errno::NOTDIR),
            },
            other => other,
        }
    }

    fn cur_dir(fd: impl AsFd) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat(fd, ".", DIR_FLAGS, Mode::empty())?)
    }

    /// Opens `parts` under `dir`, following no symlink on any component.
    fn open_beneath(dir: impl AsFd, parts: &[OsString], flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let dir = dir.as_fd();
        let Some((last, parents)) = parts.split_last() else {
            return Ok(rustix::fs::openat(dir, ".", flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, mode)?);
        };
        #[cfg(target_os = "linux")]
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            use rustix::fs::ResolveFlags;
            let joined: std::path::PathBuf = parts.iter().collect();
            let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            match rustix::fs::openat2(dir, &joined, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, mode, resolve) {
                Err(Errno::NOSYS | Errno::PERM) => NO_OPENAT2.store(true, Ordering::Relaxed),
                // The kernel retries on a concurrent rename; the walk does not need to.
                Err(Errno::AGAIN) => {}
                other => return Ok(other?),
            }
        }
        let mut cur: Option<OwnedFd> = None;
        for p in parents {
            let next = open_subdir(cur.as_ref().map_or(dir, |f| f.as_fd()), p.as_os_str())?;
            cur = Some(next);
        }
        let at = cur.as_ref().map_or(dir, |f| f.as_fd());
        Ok(rustix::fs::openat(at, last.as_os_str(), flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, mode)?)
    }

    impl Root {
        /// Opens `r` for reading (a file or a directory), no symlink followed.
        /// `O_NONBLOCK` keeps a FIFO from blocking the open.
        pub(crate) fn open_read(&self, r: &RelPath) -> io::Result<Opened> {
            let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
            let fd = open_beneath(&*self.handle, &r.parts, flags, Mode::empty())?;
            let stat = rustix::fs::fstat(&fd)?;
            Ok(Opened { fd, stat })
        }

        /// The parent directory of `r` (which must not be the root),
        /// creating missing directories one at a time with `mkdirat`, each
        /// opened afterwards without following a symlink.
        fn open_parent_creating(&self, parents: &[OsString]) -> io::Result<OwnedFd> {
            let mut cur = cur_dir(&*self.handle)?;
            for p in parents {
                let name = p.as_os_str();
                cur = match open_subdir(cur.as_fd(), name) {
                    Ok(fd) => fd,
                    Err(Errno::NOENT) => {
                        match rustix::fs::mkdirat(&cur, name, Mode::from_raw_mode(0o777)) {
                            Ok(()) | Err(Errno::EXIST) => {}
                            Err(e) => return Err(e.into()),
                        }
                        open_subdir(cur.as_fd(), name)?
                    }
                    Err(e) => return Err(e.into()),
                };
            }
            Ok(cur)
        }

        /// Writes `content` to `r` (creating it and its parent directories),
        /// refusing protected paths, non-regular files and files with more
        /// than one hard link. True when the file was created.
        pub(crate) fn write(&self, r: &RelPath, content: &[u8]) -> Result<bool, ToolFailure> {
            self.check_writable(r)?;
            let err = |e: io::Error| super::op_err("write", &r.given, e);
            let Some((last, parents)) = r.parts.split_last() else {
                return Err(ToolFailure::ordinary(format!("`{}` is the root directory, not a file", r.given)));
            };
            let dir = self.open_parent_creating(parents).map_err(err)?;
            let name: &OsStr = last.as_os_str();
            let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
            let mut attempt = 0;
            let (fd, created) = loop {
                attempt += 1;
                match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
                    Ok(fd) => break (fd, false),
                    Err(Errno::NOENT) => {}
                    Err(e) => return Err(err(e.into())),
                }
                match rustix::fs::openat(&dir, name, flags | OFlags::CREATE | OFlags::EXCL, Mode::from_raw_mode(0o666))
                {
                    Ok(fd) => break (fd, true),
                    Err(Errno::EXIST) if attempt < 3 => continue,
                    Err(e) => return Err(err(e.into())),
                }
            };
            let stat = rustix::fs::fstat(&fd).map_err(|e| err(e.into()))?;
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                return Err(ToolFailure::ordinary(format!("`{}` is not a regular file", r.given)));
            }
            if stat.st_nlink > 1 {
                return Err(escape(
                    &r.given,
                    &format!("has {} hard links (one may be a file outside the root); not written", stat.st_nlink),
                ));
            }
            let mut file = File::from(fd);
            file.set_len(0).and_then(|_| file.write_all(content)).map_err(err)?;
            Ok(created)
        }

        /// The text of the regular file `r`, at most `max` bytes.
        pub(crate) fn read_text(&self, r: &RelPath, max: u64) -> Result<String, ToolFailure> {
            let o = self.open_read(r).map_err(|e| super::op_err("read", &r.given, e))?;
            read_opened(o, &r.given, max)
        }

        /// Whether `r` exists (a symlink on the way counts as an error).
        pub(crate) fn exists(&self, r: &RelPath) -> Result<bool, ToolFailure> {
            match self.open_read(r) {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(super::op_err("read", &r.given, e)),
            }
        }
    }

    /// The UTF-8 text of an opened regular file of at most `max` bytes.
    pub(crate) fn read_opened(o: Opened, shown: &str, max: u64) -> Result<String, ToolFailure> {
        if o.kind() != FileType::RegularFile {
            return Err(ToolFailure::ordinary(format!("`{shown}` is not a regular file")));
        }
        if o.stat.st_size as u64 > max {
            return Err(ToolFailure::ordinary(format!("`{shown}` is larger than {max} bytes")));
        }
        let mut bytes = Vec::new();
        File::from(o.fd)
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ToolFailure::ordinary(format!("cannot read `{shown}`: {e}")))?;
        if bytes.len() as u64 > max {
            return Err(ToolFailure::ordinary(format!("`{shown}` is larger than {max} bytes")));
        }
        String::from_utf8(bytes).map_err(|_| ToolFailure::ordinary(format!("`{shown}` is not valid UTF-8 text")))
    }

    /// One entry of a directory read through its handle.
    pub(crate) struct Entry {
        pub(crate) name: OsString,
        pub(crate) stat: Stat,
    }

    impl Entry {
        pub(crate) fn kind(&self) -> FileType {
            FileType::from_raw_mode(self.stat.st_mode)
        }
    }

    /// The entries of the directory `dir` (not `.`/`..`), sorted by name,
    /// each stat'ed without following a symlink. Entries that vanish while
    /// being read are skipped.
    pub(crate) fn entries(dir: &OwnedFd) -> io::Result<Vec<Entry>> {
        use std::os::unix::ffi::OsStrExt;
        let mut d = rustix::fs::Dir::read_from(dir)?;
        let mut out = Vec::new();
        while let Some(e) = d.read() {
            let e = e?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name).to_os_string();
            let Ok(stat) = rustix::fs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) else { continue };
            out.push(Entry { name, stat });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Opens the entry `name` of `dir`: a directory to descend into or a
    /// file to read, never through a symlink.
    pub(crate) fn open_entry(dir: &OwnedFd, name: &OsStr, directory: bool) -> io::Result<Opened> {
        let flags = if directory {
            DIR_FLAGS
        } else {
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
        };
        let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
        let stat = rustix::fs::fstat(&fd)?;
        Ok(Opened { fd, stat })
    }

    /// Forces the per-component walk (tests of the fallback).
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn force_walk(on: bool) {
        NO_OPENAT2.store(on, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_escapes() {
        let dir = std::env::temp_dir().join(format!("car-confine-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let root = Root::new(&dir).unwrap();
        assert!(root.resolve("sub/../a.txt").is_ok());
        assert!(root.resolve("./sub/new/deeper.txt").is_ok());
        assert!(root.resolve("../x").is_err());
        assert!(root.resolve("sub/../../x").is_err());
        assert!(root.resolve("/etc/passwd").is_err());
        assert!(root.resolve("a\0b").is_err());
        let inside = root.path().join("sub/ok.txt");
        assert!(root.resolve(inside.to_str().unwrap()).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The per-component walk (used where `openat2` is missing) refuses a
    /// symlink on any component just as `openat2` does.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_component_walk_follows_no_symlink() {
        let dir = std::env::temp_dir().join(format!("car-confine-walk-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("sub/deep")).unwrap();
        std::fs::write(dir.join("sub/deep/f.txt"), "ok").unwrap();
        std::os::unix::fs::symlink("/etc", dir.join("out")).unwrap();
        std::os::unix::fs::symlink(dir.join("sub"), dir.join("in")).unwrap();
        let root = Root::new(&dir).unwrap();
        for walk in [false, true] {
            handle::force_walk(walk);
            let ok = root.rel("sub/deep/f.txt").unwrap();
            assert_eq!(root.read_text(&ok, 10).unwrap(), "ok");
            for bad in ["out/passwd", "in/deep/f.txt", "out", "in"] {
                let e = root.read_text(&root.rel(bad).unwrap(), 10).unwrap_err();
                assert!(e.message.contains("symlink") && e.message.contains("refused"), "walk {walk}, {bad}: {e}");
            }
        }
        handle::force_walk(false);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The per-component walk under a racing symlink flipper: nothing it
    /// writes ever lands outside the root.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_component_walk_holds_under_a_racing_flipper() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let base = std::env::temp_dir().join(format!("car-confine-walkrace-{}", uuid::Uuid::new_v4()));
        let (dir, outside) = (base.join("root"), base.join("outside"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let root = Root::new(&dir).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (flip, out, stop2) = (dir.join("flip"), outside.clone(), stop.clone());
        let t = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let _ = std::fs::remove_dir_all(&flip);
                let _ = std::fs::create_dir(&flip);
                std::thread::yield_now();
                let _ = std::fs::remove_dir_all(&flip);
                let _ = std::os::unix::fs::symlink(&out, &flip);
                std::thread::yield_now();
                let _ = std::fs::remove_file(&flip);
            }
        });
        handle::force_walk(true);
        for i in 0..1_000 {
            let r = root.rel(&format!("flip/{}w{i}.txt", if i % 2 == 0 { "" } else { "deep/" })).unwrap();
            let _ = root.write(&r, b"x");
        }
        handle::force_walk(false);
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing lands outside the root");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
