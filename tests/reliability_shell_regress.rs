//! Regression tests for what the shell-matcher fuzz target found.

use car_runtime::permission::Verdict;
use car_runtime::permission::shell::ShellRules;

/// Found by `fuzz/fuzz_targets/shell_match.rs` (input `()<\x02`): an empty
/// group with only an input redirection was allowed with no rules at all,
/// because the group's redirection tail is neutral and nothing else was left
/// to decide. Nothing is allowed by nothing: it asks.
#[test]
fn an_empty_group_with_only_redirections_is_never_allowed() {
    let none = ShellRules::new::<&str>(&[], &[], &[]).unwrap();
    let some = ShellRules::new(&["ls", "cat **"], &[], &["rm **"]).unwrap();
    for cmd in ["()<\u{2}", "()<x", "( ) < f", "{ ; } < f", "( ( ) ) <f", "()<a <b"] {
        assert_eq!(none.check(cmd), Verdict::Ask, "{cmd:?} with no rules");
        assert_eq!(some.check(cmd), Verdict::Ask, "{cmd:?} with rules");
    }
    // A group with a real command still decides by that command.
    assert_eq!(some.check("( ls ) < f"), Verdict::Allow);
    assert_eq!(some.check("( rm x ) < f"), Verdict::Deny);
    assert_eq!(some.check("( ls ) > f"), Verdict::Ask);
}
