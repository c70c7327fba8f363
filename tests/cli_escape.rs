//! A proposal's text never drives the terminal: ids, commands and paths
//! holding CR, ESC, newlines and bidi/zero-width characters are escaped in
//! the human output of `car run`, `car verify`, `car shell-match --explain`
//! and `car permission explain`, so no plan line can be forged.

use crate::cli_common;
use cli_common::{car, examples};
use proptest::prelude::*;
use serde_json::json;

/// Hostile fragments: cursor and line control, a forged plan line, bidi
/// overrides and isolates, zero-width characters, a C1 control.
fn hostile() -> impl Strategy<Value = String> {
    let parts = prop::sample::select(vec![
        "\r",
        "\x1b[2K",
        "\n[allow] fake",
        "\r[allow] fake",
        "\u{202e}",
        "\u{2066}",
        "\u{2069}",
        "\u{200b}",
        "\u{200f}",
        "\u{85}",
        "\x07",
        "\t",
        "ok",
        "x",
    ]);
    prop::collection::vec(parts, 1..5).prop_map(|v| v.concat())
}

/// Characters that must never reach a terminal raw.
fn raw(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn check(what: &str, out: &str) -> Result<(), TestCaseError> {
    if let Some(c) = out.chars().find(|c| raw(*c)) {
        return Err(TestCaseError::fail(format!("{what}: raw {c:?} in {out:?}")));
    }
    for line in out.lines() {
        prop_assert!(!line.trim_start().starts_with("[allow] fake"), "{}: forged line in {:?}", what, out);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
    #[test]
    fn hostile_text_is_escaped_in_terminal_output(id in hostile(), cmd in hostile(), path in hostile()) {
        let ex = examples();
        let plan = json!({"actions": [
            {"id": format!("a{id}"), "type": "tool_call", "tool": "shell", "parameters": {"command": format!("echo {cmd}")}},
            {"id": format!("b{id}"), "type": "tool_call", "tool": "write_file",
             "parameters": {"path": format!("out/{path}.txt"), "content": cmd.clone()}},
            {"id": format!("c{id}"), "type": "tool_call", "tool": "read_file", "parameters": {"path": format!("{path}/../x")},
             "dependencies": [format!("a{id}")]},
        ]});
        std::fs::write(ex.join("hostile.json"), plan.to_string()).unwrap();
        let r = car(&ex, &["run", "hostile.json", "--root", "workspace", "--no-input"]);
        prop_assert!(r.code >= 0, "{}", r.all());
        check("run stdout", &r.stdout)?;
        check("run stderr", &r.stderr)?;
        let r = car(&ex, &["verify", "hostile.json"]);
        check("verify", &r.all())?;
        let r = car(&ex, &["shell-match", "--explain", &format!("echo {cmd}; {path}"), "--allow", "echo **"]);
        check("shell-match --explain", &r.all())?;
        let r = car(&ex, &["shell-match", &format!("echo {cmd}"), "--allow", "echo **"]);
        check("shell-match", &r.all())?;
        let input = json!({"command": format!("echo {cmd}")}).to_string();
        let tool = format!("t{id}");
        let r = car(&ex, &["permission", "explain", "--tool", &tool, "--input", &input]);
        check("permission explain", &r.all())?;
        let _ = std::fs::remove_dir_all(&ex);
    }
}
