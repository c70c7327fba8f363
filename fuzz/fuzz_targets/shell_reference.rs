//! The shell matcher against bash itself. For a command the matcher allows
//! (allow `**`, deny `touch **` and `kill **`; the permission chain with the
//! `open` preset and the same deny rules must allow it too), bash runs it and
//! must never run `touch`: the verdict is never `allow` where bash shows a
//! denied command would run.
//!
//! Safety: only a command the matcher allows is run, and it runs as
//! `bash --norc --noprofile -r` (restricted: no `/` in command names, no
//! `command -p`, no output redirection, no `cd`, no `exec`, no `enable`)
//! with `kill` disabled, an empty environment, `PATH` holding only a fake
//! `touch` that records its invocation, in a scratch directory, inside a
//! new user + PID + network namespace when `unshare` works, under a
//! 5-second `timeout -s KILL`. No real command is reachable from it.
#![no_main]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use car_runtime::permission::shell::ShellRules;
use car_runtime::permission::{PermissionChain, Verdict};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

struct Env {
    root: PathBuf,
    bin: PathBuf,
    work: PathBuf,
    record: PathBuf,
    unshare: bool,
    rules: ShellRules,
    chain: PermissionChain,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("car-fuzz-shell-reference-{}", std::process::id()));
        let bin = root.join("bin");
        let work = root.join("work");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let record = root.join("touched");
        let stub = bin.join("touch");
        std::fs::write(&stub, format!("#!/bin/sh\nprintf '%s\\n' \"touch $*\" >> '{}'\n", record.display())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
        let unshare = Command::new("/usr/bin/unshare")
            .args(["-Unpf", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let rules = ShellRules::new(&["**"], &[], &["touch **", "kill **"]).unwrap();
        let chain = PermissionChain::from_json(&json!({
            "preset": "open",
            "deny": [{"tool": "shell", "argv": "touch **"}, {"tool": "shell", "argv": "kill **"}]
        }))
        .unwrap();
        Env { root, bin, work, record, unshare, rules, chain }
    })
}

/// Runs `cmd` under restricted bash as described above.
fn run(e: &Env, cmd: &str) {
    let script = format!("enable -n kill\n{cmd}");
    let mut c = Command::new("/usr/bin/timeout");
    c.args(["-s", "KILL", "5"]);
    if e.unshare {
        c.args(["/usr/bin/unshare", "-Unpf"]);
    }
    c.args(["/bin/bash", "--norc", "--noprofile", "-r", "-c", &script])
        .current_dir(&e.work)
        .env_clear()
        .env("PATH", &e.bin)
        .env("HOME", &e.work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _ = c.status();
}

fn touched(record: &Path) -> Option<String> {
    std::fs::read_to_string(record).ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(cmd) = std::str::from_utf8(data) else { return };
    if cmd.len() > 1024 || cmd.contains('\0') {
        return;
    }
    let e = env();
    if e.rules.check(cmd) != Verdict::Allow {
        return;
    }
    if e.chain.evaluate_named("shell", &json!({"command": cmd})).verdict != Verdict::Allow {
        return;
    }
    let _ = std::fs::remove_file(&e.record);
    run(e, cmd);
    if let Some(log) = touched(&e.record) {
        let _ = std::fs::remove_file(&e.record);
        panic!("the matcher allowed {cmd:?} but bash ran a denied command: {log}");
    }
    let _ = &e.root;
});
