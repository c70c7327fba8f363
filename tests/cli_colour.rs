//! Colour in `car`'s human output: only the CLI's own words (verdicts,
//! severities, progress states) are painted, only on a terminal or under
//! `CLICOLOR_FORCE`, never under `NO_COLOR`; text from a proposal stays
//! escaped with colour on.

use crate::cli_common::tmp;

fn car_env(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let r = crate::cli_common::car_env(dir, args, env);
    (r.code, format!("{}{}", r.stdout, r.stderr))
}

#[test]
fn verdicts_and_severities_are_coloured_only_when_asked_and_never_under_no_color() {
    let dir = tmp();
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    // An id with an escape sequence of its own, a misspelled field (a
    // warning), an unknown dependency (an error).
    std::fs::write(
        dir.join("plan.json"),
        r#"{"actions":[{"id":"a\u001b[32m","type":"tool_call","tool":"calculate","parameters":{"expression":"1+1"},"dependecies":[]},
                       {"id":"b","type":"state_write","dependencies":["ghost"],"parameters":{"key":"k","value":1}}]}"#,
    )
    .unwrap();
    let (code, forced) = car_env(&dir, &["verify", "plan.json"], &[("CLICOLOR_FORCE", "1")]);
    assert_eq!(code, 1, "{forced}");
    assert!(forced.contains("  \x1b[31merror\x1b[0m   b: "), "{forced:?}");
    assert!(forced.contains("  \x1b[33mwarning\x1b[0m a\\x1b[32m: unknown field"), "{forced:?}");
    // The proposal's own escape is shown escaped, never sent as it is.
    assert!(!forced.contains("a\x1b[32m"), "{forced:?}");

    for env in [vec![], vec![("NO_COLOR", "1"), ("CLICOLOR_FORCE", "1")], vec![("CLICOLOR_FORCE", "0")]] {
        let (_, plain) = car_env(&dir, &["verify", "plan.json"], &env);
        assert!(!plain.contains("\x1b["), "{env:?}: {plain:?}");
        assert!(plain.contains("  error   b: ") && plain.contains("  warning a\\x1b[32m: "), "{plain:?}");
    }

    // car run: the plan's verdict marks and the progress states.
    std::fs::write(
        dir.join("run.json"),
        r#"{"actions":[{"id":"c","type":"tool_call","tool":"calculate","parameters":{"expression":"2*3"}}]}"#,
    )
    .unwrap();
    let (code, forced) = car_env(&dir, &["run", "run.json", "--root", "ws", "--no-input"], &[("CLICOLOR_FORCE", "1")]);
    assert_eq!(code, 0, "{forced}");
    assert!(forced.contains("  [\x1b[32mallow\x1b[0m] c: "), "{forced:?}");
    assert!(forced.contains("  \x1b[32mok\x1b[0m       c (calculate)"), "{forced:?}");
    let (_, plain) = car_env(&dir, &["run", "run.json", "--root", "ws", "--no-input"], &[("NO_COLOR", "x")]);
    assert!(
        !plain.contains("\x1b[") && plain.contains("  [allow] c: ") && plain.contains("  ok       c (calculate)"),
        "{plain:?}"
    );
}
