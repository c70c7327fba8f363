//! The lexer and segmenter: one pass over the bytes of a command, producing
//! the flat list of segments (simple commands) the shell would run.
//!
//! It is a small recursive state machine over bytes, written to
//! `shell-matching.md`:
//! - blanks are space and tab only; newline separates commands; every other
//!   byte (CR, NBSP, zero-width, ...) is an ordinary word byte;
//! - quotes and escapes are honoured, nothing is expanded: a word holding an
//!   expansion is flagged, and the commands inside `$(...)`, backticks and
//!   `<(...)` are parsed too and appended as segments of their own (they run);
//! - redirections are taken out of argv and classified (neutral or writing);
//! - subshells and `{ ...; }` groups nest through an explicit stack (any
//!   depth); compound-command keywords become segments of their own that are
//!   never allowed, and the commands they govern follow as ordinary segments;
//! - `case` is parsed item by item (patterns, then the item's commands);
//! - anything the grammar below does not know is a parse failure.
//!
//! The output is deliberately flat: the verdict is the strictest across all
//! segments, so a structure only has to expose every command it contains.

use std::borrow::Cow;
use std::cell::Cell;
use std::rc::Rc;

/// Nesting limit for substitutions, `((...))`/`${...}` contents and `sh -c`
/// scripts (groups are not limited); deeper is a parse failure (ask).
pub(crate) const MAX_DEPTH: usize = 64;

/// One word after quote removal, with what the matcher must know about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Word<'a> {
    /// The bytes after quote and escape removal (borrowed from the source
    /// when the word holds no quoting at all).
    pub text: Cow<'a, [u8]>,
    /// Holds an expansion (`$...`, backtick, process substitution).
    pub expansion: bool,
    /// Holds an unquoted glob character (`*`, `?`, `[`).
    pub glob: bool,
    /// Holds an unquoted brace expansion (`{a,b}`, `{1..3}`).
    pub brace: bool,
    /// Starts with an unquoted `~` (a tilde prefix the shell expands).
    pub tilde: bool,
    /// Index in `text` where the first quoted or escaped byte went; `None`
    /// for a fully unquoted word.
    pub quoted_at: Option<usize>,
}

impl Word<'_> {
    fn mark_quoted(&mut self) {
        if self.quoted_at.is_none() {
            self.quoted_at = Some(self.text.len());
        }
    }

    /// True for a word with no quoting at all.
    pub fn unquoted(&self) -> bool {
        self.quoted_at.is_none()
    }

    /// True for a `NAME=value` word (`NAME+=value` too) whose name and `=` are
    /// unquoted: the shell's assignment.
    pub fn is_assignment(&self) -> bool {
        let t = &self.text[..];
        let Some(eq) = t.iter().position(|&b| b == b'=') else { return false };
        let name_end = if eq > 0 && t[eq - 1] == b'+' { eq - 1 } else { eq };
        if name_end == 0 || self.quoted_at.is_some_and(|q| q <= eq) {
            return false;
        }
        let name = &t[..name_end];
        (name[0].is_ascii_alphabetic() || name[0] == b'_')
            && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
    }

    /// True when the word is exactly this literal (unquoted or not).
    pub fn is_literal(&self) -> bool {
        !self.expansion && !self.glob && !self.brace
    }
}

/// What kind of segment a parser produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegKind {
    /// A simple command: assignments, argv, redirections.
    Simple,
    /// A compound-command keyword or header (`if`, `for x in ...`, `[[ ... ]]`,
    /// a function header): never allowed, contains no command of its own.
    Keyword,
    /// Redirections applied to a whole `( ... )` or `{ ...; }` group.
    GroupTail,
}

/// One segment: what one simple command (or keyword) contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment<'a> {
    /// What this is.
    pub kind: SegKind,
    /// Every word in order, leading assignments included, redirections not.
    pub words: Vec<Word<'a>>,
    /// How many leading words are assignments.
    pub assignments: usize,
    /// A here-doc, here-string, or an expansion in a redirection target.
    pub unmatchable: bool,
    /// A redirection that can create or write a file (or open a device).
    pub writes: bool,
    /// Any redirection at all.
    pub redirected: bool,
    /// Something in it the matcher cannot fully resolve (a keyword whose
    /// words hold an expansion, arithmetic over names, ...).
    pub uncertain: bool,
    /// The target word of every redirection, in order (here-doc delimiters
    /// and here-strings included).
    pub targets: Vec<Word<'a>>,
}

impl<'a> Segment<'a> {
    fn new(kind: SegKind) -> Self {
        Segment {
            kind,
            words: Vec::new(),
            assignments: 0,
            unmatchable: false,
            writes: false,
            redirected: false,
            uncertain: false,
            targets: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.kind == SegKind::Simple && self.words.is_empty() && !self.redirected
    }

    /// The argv: the words after the leading assignments.
    pub fn argv(&self) -> &[Word<'a>] {
        &self.words[self.assignments.min(self.words.len())..]
    }

    /// The same segment owning all its text.
    fn into_owned<'b>(self) -> Segment<'b> {
        let own = |w: Word<'a>| Word { text: Cow::Owned(w.text.into_owned()), ..w };
        let words = self.words.into_iter().map(own).collect();
        let targets = self.targets.into_iter().map(own).collect();
        Segment {
            kind: self.kind,
            words,
            assignments: self.assignments,
            unmatchable: self.unmatchable,
            writes: self.writes,
            redirected: self.redirected,
            uncertain: self.uncertain,
            targets,
        }
    }
}

/// The result of parsing a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed<'a> {
    /// Every complete segment, in order.
    pub segments: Vec<Segment<'a>>,
    /// The parse stopped at an error or an unsupported construct; segments
    /// after that point were not seen.
    pub failed: bool,
}

/// Parses a command into its segments.
pub(crate) fn parse(src: &[u8]) -> Parsed<'_> {
    parse_at_depth(src, 0)
}

pub(crate) fn parse_at_depth(src: &[u8], depth: usize) -> Parsed<'_> {
    parse_with(src, depth, Rc::new(Cell::new(BACKTRACK_BUDGET)))
}

/// How many times one command may re-read a `((` / `$((` that turned out not
/// to be arithmetic (each re-read parses its inside again); beyond it the
/// parse fails (ask) rather than take exponential time.
const BACKTRACK_BUDGET: u32 = 64;

fn parse_with(src: &[u8], depth: usize, budget: Rc<Cell<u32>>) -> Parsed<'_> {
    let mut p = Parser { s: src, pos: 0, out: Vec::new(), depth, heredocs: Vec::new(), lost: false, budget };
    let failed = p.parse_list(Term::Eof).is_err();
    Parsed { segments: p.out, failed: failed || p.lost }
}

/// Finds the substitutions in a word's text as bash would when it expands
/// that text a second time (an array subscript in a name operand of `read`,
/// `printf -v`, `declare`, `test -v`, `let`, ...): every `$(...)`, backtick,
/// `${...}`, `$((...))` and process substitution is parsed and the commands
/// inside are returned as segments. Quotes inside are not honoured (that
/// can only find more). `None` when the text holds no `$`, backtick or
/// process substitution at all.
pub(crate) fn scan_substitutions(text: &[u8], depth: usize) -> Option<Parsed<'_>> {
    let has = text.iter().any(|&b| b == b'$' || b == b'`') || text.windows(2).any(|w| matches!(w, [b'<' | b'>', b'(']));
    if !has {
        return None;
    }
    let mut p = Parser {
        s: text,
        pos: 0,
        out: Vec::new(),
        depth,
        heredocs: Vec::new(),
        lost: false,
        budget: Rc::new(Cell::new(BACKTRACK_BUDGET)),
    };
    let mut failed = false;
    let mut w = Word::default();
    while let Some(c) = p.peek() {
        let r = match c {
            b'\\' => {
                p.pos += 2;
                Ok(())
            }
            b'$' => p.dollar(&mut w),
            b'`' => p.backtick(&mut w),
            b'<' | b'>' if p.peek_at(1) == Some(b'(') => {
                p.pos += 2;
                p.nested(|p| p.parse_list(Term::Paren))
            }
            _ => {
                p.pos += 1;
                Ok(())
            }
        };
        if r.is_err() {
            failed = true;
            break;
        }
    }
    Some(Parsed { segments: p.out, failed: failed || p.lost })
}

/// A parse failure; what was parsed before it stays in `out`.
#[derive(Debug)]
struct Fail;

type Step = Result<(), Fail>;

/// What ends the list being parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    /// The end of input.
    Eof,
    /// A `)` closing `$(` or a process substitution.
    Paren,
}

/// Keywords that head or continue a compound command and are followed by a
/// command in command position.
pub(super) fn is_prefix_keyword(t: &[u8]) -> bool {
    matches!(
        t,
        b"!" | b"time"
            | b"if"
            | b"then"
            | b"else"
            | b"elif"
            | b"fi"
            | b"do"
            | b"done"
            | b"while"
            | b"until"
            | b"coproc"
            | b"in"
    )
}

/// The closer pushed on the group stack for an open `case`.
const CASE: u8 = b'c';

/// True for a byte that ends an unquoted word.
fn is_meta(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>')
}

/// Bytes a word copies verbatim with no further thought: not a
/// metacharacter, quote, escape, expansion, glob or brace-expansion byte.
const PLAIN: [bool; 256] = {
    let mut t = [true; 256];
    let special = b" \t\n;&|()<>\\'\"`$*?[{,.}";
    let mut i = 0;
    while i < special.len() {
        t[special[i] as usize] = false;
        i += 1;
    }
    t
};

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    out: Vec<Segment<'a>>,
    depth: usize,
    /// Here-docs whose bodies start after the next newline: (delimiter,
    /// strip leading tabs).
    heredocs: Vec<(Vec<u8>, bool)>,
    /// Something was not looked into (a here-doc body nested too deep): the
    /// parse counts as failed.
    lost: bool,
    /// What is left of [`BACKTRACK_BUDGET`], shared with nested parsers.
    budget: Rc<Cell<u32>>,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn peek_at(&self, k: usize) -> Option<u8> {
        self.s.get(self.pos + k).copied()
    }

    fn starts_with(&self, lit: &[u8]) -> bool {
        self.s[self.pos.min(self.s.len())..].starts_with(lit)
    }

    /// Skips spaces, tabs and backslash-newlines (never newlines).
    fn skip_blanks(&mut self) {
        loop {
            match self.peek() {
                Some(b' ' | b'\t') => self.pos += 1,
                Some(b'\\') if self.peek_at(1) == Some(b'\n') => self.pos += 2,
                _ => return,
            }
        }
    }

    fn finish(&mut self, cur: &mut Segment<'a>) {
        if !cur.is_empty() {
            self.out.push(std::mem::replace(cur, Segment::new(SegKind::Simple)));
        }
    }

    fn keyword(&mut self) {
        self.keyword_uncertain(false);
    }

    /// A keyword segment; `uncertain` when its words hold something the
    /// matcher cannot resolve.
    fn keyword_uncertain(&mut self, uncertain: bool) {
        let mut k = Segment::new(SegKind::Keyword);
        k.uncertain = uncertain;
        self.out.push(k);
    }

    /// Runs `f` one nesting level deeper; too deep is a failure.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, Fail>) -> Result<T, Fail> {
        if self.depth >= MAX_DEPTH {
            return Err(Fail);
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    /// The main state machine: a list of commands up to `term`.
    ///
    /// Subshells and brace groups nest through `groups`, an explicit stack
    /// of the closers expected (`)` or `}`), so their depth is not bounded by
    /// recursion; only substitutions recurse.
    ///
    /// An incomplete list is a failure: a separator with no command before
    /// it (a leading `;`, `;;` outside `case`, `&& ||`), and `&&`, `||`, `|`
    /// or `|&` with no command after it (at the end, before `)`, or before a
    /// closing keyword).
    fn parse_list(&mut self, term: Term) -> Step {
        let mut cur = Segment::new(SegKind::Simple);
        let mut groups: Vec<u8> = Vec::new();
        // No command since the last separator (or the start).
        let mut empty = true;
        // The last operator needs a command after it.
        let mut need = false;
        loop {
            self.skip_blanks();
            let Some(c) = self.peek() else {
                self.finish(&mut cur);
                return if term == Term::Eof && groups.is_empty() && !need { Ok(()) } else { Err(Fail) };
            };
            let needed = need;
            let separator = match c {
                b';' => !matches!(self.peek_at(1), Some(b';' | b'&')),
                b'&' => self.peek_at(1) != Some(b'>'),
                b'|' => true,
                _ => false,
            };
            if separator {
                if empty && cur.is_empty() {
                    return Err(Fail);
                }
                empty = true;
                need = matches!(c, b'|') || self.starts_with(b"&&");
            } else if c == b')' {
                if need {
                    return Err(Fail);
                }
                empty = false;
            } else if c == b'\n' {
                empty = true;
            } else if !matches!(c, b'#' | b';') {
                empty = false;
                need = false;
            }
            match c {
                b'#' => {
                    // At this point no word is in progress, so `#` starts one:
                    // a comment runs to the end of the line.
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.pos += 1;
                    }
                }
                b'\n' => {
                    self.pos += 1;
                    self.finish(&mut cur);
                    self.heredoc_bodies();
                }
                b';' => {
                    self.finish(&mut cur);
                    if matches!(self.peek_at(1), Some(b';' | b'&')) {
                        // `;;`, `;&`, `;;&` end a `case` item.
                        if groups.last() != Some(&CASE) {
                            return Err(Fail);
                        }
                        self.pos += if self.starts_with(b";;&") { 3 } else { 2 };
                        if self.case_item()? {
                            empty = true;
                        } else {
                            groups.pop();
                            self.group_tail()?;
                            empty = false;
                        }
                    } else {
                        self.pos += 1;
                    }
                }
                b'&' => {
                    if self.peek_at(1) == Some(b'>') {
                        self.redirect(&mut cur)?;
                    } else {
                        self.pos += if self.peek_at(1) == Some(b'&') { 2 } else { 1 };
                        self.finish(&mut cur);
                    }
                }
                b'|' => {
                    self.pos += if matches!(self.peek_at(1), Some(b'|' | b'&')) { 2 } else { 1 };
                    self.finish(&mut cur);
                }
                b')' => {
                    self.pos += 1;
                    self.finish(&mut cur);
                    match groups.last() {
                        Some(b')') => {
                            groups.pop();
                            self.group_tail()?;
                        }
                        None if term == Term::Paren => return Ok(()),
                        _ => return Err(Fail),
                    }
                }
                b'(' => {
                    if self.open_paren(&mut cur)? {
                        groups.push(b')');
                        empty = true;
                    }
                }
                b'<' | b'>' if self.peek_at(1) == Some(b'(') => {
                    // Process substitution: an argument whose command runs.
                    self.pos += 2;
                    self.nested(|p| p.parse_list(Term::Paren))?;
                    cur.words.push(Word { expansion: true, ..Word::default() });
                }
                b'<' | b'>' => self.redirect(&mut cur)?,
                _ => {
                    let w = self.word()?;
                    let fd_prefix = !w.text.is_empty()
                        && w.unquoted()
                        && w.text.iter().all(u8::is_ascii_digit)
                        && matches!(self.peek(), Some(b'<' | b'>'))
                        && self.peek_at(1) != Some(b'(');
                    if fd_prefix {
                        self.redirect(&mut cur)?;
                        continue;
                    }
                    // `{NAME}>file` is a redirection in bash (it stores the
                    // new fd in NAME) and a word in dash: the shells disagree
                    // on the argv, so the segment is unmatchable.
                    let fd_var = w.text.len() > 2
                        && w.text[0] == b'{'
                        && w.text.ends_with(b"}")
                        && (w.text[1].is_ascii_alphabetic() || w.text[1] == b'_')
                        && matches!(self.peek(), Some(b'<' | b'>'))
                        && self.peek_at(1) != Some(b'(');
                    if fd_var {
                        cur.unmatchable = true;
                        self.redirect(&mut cur)?;
                        continue;
                    }
                    if cur.is_empty() && w.unquoted() && !w.expansion {
                        match &w.text[..] {
                            b"{" => {
                                groups.push(b'}');
                                empty = true;
                                continue;
                            }
                            b"}" | b"fi" | b"done" | b"esac" | b"then" | b"do" | b"else" | b"elif" if needed => {
                                return Err(Fail);
                            }
                            b"}" => {
                                if groups.pop() != Some(b'}') {
                                    return Err(Fail);
                                }
                                self.group_tail()?;
                                continue;
                            }
                            t if is_prefix_keyword(t) => {
                                if t == b"time" {
                                    // `time -p cmd` runs `cmd`.
                                    self.skip_blanks();
                                    if self.starts_with(b"-p") && self.peek_at(2).is_none_or(is_meta) {
                                        self.pos += 2;
                                        self.skip_blanks();
                                    }
                                    // And `time [-p] -- cmd` (bash 5.2).
                                    if self.starts_with(b"--") && self.peek_at(2).is_none_or(is_meta) {
                                        self.pos += 2;
                                    }
                                }
                                self.keyword();
                                empty = !matches!(t, b"fi" | b"done");
                                continue;
                            }
                            b"for" | b"select" => {
                                let u = self.loop_header()?;
                                self.keyword_uncertain(u);
                                continue;
                            }
                            b"function" => {
                                self.function_header()?;
                                self.keyword();
                                continue;
                            }
                            b"[[" => {
                                let u = self.conditional()?;
                                self.keyword_uncertain(u);
                                continue;
                            }
                            b"case" => {
                                let k = self.out.len();
                                self.keyword();
                                if self.case_header()? {
                                    self.out[k].uncertain = true;
                                }
                                if self.case_item()? {
                                    groups.push(CASE);
                                } else {
                                    self.group_tail()?;
                                }
                                continue;
                            }
                            b"esac" => {
                                if groups.pop() != Some(CASE) {
                                    return Err(Fail);
                                }
                                self.group_tail()?;
                                continue;
                            }
                            b"]]" => return Err(Fail),
                            _ => {}
                        }
                    }
                    if cur.words.len() == cur.assignments && w.is_assignment() {
                        cur.assignments += 1;
                    }
                    cur.words.push(w);
                }
            }
        }
    }

    /// `(` in command position opens a subshell (true: the caller pushes
    /// the group) or `((` an arithmetic command; after a single word,
    /// `name ()` is a function header.
    fn open_paren(&mut self, cur: &mut Segment<'a>) -> Result<bool, Fail> {
        if cur.is_empty() {
            // Not arithmetic: `( (`, two subshells.
            if self.peek_at(1) == Some(b'(')
                && let Some(opaque) = self.try_arith()?
            {
                self.keyword_uncertain(opaque);
                self.group_tail()?;
                return Ok(false);
            }
            self.pos += 1;
            return Ok(true);
        }
        if cur.kind == SegKind::Simple && cur.words.len() == 1 && cur.assignments == 0 && !cur.redirected {
            self.pos += 1;
            self.skip_blanks();
            if self.peek() == Some(b')') {
                self.pos += 1;
                *cur = Segment::new(SegKind::Keyword);
                self.finish(cur);
                return Ok(false);
            }
        }
        Err(Fail)
    }

    /// Redirections after a closing `)` or `}`; then only a separator may follow.
    fn group_tail(&mut self) -> Step {
        let mut tail = Segment::new(SegKind::GroupTail);
        loop {
            self.skip_blanks();
            match self.peek() {
                Some(b'<' | b'>') if self.peek_at(1) != Some(b'(') => self.redirect(&mut tail)?,
                Some(b'&') if self.peek_at(1) == Some(b'>') => self.redirect(&mut tail)?,
                Some(d) if d.is_ascii_digit() => {
                    let w = self.word()?;
                    let fd = w.unquoted() && w.text.iter().all(u8::is_ascii_digit);
                    if !(fd && matches!(self.peek(), Some(b'<' | b'>'))) {
                        return Err(Fail);
                    }
                    self.redirect(&mut tail)?;
                }
                None | Some(b'\n' | b';' | b'&' | b'|' | b')' | b'#') => break,
                Some(b'}') if self.peek_at(1).is_none_or(is_meta) => break,
                _ => return Err(Fail),
            }
        }
        if tail.redirected {
            self.out.push(tail);
        }
        Ok(())
    }

    /// `case WORD in`: the subject (its substitutions are parsed) and `in`,
    /// possibly after newlines.
    /// True when the subject holds an expansion.
    fn case_header(&mut self) -> Result<bool, Fail> {
        self.skip_blanks();
        let subject = match self.peek() {
            Some(c) if !is_meta(c) => self.word()?,
            _ => return Err(Fail),
        };
        self.skip_blanks_and_newlines();
        let w = self.word()?;
        if w.unquoted() && w.text[..] == *b"in" { Ok(subject.expansion) } else { Err(Fail) }
    }

    /// At the start of a `case` item: `esac` (false: the case is closed), or
    /// `[(] pattern [| pattern]... )` (true: the item's commands follow).
    /// Patterns are read as words, so substitutions in them are parsed.
    fn case_item(&mut self) -> Result<bool, Fail> {
        self.skip_blanks_and_newlines();
        let open = self.peek() == Some(b'(');
        if open {
            self.pos += 1;
            self.skip_blanks();
        }
        loop {
            match self.peek() {
                Some(c) if !is_meta(c) => {
                    let w = self.word()?;
                    if !open && w.unquoted() && w.text[..] == *b"esac" && self.peek().is_none_or(is_meta) {
                        return Ok(false);
                    }
                    if w.expansion {
                        self.keyword_uncertain(true);
                    }
                }
                _ => return Err(Fail),
            }
            self.skip_blanks();
            match self.peek() {
                Some(b'|') => {
                    self.pos += 1;
                    self.skip_blanks();
                }
                Some(b')') => {
                    self.pos += 1;
                    return Ok(true);
                }
                _ => return Err(Fail),
            }
        }
    }

    /// Skips blanks, newlines and comments.
    fn skip_blanks_and_newlines(&mut self) {
        loop {
            self.skip_blanks();
            match self.peek() {
                Some(b'\n') => {
                    self.pos += 1;
                    self.heredoc_bodies();
                }
                Some(b'#') => {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.pos += 1;
                    }
                }
                _ => return,
            }
        }
    }

    /// `for NAME in WORDS` / `for ((...))` / `select ...`, up to the
    /// separator; true when the header holds something unresolvable.
    fn loop_header(&mut self) -> Result<bool, Fail> {
        self.skip_blanks();
        let mut uncertain = false;
        if self.starts_with(b"((") {
            uncertain = self.skip_arith(b'(', b')', true)?.ok_or(Fail)?;
        }
        loop {
            self.skip_blanks();
            match self.peek() {
                None | Some(b'\n' | b';') => return Ok(uncertain),
                Some(c) if is_meta(c) => return Err(Fail),
                _ => {
                    let w = self.word()?;
                    uncertain |= w.expansion || w.brace || w.tilde;
                }
            }
        }
    }

    /// `function NAME` with optional `()`.
    fn function_header(&mut self) -> Step {
        self.skip_blanks();
        match self.peek() {
            Some(c) if !is_meta(c) => {
                self.word()?;
            }
            _ => return Err(Fail),
        }
        self.skip_blanks();
        if self.peek() == Some(b'(') {
            self.pos += 1;
            self.skip_blanks();
            if self.peek() != Some(b')') {
                return Err(Fail);
            }
            self.pos += 1;
        }
        Ok(())
    }

    /// `[[ ... ]]`: operators inside are plain tokens; words are still read
    /// (so substitutions inside are parsed) up to an unquoted `]]`, and a
    /// process substitution is parsed too. The text of a quoted word is
    /// scanned for substitutions as well (bash expands an array subscript a
    /// second time). True when something is unresolvable: an expansion,
    /// a `$` or backtick in a word's text, or an arithmetic comparison
    /// (whose operands are evaluated as expressions, names included).
    fn conditional(&mut self) -> Result<bool, Fail> {
        let mut uncertain = false;
        loop {
            self.skip_blanks();
            match self.peek() {
                None => return Err(Fail),
                Some(b'\n') => self.pos += 1,
                Some(b'<' | b'>') if self.peek_at(1) == Some(b'(') => {
                    uncertain = true;
                    self.pos += 2;
                    self.nested(|p| p.parse_list(Term::Paren))?;
                }
                Some(c) if is_meta(c) => {
                    while self.peek().is_some_and(|c| is_meta(c) && c != b' ' && c != b'\t' && c != b'\n') {
                        if matches!(self.peek(), Some(b'<' | b'>')) && self.peek_at(1) == Some(b'(') {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                _ => {
                    let w = self.word()?;
                    if w.unquoted() && w.text[..] == *b"]]" {
                        return Ok(uncertain);
                    }
                    uncertain |= w.expansion || w.tilde || w.brace;
                    if w.unquoted() && matches!(&w.text[..], b"-eq" | b"-ne" | b"-lt" | b"-le" | b"-gt" | b"-ge") {
                        uncertain = true;
                    }
                    if let Some(inner) = scan_substitutions(&w.text, self.depth + 1) {
                        uncertain = true;
                        let segs: Vec<Segment<'a>> = inner.segments.into_iter().map(Segment::into_owned).collect();
                        self.out.extend(segs);
                        if inner.failed {
                            self.lost = true;
                        }
                    }
                }
            }
        }
    }

    /// Reads the bodies of the pending here-docs, which start here (after a
    /// newline), each up to its delimiter line or the end of input. The
    /// commands go on after them. A body is also scanned as a script, since
    /// it may be one (`bash <<EOF`): its segments are added (the here-doc
    /// segment already asks, so they can only add a deny) and a failure of
    /// that inner parse is ignored.
    fn heredoc_bodies(&mut self) {
        for (delim, strip_tabs) in std::mem::take(&mut self.heredocs) {
            let start = self.pos;
            let mut end = self.s.len();
            while self.pos < self.s.len() {
                let line_start = self.pos;
                let line_end =
                    self.s[line_start..].iter().position(|&b| b == b'\n').map_or(self.s.len(), |i| line_start + i);
                self.pos = (line_end + 1).min(self.s.len());
                let mut line = &self.s[line_start..line_end];
                if strip_tabs {
                    while let [b'\t', rest @ ..] = line {
                        line = rest;
                    }
                }
                if line == delim.as_slice() {
                    end = line_start;
                    break;
                }
            }
            if self.depth < MAX_DEPTH {
                let body = parse_with(&self.s[start..end], self.depth + 1, self.budget.clone()).segments;
                self.out.extend(body);
            } else {
                self.lost = true;
            }
        }
    }

    /// Reads a balanced `open ... close` run starting at `open`: the inside
    /// of `((...))`, `$((...))`, `$[...]`, `${...}` or a `for ((...))`
    /// header. Every substitution inside (`$(...)`, backticks, `${...}`,
    /// process substitution) is parsed, so its commands become segments;
    /// double quotes and backslashes are honoured, a single quote is a parse
    /// failure (its meaning there varies). Returns whether the inside holds
    /// something the matcher cannot evaluate: any expansion, quote or name
    /// (bash evaluates a variable's value as an expression, and an array
    /// subscript in that value can run a command).
    ///
    /// With `arith`, the run must end in `))` as bash's arithmetic command
    /// does: `Ok(None)` when the first `)` closing the inner `(` is not
    /// followed by `)` (then `((` is two nested subshells to bash, and
    /// `$((` a command substitution holding one); `pos` is left anywhere.
    fn skip_arith(&mut self, open: u8, close: u8, arith: bool) -> Result<Option<bool>, Fail> {
        self.nested(|p| p.skip_arith_inner(open, close, arith))
    }

    fn skip_arith_inner(&mut self, open: u8, close: u8, arith: bool) -> Result<Option<bool>, Fail> {
        let mut depth = 0usize;
        let mut opaque = false;
        let mut w = Word::default();
        while let Some(c) = self.peek() {
            match c {
                b'\\' => {
                    opaque = true;
                    self.pos += 2;
                }
                b'$' => {
                    opaque = true;
                    self.dollar(&mut w)?;
                }
                b'`' => {
                    opaque = true;
                    self.backtick(&mut w)?;
                }
                // Whether a single quote quotes in there depends on the
                // context and the shell: we do not guess the extent.
                b'\'' => return Err(Fail),
                b'"' => {
                    opaque = true;
                    self.pos += 1;
                    self.double_quoted(&mut w)?;
                }
                b'<' | b'>' if self.peek_at(1) == Some(b'(') => {
                    opaque = true;
                    self.pos += 2;
                    self.nested(|p| p.parse_list(Term::Paren))?;
                }
                _ if c == open => {
                    depth += 1;
                    self.pos += 1;
                }
                _ if c == close => {
                    self.pos += 1;
                    depth = depth.saturating_sub(1);
                    if arith && depth == 1 && self.peek() != Some(close) {
                        return Ok(None);
                    }
                    if depth == 0 {
                        return Ok(Some(opaque));
                    }
                }
                _ => {
                    opaque |= c.is_ascii_alphabetic() || c == b'_';
                    self.pos += 1;
                }
            }
        }
        Err(Fail)
    }

    /// Tries `((` at `pos` as arithmetic: `Some(opaque)` when it is (and
    /// `pos` is after it), `None` when bash reads it as nested parentheses
    /// instead (and everything it read is undone).
    fn try_arith(&mut self) -> Result<Option<bool>, Fail> {
        let (pos, out, heredocs) = (self.pos, self.out.len(), self.heredocs.len());
        match self.skip_arith(b'(', b')', true)? {
            Some(opaque) => Ok(Some(opaque)),
            None => {
                let left = self.budget.get();
                if left == 0 {
                    return Err(Fail);
                }
                self.budget.set(left - 1);
                self.pos = pos;
                self.out.truncate(out);
                self.heredocs.truncate(heredocs);
                Ok(None)
            }
        }
    }

    /// One redirection operator at `pos` (an fd number, if any, was already
    /// read) and its target.
    fn redirect(&mut self, seg: &mut Segment<'a>) -> Step {
        seg.redirected = true;
        let ops: &[(&[u8], Redir)] = &[
            (b"&>>", Redir::Write),
            (b"&>", Redir::Write),
            (b"<<<", Redir::HereString),
            (b"<<-", Redir::HereDoc),
            (b"<<", Redir::HereDoc),
            (b"<>", Redir::ReadWrite),
            (b"<&", Redir::DupIn),
            (b">&", Redir::DupOut),
            (b">>", Redir::Write),
            (b">|", Redir::Write),
            (b"<", Redir::Read),
            (b">", Redir::Write),
        ];
        let Some(&(op, kind)) = ops.iter().find(|(op, _)| self.starts_with(op)) else { return Err(Fail) };
        let strip_tabs = op == b"<<-";
        self.pos += op.len();
        self.skip_blanks();
        match self.peek() {
            Some(c) if !is_meta(c) => {}
            _ => return Err(Fail),
        }
        let target = self.word()?;
        if target.expansion {
            seg.unmatchable = true;
        }
        let dev_null = target.is_literal() && target.text[..] == *b"/dev/null";
        let fd_dup = target.is_literal()
            && (target.text[..] == *b"-"
                || (!target.text.is_empty() && {
                    let digits = target.text.strip_suffix(b"-").unwrap_or(&target.text);
                    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
                }));
        match kind {
            Redir::HereDoc => {
                seg.unmatchable = true;
                // The delimiter is the word after quote removal; one with an
                // expansion is taken literally by the shell, which we do not
                // reproduce: a parse failure.
                if target.expansion {
                    return Err(Fail);
                }
                self.heredocs.push((target.text.to_vec(), strip_tabs));
            }
            Redir::HereString => seg.unmatchable = true,
            Redir::Read => {
                if !target.is_literal() || (target.text.starts_with(b"/dev/") && !dev_null) {
                    seg.writes = true;
                }
            }
            Redir::Write => seg.writes |= !dev_null,
            Redir::ReadWrite => seg.writes = true,
            Redir::DupOut => seg.writes |= !(fd_dup || dev_null),
            Redir::DupIn => seg.writes |= !fd_dup,
        }
        seg.targets.push(target);
        Ok(())
    }

    /// Reads one word up to an unquoted metacharacter.
    ///
    /// A word with no quoting, escape or expansion (the common case) borrows
    /// its bytes from the source; any other word owns its text.
    fn word(&mut self) -> Result<Word<'a>, Fail> {
        let mut w = Word::default();
        let start = self.pos;
        // True while the word's text is exactly `s[start..pos]`.
        let mut verbatim = true;
        let (mut brace_open, mut brace_sep) = (false, false);
        while let Some(c) = self.peek() {
            if PLAIN[c as usize] {
                // Fast path: a run of plain bytes at once.
                let run = self.pos;
                while self.peek().is_some_and(|c| PLAIN[c as usize]) {
                    self.pos += 1;
                }
                if !verbatim {
                    w.text.to_mut().extend_from_slice(&self.s[run..self.pos]);
                }
                continue;
            }
            if is_meta(c) {
                break;
            }
            let special = matches!(c, b'\\' | b'\'' | b'"' | b'`' | b'$');
            if special && verbatim {
                verbatim = false;
                w.text = Cow::Owned(self.s[start..self.pos].to_vec());
            }
            match c {
                b'\\' => match self.peek_at(1) {
                    Some(b'\n') => self.pos += 2,
                    Some(d) => {
                        w.mark_quoted();
                        w.text.to_mut().push(d);
                        self.pos += 2;
                    }
                    None => return Err(Fail),
                },
                b'\'' => {
                    w.mark_quoted();
                    let from = self.pos + 1;
                    let len = self.s[from..].iter().position(|&b| b == b'\'').ok_or(Fail)?;
                    w.text.to_mut().extend_from_slice(&self.s[from..from + len]);
                    self.pos = from + len + 1;
                }
                b'"' => {
                    w.mark_quoted();
                    self.pos += 1;
                    self.double_quoted(&mut w)?;
                }
                b'`' => self.backtick(&mut w)?,
                b'$' => self.dollar(&mut w)?,
                _ => {
                    match c {
                        b'*' | b'?' | b'[' => w.glob = true,
                        b'{' => brace_open = true,
                        b',' if brace_open => brace_sep = true,
                        b'.' if brace_open && self.peek_at(1) == Some(b'.') => brace_sep = true,
                        b'}' if brace_open && brace_sep => w.brace = true,
                        _ => {}
                    }
                    if !verbatim {
                        w.text.to_mut().push(c);
                    }
                    self.pos += 1;
                }
            }
        }
        if verbatim {
            w.text = Cow::Borrowed(&self.s[start..self.pos]);
        }
        // A tilde prefix: at the start, or after `=` or `:` (bash expands
        // those in assignment-like words). Read from the source, so a quoted
        // `'=~'` counts too (that can only add uncertainty).
        let raw = &self.s[start..self.pos];
        w.tilde = raw.first() == Some(&b'~') || raw.windows(2).any(|p| matches!(p, [b'=' | b':', b'~']));
        Ok(w)
    }

    /// The inside of `"..."`, after the opening quote.
    fn double_quoted(&mut self, w: &mut Word<'a>) -> Step {
        loop {
            match self.peek() {
                None => return Err(Fail),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => match self.peek_at(1) {
                    Some(b'\n') => self.pos += 2,
                    Some(d @ (b'$' | b'`' | b'"' | b'\\')) => {
                        w.text.to_mut().push(d);
                        self.pos += 2;
                    }
                    Some(_) => {
                        w.text.to_mut().push(b'\\');
                        self.pos += 1;
                    }
                    None => return Err(Fail),
                },
                Some(b'`') => self.backtick(w)?,
                Some(b'$') if matches!(self.peek_at(1), Some(b'\'' | b'"')) => {
                    // `$'` and `$"` are not special inside double quotes; the
                    // `$` still makes the word unmatchable.
                    w.expansion = true;
                    w.text.to_mut().push(b'$');
                    self.pos += 1;
                }
                Some(b'$') => self.dollar(w)?,
                Some(c) => {
                    w.text.to_mut().push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// Any `$`: every form is an expansion. Command substitutions are parsed
    /// so that the commands inside become segments.
    fn dollar(&mut self, w: &mut Word<'a>) -> Step {
        w.expansion = true;
        match self.peek_at(1) {
            Some(b'(') if self.peek_at(2) == Some(b'(') => {
                self.pos += 1;
                if self.try_arith()?.is_none() {
                    // `$( (...) ...)`: a command substitution.
                    self.pos += 1;
                    self.nested(|p| p.parse_list(Term::Paren))?;
                }
                Ok(())
            }
            Some(b'(') => {
                self.pos += 2;
                self.nested(|p| p.parse_list(Term::Paren))
            }
            Some(b'{') => {
                self.pos += 1;
                self.skip_arith(b'{', b'}', false).map(drop)
            }
            Some(b'[') => {
                self.pos += 1;
                self.skip_arith(b'[', b']', false).map(drop)
            }
            Some(b'\'') => {
                // ANSI-C quoting: up to the closing quote, `\'` escaped.
                self.pos += 2;
                loop {
                    match self.peek() {
                        None => return Err(Fail),
                        Some(b'\\') => self.pos += 2,
                        Some(b'\'') => {
                            self.pos += 1;
                            return Ok(());
                        }
                        Some(_) => self.pos += 1,
                    }
                }
            }
            Some(b'"') => {
                self.pos += 2;
                self.double_quoted(w)
            }
            _ => {
                self.pos += 1;
                Ok(())
            }
        }
    }

    /// A backtick substitution: its body, unescaped, is parsed as a script.
    fn backtick(&mut self, w: &mut Word<'a>) -> Step {
        w.expansion = true;
        self.pos += 1;
        let mut body = Vec::new();
        loop {
            match self.peek() {
                None => return Err(Fail),
                Some(b'`') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') if matches!(self.peek_at(1), Some(b'`' | b'\\' | b'$')) => {
                    body.push(self.s[self.pos + 1]);
                    self.pos += 2;
                }
                Some(c) => {
                    body.push(c);
                    self.pos += 1;
                }
            }
        }
        if self.depth >= MAX_DEPTH {
            return Err(Fail);
        }
        let inner = parse_with(&body, self.depth + 1, self.budget.clone());
        self.out.extend(inner.segments.into_iter().map(Segment::into_owned));
        if inner.failed { Err(Fail) } else { Ok(()) }
    }
}

#[derive(Debug, Clone, Copy)]
enum Redir {
    Read,
    Write,
    ReadWrite,
    DupIn,
    DupOut,
    HereDoc,
    HereString,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argvs(src: &str) -> Vec<Vec<String>> {
        let p = parse(src.as_bytes());
        assert!(!p.failed, "{src:?} failed");
        p.segments
            .iter()
            .map(|s| s.words.iter().map(|w| String::from_utf8_lossy(&w.text).into_owned()).collect())
            .collect()
    }

    #[test]
    fn splits_at_every_separator() {
        assert_eq!(argvs("a;b&&c||d|e|&f&g\nh").len(), 8);
        assert_eq!(argvs("a 2>&1 b"), vec![vec!["a", "b"]]);
        assert_eq!(argvs("a &> f").len(), 1);
        assert_eq!(argvs("a >&2").len(), 1);
    }

    #[test]
    fn quotes_and_escapes_are_removed() {
        assert_eq!(argvs(r#"'a b' "c d" e\ f g\\h"#), vec![vec!["a b", "c d", "e f", r"g\h"]]);
        assert_eq!(argvs("a\\\nb"), vec![vec!["ab"]]);
        assert_eq!(argvs(r"'a\'"), vec![vec![r"a\"]]);
    }

    #[test]
    fn blanks_are_space_and_tab_only() {
        assert_eq!(argvs("a\rb\u{a0}c\u{2028}d").len(), 1);
        assert_eq!(argvs("a\r b"), vec![vec!["a\r", "b"]]);
        assert_eq!(argvs("a\tb"), vec![vec!["a", "b"]]);
    }

    #[test]
    fn comments_start_only_at_a_word() {
        assert_eq!(argvs("a#b # c ; d"), vec![vec!["a#b"]]);
        assert_eq!(argvs("# x\nb"), vec![vec!["b"]]);
    }

    #[test]
    fn substitutions_are_parsed_and_flagged() {
        let p = parse(b"echo $(rm -rf /; ls) `id`");
        assert!(!p.failed);
        let names: Vec<_> = p.segments.iter().map(|s| String::from_utf8_lossy(&s.words[0].text).into_owned()).collect();
        assert_eq!(names, ["rm", "ls", "id", "echo"]);
        assert!(p.segments[3].words[1].expansion);
    }

    #[test]
    fn failures() {
        for bad in ["'a", "\"a", "a (b", "a )", "case x in a) b;;", "a;; b", "{ a", "a \\", "echo $(a", "a >", "((a"] {
            assert!(parse(bad.as_bytes()).failed, "{bad:?} should fail");
        }
        // Substitutions recurse and are bounded; groups are not.
        let deep = "$(".repeat(MAX_DEPTH + 1) + &")".repeat(MAX_DEPTH + 1);
        assert!(parse(deep.as_bytes()).failed);
        let groups = "( ".repeat(500) + "a" + &" )".repeat(500);
        assert!(!parse(groups.as_bytes()).failed);
        assert!(parse(b"( a }").failed);
        assert!(parse(b"{ a; )").failed);
        assert!(parse(b"( a ) b").failed);
    }

    #[test]
    fn groups_and_keywords() {
        let p = parse(b"if a; then (b) > f; fi; { c; } 2>&1; foo() { d; }");
        assert!(!p.failed);
        let kinds: Vec<_> = p.segments.iter().map(|s| s.kind).collect();
        use SegKind::*;
        assert_eq!(kinds, [Keyword, Simple, Keyword, Simple, GroupTail, Keyword, Simple, GroupTail, Keyword, Simple]);
        assert!(p.segments[4].writes);
        assert!(!p.segments[7].writes);
    }

    #[test]
    fn assignments() {
        let p = parse(b"A=1 B+=x C='y z' cmd D=2");
        assert_eq!(p.segments[0].assignments, 3);
        let p = parse(b"'A'=1 cmd");
        assert_eq!(p.segments[0].assignments, 0);
    }
}
