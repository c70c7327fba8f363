//! Patterns and the per-segment decision.

use serde_json::{Value, json};

use super::lexer::{self, MAX_DEPTH, SegKind, Segment, Word};
use crate::permission::Verdict;

/// One token of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PTok {
    /// Equals one argv token byte for byte (a glob token never equals it).
    Lit(Vec<u8>),
    /// `*`: exactly one token.
    One,
}

/// An argv pattern: a token sequence anchored at both ends; `*` matches one
/// token, a final `**` zero or more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellPattern {
    source: String,
    tokens: Vec<PTok>,
    rest: bool,
}

impl ShellPattern {
    /// Parses a pattern. Its words are lexed like a command (quotes honoured,
    /// so `'*'` is a literal star); it must be one plain simple command with no
    /// operator, redirection, expansion or keyword, and `**` only last.
    pub fn parse(source: &str) -> crate::Result<Self> {
        let bad = |why: &str| {
            crate::Error::config(
                "invalid_shell_pattern",
                format!("invalid shell pattern `{source}`: {why}"),
                json!({"pattern": source}),
            )
        };
        if source.as_bytes().contains(&0) {
            return Err(bad("contains a nul byte"));
        }
        let parsed = lexer::parse(source.as_bytes());
        if parsed.failed {
            return Err(bad("it does not parse"));
        }
        let seg = match parsed.segments.as_slice() {
            [] => return Err(bad("it is empty")),
            [seg] => seg,
            _ => return Err(bad("it holds more than one command")),
        };
        if seg.kind != SegKind::Simple || seg.redirected || seg.unmatchable {
            return Err(bad("only words are allowed (no keyword, grouping or redirection)"));
        }
        let mut tokens = Vec::with_capacity(seg.words.len());
        let mut rest = false;
        for (i, w) in seg.words.iter().enumerate() {
            if w.expansion || w.brace {
                return Err(bad("a pattern cannot hold an expansion"));
            }
            match (w.unquoted(), &w.text[..]) {
                (true, b"**") if i + 1 == seg.words.len() => rest = true,
                (true, b"**") => return Err(bad("`**` may only appear last")),
                (true, b"*") => tokens.push(PTok::One),
                _ => tokens.push(PTok::Lit(w.text.to_vec())),
            }
        }
        Ok(ShellPattern { source: source.to_string(), tokens, rest })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Matches `words`, with `argv0` standing in for the first word's text.
    fn matches_with(&self, words: &[Word], argv0: Option<&[u8]>) -> bool {
        let n = self.tokens.len();
        if words.len() < n || (!self.rest && words.len() != n) {
            return false;
        }
        self.tokens.iter().zip(words).enumerate().all(|(i, (t, w))| match t {
            PTok::One => true,
            PTok::Lit(lit) => {
                let text = if i == 0 { argv0.unwrap_or(&w.text) } else { &w.text[..] };
                w.is_literal() && text == lit.as_slice()
            }
        })
    }

    /// Exact matching (allow): every word, assignments included, argv0 as is.
    fn matches_exact(&self, words: &[Word]) -> bool {
        self.matches_with(words, None)
    }

    /// Restrictive matching (deny and ask): the argv without the leading
    /// assignments, argv0 as is or as its basename.
    fn matches_restrictive(&self, argv: &[Word]) -> bool {
        if self.matches_with(argv, None) {
            return true;
        }
        match argv.first().map(|w| &w.text[..]) {
            Some(t) => match t.iter().rposition(|&b| b == b'/') {
                Some(i) if i + 1 < t.len() => self.matches_with(argv, Some(&t[i + 1..])),
                _ => false,
            },
            None => false,
        }
    }
}

/// The three tables of `match_shell_command`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShellRules {
    /// Patterns a segment may match to be allowed.
    pub allow: Vec<ShellPattern>,
    /// Patterns that make a segment ask.
    pub ask: Vec<ShellPattern>,
    /// Patterns that deny a segment, and so the whole command.
    pub deny: Vec<ShellPattern>,
}

/// What a scan of one command found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShellOutcome {
    /// The composed verdict.
    pub verdict: Verdict,
    /// A deny pattern matched a segment (or a script inside `sh -c`).
    pub deny_matched: bool,
    /// An ask pattern matched a segment.
    pub ask_matched: bool,
    /// Some part could not be matched reliably (an expansion, a here-doc, a
    /// glob argv0, a parse failure, a nul byte): a pattern that did not match
    /// cannot be ruled out there.
    pub uncertain: bool,
}

/// Shells whose `-c` script deny matching looks into.
const SHELLS: &[&[u8]] = &[b"sh", b"bash", b"dash", b"zsh", b"ksh", b"mksh", b"ash", b"posh", b"yash"];

/// Words that are never an argv0 an allow pattern can match: the keywords
/// that head a command, plus the other reserved words and grouping tokens.
fn is_reserved(t: &[u8]) -> bool {
    lexer::is_prefix_keyword(t)
        || matches!(t, b"for" | b"select" | b"function" | b"case" | b"esac" | b"[[" | b"]]" | b"{" | b"}")
}

impl ShellRules {
    /// Compiles the three tables; a bad pattern is an `invalid_shell_pattern`
    /// configuration error naming it.
    pub fn new<S: AsRef<str>>(allow: &[S], ask: &[S], deny: &[S]) -> crate::Result<Self> {
        let compile = |v: &[S]| v.iter().map(|s| ShellPattern::parse(s.as_ref())).collect::<crate::Result<Vec<_>>>();
        Ok(ShellRules { allow: compile(allow)?, ask: compile(ask)?, deny: compile(deny)? })
    }

    /// Reads `{allow?, ask?, deny?}` (lists of pattern strings).
    pub fn from_json(v: &Value) -> crate::Result<Self> {
        let obj = v.as_object().ok_or_else(|| {
            crate::Error::invalid_argument("rules", "expected an object `{allow?, ask?, deny?}` of pattern lists")
        })?;
        let mut tables: [Vec<String>; 3] = Default::default();
        for (k, val) in obj {
            let slot = match k.as_str() {
                "allow" => 0,
                "ask" => 1,
                "deny" => 2,
                other => {
                    return Err(crate::Error::invalid_argument("rules", format!("unknown table `{other}`")));
                }
            };
            let list = val.as_array().ok_or_else(|| {
                crate::Error::invalid_argument("rules", format!("`{k}` must be a list of pattern strings"))
            })?;
            for p in list {
                let s = p.as_str().ok_or_else(|| {
                    crate::Error::invalid_argument("rules", format!("`{k}` holds a non-string pattern `{p}`"))
                })?;
                tables[slot].push(s.to_string());
            }
        }
        Self::new(&tables[0], &tables[1], &tables[2])
    }

    /// The verdict for a command.
    pub fn check(&self, command: &str) -> Verdict {
        self.scan(command).verdict
    }

    /// The verdict and what was found on the way.
    pub fn scan(&self, command: &str) -> ShellOutcome {
        self.scan_bytes(command.as_bytes(), 0)
    }

    fn scan_bytes(&self, src: &[u8], depth: usize) -> ShellOutcome {
        let mut o = ShellOutcome { verdict: Verdict::Allow, deny_matched: false, ask_matched: false, uncertain: false };
        if src.contains(&0) {
            o.verdict = Verdict::Ask;
            o.uncertain = true;
            return o;
        }
        let parsed = lexer::parse_at_depth(src, depth);
        for seg in &parsed.segments {
            let v = self.judge(seg, depth, &mut o);
            o.verdict = o.verdict.max(v);
        }
        if parsed.failed {
            o.uncertain = true;
            o.verdict = o.verdict.max(Verdict::Ask);
        }
        if parsed.segments.iter().all(|s| matches!(s.kind, SegKind::GroupTail)) {
            // Empty, blank or comment-only, or only the redirections of an
            // empty group (`( ) < f`): nothing is allowed by nothing.
            o.verdict = o.verdict.max(Verdict::Ask);
        }
        o
    }

    /// The decision for one segment.
    fn judge(&self, seg: &Segment, depth: usize, o: &mut ShellOutcome) -> Verdict {
        match seg.kind {
            SegKind::Keyword => return Verdict::Ask,
            SegKind::GroupTail => {
                if seg.unmatchable {
                    o.uncertain = true;
                }
                return if seg.writes || seg.unmatchable { Verdict::Ask } else { Verdict::Allow };
            }
            SegKind::Simple => {}
        }
        let argv = seg.argv();
        let Some(argv0) = argv.first() else {
            // Assignment-only or redirection-only.
            if seg.unmatchable || seg.words.iter().any(|w| w.expansion) {
                o.uncertain = true;
            }
            return Verdict::Ask;
        };
        let literal_argv = argv.iter().all(|w| !w.expansion && !w.brace);
        if literal_argv && self.deny.iter().any(|p| p.matches_restrictive(argv)) {
            o.deny_matched = true;
            return Verdict::Deny;
        }
        let inner = if literal_argv { self.inner_scripts(argv, depth) } else { None };
        if let Some(inner) = inner {
            if inner.deny_matched {
                o.deny_matched = true;
                return Verdict::Deny;
            }
            // What could not be seen through inside still counts for the
            // chain's rules, and an ask pattern inside asks.
            o.uncertain |= inner.uncertain;
            if inner.ask_matched {
                o.ask_matched = true;
                return Verdict::Ask;
            }
        }
        let assignments = &seg.words[..seg.assignments];
        if seg.unmatchable || !literal_argv || argv0.glob || assignments.iter().any(|w| w.expansion || w.brace) {
            o.uncertain = true;
            return Verdict::Ask;
        }
        if self.ask.iter().any(|p| p.matches_restrictive(argv)) {
            o.ask_matched = true;
            return Verdict::Ask;
        }
        if seg.writes || is_reserved(&argv0.text) || argv0.text.contains(&b'(') {
            return Verdict::Ask;
        }
        if self.allow.iter().any(|p| p.matches_exact(&seg.words)) { Verdict::Allow } else { Verdict::Ask }
    }

    /// Matching looks inside `sh -c 'script'` (and `eval 'script'`) when the
    /// script is a plain literal: every argument after the `-c` option
    /// cluster is scanned, so `$0` text can only add a finding, never hide
    /// one. `None` when the segment runs no such script.
    fn inner_scripts(&self, argv: &[Word], depth: usize) -> Option<ShellOutcome> {
        if self.deny.is_empty() && self.ask.is_empty() {
            return None;
        }
        let name = argv[0].text.rsplit(|&b| b == b'/').next().unwrap_or(&[]);
        let scripts: Vec<Vec<u8>> = if name == b"eval" {
            vec![argv[1..].iter().map(|w| &w.text[..]).collect::<Vec<_>>().join(&b' ')]
        } else if SHELLS.contains(&name) {
            let c = argv.iter().skip(1).position(|w| {
                w.text.len() > 1 && w.text[0] == b'-' && w.text[1] != b'-' && w.text[1..].contains(&b'c')
            })?;
            argv[c + 2..].iter().map(|w| w.text.to_vec()).collect()
        } else {
            return None;
        };
        let mut found =
            ShellOutcome { verdict: Verdict::Allow, deny_matched: false, ask_matched: false, uncertain: false };
        if depth + 1 >= MAX_DEPTH {
            found.uncertain = true;
            return Some(found);
        }
        for s in &scripts {
            let o = self.scan_bytes(s, depth + 1);
            found.deny_matched |= o.deny_matched;
            found.ask_matched |= o.ask_matched;
            found.uncertain |= o.uncertain;
        }
        Some(found)
    }
}

/// `match_shell_command(command, rules)`.
pub fn match_shell_command(command: &str, rules: &ShellRules) -> Verdict {
    rules.check(command)
}
