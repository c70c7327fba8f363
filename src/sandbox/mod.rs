//! The sandbox under everything that runs a command: sandbox profiles, what
//! this machine can enforce, and the `subprocess` executor's runner.
//!
//! A profile bounds a child process with the kernel, not with text:
//!
//! - filesystem (Landlock): read everywhere or only listed paths; writes
//!   only under the root, a private temp directory (a tmpfs of the run's
//!   own) and listed paths; the root's `.car/` and approvals files mounted
//!   read-only in a private mount namespace, with a placeholder for those
//!   that do not exist yet (so not even a write-allowed profile can change
//!   or create them);
//! - network: `off` (a new network namespace, loopback down, and Landlock
//!   TCP rules denying every bind and connect where the ABI has them),
//!   `loopback` (a new network namespace whose own loopback is up: the
//!   command can talk to servers it starts, nothing else) or `on`;
//! - resources: CPU seconds, address space, processes (a pids cgroup, a
//!   reused slot with a parked spawning thread on cgroup v1, or
//!   `RLIMIT_NPROC` when not root), file size, open files; a wall-clock
//!   timeout that kills the process group and every process in the cgroup;
//! - environment: scrubbed to an allowlist.
//!
//! A profile the kernel cannot apply is refused with an error naming what is
//! missing ([`Probe`]); only `sandbox = "none"`, set by the operator, runs a
//! tool unconfined. See `docs/sandbox.md`.

mod cgroup;
mod forward;
mod probe;
mod protect;
mod run;
pub mod template;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use probe::{Probe, probe};
pub use protect::{open_append_locked, release_idle_placeholders};
pub use run::{Outcome, RunError, RunSpec, run};

/// The profile name that runs a tool unconfined (operator only).
pub const NONE: &str = "none";
/// The presets.
pub const PRESETS: [&str; 3] = ["read-only", "workspace-write", "open"];
/// The profile `shell` and subprocess tools run under when nothing says otherwise.
pub const DEFAULT_PROFILE: &str = "workspace-write";
/// Default wall-clock timeout of a sandboxed run (two minutes).
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Default process limit.
pub const DEFAULT_PROCESSES: u64 = 256;
/// Default open-file limit.
pub const DEFAULT_OPEN_FILES: u64 = 1024;
/// Default file-size limit (1 GiB).
pub const DEFAULT_FILE_SIZE: u64 = 1 << 30;
/// The environment variables passed through by default.
pub const DEFAULT_ENV: [&str; 8] = ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER"];

/// Network access of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// No network: a new network namespace with loopback down (plus Landlock
    /// TCP rules where the kernel has them).
    Off,
    /// Only the sandbox's own loopback (a new network namespace, `lo` up).
    Loopback,
    /// The host's network.
    On,
}

impl Network {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Off => "off",
            Network::Loopback => "loopback",
            Network::On => "on",
        }
    }
}

/// Filesystem access of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Filesystem {
    /// Read (where `read` allows), write only the private temp directory.
    ReadOnly,
    /// Read, and write under the root and the private temp directory.
    WorkspaceWrite,
    /// No Landlock filesystem rules (the protected files stay read-only).
    Open,
}

/// Resource limits (rlimits and a pids cgroup).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// CPU seconds (`RLIMIT_CPU`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Address space in bytes (`RLIMIT_AS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Processes and threads (a pids cgroup; `RLIMIT_NPROC` when not root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Largest file written, in bytes (`RLIMIT_FSIZE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_size_bytes: Option<u64>,
    /// Open file descriptors (`RLIMIT_NOFILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
}

/// A profile as written in the `[sandbox.profiles.NAME]` table: a preset to
/// start from and the keys that change it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    /// The preset this profile starts from (default `workspace-write`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// `read-only`, `workspace-write` or `open`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<Filesystem>,
    /// Read only these paths (absolute), plus the root and the temp
    /// directory; absent: read everywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Vec<String>>,
    /// More writable paths (absolute).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<String>,
    /// `off`, `loopback` or `on`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// Ports of the host's loopback the command may reach, under
    /// `network = "loopback"`: the run listens on `127.0.0.1:PORT` in its
    /// own namespace and the runtime forwards each connection to the
    /// host's `127.0.0.1:PORT`, for as long as the run lasts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loopback_ports: Vec<u16>,
    /// Wall-clock timeout in milliseconds; a call may ask for less, never more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Resource limits (each replaces the preset's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// The environment variables passed through (replaces the default list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
}

/// The `sandbox` section of the admission document.
///
/// ```toml
/// [sandbox]
/// default = "workspace-write"
/// tools = { shell = "build", legacy_tool = "none" }
///
/// [sandbox.profiles.build]
/// base = "workspace-write"
/// network = "loopback"
/// timeout_ms = 600000
/// limits = { processes = 512, memory_bytes = 8589934592 }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// The profile of `shell` and subprocess tools that name none
    /// (default `workspace-write`; `none` runs them unconfined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Tool name → profile name (`none`: unconfined). Wins over a subprocess
    /// tool definition's own `sandbox`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, String>,
    /// Named profiles.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub profiles: BTreeMap<String, ProfileSpec>,
}

/// A resolved profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Its name.
    pub name: String,
    /// Filesystem access.
    pub filesystem: Filesystem,
    /// Readable paths; `None`: everywhere.
    pub read: Option<Vec<PathBuf>>,
    /// Writable paths besides the root (workspace-write) and the temp directory.
    pub write: Vec<PathBuf>,
    /// Network access.
    pub network: Network,
    /// The host's loopback ports forwarded into the run (`loopback` only).
    pub loopback_ports: Vec<u16>,
    /// The wall-clock timeout.
    pub timeout: Duration,
    /// Resource limits.
    pub limits: Limits,
    /// The environment allowlist.
    pub env: Vec<String>,
}

fn preset(name: &str) -> Option<Profile> {
    let fs = match name {
        "read-only" => Filesystem::ReadOnly,
        "workspace-write" => Filesystem::WorkspaceWrite,
        "open" => Filesystem::Open,
        _ => return None,
    };
    Some(Profile {
        name: name.to_string(),
        filesystem: fs,
        read: None,
        write: Vec::new(),
        network: if fs == Filesystem::Open { Network::On } else { Network::Off },
        loopback_ports: Vec::new(),
        timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
        limits: Limits {
            cpu_seconds: None,
            memory_bytes: None,
            processes: Some(DEFAULT_PROCESSES),
            file_size_bytes: Some(DEFAULT_FILE_SIZE),
            open_files: Some(DEFAULT_OPEN_FILES),
        },
        env: DEFAULT_ENV.iter().map(|s| s.to_string()).collect(),
    })
}

fn bad(field: &str, msg: String) -> crate::Error {
    crate::Error::config(
        "invalid_sandbox_config",
        format!("invalid sandbox configuration: {field}: {msg}"),
        serde_json::json!({"field": field}),
    )
}

fn abs_paths(field: &str, v: &[String]) -> crate::Result<Vec<PathBuf>> {
    v.iter()
        .map(|p| {
            let pb = PathBuf::from(p);
            if pb.is_absolute() { Ok(pb) } else { Err(bad(field, format!("`{p}` is not an absolute path"))) }
        })
        .collect()
}

impl SandboxConfig {
    /// Checks every profile and every reference to one.
    pub fn check(&self) -> crate::Result<()> {
        for name in self.profiles.keys() {
            self.profile(name)?;
        }
        if let Some(d) = &self.default {
            self.resolve_name("sandbox.default", d)?;
        }
        for (tool, p) in &self.tools {
            self.resolve_name(&format!("sandbox.tools.{tool}"), p)?;
        }
        Ok(())
    }

    fn resolve_name(&self, field: &str, name: &str) -> crate::Result<Option<Profile>> {
        if name == NONE {
            return Ok(None);
        }
        if !self.profiles.contains_key(name) && preset(name).is_none() {
            return Err(bad(
                field,
                format!("unknown profile `{name}` (the presets are {}, or `none`)", PRESETS.join(", ")),
            ));
        }
        self.profile(name).map(Some)
    }

    /// The profile of that name: a declared one, else a preset.
    pub fn profile(&self, name: &str) -> crate::Result<Profile> {
        let field = format!("sandbox.profiles.{name}");
        let Some(spec) = self.profiles.get(name) else {
            return preset(name).ok_or_else(|| bad(&field, format!("unknown profile `{name}`")));
        };
        if name == NONE {
            return Err(bad(&field, "`none` is reserved (it runs a tool unconfined)".into()));
        }
        let base = spec.base.as_deref().unwrap_or(DEFAULT_PROFILE);
        let mut p = preset(base).ok_or_else(|| {
            bad(&format!("{field}.base"), format!("unknown preset `{base}` (one of {})", PRESETS.join(", ")))
        })?;
        p.name = name.to_string();
        if let Some(fs) = spec.filesystem {
            p.filesystem = fs;
        }
        if let Some(r) = &spec.read {
            p.read = Some(abs_paths(&format!("{field}.read"), r)?);
        }
        p.write = abs_paths(&format!("{field}.write"), &spec.write)?;
        if !p.write.is_empty() && p.filesystem == Filesystem::ReadOnly {
            return Err(bad(&format!("{field}.write"), "a read-only profile cannot list writable paths".into()));
        }
        if let Some(n) = spec.network {
            p.network = n;
        }
        if !spec.loopback_ports.is_empty() {
            let f = format!("{field}.loopback_ports");
            if p.network != Network::Loopback {
                return Err(bad(
                    &f,
                    format!(
                        "forwards ports into a `loopback` network only (this profile's is `{}`)",
                        p.network.as_str()
                    ),
                ));
            }
            if spec.loopback_ports.len() > car_sandbox_child::MAX_FORWARDED {
                return Err(bad(&f, format!("at most {} ports", car_sandbox_child::MAX_FORWARDED)));
            }
            let mut seen = std::collections::BTreeSet::new();
            for &port in &spec.loopback_ports {
                if port == 0 {
                    return Err(bad(&f, "port 0 is not a port".into()));
                }
                if !seen.insert(port) {
                    return Err(bad(&f, format!("port {port} is listed twice")));
                }
            }
            p.loopback_ports = spec.loopback_ports.clone();
        }
        if let Some(t) = spec.timeout_ms {
            if t == 0 {
                return Err(bad(&format!("{field}.timeout_ms"), "must be at least 1".into()));
            }
            p.timeout = Duration::from_millis(t);
        }
        if let Some(l) = spec.limits {
            let pick = |a: Option<u64>, b: Option<u64>| a.or(b);
            for (k, v) in [
                ("cpu_seconds", l.cpu_seconds),
                ("memory_bytes", l.memory_bytes),
                ("processes", l.processes),
                ("file_size_bytes", l.file_size_bytes),
                ("open_files", l.open_files),
            ] {
                if v == Some(0) {
                    return Err(bad(&format!("{field}.limits.{k}"), "must be at least 1".into()));
                }
            }
            p.limits = Limits {
                cpu_seconds: pick(l.cpu_seconds, p.limits.cpu_seconds),
                memory_bytes: pick(l.memory_bytes, p.limits.memory_bytes),
                processes: pick(l.processes, p.limits.processes),
                file_size_bytes: pick(l.file_size_bytes, p.limits.file_size_bytes),
                open_files: pick(l.open_files, p.limits.open_files),
            };
        }
        if let Some(e) = &spec.env {
            if let Some(bad_name) = e.iter().find(|n| n.is_empty() || n.contains('=') || n.contains('\0')) {
                return Err(bad(&format!("{field}.env"), format!("`{bad_name}` is not a variable name")));
            }
            p.env = e.clone();
        }
        Ok(p)
    }

    /// The profile a tool runs under: `sandbox.tools[tool]`, else the
    /// tool's own declaration (a subprocess tool's `sandbox`), else
    /// `sandbox.default`, else `workspace-write`. `None`: unconfined.
    pub fn for_tool(&self, tool: &str, declared: Option<&str>) -> crate::Result<Option<Profile>> {
        let (field, name) = if let Some(p) = self.tools.get(tool) {
            (format!("sandbox.tools.{tool}"), p.as_str())
        } else if let Some(d) = declared {
            (format!("tools.{tool}.sandbox"), d)
        } else if let Some(d) = &self.default {
            ("sandbox.default".to_string(), d.as_str())
        } else {
            ("sandbox.default".to_string(), DEFAULT_PROFILE)
        };
        // A tool definition may not declare itself unconfined: that is the
        // operator's `sandbox.tools` / `sandbox.default`.
        if declared.is_some() && name == NONE && !self.tools.contains_key(tool) {
            return Err(bad(&field, "only the operator's `sandbox.tools` or `sandbox.default` may say `none`".into()));
        }
        self.resolve_name(&field, name)
    }
}

/// Error-message prefixes the engine reads as error classes
/// (`sandbox_timeout`, `sandbox_limit`, `sandbox_unavailable`).
pub const TIMEOUT_PREFIX: &str = "sandbox timeout:";
/// See [`TIMEOUT_PREFIX`].
pub const LIMIT_PREFIX: &str = "sandbox limit:";
/// See [`TIMEOUT_PREFIX`].
pub const UNAVAILABLE_PREFIX: &str = "sandbox unavailable:";

/// Runs one command of `tool` in `root` under `profile` (the resolved
/// profile, `Ok(None)` for unconfined, or the error resolving it) and maps
/// how it ended to the tool's result, with the `SandboxRun` event's data.
pub fn execute_command(
    root: &std::path::Path,
    tool: &str,
    argv: &[String],
    timeout: Option<Duration>,
    profile: crate::Result<Option<Profile>>,
    max_output: usize,
) -> (Result<serde_json::Value, crate::ir::ToolFailure>, serde_json::Value) {
    use crate::ir::ToolFailure;
    use serde_json::json;
    let t0 = std::time::Instant::now();
    let mut ev = json!({"tool": tool});
    let profile = match profile {
        Ok(p) => p,
        Err(e) => {
            ev["profile"] = json!(null);
            ev["outcome"] = json!("unavailable");
            ev["error"] = json!(e.to_string());
            return (Err(ToolFailure::ordinary(format!("{UNAVAILABLE_PREFIX} {e}"))), ev);
        }
    };
    let name = profile.as_ref().map_or(NONE, |p| p.name.as_str()).to_string();
    ev["profile"] = json!(name);
    if let Some(p) = &profile {
        ev["filesystem"] = serde_json::to_value(p.filesystem).unwrap_or_default();
        ev["network"] = json!(p.network.as_str());
        if !p.loopback_ports.is_empty() {
            ev["loopback_ports"] = json!(p.loopback_ports);
        }
    }
    let spec = RunSpec { argv, root, profile: profile.as_ref(), timeout, max_output };
    let res = run(&spec);
    ev["duration_ms"] = json!(t0.elapsed().as_secs_f64() * 1000.0);
    let o = match res {
        Ok(o) => o,
        Err(RunError::Unavailable(m)) => {
            ev["outcome"] = json!("unavailable");
            ev["error"] = json!(m);
            return (Err(ToolFailure::ordinary(format!("{UNAVAILABLE_PREFIX} {m}"))), ev);
        }
        Err(RunError::Spawn(m)) => {
            ev["outcome"] = json!("spawn_error");
            ev["error"] = json!(m);
            return (Err(ToolFailure::ordinary(m)), ev);
        }
    };
    ev["exit_code"] = json!(o.exit_code);
    if profile.as_ref().is_some_and(|p| !p.loopback_ports.is_empty()) {
        ev["forwarded_connections"] = json!(o.forwarded_connections);
    }
    ev["signal"] = json!(o.signal);
    ev["timeout_ms"] = json!(o.timeout_ms);
    let tail = |s: &str| -> String { s.chars().rev().take(500).collect::<Vec<_>>().into_iter().rev().collect() };
    if o.timed_out {
        ev["outcome"] = json!("timeout");
        let also = if o.limit == Some("processes") { " (it also hit the process limit)" } else { "" };
        return (
            Err(ToolFailure::ordinary(format!(
                "{TIMEOUT_PREFIX} command timed out after {} ms under sandbox profile `{name}`; its process group was killed{also}: {}",
                o.timeout_ms,
                tail(&o.stderr)
            ))),
            ev,
        );
    }
    if let Some(l) = o.limit {
        ev["outcome"] = json!("limit");
        ev["limit"] = json!(l);
        let how = match (o.exit_code, o.signal) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            _ => "ended".into(),
        };
        return (
            Err(ToolFailure::ordinary(format!(
                "{LIMIT_PREFIX} command {how} after hitting the `{l}` limit of sandbox profile `{name}`: {}",
                tail(&o.stderr)
            ))),
            ev,
        );
    }
    ev["outcome"] = json!("exited");
    match o.exit_code {
        Some(0) => {
            let mut v = json!({"exit_code": 0, "stdout": o.stdout, "stderr": o.stderr, "sandbox": name});
            if o.background_killed {
                v["background_killed"] = json!(true);
            }
            (Ok(v), ev)
        }
        Some(c) => (Err(ToolFailure::ordinary(format!("command exited with status {c}: {}", tail(&o.stderr)))), ev),
        None => (
            Err(ToolFailure::ordinary(format!(
                "command was killed by signal {}: {}",
                o.signal.unwrap_or(0),
                tail(&o.stderr)
            ))),
            ev,
        ),
    }
}
