//! A direct reader for a proposal's JSON text, tried before serde's.
//!
//! Through serde, a proposal's text costs several times what its bytes
//! need: every field passes through a visitor, every key of `parameters`
//! is allocated twice over, and `verify`'s unknown-field tracking
//! (`serde_ignored`) wraps every value of the document. This reader walks
//! the text once and builds the `ActionProposal` directly.
//!
//! It is an accelerator, never a second definition of the format:
//! - It reads the proposal's skeleton (the top object, the `actions` list,
//!   each action's keys) and the common fields (`id`, `type`, `tool`, the
//!   three objects, the lists of strings, `preconditions`, the three
//!   enums, `idempotent`, `max_retries`, `timeout_ms`, an empty
//!   `assumptions`) itself, in their plain shapes: a string, an integer of
//!   digits, `true`, `false`, `null`.
//! - Every other value (a negative or fractional number, a nested array or
//!   object inside `parameters`, `compensation`, `assumptions`,
//!   `timestamp`, `context`, ...) is cut out of the text and handed to
//!   serde with that field's own `Deserialize`, so it means exactly what it
//!   means through serde; so is a string with an escape, to be unescaped.
//! - On anything it does not expect (a repeated field, a missing `type`,
//!   a syntax error, a value serde refuses, nesting deeper than
//!   [`MAX_DEPTH`], a key with an escape) it gives up, and the caller
//!   parses the whole text with serde, which produces the result or the
//!   error with its path.
//!
//! So a proposal it returns is the one serde returns for the same text,
//! with the same unknown fields (the tests below check that on generated
//! proposals, whole and edited, and on every shape it gives up on).

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::object::{Object, SCAN_MAX};
use super::precondition::{Operator, Precondition};
use super::proposal::{Action, ActionProposal, ActionType};
use super::unknown::{Seg, segments};

/// Nesting (objects and arrays) this reader hands to serde as one value at
/// most. serde_json refuses a document nested more than 128 deep; a value
/// cut out of the text starts again from depth 0, so this keeps well under
/// what the whole document could reach at that point.
const MAX_DEPTH: usize = 64;

/// Reads `text` as a proposal, or `None` when serde must (see the module
/// docs). `unknown`, when given, receives the path of every field no part
/// of the IR knows, in document order, as `serde_ignored` reports them.
///
/// `kept`: the proposal is kept after the call (run: its events render
/// from it), so a long `actions` list is read in chunks into one list of
/// exactly its length and a short one fitted; otherwise (a pure function's
/// proposal, dropped when it answers) the list is read in place into one
/// list of the estimated size, with no copy.
pub(super) fn parse(text: &str, unknown: Option<&mut Vec<Vec<Seg>>>, kept: bool) -> Option<ActionProposal> {
    let mut r = Reader { s: text, b: text.as_bytes(), i: 0, unknown, entries: Vec::new(), kept };
    let p = r.proposal()?;
    r.ws();
    (r.i == r.b.len()).then_some(p)
}

/// The high bit of the lowest byte of `x` (little-endian, so the first in
/// the text) that is `"`, `\\` or below 0x20 is set, and no bit below it;
/// higher bytes may be flagged falsely (the borrow of the subtraction),
/// which is why only the lowest flag is read. Zero when there is none.
const fn special_bytes(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let quote = x ^ (ONES * b'"' as u64);
    let backslash = x ^ (ONES * b'\\' as u64);
    let zero_quote = quote.wrapping_sub(ONES) & !quote;
    let zero_backslash = backslash.wrapping_sub(ONES) & !backslash;
    let control = x.wrapping_sub(ONES * 0x20) & !x;
    (zero_quote | zero_backslash | control) & HIGH
}

/// Where the first quote, backslash or control byte at or after `j` is (the
/// end of the text when there is none), eight bytes at a time.
#[inline]
pub(super) fn scan(b: &[u8], mut j: usize) -> usize {
    while let Some(chunk) = b.get(j..j + 8).and_then(|c| <[u8; 8]>::try_from(c).ok()) {
        let special = special_bytes(u64::from_le_bytes(chunk));
        if special != 0 {
            return j + (special.trailing_zeros() / 8) as usize;
        }
        j += 8;
    }
    while let Some(&c) = b.get(j) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        j += 1;
    }
    j
}

struct Reader<'a, 'u> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    unknown: Option<&'u mut Vec<Vec<Seg>>>,
    /// Where [`Reader::object`] gathers an object's entries before moving
    /// them into a list of exactly their number (a proposal's objects are
    /// kept as long as its events are: no spare slots).
    entries: Vec<(String, Value)>,
    /// The proposal outlives the call ([`parse`]).
    kept: bool,
}

/// Actions read into one allocation before the list is read in chunks
/// ([`Reader::actions`]): 1,024 actions are about 400 KB.
const ACTION_CHUNK: usize = 1024;

/// The wire names of [`Action`]'s fields, in the order of the bit that
/// marks each as seen.
const ACTION_FIELDS: [&str; 19] = [
    "id",
    "type",
    "tool",
    "parameters",
    "preconditions",
    "expected_effects",
    "state_dependencies",
    "dependencies",
    "read_set",
    "write_set",
    "assumptions",
    "invocation_mode",
    "reversibility",
    "compensation",
    "idempotent",
    "max_retries",
    "failure_behavior",
    "timeout_ms",
    "metadata",
];

/// The place of `key` in [`ACTION_FIELDS`].
fn action_field(key: &str) -> Option<usize> {
    Some(match key {
        "id" => 0,
        "type" => 1,
        "tool" => 2,
        "parameters" => 3,
        "preconditions" => 4,
        "expected_effects" => 5,
        "state_dependencies" => 6,
        "dependencies" => 7,
        "read_set" => 8,
        "write_set" => 9,
        "assumptions" => 10,
        "invocation_mode" => 11,
        "reversibility" => 12,
        "compensation" => 13,
        "idempotent" => 14,
        "max_retries" => 15,
        "failure_behavior" => 16,
        "timeout_ms" => 17,
        "metadata" => 18,
        _ => return None,
    })
}

impl<'a> Reader<'a, '_> {
    #[inline]
    fn ws(&mut self) {
        // Every byte above the space is not whitespace: one comparison for
        // the common case (the next token follows at once).
        while let Some(&c) = self.b.get(self.i)
            && c <= b' '
            && matches!(c, b' ' | b'\n' | b'\r' | b'\t')
        {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// After a member or element: `true` on `,`, `false` on `close`.
    fn next(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.i += 1;
                Some(true)
            }
            c if c == close => {
                self.i += 1;
                Some(false)
            }
            _ => None,
        }
    }

    /// Where the string starting at `self.i` (its opening quote) ends (one
    /// past its closing quote), and whether it has an escape.
    fn string_end(&self) -> Option<(usize, bool)> {
        let mut j = self.i + 1;
        let mut escaped = false;
        loop {
            j = scan(self.b, j);
            match *self.b.get(j)? {
                b'"' => return Some((j + 1, escaped)),
                b'\\' => {
                    escaped = true;
                    j += 2;
                }
                _ => return None, // a control byte
            }
        }
    }

    /// A string with no escape, borrowed; `None` (and `self.i` anywhere)
    /// when the text here is not one.
    #[inline]
    fn plain_str(&mut self) -> Option<&'a str> {
        self.ws();
        if self.b.get(self.i) != Some(&b'"') {
            return None;
        }
        let start = self.i + 1;
        let end = scan(self.b, start);
        if self.b.get(end) != Some(&b'"') {
            return None;
        }
        self.i = end + 1;
        self.s.get(start..end)
    }

    /// A string: borrowed when it has no escape, else unescaped by serde.
    #[inline]
    fn str(&mut self) -> Option<Cow<'a, str>> {
        let at = self.i;
        if let Some(s) = self.plain_str() {
            return Some(Cow::Borrowed(s));
        }
        self.i = at;
        self.escaped_str()
    }

    #[cold]
    fn escaped_str(&mut self) -> Option<Cow<'a, str>> {
        if self.peek()? != b'"' {
            return None;
        }
        let (end, _) = self.string_end()?;
        let raw = &self.s[self.i..end];
        self.i = end;
        serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
    }

    /// A member's key and its colon. A key with an escape is left to serde
    /// (`None`), as rare as it is.
    #[inline]
    fn key(&mut self) -> Option<&'a str> {
        let k = self.plain_str()?;
        self.ws();
        if self.b.get(self.i) != Some(&b':') {
            return None;
        }
        self.i += 1;
        Some(k)
    }

    /// The text of the value starting here, which the reader moves past
    /// (not checked beyond its extent: serde reads it).
    fn extent(&mut self) -> Option<&'a str> {
        let start = self.i;
        match self.peek()? {
            b'"' => self.i = self.string_end()?.0,
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.b.get(self.i)? {
                        b'"' => {
                            self.i = self.string_end()?.0;
                            continue;
                        }
                        b'{' | b'[' => {
                            depth += 1;
                            if depth > MAX_DEPTH {
                                return None;
                            }
                        }
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while let Some(&c) = self.b.get(self.i) {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.i += 1;
                }
            }
        }
        Some(&self.s[start..self.i])
    }

    /// The value here read by serde as a `T`. When unknown fields are being
    /// reported, the ones inside it are added under `at`.
    fn serde<T: DeserializeOwned>(&mut self, at: impl FnOnce() -> Vec<Seg>) -> Option<T> {
        let text = self.extent()?;
        let mut de = serde_json::Deserializer::from_str(text);
        let v = match self.unknown.as_deref_mut() {
            Some(unknown) => {
                let mut found = Vec::new();
                let v = serde_ignored::deserialize(&mut de, |p| found.push(segments(&p))).ok()?;
                if !found.is_empty() {
                    let prefix = at();
                    unknown.extend(found.into_iter().map(|rest| prefix.iter().cloned().chain(rest).collect()));
                }
                v
            }
            None => T::deserialize(&mut de).ok()?,
        };
        de.end().ok()?;
        Some(v)
    }

    /// The value here read by a `deserialize_with` function (for fields
    /// that cannot hold an unknown field).
    fn serde_with<T>(
        &mut self,
        f: impl FnOnce(&mut serde_json::Deserializer<serde_json::de::StrRead<'a>>) -> Result<T, serde_json::Error>,
    ) -> Option<T> {
        let text = self.extent()?;
        let mut de = serde_json::Deserializer::from_str(text);
        let v = f(&mut de).ok()?;
        de.end().ok()?;
        Some(v)
    }

    /// A field no part of the IR knows: reported, and its value checked as
    /// serde's `IgnoredAny` would.
    fn unknown(&mut self, at: impl FnOnce() -> Vec<Seg>) -> Option<()> {
        if let Some(unknown) = self.unknown.as_deref_mut() {
            unknown.push(at());
        }
        self.serde_with(|de| serde::de::IgnoredAny::deserialize(de)).map(drop)
    }

    /// Digits with no sign, fraction or exponent, as a `u64`; `None` for
    /// any other number (which serde reads).
    fn plain_uint(&mut self) -> Option<u64> {
        let (b, start) = (self.b, self.i);
        let (mut j, mut n) = (start, 0u64);
        while let Some(d) = b.get(j).map(|c| c.wrapping_sub(b'0')).filter(|d| *d <= 9) {
            // At most 19 digits are kept (below), which cannot overflow.
            n = n.wrapping_mul(10).wrapping_add(u64::from(d));
            j += 1;
        }
        let digits = j - start;
        if digits == 0
            || digits > 19
            || (digits > 1 && b[start] == b'0')
            || matches!(b.get(j), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        self.i = j;
        Some(n)
    }

    /// `true`, `false` or `null` when the text here is that word.
    fn word(&mut self, w: &str) -> bool {
        let hit = self.b[self.i..].starts_with(w.as_bytes());
        if hit {
            self.i += w.len();
        }
        hit
    }

    /// Any JSON value, as `StrictValue` reads it (no repeated key in any
    /// object).
    fn value(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => return self.str().map(|s| Value::String(s.into_owned())),
            b'0'..=b'9' => {
                let at = self.i;
                if let Some(n) = self.plain_uint() {
                    return Some(Value::from(n));
                }
                self.i = at;
            }
            b't' if self.word("true") => return Some(Value::Bool(true)),
            b'f' if self.word("false") => return Some(Value::Bool(false)),
            b'n' if self.word("null") => return Some(Value::Null),
            _ => {}
        }
        self.serde_with(|de| super::strict::strict_value(de))
    }

    /// The members of the object starting here (at its `{`): `member` gets
    /// each key, with the reader at its value, and reads the value.
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let k = self.key()?;
            member(self, k)?;
            if !self.next(b'}')? {
                return Some(());
            }
        }
    }

    /// An object as [`Object`]'s `Deserialize` reads it.
    fn object(&mut self) -> Option<Object> {
        if self.peek()? != b'{' {
            return self.serde(Vec::new);
        }
        // Values are read by `value`, never by this function, so one
        // gathering list serves every object of the text.
        let mut entries = std::mem::take(&mut self.entries);
        entries.clear();
        self.members(|r, k| {
            if entries.len() < SCAN_MAX && entries.iter().any(|(e, _)| e == k) {
                return None;
            }
            let v = r.value()?;
            entries.push((k.to_string(), v));
            Some(())
        })?;
        let mut exact = Vec::with_capacity(entries.len());
        exact.append(&mut entries);
        self.entries = entries;
        let o = Object::from_unique_entries(exact);
        (o.len() <= SCAN_MAX || o.first_repeat().is_none()).then_some(o)
    }

    /// A list of strings (`state_dependencies`, `dependencies`, ...).
    fn strings(&mut self) -> Option<Vec<String>> {
        if self.peek()? != b'[' {
            return self.serde(Vec::new);
        }
        self.items(|r, _| r.str().map(Cow::into_owned))
    }

    /// The array starting here (at its `[`), each element read by `item`,
    /// given the element's index.
    fn items<T>(&mut self, mut item: impl FnMut(&mut Self, usize) -> Option<T>) -> Option<Vec<T>> {
        self.i += 1;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(Vec::new());
        }
        // The capacity a first push would give, without its slow path.
        let mut out = Vec::with_capacity(4);
        loop {
            let v = item(self, out.len())?;
            out.push(v);
            if !self.next(b']')? {
                return Some(out);
            }
        }
    }

    fn string(&mut self) -> Option<String> {
        if self.peek()? == b'"' { self.str().map(Cow::into_owned) } else { self.serde(Vec::new) }
    }

    fn uint<T: TryFrom<u64> + DeserializeOwned>(&mut self) -> Option<T> {
        if let Some(b'0'..=b'9') = self.peek() {
            let at = self.i;
            if let Some(n) = self.plain_uint().and_then(|n| T::try_from(n).ok()) {
                return Some(n);
            }
            self.i = at;
        }
        self.serde(Vec::new)
    }

    /// An enum written as one of `known`'s spellings (`spelling`); serde
    /// reads any other value, and refuses what is no variant.
    fn spelled<T: Copy + DeserializeOwned>(
        &mut self,
        known: &[T],
        spelling: fn(T) -> &'static str,
        at: impl FnOnce() -> Vec<Seg>,
    ) -> Option<T> {
        let start = self.i;
        if let Some(s) = self.plain_str()
            && let Some(&v) = known.iter().find(|v| spelling(**v) == s)
        {
            return Some(v);
        }
        self.i = start;
        self.serde(at)
    }

    /// `[]` here (read, `true`), or anything else (not read, `false`).
    fn empty_list(&mut self) -> bool {
        let start = self.i;
        if self.peek() == Some(b'[') {
            self.i += 1;
            if self.peek() == Some(b']') {
                self.i += 1;
                return true;
            }
        }
        self.i = start;
        false
    }

    /// An action's `preconditions`.
    fn preconditions(&mut self, index: usize) -> Option<Vec<Precondition>> {
        let at = || vec![Seg::Key("actions".into()), Seg::Index(index), Seg::Key("preconditions".into())];
        if self.peek()? != b'[' {
            return self.serde(at);
        }
        self.items(|r, item| {
            let at = || {
                let mut segs = at();
                segs.push(Seg::Index(item));
                segs
            };
            if r.peek()? == b'{' { r.precondition(at) } else { r.serde(at) }
        })
    }

    /// One precondition's object; `at` is its path.
    fn precondition(&mut self, at: impl Fn() -> Vec<Seg>) -> Option<Precondition> {
        let (mut key, mut operator, mut value, mut description) = (None, None, None, None);
        self.members(|r, k| {
            match k {
                "key" if key.is_none() => key = Some(r.string()?),
                "operator" if operator.is_none() => {
                    operator = Some(match r.peek()? {
                        b'"' => Operator::parse(&r.str()?),
                        _ => r.serde(Vec::new)?,
                    });
                }
                "value" if value.is_none() => value = Some(r.value()?),
                "description" if description.is_none() => description = Some(r.string()?),
                "key" | "operator" | "value" | "description" => return None, // repeated
                other => {
                    let other = other.to_string();
                    r.unknown(|| {
                        let mut segs = at();
                        segs.push(Seg::Key(other));
                        segs
                    })?;
                }
            }
            Some(())
        })?;
        Some(Precondition {
            key: key?, // required
            operator: operator.unwrap_or_default(),
            value: value.unwrap_or_default(),
            description: description.unwrap_or_default(),
        })
    }

    fn proposal(&mut self) -> Option<ActionProposal> {
        let (mut id, mut source, mut actions, mut timestamp, mut context) = (None, None, None, None, None);
        self.members(|r, k| {
            match k {
                "id" if id.is_none() => id = Some(r.string()?),
                "source" if source.is_none() => source = Some(r.string()?),
                "actions" if actions.is_none() => actions = Some(r.actions()?),
                "timestamp" if timestamp.is_none() => {
                    timestamp = Some(r.serde_with(|de| chrono::DateTime::<chrono::Utc>::deserialize(de))?);
                }
                "context" if context.is_none() => {
                    context = Some(r.serde_with(|de| super::strict::strict_map(de))?);
                }
                "id" | "source" | "actions" | "timestamp" | "context" => return None, // repeated
                other => {
                    let other = other.to_string();
                    r.unknown(|| vec![Seg::Key(other)])?;
                }
            }
            Some(())
        })?;
        Some(ActionProposal {
            id: id.unwrap_or_else(super::short_id),
            source: source.unwrap_or_else(super::proposal::default_source),
            actions: actions?, // required
            timestamp: timestamp.unwrap_or_else(chrono::Utc::now),
            context: context.unwrap_or_else(Map::new),
        })
    }

    fn actions(&mut self) -> Option<Vec<Action>> {
        if self.peek()? != b'[' {
            return None;
        }
        self.i += 1;
        // A proposal not kept is read in place into the estimated size
        // (one list, no copy): its memory is given back when the call ends.
        // A kept one is kept as long as its events are: a list of up to
        // ACTION_CHUNK actions is read into one allocation of the estimated
        // size (at most that many slots), fitted at the end when the
        // estimate was generous; a longer one is read in chunks of
        // ACTION_CHUNK and moved into one list of exactly its length, where
        // a list sized from the estimate (two to four slots an action)
        // would be megabytes of fresh memory every run, and chunks of one
        // size are reused run after run.
        let hint = super::parse::take_actions_capacity();
        let chunk = if self.kept { ACTION_CHUNK } else { usize::MAX };
        let mut out = Vec::with_capacity(hint.min(chunk));
        let mut full: Vec<Vec<Action>> = Vec::new();
        if self.peek()? == b']' {
            self.i += 1;
            if self.kept {
                super::parse::fit_actions(&mut out);
            }
            return Some(out);
        }
        let mut index = 0;
        loop {
            if out.len() == chunk {
                full.push(std::mem::replace(&mut out, Vec::with_capacity(ACTION_CHUNK)));
            }
            // Read into its place in the list rather than moved there.
            out.push(Action::blank(ActionType::ToolCall));
            let last = out.len() - 1;
            self.action(index, &mut out[last])?;
            index += 1;
            if !self.next(b']')? {
                break;
            }
        }
        if full.is_empty() {
            if self.kept {
                super::parse::fit_actions(&mut out);
            }
            return Some(out);
        }
        let mut all = Vec::with_capacity(index);
        for mut chunk in full {
            all.append(&mut chunk);
        }
        all.append(&mut out);
        Some(all)
    }

    /// An action's object, read into `a` (a blank one: `type` is required, and
    /// `id` is drawn afterwards when the text gives none).
    fn action(&mut self, index: usize, a: &mut Action) -> Option<()> {
        let mut seen = 0u32;
        self.members(|r, k| {
            let Some(field) = action_field(k) else {
                let k = k.to_string();
                return r.unknown(|| vec![Seg::Key("actions".into()), Seg::Index(index), Seg::Key(k)]);
            };
            if seen & (1 << field) != 0 {
                return None; // serde: duplicate field
            }
            seen |= 1 << field;
            r.action_member(index, field, a)
        })?;
        if seen & 0b10 == 0 {
            return None; // `type` is required
        }
        if seen & 1 == 0 {
            a.id = super::short_id();
        }
        Some(())
    }

    /// The value of field `field` (its place in [`ACTION_FIELDS`]) of action
    /// `index`, read into `a`.
    fn action_member(&mut self, index: usize, field: usize, a: &mut Action) -> Option<()> {
        let at = || vec![Seg::Key("actions".into()), Seg::Index(index), Seg::Key(ACTION_FIELDS[field].into())];
        match field {
            0 => a.id = self.string()?,
            1 => {
                use ActionType as T;
                a.action_type =
                    self.spelled(&[T::ToolCall, T::StateWrite, T::StateRead, T::Assertion], T::as_str, at)?;
            }
            2 => {
                a.tool = match self.peek()? {
                    b'"' => Some(self.str()?.into_owned()),
                    b'n' if self.word("null") => None,
                    _ => self.serde(at)?,
                }
            }
            3 => a.parameters = self.object()?,
            4 => a.preconditions = self.preconditions(index)?,
            5 => a.expected_effects = self.object()?,
            6 => a.state_dependencies = self.strings()?,
            7 => a.dependencies = self.strings()?,
            8 => a.read_set = self.strings()?,
            9 => a.write_set = self.strings()?,
            10 => {
                a.assumptions = match self.empty_list() {
                    true => Vec::new(),
                    false => self.serde(at)?,
                }
            }
            11 => {
                use super::ToolInvocationMode as M;
                a.invocation_mode = self.spelled(&[M::OneShot, M::Streaming, M::LongRunning], M::as_str, at)?;
            }
            12 => {
                use super::Reversibility as R;
                a.reversibility = self.spelled(&[R::Irreversible, R::Reversible, R::Compensable], R::as_str, at)?;
            }
            13 => a.compensation = self.serde(at)?,
            14 => {
                a.idempotent = match self.peek()? {
                    b't' if self.word("true") => true,
                    b'f' if self.word("false") => false,
                    _ => self.serde(at)?,
                }
            }
            15 => a.max_retries = self.uint()?,
            16 => {
                use super::FailureBehavior as F;
                a.failure_behavior = self.spelled(&[F::Abort, F::Retry, F::Skip], F::as_str, at)?;
            }
            17 => {
                a.timeout_ms = match self.peek()? {
                    b'n' if self.word("null") => None,
                    _ => Some(self.uint()?),
                }
            }
            _ => a.metadata = self.object()?,
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::ir::parse::{parse_proposal_serde, validate};
    use crate::ir::unknown::parse_proposal_reporting_serde;
    use crate::ir::{UnknownField, parse_proposal, parse_proposal_reporting};

    /// Gives `q` what the text left to chance in both (an id drawn for a
    /// missing one, the time of parsing for a missing timestamp) from `p`.
    fn align(p: &ActionProposal, q: &mut ActionProposal) {
        let drawn = |s: &str| s.len() == 12 && s.bytes().all(|b| b.is_ascii_hexdigit());
        if drawn(&p.id) && drawn(&q.id) {
            q.id.clone_from(&p.id);
        }
        let now = chrono::Utc::now();
        if (now - p.timestamp).num_seconds().abs() < 600 && (now - q.timestamp).num_seconds().abs() < 600 {
            q.timestamp = p.timestamp;
        }
        for (a, b) in p.actions.iter().zip(q.actions.iter_mut()) {
            if drawn(&a.id) && drawn(&b.id) {
                b.id.clone_from(&a.id);
            }
        }
    }

    /// [`align`] for the action ids unknown fields name.
    fn align_unknown(u: &[UnknownField], v: &mut [UnknownField]) {
        let drawn =
            |s: &Option<String>| s.as_ref().is_some_and(|s| s.len() == 12 && s.bytes().all(|b| b.is_ascii_hexdigit()));
        for (a, b) in u.iter().zip(v.iter_mut()) {
            if drawn(&a.action_id) && drawn(&b.action_id) {
                b.action_id.clone_from(&a.action_id);
            }
        }
    }

    /// The public parsers (direct reader first) against serde alone: the
    /// same proposal, the same unknown fields, or the same error.
    fn same_as_serde(text: &str) -> Result<(), TestCaseError> {
        match (parse_proposal(text), parse_proposal_serde(text)) {
            (Ok(p), Ok(mut q)) => {
                align(&p, &mut q);
                prop_assert_eq!(p, q, "{}", text);
            }
            (Err(e), Err(f)) => prop_assert_eq!(e.to_string(), f.to_string()),
            (a, b) => prop_assert!(false, "{text}: direct {:?}, serde {:?}", a.err(), b.err()),
        }
        match (parse_proposal_reporting(text), parse_proposal_reporting_serde(text)) {
            (Ok((p, u)), Ok((mut q, mut v))) => {
                align(&p, &mut q);
                align_unknown(&u, &mut v);
                prop_assert_eq!(p, q, "{}", text);
                prop_assert_eq!(u, v, "{}", text);
            }
            (Err(e), Err(f)) => prop_assert_eq!(e.to_string(), f.to_string()),
            (a, b) => prop_assert!(false, "{text}: direct {:?}, serde {:?}", a.err(), b.err()),
        }
        Ok(())
    }

    /// The direct reader took `text` (did not give up) and agrees with serde.
    fn taken(text: &str) -> Vec<UnknownField> {
        let mut unknown = Vec::new();
        let p = parse(text, Some(&mut unknown), true).unwrap_or_else(|| panic!("the direct reader gave up on {text}"));
        let p = validate(p).unwrap();
        let (mut q, mut found) = parse_proposal_reporting_serde(text).unwrap();
        align(&p, &mut q);
        assert_eq!(p, q, "{text}");
        let (_, direct) = parse_proposal_reporting(text).unwrap();
        align_unknown(&direct, &mut found);
        assert_eq!(direct, found, "{text}");
        found
    }

    fn given_up(text: &str) {
        assert!(parse(text, None, true).is_none(), "the direct reader took {text}");
        same_as_serde(text).unwrap();
    }

    #[test]
    fn every_field_in_every_plain_shape_is_read_directly() {
        let full = json!({
            "id": "p1", "source": "bot", "timestamp": "2020-01-02T03:04:05Z",
            "context": {"a": [1, {"b": null}], "c": "d"},
            "actions": [{
                "id": "a", "type": "tool_call", "tool": "t",
                "parameters": {"s": "x", "n": 12, "neg": -3, "f": 1.5, "e": 1e300, "big": 123456789012345678901u128 as f64,
                               "t": true, "no": false, "z": null, "list": [1, "2", [3]], "obj": {"k": {"k": 1}}},
                "preconditions": [{"key": "k", "operator": "gt", "value": 1, "description": "d"},
                                  {"key": "j", "operator": "exists"}, {"operator": "nope", "value": [{"a": 1}], "key": "k"},
                                  ["k", "lte", 2, "as a list"]],
                "expected_effects": {"k": 1},
                "state_dependencies": ["a", "b"], "dependencies": ["x"], "read_set": [], "write_set": ["w"],
                "assumptions": [{"key": "k", "expected_value": null, "read_version": 2}],
                "invocation_mode": "streaming", "reversibility": "compensable",
                "compensation": {"type": "tool", "tool": "undo", "parameters": {"q": 1}},
                "idempotent": true, "max_retries": 4294967295u64, "failure_behavior": "skip",
                "timeout_ms": 18446744073709551615u64, "metadata": {"m": [1]}
            }, {
                "type": "state_write", "tool": null, "timeout_ms": null, "idempotent": false, "max_retries": 0,
                "compensation": {"type": "action_ref", "action_id": "a"}, "parameters": {}
            }, {"id": "r", "type": "state_read"}, {"id": "s", "type": "assertion", "parameters": {"key": "k"}}]
        });
        assert_eq!(taken(&full.to_string()), []);
        assert_eq!(taken(&serde_json::to_string_pretty(&full).unwrap()), []);
        // Escapes, in keys and values, and text outside ASCII.
        let text = r#" { "actions" : [ { "id" : "a\"b\\c\n\u00e9" , "type" : "tool\u005fcall" , "tool" : "t\u2028" ,
            "parameters" : { "ky" : "é\ud83d\ude00" , "n" : 0 , "é" : "\u0000" } } ] } "#;
        assert_eq!(taken(text), []);
        // A key with an escape is left to serde, which reads it as the key.
        given_up(r#"{"actions":[{"i\u0064":"a","type":"assertion","parameters":{"k\ty":1}}]}"#);
        assert_eq!(parse_proposal(r#"{"actions":[{"i\u0064":"a","type":"assertion"}]}"#).unwrap().actions[0].id, "a");
        assert_eq!(taken(r#"{"actions":[]}"#), []);
        assert_eq!(taken(r#"{"actions":[{"type":"assertion"}],"context":{}}"#), []);
    }

    #[test]
    fn unknown_fields_are_reported_as_serde_reports_them() {
        let text = r#"{"zz": {"deep": [1]}, "actions": [
            {"type": "tool_call", "tool": "t", "dependecies": ["a"], "dependecies": 2,
             "preconditions": [{"key": "k", "operater": "eq"}, {"key": "j", "x": 1}],
             "assumptions": [{"key": "k", "expected": 1}],
             "compensation": {"type": "tool", "tool": "u", "extra": 1},
             "parameters": {"anything": 1}}],
            "contxt": null}"#;
        let found = taken(text);
        let paths: Vec<&str> = found.iter().map(|u| u.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "zz",
                "actions[0].dependecies",
                "actions[0].dependecies",
                "actions[0].preconditions[0].operater",
                "actions[0].preconditions[1].x",
                "actions[0].assumptions[0].expected",
                "contxt"
            ]
        );
    }

    #[test]
    fn it_gives_up_where_serde_decides() {
        for text in [
            // Repeated fields, at each level.
            r#"{"actions":[],"actions":[]}"#,
            r#"{"id":"a","id":"b","actions":[]}"#,
            r#"{"actions":[{"type":"assertion","type":"assertion"}]}"#,
            r#"{"actions":[{"type":"assertion","id":"a","id":"a"}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":{"k":1,"k":1}}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":{"k":{"j":1,"j":2}}}]}"#,
            // Missing what serde requires, or shapes it refuses.
            r#"{}"#,
            r#"{"actions":[{}]}"#,
            r#"{"actions":[{"id":"a"}]}"#,
            r#"{"actions":[{"type":"bogus"}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":null}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":[1]}]}"#,
            r#"{"actions":[{"type":"assertion","state_dependencies":null}]}"#,
            r#"{"actions":[{"type":"assertion","state_dependencies":[1]}]}"#,
            r#"{"actions":[{"type":"assertion","max_retries":4294967296}]}"#,
            r#"{"actions":[{"type":"assertion","max_retries":-1}]}"#,
            r#"{"actions":[{"type":"assertion","max_retries":3.0}]}"#,
            r#"{"actions":[{"type":"assertion","timeout_ms":"1"}]}"#,
            r#"{"actions":[{"type":"assertion","idempotent":1}]}"#,
            r#"{"actions":[{"type":"assertion","tool":1}]}"#,
            r#"{"actions":[{"type":"assertion","failure_behavior":"never"}]}"#,
            r#"{"actions":[{"type":"assertion","id":"\ud800"}]}"#,
            r#"{"actions":[{"type":"assertion","id":"tab	inside"}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":{"n":01}}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":{"n":1.}}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":{"n":nul}}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":{"n":truex}}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":{"n":[1}}]}"#,
            r#"{"actions":[{"type":"assertion","parameters":{"n":1 2}}]}"#,
            r#"{"actions":[{"type":"assertion"},]}"#,
            r#"{"actions":[{"type":"assertion",}]}"#,
            r#"{"actions":[],}"#,
            r#"{"actions":[]} x"#,
            r#"{"actions":[]"#,
            r#"{"actions":[{"type":"assertion","zz":[}]}"#,
            r#"{"actions":[{"type":"assertion","timestamp":1}],"timestamp":"yesterday"}"#,
            r#"{"actions":[],"context":[]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":[{}]}]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":[{"operator":"eq"}]}]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":[{"key":"k","key":"k"}]}]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":[{"key":"k","value":1,"value":1}]}]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":[{"key":1}]}]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":[{"key":"k","operator":1}]}]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":[{"key":"k","value":{"a":1,"a":2}}]}]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":{"key":"k"}}]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":[1]}]}"#,
            r#"{"actions":[{"type":"assertion","preconditions":[{"key":"k","operator":null}]}]}"#,
            r#"{"actions":[],"context":{"a":1,"a":1}}"#,
            // A whole proposal as an array is serde's (a struct from a sequence).
            r#"[[]]"#,
        ] {
            given_up(text);
        }
        // Read directly, refused after (a tool call names its tool).
        assert!(parse(r#"{"actions":[{"type":"tool_call"}]}"#, None, true).is_some());
        same_as_serde(r#"{"actions":[{"type":"tool_call"}]}"#).unwrap();
        // Nesting beyond MAX_DEPTH inside a value is left to serde (and its limit).
        for depth in [MAX_DEPTH, MAX_DEPTH + 1, 200] {
            let deep = format!(
                r#"{{"actions":[{{"type":"assertion","parameters":{{"k":{}1{}}}}}]}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            same_as_serde(&deep).unwrap();
            if depth > MAX_DEPTH {
                assert!(parse(&deep, None, true).is_none());
            }
        }
    }

    /// A list longer than a chunk is read in chunks and moved into one list
    /// of exactly its length, in order, with every unknown field's path
    /// naming its action's index past the first chunk.
    #[test]
    fn a_long_list_is_read_in_chunks_into_one_exact_list() {
        for n in [ACTION_CHUNK - 1, ACTION_CHUNK, ACTION_CHUNK + 1, 2 * ACTION_CHUNK + 5] {
            let actions: Vec<String> = (0..n)
                .map(|i| match i % 3 {
                    0 => format!(r#"{{"id":"a{i}","type":"state_write","parameters":{{"key":"k{i}","value":{i}}}}}"#),
                    1 => format!(r#"{{"type":"tool_call","tool":"t","expected_effects":{{"e{i}":[{i}]}},"zz{i}":1}}"#),
                    _ => {
                        format!(r#"{{"id":"a{i}","type":"state_read","parameters":{{"key":"k{i}"}},"metadata":{{}}}}"#)
                    }
                })
                .collect();
            let text = format!(r#"{{"actions":[{}]}}"#, actions.join(","));
            let found = taken(&text);
            assert_eq!(found.len(), n / 3 + usize::from(n % 3 == 2), "{n}");
            let last = &found.last().unwrap().path;
            let i = (n - 1) - (n - 1 + 2) % 3;
            assert_eq!(*last, format!("actions[{i}].zz{i}"), "{n}");
            let p = parse_proposal(&text).unwrap();
            assert_eq!(p.actions.len(), n);
            if n > ACTION_CHUNK {
                assert_eq!(p.actions.capacity(), n);
            } else {
                assert!(p.actions.capacity() - n <= n / 8, "{n}: {}", p.actions.capacity());
            }
            assert!(p.actions.iter().enumerate().all(|(j, a)| j % 3 == 1 || a.id == format!("a{j}")));
        }
    }

    /// The fields this reader knows are the ones serde's derived readers
    /// know, so a field added to the IR cannot be taken here for an unknown
    /// one (its value dropped, where serde would read it).
    #[test]
    fn the_fields_read_are_the_structs_fields() {
        use crate::ir::unknown::fields_of;
        assert_eq!(ACTION_FIELDS.as_slice(), fields_of::<Action>());
        for (i, f) in ACTION_FIELDS.iter().enumerate() {
            assert_eq!(action_field(f), Some(i), "{f}");
        }
        assert_eq!(fields_of::<ActionProposal>(), ["id", "source", "actions", "timestamp", "context"]);
        assert_eq!(fields_of::<Precondition>(), ["key", "operator", "value", "description"]);
    }

    #[test]
    fn special_bytes_finds_the_first() {
        for at in 0..8 {
            for b in [b'"', b'\\', 0u8, 0x1f] {
                let mut chunk = *b"abcdefgh";
                chunk[at] = b;
                // Later bytes that are also special, or that borrow.
                for later in at + 1..8 {
                    chunk[later] = [b'"', 0x01, 0x21, 0xff][later % 4];
                }
                let found = special_bytes(u64::from_le_bytes(chunk));
                assert_eq!(found.trailing_zeros() / 8, at as u32, "{chunk:?}");
            }
        }
        assert_eq!(special_bytes(u64::from_le_bytes(*b" ~\x7f\x80\xff!#[")), 0);
    }

    // --- generated texts --------------------------------------------------

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "[a-z0-9]{0,6}".prop_map(Value::String),
            "\\PC{0,4}".prop_map(Value::String),
            "[\"\\\\\u{0}-\u{1f}a]{0,4}".prop_map(Value::String),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..3).prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z_]{1,6}", "\\PC{0,3}", Just("type".to_string()), Just("id".to_string())]
    }

    fn object() -> impl Strategy<Value = Value> {
        prop::collection::vec((key(), value()), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect()))
    }

    fn strings() -> impl Strategy<Value = Value> {
        or_any(prop::collection::vec("[a-z]{0,4}".prop_map(Value::String), 0..3).prop_map(Value::Array))
    }

    fn word(words: &'static [&'static str]) -> impl Strategy<Value = Value> {
        or_any(prop::sample::select(words).prop_map(Value::from))
    }

    /// Values of `s`, and now and then any value at all (mostly of the
    /// wrong type).
    fn or_any(s: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Value> {
        prop_oneof![15 => s, 1 => value()].boxed()
    }

    /// An action as (field, value) pairs in a drawn order: each field
    /// usually with a value of its type, sometimes with any value.
    fn action() -> impl Strategy<Value = Vec<(String, Value)>> {
        let precondition = (
            "[a-z]{1,3}",
            prop::sample::select(&["eq", "exists", "gt", "contains", "nope"][..]),
            value(),
            prop::option::of(("[a-z]{1,4}", value())),
        )
            .prop_map(|(k, op, v, extra)| {
                let mut m = json!({"key": k, "operator": op, "value": v});
                if let Some((ek, ev)) = extra {
                    m[ek] = ev;
                }
                m
            });
        let compensation = prop_oneof![
            (object(), "[a-z]{1,3}").prop_map(|(p, t)| json!({"type": "tool", "tool": t, "parameters": p})),
            "[a-z]{1,3}".prop_map(|a| json!({"type": "action_ref", "action_id": a})),
        ];
        let compensation = or_any(compensation);
        let fields: Vec<BoxedStrategy<(String, Value)>> = vec![
            or_any("[a-z0-9]{1,4}".prop_map(Value::String)).prop_map(|v| ("id".into(), v)).boxed(),
            or_any(prop_oneof![Just(Value::Null), "[a-z]{1,4}".prop_map(Value::String)])
                .prop_map(|v| ("tool".into(), v))
                .boxed(),
            or_any(object()).prop_map(|v| ("parameters".into(), v)).boxed(),
            or_any(prop::collection::vec(precondition, 0..3).prop_map(Value::Array))
                .prop_map(|v| ("preconditions".into(), v))
                .boxed(),
            or_any(object()).prop_map(|v| ("expected_effects".into(), v)).boxed(),
            strings().prop_map(|v| ("state_dependencies".into(), v)).boxed(),
            strings().prop_map(|v| ("dependencies".into(), v)).boxed(),
            strings().prop_map(|v| ("read_set".into(), v)).boxed(),
            strings().prop_map(|v| ("write_set".into(), v)).boxed(),
            word(&["one_shot", "streaming", "long_running"]).prop_map(|v| ("invocation_mode".into(), v)).boxed(),
            word(&["reversible", "compensable", "irreversible"]).prop_map(|v| ("reversibility".into(), v)).boxed(),
            compensation.prop_map(|v| ("compensation".into(), v)).boxed(),
            or_any(any::<bool>().prop_map(Value::Bool)).prop_map(|v| ("idempotent".into(), v)).boxed(),
            or_any(prop_oneof![9 => (0u64..10).prop_map(Value::from), 1 => Just(Value::from(1u64 << 32))])
                .prop_map(|v| ("max_retries".into(), v))
                .boxed(),
            word(&["abort", "retry", "skip"]).prop_map(|v| ("failure_behavior".into(), v)).boxed(),
            or_any(prop_oneof![Just(Value::Null), any::<u64>().prop_map(Value::from)])
                .prop_map(|v| ("timeout_ms".into(), v))
                .boxed(),
            object().prop_map(|v| ("metadata".into(), v)).boxed(),
            ("[a-z_]{1,12}", value()).prop_map(|(k, v)| (k, v)).boxed(),
        ];
        (prop::sample::subsequence((0..fields.len()).collect::<Vec<_>>(), 0..=fields.len()), any::<u64>())
            .prop_flat_map(move |(chosen, _)| {
                let picked: Vec<BoxedStrategy<(String, Value)>> = chosen.iter().map(|&i| fields[i].clone()).collect();
                // `type` is nearly always there, or nothing would be read.
                let ty =
                    word(&["tool_call", "state_write", "state_read", "assertion"]).prop_map(|v| ("type".into(), v));
                (picked, prop::option::weighted(0.95, ty)).prop_flat_map(|(mut fields, ty)| {
                    fields.extend(ty);
                    Just(fields).prop_shuffle()
                })
            })
    }

    /// A proposal's text: its members in a drawn order, written compact or
    /// pretty, with a repeated member now and then.
    fn proposal_text() -> impl Strategy<Value = String> {
        let members = (
            prop::option::of("[a-z0-9]{1,6}"),
            prop::option::of(or_any(Just(json!("2020-01-02T03:04:05Z")))),
            prop::option::of(or_any(object())),
            prop::collection::vec(action(), 0..4),
            prop::option::of(("[a-z_]{1,8}", value())),
        );
        (members, any::<bool>(), any::<prop::sample::Index>(), 0u8..8).prop_map(
            |((id, ts, ctx, actions, extra), pretty, at, repeat)| {
                let render = |pairs: &[(String, Value)]| {
                    let body: Vec<String> = pairs
                        .iter()
                        .map(|(k, v)| {
                            let v = if pretty { serde_json::to_string_pretty(v) } else { serde_json::to_string(v) };
                            format!("{}:{}", Value::from(k.as_str()), v.unwrap())
                        })
                        .collect();
                    format!("{{{}}}", body.join(if pretty { ",\n  " } else { "," }))
                };
                let mut acts: Vec<String> = actions
                    .iter()
                    .map(|pairs| {
                        let mut pairs = pairs.clone();
                        if repeat == 0 && !pairs.is_empty() {
                            let again = pairs[at.index(pairs.len())].clone();
                            pairs.push(again);
                        }
                        render(&pairs)
                    })
                    .collect();
                if repeat == 1 && !acts.is_empty() {
                    acts.push("7".into());
                }
                let mut top: Vec<String> = vec![format!("\"actions\":[{}]", acts.join(", "))];
                if let Some(id) = id {
                    top.push(format!("\"id\":{}", Value::from(id)));
                }
                if let Some(ts) = ts {
                    top.push(format!("\"timestamp\":{ts}"));
                }
                if let Some(ctx) = ctx {
                    top.push(format!("\"context\":{ctx}"));
                }
                if let Some((k, v)) = extra {
                    top.push(format!("{}:{v}", Value::from(k)));
                }
                if repeat == 2 {
                    top.push(top[at.index(top.len())].clone());
                }
                let n = top.len();
                top.rotate_left(at.index(n));
                format!("{{ {} }}", top.join(" ,\n"))
            },
        )
    }

    /// A small edit: delete, insert or repeat some characters.
    fn mutate(text: &str, at: prop::sample::Index, kind: u8, len: usize) -> String {
        let chars: Vec<char> = text.chars().collect();
        let i = at.index(chars.len() + 1);
        let j = (i + len).min(chars.len());
        const INSERTS: [&str; 12] = [",", "}", "]", "{", "[", "\"", ":", " ", "\\", "0", "-", "null"];
        let mut out: String = chars[..i].iter().collect();
        match kind % 3 {
            0 => {}
            1 => {
                out.push_str(INSERTS[len % INSERTS.len()]);
                out.extend(&chars[i..j]);
            }
            _ => {
                let piece: String = chars[i..j].iter().collect();
                out.push_str(&piece);
                out.push_str(&piece);
            }
        }
        out.extend(&chars[j..]);
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Generated proposals, valid and not: the direct reader never
        /// differs from serde in a result, an unknown field or an error.
        #[test]
        fn generated_proposals_read_as_serde_reads_them(text in proposal_text()) {
            same_as_serde(&text)?;
        }

        /// The same after small edits anywhere in the text.
        #[test]
        fn edited_proposals_read_as_serde_reads_them(
            text in proposal_text(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0usize..12), 1..3),
        ) {
            let mut text = text;
            for (at, kind, len) in edits {
                text = mutate(&text, at, kind, len);
            }
            same_as_serde(&text)?;
        }

        /// A proposal written straight to its RFC 8785 text is the canonical
        /// text of its value, and says rightly whether that reads back as it.
        #[test]
        fn generated_proposals_write_their_canonical_text(text in proposal_text()) {
            if let Ok(p) = crate::api::parse_proposal(&text) {
                let v = serde_json::to_value(&p).unwrap();
                let mut out = Vec::new();
                let exact = crate::ir::write::proposal_canonical(&p, &mut out);
                prop_assert_eq!(String::from_utf8(out.clone()).unwrap(), crate::canonical::canonical_string(&v));
                if exact {
                    prop_assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), v);
                }
            }
        }
    }

    /// Proposals with every optional part (a compensation, assumptions,
    /// dependencies, a timeout, preconditions, integral and large numbers)
    /// write the canonical text of their value.
    #[test]
    fn full_proposals_write_their_canonical_text() {
        let text = r#"{"id": "p\u00e9", "source": "s", "context": {"z": 1, "a": [2.0]}, "timestamp": "2026-01-02T03:04:05.120Z",
            "actions": [
              {"id": "a", "type": "tool_call", "tool": "t", "parameters": {"n": 18446744073709551615, "f": 1.5},
               "preconditions": [{"key": "k", "operator": "gt", "value": 3, "description": "d"}],
               "expected_effects": {"k": {"x": null}}, "state_dependencies": ["k"], "dependencies": ["b"],
               "read_set": ["r"], "write_set": ["w"], "assumptions": [{"key": "k", "read_version": 2}],
               "invocation_mode": "one_shot", "reversibility": "reversible",
               "compensation": {"type": "tool", "tool": "undo", "parameters": {"q": 1}}, "idempotent": true, "max_retries": 5,
               "failure_behavior": "skip", "timeout_ms": 2500, "metadata": {"\ue000": 1, "b": true}},
              {"id": "b", "type": "state_write", "parameters": {"key": "k", "value": 1}}]}"#;
        let p = crate::api::parse_proposal(text).unwrap();
        let v = serde_json::to_value(&p).unwrap();
        let mut out = Vec::new();
        // A u64 past 2^53 and an integral float do not read back exactly.
        assert!(!crate::ir::write::proposal_canonical(&p, &mut out));
        assert_eq!(String::from_utf8(out).unwrap(), crate::canonical::canonical_string(&v));
        let plain =
            crate::api::parse_proposal(&text.replace("18446744073709551615", "7").replace("[2.0]", "[2.5]")).unwrap();
        let mut out = Vec::new();
        assert!(crate::ir::write::proposal_canonical(&plain, &mut out));
        assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), serde_json::to_value(&plain).unwrap());
    }

    /// The generated proposals exercise the direct reader, not only its
    /// giving up: a third or more are read by it.
    #[test]
    fn most_generated_proposals_are_read_directly() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let strategy = proposal_text();
        let (mut read, mut total) = (0, 0);
        for _ in 0..300 {
            let text = strategy.new_tree(&mut runner).unwrap().current();
            total += 1;
            if parse(&text, None, true).is_some() {
                read += 1;
            }
        }
        assert!(read * 3 >= total, "only {read} of {total} read directly");
    }
}
