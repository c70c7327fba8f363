//! The sandbox through `car run`: a plan whose shell commands are allowed
//! (`--yes`) still cannot write outside the root or through a symlink out of
//! it, change `.car/`, see the host's environment, leave a process behind,
//! fork past the process limit or reach the host's loopback other than
//! through `loopback_ports`; `car sandbox check`.

use crate::cli_common;
use std::process::{Command, Stdio};

use serde_json::Value;

#[test]
fn sandbox_check_reports_every_preset_enforceable() {
    let d = cli_common::tmp();
    let r = cli_common::car_in(&d, &["sandbox", "check", "--json"]);
    let v: Value = serde_json::from_str(&r.stdout).expect("json report");
    for (name, p) in v["presets"].as_object().unwrap() {
        assert_eq!(p["enforceable"], true, "preset `{name}` cannot be enforced here: {}", p["missing"]);
    }
    assert_eq!(r.code, 0, "{}", r.all());
    let r = cli_common::car_in(&d, &["sandbox", "check"]);
    assert!(r.stdout.contains("workspace-write") && r.stdout.contains("enforceable"), "{}", r.stdout);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn car_run_shell_is_sandboxed() {
    let d = cli_common::tmp();
    let ws = d.join("ws");
    std::fs::create_dir_all(ws.join(".car")).unwrap();
    std::fs::write(
        ws.join(".car/permissions.toml"),
        "[sandbox]\ndefault = \"small\"\n\n[sandbox.profiles.small]\nlimits = { processes = 16 }\n",
    )
    .unwrap();
    let outside = d.join("outside.txt");
    let plan = serde_json::json!({"actions": [
        {"id": "inside", "type": "tool_call", "tool": "shell", "parameters": {"command": "echo in > in.txt"}},
        {"id": "outside", "type": "tool_call", "tool": "shell", "parameters": {"command": format!("echo x > {}", outside.display())}, "failure_behavior": "skip", "max_retries": 0},
        {"id": "config", "type": "tool_call", "tool": "shell", "parameters": {"command": "d=.ca; echo evil >> ${d}r/permissions.toml"}, "failure_behavior": "skip", "max_retries": 0},
        {"id": "env", "type": "tool_call", "tool": "shell", "parameters": {"command": "echo ${CAR_TEST_SECRET:-unset}"}},
        {"id": "bg", "type": "tool_call", "tool": "shell", "parameters": {"command": "sleep 60 & echo $! > bg.pid; sleep 60", "timeout_ms": 1000}, "failure_behavior": "skip", "max_retries": 0},
        {"id": "arith", "type": "tool_call", "tool": "shell", "parameters": {"command": format!("echo $(( $(echo 1 > {}; echo 2) ))", outside.display())}, "failure_behavior": "skip", "max_retries": 0},
        {"id": "symlink", "type": "tool_call", "tool": "shell", "parameters": {"command": "echo pwned > link"}, "failure_behavior": "skip", "max_retries": 0},
        {"id": "forks", "type": "tool_call", "tool": "shell", "parameters": {"command": "i=0; while [ $i -lt 200 ]; do sleep 2 & i=$((i+1)); done; echo $i", "timeout_ms": 20000}, "failure_behavior": "skip", "max_retries": 0}
    ]});
    let victim = d.join("victim.txt");
    std::fs::write(&victim, "original\n").unwrap();
    std::os::unix::fs::symlink(&victim, ws.join("link")).unwrap();
    std::fs::write(d.join("plan.json"), plan.to_string()).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_car"))
        .args(["run", "plan.json", "--root", "ws", "--yes", "--json"])
        .current_dir(&d)
        .env("CAR_TEST_SECRET", "hunter2")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let by = |id: &str| v["results"].as_array().unwrap().iter().find(|r| r["action_id"] == id).unwrap().clone();
    assert_eq!(by("inside")["status"], "succeeded", "{v}");
    assert_eq!(std::fs::read_to_string(ws.join("in.txt")).unwrap(), "in\n");
    assert!(by("outside")["error"].as_str().unwrap().contains("Permission denied"), "{v}");
    assert!(!outside.exists());
    assert_eq!(by("config")["status"], "skipped", "{v}");
    assert_eq!(
        std::fs::read_to_string(ws.join(".car/permissions.toml")).unwrap(),
        "[sandbox]\ndefault = \"small\"\n\n[sandbox.profiles.small]\nlimits = { processes = 16 }\n"
    );
    assert_eq!(by("env")["output"]["stdout"], "unset\n", "{v}");
    assert!(by("bg")["error"].as_str().unwrap().starts_with("sandbox timeout:"), "{v}");
    let pid = std::fs::read_to_string(ws.join("bg.pid")).unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.rsplit(')').next().unwrap().trim_start().starts_with('Z'),
        "sleep {pid} left behind"
    );
    assert!(!outside.exists(), "the arithmetic substitution could not write outside");
    assert!(by("symlink")["error"].as_str().unwrap().contains("Permission denied"), "{v}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original\n");
    // `.car/permissions.toml` makes `small` (16 processes) the default.
    let forks = by("forks")["error"].as_str().unwrap().to_string();
    assert!(forks.starts_with("sandbox limit:") && forks.contains("`processes` limit"), "{v}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn car_run_reaches_a_host_loopback_server_only_through_loopback_ports() {
    let (port, _) = crate::sandbox::echo_server();
    let d = cli_common::tmp();
    let ws = d.join("ws");
    std::fs::create_dir_all(ws.join(".car")).unwrap();
    std::fs::write(
        ws.join(".car/permissions.toml"),
        format!("[sandbox.profiles.fwd]\nnetwork = \"loopback\"\nloopback_ports = [{port}]\n"),
    )
    .unwrap();
    let cmd = crate::sandbox::echo_cmd(port);
    // Declared but not chosen, the profile changes nothing: `shell` runs
    // under `workspace-write` (network off). Then it is made the default.
    let plan = serde_json::json!({"actions": [
        {"id": "off", "type": "tool_call", "tool": "shell", "parameters": {"command": cmd}, "failure_behavior": "skip", "max_retries": 0}
    ]});
    std::fs::write(d.join("plan.json"), plan.to_string()).unwrap();
    let run = |d: &std::path::Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_car"))
            .args(["run", "plan.json", "--root", "ws", "--yes", "--json"])
            .current_dir(d)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let v: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {}", String::from_utf8_lossy(&o.stderr)));
        v["results"][0].clone()
    };
    let r = run(&d);
    let e = r["error"].as_str().unwrap_or_default();
    assert!(e.contains("Permission denied") || e.contains("Network is unreachable"), "{r}");
    std::fs::write(
        ws.join(".car/permissions.toml"),
        format!("[sandbox]\ndefault = \"fwd\"\n\n[sandbox.profiles.fwd]\nnetwork = \"loopback\"\nloopback_ports = [{port}]\n"),
    )
    .unwrap();
    let r = run(&d);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["output"]["stdout"], "echo:ping\n", "{r}");
    std::fs::remove_dir_all(d).unwrap();
}
