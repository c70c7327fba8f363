//! The matcher against bash itself, on generated commands (the same check
//! as `fuzz/fuzz_targets/shell_reference.rs`, without cargo-fuzz): a
//! command the matcher allows (allow `**`, deny `touch **` and `kill **`)
//! is run by restricted bash with an empty environment, `PATH` holding only
//! a fake `touch` that records its invocation, in a scratch directory, in a
//! new user + PID + network namespace when `unshare` works, under a timeout;
//! the fake `touch` must never run. Nothing the matcher does not allow is
//! run, and no real command is reachable from the shell.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use car_runtime::permission::{ShellRules, Verdict};
use proptest::prelude::*;

struct Sandbox {
    root: PathBuf,
    unshare: bool,
}

impl Sandbox {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "car-shell-reference-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("work")).unwrap();
        let stub = root.join("bin/touch");
        let record = root.join("touched");
        std::fs::write(&stub, format!("#!/bin/sh\nprintf '%s\\n' \"touch $*\" >> '{}'\n", record.display())).unwrap();
        std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
        let unshare = Command::new("/usr/bin/unshare")
            .args(["-Unpf", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Sandbox { root, unshare }
    }

    /// Runs `cmd`; true when the fake `touch` ran.
    fn touches(&self, cmd: &str) -> bool {
        let record = self.root.join("touched");
        let _ = std::fs::remove_file(&record);
        let script = format!("enable -n kill\n{cmd}");
        let mut c = Command::new("/usr/bin/timeout");
        c.args(["-s", "KILL", "5"]);
        if self.unshare {
            c.args(["/usr/bin/unshare", "-Unpf"]);
        }
        c.args(["/bin/bash", "--norc", "--noprofile", "-r", "-c", &script])
            .current_dir(self.root.join("work"))
            .env_clear()
            .env("PATH", self.root.join("bin"))
            .env("HOME", self.root.join("work"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = c.status();
        record.exists()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn rules() -> ShellRules {
    ShellRules::new(&["**"], &[], &["touch **", "kill **"]).unwrap()
}

/// The sandbox sees a real invocation of the fake `touch`, and restricted
/// bash refuses the ways out of it.
#[test]
fn the_sandbox_sees_touch_and_nothing_else_is_reachable() {
    let s = Sandbox::new();
    assert!(s.touches("touch marker"));
    assert!(s.touches("builtin echo x; command touch m"));
    assert!(!s.touches("echo touch"));
    assert!(!s.touches("command -p ls"));
}

/// Pieces of commands: bash syntax around `touch` in many spellings.
fn piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "touch m",
        "t[o]uch m",
        "to?ch m",
        "'touch' m",
        "\\touch m",
        "command touch m",
        "builtin touch m",
        "eval touch m",
        "eval -- 'touch m'",
        "trap 'touch m' EXIT",
        "mapfile -C 'touch m' -c 1 a",
        "echo",
        "true",
        ":",
        "ls",
        "x=1",
        "declare a",
        "printf -v v '%s' x",
        "read v",
        "test -v 'a[$(touch m)]'",
        "let x=1",
        "(( 1 ))",
        "(( x ))",
        "$(",
        ")",
        "`",
        "'",
        "\"",
        "{",
        "}",
        "(",
        "((",
        "))",
        "[[",
        "]]",
        "-n",
        "<(",
        ">",
        "<",
        "2>&1",
        "&&",
        "||",
        "|",
        ";",
        "&",
        "\n",
        "#",
        "\\",
        "$",
        "~",
        "*",
        "a[",
        "]",
        "=",
        "-c",
        "sh",
        "bash",
        "source",
        ".",
        "printf",
        "%s",
        "-v",
        "x",
        "m",
        "enable",
        "hash",
        "alias t=touch",
        "t m",
        "type",
        "fc",
        "compgen -C 'touch m' x",
        "complete",
        "bind",
        "-x",
        "exec",
        "time",
        "!",
        "if",
        "then",
        "fi",
        "for",
        "do",
        "done",
        "case",
        "esac",
        "in",
        "function",
        "f",
        "()",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn bash_never_runs_touch_where_the_matcher_allows(
        pieces in prop::collection::vec((piece(), prop::sample::select(vec![" ", "", " ", "\n"])), 1..7),
    ) {
        let mut cmd = String::new();
        for (p, sep) in &pieces {
            cmd.push_str(p);
            cmd.push_str(sep);
        }
        if rules().check(&cmd) == Verdict::Allow {
            let s = Sandbox::new();
            prop_assert!(!s.touches(&cmd), "the matcher allowed {:?} and bash ran touch", cmd);
        }
    }
}
