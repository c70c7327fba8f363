//! MCP (Model Context Protocol) servers as tool sources, and the gateway
//! (`car mcp serve`) that puts the admission stage in front of them.
//!
//! The `mcp` section of the admission configuration document names the
//! servers (JSON shown; TOML `[mcp.servers.NAME]` is the same document):
//!
//! ```json
//! {"mcp": {"servers": {
//!   "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
//!          "env": {"NODE_ENV": "production"}, "cwd": "/srv",
//!          "prefix": "fs_", "include": ["read_*", "write_file"], "exclude": ["write_file"],
//!          "risk": {"read_text_file": "read"}, "needs_approval": {"move_file": true},
//!          "pin": true, "pinned": {"read_text_file": "<contract hash>"}}
//! }}}
//! ```
//!
//! Each remote tool becomes a registered tool (source `mcp`) named
//! `prefix + remote name`, whose contract is the remote name, description
//! and input schema (so parameters are validated before dispatch), and an
//! admission definition whose risk is the `risk` map entry, else the one the
//! tool's annotations imply ([`risk_from_annotations`]), else undeclared.
//! Calls pass the admission stage like every tool; the executor side is
//! [`McpHub`] (feature `mcp`).
//!
//! The types here are always compiled so a document with an `mcp` section
//! reads the same everywhere; connecting needs the `mcp` feature.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::permission::Risk;

#[cfg(feature = "mcp")]
mod client;
#[cfg(feature = "mcp")]
pub mod gateway;
#[cfg(feature = "mcp")]
pub mod http;
#[cfg(feature = "mcp")]
pub use client::{McpDispatch, McpHub};

/// The `mcp` section: MCP servers by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The servers, by a name of the operator's choosing.
    #[serde(default)]
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// One MCP server used as a tool source.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// stdio: the program to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: variables added to its environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// stdio: its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Streamable HTTP: the endpoint URL (`http://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Streamable HTTP: the environment variable holding a bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env: Option<String>,
    /// Prepended to every remote tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Only these remote tools (names; a trailing `*` matches a prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
    /// Never these remote tools (same patterns; wins over `include`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Declared risk by remote tool name (wins over annotations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub risk: BTreeMap<String, Risk>,
    /// `needs_approval` by remote tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub needs_approval: BTreeMap<String, bool>,
    /// Refuse a tool whose contract changed since it was accepted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pin: bool,
    /// The accepted contract hashes by remote tool name (with `pin`); without
    /// it the contracts seen at the first connection are the accepted ones.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pinned: BTreeMap<String, String>,
    /// Import the server's resources (when it declares them) as the tool
    /// `<prefix>read_resource` (`{uri}`), so every read passes admission;
    /// the gateway also forwards `resources/list`, templates and
    /// subscriptions of such a server.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resources: bool,
    /// Import the server's prompts (when it declares them) as the tool
    /// `<prefix>get_prompt` (`{name, arguments}`); the gateway also forwards
    /// `prompts/list` (names with the prefix) and argument completion.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prompts: bool,
}

fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(p) => name.starts_with(p),
        None => pattern == name,
    }
}

impl McpServerConfig {
    /// True when the remote tool passes `include` / `exclude`.
    pub fn selects(&self, remote: &str) -> bool {
        let included = self.include.as_ref().is_none_or(|inc| inc.iter().any(|p| pattern_matches(p, remote)));
        included && !self.exclude.iter().any(|p| pattern_matches(p, remote))
    }

    /// The local name of a remote tool.
    pub fn local_name(&self, remote: &str) -> String {
        format!("{}{}", self.prefix.as_deref().unwrap_or(""), remote)
    }

    /// Definition-time checks: exactly one transport, a served one.
    pub fn check(&self, server: &str) -> crate::Result<()> {
        let bad = |msg: String| crate::Error::config("invalid_mcp_config", msg, json!({"server": server}));
        match (&self.command, &self.url) {
            (Some(_), None) if self.bearer_token_env.is_some() => Err(bad(format!(
                "mcp server `{server}`: `bearer_token_env` is for `url` (streamable HTTP), not `command`"
            ))),
            (Some(c), None) if !c.trim().is_empty() => Ok(()),
            (Some(_), None) => Err(bad(format!("mcp server `{server}`: `command` is empty"))),
            (None, Some(url)) => {
                let stdio_only = !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some();
                if stdio_only {
                    return Err(bad(format!(
                        "mcp server `{server}`: `args`, `env` and `cwd` are for `command` (stdio), not `url`"
                    )));
                }
                if let Some(var) = &self.bearer_token_env
                    && var.trim().is_empty()
                {
                    return Err(bad(format!("mcp server `{server}`: `bearer_token_env` is empty")));
                }
                match url.split_once("://") {
                    Some(("http", rest)) if !rest.is_empty() => Ok(()),
                    Some(("https", _)) => Err(bad(format!(
                        "mcp server `{server}`: `url` `{url}`: https is not served by this build (no TLS stack); \
                         use http:// (e.g. through a local TLS-terminating proxy)"
                    ))),
                    _ => Err(bad(format!("mcp server `{server}`: `url` `{url}` is not an http:// URL"))),
                }
            }
            (Some(_), Some(_)) => Err(bad(format!("mcp server `{server}`: give `command` or `url`, not both"))),
            (None, None) => {
                Err(bad(format!("mcp server `{server}`: needs `command` (stdio) or `url` (streamable HTTP)")))
            }
        }
    }
}

impl McpConfig {
    /// Checks every server.
    pub fn check(&self) -> crate::Result<()> {
        for (name, s) in &self.servers {
            s.check(name)?;
        }
        Ok(())
    }
}

/// The risk an MCP tool's annotations imply, when it has any hint:
/// `readOnlyHint: true` is `read`; otherwise a destructive tool (MCP's
/// default for a non-read-only tool is `destructiveHint: true`) is
/// `destructive`; otherwise an open-world one (default `true`) is `network`;
/// otherwise `write`. No annotations (or no hint in them): `None`, the
/// undeclared state.
pub fn risk_from_annotations(annotations: Option<&Value>) -> Option<Risk> {
    let a = annotations?.as_object()?;
    let hint = |k: &str| a.get(k).and_then(Value::as_bool);
    let hints = ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"];
    if !hints.iter().any(|k| hint(k).is_some()) {
        return None;
    }
    if hint("readOnlyHint") == Some(true) {
        return Some(Risk::Read);
    }
    if hint("destructiveHint") != Some(false) {
        return Some(Risk::Destructive);
    }
    if hint("openWorldHint") != Some(false) {
        return Some(Risk::Network);
    }
    Some(Risk::Write)
}

/// The contract hash of one remote tool: SHA-256 (hex) over the RFC 8785
/// canonical JSON of `{name, description, parameters}` (the remote name).
pub fn contract_hash(name: &str, description: &str, parameters: &Value) -> String {
    let c = json!({"name": name, "description": description, "parameters": parameters});
    let bytes = serde_jcs::to_vec(&c).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

/// What an imported tool calls on its server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportKind {
    /// `tools/call` of the remote tool.
    #[default]
    Tool,
    /// `resources/read` (the server's `resources = true`).
    ReadResource,
    /// `prompts/get` (the server's `prompts = true`).
    GetPrompt,
}

impl ImportKind {
    fn is_tool(&self) -> bool {
        *self == ImportKind::Tool
    }
}

/// The remote name of the tool `resources = true` imports.
pub const READ_RESOURCE: &str = "read_resource";
/// The remote name of the tool `prompts = true` imports.
pub const GET_PROMPT: &str = "get_prompt";

impl ImportedTool {
    /// The tool that reads the server's resources: a read, admitted like
    /// every tool (`resources = true`).
    pub fn read_resource(server: &str, cfg: &McpServerConfig) -> ImportedTool {
        let description = format!(
            "Read a resource of MCP server `{server}` by its URI (MCP resources/read), as listed by resources/list."
        );
        let parameters = json!({
            "type": "object",
            "properties": {"uri": {"type": "string", "minLength": 1, "description": "the resource's URI"}},
            "required": ["uri"],
            "additionalProperties": false,
        });
        Self::synthetic(server, cfg, READ_RESOURCE, ImportKind::ReadResource, description, parameters)
    }

    /// The tool that gets the server's prompts (`prompts = true`).
    pub fn get_prompt(server: &str, cfg: &McpServerConfig) -> ImportedTool {
        let description =
            format!("Get a prompt of MCP server `{server}` by its name, with its arguments (MCP prompts/get).");
        let parameters = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "description": "the prompt's name on the server"},
                "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["name"],
            "additionalProperties": false,
        });
        Self::synthetic(server, cfg, GET_PROMPT, ImportKind::GetPrompt, description, parameters)
    }

    fn synthetic(
        server: &str,
        cfg: &McpServerConfig,
        remote: &str,
        kind: ImportKind,
        description: String,
        parameters: Value,
    ) -> ImportedTool {
        ImportedTool {
            server: server.to_string(),
            remote: remote.to_string(),
            name: cfg.local_name(remote),
            contract_hash: contract_hash(remote, &description, &parameters),
            description,
            parameters,
            annotations: Some(json!({"readOnlyHint": true, "openWorldHint": false})),
            kind,
        }
    }
}

/// A remote tool as imported: what gets registered and what admission reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImportedTool {
    /// The server's name in the document.
    pub server: String,
    /// The remote tool name.
    pub remote: String,
    /// The local (prefixed) name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its input schema.
    pub parameters: Value,
    /// Its annotations, verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// Its contract hash ([`contract_hash`]).
    pub contract_hash: String,
    /// What a call of it does on the server.
    #[serde(skip_serializing_if = "ImportKind::is_tool")]
    pub kind: ImportKind,
}

impl ImportedTool {
    /// The registry schema (source `mcp`); `idempotentHint` makes it idempotent.
    pub fn schema(&self) -> crate::ir::ToolSchema {
        let mut s = crate::ir::ToolSchema::named(&self.name);
        s.source = crate::ir::ToolSource::Mcp;
        s.description = self.description.clone();
        s.parameters = self.parameters.clone();
        s.idempotent =
            self.annotations.as_ref().and_then(|a| a.get("idempotentHint")).and_then(Value::as_bool).unwrap_or(false);
        s
    }

    /// The admission definition: the contract plus risk and `needs_approval`.
    pub fn definition(&self, cfg: &McpServerConfig) -> Value {
        let risk = cfg.risk.get(&self.remote).copied().or_else(|| risk_from_annotations(self.annotations.as_ref()));
        let mut d = json!({
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "needs_approval": cfg.needs_approval.get(&self.remote).copied().unwrap_or(false),
        });
        if let Some(r) = risk {
            d["risk"] = json!(r.as_str());
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_to_risk() {
        assert_eq!(risk_from_annotations(None), None);
        assert_eq!(risk_from_annotations(Some(&json!({"title": "x"}))), None);
        assert_eq!(risk_from_annotations(Some(&json!({"readOnlyHint": true}))), Some(Risk::Read));
        assert_eq!(risk_from_annotations(Some(&json!({"readOnlyHint": false}))), Some(Risk::Destructive));
        assert_eq!(risk_from_annotations(Some(&json!({"destructiveHint": false}))), Some(Risk::Network));
        assert_eq!(
            risk_from_annotations(Some(&json!({"destructiveHint": false, "openWorldHint": false}))),
            Some(Risk::Write)
        );
        assert_eq!(risk_from_annotations(Some(&json!({"idempotentHint": true}))), Some(Risk::Destructive));
    }

    #[test]
    fn selection_and_names() {
        let c = McpServerConfig {
            command: Some("x".into()),
            prefix: Some("fs_".into()),
            include: Some(vec!["read_*".into(), "list_directory".into()]),
            exclude: vec!["read_media_file".into()],
            ..Default::default()
        };
        assert!(c.selects("read_text_file"));
        assert!(c.selects("list_directory"));
        assert!(!c.selects("read_media_file"));
        assert!(!c.selects("write_file"));
        assert_eq!(c.local_name("read_text_file"), "fs_read_text_file");
        assert!(c.check("fs").is_ok());
        let e = McpServerConfig::default().check("fs").unwrap_err();
        assert_eq!(e.code(), "invalid_mcp_config");
        assert!(e.to_string().contains("`fs`"));
    }
}
