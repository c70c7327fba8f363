//! Patterns and the per-segment decision.

use serde_json::{Value, json};

use serde::Serialize;

use super::lexer::{self, MAX_DEPTH, Parsed, SegKind, Segment, Word};
use super::wrappers::{self, Inner};
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
    /// With `globs` (restrictive matching), a glob word after argv0 matches
    /// a literal token when the glob matches that literal (`/[t]mp` is
    /// `/tmp`); a glob argv0 is left to the caller (uncertain: ask).
    fn matches_with(&self, words: &[Word], argv0: Option<&[u8]>, globs: bool) -> bool {
        let n = self.tokens.len();
        if words.len() < n || (!self.rest && words.len() != n) {
            return false;
        }
        self.tokens.iter().zip(words).enumerate().all(|(i, (t, w))| match t {
            PTok::One => true,
            PTok::Lit(lit) => {
                let text = if i == 0 { argv0.unwrap_or(&w.text) } else { &w.text[..] };
                if w.is_literal() {
                    text == lit.as_slice()
                } else {
                    // Not argv0: a glob there asks (uncertain), as the
                    // conformance corpus has it.
                    globs && i > 0 && w.glob && !w.expansion && !w.brace && glob_matches(text, lit)
                }
            }
        })
    }

    /// Exact matching (allow): every word, assignments included, argv0 as is.
    fn matches_exact(&self, words: &[Word]) -> bool {
        self.matches_with(words, None, false)
    }

    /// The literal token of this pattern a glob word stood for, if the
    /// restrictive match needed one (for `--explain`).
    fn glob_token(&self, argv: &[Word]) -> Option<String> {
        argv.iter().zip(&self.tokens).find(|(w, _)| w.glob).map(|(w, _)| lossy(&w.text))
    }

    /// Restrictive matching (deny and ask): the argv without the leading
    /// assignments, argv0 as is or as its basename.
    pub(crate) fn matches_restrictive(&self, argv: &[Word]) -> bool {
        if self.matches_with(argv, None, true) {
            return true;
        }
        match argv.first().map(|w| &w.text[..]) {
            Some(t) => match t.iter().rposition(|&b| b == b'/') {
                Some(i) if i + 1 < t.len() => self.matches_with(argv, Some(&t[i + 1..]), true),
                _ => false,
            },
            None => false,
        }
    }
}

/// Glob matching of `pat` (`*`, `?`, `[...]` with `!`/`^` and ranges) against
/// `text`, byte-wise. `*` also matches `/` and a leading `.`: wider than the
/// shell, which can only make a deny pattern match more.
pub(crate) fn glob_matches(pat: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((hit, next)) = bracket(&pat[p..], text[t]) {
                        if hit {
                            p += next;
                            t += 1;
                            continue;
                        }
                    } else if text[t] == b'[' {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
                c if c == text[t] => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// A bracket expression at the start of `pat`: (whether `c` is in it, its
/// length); `None` when it is not closed (then `[` is literal).
fn bracket(pat: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(pat.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < pat.len() {
        let b = pat[i];
        if b == b']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        if pat.get(i + 1) == Some(&b'-') && pat.get(i + 2).is_some_and(|&e| e != b']') {
            hit |= b <= c && c <= pat[i + 2];
            i += 3;
        } else {
            hit |= b == c;
            i += 1;
        }
    }
    None
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
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
    /// A deny pattern matched a segment (or a command inside a wrapper, a
    /// substitution or a script).
    pub deny_matched: bool,
    /// An ask pattern matched a segment.
    pub ask_matched: bool,
    /// Some part could not be fully resolved (an expansion, a here-doc, a
    /// glob argv0, a tilde word, arithmetic over names, a wrapper whose
    /// inner command cannot be read, a parse failure, a nul byte): a pattern
    /// that did not match cannot be ruled out there.
    pub uncertain: bool,
}

impl ShellOutcome {
    fn allow() -> Self {
        ShellOutcome { verdict: Verdict::Allow, deny_matched: false, ask_matched: false, uncertain: false }
    }

    fn absorb(&mut self, inner: &ShellOutcome) {
        self.deny_matched |= inner.deny_matched;
        self.ask_matched |= inner.ask_matched;
        self.uncertain |= inner.uncertain;
    }
}

/// Which table a rule sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShellTable {
    /// `allow`.
    Allow,
    /// `ask`.
    Ask,
    /// `deny`.
    Deny,
}

impl ShellTable {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            ShellTable::Allow => "allow",
            ShellTable::Ask => "ask",
            ShellTable::Deny => "deny",
        }
    }

    fn verdict(self) -> Verdict {
        match self {
            ShellTable::Allow => Verdict::Allow,
            ShellTable::Ask => Verdict::Ask,
            ShellTable::Deny => Verdict::Deny,
        }
    }
}

/// One shell rule with the rule author's examples: commands it must match
/// (`match`) and must not match (`not_match`). [`ShellRules::with_examples`]
/// checks them when the rules load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellRuleSpec {
    /// The table.
    pub table: ShellTable,
    /// The argv pattern.
    pub pattern: String,
    /// Commands this rule must decide (deny: denied, ask: asks by this
    /// pattern, allow: allowed).
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub match_examples: Vec<String>,
    /// Commands this rule must not decide.
    #[serde(default, rename = "not_match", skip_serializing_if = "Vec::is_empty")]
    pub not_match_examples: Vec<String>,
}

impl ShellRuleSpec {
    /// A rule without examples.
    pub fn new(table: ShellTable, pattern: impl Into<String>) -> Self {
        ShellRuleSpec { table, pattern: pattern.into(), match_examples: Vec::new(), not_match_examples: Vec::new() }
    }

    /// Adds `match` examples.
    pub fn matching<S: Into<String>>(mut self, examples: impl IntoIterator<Item = S>) -> Self {
        self.match_examples.extend(examples.into_iter().map(Into::into));
        self
    }

    /// Adds `not_match` examples.
    pub fn not_matching<S: Into<String>>(mut self, examples: impl IntoIterator<Item = S>) -> Self {
        self.not_match_examples.extend(examples.into_iter().map(Into::into));
        self
    }
}

/// How one segment (or one command inside a wrapper, substitution or
/// script) was decided: `car shell-match --explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShellDecision {
    /// The verdict this segment contributes.
    pub verdict: Verdict,
    /// Its words after quote removal (a keyword segment has none).
    pub argv: Vec<String>,
    /// How deep inside substitutions, wrappers and scripts it sits (0: top).
    pub depth: usize,
    /// The table of the deciding rule, when a rule decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<ShellTable>,
    /// The deciding pattern, when a rule decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The token that decided (a glob standing for a literal, an
    /// expansion, a wrapper, a tilde word, ...), when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Why, in words.
    pub reason: String,
    /// The segment could not be fully resolved.
    pub uncertain: bool,
}

/// The whole decision for a command, segment by segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShellExplanation {
    /// The command's verdict.
    pub verdict: Verdict,
    /// See [`ShellOutcome`].
    pub deny_matched: bool,
    /// See [`ShellOutcome`].
    pub ask_matched: bool,
    /// See [`ShellOutcome`].
    pub uncertain: bool,
    /// The parse stopped at an error or an unsupported construct.
    pub parse_failed: bool,
    /// Every segment in the order it was decided (inner commands first).
    pub segments: Vec<ShellDecision>,
}

/// Words that are never an argv0 an allow pattern can match: the keywords
/// that head a command, plus the other reserved words and grouping tokens.
fn is_reserved(t: &[u8]) -> bool {
    lexer::is_prefix_keyword(t)
        || matches!(t, b"for" | b"select" | b"function" | b"case" | b"esac" | b"[[" | b"]]" | b"{" | b"}")
}

/// Builtins whose operands bash expands a second time (an array subscript in
/// a name: `read 'a[$(cmd)]'`, `declare`, `let`): every argument's text is
/// scanned for substitutions. `printf`, `test` and `[` are scanned only in
/// the operand of `-v` (see [`name_operands`]).
const NAME_BUILTINS: &[&[u8]] = &[
    b"read",
    b"declare",
    b"typeset",
    b"local",
    b"readonly",
    b"export",
    b"let",
    b"unset",
    b"mapfile",
    b"readarray",
    b"wait",
    b"shift",
    b"return",
    b"exit",
    b"ulimit",
];

/// The words of `argv` whose text bash may expand again: every argument of
/// a [`NAME_BUILTINS`] builtin, the operand after each `-v` of `printf`,
/// `test` and `[`.
fn name_operands<'w, 'a>(name: &[u8], argv: &'w [Word<'a>]) -> Vec<&'w Word<'a>> {
    if NAME_BUILTINS.contains(&name) {
        return argv[1..].iter().collect();
    }
    if matches!(name, b"printf" | b"test" | b"[") {
        let mut out: Vec<&Word> = argv.windows(2).filter(|p| p[0].text[..] == *b"-v").map(|p| &p[1]).collect();
        if name == b"printf" {
            // `printf -vNAME`: the name attached to the option.
            out.extend(argv[1..].iter().filter(|w| w.text.len() > 2 && w.text.starts_with(b"-v")));
        }
        return out;
    }
    Vec::new()
}

/// True when bash would find a substitution in `text` if it expanded it.
fn has_substitution(text: &[u8]) -> bool {
    text.iter().any(|&b| b == b'$' || b == b'`') || text.windows(2).any(|w| matches!(w, [b'<' | b'>', b'(']))
}

/// Decision notes, kept only when explaining; and the argvs already judged
/// for the segment being judged.
struct Trace {
    notes: Option<Vec<ShellDecision>>,
    /// One set per segment in judgement (segments nest through scripts and
    /// substitutions): the `(start, length, depth)` of every argv slice of
    /// that segment's words [`ShellRules::restrictive`] has judged. A slice
    /// is reached again through other wrappers (`cgexec exec exec cgexec
    /// ...`: every suffix of a suffix wrapper, each unwrapped again), and
    /// judging it again adds nothing to the one outcome they all share; without
    /// this the work grew exponentially with the wrappers (a fuzz input of
    /// 781 bytes took 25 s).
    seen: Vec<std::collections::HashSet<(usize, usize, usize)>>,
    /// Argvs and scripts judged so far for the whole command.
    work: usize,
}

/// Most argvs and scripts one command's scan judges. Scripts inside
/// wrappers inside scripts (`nice strace eval exec ...`) can be reached
/// along exponentially many paths; past this the command is uncertain
/// (never allowed where argv rules exist) instead of taking unbounded time.
/// Real commands judge a few dozen.
pub const MAX_SCAN_WORK: usize = 20_000;

impl Trace {
    fn new(notes: Option<Vec<ShellDecision>>) -> Self {
        Trace { notes, seen: Vec::new(), work: 0 }
    }

    /// Counts one unit of work; true once past [`MAX_SCAN_WORK`].
    fn spend(&mut self) -> bool {
        self.work += 1;
        self.exhausted()
    }

    /// True once the scan has done more than [`MAX_SCAN_WORK`].
    fn exhausted(&self) -> bool {
        self.work > MAX_SCAN_WORK
    }

    #[allow(clippy::too_many_arguments)]
    fn note(
        &mut self,
        verdict: Verdict,
        words: &[Word],
        depth: usize,
        rule: Option<(ShellTable, &ShellPattern)>,
        token: Option<String>,
        reason: impl FnOnce() -> String,
        uncertain: bool,
    ) {
        if let Some(v) = &mut self.notes {
            v.push(ShellDecision {
                verdict,
                argv: words.iter().map(|w| lossy(&w.text)).collect(),
                depth,
                table: rule.map(|r| r.0),
                rule: rule.map(|r| r.1.as_str().to_string()),
                token,
                reason: reason(),
                uncertain,
            });
        }
    }
}

impl ShellRules {
    /// Compiles the three tables; a bad pattern is an `invalid_shell_pattern`
    /// configuration error naming it.
    pub fn new<S: AsRef<str>>(allow: &[S], ask: &[S], deny: &[S]) -> crate::Result<Self> {
        let compile = |v: &[S]| v.iter().map(|s| ShellPattern::parse(s.as_ref())).collect::<crate::Result<Vec<_>>>();
        Ok(ShellRules { allow: compile(allow)?, ask: compile(ask)?, deny: compile(deny)? })
    }

    /// Compiles rules that carry examples, and checks every example against
    /// its own rule (alone, so an example documents the pattern, not the
    /// rest of the table): a `match` example of a deny rule must be denied,
    /// of an ask rule must ask by that pattern, of an allow rule must be
    /// allowed; a `not_match` example must not. A bad pattern is
    /// `invalid_shell_pattern`; an example that does not come out as its
    /// rule says is `invalid_shell_rule_example`, naming the rule and the
    /// example.
    pub fn with_examples(rules: &[ShellRuleSpec]) -> crate::Result<Self> {
        let mut out = ShellRules::default();
        for r in rules {
            let pat = ShellPattern::parse(&r.pattern)?;
            let alone = match r.table {
                ShellTable::Allow => ShellRules { allow: vec![pat.clone()], ..ShellRules::default() },
                ShellTable::Ask => ShellRules { ask: vec![pat.clone()], ..ShellRules::default() },
                ShellTable::Deny => ShellRules { deny: vec![pat.clone()], ..ShellRules::default() },
            };
            let fires = |cmd: &str| {
                let o = alone.scan(cmd);
                match r.table {
                    ShellTable::Allow => o.verdict == Verdict::Allow,
                    ShellTable::Ask => o.ask_matched,
                    ShellTable::Deny => o.deny_matched && o.verdict == Verdict::Deny,
                }
            };
            let cases =
                r.match_examples.iter().map(|e| (e, true)).chain(r.not_match_examples.iter().map(|e| (e, false)));
            for (example, want) in cases {
                if fires(example) != want {
                    let got = alone.check(example);
                    let (kind, should) = if want {
                        ("match", format!("should be {} by it", r.table.verdict().as_str()))
                    } else {
                        ("not_match", format!("should not be {} by it", r.table.verdict().as_str()))
                    };
                    return Err(crate::Error::config(
                        "invalid_shell_rule_example",
                        format!(
                            "shell rule `{}` ({}): {kind} example `{example}` {should}, but the rule alone gives `{}`",
                            r.pattern,
                            r.table.as_str(),
                            got.as_str()
                        ),
                        json!({"rule": r.pattern, "table": r.table, "example": example, "expected": kind, "verdict": got}),
                    ));
                }
            }
            match r.table {
                ShellTable::Allow => out.allow.push(pat),
                ShellTable::Ask => out.ask.push(pat),
                ShellTable::Deny => out.deny.push(pat),
            }
        }
        Ok(out)
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
        self.scan_bytes(command.as_bytes(), 0, &mut Trace::new(None))
    }

    /// The verdict with every segment's decision: which rule and which
    /// token decided.
    pub fn explain(&self, command: &str) -> ShellExplanation {
        let mut trace = Trace::new(Some(Vec::new()));
        let src = command.as_bytes();
        let parse_failed = src.contains(&0) || lexer::parse(src).failed;
        let o = self.scan_bytes(src, 0, &mut trace);
        let mut segments = trace.notes.unwrap_or_default();
        if segments.is_empty() || parse_failed {
            let reason = if src.contains(&0) {
                "a NUL byte: the whole command asks"
            } else if parse_failed {
                "the command does not parse completely (or nests too deep): ask unless an earlier part is denied"
            } else {
                "no command at all: nothing is allowed by nothing"
            };
            segments.push(ShellDecision {
                verdict: Verdict::Ask,
                argv: Vec::new(),
                depth: 0,
                table: None,
                rule: None,
                token: None,
                reason: reason.to_string(),
                uncertain: parse_failed,
            });
        }
        ShellExplanation {
            verdict: o.verdict,
            deny_matched: o.deny_matched,
            ask_matched: o.ask_matched,
            uncertain: o.uncertain,
            parse_failed,
            segments,
        }
    }

    fn scan_bytes(&self, src: &[u8], depth: usize, trace: &mut Trace) -> ShellOutcome {
        if trace.spend() {
            return ShellOutcome { verdict: Verdict::Ask, uncertain: true, ..ShellOutcome::allow() };
        }
        if src.contains(&0) {
            return ShellOutcome { verdict: Verdict::Ask, uncertain: true, ..ShellOutcome::allow() };
        }
        let parsed = lexer::parse_at_depth(src, depth);
        let o = self.fold(&parsed, depth, trace);
        if parsed.segments.iter().all(|s| matches!(s.kind, SegKind::GroupTail)) {
            // Empty, blank or comment-only, or only the redirections of an
            // empty group (`( ) < f`): nothing is allowed by nothing.
            return ShellOutcome { verdict: o.verdict.max(Verdict::Ask), ..o };
        }
        o
    }

    /// The strictest verdict across parsed segments.
    fn fold(&self, parsed: &Parsed, depth: usize, trace: &mut Trace) -> ShellOutcome {
        let mut o = ShellOutcome::allow();
        for seg in &parsed.segments {
            let v = self.judge(seg, depth, &mut o, trace);
            o.verdict = o.verdict.max(v);
        }
        if parsed.failed {
            o.uncertain = true;
            o.verdict = o.verdict.max(Verdict::Ask);
        }
        o
    }

    /// The decision for one segment.
    fn judge(&self, seg: &Segment, depth: usize, o: &mut ShellOutcome, trace: &mut Trace) -> Verdict {
        let restrictive = !self.deny.is_empty() || !self.ask.is_empty();
        match seg.kind {
            SegKind::Keyword => {
                o.uncertain |= seg.uncertain;
                let why = if seg.uncertain {
                    "a keyword or compound-command header holding something unresolvable (an expansion, arithmetic over names)"
                } else {
                    "a keyword or compound-command header is never allowed by itself"
                };
                trace.note(Verdict::Ask, &[], depth, None, None, || why.to_string(), seg.uncertain);
                return Verdict::Ask;
            }
            SegKind::GroupTail => {
                o.uncertain |= seg.unmatchable;
                let v = if seg.writes || seg.unmatchable { Verdict::Ask } else { Verdict::Allow };
                trace.note(v, &[], depth, None, None, || "the redirections of a group".to_string(), seg.unmatchable);
                return v;
            }
            SegKind::Simple => {}
        }
        let argv = seg.argv();
        let Some(argv0) = argv.first() else {
            // Assignment-only or redirection-only.
            let u = seg.unmatchable || seg.words.iter().any(|w| w.expansion || w.tilde);
            o.uncertain |= u;
            trace.note(
                Verdict::Ask,
                &seg.words,
                depth,
                None,
                None,
                || "no command: assignments or redirections only".into(),
                u,
            );
            return Verdict::Ask;
        };
        let literal_argv = argv.iter().all(|w| !w.expansion && !w.brace);
        if literal_argv {
            let mut inner = ShellOutcome::allow();
            trace.seen.push(std::collections::HashSet::new());
            let found = self.restrictive(argv, depth, &mut inner, trace);
            trace.seen.pop();
            o.absorb(&inner);
            if trace.exhausted() && found != Some(Verdict::Deny) {
                o.uncertain = true;
                trace.note(
                    Verdict::Ask,
                    argv,
                    depth,
                    None,
                    None,
                    || format!("the command needs more than {MAX_SCAN_WORK} argvs and scripts judged: ask"),
                    true,
                );
                return Verdict::Ask;
            }
            if let Some(v) = found {
                return v;
            }
            if let Some(w) = seg.words[..seg.assignments].iter().find(|w| wrappers::assigns_code(&w.text)) {
                // `BASH_ENV=... bash -c true`, `LD_PRELOAD=x.so ls`: what
                // runs is not only the argv.
                o.uncertain = true;
                if restrictive {
                    let why = || "an assignment to a variable that names code (the loader's, the shell's)".to_string();
                    trace.note(Verdict::Ask, &seg.words, depth, None, Some(lossy(&w.text)), why, true);
                    return Verdict::Ask;
                }
            }
            if inner.uncertain && restrictive {
                let why = || "something inside (a wrapper, a script, a name operand) cannot be fully read".to_string();
                trace.note(Verdict::Ask, &seg.words, depth, None, Some(lossy(&argv0.text)), why, true);
                return Verdict::Ask;
            }
            // A substitution bash runs from a name operand is an expansion
            // of this segment: never allowed, whatever the tables.
            let name = wrappers::basename(&argv0.text);
            if let Some(w) = name_operands(name, argv).into_iter().find(|w| has_substitution(&w.text)) {
                o.uncertain = true;
                let why = || "a name operand bash expands again holds a substitution".to_string();
                trace.note(Verdict::Ask, &seg.words, depth, None, Some(lossy(&w.text)), why, true);
                return Verdict::Ask;
            }
        }
        let assignments = &seg.words[..seg.assignments];
        let expansion = argv.iter().chain(assignments).find(|w| w.expansion || w.brace);
        if seg.unmatchable || expansion.is_some() || argv0.glob {
            o.uncertain = true;
            let token = expansion
                .map(|w| format!("{} (the word after quote removal; it holds an expansion)", lossy(&w.text)))
                .or_else(|| argv0.glob.then(|| lossy(&argv0.text)));
            let why = if argv0.glob && expansion.is_none() && !seg.unmatchable {
                "a glob in argv0: which command runs depends on the files"
            } else if expansion.is_some_and(|w| w.brace) {
                "a brace expansion changes the tokens"
            } else if expansion.is_some() {
                "an expansion: the words are not known before the shell runs"
            } else {
                "a here-doc, here-string or an expansion in a redirection"
            };
            trace.note(Verdict::Ask, &seg.words, depth, None, token, || why.to_string(), true);
            return Verdict::Ask;
        }
        let tilde = argv.iter().chain(assignments).find(|w| w.tilde);
        if let Some(t) = tilde {
            o.uncertain = true;
            if restrictive {
                let token = Some(lossy(&t.text));
                let why = || "a tilde word: its expansion could be what a deny or ask rule names".to_string();
                trace.note(Verdict::Ask, &seg.words, depth, None, token, why, true);
                return Verdict::Ask;
            }
        }
        if seg.writes || is_reserved(&argv0.text) || argv0.text.contains(&b'(') {
            let why = if seg.writes {
                "a redirection that can create or write a file"
            } else {
                "a keyword or `(` is never an argv0 an allow rule can match"
            };
            trace.note(Verdict::Ask, &seg.words, depth, None, None, || why.to_string(), tilde.is_some());
            return Verdict::Ask;
        }
        if let Some(p) = self.allow.iter().find(|p| p.matches_exact(&seg.words)) {
            trace.note(
                Verdict::Allow,
                &seg.words,
                depth,
                Some((ShellTable::Allow, p)),
                None,
                || "allowed".into(),
                tilde.is_some(),
            );
            Verdict::Allow
        } else {
            trace.note(Verdict::Ask, &seg.words, depth, None, None, || "no allow rule matches".into(), tilde.is_some());
            Verdict::Ask
        }
    }

    /// Deny and ask matching of one literal argv and of everything it runs
    /// inside (wrappers, scripts, substitutions in name operands).
    /// `Some(verdict)` when that decides the segment (deny, or ask by an ask
    /// pattern); what it found is recorded in `o`.
    fn restrictive(&self, argv: &[Word], depth: usize, o: &mut ShellOutcome, trace: &mut Trace) -> Option<Verdict> {
        // Every visit counts, a repeated one too (a wrapper's loop over its
        // suffixes revisits them): the scan's work stays bounded.
        if trace.spend() {
            o.uncertain = true;
            return None;
        }
        // Judged already for this segment, into this same outcome: nothing
        // to add (see `Trace::seen`).
        if let Some(seen) = trace.seen.last_mut()
            && !seen.insert((argv.as_ptr() as usize, argv.len(), depth))
        {
            return None;
        }
        if let Some(p) = self.deny.iter().find(|p| p.matches_restrictive(argv)) {
            o.deny_matched = true;
            let token = p.glob_token(argv);
            trace.note(Verdict::Deny, argv, depth, Some((ShellTable::Deny, p)), token, || "denied".into(), false);
            return Some(Verdict::Deny);
        }
        if depth + 1 >= MAX_DEPTH {
            o.uncertain = true;
            return None;
        }
        // Substitutions bash runs when it expands a name operand again.
        let name = wrappers::basename(&argv[0].text);
        if matches!(name, b"export" | b"declare" | b"typeset" | b"local" | b"readonly")
            && argv[1..].iter().any(|w| wrappers::assigns_code(&w.text))
        {
            // `export BASH_ENV=...; bash -c true`.
            o.uncertain = true;
        }
        let operands = name_operands(name, argv);
        if !operands.is_empty() {
            for w in &operands {
                if let Some(parsed) = lexer::scan_substitutions(&w.text, depth + 1) {
                    o.uncertain = true;
                    let inner = self.fold(&parsed, depth + 1, trace);
                    o.absorb(&inner);
                }
            }
            if o.deny_matched {
                let token =
                    operands.iter().find(|w| w.text.contains(&b'$') || w.text.contains(&b'`')).map(|w| lossy(&w.text));
                trace.note(
                    Verdict::Deny,
                    argv,
                    depth,
                    None,
                    token,
                    || "a denied command in a substitution bash expands in a name operand".into(),
                    true,
                );
                return Some(Verdict::Deny);
            }
        }
        let inner = if restrictive_tables(self) { wrappers::inner(argv) } else { Inner::None };
        let wrapper = || Some(lossy(&argv[0].text));
        match inner {
            Inner::None => {}
            Inner::Opaque => {
                o.uncertain = true;
                trace.note(
                    Verdict::Ask,
                    argv,
                    depth,
                    None,
                    wrapper(),
                    || "a wrapper whose inner command cannot be read (an option it does not know, a script from standard input, a command in a syntax of its own)".into(),
                    true,
                );
            }
            Inner::Argv { argvs, unknown_args, uncertain } => {
                if uncertain {
                    o.uncertain = true;
                    trace.note(
                        Verdict::Ask,
                        argv,
                        depth,
                        None,
                        wrapper(),
                        || "an assignment to a variable that names code (the loader's, the shell's)".into(),
                        true,
                    );
                }
                for a in argvs {
                    // Unknown arguments (xargs input, `find -exec {}`) only
                    // matter to a pattern naming this inner command.
                    o.uncertain |= unknown_args && self.names_command(a);
                    if a.first().is_some_and(|w| w.glob) {
                        o.uncertain = true;
                    }
                    if a.iter().any(|w| w.tilde) {
                        o.uncertain = true;
                    }
                    self.restrictive(a, depth + 1, o, trace);
                }
            }
            Inner::Scripts { scripts, uncertain } => {
                o.uncertain |= uncertain;
                for s in &scripts {
                    let inner = self.scan_bytes(s, depth + 1, trace);
                    o.absorb(&inner);
                }
            }
            Inner::Suffixes(words) => {
                // The command starts at one of these words: a deny there is
                // found whichever it is. A glob or tilde word could be its
                // argv0.
                for i in 0..words.len() {
                    if o.deny_matched {
                        // Found where the command starts: the rest are its arguments.
                        break;
                    }
                    let a = &words[i..];
                    o.uncertain |= a[0].glob || a[0].tilde;
                    if wrappers::SUFFIX_WRAPPERS.contains(&wrappers::basename(&a[0].text)) {
                        // Its own suffixes are suffixes of these.
                        if let Some(p) = self.deny.iter().find(|p| p.matches_restrictive(a)) {
                            o.deny_matched = true;
                            trace.note(
                                Verdict::Deny,
                                a,
                                depth + 1,
                                Some((ShellTable::Deny, p)),
                                None,
                                || "denied".into(),
                                false,
                            );
                        } else if self.ask.iter().any(|p| p.matches_restrictive(a)) {
                            o.ask_matched = true;
                        }
                    } else {
                        self.restrictive(a, depth + 1, o, trace);
                    }
                }
            }
        }
        if o.deny_matched {
            trace.note(
                Verdict::Deny,
                argv,
                depth,
                None,
                wrapper(),
                || "a denied command inside this wrapper".into(),
                o.uncertain,
            );
            return Some(Verdict::Deny);
        }
        if let Some(p) = self.ask.iter().find(|p| p.matches_restrictive(argv)) {
            o.ask_matched = true;
            let token = p.glob_token(argv);
            trace.note(Verdict::Ask, argv, depth, Some((ShellTable::Ask, p)), token, || "asks".into(), o.uncertain);
            return Some(Verdict::Ask);
        }
        if o.ask_matched {
            trace.note(
                Verdict::Ask,
                argv,
                depth,
                None,
                wrapper(),
                || "an ask rule matched inside this wrapper".into(),
                o.uncertain,
            );
            return Some(Verdict::Ask);
        }
        None
    }
}

impl ShellRules {
    /// True when a deny or ask pattern could name the command `argv` runs.
    fn names_command(&self, argv: &[Word]) -> bool {
        let Some(first) = argv.first() else { return false };
        let base = wrappers::basename(&first.text);
        self.deny.iter().chain(&self.ask).any(|p| match p.tokens.first() {
            None => p.rest,
            Some(PTok::One) => true,
            Some(PTok::Lit(l)) => {
                !first.is_literal() || l[..] == first.text[..] || l[..] == *base || wrappers::inner(argv).is_wrapper()
            }
        })
    }
}

/// True when the tables hold a deny or ask pattern (only those look inside).
fn restrictive_tables(r: &ShellRules) -> bool {
    !r.deny.is_empty() || !r.ask.is_empty()
}

/// `match_shell_command(command, rules)`.
pub fn match_shell_command(command: &str, rules: &ShellRules) -> Verdict {
    rules.check(command)
}
