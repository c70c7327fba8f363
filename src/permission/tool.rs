//! Tool contracts: definitions validated at definition time, toolsets checked
//! for duplicate names when assembled, and `toolset_hash`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::ir::ToolSchema;

/// Declarative risk class of a tool: policy input, never identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Reads only.
    Read,
    /// Writes local state.
    Write,
    /// Talks to the network.
    Network,
    /// Runs code or commands.
    Execute,
    /// Destroys data.
    Destructive,
}

impl Risk {
    /// The lowercase spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Read => "read",
            Risk::Write => "write",
            Risk::Network => "network",
            Risk::Execute => "execute",
            Risk::Destructive => "destructive",
        }
    }
}

/// Where a tool's implementation runs: `inprocess` and `subprocess` are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Executor {
    /// In the runtime's own process (default).
    #[default]
    Inprocess,
    /// In a sandboxed child process (`crate::sandbox`).
    Subprocess,
    /// In a container (planned, not served).
    Container,
}

/// What an operation does (`plan-apply-gate.md`): only `resource` calls
/// reach allow/ask/deny; for `data_source` and `interactive` calls an ask is
/// a deny (the precheck).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Mutates something; gated by allow/ask/deny (the default for an
    /// operation that declares no kind).
    #[default]
    Resource,
    /// Reads only; prechecked allow/deny, executed concurrently.
    DataSource,
    /// Asks a human; prechecked allow/deny, executed sequentially.
    Interactive,
}

impl ToolKind {
    /// The snake_case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Resource => "resource",
            ToolKind::DataSource => "data_source",
            ToolKind::Interactive => "interactive",
        }
    }

    /// True for the kinds whose ask is a deny (`data_source`, `interactive`).
    pub fn is_precheck(self) -> bool {
        self != ToolKind::Resource
    }

    fn is_resource(&self) -> bool {
        *self == ToolKind::Resource
    }
}

/// A tool definition: contract fields (hashed) and policy fields (not hashed).
///
/// Construct with [`ToolDefinition::new`] or [`ToolDefinition::from_value`],
/// which validate the name, the schema and the executor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDefinition {
    /// What the model calls; `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    /// What the model reads; default "".
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the input (supported draft 2020-12 subset); default `{}`.
    #[serde(default = "empty_object")]
    pub parameters: Value,
    /// Opaque version marker; absent stays absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Where the implementation runs; default `inprocess`.
    #[serde(default)]
    pub executor: Executor,
    /// Flips the terminal permission default to ask.
    #[serde(default)]
    pub needs_approval: bool,
    /// Declared risk; `None` is the `undeclared` state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<Risk>,
    /// What the tool does; default `resource`.
    #[serde(default, skip_serializing_if = "ToolKind::is_resource")]
    pub kind: ToolKind,
    /// A `subprocess` tool's argv template: the program, then arguments in
    /// which `{param}` is replaced by a validated parameter (never a shell
    /// string; see `crate::sandbox::template`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A `subprocess` tool's sandbox profile (`docs/sandbox.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// True for a legal tool name: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks a tool name; an illegal one is an `invalid_tool_name` error.
pub fn validate_tool_name(name: &str) -> crate::Result<()> {
    if is_valid_tool_name(name) {
        Ok(())
    } else {
        Err(crate::Error::config(
            "invalid_tool_name",
            format!("invalid tool name `{name}`: it must match ^[a-zA-Z0-9_-]{{1,64}}$"),
            json!({"tool": name}),
        ))
    }
}

/// Keywords of the supported draft 2020-12 subset. Unknown keywords are
/// rejected (fail closed): a misspelt `requird` would otherwise silently
/// validate nothing. `x-` prefixed vendor annotations are allowed.
const KNOWN_KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$defs",
    "definitions",
    "$anchor",
    "$comment",
    "$vocabulary",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "items",
    "prefixItems",
    "additionalItems",
    "contains",
    "minContains",
    "maxContains",
    "maxItems",
    "minItems",
    "uniqueItems",
    "unevaluatedItems",
    "properties",
    "patternProperties",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "required",
    "dependentRequired",
    "dependentSchemas",
    "maxProperties",
    "minProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
];

/// Keywords outside the subset, rejected with their own reason.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("$dynamicRef", "dynamic references are not supported"),
    ("$dynamicAnchor", "dynamic references are not supported"),
    ("$recursiveRef", "dynamic references are not supported"),
    ("$recursiveAnchor", "dynamic references are not supported"),
];

fn schema_error(tool: &str, path: &str, why: impl std::fmt::Display) -> crate::Error {
    crate::Error::config(
        "unsupported_schema",
        format!("tool `{tool}`: parameters schema at `{path}` is outside the supported subset: {why}"),
        json!({"tool": tool, "path": path}),
    )
}

/// Walks a schema: every keyword known, no remote or dynamic reference.
fn check_schema(tool: &str, schema: &Value, path: &str) -> crate::Result<()> {
    let obj = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(o) => o,
        other => {
            return Err(schema_error(tool, path, format!("a schema must be an object or a boolean, not `{other}`")));
        }
    };
    for (k, v) in obj {
        let here = format!("{path}/{k}");
        if let Some((_, why)) = UNSUPPORTED.iter().find(|(kw, _)| kw == k) {
            return Err(schema_error(tool, &here, why));
        }
        if k.starts_with("x-") {
            continue;
        }
        if !KNOWN_KEYWORDS.contains(&k.as_str()) {
            return Err(schema_error(tool, &here, format!("unknown keyword `{k}`")));
        }
        match k.as_str() {
            "$ref" => match v.as_str() {
                Some(r) if r.starts_with('#') => {}
                _ => {
                    return Err(schema_error(
                        tool,
                        &here,
                        format!("only local `#...` references are supported, not `{v}`"),
                    ));
                }
            },
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                let map = v.as_object().ok_or_else(|| schema_error(tool, &here, "expected an object of schemas"))?;
                for (name, sub) in map {
                    check_schema(tool, sub, &format!("{here}/{name}"))?;
                }
            }
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                let list = v.as_array().ok_or_else(|| schema_error(tool, &here, "expected an array of schemas"))?;
                for (i, sub) in list.iter().enumerate() {
                    check_schema(tool, sub, &format!("{here}/{i}"))?;
                }
            }
            "items"
            | "additionalItems"
            | "contains"
            | "additionalProperties"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "propertyNames"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contentSchema" => {
                if let Value::Array(list) = v
                    && k == "items"
                {
                    for (i, sub) in list.iter().enumerate() {
                        check_schema(tool, sub, &format!("{here}/{i}"))?;
                    }
                } else {
                    check_schema(tool, v, &here)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Validates a parameters schema: an object schema within the supported
/// subset that compiles as draft 2020-12 without any remote resource.
///
/// Compiling a schema is the costly part of building an admission stage
/// (a daemon builds one per connection, from the same definitions), so the
/// texts of the schemas that passed are remembered, a bounded number of
/// them and only those of at most 16 KiB (at most 16 MiB in all, whatever
/// clients register): the check depends on the schema alone, and an equal
/// text is an equal schema. A failure is checked again every time (its
/// error names the tool).
pub fn validate_parameters_schema(tool: &str, schema: &Value) -> crate::Result<()> {
    /// How many passed schemas are remembered before the memory starts again.
    const PASSED_MAX: usize = 1024;
    /// The longest schema text remembered.
    const PASSED_TEXT_MAX: usize = 16 * 1024;
    static PASSED: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());
    if !schema.is_object() {
        return Err(schema_error(tool, "#", "the parameters schema must be a JSON object"));
    }
    let text = schema.to_string();
    let kept = text.len() <= PASSED_TEXT_MAX;
    if kept && PASSED.lock().is_ok_and(|p| p.contains(&text)) {
        return Ok(());
    }
    check_schema(tool, schema, "#")?;
    jsonschema::draft202012::new(schema).map_err(|e| schema_error(tool, "#", format!("it does not compile: {e}")))?;
    if kept && let Ok(mut p) = PASSED.lock() {
        if p.len() >= PASSED_MAX {
            p.clear();
        }
        p.insert(text);
    }
    Ok(())
}

impl ToolDefinition {
    /// A validated definition with no version, no risk, not needing approval.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> crate::Result<Self> {
        let def = ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters,
            version: None,
            executor: Executor::Inprocess,
            needs_approval: false,
            risk: None,
            kind: ToolKind::Resource,
            command: None,
            sandbox: None,
        };
        def.validate()?;
        Ok(def)
    }

    /// A definition known only by name (an IR tool with no contract): risk
    /// `undeclared`, no approval flag. Not validated: it carries no contract.
    pub fn undeclared(name: impl Into<String>) -> Self {
        ToolDefinition {
            name: name.into(),
            description: String::new(),
            parameters: empty_object(),
            version: None,
            executor: Executor::Inprocess,
            needs_approval: false,
            risk: None,
            kind: ToolKind::Resource,
            command: None,
            sandbox: None,
        }
    }

    /// Reads and validates a definition from JSON.
    pub fn from_value(v: Value) -> crate::Result<Self> {
        let def: ToolDefinition = crate::ir::from_value(v)?;
        def.validate()?;
        Ok(def)
    }

    /// Sets the version marker.
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// Sets the declared risk.
    pub fn with_risk(mut self, risk: Risk) -> Self {
        self.risk = Some(risk);
        self
    }

    /// Sets `needs_approval`.
    pub fn with_needs_approval(mut self, needs_approval: bool) -> Self {
        self.needs_approval = needs_approval;
        self
    }

    /// Sets the executor (validated again by [`ToolDefinition::validate`]).
    pub fn with_executor(mut self, executor: Executor) -> crate::Result<Self> {
        self.executor = executor;
        self.validate()?;
        Ok(self)
    }

    /// Definition-time checks: the name, the schema subset, the executor.
    pub fn validate(&self) -> crate::Result<()> {
        validate_tool_name(&self.name)?;
        validate_parameters_schema(&self.name, &self.parameters)?;
        if self.executor == Executor::Subprocess {
            let Some(command) = &self.command else {
                return Err(crate::Error::config(
                    "invalid_subprocess_tool",
                    format!("tool `{}`: executor `subprocess` needs `command` (an argv template)", self.name),
                    json!({"tool": self.name, "field": "command"}),
                ));
            };
            return crate::sandbox::template::check(&self.name, command, &self.parameters);
        }
        if self.command.is_some() || self.sandbox.is_some() {
            let field = if self.command.is_some() { "command" } else { "sandbox" };
            return Err(crate::Error::config(
                "invalid_subprocess_tool",
                format!("tool `{}`: `{field}` is only for executor `subprocess`", self.name),
                json!({"tool": self.name, "field": field}),
            ));
        }
        if self.executor != Executor::Inprocess {
            let ex = serde_json::to_value(self.executor).ok().and_then(|v| v.as_str().map(str::to_string));
            let ex = ex.unwrap_or_default();
            return Err(crate::Error::config(
                "unsupported_executor",
                format!(
                    "tool `{}`: executor `{ex}` cannot be served; only `inprocess` and `subprocess` are",
                    self.name
                ),
                json!({"tool": self.name, "executor": ex}),
            ));
        }
        Ok(())
    }

    /// The contract tuple `{name, description, parameters, version?}`.
    pub fn contract(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), Value::String(self.name.clone()));
        m.insert("description".into(), Value::String(self.description.clone()));
        m.insert("parameters".into(), self.parameters.clone());
        if let Some(v) = &self.version {
            m.insert("version".into(), Value::String(v.clone()));
        }
        Value::Object(m)
    }
}

impl From<&ToolSchema> for ToolDefinition {
    /// The contract half of an IR tool schema; risk stays undeclared.
    fn from(s: &ToolSchema) -> Self {
        ToolDefinition {
            name: s.name.clone(),
            description: s.description.clone(),
            parameters: s.parameters.clone(),
            version: None,
            executor: Executor::Inprocess,
            needs_approval: false,
            risk: None,
            kind: ToolKind::Resource,
            command: None,
            sandbox: None,
        }
    }
}

/// An assembled toolset: unique names, frozen.
#[derive(Debug, Clone, PartialEq)]
pub struct Toolset {
    tools: Vec<ToolDefinition>,
}

impl Toolset {
    /// Assembles a toolset; two tools with one name is a `duplicate_tool` error.
    pub fn new(tools: Vec<ToolDefinition>) -> crate::Result<Self> {
        let mut seen = BTreeSet::new();
        for t in &tools {
            if !seen.insert(t.name.as_str()) {
                return Err(crate::Error::config(
                    "duplicate_tool",
                    format!("duplicate tool name `{}` in one toolset", t.name),
                    json!({"tool": t.name}),
                ));
            }
        }
        Ok(Toolset { tools })
    }

    /// The tools in the order given.
    pub fn tools(&self) -> &[ToolDefinition] {
        &self.tools
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&ToolDefinition> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The toolset's contract hash.
    pub fn hash(&self) -> crate::Result<String> {
        let mut contracts: Vec<(&str, Value)> = self.tools.iter().map(|t| (t.name.as_str(), t.contract())).collect();
        contracts.sort_by(|a, b| a.0.cmp(b.0));
        let array = Value::Array(contracts.into_iter().map(|(_, c)| c).collect());
        let canonical = serde_jcs::to_vec(&array).map_err(|e| {
            crate::Error::runtime("canonicalization_failed", format!("cannot canonicalize toolset: {e}"))
        })?;
        Ok(hex::encode(Sha256::digest(&canonical)))
    }
}

/// `toolset_hash(tools)`: SHA-256 (lowercase hex) over the RFC 8785 canonical
/// JSON of the contract tuples sorted by name. Duplicate names are an error.
pub fn toolset_hash(tools: &[ToolDefinition]) -> crate::Result<String> {
    Toolset::new(tools.to_vec())?.hash()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "search_issues", "A-b_9", &"x".repeat(64)] {
            assert!(is_valid_tool_name(ok), "{ok}");
        }
        for bad in ["", "a.b", "a b", "é", "a/b", &"x".repeat(65), "a\n"] {
            let e = validate_tool_name(bad).unwrap_err();
            assert_eq!(e.code(), "invalid_tool_name");
            assert!(e.to_string().contains(&format!("`{bad}`")));
        }
    }

    #[test]
    fn schema_subset() {
        let ok = json!({"type":"object","properties":{"q":{"type":"string"},"n":{"$ref":"#/$defs/n"}},
            "$defs":{"n":{"type":"integer","minimum":1}},"required":["q"],"x-ui":"hidden"});
        assert!(validate_parameters_schema("t", &ok).is_ok());
        for (bad, needle) in [
            (json!({"$ref":"https://example.com/s.json"}), "$ref"),
            (json!({"properties":{"a":{"$dynamicRef":"#x"}}}), "$dynamicRef"),
            (json!({"type":"object","requird":["q"]}), "requird"),
            (json!({"type":"object","properties":{"a":{"type":"strin"}}}), "compile"),
            (json!({"pattern":"("}), "compile"),
            (json!("string"), "object"),
        ] {
            let e = validate_parameters_schema("t", &bad).unwrap_err();
            assert_eq!(e.code(), "unsupported_schema", "{bad}");
            assert!(e.to_string().contains(needle), "{e}");
        }
    }

    /// A schema that passed passes again (from memory), one that failed
    /// fails again naming the tool it is checked for, a schema differing
    /// only in a nested value is checked on its own, and past the memory's
    /// bound every answer stays the same.
    #[test]
    fn remembered_schemas_answer_as_checked_ones() {
        let ok = json!({"type":"object","properties":{"remembered":{"type":"string","maxLength":3}}});
        let bad = json!({"type":"object","properties":{"remembered":{"type":"strin"}}});
        for round in 0..3 {
            assert!(validate_parameters_schema("a", &ok).is_ok());
            let tool = format!("tool{round}");
            let e = validate_parameters_schema(&tool, &bad).unwrap_err();
            assert!(e.to_string().contains(&tool), "{e}");
            let near = json!({"type":"object","properties":{"remembered":{"type":"string","maxLength":"3"}}});
            assert!(validate_parameters_schema("a", &near).is_err(), "a near copy of a passed schema");
        }
        for i in 0..1100 {
            let each = json!({"type":"object","properties":{format!("p{i}"):{"type":"integer"}}});
            assert!(validate_parameters_schema("a", &each).is_ok());
        }
        // A schema too long to remember is checked each time.
        let long = json!({"type":"object","description":"x".repeat(20_000),"properties":{"a":{"type":"string"}}});
        let long_bad = json!({"type":"object","description":"x".repeat(20_000),"properties":{"a":{"type":"strin"}}});
        for _ in 0..2 {
            assert!(validate_parameters_schema("a", &long).is_ok());
            assert!(validate_parameters_schema("a", &long_bad).is_err());
        }
        assert!(validate_parameters_schema("a", &ok).is_ok());
        assert!(validate_parameters_schema("b", &bad).is_err());
    }
}
