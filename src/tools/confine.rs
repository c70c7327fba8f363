//! Confinement of file paths to a root directory: a path escaping the root,
//! lexically through `..` or an absolute path, or physically through a
//! symlink, is refused before any read or write.

use std::path::{Component, Path, PathBuf};

use crate::ir::ToolFailure;

/// A root directory that file tools may not leave.
#[derive(Debug, Clone)]
pub struct Root {
    canonical: PathBuf,
}

impl Root {
    /// Opens a root; it must exist and be a directory.
    pub fn new(dir: impl AsRef<Path>) -> crate::Result<Root> {
        let dir = dir.as_ref();
        let canonical = dir.canonicalize().map_err(|e| {
            crate::Error::invalid_argument("root", format!("`{}` cannot be opened: {e}", dir.display()))
        })?;
        if !canonical.is_dir() {
            return Err(crate::Error::invalid_argument("root", format!("`{}` is not a directory", dir.display())));
        }
        Ok(Root { canonical })
    }

    /// The canonical root path.
    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Resolves `rel` inside the root. Refuses absolute paths outside the
    /// root, `..` that climbs above it, NUL bytes, and any existing ancestor
    /// that is a symlink resolving outside the root.
    pub fn resolve(&self, rel: &str) -> Result<PathBuf, ToolFailure> {
        if rel.contains('\0') {
            return Err(escape(rel, "contains a NUL byte"));
        }
        let given = Path::new(rel);
        let relative: PathBuf = if given.is_absolute() {
            match given.strip_prefix(&self.canonical) {
                Ok(r) => r.to_path_buf(),
                Err(_) => return Err(escape(rel, "is outside the root")),
            }
        } else {
            given.to_path_buf()
        };
        // Lexical normalisation: `..` may never climb above the root.
        let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
        for c in relative.components() {
            match c {
                Component::Normal(p) => parts.push(p),
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err(escape(rel, "climbs above the root"));
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(escape(rel, "is outside the root")),
            }
        }
        let mut full = self.canonical.clone();
        full.extend(parts);
        // Physical check: the deepest existing ancestor must resolve inside.
        let mut probe = full.as_path();
        loop {
            if probe.symlink_metadata().is_ok() {
                let real = probe.canonicalize().map_err(|e| escape(rel, &format!("cannot be resolved: {e}")))?;
                if !real.starts_with(&self.canonical) {
                    return Err(escape(rel, "resolves outside the root through a symlink"));
                }
                break;
            }
            match probe.parent() {
                Some(p) => probe = p,
                None => break,
            }
        }
        Ok(full)
    }

    /// The path relative to the root, for display.
    pub fn display(&self, p: &Path) -> String {
        let s = p.strip_prefix(&self.canonical).unwrap_or(p).display().to_string();
        if s.is_empty() { ".".to_string() } else { s }
    }
}

fn escape(rel: &str, why: &str) -> ToolFailure {
    ToolFailure::ordinary(format!("path `{rel}` {why}; refused"))
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
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", dir.join("out")).unwrap();
            let e = root.resolve("out/passwd").unwrap_err();
            assert!(e.message.contains("symlink"), "{e}");
            assert!(root.resolve("out").is_err());
            std::os::unix::fs::symlink(dir.join("sub"), dir.join("in")).unwrap();
            assert!(root.resolve("in/file.txt").is_ok());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
