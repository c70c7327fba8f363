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
    search(command.as_bytes(), names, 0)
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
    if name.starts_with(b".") && !part.starts_with(b".") {
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
