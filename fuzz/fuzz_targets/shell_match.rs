//! The shell lexer and matcher. The input is split at the first NUL byte into
//! a rule list (one pattern a line, prefixed `+` allow, `?` ask, `!` deny) and
//! a command. Properties: no panic; a command matched with no rules at all is
//! never allowed; adding a deny rule never turns a non-allow into allow;
//! `check` and `scan` agree.
#![no_main]

use car_runtime::permission::Verdict;
use car_runtime::permission::shell::ShellRules;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (rules_text, command) = text.split_once('\0').unwrap_or(("", text));
    let (mut allow, mut ask, mut deny) = (Vec::new(), Vec::new(), Vec::new());
    for line in rules_text.lines() {
        match line.split_at_checked(1) {
            Some(("+", p)) => allow.push(p),
            Some(("?", p)) => ask.push(p),
            Some(("!", p)) => deny.push(p),
            _ => {}
        }
    }
    let empty = ShellRules::new::<&str>(&[], &[], &[]).unwrap();
    assert_ne!(empty.check(command), Verdict::Allow, "no rules never allow {command:?}");
    let Ok(rules) = ShellRules::new(&allow, &ask, &deny) else { return };
    let v = rules.check(command);
    assert_eq!(rules.scan(command).verdict, v);
    if v != Verdict::Allow {
        deny.push("never-a-real-command-zz");
        let stricter = ShellRules::new(&allow, &ask, &deny).unwrap();
        assert_ne!(stricter.check(command), Verdict::Allow);
    }
});
