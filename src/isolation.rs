//! Isolation: the environment a proposal's tools see
//! (`tools-and-permissions.md`, "Worktree isolation").
//!
//! - `none` (the default): tools run against the host directory.
//! - `readonly`: tools get the host directory, and the admission stage
//!   compiles a deny rule for tools declaring risk `write` or `destructive`
//!   (a blast-radius declaration, not containment).
//! - `{kind: "worktree", ref?, keep_on_error?, max_kept?}`: a managed git
//!   worktree. Acquire creates it from `HEAD` (or `ref`) of the host
//!   repository, detached, under the repository's git directory
//!   (`<git-common-dir>/car-worktrees/`), so the host's working tree is
//!   untouched; a host outside a git repository is a configuration error
//!   and nothing runs. Every tool call of the proposal gets `cwd` inside the
//!   tree (the built-in tools are confined to it). Collect snapshots the
//!   changed files and a binary patch against the base commit, returned as
//!   a `kind: "patch"` artifact of the result. Dispose removes the tree,
//!   unless the proposal failed and `keep_on_error` is set: then it is
//!   kept (its path is in the artifact), at most `max_kept` (default 4)
//!   such trees per repository, the oldest removed first. The patch is
//!   never applied to the host tree.
//!
//! Built on the `git` command (`git worktree add` / `remove`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{Error, Result};

/// Retained trees per repository when `max_kept` is not given.
pub const DEFAULT_MAX_KEPT: usize = 4;

/// The largest patch an artifact carries (10 MiB); a larger one is left
/// out (`truncated: true`), its files still listed.
pub const MAX_PATCH_BYTES: usize = 10 * 1024 * 1024;

/// The directory under the git common directory holding the trees.
pub const WORKTREES_DIR: &str = "car-worktrees";

/// The environment a proposal's tools see.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Isolation {
    /// The host directory, no lifecycle.
    #[default]
    None,
    /// The host directory; write and destructive tools are denied.
    Readonly,
    /// A managed git worktree.
    Worktree(WorktreeSpec),
}

/// The worktree lifecycle's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorktreeSpec {
    /// The commit (branch, tag, sha) the tree starts from; `HEAD` when absent.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// Keep a failed proposal's tree for inspection.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_on_error: bool,
    /// At most this many kept trees per repository (default 4).
    #[serde(default = "default_max_kept")]
    pub max_kept: usize,
}

fn default_max_kept() -> usize {
    DEFAULT_MAX_KEPT
}

impl Isolation {
    /// The spec as JSON: `"none"`, `"readonly"` or `{kind: "worktree", ...}`.
    pub fn to_value(&self) -> Value {
        match self {
            Isolation::None => json!("none"),
            Isolation::Readonly => json!("readonly"),
            Isolation::Worktree(w) => {
                let mut v = serde_json::to_value(w).unwrap_or_else(|_| json!({}));
                if let Some(o) = v.as_object_mut() {
                    o.insert("kind".into(), json!("worktree"));
                }
                v
            }
        }
    }

    /// Reads `"none" | "readonly" | {kind: "none" | "readonly" | "worktree", ...}`.
    pub fn from_value(v: &Value) -> Result<Isolation> {
        let bad = |why: String| Error::invalid_argument("isolation", why);
        let named = |s: &str| match s {
            "none" => Ok(Isolation::None),
            "readonly" => Ok(Isolation::Readonly),
            "worktree" => Ok(Isolation::Worktree(WorktreeSpec {
                git_ref: None,
                keep_on_error: false,
                max_kept: DEFAULT_MAX_KEPT,
            })),
            other => Err(bad(format!("`{other}` is not `none`, `readonly` or `worktree`"))),
        };
        match v {
            Value::Null => Ok(Isolation::None),
            Value::String(s) => named(s),
            Value::Object(o) => {
                let kind = o.get("kind").and_then(Value::as_str).ok_or_else(|| {
                    bad("an isolation table needs `kind` (`none`, `readonly` or `worktree`)".to_string())
                })?;
                let mut rest = o.clone();
                rest.remove("kind");
                match named(kind)? {
                    Isolation::Worktree(_) => {
                        let w: WorktreeSpec =
                            serde_json::from_value(Value::Object(rest)).map_err(|e| bad(format!("worktree: {e}")))?;
                        if w.git_ref.as_deref().is_some_and(|r| r.is_empty() || r.starts_with('-')) {
                            return Err(bad(
                                "worktree: `ref` must name a commit (not empty, not starting with `-`)".into()
                            ));
                        }
                        Ok(Isolation::Worktree(w))
                    }
                    other if rest.is_empty() => Ok(other),
                    _ => Err(bad(format!("`{kind}` isolation takes no other keys"))),
                }
            }
            other => Err(bad(format!("must be a string or a table, got {other}"))),
        }
    }
}

impl Serialize for Isolation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Isolation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Isolation::from_value(&v).map_err(serde::de::Error::custom)
    }
}

fn git(dir: &Path, args: &[&str]) -> std::result::Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        // Never prompt, never page; the user's hooks do not run for our index.
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn git_err(what: &str, e: String) -> Error {
    Error::runtime("worktree_failed", format!("worktree isolation: {what}: {e}"))
}

/// An acquired worktree.
#[derive(Debug)]
pub struct Worktree {
    /// The tree's top directory.
    pub path: PathBuf,
    /// Where the tools work: the host directory's place inside the tree.
    pub cwd: PathBuf,
    /// The commit the tree started from.
    pub base: String,
    top: PathBuf,
    spec: WorktreeSpec,
}

fn sanitized(label: &str) -> String {
    let s: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(40)
        .collect();
    if s.is_empty() { "proposal".into() } else { s }
}

impl Worktree {
    /// Creates a detached worktree of the repository holding `host` at
    /// `spec.ref` (else `HEAD`). `host` outside a git repository is the
    /// configuration error `isolation_not_git`; nothing is created then.
    pub fn acquire(host: &Path, spec: &WorktreeSpec, label: &str) -> Result<Worktree> {
        let host = host.canonicalize().map_err(|e| {
            Error::config(
                "isolation_not_git",
                format!("worktree isolation: the host directory `{}`: {e}", host.display()),
                json!({"host": host.display().to_string()}),
            )
        })?;
        let top = git(&host, &["rev-parse", "--show-toplevel"]).map_err(|e| {
            Error::config(
                "isolation_not_git",
                format!("worktree isolation needs a git repository: `{}` is not inside one ({e})", host.display()),
                json!({"host": host.display().to_string()}),
            )
        })?;
        let top = PathBuf::from(top.trim()).canonicalize().map_err(|e| git_err("the repository top", e.to_string()))?;
        let common = git(&top, &["rev-parse", "--path-format=absolute", "--git-common-dir"])
            .map_err(|e| git_err("the git directory", e))?;
        let wanted = spec.git_ref.as_deref().unwrap_or("HEAD");
        let base = git(&top, &["rev-parse", "--verify", "--end-of-options", &format!("{wanted}^{{commit}}")])
            .map_err(|e| {
                Error::invalid_argument(
                    "isolation",
                    format!("worktree: `{wanted}` is not a commit of `{}` ({e})", top.display()),
                )
            })?
            .trim()
            .to_string();
        let dir = PathBuf::from(common.trim()).join(WORKTREES_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| git_err(&format!("creating `{}`", dir.display()), e.to_string()))?;
        let path = dir.join(format!("{}-{}", sanitized(label), &uuid::Uuid::new_v4().simple().to_string()[..8]));
        let p = path.to_string_lossy().into_owned();
        git(&top, &["worktree", "add", "--detach", "--quiet", &p, &base])
            .map_err(|e| git_err("git worktree add", e))?;
        let rel = host.strip_prefix(&top).unwrap_or(Path::new(""));
        let cwd = path.join(rel);
        Ok(Worktree { path, cwd, base, top, spec: spec.clone() })
    }

    /// The `kind: "patch"` artifact: the files changed against the base
    /// commit (added, modified, deleted; untracked files included) and the
    /// binary patch.
    pub fn collect(&self) -> Result<Value> {
        git(&self.path, &["add", "--all"]).map_err(|e| git_err("git add", e))?;
        let names = git(&self.path, &["diff", "--cached", "--name-only", "-z", &self.base])
            .map_err(|e| git_err("git diff --name-only", e))?;
        let files: Vec<&str> = names.split('\0').filter(|s| !s.is_empty()).collect();
        let patch =
            git(&self.path, &["diff", "--cached", "--binary", &self.base]).map_err(|e| git_err("git diff", e))?;
        let mut a = json!({"kind": "patch", "base": self.base, "files": files, "bytes": patch.len()});
        if patch.len() > MAX_PATCH_BYTES {
            a["truncated"] = json!(true);
        } else {
            a["patch"] = json!(patch);
        }
        Ok(a)
    }

    /// Removes the tree, or keeps it when `failed` and `keep_on_error`
    /// (then returns its path, and removes the oldest kept trees beyond
    /// `max_kept`).
    pub fn dispose(self, failed: bool) -> Result<Option<PathBuf>> {
        let dir = self.path.parent().map(Path::to_path_buf).unwrap_or_default();
        if failed && self.spec.keep_on_error {
            let marker = self.path.with_extension("kept");
            std::fs::write(&marker, chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
                .map_err(|e| git_err("marking the kept tree", e.to_string()))?;
            prune_kept(&self.top, &dir, self.spec.max_kept)?;
            return Ok(self.path.exists().then_some(self.path));
        }
        remove(&self.top, &self.path)?;
        Ok(None)
    }
}

fn remove(top: &Path, path: &Path) -> Result<()> {
    let p = path.to_string_lossy().into_owned();
    git(top, &["worktree", "remove", "--force", "--force", &p]).map_err(|e| git_err("git worktree remove", e))?;
    let _ = std::fs::remove_file(path.with_extension("kept"));
    Ok(())
}

/// Removes kept trees (those with a `.kept` marker) beyond the newest `max`.
fn prune_kept(top: &Path, dir: &Path, max: usize) -> Result<()> {
    let mut kept: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| git_err("listing kept trees", e.to_string()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "kept"))
        .filter_map(|m| Some((std::fs::read_to_string(&m).ok()?, m.with_extension(""))))
        .collect();
    kept.sort();
    let excess = kept.len().saturating_sub(max);
    for (_, tree) in kept.into_iter().take(excess) {
        remove(top, &tree)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_and_write_their_json() {
        for (v, want) in [
            (json!("none"), Isolation::None),
            (json!(null), Isolation::None),
            (json!("readonly"), Isolation::Readonly),
            (json!({"kind": "readonly"}), Isolation::Readonly),
            (
                json!({"kind": "worktree", "ref": "main", "keep_on_error": true}),
                Isolation::Worktree(WorktreeSpec { git_ref: Some("main".into()), keep_on_error: true, max_kept: 4 }),
            ),
        ] {
            assert_eq!(Isolation::from_value(&v).unwrap(), want, "{v}");
        }
        let w = Isolation::from_value(&json!({"kind": "worktree", "max_kept": 2})).unwrap();
        assert_eq!(w.to_value(), json!({"kind": "worktree", "max_kept": 2}));
        for bad in [
            json!("container"),
            json!(3),
            json!({"ref": "x"}),
            json!({"kind": "worktree", "reff": "x"}),
            json!({"kind": "readonly", "ref": "x"}),
            json!({"kind": "worktree", "ref": "--upload-pack=x"}),
            json!({"kind": "worktree", "ref": ""}),
        ] {
            let e = Isolation::from_value(&bad).unwrap_err();
            assert!(e.to_string().contains("isolation"), "{bad}: {e}");
        }
    }
}
