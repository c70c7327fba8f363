//! Helpers of the CLI integration tests: a scratch copy of `examples/` and a
//! way to run the built `car` binary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh temporary directory.
pub fn tmp() -> PathBuf {
    let d = std::env::temp_dir().join(format!("car-cli-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        // What the example plans write (ignored by git) is not copied.
        if ["RELEASE_NOTES.md", "dist", "deployed", "state.json"].contains(&e.file_name().to_str().unwrap_or("")) {
            continue;
        }
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A scratch copy of `examples/` (plans, workspace, `.car`); runs never
/// touch the repository's own copy.
pub fn examples() -> PathBuf {
    let d = tmp();
    copy_dir(&repo().join("examples"), &d);
    d
}

/// What a run of the binary gave.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout and stderr together, for messages that may go to either.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

fn finish(o: Output) -> Run {
    Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Runs `car ARGS` in `cwd` with stdin closed (never a terminal).
pub fn car_in(cwd: &Path, args: &[&str]) -> Run {
    car_env(cwd, args, &[])
}

/// [`car_in`] with these environment variables set, and `NO_COLOR` and
/// `CLICOLOR_FORCE` cleared unless given.
pub fn car_env(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_car"));
    c.args(args).current_dir(cwd).stdin(Stdio::null()).env_remove("NO_COLOR").env_remove("CLICOLOR_FORCE");
    for (k, v) in env {
        c.env(k, v);
    }
    finish(c.output().unwrap())
}

/// Runs `car ARGS` in the examples copy `ex`.
pub fn car(ex: &Path, args: &[&str]) -> Run {
    car_in(ex, args)
}
