//! Property tests of the shell matcher:
//! - a command holding a denied command in any segment, however it is
//!   wrapped or joined, is never allowed (and is denied when well formed);
//! - a differential test against a deliberately simple reference matcher,
//!   written here independently, on a restricted command language both
//!   understand.

use car_runtime::permission::{ShellRules, Verdict};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// Deny is never lost.

/// Harmless commands.
fn harmless() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "ls -la",
        "echo hi",
        "git status",
        "cat f",
        "true",
        "echo 'a; rm'",
        "grep -r x .",
        "FOO=1 ls",
        "ls 2>/dev/null",
        "echo $HOME",
        "cat <<< x",
        "echo `date`",
    ])
    .prop_map(str::to_string)
}

/// The denied command, spelt in ways the shell still runs as `rm`.
fn denied() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "rm -rf /",
        "/bin/rm -rf /",
        "'rm' -rf /",
        "\"rm\" x",
        "r\\m x",
        "FOO=1 rm x",
        "A=1 B=2 /usr/bin/rm -f y",
        ">/dev/null rm x",
        "rm x > out",
        "rm x <<< y",
        "bash -c 'rm -rf /'",
        "sh -c 'echo a; rm -rf /'",
        "eval 'rm x'",
        "r\\\nm x",
    ])
    .prop_map(str::to_string)
}

/// Wraps a command in a construct that still runs it.
fn wrap(cmd: String, how: u8) -> String {
    match how % 13 {
        0 => cmd,
        1 => format!("( {cmd} )"),
        2 => format!("{{ {cmd}; }}"),
        3 => format!("echo $({cmd})"),
        4 => format!("echo `{}`", cmd.replace('\\', "\\\\")),
        5 => format!("if true; then {cmd}; fi"),
        6 => format!("while true; do {cmd}; done"),
        7 => format!("! {cmd}"),
        8 => format!("cat <({cmd})"),
        9 => format!("bash <<EOF\n{cmd}\nEOF"),
        10 => format!("cat <<'EOF'\ndon't\nEOF\n{cmd}"),
        11 => format!("case x in (a|b) ls;; *) {cmd};; esac"),
        _ => format!("f() {{ {cmd}; }}"),
    }
}

fn separator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["; ", " && ", " || ", " | ", " |& ", " & ", "\n", " ;\n "])
}

fn deny_rules() -> ShellRules {
    ShellRules::new(
        &["* **", "ls **", "echo **", "git **", "cat **", "true", "bash **", "sh **", "eval **"],
        &[],
        &["rm **"],
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn a_denied_segment_is_never_allowed(
        before in prop::collection::vec((harmless(), separator()), 0..4),
        bad in denied(),
        how in any::<u8>(),
        after in prop::collection::vec((separator(), harmless()), 0..4),
    ) {
        let mut cmd = String::new();
        for (c, s) in &before {
            cmd.push_str(c);
            cmd.push_str(s);
        }
        cmd.push_str(&wrap(bad, how));
        for (s, c) in &after {
            cmd.push_str(s);
            cmd.push_str(c);
        }
        let v = deny_rules().check(&cmd);
        prop_assert_ne!(v, Verdict::Allow, "{:?}", cmd);
        // Every generated command is well formed, so the deny is reported.
        prop_assert_eq!(v, Verdict::Deny, "{:?}", cmd);
    }

    #[test]
    fn an_earlier_deny_survives_any_garbage_after_it(garbage in "[ -~\\t\\n\u{a0}\u{2028}]{0,40}") {
        let cmd = format!("rm -rf /\n{garbage}");
        prop_assert_eq!(deny_rules().check(&cmd), Verdict::Deny, "{:?}", cmd);
    }

    #[test]
    fn a_deny_after_garbage_is_never_allowed(garbage in "[ -~\\t\\n]{0,40}") {
        // The space keeps a trailing backslash from joining the lines (a
        // backslash-newline would make the next word `xrm`, which is not rm).
        let cmd = format!("{garbage} \nrm -rf /");
        prop_assert_ne!(deny_rules().check(&cmd), Verdict::Allow, "{:?}", cmd);
    }

    #[test]
    fn shell_soup_never_panics_and_keeps_an_earlier_deny(
        soup in "[()${}\\[\\]'\"\\\\`;&|<>#!*?=~ a-z0-9\n\t-]{0,120}",
    ) {
        let r = deny_rules();
        let _ = r.scan(&soup);
        prop_assert_eq!(r.check(&format!("rm x\n{soup}")), Verdict::Deny);
    }

    #[test]
    fn never_panics_and_nul_is_ask(s in "\\PC{0,80}", nul in any::<bool>()) {
        let r = deny_rules();
        let _ = r.check(&s);
        if nul {
            prop_assert_eq!(r.check(&format!("{s}\0")), Verdict::Ask);
        }
    }
}

// ---------------------------------------------------------------------------
// Differential against a simple reference.

/// The reference: a restricted language of bare words `[A-Za-z0-9/._=-]`,
/// single- and double-quoted words (no `$`, backtick or backslash inside),
/// backslash escapes, the redirections `> f`, `>/dev/null`, `2>/dev/null`,
/// `2>&1` and `>&2`, and the separators `;`, `&&`, `||`, `|`, `&` and
/// newline. No other syntax appears in the generated inputs, so this tiny
/// matcher is the whole truth for them.
mod reference {
    #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
    pub enum V {
        Allow,
        Ask,
        Deny,
    }

    /// (text, was quoted)
    type Tok = (String, bool);

    #[derive(Default)]
    struct Seg {
        words: Vec<Tok>,
        writes: bool,
        redirected: bool,
    }

    fn segments(cmd: &str) -> Vec<Seg> {
        let mut segs = vec![Seg::default()];
        let mut word: Option<Tok> = None;
        let chars: Vec<char> = cmd.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            i += 1;
            match c {
                '\'' | '"' => {
                    let w = word.get_or_insert((String::new(), false));
                    w.1 = true;
                    while i < chars.len() && chars[i] != c {
                        w.0.push(chars[i]);
                        i += 1;
                    }
                    i += 1;
                }
                '\\' => {
                    let w = word.get_or_insert((String::new(), false));
                    w.1 = true;
                    w.0.push(chars[i]);
                    i += 1;
                }
                '>' => {
                    // A pending all-digit unquoted word is the fd number.
                    if word.as_ref().is_some_and(|w| !w.1 && w.0.chars().all(|d| d.is_ascii_digit())) {
                        word = None;
                    } else if let Some(w) = word.take() {
                        segs.last_mut().unwrap().words.push(w);
                    }
                    let dup = chars.get(i) == Some(&'&');
                    if dup {
                        i += 1;
                    }
                    while chars.get(i) == Some(&' ') {
                        i += 1;
                    }
                    let mut target = String::new();
                    while i < chars.len() && !" ;&|\n".contains(chars[i]) {
                        target.push(chars[i]);
                        i += 1;
                    }
                    let neutral = target == "/dev/null" || (dup && target.chars().all(|d| d.is_ascii_digit()));
                    let seg = segs.last_mut().unwrap();
                    seg.writes |= !neutral;
                    seg.redirected = true;
                }
                ' ' => {
                    if let Some(w) = word.take() {
                        segs.last_mut().unwrap().words.push(w);
                    }
                }
                ';' | '\n' | '&' | '|' => {
                    if let Some(w) = word.take() {
                        segs.last_mut().unwrap().words.push(w);
                    }
                    if (c == '&' || c == '|') && chars.get(i) == Some(&c) {
                        i += 1;
                    }
                    segs.push(Seg::default());
                }
                _ => word.get_or_insert((String::new(), false)).0.push(c),
            }
        }
        if let Some(w) = word.take() {
            segs.last_mut().unwrap().words.push(w);
        }
        // A redirection-only segment still counts (and asks: it has no argv).
        segs.into_iter().filter(|s| !s.words.is_empty() || s.redirected).collect()
    }

    fn pattern_matches(pat: &str, words: &[String]) -> bool {
        let toks: Vec<&str> = pat.split(' ').collect();
        let (fixed, rest) = match toks.split_last() {
            Some((&"**", init)) => (init, true),
            _ => (&toks[..], false),
        };
        if words.len() < fixed.len() || (!rest && words.len() != fixed.len()) {
            return false;
        }
        fixed.iter().zip(words).all(|(p, w)| *p == "*" || p == w)
    }

    fn is_assignment(t: &Tok) -> bool {
        !t.1 && t.0.split_once('=').is_some_and(|(n, _)| {
            !n.is_empty()
                && n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    }

    pub fn check(cmd: &str, allow: &[String], ask: &[String], deny: &[String]) -> V {
        let segs = segments(cmd);
        if segs.is_empty() {
            return V::Ask;
        }
        let mut worst = V::Allow;
        for seg in segs {
            let n_assign = seg.words.iter().take_while(|t| is_assignment(t)).count();
            let all: Vec<String> = seg.words.iter().map(|t| t.0.clone()).collect();
            let argv = all[n_assign..].to_vec();
            let v = if argv.is_empty() {
                V::Ask
            } else {
                let mut base = argv.clone();
                base[0] = argv[0].rsplit('/').next().unwrap_or("").to_string();
                let restrictive =
                    |p: &String| pattern_matches(p, &argv) || (!base[0].is_empty() && pattern_matches(p, &base));
                if deny.iter().any(restrictive) {
                    V::Deny
                } else if ask.iter().any(restrictive) || seg.writes {
                    V::Ask
                } else if allow.iter().any(|p| pattern_matches(p, &all)) {
                    V::Allow
                } else {
                    V::Ask
                }
            };
            worst = worst.max(v);
        }
        worst
    }
}

fn word() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "git",
        "rm",
        "ls",
        "/bin/rm",
        "./git",
        "push",
        "status",
        "-rf",
        "/",
        "x",
        "A=1",
        "B=2",
        "'a b'",
        "'x;y'",
        "'rm'",
        "'A=1'",
        "-f",
        "'&&'",
        "\"a b\"",
        "\"x;y\"",
        "\\;",
        "r'm'",
        "\"git\"",
        "p\"us\"h",
        "> f",
        ">/dev/null",
        "2>/dev/null",
        "2>&1",
        ">&2",
        "2> out",
        "\\ra",
    ])
    .prop_map(str::to_string)
}

fn pattern() -> impl Strategy<Value = String> {
    let tok = prop::sample::select(vec!["git", "rm", "ls", "push", "status", "-rf", "/", "x", "A=1", "*", "-f"]);
    (prop::collection::vec(tok, 1..4), any::<bool>()).prop_map(|(mut toks, rest)| {
        if rest {
            toks.push("**");
        }
        toks.join(" ")
    })
}

/// Commands of one to three segments of one to four `word`s each, joined
/// by shell separators.
fn commands_of(word: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    let sep = prop::sample::select(vec![" ; ", " && ", " || ", " | ", " & ", "\n"]);
    (prop::collection::vec(prop::collection::vec(word, 1..5), 1..4), prop::collection::vec(sep, 3)).prop_map(
        |(segs, seps)| {
            let mut out = String::new();
            for (i, s) in segs.iter().enumerate() {
                if i > 0 {
                    out.push_str(seps[i - 1]);
                }
                out.push_str(&s.join(" "));
            }
            out
        },
    )
}

fn command() -> impl Strategy<Value = String> {
    commands_of(word())
}

/// The matcher decides `cmd` under the rules as the reference does.
fn agrees(cmd: &str, allow: &[String], ask: &[String], deny: &[String]) -> Result<(), TestCaseError> {
    let rules = ShellRules::new(allow, ask, deny).unwrap();
    let got = rules.check(cmd);
    let want = match reference::check(cmd, allow, ask, deny) {
        reference::V::Allow => Verdict::Allow,
        reference::V::Ask => Verdict::Ask,
        reference::V::Deny => Verdict::Deny,
    };
    prop_assert_eq!(got, want, "command {:?} allow {:?} ask {:?} deny {:?}", cmd, allow, ask, deny);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_the_reference(
        cmd in command(),
        allow in prop::collection::vec(pattern(), 0..4),
        ask in prop::collection::vec(pattern(), 0..2),
        deny in prop::collection::vec(pattern(), 0..2),
    ) {
        agrees(&cmd, &allow, &ask, &deny)?;
    }
}

// ---------------------------------------------------------------------------
// The same differential on generated (not listed) words: a tiny alphabet so
// patterns and commands collide often, each word bare, single-quoted,
// double-quoted, partly quoted or escaped, and paths before command names.

fn spelled(w: String, how: u8) -> String {
    match how % 6 {
        0 | 1 => w,
        2 => format!("'{w}'"),
        3 => format!("\"{w}\""),
        4 => format!("\\{w}"),
        _ => {
            let (a, b) = w.split_at(1);
            format!("{a}'{b}'")
        }
    }
}

fn gen_word() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => ("[ab]{1,2}", any::<u8>()).prop_map(|(w, how)| spelled(w, how)),
        1 => "[ab]{1,2}".prop_map(|w| format!("/usr/bin/{w}")),
        1 => "[A-B]=[ab]{0,1}",
        1 => prop::sample::select(vec![">/dev/null", "2>&1", "> o"]).prop_map(str::to_string),
    ]
}

fn gen_pattern() -> impl Strategy<Value = String> {
    let tok = prop_oneof![4 => "[ab]{1,2}", 1 => Just("*".to_string())];
    (prop::collection::vec(tok, 1..4), any::<bool>()).prop_map(|(mut toks, rest)| {
        if rest {
            toks.push("**".to_string());
        }
        toks.join(" ")
    })
}

fn gen_command() -> impl Strategy<Value = String> {
    commands_of(gen_word())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_the_reference_on_generated_words(
        cmd in gen_command(),
        allow in prop::collection::vec(gen_pattern(), 0..4),
        ask in prop::collection::vec(gen_pattern(), 0..2),
        deny in prop::collection::vec(gen_pattern(), 0..2),
    ) {
        agrees(&cmd, &allow, &ask, &deny)?;
    }
}
