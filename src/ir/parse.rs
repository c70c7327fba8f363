//! Parsing with JSON-path errors: `actions[3].failure_behavior: unknown variant ...`.

use std::cell::Cell;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::proposal::{ActionProposal, ActionType};
use crate::error::{Error, InputError};

/// Renders a serde_path_to_error path: the root is `$`.
fn render_path(path: &serde_path_to_error::Path) -> String {
    let p = path.to_string();
    if p == "." || p.is_empty() { "$".to_string() } else { p }
}

/// serde_json appends " at line L column C"; the path already says where.
fn strip_location(e: &serde_json::Error) -> String {
    let s = e.to_string();
    if e.line() > 0
        && let Some(i) = s.rfind(" at line ")
    {
        return s[..i].to_string();
    }
    s
}

/// Converts a path-tracking serde_json error into our input error.
pub fn to_json_path_error(e: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let path = render_path(e.path());
    let inner = e.into_inner();
    match inner.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof | serde_json::error::Category::Io => {
            InputError::Json { message: strip_location(&inner), line: inner.line(), column: inner.column() }.into()
        }
        serde_json::error::Category::Data => InputError::Shape { path, message: strip_location(&inner) }.into(),
    }
}

/// Parses JSON text into `T`; errors name the JSON path.
///
/// Valid input takes serde_json's plain path; only input that fails is
/// parsed again with path tracking, which is several times slower (it
/// allocates every key it passes) and exists only to name where it failed.
pub fn from_json_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    if let Ok(v) = serde_json::from_str(text) {
        return Ok(v);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let v: T = serde_path_to_error::deserialize(&mut de).map_err(to_json_path_error)?;
    de.end().map_err(|e| InputError::Json { message: strip_location(&e), line: e.line(), column: e.column() })?;
    Ok(v)
}

/// Converts a JSON value into `T`; errors name the JSON path.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(value).map_err(to_json_path_error)
}

/// Checks what the type system cannot: `tool` is required on a `tool_call`.
pub(super) fn validate(p: ActionProposal) -> Result<ActionProposal, Error> {
    for (i, a) in p.actions.iter().enumerate() {
        if a.action_type == ActionType::ToolCall && a.tool.is_none() {
            return Err(InputError::MissingField { path: format!("actions[{i}].tool"), field: "tool".into() }.into());
        }
    }
    Ok(p)
}

thread_local! {
    /// The capacity the next `actions` list is allocated with (taken once).
    static ACTIONS_CAPACITY: Cell<usize> = const { Cell::new(0) };
}

/// Takes (and clears) the capacity hint for the `actions` list being parsed.
pub(super) fn take_actions_capacity() -> usize {
    ACTIONS_CAPACITY.with(|c| c.replace(0))
}

/// How many times `needle` occurs in `bytes`, counted in blocks of 255 with
/// `u8` sums (which the compiler vectorises; a plain `filter().count()`
/// runs a byte at a time).
fn count_byte(bytes: &[u8], needle: u8) -> usize {
    bytes.chunks(255).map(|block| usize::from(block.iter().map(|&b| u8::from(b == needle)).sum::<u8>())).sum()
}

/// Most action slots reserved up front from a text estimate (beyond it the
/// list grows as usual).
const MAX_ACTIONS_HINT: usize = 1 << 16;

/// Gives back the `actions` list's spare slots when the estimate was
/// generous by more than an eighth: a proposal is kept as long as its
/// events are (they render from it), and each spare slot is an `Action`'s
/// size, so a proposal of actions with parameters (two objects an action,
/// two slots) would otherwise hold twice its actions' memory for the life
/// of the log. One copy of the list, once a proposal (the direct reader
/// reads a long list in chunks instead, see `fast::Reader::actions`).
pub(super) fn fit_actions(actions: &mut Vec<super::Action>) {
    if actions.capacity() - actions.len() > actions.len() / 8 {
        actions.shrink_to_fit();
    }
}

/// Parses a proposal from JSON text, filling every default.
///
/// The `actions` list is sized up front from the number of `{` in the text
/// (every action is an object; nested objects only make the estimate
/// generous, and the count is one vectorised pass, where searching for
/// `"type"` cost more than the reallocations it saves), capped by
/// `MAX_ACTIONS_HINT`.
pub fn parse_proposal(text: &str) -> Result<ActionProposal, Error> {
    parse_text(text, true)
}

/// [`parse_proposal`] for a proposal dropped when the call ends (a pure
/// function's): its `actions` list is read in place, neither chunked nor
/// fitted (see `fast::parse`). The same proposal, the same errors.
pub(crate) fn parse_proposal_transient(text: &str) -> Result<ActionProposal, Error> {
    parse_text(text, false)
}

/// The direct reader, else serde; `kept`: the proposal outlives the call.
fn parse_text(text: &str, kept: bool) -> Result<ActionProposal, Error> {
    match fast_proposal(text, None, kept) {
        Some(p) => validate(p),
        None => parse_proposal_serde(text),
    }
}

/// [`parse_proposal`] through serde alone: what the direct reader gives up
/// on, and the reference it is tested against.
pub(super) fn parse_proposal_serde(text: &str) -> Result<ActionProposal, Error> {
    let hint = count_byte(text.as_bytes(), b'{').min(MAX_ACTIONS_HINT);
    ACTIONS_CAPACITY.with(|c| c.set(hint));
    let parsed = from_json_str(text);
    take_actions_capacity();
    validate(parsed?)
}

/// [`super::fast::parse`] with the `actions` list sized as
/// [`parse_proposal`] sizes it; `None` when serde must read the text.
/// `kept`: the proposal outlives the call (`fast::parse`).
pub(super) fn fast_proposal(
    text: &str,
    unknown: Option<&mut Vec<Vec<super::unknown::Seg>>>,
    kept: bool,
) -> Option<ActionProposal> {
    ACTIONS_CAPACITY.with(|c| c.set(count_byte(text.as_bytes(), b'{').min(MAX_ACTIONS_HINT)));
    let p = super::fast::parse(text, unknown, kept);
    take_actions_capacity();
    p
}

/// Parses a proposal from a JSON value, filling every default.
pub fn parse_proposal_value(value: Value) -> Result<ActionProposal, Error> {
    validate(from_value(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(n: usize) -> String {
        let actions: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"id":"w{i}","type":"state_write","parameters":{{"key":"k{i}","value":{i}}}}}"#))
            .collect();
        format!(r#"{{"actions":[{}]}}"#, actions.join(","))
    }

    /// A pure function's proposal, dropped when the call answers, is read
    /// in place into the list sized from the text (no chunks, no fitting:
    /// a copy of the whole list every call, 2 MB for 5,000 actions), and is
    /// the same proposal, with the same unknown fields and the same errors,
    /// as a kept one.
    #[test]
    fn a_transient_proposal_is_read_in_place_and_equals_a_kept_one() {
        for n in [0, 5, 1023, 1025, 3000] {
            let mut actions: Vec<String> = (0..n)
                .map(|i| format!(r#"{{"id":"w{i}","type":"state_write","parameters":{{"key":"k{i}","value":{i}}}}}"#))
                .collect();
            if n > 0 {
                actions[n - 1] = format!(r#"{{"id":"x","type":"tool_call","tool":"t","zz{n}":1}}"#);
            }
            let text = format!(
                r#"{{"id":"p","timestamp":"2026-01-01T00:00:00Z","actions":[{}],"extra":true}}"#,
                actions.join(",")
            );
            let kept = parse_proposal(&text).unwrap();
            let transient = parse_proposal_transient(&text).unwrap();
            assert_eq!(transient, kept, "{n}");
            assert_eq!(transient.actions.capacity(), count_byte(text.as_bytes(), b'{'), "{n}: read in place");
            let (kept_r, kept_unknown) = crate::ir::parse_proposal_reporting(&text).unwrap();
            let (transient_r, transient_unknown) = crate::ir::parse_proposal_reporting_transient(&text).unwrap();
            assert_eq!((&transient_r, &transient_unknown), (&kept_r, &kept_unknown), "{n}");
            assert_eq!(transient_r.actions.capacity(), transient.actions.capacity(), "{n}");
            let paths: Vec<&str> = transient_unknown.iter().map(|u| u.path.as_str()).collect();
            let expected =
                if n > 0 { vec![format!("actions[{}].zz{n}", n - 1), "extra".into()] } else { vec!["extra".into()] };
            assert_eq!(paths, expected, "{n}");
        }
        for bad in [r#"{"actions":[{"id":"a","type":"tool_call"}]}"#, r#"{"actions":[{"id":"a"}]}"#, "{", ""] {
            let kept = parse_proposal(bad).unwrap_err().to_string();
            assert_eq!(parse_proposal_transient(bad).unwrap_err().to_string(), kept, "{bad}");
            let reporting = crate::ir::parse_proposal_reporting(bad).unwrap_err().to_string();
            assert_eq!(crate::ir::parse_proposal_reporting_transient(bad).unwrap_err().to_string(), reporting, "{bad}");
        }
    }

    #[test]
    fn the_actions_list_is_sized_from_the_text_and_fitted_to_its_actions() {
        // One slot per object in the text (each action and its parameters):
        // twice the actions, so the spare half is given back, on both readers
        // (the direct reader sizes a list of up to 1,024 actions at most
        // that, and reads a longer one in chunks into an exact list).
        for n in [600, 3000] {
            for p in [parse_proposal(&proposal(n)).unwrap(), parse_proposal_serde(&proposal(n)).unwrap()] {
                assert_eq!(p.actions.len(), n);
                assert_eq!(p.actions.capacity(), n);
                // Every parameters object holds exactly its two entries.
                assert!(p.actions.iter().all(|a| a.parameters.capacity() == 2));
            }
        }
        // Within an eighth of 1,024 slots: kept (no copy).
        assert_eq!(parse_proposal(&proposal(1000)).unwrap().actions.capacity(), 1024);
        assert_eq!(parse_proposal_serde(&proposal(1000)).unwrap().actions.capacity(), 1000);
        // An estimate within an eighth is kept as allocated (no copy).
        let bare: Vec<String> = (0..800).map(|i| format!(r#"{{"id":"b{i}","type":"state_read"}}"#)).collect();
        let bare = format!(r#"{{"actions":[{}]}}"#, bare.join(","));
        for p in [parse_proposal(&bare).unwrap(), parse_proposal_serde(&bare).unwrap()] {
            assert_eq!((p.actions.len(), p.actions.capacity()), (800, 801));
        }
        // No action and many objects elsewhere: nothing kept.
        let empty = format!(r#"{{"actions":[],"context":{{"c":[{}]}}}}"#, vec!["{}"; 500].join(","));
        for p in [parse_proposal(&empty).unwrap(), parse_proposal_serde(&empty).unwrap()] {
            assert_eq!(p.actions.capacity(), 0);
        }
        // The hint is used once: a later parse of the type directly grows as usual.
        let q: ActionProposal = serde_json::from_str(&proposal(3)).unwrap();
        assert_eq!(q.actions.len(), 3);
        assert!(q.actions.capacity() < 100);
        // A value knows its length.
        let v: Value = serde_json::from_str(&proposal(5)).unwrap();
        assert_eq!(parse_proposal_value(v).unwrap().actions.capacity(), 5);
    }

    #[test]
    fn count_byte_counts_across_blocks() {
        for n in [0usize, 1, 254, 255, 256, 1000] {
            let text: String = (0..n).map(|i| if i % 3 == 0 { '{' } else { 'x' }).collect();
            assert_eq!(count_byte(text.as_bytes(), b'{'), text.matches('{').count(), "{n}");
        }
        assert_eq!(count_byte(&[b'{'; 600], b'{'), 600);
    }

    #[test]
    fn a_failed_parse_leaves_no_hint_and_keeps_serdes_error() {
        let e = parse_proposal(r#"{"actions":{"type":1}}"#).unwrap_err().to_string();
        assert!(e.contains("invalid type: map, expected a sequence"), "{e}");
        let e = parse_proposal(r#"{"actions":[{"type":"nope"}]}"#).unwrap_err().to_string();
        assert!(e.contains("actions[0].type"), "{e}");
        assert_eq!(take_actions_capacity(), 0);
    }
}
