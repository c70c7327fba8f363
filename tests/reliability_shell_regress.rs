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

/// Found by `fuzz/fuzz_targets/shell_match.rs` in an optimised
/// AddressSanitizer run (a 781-byte input of `cgexec` and `exec` words that
/// took 25 s with one deny rule): a suffix wrapper's suffixes were each
/// unwrapped again through the wrappers inside them, so the work grew
/// exponentially with the wrappers; `eval` inside such chains re-joined the
/// rest into new scripts along exponentially many paths. A command's scan
/// now judges each argv of a segment once and stops at
/// `MAX_SCAN_WORK` with an uncertain verdict (ask, never allow). These
/// generated chains did not finish on the earlier code; each must finish,
/// never be allowed where a deny rule exists, and find a deny it can reach.
#[test]
fn wrapper_chains_take_bounded_work_and_never_come_out_allow() {
    let rules = ShellRules::new(&["ls", "ls **"], &[], &["rm **"]).unwrap();
    let blowup = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shell_match_wrapper_blowup.txt"),
    )
    .unwrap();
    assert_ne!(rules.check(&blowup), Verdict::Allow);
    let none_but_deny = ShellRules::new::<&str>(&[], &[], &["never-a-real-command-zz"]).unwrap();
    assert_ne!(none_but_deny.check(&blowup), Verdict::Allow);
    let links = [
        "cgexec ",
        "exec ",
        "strace ",
        "eval ",
        "nice ",
        "env ",
        "timeout 1 ",
        "command ",
        "sh -c ",
        "bash -c eval ",
        "unshare ",
        "nohup ",
        "builtin ",
        "xargs ",
    ];
    // Every pair of links, and the triples that start with a suffix wrapper,
    // repeated to about 60 and 240 words.
    let mut chains = Vec::new();
    for a in links {
        for b in links {
            chains.push(format!("{a}{b}"));
        }
    }
    for b in links {
        for c in ["eval ", "exec ", "sh -c "] {
            chains.push(format!("strace {b}{c}"));
        }
    }
    for chain in &chains {
        for reps in [20, 80] {
            let benign = format!("{}ls", chain.repeat(reps));
            assert_ne!(rules.check(&benign), Verdict::Allow, "{benign:.60}...: a wrapper chain is not `ls`");
        }
        // A short chain ending in a denied command: within the budget, found.
        let denied = format!("{}rm -rf victim", chain.repeat(2));
        assert_eq!(rules.check(&denied), Verdict::Deny, "{denied}");
    }
}
