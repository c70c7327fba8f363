//! What this machine can enforce, found by trying it: each feature is
//! applied to a real child (`true`) once per process and the answer kept.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

use super::{Filesystem, Network, Profile};

/// Landlock ABI the filesystem profiles need (3: the truncate right, Linux 6.2).
pub const MIN_FS_ABI: i32 = 3;

/// The machine's sandboxing features. Each `Err` says why it is missing.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The kernel's Landlock ABI (0: none).
    pub landlock_abi: i32,
    /// Landlock applied to a child.
    pub landlock: Result<(), String>,
    /// A child entered a new user namespace (with its id maps).
    pub user_ns: Result<(), String>,
    /// A child entered new user and network namespaces and brought `lo` up.
    pub net_ns: Result<(), String>,
    /// A child entered new user and mount namespaces and bind-mounted a path
    /// read-only.
    pub mount_ns: Result<(), String>,
    /// A pids cgroup the runtime can create children of (needed for the
    /// process limit when running as root, where `RLIMIT_NPROC` is not
    /// enforced).
    pub pids_cgroup: Result<PathBuf, String>,
    /// The runtime's effective uid is 0.
    pub root: bool,
}

fn try_spawn(setup: car_sandbox_child::Setup) -> Result<(), String> {
    let mut cmd = Command::new("true");
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    car_sandbox_child::install(&mut cmd, setup);
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("the probe child `true` exited with {s}")),
        Err(e) => Err(super::run::spawn_error(&e)),
    }
}

fn id_maps() -> (Option<std::ffi::CString>, Option<std::ffi::CString>) {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    (std::ffi::CString::new(format!("{uid} {uid} 1")).ok(), std::ffi::CString::new(format!("{gid} {gid} 1")).ok())
}

fn probe_now() -> Probe {
    let abi = car_sandbox_child::landlock_abi();
    let landlock = if abi < 1 {
        Err("the kernel has no Landlock (not built in, or not enabled at boot: add `landlock` to the `lsm=` boot parameter)".to_string())
    } else {
        match super::run::landlock_ruleset(abi, &super::preset("read-only").unwrap_or_else(read_only), &[], None) {
            Ok(fd) => try_spawn(car_sandbox_child::Setup { landlock: fd, ..Default::default() }),
            Err(e) => Err(e),
        }
    };
    let (uid_map, gid_map) = id_maps();
    let user_ns = try_spawn(car_sandbox_child::Setup {
        user_ns: true,
        uid_map: uid_map.clone(),
        gid_map: gid_map.clone(),
        ..Default::default()
    });
    let net_ns = try_spawn(car_sandbox_child::Setup {
        user_ns: true,
        net_ns: true,
        loopback_up: true,
        uid_map: uid_map.clone(),
        gid_map: gid_map.clone(),
        ..Default::default()
    });
    let tmp = std::env::temp_dir().join(format!("car-sandbox-probe-{}", uuid::Uuid::new_v4()));
    let mount_ns = match std::fs::create_dir(&tmp) {
        Ok(()) => {
            let r = match std::ffi::CString::new(tmp.to_string_lossy().into_owned()) {
                Ok(p) => try_spawn(car_sandbox_child::Setup {
                    user_ns: true,
                    uid_map,
                    gid_map,
                    readonly_paths: vec![p.clone()],
                    tmpfs: Some((p, c"mode=0700".to_owned())),
                    ..Default::default()
                }),
                Err(e) => Err(e.to_string()),
            };
            let _ = std::fs::remove_dir(&tmp);
            r
        }
        Err(e) => Err(format!("cannot create a probe directory under {}: {e}", std::env::temp_dir().display())),
    };
    let pids_cgroup = super::cgroup::pids_cgroup_parent();
    Probe {
        landlock_abi: abi,
        landlock,
        user_ns,
        net_ns,
        mount_ns,
        pids_cgroup,
        root: rustix::process::geteuid().is_root(),
    }
}

fn read_only() -> Profile {
    Profile {
        name: "read-only".into(),
        filesystem: Filesystem::ReadOnly,
        read: None,
        write: vec![],
        network: Network::Off,
        loopback_ports: vec![],
        timeout: std::time::Duration::from_secs(1),
        limits: Default::default(),
        env: vec![],
    }
}

/// The machine's features, probed once per process.
pub fn probe() -> &'static Probe {
    static P: OnceLock<Probe> = OnceLock::new();
    P.get_or_init(probe_now)
}

fn status(r: &Result<(), String>) -> Value {
    match r {
        Ok(()) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "missing": e}),
    }
}

impl Probe {
    /// What `profile` needs that this machine lacks, each naming the
    /// feature; empty when it can be enforced.
    pub fn missing(&self, profile: &Profile) -> Vec<String> {
        let mut m = Vec::new();
        if let Err(e) = &self.user_ns {
            m.push(format!("unprivileged user namespaces: {e}"));
        }
        if let Err(e) = &self.mount_ns {
            m.push(format!("a private mount namespace (the protected files are mounted read-only, the temp directory is a tmpfs): {e}"));
        }
        if profile.filesystem != Filesystem::Open {
            if let Err(e) = &self.landlock {
                m.push(format!("Landlock filesystem rules: {e}"));
            } else if self.landlock_abi < MIN_FS_ABI {
                m.push(format!(
                    "Landlock ABI {MIN_FS_ABI} (the truncate right, Linux 6.2); this kernel has ABI {}",
                    self.landlock_abi
                ));
            }
        }
        if profile.network != Network::On
            && let Err(e) = &self.net_ns
        {
            m.push(format!("a network namespace (network `{}`): {e}", profile.network.as_str()));
        }
        if profile.limits.processes.is_some()
            && self.root
            && let Err(e) = &self.pids_cgroup
        {
            m.push(format!(
                "a pids cgroup for the process limit (running as root, where RLIMIT_NPROC is not enforced): {e}"
            ));
        }
        m
    }

    /// The report of `car sandbox check`: each feature, and per preset
    /// whether it can be enforced and what is missing.
    pub fn report(&self) -> Value {
        let presets: serde_json::Map<String, Value> = super::PRESETS
            .iter()
            .filter_map(|n| super::preset(n))
            .map(|p| {
                let missing = self.missing(&p);
                (p.name.clone(), json!({"enforceable": missing.is_empty(), "missing": missing}))
            })
            .collect();
        json!({
            "landlock_abi": self.landlock_abi,
            "landlock": status(&self.landlock),
            "landlock_network_rules": self.landlock_abi >= 4,
            "landlock_signal_scope": self.landlock_abi >= 6,
            "user_namespace": status(&self.user_ns),
            "network_namespace": status(&self.net_ns),
            "mount_namespace": status(&self.mount_ns),
            "pids_cgroup": match &self.pids_cgroup {
                Ok(p) => json!({"ok": true, "path": p.display().to_string()}),
                Err(e) => json!({"ok": false, "missing": e}),
            },
            "root": self.root,
            "presets": presets,
        })
    }
}
