//! The permission chain: hooks, deny rules, ask rules, `can_use_tool`, the
//! terminal default; first decisive verdict wins.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::Verdict;
use super::preset::Preset;
use super::shell::{ShellPattern, ShellRules};
use super::tool::{Risk, ToolDefinition, is_valid_tool_name};

/// The first-party fetch tool: the only tool domain rules are enforced for.
/// Its input carries the target in `url`.
pub const FETCH_TOOL: &str = "http_fetch";

/// The input field argv rules read the command line from.
pub const COMMAND_FIELD: &str = "command";

/// One value or a list of them (`"tool": "a"` or `"tool": ["a", "b"]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// A single value.
    One(T),
    /// A list.
    Many(Vec<T>),
}

impl<T: PartialEq> OneOrMany<T> {
    /// True when `v` is the value or in the list.
    pub fn contains(&self, v: &T) -> bool {
        match self {
            OneOrMany::One(x) => x == v,
            OneOrMany::Many(xs) => xs.contains(v),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, OneOrMany::Many(xs) if xs.is_empty())
    }

    fn iter(&self) -> std::slice::Iter<'_, T> {
        match self {
            OneOrMany::One(x) => std::slice::from_ref(x).iter(),
            OneOrMany::Many(xs) => xs.iter(),
        }
    }
}

/// A risk class as rules (and the plan/apply gate) name it: the five risks
/// plus `undeclared`, the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RiskClass {
    /// `read`
    Read,
    /// `write`
    Write,
    /// `network`
    Network,
    /// `execute`
    Execute,
    /// `destructive`
    Destructive,
    /// A tool with no declared risk.
    #[default]
    Undeclared,
}

impl RiskClass {
    /// The class of a tool's declared risk (`None` is `undeclared`).
    pub fn of(risk: Option<Risk>) -> Self {
        match risk {
            None => RiskClass::Undeclared,
            Some(Risk::Read) => RiskClass::Read,
            Some(Risk::Write) => RiskClass::Write,
            Some(Risk::Network) => RiskClass::Network,
            Some(Risk::Execute) => RiskClass::Execute,
            Some(Risk::Destructive) => RiskClass::Destructive,
        }
    }
}

/// A declarative rule as written: every given criterion must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// Tool name or names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<OneOrMany<String>>,
    /// Declared risk class or classes (`undeclared` for no risk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<OneOrMany<RiskClass>>,
    /// An argv pattern for shell tools (needs `tool`); read from the input's
    /// `command` string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<String>,
    /// Network domains: exact hosts or `*.suffix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<Vec<String>>,
}

/// How a rule relates to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuleMatch {
    Match,
    NoMatch,
    /// The rule could not be ruled out (an unparseable command, no host).
    Uncertain,
}

impl RuleMatch {
    fn and(self, other: RuleMatch) -> RuleMatch {
        use RuleMatch::*;
        match (self, other) {
            (NoMatch, _) | (_, NoMatch) => NoMatch,
            (Uncertain, _) | (_, Uncertain) => Uncertain,
            _ => Match,
        }
    }
}

/// Which table a rule sits in (argv patterns match per table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    Deny,
    Ask,
}

/// A compiled rule.
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    spec: RuleSpec,
    shell: Option<ShellRules>,
    domains: Vec<String>,
}

fn rule_error(spec: &RuleSpec, why: &str) -> crate::Error {
    let text = serde_json::to_string(spec).unwrap_or_default();
    crate::Error::config(
        "invalid_permission_rule",
        format!("invalid permission rule `{text}`: {why}"),
        json!({"rule": spec}),
    )
}

impl Rule {
    fn compile(spec: RuleSpec, layer: Layer) -> crate::Result<Self> {
        if spec.tool.is_none() && spec.risk.is_none() && spec.argv.is_none() && spec.domains.is_none() {
            return Err(rule_error(&spec, "a rule needs at least one of `tool`, `risk`, `argv`, `domains`"));
        }
        if spec.tool.as_ref().is_some_and(OneOrMany::is_empty) || spec.risk.as_ref().is_some_and(OneOrMany::is_empty) {
            return Err(rule_error(&spec, "an empty list matches nothing"));
        }
        if let Some(bad) = spec.tool.as_ref().and_then(|t| t.iter().find(|n| !is_valid_tool_name(n))) {
            return Err(rule_error(&spec, &format!("`{bad}` is not a valid tool name, so the rule could never match")));
        }
        let shell = match &spec.argv {
            None => None,
            Some(_) if spec.tool.is_none() => return Err(rule_error(&spec, "an `argv` rule must name its `tool`")),
            Some(p) => {
                let pat = ShellPattern::parse(p)?;
                Some(match layer {
                    Layer::Deny => ShellRules { deny: vec![pat], ..ShellRules::default() },
                    Layer::Ask => ShellRules { ask: vec![pat], ..ShellRules::default() },
                })
            }
        };
        let mut domains = Vec::new();
        if let Some(ds) = &spec.domains {
            if ds.is_empty() {
                return Err(rule_error(&spec, "an empty list matches nothing"));
            }
            for d in ds {
                let norm = d.trim_end_matches('.').to_ascii_lowercase();
                let host = norm.strip_prefix("*.").unwrap_or(&norm);
                let ok = !host.is_empty()
                    && host
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'[' | b']'));
                if !ok {
                    return Err(rule_error(&spec, &format!("domain `{d}` is neither a host nor `*.suffix`")));
                }
                domains.push(canonical_host(&norm));
            }
        }
        Ok(Rule { spec, shell, domains })
    }

    fn domain_matches(&self, host: &str) -> bool {
        self.domains.iter().any(|d| match d.strip_prefix("*.") {
            Some(suffix) => is_subdomain(host, suffix),
            None => host == d,
        })
    }

    /// Tool and risk criteria only.
    fn selects(&self, tool: &ToolDefinition) -> bool {
        self.spec.tool.as_ref().is_none_or(|t| t.contains(&tool.name))
            && self.spec.risk.as_ref().is_none_or(|r| r.contains(&RiskClass::of(tool.risk)))
    }

    fn check(&self, tool: &ToolDefinition, input: &Value) -> RuleMatch {
        if !self.selects(tool) {
            return RuleMatch::NoMatch;
        }
        let mut m = RuleMatch::Match;
        if let Some(shell) = &self.shell {
            m = m.and(match input.get(COMMAND_FIELD).and_then(Value::as_str) {
                None => RuleMatch::Uncertain,
                Some(cmd) => {
                    let o = shell.scan(cmd);
                    if o.deny_matched || o.ask_matched {
                        RuleMatch::Match
                    } else if o.uncertain {
                        RuleMatch::Uncertain
                    } else {
                        RuleMatch::NoMatch
                    }
                }
            });
        }
        if !self.domains.is_empty() {
            m = m.and(if tool.name != FETCH_TOOL {
                // Advisory only for every other tool: never changes the verdict.
                RuleMatch::NoMatch
            } else {
                match input.get("url").and_then(Value::as_str).and_then(url_host) {
                    None => RuleMatch::Uncertain,
                    Some(h) if self.domain_matches(&h) => RuleMatch::Match,
                    Some(_) => RuleMatch::NoMatch,
                }
            });
        }
        m
    }
}

/// The host of `scheme://[userinfo@]host[:port]/...`, lowercased, without a
/// trailing dot. `None` (so: uncertain, fail closed) when there is none, or
/// when URL parsers could disagree about it: a backslash, `%`, whitespace or
/// a control character in the authority, more than one `@`, a non-numeric
/// port, or a host that is not plain ASCII.
pub fn url_host(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let mut sb = scheme.bytes();
    if !sb.next().is_some_and(|b| b.is_ascii_alphabetic())
        || !sb.all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.bytes().any(|b| b == b'\\' || b == b'%' || b <= b' ' || b >= 0x7f)
        || authority.matches('@').count() > 1
    {
        return None;
    }
    let hostport = authority.rsplit('@').next().unwrap_or("");
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (inner, after) = v6.split_once(']')?;
        (format!("[{inner}]"), after.strip_prefix(':'))
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    if port.is_some_and(|p| !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let plain = host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'[' | b']'));
    (!host.is_empty() && plain).then(|| canonical_host(&host))
}

/// True when `host` is a subdomain of `suffix` (`a.example.com` of
/// `example.com`; not `example.com` itself, not `badexample.com`).
pub fn is_subdomain(host: &str, suffix: &str) -> bool {
    host.len() > suffix.len() + 1 && host.ends_with(suffix) && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
}

/// One spelling per IP address: an IPv6 address (bracketed or not) as
/// `[`its RFC 5952 form`]`, an IPv4-mapped one as its IPv4 address; any
/// other host unchanged.
pub fn canonical_host(host: &str) -> String {
    match host_ip(host) {
        Some(ip) => ip_host(ip),
        None => host.to_string(),
    }
}

/// An address as a URL host, in [`canonical_host`]'s spelling.
pub fn ip_host(ip: std::net::IpAddr) -> String {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// The address a host names when it is an IP literal (`1.2.3.4`, `::1`,
/// `[::1]`), IPv4-mapped IPv6 addresses taken as IPv4.
pub fn host_ip(host: &str) -> Option<std::net::IpAddr> {
    let inner = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    inner.parse::<std::net::IpAddr>().ok().map(|ip| ip.to_canonical())
}

/// Every URL host found in any string of a value (for advisory reports).
fn hosts_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(i) = rest.find("://") {
                // Just past the last character that cannot be part of a scheme
                // (which may be several bytes long).
                let start = rest[..i]
                    .char_indices()
                    .rfind(|&(_, c)| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
                    .map_or(0, |(j, c)| j + c.len_utf8());
                if let Some(h) = url_host(&rest[start..])
                    && !out.contains(&h)
                {
                    out.push(h);
                }
                rest = &rest[i + 3..];
            }
        }
        Value::Array(xs) => xs.iter().for_each(|x| hosts_in(x, out)),
        Value::Object(m) => m.values().for_each(|x| hosts_in(x, out)),
        _ => {}
    }
}

/// What a hook returns.
#[derive(Debug, Clone, PartialEq)]
pub enum HookDecision {
    /// Decisive allow.
    Allow,
    /// Decisive deny.
    Deny,
    /// Decisive ask.
    Ask,
    /// Substitute the input and continue.
    ModifiedInput(Value),
    /// No verdict: continue.
    Pass,
}

/// What `can_use_tool` returns.
#[derive(Debug, Clone, PartialEq)]
pub enum CanUseDecision {
    /// Decisive allow, even for a `needs_approval` tool.
    Allow,
    /// Decisive deny.
    Deny,
    /// Substitute the input and continue to the terminal default.
    ModifiedInput(Value),
    /// No verdict: continue to the terminal default.
    Pass,
}

/// A hook closure: `(tool_name, input) -> decision`. A panic denies.
pub type HookFn = Arc<dyn Fn(&str, &Value) -> HookDecision + Send + Sync>;
/// A `can_use_tool` closure: `(tool_name, input) -> decision`. A panic denies.
pub type CanUseToolFn = Arc<dyn Fn(&str, &Value) -> CanUseDecision + Send + Sync>;

/// A static hook for JSON configuration: when the tool (and risk) criteria
/// hold, return `verdict` or substitute `modified_input`; otherwise pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticHook {
    /// Tool name or names this hook applies to (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<OneOrMany<String>>,
    /// Risk class or classes this hook applies to (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<OneOrMany<RiskClass>>,
    /// The decisive verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// The substituted input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_input: Option<Value>,
}

impl StaticHook {
    fn applies(&self, tool: &ToolDefinition) -> bool {
        self.tool.as_ref().is_none_or(|t| t.contains(&tool.name))
            && self.risk.as_ref().is_none_or(|r| r.contains(&RiskClass::of(tool.risk)))
    }

    fn validate(&self, what: &str, allow_ask: bool) -> crate::Result<()> {
        let text = serde_json::to_string(self).unwrap_or_default();
        let bad = |why: &str| {
            crate::Error::config(
                "invalid_permission_hook",
                format!("invalid {what} `{text}`: {why}"),
                json!({"hook": self}),
            )
        };
        match (&self.verdict, &self.modified_input) {
            (Some(_), Some(_)) | (None, None) => Err(bad("give exactly one of `verdict` and `modified_input`")),
            (Some(Verdict::Ask), None) if !allow_ask => Err(bad("`can_use_tool` answers `allow` or `deny`, not `ask`")),
            _ => Ok(()),
        }
    }
}

/// A hook layer entry.
#[derive(Clone)]
pub enum Hook {
    /// A host closure.
    Closure(HookFn),
    /// A declarative hook from JSON.
    Static(StaticHook),
}

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hook::Closure(_) => f.write_str("Hook::Closure(..)"),
            Hook::Static(h) => f.debug_tuple("Hook::Static").field(h).finish(),
        }
    }
}

/// The `can_use_tool` slot.
#[derive(Clone)]
pub enum CanUseTool {
    /// A host closure.
    Closure(CanUseToolFn),
    /// A declarative decision from JSON (`verdict` is `allow` or `deny`).
    Static(StaticHook),
}

impl fmt::Debug for CanUseTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanUseTool::Closure(_) => f.write_str("CanUseTool::Closure(..)"),
            CanUseTool::Static(h) => f.debug_tuple("CanUseTool::Static").field(h).finish(),
        }
    }
}

/// One level of permission configuration (engine, profile, child profile).
#[derive(Debug, Clone, Default)]
pub struct PermissionConfig {
    /// A preset compiled into rules appended after this config's own.
    pub preset: Option<Preset>,
    /// Hooks, in order.
    pub hooks: Vec<Hook>,
    /// Deny rules.
    pub deny: Vec<RuleSpec>,
    /// Ask rules.
    pub ask: Vec<RuleSpec>,
    /// The `can_use_tool` slot.
    pub can_use_tool: Option<CanUseTool>,
    /// A child profile inherits its parent's chain only when true.
    pub inherit_permissions: bool,
}

/// The JSON shape of a [`PermissionConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigJson {
    #[serde(default)]
    preset: Option<String>,
    #[serde(default)]
    hooks: Vec<StaticHook>,
    #[serde(default)]
    deny: Vec<RuleSpec>,
    #[serde(default)]
    ask: Vec<RuleSpec>,
    #[serde(default)]
    can_use_tool: Option<StaticHook>,
    #[serde(default)]
    inherit_permissions: bool,
}

impl PermissionConfig {
    /// Reads `{preset?, hooks?, deny?, ask?, can_use_tool?, inherit_permissions?}`.
    pub fn from_value(v: Value) -> crate::Result<Self> {
        let c: ConfigJson = crate::ir::from_value(v)?;
        let preset = c.preset.as_deref().map(Preset::parse).transpose()?;
        for h in &c.hooks {
            h.validate("hook", true)?;
        }
        if let Some(h) = &c.can_use_tool {
            h.validate("can_use_tool", false)?;
        }
        Ok(PermissionConfig {
            preset,
            hooks: c.hooks.into_iter().map(Hook::Static).collect(),
            deny: c.deny,
            ask: c.ask,
            can_use_tool: c.can_use_tool.map(CanUseTool::Static),
            inherit_permissions: c.inherit_permissions,
        })
    }

    /// Adds a hook closure after the existing hooks.
    pub fn with_hook(mut self, f: impl Fn(&str, &Value) -> HookDecision + Send + Sync + 'static) -> Self {
        self.hooks.push(Hook::Closure(Arc::new(f)));
        self
    }

    /// Fills the `can_use_tool` slot with a closure.
    pub fn with_can_use_tool(mut self, f: impl Fn(&str, &Value) -> CanUseDecision + Send + Sync + 'static) -> Self {
        self.can_use_tool = Some(CanUseTool::Closure(Arc::new(f)));
        self
    }
}

/// The layer that decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DecidedBy {
    /// A hook.
    #[serde(rename = "hook")]
    Hook,
    /// A deny rule (also an argv or domain deny rule that could not be ruled out: ask).
    #[serde(rename = "deny-rule")]
    DenyRule,
    /// An ask rule.
    #[serde(rename = "ask-rule")]
    AskRule,
    /// The `can_use_tool` slot.
    #[serde(rename = "can_use_tool")]
    CanUseTool,
    /// A shell allowlist (`[shell] allow`): consulted only after the deny
    /// layer, so a deny rule always wins over an allow pattern.
    #[serde(rename = "shell-allow")]
    ShellAllow,
    /// The terminal default.
    #[serde(rename = "default")]
    Default,
}

impl DecidedBy {
    /// The wire spelling (`hook`, `deny-rule`, `ask-rule`, `can_use_tool`, `default`).
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Hook => "hook",
            DecidedBy::DenyRule => "deny-rule",
            DecidedBy::AskRule => "ask-rule",
            DecidedBy::CanUseTool => "can_use_tool",
            DecidedBy::ShellAllow => "shell-allow",
            DecidedBy::Default => "default",
        }
    }
}

/// A domain rule that matched a non-fetch tool: reported, never enforced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advisory {
    /// `deny` or `ask`: the table the rule sits in.
    pub layer: String,
    /// The rule.
    pub rule: RuleSpec,
    /// The host found in the input.
    pub host: String,
}

/// The result of evaluating the chain for one call (also the dry run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionEvaluation {
    /// The verdict.
    pub verdict: Verdict,
    /// The deciding layer.
    pub decided_by: DecidedBy,
    /// The matched rule, for the rule layers.
    pub rule: Option<RuleSpec>,
    /// The input after hooks (and `can_use_tool`): what execute would receive.
    pub input: Value,
    /// Domain rules matched by a non-fetch tool.
    pub advisory: Vec<Advisory>,
    /// A human-readable reason (the policy reason a deny carries).
    pub reason: String,
}

impl PermissionEvaluation {
    /// The evaluation as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A compiled chain. Cheap to clone; `Send + Sync`; evaluation is pure.
#[derive(Debug, Clone, Default)]
pub struct PermissionChain {
    hooks: Vec<Hook>,
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    can_use_tool: Option<CanUseTool>,
    /// `(tool, rules)`: a shell allowlist for one tool's `command` input.
    shell_allow: Option<(String, Arc<super::shell::ShellRules>)>,
}

fn compile_rules(specs: &[RuleSpec], layer: Layer, out: &mut Vec<Rule>) -> crate::Result<()> {
    for s in specs {
        out.push(Rule::compile(s.clone(), layer)?);
    }
    Ok(())
}

impl PermissionChain {
    /// The empty chain: every call falls to the terminal default.
    pub fn new() -> Self {
        Self::default()
    }

    /// One configuration alone.
    pub fn from_config(config: &PermissionConfig) -> crate::Result<Self> {
        Self::compile(config, None)
    }

    /// Engine and profile merged engine first: hooks and rules in that order,
    /// then the presets' rules (engine's, then profile's); the profile's
    /// `can_use_tool` wins the single slot.
    pub fn compile(engine: &PermissionConfig, profile: Option<&PermissionConfig>) -> crate::Result<Self> {
        let layers: Vec<&PermissionConfig> = std::iter::once(engine).chain(profile).collect();
        let mut chain = PermissionChain::new();
        for c in &layers {
            chain.hooks.extend(c.hooks.iter().cloned());
            compile_rules(&c.deny, Layer::Deny, &mut chain.deny)?;
            compile_rules(&c.ask, Layer::Ask, &mut chain.ask)?;
        }
        for c in &layers {
            if let Some(p) = c.preset {
                let compiled = p.compile();
                compile_rules(&compiled.deny, Layer::Deny, &mut chain.deny)?;
                compile_rules(&compiled.ask, Layer::Ask, &mut chain.ask)?;
            }
            if c.can_use_tool.is_some() {
                chain.can_use_tool = c.can_use_tool.clone();
            }
        }
        Ok(chain)
    }

    /// The chain of a child agent: with `inherit_permissions`, the parent's
    /// chain followed by the child profile's own layers; without it (the
    /// default), the engine layer and the child profile only.
    pub fn for_child(&self, engine: &PermissionConfig, profile: &PermissionConfig) -> crate::Result<Self> {
        if !profile.inherit_permissions {
            return Self::compile(engine, Some(profile));
        }
        let own = Self::from_config(profile)?;
        let mut chain = self.clone();
        chain.hooks.extend(own.hooks);
        chain.deny.extend(own.deny);
        chain.ask.extend(own.ask);
        if own.can_use_tool.is_some() {
            chain.can_use_tool = own.can_use_tool;
        }
        Ok(chain)
    }

    /// Reads a chain from JSON: one configuration, or `{engine, profile}`.
    pub fn from_json(v: &Value) -> crate::Result<Self> {
        let obj =
            v.as_object().ok_or_else(|| crate::Error::invalid_argument("chain", "expected a configuration object"))?;
        if obj.contains_key("engine") || obj.contains_key("profile") {
            if let Some(k) = obj.keys().find(|k| *k != "engine" && *k != "profile") {
                return Err(crate::Error::invalid_argument(
                    "chain",
                    format!("unknown field `{k}` beside `engine`/`profile`"),
                ));
            }
            let part = |k: &str| obj.get(k).cloned().map(PermissionConfig::from_value).transpose();
            let engine = part("engine")?.unwrap_or_default();
            let profile = part("profile")?;
            return Self::compile(&engine, profile.as_ref());
        }
        Self::from_config(&PermissionConfig::from_value(v.clone())?)
    }

    /// Adds the deny rule readonly isolation compiles: risk `write` or `destructive`.
    pub fn with_readonly_isolation(mut self) -> Self {
        let spec = RuleSpec {
            risk: Some(OneOrMany::Many(vec![RiskClass::Write, RiskClass::Destructive])),
            ..RuleSpec::default()
        };
        if let Ok(rule) = Rule::compile(spec, Layer::Deny) {
            self.deny.push(rule);
        }
        self
    }

    /// Adds a shell allowlist for `tool`'s `command` input: a command every
    /// segment of which the rules allow (no deny or ask pattern matching, no
    /// uncertain segment) is allowed, but only after the whole deny layer
    /// found nothing: an allow pattern never overrides a deny rule. It is
    /// consulted before the ask layer, so it lifts a preset's ask for the
    /// commands it names.
    pub fn with_shell_allow(mut self, tool: impl Into<String>, rules: super::shell::ShellRules) -> Self {
        self.shell_allow = Some((tool.into(), Arc::new(rules)));
        self
    }

    /// True when no layer is configured: every call gets the terminal default.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
            && self.deny.is_empty()
            && self.ask.is_empty()
            && self.can_use_tool.is_none()
            && self.shell_allow.is_none()
    }

    /// The deny rules in evaluation order.
    pub fn deny_rules(&self) -> Vec<RuleSpec> {
        self.deny.iter().map(|r| r.spec.clone()).collect()
    }

    /// The ask rules in evaluation order.
    pub fn ask_rules(&self) -> Vec<RuleSpec> {
        self.ask.iter().map(|r| r.spec.clone()).collect()
    }

    /// Evaluates a call of a tool known only by name (risk `undeclared`).
    pub fn evaluate_named(&self, tool: &str, input: &Value) -> PermissionEvaluation {
        self.evaluate(&ToolDefinition::undeclared(tool), input)
    }

    /// Evaluates one call; nothing executes.
    pub fn evaluate(&self, tool: &ToolDefinition, input: &Value) -> PermissionEvaluation {
        self.evaluate_owned(tool, input.clone())
    }

    /// [`Self::evaluate`] taking the input by value (no copy of it).
    pub fn evaluate_owned(&self, tool: &ToolDefinition, mut input: Value) -> PermissionEvaluation {
        let mut decided = self.decide(tool, &mut input);
        decided.advisory = self.advisory(tool, &decided.input);
        decided
    }

    fn decide(&self, tool: &ToolDefinition, input: &mut Value) -> PermissionEvaluation {
        let done = |verdict, by, rule, input: &Value, reason: String| PermissionEvaluation {
            verdict,
            decided_by: by,
            rule,
            input: input.clone(),
            advisory: Vec::new(),
            reason,
        };
        for (i, hook) in self.hooks.iter().enumerate() {
            let decision = match hook {
                Hook::Closure(f) => catch_unwind(AssertUnwindSafe(|| f(&tool.name, input))).ok(),
                Hook::Static(h) if !h.applies(tool) => Some(HookDecision::Pass),
                Hook::Static(h) => Some(match (&h.verdict, &h.modified_input) {
                    (Some(Verdict::Allow), _) => HookDecision::Allow,
                    (Some(Verdict::Ask), _) => HookDecision::Ask,
                    (Some(Verdict::Deny), _) => HookDecision::Deny,
                    (None, Some(v)) => HookDecision::ModifiedInput(v.clone()),
                    (None, None) => HookDecision::Pass,
                }),
            };
            let name = &tool.name;
            match decision {
                None => {
                    return done(
                        Verdict::Deny,
                        DecidedBy::Hook,
                        None,
                        input,
                        format!("hook #{i} panicked on tool `{name}`; denied"),
                    );
                }
                Some(HookDecision::Allow) => {
                    return done(
                        Verdict::Allow,
                        DecidedBy::Hook,
                        None,
                        input,
                        format!("hook #{i} allowed tool `{name}`"),
                    );
                }
                Some(HookDecision::Deny) => {
                    return done(
                        Verdict::Deny,
                        DecidedBy::Hook,
                        None,
                        input,
                        format!("hook #{i} denied tool `{name}`"),
                    );
                }
                Some(HookDecision::Ask) => {
                    return done(
                        Verdict::Ask,
                        DecidedBy::Hook,
                        None,
                        input,
                        format!("hook #{i} asks for tool `{name}`"),
                    );
                }
                Some(HookDecision::ModifiedInput(v)) => *input = v,
                Some(HookDecision::Pass) => {}
            }
        }
        if let Some(e) = self.rule_layers(tool, input) {
            return e;
        }
        let name = &tool.name;
        if let Some(slot) = &self.can_use_tool {
            let decision = match slot {
                CanUseTool::Closure(f) => catch_unwind(AssertUnwindSafe(|| f(name, input))).ok(),
                CanUseTool::Static(h) if !h.applies(tool) => Some(CanUseDecision::Pass),
                CanUseTool::Static(h) => Some(match (&h.verdict, &h.modified_input) {
                    (Some(Verdict::Allow), _) => CanUseDecision::Allow,
                    (Some(_), _) => CanUseDecision::Deny,
                    (None, Some(v)) => CanUseDecision::ModifiedInput(v.clone()),
                    (None, None) => CanUseDecision::Pass,
                }),
            };
            match decision {
                None => {
                    let r = format!("can_use_tool panicked on tool `{name}`; denied");
                    return done(Verdict::Deny, DecidedBy::CanUseTool, None, input, r);
                }
                Some(CanUseDecision::Allow) => {
                    let r = format!("can_use_tool allowed tool `{name}`");
                    return done(Verdict::Allow, DecidedBy::CanUseTool, None, input, r);
                }
                Some(CanUseDecision::Deny) => {
                    let r = format!("can_use_tool denied tool `{name}`");
                    return done(Verdict::Deny, DecidedBy::CanUseTool, None, input, r);
                }
                Some(CanUseDecision::ModifiedInput(v)) => {
                    *input = v;
                    // The substituted input must pass the rule tables too.
                    if let Some(e) = self.rule_layers(tool, input) {
                        return e;
                    }
                }
                Some(CanUseDecision::Pass) => {}
            }
        }
        if tool.needs_approval {
            done(Verdict::Ask, DecidedBy::Default, None, input, format!("tool `{name}` needs approval"))
        } else {
            done(Verdict::Allow, DecidedBy::Default, None, input, format!("tool `{name}` allowed by default"))
        }
    }

    /// What the domain rules say about the fetch tool `tool` reaching
    /// `host` (a name, an IPv4 address or a bracketed IPv6 address, as
    /// [`url_host`] gives it): a deny rule naming it refuses; with
    /// `with_ask`, an ask rule naming it refuses too (the first-party fetch
    /// tool checks redirect targets and resolved addresses mid-call, where
    /// no approval can be waited for). A rule that also has other criteria
    /// counts as matching (fail closed). `None`: no domain rule names it.
    pub fn domain_refusal(&self, tool: &ToolDefinition, host: &str, with_ask: bool) -> Option<String> {
        let text = |r: &Rule| serde_json::to_string(&r.spec).unwrap_or_default();
        let hit = |r: &&Rule| !r.domains.is_empty() && r.selects(tool) && r.domain_matches(host);
        if let Some(rule) = self.deny.iter().find(hit) {
            return Some(format!("`{host}` is denied by rule `{}`", text(rule)));
        }
        if with_ask && let Some(rule) = self.ask.iter().find(hit) {
            return Some(format!(
                "`{host}` asks by rule `{}`, and a fetch cannot wait for an approval in the middle of a call",
                text(rule)
            ));
        }
        None
    }

    /// The deny layer, then the ask layer.
    fn rule_layers(&self, tool: &ToolDefinition, input: &Value) -> Option<PermissionEvaluation> {
        let name = &tool.name;
        let eval = |verdict, by, rule: &Rule, reason: String| PermissionEvaluation {
            verdict,
            decided_by: by,
            rule: Some(rule.spec.clone()),
            input: input.clone(),
            advisory: Vec::new(),
            reason,
        };
        let text = |r: &Rule| serde_json::to_string(&r.spec).unwrap_or_default();
        let mut uncertain = None;
        for rule in &self.deny {
            match rule.check(tool, input) {
                RuleMatch::Match => {
                    let r = format!("tool `{name}` is denied by rule `{}`", text(rule));
                    return Some(eval(Verdict::Deny, DecidedBy::DenyRule, rule, r));
                }
                RuleMatch::Uncertain => {
                    uncertain.get_or_insert(rule);
                }
                RuleMatch::NoMatch => {}
            }
        }
        if let Some(rule) = uncertain {
            let r = format!("tool `{name}`: deny rule `{}` cannot be ruled out; asking", text(rule));
            return Some(eval(Verdict::Ask, DecidedBy::DenyRule, rule, r));
        }
        if let Some((tool_name, rules)) = &self.shell_allow
            && tool_name == name
            && let Some(cmd) = input.get("command").and_then(Value::as_str)
            && rules.check(cmd) == Verdict::Allow
        {
            return Some(PermissionEvaluation {
                verdict: Verdict::Allow,
                decided_by: DecidedBy::ShellAllow,
                rule: None,
                input: input.clone(),
                advisory: Vec::new(),
                reason: format!("every segment of the `{name}` command matches a shell allow pattern"),
            });
        }
        for rule in &self.ask {
            if rule.check(tool, input) != RuleMatch::NoMatch {
                let r = format!("tool `{name}` asks by rule `{}`", text(rule));
                return Some(eval(Verdict::Ask, DecidedBy::AskRule, rule, r));
            }
        }
        None
    }

    fn advisory(&self, tool: &ToolDefinition, input: &Value) -> Vec<Advisory> {
        if tool.name == FETCH_TOOL {
            return Vec::new();
        }
        let mut hosts = Vec::new();
        let mut out = Vec::new();
        let tables = [("deny", &self.deny), ("ask", &self.ask)];
        for (layer, rules) in tables {
            for rule in rules.iter().filter(|r| !r.domains.is_empty() && r.selects(tool)) {
                if hosts.is_empty() {
                    hosts_in(input, &mut hosts);
                }
                for h in hosts.iter().filter(|h| rule.domain_matches(h)) {
                    out.push(Advisory { layer: layer.to_string(), rule: rule.spec.clone(), host: h.clone() });
                }
            }
        }
        out
    }
}

/// `evaluate_permission(chain, tool, input)`: the dry run.
pub fn evaluate_permission(chain: &PermissionChain, tool: &ToolDefinition, input: &Value) -> PermissionEvaluation {
    chain.evaluate(tool, input)
}

/// An empty JSON object, the input of a call with no arguments.
pub fn empty_input() -> Value {
    Value::Object(Map::new())
}

#[cfg(test)]
mod tests {
    use super::url_host;

    #[test]
    fn url_hosts() {
        let h = |u: &str| url_host(u);
        assert_eq!(h("https://Example.COM./a").as_deref(), Some("example.com"));
        assert_eq!(h("http://user:pw@host.example:8080/x").as_deref(), Some("host.example"));
        assert_eq!(h("http://[::1]:80/").as_deref(), Some("[::1]"));
        assert_eq!(h("https://a.example?x=//b").as_deref(), Some("a.example"));
        for ambiguous in [
            "https://good.example\\@evil.example/",
            "https://a@b@evil.example/",
            "https://evil%2eexample/",
            "https://evil.example:80x/",
            "https://ev il.example/",
            "https://évil.example/",
            "https:///path",
            "no scheme",
            "1http://x/",
        ] {
            assert_eq!(h(ambiguous), None, "{ambiguous}");
        }
    }
}
