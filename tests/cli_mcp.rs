//! `car run` with MCP tools from `.car/mcp.toml` (and from the `[mcp]`
//! section of `.car/permissions.toml`), against `examples/mcp_upstream.rs`.
#![cfg(feature = "mcp")]

use crate::cli_common;
use cli_common::{car_in, tmp};

fn upstream() -> String {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("examples").join("mcp_upstream");
    assert!(p.exists(), "{} is missing: build with `cargo build --all-targets --all-features`", p.display());
    p.to_string_lossy().into_owned()
}

const PLAN: &str = r#"{"id": "p", "actions": [
  {"id": "e", "type": "tool_call", "tool": "up_echo", "parameters": {"text": "hello over mcp"}},
  {"id": "a", "type": "tool_call", "tool": "up_add", "parameters": {"a": 1, "b": 2}}
]}"#;

#[test]
fn car_run_uses_the_tools_of_car_mcp_toml() {
    let root = tmp();
    std::fs::create_dir_all(root.join(".car")).unwrap();
    std::fs::write(root.join(".car/mcp.toml"), format!("[servers.t]\ncommand = {:?}\nprefix = \"up_\"\n", upstream()))
        .unwrap();
    std::fs::write(root.join("plan.json"), PLAN).unwrap();
    let r = car_in(&root, &["run", "plan.json", "--root", ".", "--no-input", "--json"]);
    assert_eq!(r.code, 0, "{}", r.all());
    let out: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|_| panic!("{}", r.all()));
    let results = out["results"].as_array().or_else(|| out["result"]["results"].as_array()).expect("results");
    let by = |id: &str| results.iter().find(|x| x["action_id"] == id).unwrap().clone();
    assert_eq!(by("e")["output"], "hello over mcp");
    assert_eq!(by("a")["output"]["sum"], 3.0);

    // The permissions file's [mcp] section, with a deny rule on one tool.
    std::fs::remove_file(root.join(".car/mcp.toml")).unwrap();
    std::fs::write(
        root.join(".car/permissions.toml"),
        format!("deny = [{{ tool = \"up_add\" }}]\n[mcp.servers.t]\ncommand = {:?}\nprefix = \"up_\"\n", upstream()),
    )
    .unwrap();
    let r = car_in(&root, &["run", "plan.json", "--root", ".", "--no-input"]);
    assert_eq!(r.code, 1, "the denied action fails the run: {}", r.all());
    assert!(r.all().contains("up_add"), "{}", r.all());

    // A malformed .car/mcp.toml is bad input naming the file.
    std::fs::remove_file(root.join(".car/permissions.toml")).unwrap();
    std::fs::write(root.join(".car/mcp.toml"), "[servers.t]\ncommand = 5\n").unwrap();
    let r = car_in(&root, &["run", "plan.json", "--root", ".", "--no-input"]);
    assert_eq!(r.code, 2, "{}", r.all());
    assert!(r.all().contains("mcp.toml"), "{}", r.all());
    let _ = std::fs::remove_dir_all(&root);
}
