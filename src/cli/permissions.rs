//! The admission configuration the CLI runs with: the nearest
//! `.car/permissions.toml` (walking up from the root), which is the TOML form
//! of the admission configuration document (`docs/admission.md`), plus the
//! command line's flags (`--preset` wins over the file's `preset`, which
//! defaults to `standard`):
//!
//! ```toml
//! preset = "standard"              # optional; --preset wins
//!
//! [shell]                          # argv patterns for the `shell` tool
//! allow = ["git status", "cargo test **"]
//! ask   = ["git push **"]
//! deny  = ["rm -rf **", "sudo **"]
//!
//! [[deny]]                         # rules in the chain's JSON shape
//! tool = "write_file"
//! [[ask]]
//! risk = "write"
//! ```
//!
//! Shell `deny` and `ask` patterns become chain rules `{tool = "shell", argv
//! = P}`. A command every segment of which matches an `allow` pattern is
//! allowed only after the whole deny layer found nothing (deny always wins),
//! before the ask layer; anything else falls through to the rules. The same
//! document drives `car run`, the bindings and the daemon; nothing here
//! decides on its own.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::Value;

use car_runtime::admission::{AdmissionConfig, AdmissionStage, Decision, HostLayers};
use car_runtime::ir::Action;
use car_runtime::permission::Preset;

use super::{CliError, CliResult, pretty, read_text, shown};

/// The admission document and where it came from.
pub struct Permissions {
    /// The document (file plus flags).
    pub config: AdmissionConfig,
    /// The stage built from it (for the plan; no approvals store).
    pub stage: AdmissionStage,
    /// The preset in force.
    pub preset: Preset,
    /// The permissions file loaded, when one was found.
    pub file: Option<PathBuf>,
}

/// The nearest `.car/permissions.toml` walking up from `start`.
pub fn discover(start: &Path) -> Option<PathBuf> {
    start.ancestors().map(|d| d.join(".car").join("permissions.toml")).find(|p| p.exists())
}

/// Loads the admission document of `root` (its nearest
/// `.car/permissions.toml`) with the preset of the command line, if given.
pub fn load(root: &Path, preset_flag: Option<&str>) -> Result<Permissions, CliError> {
    let file = discover(root);
    let shown = |f: &Option<PathBuf>| f.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let bad = |e: car_runtime::Error| CliError::Input(format!("{}: {e}", shown(&file)));
    let mut config = match &file {
        Some(f) => AdmissionConfig::from_toml(&read_text(f)?).map_err(bad)?,
        None => AdmissionConfig::default(),
    };
    // MCP servers: the permissions file's `[mcp]` section, else the nearest
    // `.car/mcp.toml` (its `[servers.NAME]` tables).
    if config.mcp.is_none()
        && let Some(f) = root.ancestors().map(|d| d.join(".car").join("mcp.toml")).find(|p| p.exists())
    {
        let mcp = toml::from_str::<car_runtime::mcp::McpConfig>(&read_text(&f)?).map_err(|e| {
            CliError::Input(format!("{}: invalid MCP configuration: {}", f.display(), e.to_string().trim()))
        })?;
        config.mcp = Some(mcp);
    }
    let preset_name = preset_flag.or(config.preset.as_deref()).unwrap_or("standard").to_string();
    let preset = Preset::parse(&preset_name).map_err(|e| match preset_flag {
        Some(_) => CliError::Input(format!("--preset: {e}")),
        None => CliError::Input(format!("{}: preset: {e}", shown(&file))),
    })?;
    config.preset = Some(preset_name);
    let stage = AdmissionStage::build(config.clone(), &HostLayers::default(), None).map_err(bad)?;
    Ok(Permissions { config, stage, preset, file })
}

/// A `tool_call` of `tool` with `input`, as the stage sees it.
pub fn call(tool: &str, input: &Value) -> Action {
    let mut a = Action::tool_call(tool);
    a.parameters = input.as_object().cloned().unwrap_or_default().into();
    a
}

impl Permissions {
    /// The chain's verdict for one call (the dry run) and the post-hook input.
    pub fn evaluate(&self, a: &Action) -> Option<(Decision, Value)> {
        self.stage.preview(a, None)
    }

    /// Which layer decided, in words: `deny-rule {"tool":"shell",...}`.
    pub fn describe(&self, d: &Decision) -> String {
        match (&d.rule, d.layer) {
            (Some(rule), by) => format!("{by} {}", serde_json::to_string(rule).unwrap_or_default()),
            (None, "shell-allow") => {
                "every segment matches a [shell] allow pattern of .car/permissions.toml (no deny rule matched)"
                    .to_string()
            }
            (None, "default") => format!("default ({} preset)", self.preset.as_str()),
            (None, by) => by.to_string(),
        }
    }
}

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The tool's name (a built-in tool carries its declared risk; any other is undeclared).
    #[arg(long)]
    tool: String,
    /// The tool input as JSON.
    #[arg(long, default_value = "{}")]
    input: String,
    /// The permission preset: strict, standard or open (default: the permissions file's, else standard).
    #[arg(long)]
    preset: Option<String>,
    /// Where `.car/permissions.toml` is looked for, walking up (default: the current directory).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// `--format json` (or `--json`): print the evaluation as JSON.
    #[command(flatten)]
    out: super::OutputFormat,
}

/// `car permission explain`.
pub fn explain(a: ExplainArgs) -> CliResult {
    let input: Value =
        car_runtime::ir::from_json_str(&a.input).map_err(|e| CliError::Input(format!("--input: {e}")))?;
    let root = a.root.canonicalize().map_err(|e| CliError::Input(format!("--root {}: {e}", a.root.display())))?;
    let perms = load(&root, a.preset.as_deref())?;
    let Some((d, after)) = perms.evaluate(&call(&a.tool, &input)) else {
        return Err(CliError::Input("no permission chain is configured".to_string()));
    };
    if a.out.json() {
        let mut v = serde_json::to_value(&d).unwrap_or(Value::Null);
        v["decided_by"] = Value::String(d.layer.to_string());
        v["input"] = after.clone();
        println!("{}", pretty(&v));
        return Ok(0);
    }
    println!("{}", shown(&format!("tool:       {}", a.tool)));
    println!("{}", shown(&format!("verdict:    {}", d.verdict.as_str())));
    println!("{}", shown(&format!("decided by: {}", d.layer)));
    println!(
        "{}",
        shown(&format!(
            "rule:       {}",
            d.rule.as_ref().map_or("none".to_string(), |r| serde_json::to_string(r).unwrap_or_default())
        ))
    );
    println!(
        "{}",
        shown(&format!("reason:     {}", if d.reason.is_empty() { perms.describe(&d) } else { d.reason.clone() }))
    );
    println!("{}", shown(&format!("preset:     {}", perms.preset.as_str())));
    println!(
        "{}",
        shown(&format!(
            "rules from: {}",
            perms.file.as_ref().map_or("no .car/permissions.toml found".to_string(), |f| f.display().to_string())
        ))
    );
    if after != input {
        println!("{}", shown(&format!("input:      {after} (after hooks)")));
    }
    Ok(0)
}
