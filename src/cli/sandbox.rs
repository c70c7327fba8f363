//! `car sandbox check`: what this machine can enforce.

use super::{CliError, CliResult};

/// Prints each sandbox feature and, per preset, whether it can be enforced
/// and what is missing. Exit 0 when every preset can be, else 1.
pub fn check(as_json: bool) -> CliResult {
    let p = car_runtime::sandbox::probe();
    let report = p.report();
    let all = report["presets"].as_object().is_some_and(|m| m.values().all(|v| v["enforceable"] == true));
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| CliError::Runtime(e.to_string()))?);
        return Ok(if all { 0 } else { 1 });
    }
    let line = |name: &str, v: &serde_json::Value| {
        if v["ok"] == true {
            println!("  {name:<20} yes");
        } else {
            println!("  {name:<20} NO: {}", v["missing"].as_str().unwrap_or("?"));
        }
    };
    println!("Sandbox features of this machine:");
    println!("  {:<20} {}", "Landlock ABI", report["landlock_abi"]);
    line("Landlock", &report["landlock"]);
    println!("  {:<20} {}", "Landlock TCP rules", if report["landlock_network_rules"] == true { "yes" } else { "no" });
    println!(
        "  {:<20} {}",
        "Landlock scopes",
        if report["landlock_signal_scope"] == true { "yes (signals, abstract sockets)" } else { "no" }
    );
    line("user namespace", &report["user_namespace"]);
    line("network namespace", &report["network_namespace"]);
    line("mount namespace", &report["mount_namespace"]);
    line("pids cgroup", &report["pids_cgroup"]);
    println!("  {:<20} {}", "running as root", report["root"]);
    println!("Presets:");
    for (name, v) in report["presets"].as_object().into_iter().flatten() {
        if v["enforceable"] == true {
            println!("  {name:<20} enforceable");
        } else {
            let missing: Vec<&str> = v["missing"].as_array().into_iter().flatten().filter_map(|m| m.as_str()).collect();
            println!("  {name:<20} CANNOT be enforced: {}", missing.join("; "));
        }
    }
    Ok(if all { 0 } else { 1 })
}
