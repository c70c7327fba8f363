//! `car shell-match --explain`: the deciding rule and token per segment.

use std::process::Command;

fn car(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_car")).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn explain_shows_the_rule_and_the_token() {
    let (code, out, err) =
        car(&["shell-match", "ls; sudo rm -rf /[t]mp", "--allow", "**", "--deny", "rm -rf /tmp", "--explain"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("verdict: deny\n"), "{out}");
    assert!(out.contains("rule:  deny `rm -rf /tmp`"), "{out}");
    assert!(out.contains("token: `/[t]mp`"), "{out}");
    assert!(out.contains("rule:  allow `**`"), "{out}");
    assert!(out.contains("a denied command inside this wrapper"), "{out}");

    let (code, out, _) = car(&["shell-match", "ls &&", "--allow", "ls", "--explain", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "ask");
    assert_eq!(v["parse_failed"], true);
    assert_eq!(v["segments"][0]["rule"], "ls");

    // Without --explain the output is unchanged: the verdict alone.
    let (_, out, _) = car(&["shell-match", "rm -rf /[t]mp", "--allow", "**", "--deny", "rm -rf /tmp"]);
    assert_eq!(out.trim(), "deny");
    // A bad pattern is bad input.
    let (code, _, err) = car(&["shell-match", "ls", "--allow", "a ** b", "--explain"]);
    assert_eq!(code, 2);
    assert!(err.contains("a ** b"), "{err}");
    // --json (or --format json) implies --explain.
    let (code, out, _) = car(&["shell-match", "ls", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v.get("verdict").is_some(), "{v}");
}
