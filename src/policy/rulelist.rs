//! An ordered list of named rules with a lazily built index, so that a check
//! only runs the rules that can apply to the action's tool, and every
//! `deny_keyword` rule is answered by one multi-pattern scan over the
//! action's parameter texts (see [`for_each_text`]). Violations still come
//! out in registration order.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use regex::RegexSet;
use serde_json::{Map, Value};

use super::{PolicyFn, PolicyInfo, PolicyViolation};
use crate::ir::Action;

/// Which actions a rule can apply to. The scope is a promise the engine uses
/// to skip the rule: a `Tool` rule must pass every action of another tool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RuleScope {
    /// Any action (the rule decides).
    #[default]
    Any,
    /// Only actions whose `tool` is this name.
    Tool(String),
    /// `deny_keyword`: any action with a parameter one of whose texts (see
    /// [`for_each_text`]: its name, every string and object key at any
    /// depth, unescaped, and other scalars' JSON text) contains this
    /// substring. The engine evaluates these together.
    Keyword(String),
}

#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) rule: PolicyFn,
    pub(crate) scope: RuleScope,
}

#[derive(Debug, Default)]
struct Index {
    by_tool: HashMap<String, Vec<usize>>,
    any: Vec<usize>,
    /// One pattern per keyword entry, with the entry index of each pattern.
    keywords: Option<(RegexSet, Vec<usize>)>,
    /// Keyword entries evaluated one by one (when the set could not be built).
    keyword_fallback: Vec<usize>,
}

/// Rules in registration order plus their index.
#[derive(Clone, Default)]
pub(crate) struct RuleList {
    entries: Vec<Entry>,
    index: OnceLock<std::sync::Arc<Index>>,
}

impl RuleList {
    pub(crate) fn push(&mut self, e: Entry) {
        self.entries.push(e);
        self.index = OnceLock::new();
    }

    pub(crate) fn remove_named(&mut self, name: &str) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| e.name != name);
        self.index = OnceLock::new();
        before - self.entries.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    pub(crate) fn info(&self) -> Vec<PolicyInfo> {
        self.entries.iter().map(|e| PolicyInfo { name: e.name.clone(), description: e.description.clone() }).collect()
    }

    fn index(&self) -> &Index {
        self.index.get_or_init(|| std::sync::Arc::new(build_index(&self.entries)))
    }

    /// Runs every applicable rule against `action`, appending violations in
    /// registration order. A panicking rule is a violation naming it.
    pub(crate) fn run(&self, action: &Action, state: &Map<String, Value>, out: &mut Vec<PolicyViolation>) {
        if self.entries.is_empty() {
            return;
        }
        let idx = self.index();
        let mut todo: Vec<usize> = idx.any.clone();
        if let Some(tool) = action.tool.as_deref()
            && let Some(list) = idx.by_tool.get(tool)
        {
            todo.extend_from_slice(list);
        }
        todo.extend_from_slice(&idx.keyword_fallback);
        // For each keyword pattern, the first parameter whose texts contain
        // it (patterns are in entry order). One automaton over every text of
        // the action: linear in the parameters' size, whatever the number of
        // keywords.
        let mut first: Vec<Option<&str>> = Vec::new();
        if let Some((set, owners)) = &idx.keywords {
            first = vec![None; owners.len()];
            for (k, v) in &action.parameters {
                for_each_text(k, v, |text| {
                    if set.is_match(text) {
                        for p in set.matches(text).iter() {
                            if first[p].is_none() {
                                first[p] = Some(k.as_str());
                            }
                        }
                    }
                    false
                });
            }
            todo.extend(first.iter().zip(owners).filter(|(hit, _)| hit.is_some()).map(|(_, &owner)| owner));
        }
        todo.sort_unstable();
        for i in todo {
            let e = &self.entries[i];
            if let (RuleScope::Keyword(_), Some((_, owners))) = (&e.scope, &idx.keywords) {
                let key = owners.binary_search(&i).ok().and_then(|p| first.get(p).copied().flatten());
                if let Some(key) = key {
                    out.push(PolicyViolation {
                        policy_name: e.name.clone(),
                        action_id: action.id.clone(),
                        reason: format!("parameter `{key}` contains a denied keyword"),
                    });
                }
                continue;
            }
            let verdict = catch_unwind(AssertUnwindSafe(|| (e.rule)(action, state)));
            let reason = match verdict {
                Ok(None) => continue,
                Ok(Some(reason)) => reason,
                Err(_) => format!("policy `{}` panicked; treated as a violation", e.name),
            };
            out.push(PolicyViolation { policy_name: e.name.clone(), action_id: action.id.clone(), reason });
        }
    }
}

fn build_index(entries: &[Entry]) -> Index {
    let mut idx = Index::default();
    let mut patterns = Vec::new();
    let mut owners = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        match &e.scope {
            RuleScope::Any => idx.any.push(i),
            RuleScope::Tool(t) => idx.by_tool.entry(t.clone()).or_default().push(i),
            RuleScope::Keyword(k) => {
                patterns.push(regex::escape(k));
                owners.push(i);
            }
        }
    }
    if !patterns.is_empty() {
        match regex::RegexSetBuilder::new(&patterns).size_limit(16 << 20).build() {
            Ok(set) => idx.keywords = Some((set, owners)),
            // Too large for one automaton: evaluate each keyword rule itself.
            Err(_) => idx.keyword_fallback = owners,
        }
    }
    idx
}

/// Calls `f` on every text of the parameter `key` = `value`, stopping at (and
/// returning `true` for) the first call that returns `true`: the parameter's
/// name, then every string and every object key at any depth, in their
/// unescaped form, and the JSON text of numbers, booleans and null. Keyword
/// rules match these texts one by one, so a keyword never matches across two
/// of them nor against JSON punctuation or escapes. The walk keeps its own
/// stack: any nesting depth, no recursion.
pub(crate) fn for_each_text(key: &str, value: &Value, mut f: impl FnMut(&str) -> bool) -> bool {
    if f(key) {
        return true;
    }
    let mut stack: Vec<&Value> = vec![value];
    while let Some(v) = stack.pop() {
        let hit = match v {
            Value::String(s) => f(s),
            Value::Array(a) => {
                stack.extend(a.iter().rev());
                false
            }
            Value::Object(m) => {
                let mut hit = false;
                for (k, v) in m.iter().rev() {
                    if f(k) {
                        hit = true;
                        break;
                    }
                    stack.push(v);
                }
                hit
            }
            Value::Null => f("null"),
            Value::Bool(b) => f(if *b { "true" } else { "false" }),
            Value::Number(n) => f(&n.to_string()),
        };
        if hit {
            return true;
        }
    }
    false
}
