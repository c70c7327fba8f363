//! Every construct of the table in `docs/permissions.md` ("Constructs and
//! verdicts"), with the deny rule `touch **` and the allow rule `**`: the
//! matcher's verdict is the table's, the doc holds the row, and a command
//! the matcher allows is run under bash and under dash in a scratch
//! directory (PATH of a few harmless tools only, empty environment, a
//! timeout) to show it does not create the marker file. Nothing the matcher
//! does not allow is ever run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use car_runtime::permission::{ShellRules, Verdict};

use Verdict::{Allow, Ask, Deny};

/// (construct, what it is, verdict).
const TABLE: &[(&str, &str, Verdict)] = &[
    ("touch marker", "the denied command itself", Deny),
    ("/usr/bin/touch marker", "argv0 by path (basename)", Deny),
    ("t[o]uch marker", "a glob argv0 (uncertain)", Ask),
    ("touch /tmp/marke[r]", "a glob argument", Deny),
    ("echo $(touch marker)", "command substitution", Deny),
    ("echo `touch marker`", "backticks", Deny),
    ("cat <(touch marker)", "process substitution", Deny),
    ("x=$(touch marker)", "substitution in an assignment", Deny),
    ("echo ${x:-$(touch marker)}", "substitution in a parameter expansion", Deny),
    ("(( (1) + $(touch marker) ))", "substitution inside arithmetic", Deny),
    ("echo $(( $(touch marker) + 1 ))", "substitution inside `$((...))`", Deny),
    ("for (( i=$(touch marker); i<1; i++ )); do :; done", "substitution in a `for ((...))` header", Deny),
    ("[[ -n <(touch marker) ]]", "process substitution inside `[[ ]]`", Deny),
    ("[[ -v 'a[$(touch marker)]' ]]", "a quoted subscript in `[[ -v ]]`", Deny),
    ("test -v 'a[$(touch marker)]'", "`test -v` name operand", Deny),
    ("[ -v 'a[$(touch marker)]' ]", "`[ -v ]` name operand", Deny),
    ("printf -v 'a[$(touch marker)]' x", "`printf -v` name operand", Deny),
    ("read 'a[$(touch marker)]' < /dev/null", "`read` name operand", Deny),
    ("declare 'a[$(touch marker)]=1'", "`declare` with a subscript", Deny),
    ("let 'a[$(touch marker)]=1'", "`let` expression", Deny),
    ("mapfile -C 'touch marker' -c 1 a < /dev/null", "`mapfile -C` callback", Deny),
    ("trap 'touch marker' EXIT", "`trap` action", Deny),
    ("compgen -C 'touch marker' x", "`compgen -C` command", Deny),
    ("printf '%s\\n' '$(touch marker)'", "a quoted `$(` in a `printf` operand", Allow),
    ("x='a[$(touch marker)]'; (( x ))", "arithmetic over a name", Ask),
    ("[[ $x -eq 1 ]]", "arithmetic comparison in `[[ ]]`", Ask),
    ("if true; then touch marker; fi", "inside a compound command", Deny),
    ("f() { touch marker; }; f", "inside a function", Deny),
    ("case x in x) touch marker;; esac", "inside a `case` item", Deny),
    ("cat <<EOF\n$(touch marker)\nEOF", "substitution in a here-doc body", Deny),
    ("exec touch marker", "wrapper `exec`", Deny),
    ("command touch marker", "wrapper `command`", Deny),
    ("builtin touch marker", "wrapper `builtin`", Deny),
    ("eval -- touch marker", "wrapper `eval --`", Deny),
    ("eval 'touch marker'", "`eval` of a literal", Deny),
    ("env touch marker", "wrapper `env`", Deny),
    ("env -i A=1 touch marker", "`env` with options and assignments", Deny),
    ("env -S 'touch marker'", "`env -S` split string", Deny),
    ("nice -n 5 touch marker", "wrapper `nice`", Deny),
    ("timeout 5 touch marker", "wrapper `timeout`", Deny),
    ("nohup touch marker", "wrapper `nohup`", Deny),
    ("stdbuf -oL touch marker", "wrapper `stdbuf`", Deny),
    ("setsid touch marker", "wrapper `setsid`", Deny),
    ("sudo -u root touch marker", "wrapper `sudo`", Deny),
    ("echo marker | xargs touch", "wrapper `xargs`", Deny),
    ("find . -maxdepth 0 -exec touch marker \\;", "`find -exec`", Deny),
    ("sh -c 'touch marker'", "`sh -c`", Deny),
    ("dash -c 'touch marker'", "`dash -c`", Deny),
    ("rbash -c 'touch marker'", "`rbash -c`", Deny),
    ("busybox sh -c 'touch marker'", "`busybox sh -c`", Deny),
    ("sudo --frobnicate touch marker", "a wrapper option we do not know", Ask),
    ("time -- touch marker", "`time --`", Deny),
    ("ionice -c3 touch marker", "wrapper `ionice`", Deny),
    ("chrt -o 0 touch marker", "wrapper `chrt`", Deny),
    ("taskset 1 touch marker", "wrapper `taskset`", Deny),
    ("flock . touch marker", "wrapper `flock`", Deny),
    ("flock . -c 'touch marker'", "`flock -c`", Deny),
    ("script -qc 'touch marker' /dev/null", "`script -c`", Deny),
    ("watch -n 1 touch marker", "wrapper `watch` (a `sh -c` of its arguments)", Deny),
    ("sg root -c 'touch marker'", "`sg GROUP -c`", Deny),
    ("runuser -u root -- touch marker", "`runuser -u`", Deny),
    ("unshare -r touch marker", "wrapper `unshare` (every suffix is deny-checked)", Deny),
    ("strace -f -o /dev/null touch marker", "wrapper `strace` (every suffix is deny-checked)", Deny),
    ("pkexec touch marker", "wrapper `pkexec` (every suffix is deny-checked)", Deny),
    ("exec {fd}>/dev/null touch marker", "a `{NAME}>` redirection (bash) before the command", Deny),
    ("printf -v'a[$(touch marker)]' x", "`printf -vNAME` (attached)", Deny),
    ("alias ls='touch marker'\nls", "an alias value (dash expands aliases in scripts)", Deny),
    ("echo 'touch marker' | sh", "a shell reading its script from standard input", Ask),
    ("echo 'touch marker' | bash -s", "`bash -s`", Ask),
    ("echo 'touch marker' | sh /dev/stdin", "a shell running `/dev/stdin`", Ask),
    ("echo 'touch marker' | . /dev/stdin", "`.` of standard input", Ask),
    ("hash -p /usr/bin/touch ls; ls marker", "`hash -p` (a later `ls` runs another file)", Ask),
    ("BASH_ENV='$(touch marker)' bash -c true", "`BASH_ENV` (bash expands and sources it)", Ask),
    ("ENV='$(touch marker)' sh -i", "`ENV` (an interactive sh expands and sources it)", Ask),
    ("env 'BASH_FUNC_ls%%=() { touch marker; }' bash -c ls", "an exported bash function in `env`", Ask),
    ("PATH=. ls", "`PATH` (which file runs)", Ask),
    ("LD_PRELOAD=./x.so ls", "`LD_PRELOAD` (code the loader runs)", Ask),
    ("export BASH_ENV=./x; bash -c true", "`export` of a variable that names code", Ask),
    ("parallel touch ::: marker", "a runner that takes a template (`parallel`)", Ask),
    ("echo ~", "a tilde word", Ask),
    ("ls &&", "incomplete list: trailing `&&`", Ask),
    ("ls ||", "incomplete list: trailing `||`", Ask),
    ("ls |", "incomplete list: trailing `|`", Ask),
    ("; ls", "incomplete list: leading `;`", Ask),
    ("ls", "a plain command", Allow),
    ("echo touch marker", "`touch` as an argument", Allow),
    ("echo '$(touch marker)'", "a quoted `$(`", Allow),
    ("test -f marker && echo yes", "`test` with no substitution", Allow),
    ("printf '%s\\n' x | cat", "a pipeline", Allow),
    ("(( 1 + 2 ))", "arithmetic over numbers (a keyword: never allowed)", Ask),
];

/// The row as the doc spells it.
fn doc_row(cmd: &str, what: &str, v: Verdict) -> String {
    let cmd = cmd.replace('\n', "\\n").replace('|', "\\|");
    let code = if cmd.contains('`') { format!("`` {cmd} ``") } else { format!("`{cmd}`") };
    format!("| {code} | {what} | {} |", v.as_str())
}

fn rules() -> ShellRules {
    ShellRules::new(&["**"], &[], &["touch **"]).unwrap()
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "car-shell-constructs-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory of links to the few harmless tools an allowed command may
/// use (no rm, no sudo).
fn stub_path(root: &Path) -> PathBuf {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["touch", "echo", "cat", "ls", "true", "printf", "test", "env", "nice", "timeout", "xargs", "find"] {
        for dir in ["/usr/bin", "/bin"] {
            let p = Path::new(dir).join(tool);
            if p.exists() {
                let _ = std::os::unix::fs::symlink(&p, bin.join(tool));
                break;
            }
        }
    }
    bin
}

fn shells() -> Vec<&'static str> {
    ["/bin/bash", "/bin/dash"].into_iter().filter(|s| Path::new(s).exists()).collect()
}

#[test]
fn every_construct_has_its_verdict_and_its_doc_row() {
    let r = rules();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/permissions.md")).unwrap();
    let mut missing = Vec::new();
    for &(cmd, what, want) in TABLE {
        assert_eq!(r.check(cmd), want, "{cmd:?} ({what})");
        let row = doc_row(cmd, what, want);
        if !doc.contains(&row) {
            missing.push(row);
        }
    }
    assert!(missing.is_empty(), "docs/permissions.md lacks these rows:\n{}", missing.join("\n"));
}

#[test]
fn no_allowed_construct_creates_the_marker_under_bash_or_dash() {
    let shells = shells();
    assert!(!shells.is_empty(), "neither bash nor dash is installed");
    let r = rules();
    let mut ran = 0;
    for &(cmd, _, _) in TABLE {
        if r.check(cmd) != Allow {
            continue;
        }
        for sh in &shells {
            let dir = Scratch::new();
            let bin = stub_path(dir.path());
            let work = dir.path().join("work");
            std::fs::create_dir(&work).unwrap();
            let status = Command::new("/usr/bin/timeout")
                .args(["10", sh, "-c", cmd])
                .current_dir(&work)
                .env_clear()
                .env("PATH", &bin)
                .env("HOME", &work)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            let _ = status;
            assert!(!work.join("marker").exists(), "{sh} created the marker for the allowed {cmd:?}");
            ran += 1;
        }
    }
    assert!(ran > 0);
}

/// The harness itself: the marker is created when `touch` does run.
#[test]
fn the_marker_check_sees_a_real_touch() {
    let dir = Scratch::new();
    let bin = stub_path(dir.path());
    let status = Command::new("/bin/sh")
        .args(["-c", "touch marker"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", &bin)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(dir.path().join("marker").exists());
}

/// Prints the doc table (`cargo test --test integration -- --ignored --nocapture shell_constructs::`).
#[test]
#[ignore]
fn print_doc_table() {
    println!("| Construct | What | Verdict |\n|---|---|---|");
    for &(cmd, what, v) in TABLE {
        println!("{}", doc_row(cmd, what, v));
    }
}
