//! The permission chain the CLI evaluates: a preset (`--preset`, else the
//! file's `preset`, else `standard`) plus the rules of the nearest
//! `.car/permissions.toml` (walking up from the root):
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
//! = P}`, so the dry run names them. A command every segment of which is
//! allowed by an `allow` pattern (and matched by no deny or ask pattern, as
//! the shell matcher decides) is allowed by a hook before the preset's ask
//! for `execute` applies; anything else falls through to the rules.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;
use serde_json::{Value, json};

use car_runtime::permission::{
    HookDecision, OneOrMany, PermissionChain, PermissionConfig, PermissionEvaluation, Preset, Risk, RuleSpec,
    ShellRules, ToolDefinition, Verdict,
};

use super::{CliError, CliResult, pretty, read_text};

/// The name of the shell tool the `[shell]` table governs.
pub const SHELL_TOOL: &str = "shell";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellTable {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PermissionsFile {
    #[serde(default)]
    preset: Option<String>,
    #[serde(default)]
    shell: ShellTable,
    #[serde(default)]
    deny: Vec<RuleSpec>,
    #[serde(default)]
    ask: Vec<RuleSpec>,
}

/// The compiled chain and where it came from.
pub struct Permissions {
    /// The chain.
    pub chain: PermissionChain,
    /// The preset in force.
    pub preset: Preset,
    /// The permissions file loaded, when one was found.
    pub file: Option<PathBuf>,
    /// The shell allow patterns (for explanations).
    pub shell_allow: Vec<String>,
}

/// The nearest `.car/permissions.toml` walking up from `start`.
pub fn discover(start: &Path) -> Option<PathBuf> {
    start.ancestors().map(|d| d.join(".car").join("permissions.toml")).find(|p| p.exists())
}

/// Loads the permissions of `root` (its nearest `.car/permissions.toml`) with
/// the preset of the command line, if given.
pub fn load(root: &Path, preset_flag: Option<&str>) -> Result<Permissions, CliError> {
    let file = discover(root);
    let parsed: PermissionsFile = match &file {
        Some(f) => {
            let text = read_text(f)?;
            toml::from_str(&text).map_err(|e| CliError::Input(format!("{}: {}", f.display(), e.to_string().trim())))?
        }
        None => PermissionsFile::default(),
    };
    let shown = |f: &Option<PathBuf>| f.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let preset_name = preset_flag.or(parsed.preset.as_deref()).unwrap_or("standard");
    let preset = Preset::parse(preset_name).map_err(|e| match preset_flag {
        Some(_) => CliError::Input(format!("--preset: {e}")),
        None => CliError::Input(format!("{}: preset: {e}", shown(&file))),
    })?;
    let bad = |e: car_runtime::Error| CliError::Input(format!("{}: {e}", shown(&file)));
    let shell_rules = ShellRules::new(&parsed.shell.allow, &parsed.shell.ask, &parsed.shell.deny).map_err(bad)?;
    let argv_rule = |p: &String| RuleSpec {
        tool: Some(OneOrMany::One(SHELL_TOOL.to_string())),
        argv: Some(p.clone()),
        ..RuleSpec::default()
    };
    let mut deny: Vec<RuleSpec> = parsed.shell.deny.iter().map(argv_rule).collect();
    deny.extend(parsed.deny);
    let mut ask: Vec<RuleSpec> = parsed.shell.ask.iter().map(argv_rule).collect();
    ask.extend(parsed.ask);
    let mut config = PermissionConfig { preset: Some(preset), deny, ask, ..PermissionConfig::default() };
    if !parsed.shell.allow.is_empty() {
        config = config.with_hook(move |tool, input| {
            if tool != SHELL_TOOL {
                return HookDecision::Pass;
            }
            match input.get("command").and_then(Value::as_str) {
                Some(cmd) if shell_rules.check(cmd) == Verdict::Allow => HookDecision::Allow,
                _ => HookDecision::Pass,
            }
        });
    }
    let chain = PermissionChain::from_config(&config).map_err(bad)?;
    Ok(Permissions { chain, preset, file, shell_allow: parsed.shell.allow })
}

/// The chain's view of a tool: a built-in tool with its declared risk, any
/// other name as an undeclared tool.
pub fn definition(tool: &str) -> ToolDefinition {
    match car_runtime::tools::builtin_tool(tool) {
        Some(t) => {
            let risk: Option<Risk> = serde_json::from_value(json!(t.risk)).ok();
            let def = ToolDefinition::new(t.schema.name.clone(), t.schema.description.clone(), t.schema.parameters)
                .unwrap_or_else(|_| ToolDefinition::undeclared(tool));
            match risk {
                Some(r) => def.with_risk(r),
                None => def,
            }
        }
        None => ToolDefinition::undeclared(tool),
    }
}

impl Permissions {
    /// Evaluates one call (the dry run).
    pub fn evaluate(&self, tool: &str, input: &Value) -> PermissionEvaluation {
        self.chain.evaluate(&definition(tool), input)
    }

    /// Which layer decided, in words: `deny-rule {"tool":"shell",...}`.
    pub fn describe(&self, tool: &str, e: &PermissionEvaluation) -> String {
        let by = serde_json::to_value(e.decided_by).ok().and_then(|v| v.as_str().map(str::to_string));
        let by = by.unwrap_or_else(|| "?".into());
        match (&e.rule, by.as_str()) {
            (Some(rule), _) => format!("{by} {}", serde_json::to_string(rule).unwrap_or_default()),
            (None, "hook") if tool == SHELL_TOOL && !self.shell_allow.is_empty() => {
                "every segment matches a [shell] allow pattern of .car/permissions.toml".to_string()
            }
            (None, "default") => format!("default ({} preset)", self.preset.as_str()),
            (None, _) => by,
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
    /// Print the evaluation as JSON.
    #[arg(long)]
    json: bool,
}

/// `car permission explain`.
pub fn explain(a: ExplainArgs) -> CliResult {
    let input: Value =
        car_runtime::ir::from_json_str(&a.input).map_err(|e| CliError::Input(format!("--input: {e}")))?;
    let root = a.root.canonicalize().map_err(|e| CliError::Input(format!("--root {}: {e}", a.root.display())))?;
    let perms = load(&root, a.preset.as_deref())?;
    let e = perms.evaluate(&a.tool, &input);
    if a.json {
        println!("{}", pretty(&e.to_json()));
        return Ok(0);
    }
    println!("tool:       {}", a.tool);
    println!("verdict:    {}", e.verdict.as_str());
    println!(
        "decided by: {}",
        serde_json::to_value(e.decided_by).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
    );
    println!(
        "rule:       {}",
        e.rule.as_ref().map_or("none".to_string(), |r| serde_json::to_string(r).unwrap_or_default())
    );
    println!("reason:     {}", if e.reason.is_empty() { perms.describe(&a.tool, &e) } else { e.reason.clone() });
    println!("preset:     {}", perms.preset.as_str());
    println!(
        "rules from: {}",
        perms.file.as_ref().map_or("no .car/permissions.toml found".to_string(), |f| f.display().to_string())
    );
    if e.input != input {
        println!("input:      {} (after hooks)", e.input);
    }
    for adv in &e.advisory {
        println!("advisory:   {} rule matched host {} (not enforced for this tool)", adv.layer, adv.host);
    }
    Ok(0)
}
