//! Which word of a shell command could name one of the runtime's own files
//! (the `protected` admission layer), read with the same lexer as the
//! matcher: quotes and escapes removed (`.c'a'r`, `.ca\r` are `.car`),
//! redirection targets included, substitutions searched, a word that is
//! itself a script (`sh -c '...'`, `eval "..."`) parsed again, and a glob or
//! brace component counted when it could stand for a protected name
//! (`.c?r`, `appro*.jsonl`, `.c{a,x}r`).
//!
//! Nothing is expanded: a name assembled from variables at run time
//! (`d=.c; $d"ar"`) is beyond any reading of the text; the sandbox, which
//! keeps these files unwritable (`docs/sandbox.md`), is what bounds that.

use super::lexer::{self, Word};
use super::matcher::glob_matches;

/// How deep a word is parsed again as a script of its own.
const MAX_NESTING: usize = 8;

/// The first word of `command` one of whose path components is one of
/// `names` (ASCII case-insensitive: the file systems the runtime meets may
/// fold case), or could be once its glob is expanded; `None` when no word
/// does.
pub(crate) fn protected_word(command: &str, names: &[&str]) -> Option<String> {
    let src = command.as_bytes();
    search(src, names, 0).or_else(|| {
        // ANSI-C quoting is a literal the shell decodes at parse time
        // (`$'\x2ecar'` is `.car`): read it decoded as well.
        let decoded = decode_ansi_c(src)?;
        search(&decoded, names, 0)
    })
}

/// `src` with every `$'...'` replaced by the single-quoted text it stands
/// for (`\xHH`, `\NNN`, `\uHHHH`, `\UHHHHHHHH`, `\cX` and the letter
/// escapes decoded); `None` when it holds none.
fn decode_ansi_c(src: &[u8]) -> Option<Vec<u8>> {
    let first = src.windows(2).position(|w| w == b"$'")?;
    let mut out = src[..first].to_vec();
    let mut i = first;
    while i < src.len() {
        if src[i..].starts_with(b"$'") {
            i += 2;
            let mut lit: Vec<u8> = Vec::new();
            while i < src.len() && src[i] != b'\'' {
                if src[i] == b'\\' && i + 1 < src.len() {
                    let (bytes, used) = ansi_c_escape(&src[i + 1..]);
                    lit.extend_from_slice(&bytes);
                    i += 1 + used;
                } else {
                    lit.push(src[i]);
                    i += 1;
                }
            }
            i += 1;
            out.push(b'\'');
            for b in lit {
                if b == b'\'' {
                    out.extend_from_slice(b"'\\''");
                } else {
                    out.push(b);
                }
            }
            out.push(b'\'');
        } else {
            out.push(src[i]);
            i += 1;
        }
    }
    Some(out)
}

/// One escape after a backslash inside `$'...'`: its bytes and how many
/// source bytes it used.
fn ansi_c_escape(s: &[u8]) -> (Vec<u8>, usize) {
    let hex = |s: &[u8], max: usize| {
        let n = s.iter().take(max).take_while(|b| b.is_ascii_hexdigit()).count();
        let v = std::str::from_utf8(&s[..n]).ok().and_then(|t| u32::from_str_radix(t, 16).ok());
        (v, n)
    };
    match s[0] {
        b'a' => (vec![7], 1),
        b'b' => (vec![8], 1),
        b'e' | b'E' => (vec![27], 1),
        b'f' => (vec![12], 1),
        b'n' => (vec![b'\n'], 1),
        b'r' => (vec![b'\r'], 1),
        b't' => (vec![b'\t'], 1),
        b'v' => (vec![11], 1),
        b'x' => match hex(&s[1..], 2) {
            (Some(v), n) if n > 0 => (vec![v as u8], 1 + n),
            _ => (b"\\x".to_vec(), 1),
        },
        b'u' | b'U' => {
            let max = if s[0] == b'u' { 4 } else { 8 };
            match hex(&s[1..], max) {
                (Some(v), n) if n > 0 => {
                    let c = char::from_u32(v).unwrap_or(char::REPLACEMENT_CHARACTER);
                    (c.to_string().into_bytes(), 1 + n)
                }
                _ => (vec![b'\\', s[0]], 1),
            }
        }
        b'c' if s.len() > 1 => (vec![s[1] & 0x1f], 2),
        b'0'..=b'7' => {
            let n = s.iter().take(3).take_while(|b| (b'0'..=b'7').contains(b)).count();
            let v = s[..n].iter().fold(0u32, |a, &b| a * 8 + u32::from(b - b'0'));
            (vec![v as u8], n)
        }
        c => (vec![c], 1),
    }
}

fn search(src: &[u8], names: &[&str], depth: usize) -> Option<String> {
    let parsed = lexer::parse_at_depth(src, depth.min(lexer::MAX_DEPTH));
    for seg in &parsed.segments {
        for w in seg.words.iter().chain(&seg.targets) {
            if names_one(w, names) {
                return Some(String::from_utf8_lossy(&w.text).into_owned());
            }
            // A word that is a script of its own (an `sh -c` or `eval`
            // operand, an argument some wrapper re-reads): read it again.
            if depth < MAX_NESTING
                && w.text.iter().any(|b| b" \t\n;&|<>()$`'\"\\".contains(b))
                && let Some(hit) = search(&w.text, names, depth + 1)
            {
                return Some(hit);
            }
        }
    }
    None
}

fn names_one(w: &Word<'_>, names: &[&str]) -> bool {
    let pattern = w.glob || w.brace;
    // Components: path separators, and the `=`, `:` and `,` of options and
    // lists (`--output=.car/x`, `PATH=a:.car`).
    w.text.split(|&b| b"/\\=:, \t\n".contains(&b)).any(|part| {
        names.iter().any(|n| {
            part.eq_ignore_ascii_case(n.as_bytes())
                || (pattern && could_expand_to(&part.to_ascii_lowercase(), n.to_ascii_lowercase().as_bytes()))
        })
    })
}

/// True when the glob component `part` could expand to `name`. As the shell
/// does, a leading `.` must be spelled (`*` is not `.car`); a component of
/// wildcards alone (`*`, `?*`) is not taken for a name, or `ls *` would be
/// refused everywhere: those files are meant to live outside the root, and
/// the sandbox keeps them unwritable wherever they are.
fn could_expand_to(part: &[u8], name: &[u8]) -> bool {
    if part.iter().all(|b| matches!(b, b'*' | b'?')) {
        return false;
    }
    // A brace at the start can supply the dot (`{.c,}ar` is `.car ar`).
    if name.starts_with(b".") && !part.starts_with(b".") && !part.starts_with(b"{") {
        return false;
    }
    glob_matches(&braces_as_stars(part), name)
}

/// A brace expansion read as `*` (it stands for some text there): wider than
/// the shell, which can only find more names.
fn braces_as_stars(part: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(part.len());
    let mut depth = 0usize;
    for &b in part {
        match b {
            b'{' => {
                if depth == 0 {
                    out.push(b'*');
                }
                depth += 1;
            }
            b'}' if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            _ => out.push(b),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: &[&str] = &[".car", "approvals.jsonl", "tier-approvals.jsonl"];

    #[test]
    fn spellings_that_name_a_protected_file() {
        for cmd in [
            "cat .car/permissions.toml",
            "echo x > .c'a'r/permissions.toml",
            "echo x > .c\"a\"r/x",
            "echo x > .ca\\r/x",
            "rm .c?r/permissions.toml",
            "rm .ca[r]/x",
            "rm .c*/x",
            "rm .c{a,x}r/x",
            "cp x appro*.jsonl",
            "cp x state/approvals.json[l]",
            "echo $(cat .C'AR'/x)",
            "sh -c 'echo > \".c'a'r/x\"'",
            "bash -c \"eval 'rm -rf .ca\\\\r'\"",
            "tee < /dev/null .car",
            "cat <<< x > tier-approvals.jsonl",
            "git diff --output=.c'a'r/x a b",
            "x=1 PATH=a:.c\"ar\" ls",
            "cat $'\\x2ecar/permissions.toml'",
            "cat $'.c\\x61r'/x",
            "cat $'\\056car/x'",
            "cat $'\\u002ecar/x'",
            "cat x/$'tier-approvals\\x2ejsonl'",
            "echo > {.c,}ar/x",
            "echo > {.,}car/x",
        ] {
            assert!(protected_word(cmd, NAMES).is_some(), "{cmd}");
        }
        for cmd in [
            "ls",
            "cat notes/car.txt",
            "echo .cartography",
            "ls src/*.rs",
            "echo '.c?r'",
            "rm -rf build",
            "ls *",
            "rm -rf ./*",
            "cat *.txt",
        ] {
            assert_eq!(protected_word(cmd, NAMES), None, "{cmd}");
        }
    }
}
