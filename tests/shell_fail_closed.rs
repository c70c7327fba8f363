//! The reported failures of issue #25 (each ran `rm` under bash or dash
//! while the chain allowed it), as the matcher and as the permission chain
//! with the `open` preset see them. Every class has more generated variants
//! in `shell_variants.rs` and a bash/dash check in `shell_constructs.rs`.

use car_runtime::permission::shell::{ShellRuleSpec, ShellTable};
use car_runtime::permission::{PermissionChain, ShellRules, Verdict};
use serde_json::json;

fn chain(deny: &str) -> PermissionChain {
    PermissionChain::from_json(&json!({"preset": "open", "deny": [{"tool": "shell", "argv": deny}]})).unwrap()
}

fn chain_verdict(deny: &str, cmd: &str) -> Verdict {
    chain(deny).evaluate_named("shell", &json!({"command": cmd})).verdict
}

fn matcher(deny: &str) -> ShellRules {
    ShellRules::new(&["**"], &[], &[deny]).unwrap()
}

/// (command, deny pattern, the matcher's verdict with allow `**`).
const REPORTED: &[(&str, &str, Verdict)] = &[
    // A command substitution inside arithmetic, a `for ((` header, a process
    // substitution in `[[ ]]`.
    ("(( (1) + $(rm -rf victim) ))", "rm **", Verdict::Deny),
    ("for (( i=$(rm -rf victim); i<1; i++ )); do :; done", "rm **", Verdict::Deny),
    ("for (( ; $(rm -rf victim); )); do :; done", "rm **", Verdict::Deny),
    ("[[ -n <(rm -rf victim) ]]", "rm **", Verdict::Deny),
    ("echo $(( (1) + $(rm -rf victim) ))", "rm **", Verdict::Deny),
    // A glob or tilde in an argument.
    ("rm -rf /[t]mp", "rm -rf /tmp", Verdict::Deny),
    ("cat /etc/shado[w]", "cat /etc/shadow", Verdict::Deny),
    ("rm -rf ~root", "rm -rf /root", Verdict::Ask),
    // Wrappers that are the same command.
    ("exec rm -rf victim", "rm **", Verdict::Deny),
    ("command rm -rf victim", "rm **", Verdict::Deny),
    ("builtin rm -rf victim", "rm **", Verdict::Deny),
    ("eval -- rm -rf victim", "rm **", Verdict::Deny),
    ("env rm -rf victim", "rm **", Verdict::Deny),
    ("env -i A=1 rm -rf victim", "rm **", Verdict::Deny),
    ("nice -n 5 rm -rf victim", "rm **", Verdict::Deny),
    ("timeout 5 rm -rf victim", "rm **", Verdict::Deny),
    ("timeout -s KILL 5 rm -rf victim", "rm **", Verdict::Deny),
    ("echo victim | xargs rm -rf", "rm **", Verdict::Deny),
    ("find . -name victim -exec rm -rf {} \\;", "rm **", Verdict::Deny),
    ("busybox sh -c 'rm -rf victim'", "rm **", Verdict::Deny),
    ("busybox rm -rf victim", "rm **", Verdict::Deny),
    ("rbash -c 'rm -rf victim'", "rm **", Verdict::Deny),
    ("nohup rm -rf victim", "rm **", Verdict::Deny),
    ("stdbuf -oL rm -rf victim", "rm **", Verdict::Deny),
    ("setsid rm -rf victim", "rm **", Verdict::Deny),
    ("chroot / rm -rf victim", "rm **", Verdict::Deny),
    ("sudo -u root rm -rf victim", "rm **", Verdict::Deny),
    ("doas rm -rf victim", "rm **", Verdict::Deny),
    ("/usr/bin/time -v rm -rf victim", "rm **", Verdict::Deny),
    ("sudo env nice rm -rf victim", "rm **", Verdict::Deny),
    ("sudo --weird-option rm -rf victim", "rm **", Verdict::Ask),
    ("env -S 'rm -rf victim'", "rm **", Verdict::Deny),
    // Name operands bash expands a second time.
    ("test -v 'a[$(rm -rf victim)]'", "rm **", Verdict::Deny),
    ("[ -v 'a[$(rm -rf victim)]' ]", "rm **", Verdict::Deny),
    ("printf -v 'a[$(rm -rf victim)]' x", "rm **", Verdict::Deny),
    ("read 'a[$(rm -rf victim)]' < /dev/null", "rm **", Verdict::Deny),
    ("declare 'a[$(rm -rf victim)]=1'", "rm **", Verdict::Deny),
    ("let 'a[$(rm -rf victim)]=1'", "rm **", Verdict::Deny),
    ("[[ -v 'a[$(rm -rf victim)]' ]]", "rm **", Verdict::Deny),
    // Incomplete lists.
    ("ls &&", "rm **", Verdict::Ask),
    ("git status ||", "rm **", Verdict::Ask),
    ("ls |", "rm **", Verdict::Ask),
    ("; ls", "rm **", Verdict::Ask),
    ("ls && && ls", "rm **", Verdict::Ask),
    ("ls |\n", "rm **", Verdict::Ask),
    ("(ls &&)", "rm **", Verdict::Ask),
    ("echo $(ls |)", "rm **", Verdict::Ask),
];

#[test]
fn the_reported_commands_are_never_allowed() {
    for &(cmd, deny, want) in REPORTED {
        assert_eq!(matcher(deny).check(cmd), want, "matcher: {cmd:?} with deny {deny:?}");
        let chain = chain_verdict(deny, cmd);
        assert_eq!(chain, want, "chain (open preset): {cmd:?} with deny {deny:?}");
    }
}

#[test]
fn a_deeply_nested_substitution_is_never_allowed() {
    for n in [10, 40, 63, 64, 65, 100, 300] {
        for (open, close) in [("${x:-", "}"), ("$(echo ", ")"), ("$(( 1 + ", " ))"), ("\"$(echo ", ")\"")] {
            let cmd = format!("echo {}$(rm -rf victim){}", open.repeat(n), close.repeat(n));
            assert_ne!(matcher("rm **").check(&cmd), Verdict::Allow, "depth {n} of {open:?}");
            assert_ne!(chain_verdict("rm **", &cmd), Verdict::Allow, "chain: depth {n} of {open:?}");
        }
    }
}

/// Uncertainty reaches the chain: an uncertain segment of a call to a tool
/// with any argv deny or ask rule asks, whatever the preset; a tool with no
/// argv rule is not affected.
#[test]
fn uncertainty_reaches_the_chain_under_every_preset() {
    for preset in ["open", "standard", "strict"] {
        for (table, rule) in [("deny", "rm **"), ("ask", "git push **")] {
            let c = PermissionChain::from_json(&json!({"preset": preset, table: [{"tool": "shell", "argv": rule}]}))
                .unwrap();
            for cmd in ["echo ~", "((i++))", "x=$(date)", "[[ $x -eq 1 ]]", "sudo --odd ls", "ls &&", "echo $HOME"] {
                let e = c.evaluate_named("shell", &json!({"command": cmd}));
                assert_ne!(e.verdict, Verdict::Allow, "{preset}/{table}: {cmd:?}");
            }
            if preset == "open" {
                let e = c.evaluate_named("shell", &json!({"command": "ls -la"}));
                assert_eq!(e.verdict, Verdict::Allow, "{preset}/{table}");
            }
        }
    }
    // Another tool's rule does not make the shell's uncertainty count.
    let c =
        PermissionChain::from_json(&json!({"preset": "open", "deny": [{"tool": "other", "argv": "rm **"}]})).unwrap();
    assert_eq!(c.evaluate_named("shell", &json!({"command": "echo ~"})).verdict, Verdict::Allow);
}

#[test]
fn rule_examples_are_checked_when_the_rules_load() {
    let ok = ShellRules::with_examples(&[
        ShellRuleSpec::new(ShellTable::Deny, "rm **")
            .matching(["rm -rf /", "sudo rm x", "/bin/rm x"])
            .not_matching(["ls", "echo rm"]),
        ShellRuleSpec::new(ShellTable::Ask, "git push **").matching(["git push", "env git push -f"]),
        ShellRuleSpec::new(ShellTable::Allow, "git status").matching(["git status"]).not_matching(["git status -s"]),
    ])
    .unwrap();
    assert_eq!(ok.check("rm x"), Verdict::Deny);
    assert_eq!(ok.check("git status"), Verdict::Allow);

    let bad = |spec: ShellRuleSpec| ShellRules::with_examples(&[spec]).unwrap_err();
    let e = bad(ShellRuleSpec::new(ShellTable::Deny, "rm -rf /").matching(["rm -r /"]));
    assert_eq!(e.code(), "invalid_shell_rule_example");
    assert!(e.to_string().contains("`rm -rf /`") && e.to_string().contains("`rm -r /`"), "{e}");
    let e = bad(ShellRuleSpec::new(ShellTable::Allow, "ls **").not_matching(["ls -la"]));
    assert_eq!(e.code(), "invalid_shell_rule_example");
    assert!(e.to_string().contains("not_match") && e.to_string().contains("`ls -la`"), "{e}");
    let e = bad(ShellRuleSpec::new(ShellTable::Ask, "git push").matching(["git pull"]));
    assert_eq!(e.code(), "invalid_shell_rule_example");
    // A bad pattern is still a pattern error.
    let e = bad(ShellRuleSpec::new(ShellTable::Deny, "rm ** x"));
    assert_eq!(e.code(), "invalid_shell_pattern");
    // The TOML/JSON shape reads into the spec.
    let spec: ShellRuleSpec =
        serde_json::from_value(json!({"table": "deny", "pattern": "rm **", "match": ["rm x"], "not_match": ["ls"]}))
            .unwrap();
    assert_eq!(spec.match_examples, ["rm x"]);
    assert!(ShellRules::with_examples(&[spec]).is_ok());
}

#[test]
fn explain_names_the_rule_and_the_token() {
    let r = ShellRules::new(&["ls **"], &["git push **"], &["rm -rf /tmp"]).unwrap();
    let e = r.explain("ls; rm -rf /[t]mp");
    assert_eq!(e.verdict, Verdict::Deny);
    let d = e.segments.iter().find(|d| d.verdict == Verdict::Deny).unwrap();
    assert_eq!(d.rule.as_deref(), Some("rm -rf /tmp"));
    assert_eq!(d.table, Some(ShellTable::Deny));
    assert_eq!(d.token.as_deref(), Some("/[t]mp"));
    let e = r.explain("ls");
    assert_eq!(e.segments[0].rule.as_deref(), Some("ls **"));
    let e = r.explain("echo $HOME");
    assert_eq!(e.verdict, Verdict::Ask);
    assert!(e.uncertain);
    let e = r.explain("ls &&");
    assert!(e.parse_failed && e.verdict == Verdict::Ask);
    // An every-suffix wrapper: the deny is reported once, where the command
    // starts, and its arguments are not reported as commands of their own.
    let r = ShellRules::new(&["**"], &[], &["rm **"]).unwrap();
    let e = r.explain("strace -f -o /dev/null rm -rf /");
    assert_eq!(e.verdict, Verdict::Deny);
    let by_rule: Vec<_> = e.segments.iter().filter(|d| d.rule.as_deref() == Some("rm **")).collect();
    assert_eq!(by_rule.len(), 1, "{:#?}", e.segments);
    assert_eq!(by_rule[0].argv, ["rm", "-rf", "/"]);
    assert_eq!(e.segments.iter().filter(|d| d.verdict == Verdict::Deny).count(), 2, "{:#?}", e.segments);
    // An opaque wrapper says why.
    let e = r.explain("echo 'rm x' | sh");
    assert!(e.uncertain && e.verdict == Verdict::Ask);
    assert!(e.segments.iter().any(|d| d.reason.contains("standard input")), "{:#?}", e.segments);
}

/// Builtins that run a string as a command (found while writing the
/// reference fuzz target): `trap 'cmd' EXIT` runs `cmd` when the shell
/// exits, `mapfile -C cmd` calls it per line, `compgen -C cmd` runs it.
#[test]
fn builtins_that_run_a_string_are_read_as_scripts() {
    let r = matcher("rm **");
    for cmd in [
        "trap 'rm -rf victim' EXIT",
        "trap -- 'rm -rf victim' EXIT INT",
        "mapfile -C 'rm -rf victim' -c 1 a < /dev/null",
        "readarray -c1 -C'rm -rf victim' a < /dev/null",
        "compgen -C 'rm -rf victim' x",
        "complete -C 'rm -rf victim' ls",
        "bind -x '\"\\C-t\": rm -rf victim'",
    ] {
        assert_eq!(r.check(cmd), Verdict::Deny, "{cmd:?}");
        assert_eq!(chain_verdict("rm **", cmd), Verdict::Deny, "chain: {cmd:?}");
    }
    for cmd in ["trap - EXIT", "trap -l", "trap 'echo bye' EXIT", "mapfile a < /dev/null"] {
        assert_eq!(r.check(cmd), Verdict::Allow, "{cmd:?}");
    }
    assert_eq!(r.check("fc -e vi"), Verdict::Ask);
}

/// Only the operand of `-v` is a name for `printf`, `test` and `[`: a `$` in
/// a format or a string operand is not expanded again.
#[test]
fn printf_and_test_scan_only_the_v_operand() {
    let r = matcher("rm **");
    for cmd in ["printf '%s $x\\n' a", "test '$(rm -rf victim)' = x"] {
        assert_eq!(r.check(cmd), Verdict::Allow, "{cmd:?}");
    }
    // `[` is a glob character, so `[` as argv0 asks anyway; not a deny.
    assert_eq!(r.check("[ -n '$(rm -rf victim)' ]"), Verdict::Ask);
    for cmd in ["printf -v 'a[$(rm -rf victim)]' '%s' x", "test -n x -a -v 'a[$(rm -rf victim)]'"] {
        assert_eq!(r.check(cmd), Verdict::Deny, "{cmd:?}");
    }
}

/// A substitution in a name operand is part of the segment: with allow
/// rules only (nothing to deny), it is still never allowed.
#[test]
fn a_name_operand_substitution_is_never_allowed_by_allow_rules_alone() {
    let r = ShellRules::new(&["read **", "declare **", "printf **", "let **"], &[], &[]).unwrap();
    for cmd in ["read 'a[$(rm -rf victim)]'", "declare 'a[`id`]=1'", "printf -v 'a[$(id)]' x", "let 'a[$(id)]=1'"] {
        assert_eq!(r.check(cmd), Verdict::Ask, "{cmd:?}");
    }
    assert_eq!(r.check("read a"), Verdict::Allow);
    assert_eq!(r.check("printf '%s' '$(id)'"), Verdict::Allow);
}
