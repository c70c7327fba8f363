//! Shell command matching on argv, never on string prefixes.
//!
//! [`match_shell_command`] lexes a command (quotes and escapes honoured,
//! nothing expanded), splits it into segments, matches each segment's argv
//! against token patterns and composes the strictest verdict. Every decision
//! of `shell-matching.md` is implemented here; when the matcher cannot be sure
//! what the shell will run the answer is `ask`, and a `deny` found anywhere is
//! never lost.
//!
//! ```
//! use car_runtime::permission::{Verdict, shell::{ShellRules, match_shell_command}};
//! let rules = ShellRules::new(&["npm test", "npm run *"], &[], &["rm **"]).unwrap();
//! assert_eq!(match_shell_command("npm test", &rules), Verdict::Allow);
//! assert_eq!(match_shell_command("npm test; ls", &rules), Verdict::Ask);
//! assert_eq!(match_shell_command("npm test && /bin/rm -rf /", &rules), Verdict::Deny);
//! ```

mod lexer;
mod matcher;
mod protected;
mod wrappers;

pub(crate) use protected::protected_word;

pub use matcher::{
    ShellDecision, ShellExplanation, ShellOutcome, ShellPattern, ShellRuleSpec, ShellRules, ShellTable,
    match_shell_command,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permission::Verdict::{self, Allow, Ask, Deny};

    fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> ShellRules {
        ShellRules::new(allow, ask, deny).unwrap()
    }

    fn check(r: &ShellRules, cases: &[(&str, Verdict)]) {
        for (cmd, want) in cases {
            assert_eq!(r.check(cmd), *want, "command {cmd:?}");
        }
    }

    // Patterns

    #[test]
    fn literal_tokens_match_after_quote_removal() {
        let r = rules(&["git status", "echo 'a b'"], &[], &[]);
        check(
            &r,
            &[
                ("git status", Allow),
                ("'git' \"status\"", Allow),
                ("echo 'a b'", Allow),
                ("echo \"a b\"", Allow),
                ("git status --short", Ask),
                ("git", Ask),
                ("echo a b", Ask),
                ("gitstatus", Ask),
            ],
        );
    }

    #[test]
    fn star_matches_exactly_one_token() {
        let r = rules(&["npm run *"], &[], &[]);
        check(&r, &[("npm run build", Allow), ("npm run", Ask), ("npm run a b", Ask)]);
    }

    #[test]
    fn double_star_matches_zero_or_more_and_only_last() {
        let r = rules(&["ls **"], &[], &[]);
        check(&r, &[("ls", Allow), ("ls -la /tmp", Allow), ("lsx", Ask)]);
        let e = ShellRules::new(&["rm ** x"], &[], &[]).unwrap_err();
        assert_eq!(e.code(), "invalid_shell_pattern");
        assert!(e.to_string().contains("`rm ** x`"), "{e}");
        assert!(ShellRules::new(&[""], &[], &[]).is_err());
        assert!(ShellRules::new(&["a; b"], &[], &[]).is_err());
        assert!(ShellRules::new(&["a > f"], &[], &[]).is_err());
        assert!(ShellRules::new(&["echo $HOME"], &[], &[]).is_err());
        // A quoted star is a literal.
        let r = rules(&["echo '*'"], &[], &[]);
        check(&r, &[("echo '*'", Allow), ("echo x", Ask), ("echo *", Ask)]);
    }

    #[test]
    fn verdict_order_and_strictest_segment() {
        let r = rules(&["git **"], &["git push **"], &["git push --force"]);
        check(
            &r,
            &[
                ("git log", Allow),
                ("git push origin", Ask),
                ("git push --force", Deny),
                ("git log; git push origin", Ask),
                ("git log && git push --force", Deny),
                ("npm test", Ask),
            ],
        );
        let spec = rules(&["npm test", "npm run *"], &[], &[]);
        check(&spec, &[("npm test", Allow), ("npm test; rm -rf /", Ask)]);
        let spec = rules(&[], &[], &["git push --force"]);
        check(&spec, &[("git push --force", Deny)]);
    }

    // Lexing

    #[test]
    fn blanks_are_space_and_tab_only() {
        let r = rules(&["ls -l"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("ls\t-l", Allow),
                ("ls  -l  ", Allow),
                ("ls\r -l", Ask),
                ("ls\u{a0}-l", Ask),
                ("ls\u{2028}-l", Ask),
                ("ls\u{3000}-l", Ask),
                ("ls\u{200b} -l", Ask),
                ("ls\u{202e} -l", Ask),
                ("ls\x0b-l", Ask),
                ("ls\x0c-l", Ask),
                ("rm\u{a0}-rf /", Ask),
                ("rm -rf\u{a0}/", Deny),
            ],
        );
    }

    #[test]
    fn comments_backslash_newline_and_single_quotes() {
        let r = rules(&["ls -l", "echo a#b", r"echo '\x'"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("ls -l # rm -rf /", Allow),
                ("echo a#b", Allow),
                ("echo a #b", Ask),
                ("ls \\\n-l", Allow),
                ("l\\\ns -l", Allow),
                ("echo '\\x'", Allow),
                ("r\\\nm -rf /", Deny),
                ("ls -l\n# comment", Allow),
                ("echo 'a\\\nb'", Ask),
            ],
        );
    }

    #[test]
    fn separators_and_redirection_look_alikes() {
        let r = rules(&["a", "b"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("a; b", Allow),
                ("a && b || a | b |& a & b\na", Allow),
                ("a; rm x", Deny),
                ("a && rm x", Deny),
                ("a || rm x", Deny),
                ("a | rm x", Deny),
                ("a |& rm x", Deny),
                ("a & rm x", Deny),
                ("a\nrm x", Deny),
                ("a 2>&1", Allow),
                ("a >&2", Allow),
                ("a <&0", Allow),
                ("a >&-", Allow),
                ("a &>/dev/null", Allow),
                ("a &>> /dev/null", Allow),
                ("a &> out", Ask),
                ("a >&out", Ask),
            ],
        );
    }

    #[test]
    fn nul_byte_is_ask() {
        let r = rules(&["ls **"], &[], &["rm **"]);
        check(&r, &[("ls", Allow), ("ls\0", Ask), ("ls\0; rm -rf /", Ask)]);
    }

    #[test]
    fn parse_failures_ask_unless_an_earlier_deny() {
        let r = rules(&["ls **", "echo **"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("echo 'ok'", Allow),
                ("echo 'unclosed", Ask),
                ("echo \"unclosed", Ask),
                ("ls; echo (", Ask),
                ("rm -rf /\necho 'unclosed", Deny),
                ("rm -rf /; echo 'unclosed", Deny),
                ("echo 'unclosed; rm -rf /", Ask),
                ("ls )", Ask),
                ("case x in a) ls;; esac", Ask),
            ],
        );
    }

    // Expansions

    #[test]
    fn every_expansion_is_unmatchable() {
        let r = rules(&["echo **"], &[], &[]);
        let expansions = [
            "echo $name",
            "echo ${name}",
            "echo $(id)",
            "echo $((1+2))",
            "echo $[1+2]",
            "echo $'x'",
            "echo $\"x\"",
            "echo $0",
            "echo $9",
            "echo $@",
            "echo $*",
            "echo $#",
            "echo $?",
            "echo $$",
            "echo $!",
            "echo $-",
            "echo `id`",
            "echo \"$HOME\"",
            "echo \"`id`\"",
            "echo a$b",
        ];
        for cmd in expansions {
            assert_eq!(r.check(cmd), Ask, "{cmd:?}");
        }
        check(&r, &[("echo \\$HOME", Allow), ("echo '$HOME'", Allow), ("echo \"\\$HOME\"", Allow)]);
    }

    #[test]
    fn substitutions_inside_are_scanned_for_deny() {
        let r = rules(&["echo **"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("echo $(rm -rf /)", Deny),
                ("echo `rm -rf /`", Deny),
                ("echo \"$(rm -rf /)\"", Deny),
                ("cat <(rm -rf /)", Deny),
                ("echo $(ls)", Ask),
                // `$'` is not ANSI-C quoting inside double quotes.
                ("echo \"$'\" ; rm -rf / ; echo \"'\"", Deny),
            ],
        );
    }

    #[test]
    fn process_substitution_heredoc_herestring() {
        let r = rules(&["cat **", "diff **"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("cat file", Allow),
                ("diff <(ls) <(ls)", Ask),
                ("tee >(cat)", Ask),
                ("cat <<EOF\nhi\nEOF", Ask),
                ("cat <<-EOF\nhi\nEOF", Ask),
                ("cat <<< hi", Ask),
                ("rm -rf / <<< hi", Deny),
                // A body is skipped up to its delimiter (an apostrophe in it
                // is no parse failure) and the commands go on after it.
                ("cat <<EOF\ndon't\nEOF\nrm -rf /", Deny),
                ("cat <<-EOF\n\tdon't\n\tEOF\nrm -rf /", Deny),
                ("cat <<'EOF'\n$(x)\nEOF\ncat f", Ask),
                ("cat <<EOF; rm x\nbody\nEOF", Deny),
                // A body can be a script: a deny inside is reported.
                ("bash <<EOF\nrm -rf /\nEOF", Deny),
                ("cat <<$X\nbody\n$X", Ask),
            ],
        );
    }

    #[test]
    fn braces_globs_and_tilde() {
        let r = rules(&["echo *", "ls **", "find . -exec echo {} ;"], &[], &["rm -rf /"]);
        check(
            &r,
            &[
                ("echo {a,b}", Ask),
                ("echo {1..3}", Ask),
                ("echo '{a,b}'", Allow),
                ("echo {}", Allow),
                // A tilde word is uncertain: with a deny rule present it asks.
                ("echo ~", Ask),
                ("ls *.txt", Allow),
                ("l? -la", Ask),
                ("/bin/l* x", Ask),
                ("[ -f x ]", Ask),
                // `/*` matches the string `/`: denied by `rm -rf /`.
                ("rm -rf /*", Deny),
            ],
        );
        // A glob fills a slot but never equals a literal token of an allow
        // pattern.
        let r = rules(&["ls a*", "echo *"], &[], &[]);
        check(&r, &[("ls 'a*'", Allow), ("ls a*", Ask), ("echo ~", Allow)]);
        // In a deny position a glob matches a literal token it matches.
        let r = rules(&["**"], &[], &["rm -rf /tmp", "cat /etc/shadow", "rm -rf /root"]);
        check(
            &r,
            &[
                ("rm -rf /[t]mp", Deny),
                ("rm -rf /tm?", Deny),
                ("rm -rf /t*", Deny),
                ("rm -rf /[!x]mp", Deny),
                ("rm -rf /[a-z]mp", Deny),
                ("rm -rf /[x]mp", Allow),
                ("cat /etc/shado[w]", Deny),
                // A glob argv0 asks (uncertain) rather than matching.
                ("/bin/r[m] -rf /tmp", Ask),
                ("r? -rf /tmp", Ask),
                ("rm -rf ~root", Ask),
                ("rm -rf ~", Ask),
                ("X=~ rm -rf /x", Ask),
            ],
        );
        assert!(r.scan("rm -rf ~root").uncertain);
    }

    // Redirections

    #[test]
    fn redirections_leave_argv_wherever_they_stand() {
        let r = rules(&["sort -u"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("sort -u < in.txt", Allow),
                ("< in.txt sort -u", Allow),
                ("sort < in.txt -u", Allow),
                ("2>/dev/null sort -u", Allow),
                ("sort -u 2>&1 >/dev/null", Allow),
                ("sort -u >| /dev/null", Allow),
                (">/dev/null rm -rf /", Deny),
            ],
        );
    }

    #[test]
    fn writing_redirections_ask() {
        let r = rules(&["echo **"], &[], &[]);
        for cmd in [
            "echo hi > f",
            "echo hi >> f",
            "echo hi >| f",
            "echo hi &> f",
            "echo hi &>> f",
            "echo hi >&f",
            "echo hi 2>f",
            "echo hi <> f",
            "echo hi > /dev/tcp/example.com/80",
            "echo hi < /dev/tcp/example.com/80",
            "echo hi > /dev/sda",
            "echo hi > /dev//null",
            "echo hi > $OUT",
            "(echo hi) > f",
            "{ echo hi; } > f",
        ] {
            assert_eq!(r.check(cmd), Ask, "{cmd:?}");
        }
        check(&r, &[("echo hi > /dev/null", Allow), ("(echo hi) 2>&1", Allow), ("echo hi < f", Allow)]);
    }

    // Assignments and argv0

    #[test]
    fn assignments_are_stripped_for_deny_and_spelled_out_for_allow() {
        let r = rules(&["npm test", "CI=1 npm test"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("FOO=1 rm -rf /", Deny),
                ("A=1 B=2 rm x", Deny),
                ("CI=1 npm test", Allow),
                ("CI=2 npm test", Ask),
                ("FOO=1 npm test", Ask),
                ("FOO=1", Ask),
                ("FOO=1 BAR=2", Ask),
                ("FOO=$(id) npm test", Ask),
                ("FOO=$(id) rm -rf /", Deny),
                ("npm test CI=1", Ask),
            ],
        );
    }

    #[test]
    fn argv0_is_exact_for_allow_and_basename_for_deny() {
        let r = rules(&["git status"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("git status", Allow),
                ("./git status", Ask),
                ("/usr/bin/git status", Ask),
                ("GIT status", Ask),
                ("/bin/rm -rf /", Deny),
                ("./rm x", Deny),
                ("'/bin/rm' x", Deny),
                ("r\\m x", Deny),
                ("RM x", Ask),
            ],
        );
    }

    // Grouping and keywords

    #[test]
    fn groups_recurse() {
        let r = rules(&["ls **", "echo **"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("(ls; echo hi)", Allow),
                ("{ ls; echo hi; }", Allow),
                ("(ls; rm -rf /)", Deny),
                ("{ ls; rm -rf /; }", Deny),
                ("( ( (rm x) ) )", Deny),
                ("(ls; whoami)", Ask),
                ("(ls", Ask),
            ],
        );
    }

    #[test]
    fn keywords_are_never_allowed_and_recurse_for_deny() {
        let r = rules(&["ls **", "true", "echo **", "* **"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("if true; then ls; fi", Ask),
                ("if true; then rm -rf /; fi", Deny),
                ("while true; do ls; done", Ask),
                ("until true; do rm x; done", Deny),
                ("for f in a b; do rm $f; done", Ask),
                ("for f in a b; do rm x; done", Deny),
                ("select x in a; do ls; done", Ask),
                ("! ls", Ask),
                ("! rm x", Deny),
                ("time ls", Ask),
                ("time rm x", Deny),
                ("time -p rm x", Deny),
                ("coproc ls", Ask),
                ("[[ -f x ]] && ls", Ask),
                ("[[ -f x ]] && rm x", Deny),
                ("[[ $(rm -rf /) ]]", Deny),
                ("case x in *) ls;; esac", Ask),
                ("case x in a) rm x;; esac", Deny),
                ("case $x in (a|b) ls ;& c) echo;;& *) rm -rf / ;; esac", Deny),
                ("case x in\n  a)\n    ls\n    ;;\nesac; rm x", Deny),
                ("case x in a) ls;; esac > f", Ask),
                ("case x in $(rm x)) ls;; esac", Deny),
                ("case x in esac", Ask),
                ("case x in a) ls; esac", Ask),
                ("case x a) ls;; esac", Ask),
                ("case x in a) ls;;", Ask),
                ("f() { ls; }", Ask),
                ("f() { rm x; }", Deny),
                ("function f { rm x; }", Deny),
                ("function f { ls; }", Ask),
                ("((1 + 2))", Ask),
                ("'(rm' x", Ask),
                ("ls", Allow),
            ],
        );
    }

    // Wrappers

    #[test]
    fn wrappers_are_not_unwrapped_but_sh_c_is_scanned_for_deny() {
        let r = rules(&["sudo **", "bash **", "env **"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("sudo ls", Allow),
                ("env ls", Allow),
                ("bash -c 'ls'", Allow),
                // An allow rule naming a wrapper is the rule author's risk,
                // but deny matching looks through it.
                ("sudo rm -rf /", Deny),
                ("sudo ls -rf /", Allow),
                ("bash -c 'rm -rf /'", Deny),
                ("sh -c 'echo hi; rm -rf /'", Deny),
                ("/bin/bash -ec 'rm x'", Deny),
                ("bash -c \"$CMD\"", Ask),
                ("eval 'rm -rf /'", Deny),
                ("bash -c 'bash -c \"rm x\"'", Deny),
            ],
        );
        // Ask patterns are honoured inside `sh -c` too, and what cannot be
        // seen through inside is reported as uncertain.
        let r = rules(&["bash **"], &["git push **"], &["rm **"]);
        check(&r, &[("bash -c 'git push'", Ask), ("bash -c 'git log'", Allow)]);
        assert!(r.scan("bash -c 'rm -rf \"$HOME\"'").uncertain);
        assert!(!r.scan("bash -c 'ls'").uncertain);
        let r = rules(&["sudo **"], &[], &["sudo rm **"]);
        check(&r, &[("sudo rm -rf /", Deny), ("sudo ls", Allow)]);
    }

    // Empty input and limits

    #[test]
    fn empty_blank_and_comment_only_ask() {
        let r = rules(&["**"], &[], &[]);
        check(&r, &[("", Ask), ("   ", Ask), ("\t\n", Ask), ("# nothing", Ask), (";", Ask), ("ls", Allow)]);
    }

    #[test]
    fn nesting_limits() {
        let r = rules(&["ls", "echo **"], &[], &["rm **"]);
        // Groups nest without a limit: every segment is still scanned.
        let deep = format!("{}ls{}", "( ".repeat(300), " )".repeat(300));
        assert_eq!(r.check(&deep), Allow);
        assert_eq!(r.check(&format!("{deep}; rm x")), Deny);
        let braces = format!("{}ls;{}", "{ ".repeat(300), " };".repeat(300));
        assert_eq!(r.check(&braces), Allow);
        // Substitutions recurse up to a bound; deeper is a parse failure,
        // which keeps an earlier deny.
        let ok = format!("echo {}ls{}", "$(echo ".repeat(60), ")".repeat(60));
        assert_eq!(r.check(&ok), Ask);
        assert_eq!(r.check(&format!("echo {}$(rm x){}", "$(echo ".repeat(60), ")".repeat(60))), Deny);
        let too_deep = format!("echo {}ls{}", "$(echo ".repeat(80), ")".repeat(80));
        assert_eq!(r.check(&too_deep), Ask);
        assert_eq!(r.check(&format!("rm x; {too_deep}")), Deny);
    }

    #[test]
    fn arithmetic_and_parameter_expansion_contents_are_scanned() {
        let r = rules(&["echo **", "ls"], &[], &["rm **"]);
        check(
            &r,
            &[
                ("((i++))", Ask),
                ("((ls); rm -rf /)", Deny),
                ("echo ${x:-$(rm -rf /)}", Deny),
                ("echo $(( $(rm x) + 1 ))", Deny),
                ("echo $(( (1+2)*3 )); rm x", Deny),
                ("echo ${#x}", Ask),
            ],
        );
    }

    #[test]
    fn outcome_flags() {
        let r = rules(&[], &["git push **"], &["rm **"]);
        let o = r.scan("git push x");
        assert!(o.ask_matched && !o.deny_matched && !o.uncertain);
        let o = r.scan("echo $X");
        assert!(o.uncertain && !o.ask_matched);
        let o = r.scan("rm x");
        assert!(o.deny_matched);
    }
}
