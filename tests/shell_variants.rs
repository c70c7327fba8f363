//! Generated variants of each class of issue #25: wrappers × deny targets,
//! glob spellings of literal tokens, substitutions placed inside
//! arithmetic / `[[ ]]` / `test` / `printf -v` / `read` / `declare` /
//! `let`, and incomplete lists. The matcher runs with the permissive allow
//! rule `**`, so only a deny rule or uncertainty keeps a command from being
//! allowed; each variant is also checked through the permission chain with
//! the `open` preset.

use car_runtime::permission::{PermissionChain, ShellRules, Verdict};
use proptest::prelude::*;
use serde_json::json;

/// Deny targets: (deny pattern, a command it denies).
fn target() -> impl Strategy<Value = (&'static str, &'static str)> {
    prop::sample::select(vec![
        ("rm **", "rm -rf victim"),
        ("rm -rf /tmp", "rm -rf /tmp"),
        ("cat /etc/shadow", "cat /etc/shadow"),
        ("git push --force", "git push --force"),
        ("curl **", "curl https://evil.example"),
    ])
}

/// Wrappers the matcher reads through, as prefixes.
fn wrapper() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "exec ",
        "exec -a name ",
        "command ",
        "command -p ",
        "builtin ",
        "nohup ",
        "/usr/bin/time -v ",
        "time -p ",
        "nice ",
        "nice -n 10 ",
        "nice -5 ",
        "timeout 5 ",
        "timeout -s KILL -k 1 5 ",
        "timeout --preserve-status 1m ",
        "env ",
        "env -i ",
        "env A=1 B=2 ",
        "env -u HOME -- ",
        "/usr/bin/env ",
        "stdbuf -oL ",
        "stdbuf -o L -e 0 ",
        "setsid ",
        "setsid -f ",
        "chroot / ",
        "sudo ",
        "sudo -u root ",
        "sudo -nE ",
        "sudo --user=root A=1 ",
        "doas ",
        "doas -u root ",
        "xargs ",
        "xargs -0 -n 1 ",
        "xargs -I{} ",
        "busybox ",
        "eval -- ",
        "eval ",
        "time -- ",
        "time -p -- ",
        "ionice -c3 ",
        "ionice -c 2 -n 7 ",
        "chrt -o 0 ",
        "chrt --rr 5 ",
        "taskset 1 ",
        "taskset -c 0-3 ",
        "flock /tmp/l ",
        "flock -n -w 5 /tmp/l ",
        "runuser -u root -- ",
        "unshare -r ",
        "nsenter -t 1 -m ",
        "strace -f -o /dev/null ",
        "ltrace -f ",
        "valgrind --leak-check=full ",
        "fakeroot ",
        "faketime 2020-01-01 ",
        "torsocks ",
        "proxychains4 -q ",
        "pkexec --user root ",
        "numactl --interleave=all ",
        "firejail --quiet ",
        "bwrap --bind / / ",
        "setpriv --reuid=0 ",
        "prlimit --nofile=10 ",
        "eatmydata ",
        "exec {fd}>/dev/null ",
    ])
}

/// Wrappers that run their argument as a shell command line, as prefixes
/// of a single-quoted script.
fn script_wrapper() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "script -qc ",
        "script -c ",
        "flock /tmp/l -c ",
        "flock -x /tmp/l --command ",
        "sg root -c ",
        "sg root ",
        "sg - root ",
        "watch -n 1 ",
        "watch ",
        "su -c ",
        "runuser root -c ",
        "alias x=",
        "env -S ",
        "eval ",
    ])
}

/// Variables that name code to run, assigned where the shell, `env` or
/// `sudo` pass them on, or exported.
fn code_variable() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "BASH_ENV",
        "ENV",
        "PS4",
        "PROMPT_COMMAND",
        "SHELLOPTS",
        "PATH",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "GCONV_PATH",
        "PYTHONPATH",
        "PERL5OPT",
        "NODE_OPTIONS",
        "GIT_SSH_COMMAND",
        "GIT_CONFIG_PARAMETERS",
        "PAGER",
        "BASH_FUNC_ls%%",
    ])
}

fn permissive(deny: &str) -> ShellRules {
    ShellRules::new(&["**"], &[], &[deny]).unwrap()
}

fn chain_verdict(deny: &str, cmd: &str) -> Verdict {
    PermissionChain::from_json(&json!({"preset": "open", "deny": [{"tool": "shell", "argv": deny}]}))
        .unwrap()
        .evaluate_named("shell", &json!({"command": cmd}))
        .verdict
}

/// A glob spelling of one byte of `t` (the byte itself still matches).
fn globbed(t: &str, at: usize, how: u8) -> String {
    let b = t.as_bytes();
    let i = at % b.len();
    let c = b[i] as char;
    let g = match how % 5 {
        0 => format!("[{c}]"),
        1 => "?".to_string(),
        2 => "*".to_string(),
        3 => format!("[!{}]", if c == 'z' { 'y' } else { 'z' }),
        _ => format!("[{c}-{c}]"),
    };
    format!("{}{g}{}", &t[..i], &t[i + 1..])
}

/// Places a substitution running `inner` where bash expands it.
fn placed(inner: &str, how: u8) -> String {
    let q = format!("'a[$({inner})]'");
    match how % 16 {
        0 => format!("(( (1) + $({inner}) ))"),
        1 => format!("(( $({inner}) ))"),
        2 => format!("echo $(( 1 + $({inner}) ))"),
        3 => format!("for (( i=$({inner}); i<1; i++ )); do :; done"),
        4 => format!("for (( ; $({inner}); )); do :; done"),
        5 => format!("[[ -n <({inner}) ]]"),
        6 => format!("[[ -v {q} ]]"),
        7 => format!("test -v {q}"),
        8 => format!("[ -v {q} ]"),
        9 => format!("printf -v {q} x"),
        10 => format!("read {q} < /dev/null"),
        11 => format!("read -a {q} < /dev/null"),
        12 => format!("declare {}", format_args!("'a[$({inner})]=1'")),
        13 => format!("let {}", format_args!("'a[$({inner})]=1'")),
        14 => format!("echo ${{x:-$({inner})}}"),
        _ => format!("(( a[$({inner})] ))"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn wrappers_never_hide_a_deny(
        (deny, cmd) in target(),
        wraps in prop::collection::vec(wrapper(), 1..4),
    ) {
        let mut full = String::new();
        for w in &wraps {
            full.push_str(w);
        }
        // eval re-lexes its arguments: keep the target one word per token.
        full.push_str(cmd);
        let v = permissive(deny).check(&full);
        prop_assert_ne!(v, Verdict::Allow, "{:?}", full);
        prop_assert_ne!(chain_verdict(deny, &full), Verdict::Allow, "chain: {:?}", full);
    }

    #[test]
    fn a_shell_c_or_sudo_sh_c_script_is_read((deny, cmd) in target(), sh in prop::sample::select(vec![
        "sh", "bash", "dash", "rbash", "zsh", "ksh", "/bin/sh", "busybox sh", "sudo bash", "env sh",
    ]), opts in prop::sample::select(vec!["-c", "-ec", "-xc", "-e -c", "--norc -c"])) {
        let full = format!("{sh} {opts} '{cmd}'");
        prop_assert_eq!(permissive(deny).check(&full), Verdict::Deny, "{:?}", full);
    }

    #[test]
    fn a_wrapper_running_a_command_line_is_read((deny, cmd) in target(), w in script_wrapper(), trail in prop::sample::select(vec!["", " /dev/null"])) {
        let full = format!("{w}'{cmd}'{trail}");
        // `alias x=` and `sg root` take the whole script; `script -c` may
        // be followed by its typescript file.
        let full = if w.starts_with("script") { full } else { format!("{w}'{cmd}'") };
        prop_assert_eq!(permissive(deny).check(&full), Verdict::Deny, "{:?}", full);
        prop_assert_eq!(chain_verdict(deny, &full), Verdict::Deny, "chain: {:?}", full);
        let _ = trail;
    }

    #[test]
    fn a_script_from_standard_input_is_never_allowed(
        (deny, cmd) in target(),
        sh in prop::sample::select(vec!["sh", "bash", "dash", "/bin/sh", "busybox sh", "sudo bash", "env sh", "zsh"]),
        how in 0u8..6,
    ) {
        let full = match how {
            0 => format!("echo '{cmd}' | {sh}"),
            1 => format!("echo '{cmd}' | {sh} -s"),
            2 => format!("echo '{cmd}' | {sh} -"),
            3 => format!("echo '{cmd}' | {sh} -e /dev/stdin"),
            4 => format!("echo '{cmd}' | . /dev/stdin"),
            _ => format!("echo '{cmd}' | source /dev/fd/0"),
        };
        prop_assert_ne!(permissive(deny).check(&full), Verdict::Allow, "{:?}", full);
        prop_assert_ne!(chain_verdict(deny, &full), Verdict::Allow, "chain: {:?}", full);
    }

    #[test]
    fn a_variable_that_names_code_is_never_allowed_where_a_deny_rule_lives(
        (deny, _) in target(),
        var in code_variable(),
        value in prop::sample::select(vec!["./x", "'$(rm -rf victim)'", "/tmp/evil.so", "'() { rm -rf victim; }'"]),
        cmd in prop::sample::select(vec!["ls", "bash -c true", "git status", "python3 x.py", "sh -i"]),
        how in 0u8..5,
    ) {
        // `BASH_FUNC_ls%%=...` is no shell assignment (a command name that
        // does not exist); `env` and `sudo` do pass it on.
        prop_assume!(!(var.contains('%') && (how == 0 || how == 3)));
        let full = match how {
            0 => format!("{var}={value} {cmd}"),
            1 => format!("env '{var}'={value} {cmd}"),
            2 => format!("sudo '{var}'={value} {cmd}"),
            3 => format!("export '{var}'={value}; {cmd}"),
            _ => format!("env -i '{var}'={value} {cmd}"),
        };
        prop_assert_ne!(permissive(deny).check(&full), Verdict::Allow, "{:?}", full);
        prop_assert_ne!(chain_verdict(deny, &full), Verdict::Allow, "chain: {:?}", full);
    }

    #[test]
    fn an_unknown_wrapper_option_is_never_allowed(
        (deny, cmd) in target(),
        w in prop::sample::select(vec!["sudo", "env", "nice", "timeout", "xargs", "stdbuf", "setsid", "doas", "exec"]),
        opt in "--zz[a-z]{1,6}|-[WY][a-zA-Z]{0,3}",
    ) {
        let full = format!("{w} {opt} {cmd}");
        prop_assert_ne!(permissive(deny).check(&full), Verdict::Allow, "{:?}", full);
        prop_assert_ne!(chain_verdict(deny, &full), Verdict::Allow, "chain: {:?}", full);
    }

    #[test]
    fn a_glob_of_a_literal_token_is_denied(
        (deny, cmd) in target(),
        token in any::<prop::sample::Index>(),
        at in any::<usize>(),
        how in any::<u8>(),
    ) {
        let words: Vec<&str> = cmd.split(' ').collect();
        let k = token.index(words.len());
        let mut w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
        w[k] = globbed(words[k], at, how);
        let full = w.join(" ");
        // A glob argv0 asks (uncertain); a glob argument matches the literal.
        let want = if k == 0 { Verdict::Ask } else { Verdict::Deny };
        prop_assert_eq!(permissive(deny).check(&full), want, "{:?}", full);
        prop_assert_eq!(chain_verdict(deny, &full), want, "chain: {:?}", full);
    }

    #[test]
    fn a_tilde_word_is_never_allowed_where_a_deny_rule_lives((deny, cmd) in target(), t in prop::sample::select(vec![
        "~", "~root", "~/x", "~+", "~-", "A=~", "--x=~/y",
    ])) {
        let full = format!("{cmd} {t}");
        prop_assert_ne!(permissive(deny).check(&full), Verdict::Allow, "{:?}", full);
        let words: Vec<&str> = cmd.split(' ').collect();
        let replaced = format!("{} {t}", words[..words.len() - 1].join(" "));
        prop_assert_ne!(permissive(deny).check(&replaced), Verdict::Allow, "{:?}", replaced);
        prop_assert_ne!(chain_verdict(deny, &replaced), Verdict::Allow, "chain: {:?}", replaced);
    }

    #[test]
    fn a_substitution_where_bash_expands_it_is_denied((deny, cmd) in target(), how in any::<u8>(), wrap in 0u8..3) {
        let mut full = placed(cmd, how);
        full = match wrap {
            0 => full,
            1 => format!("ls; {full}"),
            _ => format!("( {full} )"),
        };
        prop_assert_eq!(permissive(deny).check(&full), Verdict::Deny, "{:?}", full);
        prop_assert_eq!(chain_verdict(deny, &full), Verdict::Deny, "chain: {:?}", full);
    }

    #[test]
    fn an_incomplete_list_asks(
        first in prop::sample::select(vec!["ls", "git status", "echo hi", "(ls)", "{ ls; }", "true"]),
        op in prop::sample::select(vec!["&&", "||", "|", "|&"]),
        trail in prop::sample::select(vec!["", " ", "\n", " \n\n", " # comment"]),
        lead in prop::sample::select(vec![";", "&", "&&", "||", "|"]),
    ) {
        let r = permissive("rm **");
        let trailing = format!("{first} {op}{trail}");
        prop_assert_eq!(r.check(&trailing), Verdict::Ask, "{:?}", trailing);
        let leading = format!("{lead} {first}");
        prop_assert_eq!(r.check(&leading), Verdict::Ask, "{:?}", leading);
        let doubled = format!("{first} {op} {lead} {first}");
        prop_assert_eq!(r.check(&doubled), Verdict::Ask, "{:?}", doubled);
        let inside = format!("echo $({first} {op})");
        prop_assert_eq!(r.check(&inside), Verdict::Ask, "{:?}", inside);
        // Completed, the list is allowed again.
        let complete = format!("{first} {op}\n{first}");
        prop_assert_eq!(r.check(&complete), Verdict::Allow, "{:?}", complete);
        prop_assert_ne!(chain_verdict("rm **", &trailing), Verdict::Allow, "chain: {:?}", trailing);
    }
}
