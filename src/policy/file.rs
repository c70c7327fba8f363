//! Declarative project rules: `.car/policies/*.toml`.
//!
//! Every `*.toml` of a directory is read in sorted filename order, parsed
//! strictly (an unknown key, a wrong type or a missing required key fails the
//! load naming the file and the key) and merged into one [`PolicySet`], which
//! is then lowered onto a [`PolicyEngine`](super::PolicyEngine) as ordinary
//! rules named by their stable rule names (`deny_tool:deploy`, ...).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::trace::TraceRule;
use super::{PolicyFn, RuleScope, coerce_to_string};
use crate::Error;
use crate::ir::{Action, json_eq};

/// The largest compiled regex a policy may ask for (bytes).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// `[[deny_tool_param]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DenyToolParam {
    /// Tool the rule applies to.
    pub tool: String,
    /// Parameter key inspected.
    pub param: String,
    /// Deny when the parameter equals this JSON value exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    /// Deny when the parameter's string form contains this substring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
}

/// `[[allow_tool_param]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllowToolParam {
    /// Tool the rule applies to.
    pub tool: String,
    /// Parameter key that must be present and allowlisted.
    pub param: String,
    /// Permitted values (exact, case-sensitive); empty denies every call.
    pub allow: Vec<String>,
}

/// `[[deny_tool_param_matching]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DenyToolParamMatching {
    /// Tool the rule applies to.
    pub tool: String,
    /// Parameter key inspected.
    pub param: String,
    /// Regex source; unanchored.
    pub matches: String,
    /// When true, deny a mismatch or an absent parameter instead.
    pub negate: bool,
}

/// `[[rate_limit_tool]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateLimitTool {
    /// Tool the rule applies to.
    pub tool: String,
    /// Calls permitted within the window; 0 denies every call.
    pub max_calls: u64,
    /// Window length in seconds.
    pub interval_secs: f64,
}

/// The merged content of one or more policy files.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PolicySet {
    /// Tool names that may never be invoked.
    pub deny_tool: Vec<String>,
    /// Substrings denied in any parameter of any action.
    pub deny_keyword: Vec<String>,
    /// Parameter conditions that deny.
    pub deny_tool_param: Vec<DenyToolParam>,
    /// Parameter allowlists.
    pub allow_tool_param: Vec<AllowToolParam>,
    /// Parameter regexes.
    pub deny_tool_param_matching: Vec<DenyToolParamMatching>,
    /// Sliding-window caps.
    pub rate_limit_tool: Vec<RateLimitTool>,
    /// Temporal rules enforced at dispatch.
    pub trace_rule: Vec<TraceRule>,
}

/// One lowered rule: its stable name, description and check.
#[derive(Clone)]
pub struct NamedRule {
    /// Stable rule name, e.g. `deny_tool:deploy`.
    pub name: String,
    /// Human description.
    pub description: String,
    /// The check.
    pub rule: PolicyFn,
    /// Which actions it can apply to.
    pub scope: RuleScope,
}

impl std::fmt::Debug for NamedRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedRule").field("name", &self.name).finish()
    }
}

impl PolicySet {
    /// Number of rules (each listed tool or keyword counts as one rule).
    pub fn rule_count(&self) -> usize {
        self.deny_tool.len()
            + self.deny_keyword.len()
            + self.deny_tool_param.len()
            + self.allow_tool_param.len()
            + self.deny_tool_param_matching.len()
            + self.rate_limit_tool.len()
            + self.trace_rule.len()
    }

    /// Appends another set's rules after this one's.
    pub fn merge(&mut self, other: PolicySet) {
        self.deny_tool.extend(other.deny_tool);
        self.deny_keyword.extend(other.deny_keyword);
        self.deny_tool_param.extend(other.deny_tool_param);
        self.allow_tool_param.extend(other.allow_tool_param);
        self.deny_tool_param_matching.extend(other.deny_tool_param_matching);
        self.rate_limit_tool.extend(other.rate_limit_tool);
        self.trace_rule.extend(other.trace_rule);
    }

    /// Lowers the per-action rules (all kinds but `trace_rule`) to named
    /// closures, in file order by kind. Regexes are compiled here, once; a
    /// pattern that fails to compile becomes a rule denying every call to its
    /// tool. Each rate limit gets a fresh, empty window.
    pub fn lower(&self) -> Vec<NamedRule> {
        let mut out = Vec::with_capacity(self.rule_count());
        for tool in &self.deny_tool {
            out.push(named(
                format!("deny_tool:{tool}"),
                format!("deny every call to `{tool}`"),
                deny_tool_rule(tool),
                RuleScope::Tool(tool.clone()),
            ));
        }
        for kw in &self.deny_keyword {
            out.push(named(
                format!("deny_keyword:{kw}"),
                "deny any action carrying a denied keyword in a parameter".into(),
                deny_keyword_rule(kw),
                RuleScope::Keyword(kw.clone()),
            ));
        }
        for r in &self.deny_tool_param {
            out.push(named(
                format!("deny_tool_param:{}.{}", r.tool, r.param),
                format!("deny `{}` when parameter `{}` meets the denied condition", r.tool, r.param),
                deny_tool_param_rule(r),
                RuleScope::Tool(r.tool.clone()),
            ));
        }
        for r in &self.allow_tool_param {
            out.push(named(
                format!("allow_tool_param:{}.{}", r.tool, r.param),
                format!("allow `{}` only with an allowlisted `{}`", r.tool, r.param),
                allow_tool_param_rule(r),
                RuleScope::Tool(r.tool.clone()),
            ));
        }
        for r in &self.deny_tool_param_matching {
            out.push(named(
                format!("deny_tool_param_matching:{}.{}", r.tool, r.param),
                format!(
                    "deny `{}` when parameter `{}` {} a pattern",
                    r.tool,
                    r.param,
                    if r.negate { "misses" } else { "matches" }
                ),
                deny_matching_rule(r),
                RuleScope::Tool(r.tool.clone()),
            ));
        }
        for r in &self.rate_limit_tool {
            out.push(named(
                format!("rate_limit_tool:{}", r.tool),
                format!("at most {} calls to `{}` per {}s", r.max_calls, r.tool, r.interval_secs),
                rate_limit_rule(r),
                RuleScope::Tool(r.tool.clone()),
            ));
        }
        out
    }
}

fn named(name: String, description: String, rule: PolicyFn, scope: RuleScope) -> NamedRule {
    NamedRule { name, description, rule, scope }
}

fn is_tool(a: &Action, tool: &str) -> bool {
    a.tool.as_deref() == Some(tool)
}

fn deny_tool_rule(tool: &str) -> PolicyFn {
    let tool = tool.to_string();
    Arc::new(move |a: &Action, _: &Map<String, Value>| {
        is_tool(a, &tool).then(|| format!("tool `{tool}` is denied by a policy file"))
    })
}

fn deny_keyword_rule(kw: &str) -> PolicyFn {
    let kw = kw.to_string();
    Arc::new(move |a: &Action, _: &Map<String, Value>| {
        a.parameters
            .iter()
            .find(|(k, v)| super::rulelist::for_each_text(k, v, |t| t.contains(kw.as_str())))
            .map(|(k, _)| format!("parameter `{k}` contains a denied keyword"))
    })
}

fn deny_tool_param_rule(r: &DenyToolParam) -> PolicyFn {
    let r = r.clone();
    Arc::new(move |a: &Action, _: &Map<String, Value>| {
        if !is_tool(a, &r.tool) {
            return None;
        }
        let v = a.parameters.get(&r.param)?;
        let eq = r.equals.as_ref().is_none_or(|e| json_eq(v, e));
        let contains = r.contains.as_ref().is_none_or(|c| coerce_to_string(v).contains(c.as_str()));
        (eq && contains).then(|| {
            if r.equals.is_none() && r.contains.is_none() {
                format!("parameter `{}` of `{}` may not be set", r.param, r.tool)
            } else {
                format!("parameter `{}` of `{}` meets a denied condition", r.param, r.tool)
            }
        })
    })
}

fn allow_tool_param_rule(r: &AllowToolParam) -> PolicyFn {
    let r = r.clone();
    let allow: std::collections::HashSet<String> = r.allow.iter().cloned().collect();
    Arc::new(move |a: &Action, _: &Map<String, Value>| {
        if !is_tool(a, &r.tool) {
            return None;
        }
        let Some(v) = a.parameters.get(&r.param) else {
            return Some(format!("parameter `{}` of `{}` is required by an allowlist and is absent", r.param, r.tool));
        };
        if allow.is_empty() {
            return Some(format!("the allowlist for parameter `{}` of `{}` is empty", r.param, r.tool));
        }
        (!allow.contains(coerce_to_string(v).as_ref()))
            .then(|| format!("parameter `{}` of `{}` is not an allowlisted value", r.param, r.tool))
    })
}

fn deny_matching_rule(r: &DenyToolParamMatching) -> PolicyFn {
    let (tool, param, negate) = (r.tool.clone(), r.param.clone(), r.negate);
    match compile_pattern(&r.matches) {
        Err(_) => Arc::new(move |a: &Action, _: &Map<String, Value>| {
            is_tool(a, &tool).then(|| {
                format!("the pattern for parameter `{param}` of `{tool}` does not compile; every call is denied")
            })
        }),
        Ok(re) => Arc::new(move |a: &Action, _: &Map<String, Value>| {
            if !is_tool(a, &tool) {
                return None;
            }
            match (a.parameters.get(&param), negate) {
                (None, false) => None,
                (None, true) => {
                    Some(format!("parameter `{param}` of `{tool}` is absent; nothing proves the required pattern"))
                }
                (Some(v), false) => re
                    .is_match(&coerce_to_string(v))
                    .then(|| format!("parameter `{param}` of `{tool}` matches a denied pattern")),
                (Some(v), true) => (!re.is_match(&coerce_to_string(v)))
                    .then(|| format!("parameter `{param}` of `{tool}` does not match the required pattern")),
            }
        }),
    }
}

/// Compiles a `deny_tool_param_matching` pattern as the rule does (with a
/// bound on the compiled size).
pub fn compile_pattern(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern).size_limit(REGEX_SIZE_LIMIT).build()
}

/// A sliding window of admitted call times.
#[derive(Debug)]
pub struct SlidingWindow {
    max_calls: u64,
    interval: Duration,
    admitted: Mutex<VecDeque<Instant>>,
}

impl SlidingWindow {
    /// An empty window admitting `max_calls` per `interval`.
    pub fn new(max_calls: u64, interval: Duration) -> Self {
        SlidingWindow { max_calls, interval, admitted: Mutex::new(VecDeque::new()) }
    }

    /// Admits a call at `now` (consuming a slot) or refuses it (consuming
    /// nothing). A poisoned lock refuses (fail closed).
    pub fn try_admit(&self, now: Instant) -> bool {
        let Ok(mut q) = self.admitted.lock() else {
            return false;
        };
        while let Some(&oldest) = q.front() {
            if now.saturating_duration_since(oldest) >= self.interval {
                q.pop_front();
            } else {
                break;
            }
        }
        if (q.len() as u64) >= self.max_calls {
            return false;
        }
        q.push_back(now);
        true
    }
}

fn rate_limit_rule(r: &RateLimitTool) -> PolicyFn {
    let tool = r.tool.clone();
    let (max, secs) = (r.max_calls, r.interval_secs);
    // Validated finite and non-negative at load; saturate anything larger.
    let interval = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);
    let window = SlidingWindow::new(max, interval);
    Arc::new(move |a: &Action, _: &Map<String, Value>| {
        if !is_tool(a, &tool) {
            return None;
        }
        (!window.try_admit(Instant::now()))
            .then(|| format!("`{tool}` is over its rate limit of {max} call(s) per {secs}s"))
    })
}

// ---------------------------------------------------------------- loading

/// Parses one policy file's text. `file` names it in errors.
pub fn parse_policy_text(text: &str, file: &str) -> crate::Result<PolicySet> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        Error::config(
            "policy_parse_error",
            format!("policy file `{file}`: invalid toml: {}", e.message()),
            json!({"file": file}),
        )
    })?;
    let mut set = PolicySet::default();
    let cx = Cx { file };
    for (key, value) in &table {
        match key.as_str() {
            "deny_tool" => set.deny_tool = cx.string_list(value, key)?,
            "deny_keyword" => set.deny_keyword = cx.string_list(value, key)?,
            "deny_tool_param" => {
                for (i, t) in cx.tables(value, key)?.into_iter().enumerate() {
                    let k = format!("{key}[{i}]");
                    cx.only(t, &k, &["tool", "param", "equals", "contains"])?;
                    set.deny_tool_param.push(DenyToolParam {
                        tool: cx.req_str(t, &k, "tool")?,
                        param: cx.req_str(t, &k, "param")?,
                        equals: match t.get("equals") {
                            None => None,
                            Some(v) if has_non_finite(v) => {
                                return Err(cx.bad_value(&format!("{k}.equals"), "must not contain `nan` or `inf`"));
                            }
                            Some(v) => Some(toml_to_json(v)),
                        },
                        contains: cx.opt_str(t, &k, "contains")?,
                    });
                }
            }
            "allow_tool_param" => {
                for (i, t) in cx.tables(value, key)?.into_iter().enumerate() {
                    let k = format!("{key}[{i}]");
                    cx.only(t, &k, &["tool", "param", "allow"])?;
                    let allow = match t.get("allow") {
                        Some(v) => cx.string_list_allow_empty(v, &format!("{k}.allow"))?,
                        None => Vec::new(),
                    };
                    set.allow_tool_param.push(AllowToolParam {
                        tool: cx.req_str(t, &k, "tool")?,
                        param: cx.req_str(t, &k, "param")?,
                        allow,
                    });
                }
            }
            "deny_tool_param_matching" => {
                for (i, t) in cx.tables(value, key)?.into_iter().enumerate() {
                    let k = format!("{key}[{i}]");
                    cx.only(t, &k, &["tool", "param", "matches", "negate"])?;
                    let negate = match t.get("negate") {
                        None => false,
                        Some(toml::Value::Boolean(b)) => *b,
                        Some(_) => return Err(cx.wrong_type(&format!("{k}.negate"), "a boolean")),
                    };
                    let matches = match t.get("matches") {
                        Some(toml::Value::String(s)) => s.clone(),
                        Some(_) => return Err(cx.wrong_type(&format!("{k}.matches"), "a string")),
                        None => return Err(cx.missing(&format!("{k}.matches"))),
                    };
                    set.deny_tool_param_matching.push(DenyToolParamMatching {
                        tool: cx.req_str(t, &k, "tool")?,
                        param: cx.req_str(t, &k, "param")?,
                        matches,
                        negate,
                    });
                }
            }
            "rate_limit_tool" => {
                for (i, t) in cx.tables(value, key)?.into_iter().enumerate() {
                    let k = format!("{key}[{i}]");
                    cx.only(t, &k, &["tool", "max_calls", "interval_secs"])?;
                    let max_calls = cx.req_count(t, &k, "max_calls")?;
                    let interval_secs = match t.get("interval_secs") {
                        Some(toml::Value::Float(f)) => *f,
                        Some(toml::Value::Integer(n)) => *n as f64,
                        Some(_) => return Err(cx.wrong_type(&format!("{k}.interval_secs"), "a number")),
                        None => return Err(cx.missing(&format!("{k}.interval_secs"))),
                    };
                    if !interval_secs.is_finite() || interval_secs < 0.0 {
                        return Err(cx.bad_value(
                            &format!("{k}.interval_secs"),
                            "must be a finite, non-negative number of seconds",
                        ));
                    }
                    set.rate_limit_tool.push(RateLimitTool {
                        tool: cx.req_str(t, &k, "tool")?,
                        max_calls,
                        interval_secs,
                    });
                }
            }
            "trace_rule" => {
                for (i, t) in cx.tables(value, key)?.into_iter().enumerate() {
                    let k = format!("{key}[{i}]");
                    cx.only(t, &k, &["tool", "forbid_after", "require_before", "max_per_session"])?;
                    let list = |name: &str| match t.get(name) {
                        Some(v) => cx.string_list(v, &format!("{k}.{name}")),
                        None => Ok(Vec::new()),
                    };
                    let forbid_after = list("forbid_after")?;
                    let require_before = list("require_before")?;
                    let max_per_session = if t.contains_key("max_per_session") {
                        Some(cx.req_count(t, &k, "max_per_session")?)
                    } else {
                        None
                    };
                    if forbid_after.is_empty() && require_before.is_empty() && max_per_session.is_none() {
                        return Err(cx.err(
                            "missing_policy_key",
                            &format!("{k}.forbid_after"),
                            "is required: a trace rule needs at least one of `forbid_after`, `require_before`, `max_per_session`",
                        ));
                    }
                    set.trace_rule.push(TraceRule {
                        tool: cx.req_str(t, &k, "tool")?,
                        forbid_after,
                        require_before,
                        max_per_session,
                    });
                }
            }
            other => {
                return Err(Error::config(
                    "unknown_policy_key",
                    format!("policy file `{file}`: unknown key `{other}`"),
                    json!({"file": file, "key": other}),
                ));
            }
        }
    }
    Ok(set)
}

struct Cx<'a> {
    file: &'a str,
}

impl Cx<'_> {
    fn err(&self, code: &'static str, key: &str, what: &str) -> Error {
        Error::config(
            code,
            format!("policy file `{}`: key `{key}` {what}", self.file),
            json!({"file": self.file, "key": key}),
        )
    }

    fn wrong_type(&self, key: &str, expected: &str) -> Error {
        self.err("invalid_policy_type", key, &format!("must be {expected}"))
    }

    fn missing(&self, key: &str) -> Error {
        self.err("missing_policy_key", key, "is required")
    }

    fn bad_value(&self, key: &str, what: &str) -> Error {
        self.err("invalid_policy_value", key, what)
    }

    fn nonempty(&self, s: &str, key: &str) -> crate::Result<String> {
        if s.is_empty() { Err(self.bad_value(key, "must not be empty")) } else { Ok(s.to_string()) }
    }

    fn string_list_allow_empty(&self, v: &toml::Value, key: &str) -> crate::Result<Vec<String>> {
        let toml::Value::Array(items) = v else {
            return Err(self.wrong_type(key, "an array of strings"));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                toml::Value::String(s) => Ok(s.clone()),
                _ => Err(self.wrong_type(&format!("{key}[{i}]"), "a string")),
            })
            .collect()
    }

    fn string_list(&self, v: &toml::Value, key: &str) -> crate::Result<Vec<String>> {
        let items = self.string_list_allow_empty(v, key)?;
        for (i, s) in items.iter().enumerate() {
            self.nonempty(s, &format!("{key}[{i}]"))?;
        }
        Ok(items)
    }

    fn tables<'v>(&self, v: &'v toml::Value, key: &str) -> crate::Result<Vec<&'v toml::Table>> {
        let toml::Value::Array(items) = v else {
            return Err(self.wrong_type(key, &format!("an array of tables (`[[{key}]]`)")));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                toml::Value::Table(t) => Ok(t),
                _ => Err(self.wrong_type(&format!("{key}[{i}]"), "a table")),
            })
            .collect()
    }

    fn only(&self, t: &toml::Table, key: &str, allowed: &[&str]) -> crate::Result<()> {
        match t.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(Error::config(
                "unknown_policy_key",
                format!("policy file `{}`: unknown key `{key}.{k}`", self.file),
                json!({"file": self.file, "key": format!("{key}.{k}")}),
            )),
        }
    }

    fn req_str(&self, t: &toml::Table, key: &str, name: &str) -> crate::Result<String> {
        let full = format!("{key}.{name}");
        match t.get(name) {
            Some(toml::Value::String(s)) => self.nonempty(s, &full),
            Some(_) => Err(self.wrong_type(&full, "a string")),
            None => Err(self.missing(&full)),
        }
    }

    fn opt_str(&self, t: &toml::Table, key: &str, name: &str) -> crate::Result<Option<String>> {
        match t.get(name) {
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.wrong_type(&format!("{key}.{name}"), "a string")),
            None => Ok(None),
        }
    }

    fn req_count(&self, t: &toml::Table, key: &str, name: &str) -> crate::Result<u64> {
        let full = format!("{key}.{name}");
        match t.get(name) {
            Some(toml::Value::Integer(n)) => {
                u64::try_from(*n).map_err(|_| self.bad_value(&full, "must be a non-negative integer"))
            }
            Some(_) => Err(self.wrong_type(&full, "a non-negative integer")),
            None => Err(self.missing(&full)),
        }
    }
}

fn has_non_finite(v: &toml::Value) -> bool {
    match v {
        toml::Value::Float(f) => !f.is_finite(),
        toml::Value::Array(a) => a.iter().any(has_non_finite),
        toml::Value::Table(t) => t.values().any(has_non_finite),
        _ => false,
    }
}

/// A TOML value as JSON (datetimes become their string form).
pub fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(n) => Value::from(*n),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f).map(Value::Number).unwrap_or(Value::Null),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(t.iter().map(|(k, v)| (k.clone(), toml_to_json(v))).collect()),
    }
}

/// The `*.toml` files of `dir` in sorted filename order; a missing directory
/// has none.
pub fn policy_files(dir: &Path) -> crate::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(Error::config(
                "policy_io_error",
                format!("cannot read policy directory `{}`: {e}", dir.display()),
                json!({"file": dir.display().to_string()}),
            ));
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| {
            Error::config(
                "policy_io_error",
                format!("cannot read policy directory `{}`: {e}", dir.display()),
                json!({"file": dir.display().to_string()}),
            )
        })?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) == Some("toml") && !path.is_dir() {
            files.push(path);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// Reads and merges every `*.toml` of `dir` (sorted). A missing directory is
/// an empty set; any malformed file fails the whole load, naming the file.
pub fn load_policy_set(dir: &Path) -> crate::Result<PolicySet> {
    let mut set = PolicySet::default();
    for (_, file) in load_policy_files(dir)? {
        set.merge(file);
    }
    Ok(set)
}

/// Reads every `*.toml` of `dir` (sorted), each as its own set, so that
/// lowering them in turn keeps the rules in file order.
pub fn load_policy_files(dir: &Path) -> crate::Result<Vec<(String, PolicySet)>> {
    let mut out = Vec::new();
    for path in policy_files(dir)? {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::config("policy_io_error", format!("policy file `{shown}`: cannot read: {e}"), json!({"file": shown}))
        })?;
        let set = parse_policy_text(&text, &shown)?;
        out.push((shown, set));
    }
    Ok(out)
}

/// Finds `.car/policies` from `start` walking up to the filesystem root; the
/// nearest one that exists wins (a relative `start` is taken from the
/// current directory).
pub fn discover_policy_dir(start: &Path) -> Option<PathBuf> {
    let start = if start.is_absolute() {
        start.to_path_buf()
    } else {
        std::env::current_dir().ok().map(|c| c.join(start)).unwrap_or_else(|| start.to_path_buf())
    };
    // Anything at `.car/policies` counts, so that a file standing where the
    // directory should be fails the load loudly instead of being passed over.
    start.ancestors().map(|d| d.join(".car").join("policies")).find(|p| p.exists())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(rules: &[NamedRule], a: &Action) -> Vec<(String, String)> {
        rules.iter().filter_map(|r| (r.rule)(a, &Map::new()).map(|why| (r.name.clone(), why))).collect()
    }

    fn call(tool: &str, params: Value) -> Action {
        let mut a = Action::tool_call(tool);
        if let Value::Object(m) = params {
            a.parameters = m.into();
        }
        a
    }

    #[test]
    fn spec_security_example() {
        let set = parse_policy_text(
            r#"
deny_tool    = ["deploy", "rm"]
deny_keyword = ["DROP TABLE", "rm -rf /"]

[[deny_tool_param]]
tool     = "http_request"
param    = "url"
contains = "169.254.169.254"
"#,
            "security.toml",
        )
        .unwrap();
        assert_eq!(set.rule_count(), 5);
        let rules = set.lower();
        let names: Vec<_> = rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "deny_tool:deploy",
                "deny_tool:rm",
                "deny_keyword:DROP TABLE",
                "deny_keyword:rm -rf /",
                "deny_tool_param:http_request.url"
            ]
        );
        assert_eq!(check(&rules, &call("deploy", json!({}))).len(), 1);
        let v = check(&rules, &call("http_request", json!({"url": "http://169.254.169.254/latest"})));
        assert_eq!(v.len(), 1);
        assert!(!v[0].1.contains("169.254"));
        let v = check(&rules, &call("sql", json!({"q": "drop table x; DROP TABLE users"})));
        assert_eq!(v[0].0, "deny_keyword:DROP TABLE");
        assert!(!v[0].1.contains("users"));
        assert!(check(&rules, &call("sql", json!({"q": "drop table x"}))).is_empty(), "case-sensitive");
    }

    #[test]
    fn strict_errors_name_file_and_key() {
        let e = parse_policy_text("deny_tools = [\"x\"]", "a.toml").unwrap_err();
        assert_eq!(e.code(), "unknown_policy_key");
        assert!(e.to_string().contains("`a.toml`") && e.to_string().contains("`deny_tools`"), "{e}");
        let e = parse_policy_text("deny_tool = \"x\"", "b.toml").unwrap_err();
        assert_eq!(e.code(), "invalid_policy_type");
        let e = parse_policy_text("[[deny_tool_param]]\ntool = \"x\"", "c.toml").unwrap_err();
        assert_eq!(e.code(), "missing_policy_key");
        assert_eq!(e.details()["key"], "deny_tool_param[0].param");
        let e =
            parse_policy_text("[[rate_limit_tool]]\ntool=\"x\"\nmax_calls=-1\ninterval_secs=1", "d.toml").unwrap_err();
        assert_eq!(e.code(), "invalid_policy_value");
        let e = parse_policy_text("deny_tool = [", "e.toml").unwrap_err();
        assert_eq!(e.code(), "policy_parse_error");
        assert_eq!(e.details()["file"], "e.toml");
        let e = parse_policy_text("[[trace_rule]]\ntool = \"x\"", "f.toml").unwrap_err();
        assert_eq!(e.code(), "missing_policy_key");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        const CODES: &[&str] = &[
            "policy_parse_error",
            "unknown_policy_key",
            "invalid_policy_type",
            "missing_policy_key",
            "invalid_policy_value",
        ];

        fn arb_value() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("\"x\"".to_string()),
                Just("\"\"".to_string()),
                Just("1".to_string()),
                Just("-1".to_string()),
                Just("1.5".to_string()),
                Just("nan".to_string()),
                Just("true".to_string()),
                Just("[\"a\", \"b\"]".to_string()),
                Just("[]".to_string()),
                Just("[1]".to_string()),
                Just("{ a = 1 }".to_string()),
                Just("\"(unclosed\"".to_string()),
            ]
        }

        fn arb_key() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![
                "tool",
                "param",
                "equals",
                "contains",
                "allow",
                "matches",
                "negate",
                "max_calls",
                "interval_secs",
                "forbid_after",
                "require_before",
                "max_per_session",
                "bogus",
            ])
        }

        fn arb_file() -> impl Strategy<Value = String> {
            let table = (
                prop::sample::select(vec![
                    "deny_tool_param",
                    "allow_tool_param",
                    "deny_tool_param_matching",
                    "rate_limit_tool",
                    "trace_rule",
                    "nope",
                ]),
                prop::collection::vec((arb_key(), arb_value()), 0..6),
            );
            (prop::option::of(arb_value()), prop::option::of(arb_value()), prop::collection::vec(table, 0..4)).prop_map(
                |(dt, dk, tables)| {
                    let mut t = String::new();
                    if let Some(v) = dt {
                        t += &format!("deny_tool = {v}\n");
                    }
                    if let Some(v) = dk {
                        t += &format!("deny_keyword = {v}\n");
                    }
                    for (name, kvs) in tables {
                        t += &format!("[[{name}]]\n");
                        let mut seen = std::collections::HashSet::new();
                        for (k, v) in kvs {
                            if seen.insert(k) {
                                t += &format!("{k} = {v}\n");
                            }
                        }
                    }
                    t
                },
            )
        }

        proptest! {
            #[test]
            fn loading_never_panics_and_errors_name_the_file(text in arb_file()) {
                match parse_policy_text(&text, "p.toml") {
                    Ok(set) => {
                        // Whatever loads can be lowered and checked.
                        let rules = set.lower();
                        let a = Action::tool_call("x");
                        for r in &rules {
                            let _ = (r.rule)(&a, &Map::new());
                        }
                    }
                    Err(e) => {
                        prop_assert!(CODES.contains(&e.code()), "{}", e.code());
                        prop_assert!(e.to_string().contains("`p.toml`"));
                        let details = e.details();
                        prop_assert_eq!(details["file"].as_str(), Some("p.toml"));
                    }
                }
            }

            #[test]
            fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
                let _ = parse_policy_text(&text, "p.toml");
            }
        }
    }

    #[test]
    fn sliding_window_consumes_only_admitted_calls() {
        let w = SlidingWindow::new(2, Duration::from_secs(10));
        let t0 = Instant::now();
        assert!(w.try_admit(t0));
        assert!(w.try_admit(t0 + Duration::from_secs(1)));
        assert!(!w.try_admit(t0 + Duration::from_secs(2)));
        assert!(!w.try_admit(t0 + Duration::from_secs(9)));
        // The oldest ages out at t0+10: admitted again; refused calls pushed nothing.
        assert!(w.try_admit(t0 + Duration::from_secs(10)));
        assert!(!w.try_admit(t0 + Duration::from_secs(10)));
        assert!(w.try_admit(t0 + Duration::from_secs(11)));
        let zero = SlidingWindow::new(0, Duration::from_secs(10));
        assert!(!zero.try_admit(t0));
    }
}
