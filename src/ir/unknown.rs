//! Unknown fields of a proposal: accepted (the spec's stability rule:
//! clients ignore fields they do not know), but reported, because a
//! misspelled field (`"dependecies"`) is silently dropped and the plan runs
//! without what it meant. `verify` reports each as a `warning`; a runtime in
//! strict mode (`CarRuntime::set_strict_fields`) refuses the proposal.
//!
//! The fields are found while the proposal is parsed (`serde_ignored`
//! reports every key no struct took), so this costs one parse. A field
//! inside `compensation` or a map (`parameters`, `context`, `metadata`,
//! `expected_effects`) is not checked: maps take any key, and a tagged
//! compensation is read as a whole.

use serde::Deserialize;
use serde_json::Value;

use super::proposal::{Action, ActionProposal, StateAssumption};
use super::{Precondition, VerificationIssue};
use crate::error::{Error, InputError};

/// One field no part of the IR knows.
///
/// `#[non_exhaustive]`: fields may be added; the parser produces it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnknownField {
    /// Where, as a JSON path: `actions[0].dependecies`.
    pub path: String,
    /// The field's name.
    pub field: String,
    /// The action it is in (`None` at the proposal's top level).
    pub action_id: Option<String>,
    /// The known field of that object it is probably a misspelling of.
    pub suggestion: Option<&'static str>,
}

impl UnknownField {
    /// `unknown field `dependecies` at actions[0].dependecies (ignored); did you mean `dependencies`?`
    pub fn message(&self) -> String {
        let mut m = format!("unknown field `{}` at {} (ignored)", self.field, self.path);
        if let Some(s) = self.suggestion {
            m.push_str(&format!("; did you mean `{s}`?"));
        }
        m
    }

    /// The `warning` verification issue for it.
    pub fn issue(&self) -> VerificationIssue {
        VerificationIssue {
            action_id: self.action_id.clone().unwrap_or_else(|| "proposal".to_string()),
            severity: super::Severity::Warning,
            message: self.message(),
            tier: Some(super::EvidenceTier::DecisionProcedure),
        }
    }
}

/// Parses a proposal from JSON text as [`super::parse_proposal`] does (the
/// same errors), and returns the unknown fields it had, in document order.
pub fn parse_proposal_reporting(text: &str) -> Result<(ActionProposal, Vec<UnknownField>), Error> {
    reporting(text, true)
}

/// [`parse_proposal_reporting`] for a proposal dropped when the call ends
/// (see [`super::parse::parse_proposal_transient`]).
pub(crate) fn parse_proposal_reporting_transient(text: &str) -> Result<(ActionProposal, Vec<UnknownField>), Error> {
    reporting(text, false)
}

fn reporting(text: &str, kept: bool) -> Result<(ActionProposal, Vec<UnknownField>), Error> {
    let mut paths: Vec<Vec<Seg>> = Vec::new();
    if let Some(p) = super::parse::fast_proposal(text, Some(&mut paths), kept) {
        let proposal = super::parse::validate(p)?;
        let found = paths.iter().map(|segs| describe(segs, &proposal)).collect();
        return Ok((proposal, found));
    }
    parse_proposal_reporting_serde(text)
}

/// [`parse_proposal_reporting`] through serde alone (see
/// [`super::parse::parse_proposal_serde`]).
pub(super) fn parse_proposal_reporting_serde(text: &str) -> Result<(ActionProposal, Vec<UnknownField>), Error> {
    let mut paths: Vec<Vec<Seg>> = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed: Result<ActionProposal, _> = serde_ignored::deserialize(&mut de, |p| paths.push(segments(&p)));
    let proposal = match parsed.and_then(|p| de.end().map(|()| p)) {
        Ok(p) => super::parse::validate(p)?,
        // The error as the ordinary parser words it (with its JSON path).
        Err(_) => return super::parse::parse_proposal_serde(text).map(|p| (p, Vec::new())),
    };
    let found = paths.iter().map(|segs| describe(segs, &proposal)).collect();
    Ok((proposal, found))
}

/// [`parse_proposal_reporting`] for a proposal given as a JSON value (the
/// same errors as [`super::parse_proposal_value`]).
pub fn parse_proposal_value_reporting(value: Value) -> Result<(ActionProposal, Vec<UnknownField>), Error> {
    let mut paths: Vec<Vec<Seg>> = Vec::new();
    let parsed: Result<ActionProposal, _> = serde_ignored::deserialize(&value, |p| paths.push(segments(&p)));
    let proposal = match parsed {
        Ok(p) => super::parse::validate(p)?,
        Err(_) => return super::parse_proposal_value(value).map(|p| (p, Vec::new())),
    };
    let found = paths.iter().map(|segs| describe(segs, &proposal)).collect();
    Ok((proposal, found))
}

/// Refuses a proposal with unknown fields (strict mode): `unknown_field`,
/// naming every one.
pub fn refuse_unknown(found: &[UnknownField]) -> Result<(), Error> {
    let Some(first) = found.first() else { return Ok(()) };
    let mut message = found.iter().map(UnknownField::message).collect::<Vec<_>>().join("; ");
    message.push_str(" (strict mode refuses unknown fields)");
    Err(InputError::UnknownField { path: first.path.clone(), field: first.field.clone(), message }.into())
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

pub(super) fn segments(p: &serde_ignored::Path<'_>) -> Vec<Seg> {
    let mut out = Vec::new();
    let mut cur = Some(p);
    while let Some(p) = cur {
        cur = match p {
            serde_ignored::Path::Root => None,
            serde_ignored::Path::Seq { parent, index } => {
                out.push(Seg::Index(*index));
                Some(*parent)
            }
            serde_ignored::Path::Map { parent, key } => {
                out.push(Seg::Key(key.clone()));
                Some(*parent)
            }
            serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => Some(*parent),
        };
    }
    out.reverse();
    out
}

fn describe(segs: &[Seg], proposal: &ActionProposal) -> UnknownField {
    let mut path = String::new();
    for s in segs {
        match s {
            Seg::Key(k) if is_identifier(k) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
            }
            Seg::Key(k) => path.push_str(&format!("[{}]", Value::String(k.clone()))),
            Seg::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    let field = match segs.last() {
        Some(Seg::Key(k)) => k.clone(),
        _ => String::new(),
    };
    let action_id = match segs {
        [Seg::Key(a), Seg::Index(i), ..] if a == "actions" => proposal.actions.get(*i).map(|a| a.id.clone()),
        _ => None,
    };
    let parent = &segs[..segs.len().saturating_sub(1)];
    let known: &[&'static str] = match parent {
        [] => fields_of::<ActionProposal>(),
        [Seg::Key(a), Seg::Index(_)] if a == "actions" => fields_of::<Action>(),
        [Seg::Key(a), Seg::Index(_), Seg::Key(p), Seg::Index(_)] if a == "actions" && p == "preconditions" => {
            fields_of::<Precondition>()
        }
        [Seg::Key(a), Seg::Index(_), Seg::Key(p), Seg::Index(_)] if a == "actions" && p == "assumptions" => {
            fields_of::<StateAssumption>()
        }
        _ => &[],
    };
    UnknownField { path, field: field.clone(), action_id, suggestion: closest(&field, known) }
}

fn is_identifier(k: &str) -> bool {
    !k.is_empty()
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !k.starts_with(|c: char| c.is_ascii_digit())
}

/// The known field `field` is probably a misspelling of: the nearest by
/// optimal-string-alignment distance, when that is at most a third of the
/// name (and at least 1), or the only one it differs from in case.
fn closest(field: &str, known: &[&'static str]) -> Option<&'static str> {
    let lower = field.to_ascii_lowercase();
    if let Some(k) = known.iter().find(|k| k.eq_ignore_ascii_case(field) || **k == lower.replace('-', "_")) {
        return Some(k);
    }
    let limit = (field.chars().count() / 3).max(1);
    known
        .iter()
        .map(|k| (strsim::osa_distance(&lower, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The field names a struct's `Deserialize` asks for (serde hands them to
/// `deserialize_struct`), read by a deserializer that only records them.
pub(super) fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    use serde::de::{Error as _, Visitor};
    #[derive(Debug)]
    struct Found(&'static [&'static str]);
    impl std::fmt::Display for Found {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("fields found")
        }
    }
    impl std::error::Error for Found {}
    impl serde::de::Error for Found {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Found(&[])
        }
    }
    struct Probe;
    impl<'de> serde::Deserializer<'de> for Probe {
        type Error = Found;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
            Err(Found::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Found> {
            Err(Found(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    match T::deserialize(Probe) {
        Err(Found(fields)) => fields,
        Ok(_) => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_reads_each_structs_fields() {
        let action = fields_of::<Action>();
        for f in ["id", "type", "tool", "parameters", "dependencies", "state_dependencies", "timeout_ms", "metadata"] {
            assert!(action.contains(&f), "{f} in {action:?}");
        }
        assert_eq!(fields_of::<ActionProposal>(), ["id", "source", "actions", "timestamp", "context"]);
        assert!(fields_of::<Precondition>().contains(&"operator"));
    }

    #[test]
    fn suggestions() {
        let known = fields_of::<Action>();
        assert_eq!(closest("dependecies", known), Some("dependencies"));
        assert_eq!(closest("Dependencies", known), Some("dependencies"));
        assert_eq!(closest("timeout-ms", known), Some("timeout_ms"));
        assert_eq!(closest("max_retry", known), Some("max_retries"));
        assert_eq!(closest("prameters", known), Some("parameters"));
        assert_eq!(closest("colour", known), None);
        assert_eq!(closest("x", known), None);
    }
}
