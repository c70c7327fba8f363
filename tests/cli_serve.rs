//! `car serve` starts the same daemon as `car-server`, with the same flags.
#![cfg(feature = "server")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn car_serve_starts_the_daemon_and_refuses_unknown_flags() {
    let car = env!("CARGO_BIN_EXE_car");
    let home = std::env::temp_dir().join(format!("car-serve-{}", std::process::id()));
    let mut child = Command::new(car)
        .args(["serve", "--port", "0", "--no-auth"])
        .env("CAR_HOME", &home)
        .stderr(Stdio::piped())
        .spawn()
        .expect("car serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut line = String::new();
    BufReader::new(stderr).read_line(&mut line).expect("a line");
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("listening on ws://127.0.0.1:"), "{line}");
    assert!(line.contains("auth off"), "{line}");

    let out = Command::new(car).args(["serve", "--bogus"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option `--bogus`"));
    let _ = std::fs::remove_dir_all(&home);
}
