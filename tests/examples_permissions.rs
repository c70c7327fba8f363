//! The shipped example permissions are safe to copy: nothing they allow
//! without asking writes outside the root or runs code the agent can rewrite
//! with `write_file`.

use std::path::Path;

use car_runtime::ir::Action;
use car_runtime::permission::Verdict;
use car_runtime::permission::shell::ShellRules;
use car_runtime::policy::PolicyEngine;
use serde_json::{Map, Value, json};

fn example_shell_rules() -> ShellRules {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/.car/permissions.toml");
    let doc: toml::Value = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let list = |key: &str| -> Vec<String> {
        doc["shell"]
            .get(key)
            .and_then(|v| v.as_array())
            .map_or(Vec::new(), |a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
    };
    ShellRules::new(&list("allow"), &list("ask"), &list("deny")).unwrap()
}

#[test]
fn the_example_shell_allow_list_lets_no_writing_option_through() {
    let rules = example_shell_rules();
    for cmd in [
        "git diff --no-index --output=/outside/file a b",
        "git diff --output=/outside/file",
        "git diff --output /outside/file",
        "git diff HEAD --output=x",
        "git diff --cached --output=x",
        "git diff --ext-diff",
        "git status --porcelain > /outside/file",
        "ls > /outside/file",
    ] {
        assert_ne!(rules.check(cmd), Verdict::Allow, "`{cmd}` runs without asking");
    }
    for cmd in ["git diff", "git diff --stat", "git diff --cached", "git status", "ls -la build"] {
        assert_eq!(rules.check(cmd), Verdict::Allow, "`{cmd}`");
    }
}

fn write(path: &str) -> Action {
    let mut a = Action::tool_call("write_file");
    a.id = "w".into();
    a.parameters = json!({"path": path, "content": "x"}).as_object().cloned().unwrap().into();
    a
}

#[test]
fn the_example_policy_denies_rewriting_what_allowed_commands_run() {
    let mut e = PolicyEngine::new();
    e.load_policy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/.car/policies")).unwrap();
    let state: Map<String, Value> = Map::new();
    for path in [
        "scripts/test.sh",
        "./scripts/smoke.sh",
        "x/../scripts/rollback.sh",
        "Scripts/test.sh",
        ".git/config",
        ".GIT/hooks/pre-commit",
        ".env",
    ] {
        assert!(!e.check(&write(path), &state).is_empty(), "write_file `{path}` is not denied");
    }
    assert!(e.check(&write("RELEASE_NOTES.md"), &state).is_empty());
    assert!(e.check(&write("build/CLEANED"), &state).is_empty());
}
