//! Wrappers: commands that run another command given in their arguments
//! (`sudo rm ...`, `env A=1 rm ...`, `find . -exec rm {} ;`, `bash -c '...'`).
//!
//! Deny matching looks through every wrapper whose inner command it can read
//! literally (`shell-matching.md`, "Wrappers"). Option parsing is per
//! wrapper and deliberately strict: an option we do not know could take an
//! argument and shift where the command starts, so it makes the wrapper
//! opaque (uncertain) rather than guessed at.

use super::lexer::Word;

/// What a wrapper runs.
#[derive(Debug)]
pub(crate) enum Inner<'w, 'a> {
    /// Not a wrapper (or a wrapper told not to run anything).
    None,
    /// The inner commands' argvs; `unknown_args` when their arguments are
    /// not all known (xargs appends its input, `find -exec` puts paths in
    /// `{}`), `uncertain` when what runs depends on more than the argv (an
    /// assignment to a variable that names code, such as `LD_PRELOAD`).
    Argv { argvs: Vec<&'w [Word<'a>]>, unknown_args: bool, uncertain: bool },
    /// A wrapper whose own options are not parsed exactly: the command may
    /// start at any of these words, so every suffix is deny-checked (which
    /// finds a deny wherever the command really starts).
    Suffixes(&'w [Word<'a>]),
    /// Scripts the wrapper runs (`eval`, `sh -c`, `env -S`, `su -c`);
    /// `uncertain` when they also change what later commands mean (`alias`).
    Scripts { scripts: Vec<Vec<u8>>, uncertain: bool },
    /// A wrapper whose inner command cannot be read.
    Opaque,
}

impl Inner<'_, '_> {
    /// True unless [`Inner::None`].
    pub(crate) fn is_wrapper(&self) -> bool {
        !matches!(self, Inner::None)
    }
}

/// Shells whose `-c` script deny matching looks into.
pub(crate) const SHELLS: &[&[u8]] =
    &[b"sh", b"bash", b"dash", b"zsh", b"ksh", b"mksh", b"ash", b"posh", b"yash", b"rbash", b"lksh", b"oksh"];

/// argv0's basename.
pub(crate) fn basename(t: &[u8]) -> &[u8] {
    t.rsplit(|&b| b == b'/').next().unwrap_or(t)
}

/// Option grammar of one wrapper.
struct Opts {
    /// Short flags taking no argument (letters, clusterable).
    flags: &'static [u8],
    /// Short options taking an argument (attached or the next word).
    with_arg: &'static [u8],
    /// Long options taking no argument.
    long_flags: &'static [&'static str],
    /// Long options taking an argument (`--x=v` or `--x v`).
    long_with_arg: &'static [&'static str],
    /// `-NUMBER` is an option (nice).
    numeric: bool,
}

/// Skips the options at the start of `args`: the index of the first operand,
/// or `None` when an option is unknown (or its argument is missing).
fn skip_opts(args: &[Word], o: &Opts) -> Option<usize> {
    let mut i = 0;
    while i < args.len() {
        let t = &args[i].text[..];
        if t == b"--" {
            return Some(i + 1);
        }
        if t.len() < 2 || t[0] != b'-' {
            return Some(i);
        }
        if let Some(long) = t.strip_prefix(b"--") {
            let (name, has_value) = match long.iter().position(|&b| b == b'=') {
                Some(eq) => (&long[..eq], true),
                None => (long, false),
            };
            let name = std::str::from_utf8(name).ok()?;
            if o.long_with_arg.contains(&name) {
                i += if has_value { 1 } else { 2 };
            } else if o.long_flags.contains(&name) && !has_value {
                i += 1;
            } else {
                return None;
            }
            continue;
        }
        if o.numeric && t[1..].iter().all(u8::is_ascii_digit) {
            i += 1;
            continue;
        }
        let mut step = 1;
        for (k, &c) in t[1..].iter().enumerate() {
            if o.flags.contains(&c) {
                continue;
            }
            if o.with_arg.contains(&c) {
                // The rest of the word is the argument, or the next word.
                if k + 2 == t.len() {
                    step = 2;
                }
                break;
            }
            return None;
        }
        i += step;
    }
    if i > args.len() { None } else { Some(i) }
}

/// Leading `NAME=value` words. `env` and `sudo` take any word holding a
/// `=` as one (`'BASH_FUNC_ls%%=() { ...; }'` too), quoted or not.
fn skip_assignments(args: &[Word]) -> usize {
    args.iter().take_while(|w| w.is_assignment() || w.text.iter().skip(1).any(|&b| b == b'=')).count()
}

/// Variables whose value is code, or says where code is found, for the
/// shell, the loader or a common interpreter: assigning one changes what a
/// command runs without changing its argv (`BASH_ENV='$(rm x)' bash -c
/// true`, `LD_PRELOAD=./x.so ls`, `PATH=. ls`, `BASH_FUNC_ls%%=...`).
const CODE_VARIABLES: &[&[u8]] = &[
    b"BASH_ENV",
    b"ENV",
    b"PS0",
    b"PS1",
    b"PS2",
    b"PS3",
    b"PS4",
    b"PROMPT_COMMAND",
    b"SHELLOPTS",
    b"BASHOPTS",
    b"BASH_LOADABLES_PATH",
    b"PATH",
    b"FPATH",
    b"ZDOTDIR",
    b"GCONV_PATH",
    b"PYTHONPATH",
    b"PYTHONSTARTUP",
    b"PYTHONHOME",
    b"PERL5OPT",
    b"PERL5LIB",
    b"PERLLIB",
    b"RUBYOPT",
    b"RUBYLIB",
    b"NODE_OPTIONS",
    b"NODE_PATH",
    b"GIT_SSH",
    b"GIT_SSH_COMMAND",
    b"GIT_PAGER",
    b"GIT_EDITOR",
    b"GIT_EXTERNAL_DIFF",
    b"GIT_EXEC_PATH",
    b"GIT_ASKPASS",
    b"GIT_PROXY_COMMAND",
    b"GIT_DIR",
    b"PAGER",
    b"MANPAGER",
    b"EDITOR",
    b"VISUAL",
    b"BROWSER",
    b"LESSOPEN",
    b"LESSCLOSE",
    b"SUDO_ASKPASS",
    b"SSH_ASKPASS",
];

/// Whether the assignment word `NAME=value` (or `NAME+=value`) sets a
/// variable that names code ([`CODE_VARIABLES`], every `LD_*` and
/// `GIT_CONFIG*`, and bash's exported functions `BASH_FUNC_*`).
pub(crate) fn assigns_code(text: &[u8]) -> bool {
    let Some(eq) = text.iter().position(|&b| b == b'=') else { return false };
    let name = text[..eq].strip_suffix(b"+").unwrap_or(&text[..eq]);
    // `a[1]=x` assigns `a`.
    let name = name.split(|&b| b == b'[').next().unwrap_or(name);
    CODE_VARIABLES.contains(&name)
        || name.starts_with(b"LD_")
        || name.starts_with(b"GIT_CONFIG")
        || name.starts_with(b"BASH_FUNC_")
}

fn argv_from<'w, 'a>(rest: &'w [Word<'a>], uncertain: bool) -> Inner<'w, 'a> {
    if rest.is_empty() {
        Inner::None
    } else {
        Inner::Argv { argvs: vec![rest], unknown_args: uncertain, uncertain: false }
    }
}

/// What `argv` (a literal argv, assignments removed) runs inside.
pub(crate) fn inner<'w, 'a>(argv: &'w [Word<'a>]) -> Inner<'w, 'a> {
    let Some(first) = argv.first() else { return Inner::None };
    let name = basename(&first.text);
    let args = &argv[1..];
    let opts = |o: Opts| skip_opts(args, &o);
    let parsed = |at: Option<usize>, uncertain: bool| match at {
        Some(i) => argv_from(&args[i.min(args.len())..], uncertain),
        None => Inner::Opaque,
    };
    let none = Opts { flags: b"", with_arg: b"", long_flags: &[], long_with_arg: &[], numeric: false };
    match name {
        b"exec" => parsed(opts(Opts { flags: b"cl", with_arg: b"a", ..none }), false),
        b"command" => {
            // `command -v/-V name` only describes it.
            if args
                .iter()
                .take_while(|w| w.text.starts_with(b"-"))
                .any(|w| w.text.contains(&b'v') || w.text.contains(&b'V'))
            {
                return Inner::None;
            }
            parsed(opts(Opts { flags: b"p", ..none }), false)
        }
        b"builtin" | b"nohup" => parsed(opts(none), false),
        b"time" => parsed(
            opts(Opts {
                flags: b"pvaq",
                with_arg: b"fo",
                long_flags: &["verbose", "portability", "append", "quiet"],
                long_with_arg: &["format", "output"],
                numeric: false,
            }),
            false,
        ),
        b"nice" => parsed(opts(Opts { with_arg: b"n", long_with_arg: &["adjustment"], numeric: true, ..none }), false),
        b"timeout" => {
            let o = Opts {
                flags: b"v",
                with_arg: b"sk",
                long_flags: &["preserve-status", "foreground", "verbose"],
                long_with_arg: &["signal", "kill-after"],
                numeric: false,
            };
            // Then the duration.
            parsed(opts(o).map(|i| i + 1), false)
        }
        b"env" => env(args),
        b"stdbuf" => {
            parsed(opts(Opts { with_arg: b"ioe", long_with_arg: &["input", "output", "error"], ..none }), false)
        }
        b"setsid" => parsed(opts(Opts { flags: b"cfw", long_flags: &["ctty", "fork", "wait"], ..none }), false),
        b"chroot" => {
            let o = Opts { long_flags: &["skip-chdir"], long_with_arg: &["userspec", "groups"], ..none };
            // Then the new root.
            parsed(opts(o).map(|i| i + 1), false)
        }
        b"sudo" => {
            let o = Opts {
                flags: b"AbEHkKnPSsiBNlve",
                with_arg: b"ugpCDrtUTR",
                long_flags: &[
                    "askpass",
                    "background",
                    "preserve-env",
                    "set-home",
                    "login",
                    "non-interactive",
                    "preserve-groups",
                    "stdin",
                    "shell",
                    "bell",
                    "reset-timestamp",
                    "remove-timestamp",
                    "list",
                    "validate",
                    "edit",
                ],
                long_with_arg: &[
                    "user",
                    "group",
                    "prompt",
                    "close-from",
                    "chdir",
                    "role",
                    "type",
                    "other-user",
                    "command-timeout",
                    "chroot",
                    "host",
                ],
                numeric: false,
            };
            match opts(o) {
                Some(i) => {
                    let rest = &args[i.min(args.len())..];
                    let n = skip_assignments(rest);
                    with_code_assignments(argv_from(&rest[n..], false), &rest[..n])
                }
                None => Inner::Opaque,
            }
        }
        b"doas" => parsed(opts(Opts { flags: b"Lns", with_arg: b"Cu", ..none }), false),
        b"xargs" => xargs(args),
        b"find" => find(args),
        b"eval" => {
            let rest = match args.first() {
                Some(w) if w.text[..] == *b"--" => &args[1..],
                _ => args,
            };
            Inner::Scripts {
                scripts: vec![rest.iter().map(|w| &w.text[..]).collect::<Vec<_>>().join(&b' ')],
                uncertain: false,
            }
        }
        b"busybox" | b"toybox" => argv_from(args, false),
        // `runuser -u USER [--] CMD ARGS...` runs an argv.
        b"runuser" if args.iter().any(|w| w.text[..] == *b"-u" || w.text.starts_with(b"--user")) => {
            Inner::Suffixes(args)
        }
        b"su" | b"runuser" => {
            // `su [opts] [user] -c CMD`: the command is a script.
            match args.iter().position(|w| matches!(&w.text[..], b"-c" | b"--command")) {
                Some(c) => match args.get(c + 1) {
                    Some(s) => Inner::Scripts { scripts: vec![s.text.to_vec()], uncertain: false },
                    None => Inner::Opaque,
                },
                None => args
                    .iter()
                    .find_map(|w| {
                        w.text
                            .strip_prefix(b"--command=")
                            .map(|s| Inner::Scripts { scripts: vec![s.to_vec()], uncertain: false })
                    })
                    .unwrap_or(Inner::None),
            }
        }
        // Builtins that run a string as a command: `trap ARG SIG`, the
        // callback of `mapfile -C`, `compgen`/`complete -C`, `bind -x`.
        b"trap" => {
            let ops: Vec<&Word> = args.iter().skip_while(|w| w.text.starts_with(b"-") && w.text[..] != *b"-").collect();
            match ops.as_slice() {
                [a, _, ..] => Inner::Scripts { scripts: vec![a.text.to_vec()], uncertain: false },
                _ => Inner::None,
            }
        }
        b"mapfile" | b"readarray" => option_scripts(args, b"C"),
        b"compgen" | b"complete" => option_scripts(args, b"C"),
        // `bind -x KEYSEQ:COMMAND`: the command is after the first `:`.
        b"bind" => match option_scripts(args, b"x") {
            Inner::Scripts { scripts: v, uncertain } => Inner::Scripts {
                scripts: v
                    .into_iter()
                    .map(|s| match s.iter().position(|&b| b == b':') {
                        Some(i) => s[i + 1..].to_vec(),
                        None => s,
                    })
                    .collect(),
                uncertain,
            },
            other => other,
        },
        // `fc` runs an editor (`-e`) or re-runs history: never readable.
        b"fc" => Inner::Opaque,
        n if SHELLS.contains(&n) => {
            // Every argument after the option cluster holding `c` is scanned
            // as a script, so `$0` text can only add a finding.
            let c = args.iter().position(|w| {
                w.text.len() > 1 && w.text[0] == b'-' && w.text[1] != b'-' && w.text[1..].contains(&b'c')
            });
            match c {
                Some(c) => Inner::Scripts {
                    scripts: args[c + 1..].iter().map(|w| w.text.to_vec()).collect(),
                    uncertain: false,
                },
                // Without `-c` a shell runs a script file (the allow rule
                // naming it is the author's risk, as for any program that
                // reads a file) or its standard input (`echo 'rm x' | sh`,
                // `bash -s`, `sh -`, `sh /dev/stdin`): a script the matcher
                // cannot see, often written right before it in the command.
                None if shell_reads_stdin(args) => Inner::Opaque,
                None => Inner::None,
            }
        }
        // `source FILE` / `. FILE` run a file's text: standard input is opaque.
        b"source" | b"." if args.first().is_none_or(|w| is_stdin_path(&w.text)) => Inner::Opaque,
        // `enable -f` loads a builtin from a shared object; `hash -p PATH
        // NAME` makes a later `NAME` run `PATH`.
        b"enable" | b"hash" if args.iter().any(|w| is_option_with(w, b'f') || is_option_with(w, b'p')) => Inner::Opaque,
        // `alias NAME=VALUE`: VALUE is command text a later line runs (dash
        // expands aliases in scripts; bash with `expand_aliases`), and it
        // changes what a later word means: read as a script, and uncertain.
        b"alias" => {
            let values: Vec<Vec<u8>> = args
                .iter()
                .filter_map(|w| w.text.iter().position(|&b| b == b'=').map(|i| w.text[i + 1..].to_vec()))
                .collect();
            if values.is_empty() { Inner::None } else { Inner::Scripts { scripts: values, uncertain: true } }
        }
        b"ionice" => {
            let o = Opts {
                flags: b"t",
                with_arg: b"cnpPu",
                long_flags: &["ignore"],
                long_with_arg: &["class", "classdata", "pid", "pgid", "uid"],
                numeric: false,
            };
            // `-p/-P/-u` act on running processes: no command.
            if args
                .iter()
                .take_while(|w| w.text.starts_with(b"-"))
                .any(|w| is_option_with(w, b'p') || is_option_with(w, b'P') || is_option_with(w, b'u'))
            {
                return Inner::None;
            }
            parsed(opts(o), false)
        }
        b"chrt" => {
            let o = Opts {
                flags: b"abdfioRrvm",
                with_arg: b"TPD",
                long_flags: &[
                    "all-tasks",
                    "batch",
                    "deadline",
                    "fifo",
                    "idle",
                    "other",
                    "rr",
                    "reset-on-fork",
                    "verbose",
                    "max",
                ],
                long_with_arg: &["sched-runtime", "sched-period", "sched-deadline"],
                numeric: false,
            };
            // Then the priority.
            parsed(opts(o).map(|i| i + 1), false)
        }
        b"taskset" => {
            if args
                .iter()
                .take_while(|w| w.text.starts_with(b"-"))
                .any(|w| is_option_with(w, b'p') || w.text[..] == *b"--pid")
            {
                return Inner::None;
            }
            let o = Opts { flags: b"ac", long_flags: &["all-tasks", "cpu-list"], ..none };
            // Then the mask or list.
            parsed(opts(o).map(|i| i + 1), false)
        }
        b"flock" => {
            let o = Opts {
                flags: b"sxunoFe",
                with_arg: b"wE",
                long_flags: &["shared", "exclusive", "unlock", "nonblock", "nb", "close", "no-fork", "verbose"],
                long_with_arg: &["timeout", "wait", "conflict-exit-code"],
                numeric: false,
            };
            match opts(o) {
                // FILE, then `-c SCRIPT` or the command.
                Some(i) => match args.get(i + 1).map(|w| &w.text[..]) {
                    Some(b"-c" | b"--command") => match args.get(i + 2) {
                        Some(s) => Inner::Scripts { scripts: vec![s.text.to_vec()], uncertain: false },
                        None => Inner::Opaque,
                    },
                    _ => argv_from(args.get(i + 1..).unwrap_or(&[]), false),
                },
                None => Inner::Opaque,
            }
        }
        // `script -c CMD` runs CMD with the shell; without it, a shell.
        b"script" => match option_scripts(args, b"c") {
            Inner::None => match args.iter().find_map(|w| w.text.strip_prefix(b"--command=")) {
                Some(s) => Inner::Scripts { scripts: vec![s.to_vec()], uncertain: false },
                None => match args.iter().position(|w| w.text[..] == *b"--command") {
                    Some(i) => match args.get(i + 1) {
                        Some(s) => Inner::Scripts { scripts: vec![s.text.to_vec()], uncertain: false },
                        None => Inner::Opaque,
                    },
                    None => Inner::Opaque,
                },
            },
            other => other,
        },
        // `watch CMD ARGS...` joins its arguments and runs them with `sh -c`
        // (`-x` runs them as an argv): both readings are scanned.
        b"watch" => {
            let o = Opts {
                flags: b"bdegtxcprwC",
                with_arg: b"nq",
                long_flags: &[
                    "beep",
                    "color",
                    "no-color",
                    "differences",
                    "errexit",
                    "chgexit",
                    "exec",
                    "precise",
                    "no-title",
                    "no-rerun",
                    "no-wrap",
                ],
                long_with_arg: &["interval", "equexit"],
                numeric: false,
            };
            match opts(o) {
                Some(i) if i < args.len() => Inner::Scripts {
                    scripts: vec![args[i..].iter().map(|w| &w.text[..]).collect::<Vec<_>>().join(&b' ')],
                    uncertain: false,
                },
                Some(_) => Inner::None,
                None => Inner::Opaque,
            }
        }
        // `sg [-] GROUP [-c] COMMAND`: COMMAND is a shell command line;
        // without one, a shell.
        b"sg" => {
            let rest = match args.first() {
                Some(w) if w.text[..] == *b"-" => &args[1..],
                _ => args,
            };
            let cmd = match rest.get(1) {
                Some(w) if w.text[..] == *b"-c" => &rest[2..],
                _ => rest.get(1..).unwrap_or(&[]),
            };
            if cmd.is_empty() {
                Inner::Opaque
            } else {
                Inner::Scripts {
                    scripts: vec![cmd.iter().map(|w| &w.text[..]).collect::<Vec<_>>().join(&b' ')],
                    uncertain: false,
                }
            }
        }
        // Wrappers whose options are not parsed here exactly: the command
        // may start at any word after the name, and every suffix is
        // deny-checked; without any word they start a shell.
        // Runners that take their command as a template, a script file, a
        // property or a string of their own language: never readable.
        b"parallel" | b"sem" | b"entr" | b"expect" | b"run-parts" | b"gdb" | b"capsh" | b"start-stop-daemon"
        | b"systemd-run" => Inner::Opaque,
        n if SUFFIX_WRAPPERS.contains(&n) => {
            if args.is_empty() {
                Inner::Opaque
            } else {
                Inner::Suffixes(args)
            }
        }
        _ => Inner::None,
    }
}

/// Commands that run the command given in their arguments with options this
/// module does not parse exactly (tracers, namespace and sandbox tools,
/// privilege and proxy wrappers): every suffix of their arguments is
/// deny-checked.
pub(crate) const SUFFIX_WRAPPERS: &[&[u8]] = &[
    b"strace",
    b"ltrace",
    b"valgrind",
    b"unshare",
    b"nsenter",
    b"firejail",
    b"bwrap",
    b"numactl",
    b"fakeroot",
    b"faketime",
    b"torsocks",
    b"torify",
    b"proxychains",
    b"proxychains4",
    b"pkexec",
    b"cgexec",
    b"xvfb-run",
    b"dbus-run-session",
    b"dbus-launch",
    b"eatmydata",
    b"nocache",
    b"chronic",
    b"unbuffer",
    b"catchsegv",
    b"caffeinate",
    b"prlimit",
    b"setpriv",
    b"tsp",
    b"ssh-agent",
    b"sshpass",
    b"rlwrap",
    b"linux32",
    b"linux64",
    b"setarch",
    b"schroot",
    b"fakechroot",
    b"proot",
    b"daemonize",
    b"with-lock-ex",
    b"lckdo",
    b"chpst",
    b"softlimit",
    b"setuidgid",
    b"envdir",
    b"envuidgid",
    b"s6-setuidgid",
];

/// Paths that are a process's standard input (or another inherited fd).
fn is_stdin_path(t: &[u8]) -> bool {
    t == b"-" || t == b"/dev/stdin" || t.starts_with(b"/dev/fd/") || t.starts_with(b"/proc/")
}

/// Whether a shell started with `args` (no `-c`) reads its script from
/// standard input: `-s`, no script operand, or a stdin path as the operand.
fn shell_reads_stdin(args: &[Word]) -> bool {
    let mut i = 0;
    while i < args.len() {
        let t = &args[i].text[..];
        if t == b"--" {
            i += 1;
            break;
        }
        if t == b"-" || !(t.starts_with(b"-") || t.starts_with(b"+")) {
            break;
        }
        if t.starts_with(b"--") {
            // `--rcfile F`, `--init-file F` take an argument.
            i += if matches!(t, b"--rcfile" | b"--init-file") { 2 } else { 1 };
            continue;
        }
        if t[1..].contains(&b's') {
            return true;
        }
        // `-o OPT`, `+O OPT`: an argument.
        i += if t[1..].iter().any(|&c| c == b'o' || c == b'O') { 2 } else { 1 };
    }
    args.get(i).is_none_or(|w| is_stdin_path(&w.text))
}

/// A short option cluster (`-xyz`, not `--x`) that holds the letter `c`.
fn is_option_with(w: &Word, c: u8) -> bool {
    w.text.len() > 1 && w.text[0] == b'-' && w.text[1] != b'-' && w.text[1..].contains(&c)
}

/// The arguments of the short options `letters` (attached or the next
/// word), each a script; `None` when there are none.
fn option_scripts<'w, 'a>(args: &'w [Word<'a>], letters: &[u8]) -> Inner<'w, 'a> {
    let mut scripts = Vec::new();
    for (i, w) in args.iter().enumerate() {
        let t = &w.text[..];
        if t.len() < 2 || t[0] != b'-' || t[1] == b'-' {
            continue;
        }
        if let Some(k) = t[1..].iter().position(|c| letters.contains(c)) {
            let rest = &t[k + 2..];
            if !rest.is_empty() {
                scripts.push(rest.to_vec());
            } else {
                match args.get(i + 1) {
                    Some(s) => scripts.push(s.text.to_vec()),
                    None => return Inner::Opaque,
                }
            }
        }
    }
    if scripts.is_empty() { Inner::None } else { Inner::Scripts { scripts, uncertain: false } }
}

/// `env [opts] [NAME=value...] [cmd...]`; `-S`/`--split-string` is a script.
fn env<'w, 'a>(args: &'w [Word<'a>]) -> Inner<'w, 'a> {
    let mut i = 0;
    let mut scripts = Vec::new();
    while i < args.len() {
        let t = &args[i].text[..];
        match t {
            b"--" => {
                i += 1;
                break;
            }
            b"-" | b"-i" | b"-0" | b"-v" | b"--null" | b"--ignore-environment" | b"--debug" => i += 1,
            b"-u" | b"-C" | b"--unset" | b"--chdir" => i += 2,
            b"-S" | b"--split-string" => {
                let Some(s) = args.get(i + 1) else { return Inner::Opaque };
                scripts.push(s.text.to_vec());
                i += 2;
            }
            _ if t.starts_with(b"-S") => {
                scripts.push(t[2..].to_vec());
                i += 1;
            }
            _ if t.starts_with(b"--split-string=") => {
                scripts.push(t[b"--split-string=".len()..].to_vec());
                i += 1;
            }
            _ if t.starts_with(b"--unset=") || t.starts_with(b"--chdir=") => i += 1,
            _ if (t.starts_with(b"-u") || t.starts_with(b"-C")) && t.len() > 2 => i += 1,
            _ if t.starts_with(b"--default-signal")
                || t.starts_with(b"--ignore-signal")
                || t.starts_with(b"--block-signal")
                || t == b"--list-signal-handling" =>
            {
                i += 1
            }
            _ if t.starts_with(b"-") && t.len() > 1 => return Inner::Opaque,
            _ => break,
        }
    }
    if !scripts.is_empty() {
        // The split string becomes the command (with the rest after it).
        let rest = args.get(i..).unwrap_or(&[]);
        let tail: Vec<&[u8]> = rest.iter().map(|w| &w.text[..]).collect();
        let joined: Vec<u8> = scripts.join(&b' ');
        let mut s = joined;
        for t in tail {
            s.push(b' ');
            s.extend_from_slice(t);
        }
        return Inner::Scripts { scripts: vec![s], uncertain: false };
    }
    let rest = args.get(i..).unwrap_or(&[]);
    let n = skip_assignments(rest);
    with_code_assignments(argv_from(&rest[n..], false), &rest[..n])
}

/// `inner`, uncertain when `assignments` set a variable that names code.
fn with_code_assignments<'w, 'a>(inner: Inner<'w, 'a>, assignments: &[Word]) -> Inner<'w, 'a> {
    match inner {
        Inner::Argv { argvs, unknown_args, .. } if assignments.iter().any(|w| assigns_code(&w.text)) => {
            Inner::Argv { argvs, unknown_args, uncertain: true }
        }
        other => other,
    }
}

/// `xargs [opts] [cmd [args]]`: its input adds arguments, so always uncertain.
fn xargs<'w, 'a>(args: &'w [Word<'a>]) -> Inner<'w, 'a> {
    let mut i = 0;
    while i < args.len() {
        let t = &args[i].text[..];
        if t == b"--" {
            i += 1;
            break;
        }
        if t.len() < 2 || t[0] != b'-' {
            break;
        }
        let long_arg = [
            "arg-file",
            "delimiter",
            "eof",
            "replace",
            "max-lines",
            "max-args",
            "max-procs",
            "max-chars",
            "process-slot-var",
        ];
        let long_flag = ["null", "interactive", "no-run-if-empty", "verbose", "exit", "open-tty", "show-limits"];
        if let Some(long) = t.strip_prefix(b"--") {
            let (name, has_value) = match long.iter().position(|&b| b == b'=') {
                Some(eq) => (&long[..eq], true),
                None => (long, false),
            };
            let Ok(name) = std::str::from_utf8(name) else { return Inner::Opaque };
            if long_arg.contains(&name) {
                // `--replace`, `--eof` and `--max-lines` take an optional value
                // (attached only).
                i += if has_value || matches!(name, "replace" | "eof" | "max-lines") { 1 } else { 2 };
            } else if long_flag.contains(&name) {
                i += 1;
            } else {
                return Inner::Opaque;
            }
            continue;
        }
        let mut step = 1;
        for (k, &c) in t[1..].iter().enumerate() {
            match c {
                b'0' | b'p' | b'r' | b't' | b'x' | b'o' => {}
                // Optional attached value.
                b'e' | b'i' | b'l' => break,
                b'a' | b'd' | b'E' | b'I' | b'L' | b'n' | b'P' | b's' => {
                    if k + 2 == t.len() {
                        step = 2;
                    }
                    break;
                }
                _ => return Inner::Opaque,
            }
        }
        i += step;
    }
    if i > args.len() {
        return Inner::Opaque;
    }
    // With no command, xargs runs `echo`.
    Inner::Argv {
        argvs: if i < args.len() { vec![&args[i..]] } else { Vec::new() },
        unknown_args: true,
        uncertain: false,
    }
}

/// `find ... -exec CMD ... ;` (also `+`, `-execdir`, `-ok`, `-okdir`).
fn find<'w, 'a>(args: &'w [Word<'a>]) -> Inner<'w, 'a> {
    let mut argvs = Vec::new();
    let mut uncertain = false;
    let mut i = 0;
    while i < args.len() {
        if matches!(&args[i].text[..], b"-exec" | b"-execdir" | b"-ok" | b"-okdir") {
            let start = i + 1;
            let Some(len) = args[start..].iter().enumerate().position(|(k, w)| {
                w.text[..] == *b";" || (w.text[..] == *b"+" && k > 0 && args[start + k - 1].text[..] == *b"{}")
            }) else {
                return Inner::Opaque;
            };
            let cmd = &args[start..start + len];
            if cmd.is_empty() {
                return Inner::Opaque;
            }
            uncertain |= cmd.iter().any(|w| w.text.windows(2).any(|p| p == b"{}"));
            argvs.push(cmd);
            i = start + len + 1;
        } else {
            i += 1;
        }
    }
    if argvs.is_empty() { Inner::None } else { Inner::Argv { argvs, unknown_args: uncertain, uncertain: false } }
}
