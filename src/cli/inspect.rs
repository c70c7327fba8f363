//! The read-only subcommands: `verify`, `simulate`, `optimize`, `policy
//! check`, `policy lint`, `shell-match`.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value, json};

use car_runtime::api;
use car_runtime::ir::{ActionProposal, Severity, ToolSchema, VerificationResult};

use super::{CliError, CliResult, Format, pretty, read_json, read_plan, read_state, shown, shown_lines};

fn core_error(file: &Path, e: car_runtime::Error) -> CliError {
    CliError::Input(format!("{}: {e}", file.display()))
}

/// The built-in tools' schemas, plus those of `--tools FILE`.
fn tool_schemas(extra: Option<&Path>) -> Result<Vec<ToolSchema>, CliError> {
    let mut schemas: Vec<ToolSchema> = car_runtime::tools::builtin_tools().into_iter().map(|t| t.schema).collect();
    if let Some(file) = extra {
        let more: Vec<ToolSchema> = read_json(file)?;
        schemas.retain(|s| !more.iter().any(|m| m.name == s.name));
        schemas.extend(more);
    }
    Ok(schemas)
}

/// `car verify`.
pub fn verify(
    plan: &Path,
    state: Option<&Path>,
    tools: Option<&Path>,
    max_actions: Option<u64>,
    format: Format,
) -> CliResult {
    let (text, proposal) = read_plan(plan)?;
    let state_json = state.map(read_state).transpose()?.map(|s| Value::Object(s).to_string());
    let schemas = serde_json::to_string(&tool_schemas(tools)?).unwrap_or_else(|_| "[]".into());
    let out = api::verify::verify(&text, state_json.as_deref(), None, max_actions, Some(&schemas))
        .map_err(|e| core_error(plan, e))?;
    let result: VerificationResult =
        serde_json::from_str(&out).map_err(|e| CliError::Runtime(format!("unreadable verification result: {e}")))?;
    match format {
        Format::Json => println!("{}", pretty(&result)),
        Format::Mermaid => print!("{}", shown_lines(&mermaid(&proposal, &result))),
        Format::Text => print_verification(plan, &proposal, &result),
    }
    Ok(if result.valid { 0 } else { 1 })
}

fn print_verification(plan: &Path, proposal: &ActionProposal, r: &VerificationResult) {
    println!(
        "{}",
        shown(&format!(
            "{}: {} ({} action{})",
            plan.display(),
            if r.valid { "valid" } else { "INVALID" },
            proposal.actions.len(),
            if proposal.actions.len() == 1 { "" } else { "s" }
        ))
    );
    if r.issues.is_empty() {
        println!("  no issues");
    }
    for i in &r.issues {
        let sev = i.severity.as_str();
        let on = super::colour::enabled(false);
        println!("  {}{}", super::colour::word(on, sev, 7), shown(&format!(" {}: {}", i.action_id, i.message)));
    }
    println!("execution levels:");
    for (n, level) in r.execution_levels.iter().enumerate() {
        println!("{}", shown(&format!("  {n}: {}", level.join(", "))));
    }
    if !r.conflicts.is_empty() {
        println!("conflicts (unordered writers of one key):");
        for (a, b, key) in &r.conflicts {
            println!("{}", shown(&format!("  {a} and {b} both write `{key}`")));
        }
    }
    if !r.simulated_state.is_empty() {
        println!("{}", shown(&format!("simulated state: {}", Value::Object(r.simulated_state.clone()))));
    }
}

/// Mermaid-safe text for a label.
fn label(s: &str) -> String {
    s.replace('"', "#quot;").replace('<', "#lt;").replace('>', "#gt;")
}

/// A Mermaid flowchart: one subgraph per execution level, an arrow per
/// declared dependency, a dotted link per write conflict, and actions with
/// an error issue marked.
pub fn mermaid(p: &ActionProposal, r: &VerificationResult) -> String {
    let node: HashMap<&str, String> =
        p.actions.iter().enumerate().map(|(i, a)| (a.id.as_str(), format!("a{i}"))).collect();
    let errors: Vec<&str> =
        r.issues.iter().filter(|i| i.severity == Severity::Error).map(|i| i.action_id.as_str()).collect();
    let mut out = String::from("flowchart TD\n");
    let describe = |id: &str| -> String {
        let Some(a) = p.actions.iter().find(|a| a.id == id) else { return label(id) };
        let what = match (&a.tool, a.parameters.get("key").and_then(Value::as_str)) {
            (Some(t), _) => format!("{} {t}", a.action_type.as_str()),
            (None, Some(k)) => format!("{} {k}", a.action_type.as_str()),
            (None, None) => a.action_type.as_str().to_string(),
        };
        format!("{}<br/>{}", label(id), label(&what))
    };
    let mut placed = std::collections::HashSet::new();
    for (n, level) in r.execution_levels.iter().enumerate() {
        out.push_str(&format!("  subgraph L{n}[\"level {n}\"]\n"));
        for id in level {
            if let Some(nid) = node.get(id.as_str()) {
                out.push_str(&format!("    {nid}[\"{}\"]\n", describe(id)));
                placed.insert(id.as_str());
            }
        }
        out.push_str("  end\n");
    }
    // Actions in no level (a cycle, an unknown dependency) still appear.
    for a in &p.actions {
        if !placed.contains(a.id.as_str()) {
            out.push_str(&format!("  {}[\"{}\"]\n", node[a.id.as_str()], describe(&a.id)));
        }
    }
    // Every edge of the graph: declared dependencies as plain arrows, the
    // orderings the runtime derives from state (a read after a write, two
    // writes of one key) labelled `state`.
    let dag = car_runtime::dag::Dag::build(&p.actions);
    for (j, a) in p.actions.iter().enumerate() {
        let to = format!("a{j}");
        let mut seen = std::collections::HashSet::new();
        for &i in dag.predecessors(j) {
            if !seen.insert(i) {
                continue;
            }
            let declared = a.dependencies.iter().any(|d| d == &p.actions[i].id);
            if declared {
                out.push_str(&format!("  a{i} --> {to}\n"));
            } else {
                out.push_str(&format!("  a{i} -- state --> {to}\n"));
            }
        }
        for d in &a.dependencies {
            if !node.contains_key(d.as_str()) {
                out.push_str(&format!("  missing_{to}[\"missing: {}\"] -.-> {to}\n", label(d)));
            }
        }
    }
    for (a, b, key) in &r.conflicts {
        if let (Some(x), Some(y)) = (node.get(a.as_str()), node.get(b.as_str())) {
            out.push_str(&format!("  {x} -. \"conflict: {}\" .- {y}\n", label(key)));
        }
    }
    if !errors.is_empty() {
        out.push_str("  classDef error fill:#fdd,stroke:#c00\n");
        for id in errors {
            if let Some(nid) = node.get(id) {
                out.push_str(&format!("  class {nid} error\n"));
            }
        }
    }
    out
}

/// `car simulate`: the final state as JSON.
pub fn simulate(plan: &Path, state: Option<&Path>) -> CliResult {
    let (text, _) = read_plan(plan)?;
    let state_json = state.map(read_state).transpose()?.map(|s| Value::Object(s).to_string());
    let out = api::verify::simulate(&text, state_json.as_deref()).map_err(|e| core_error(plan, e))?;
    let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    println!("{}", pretty(&v));
    Ok(0)
}

/// `car simulate --monte-carlo N`: the Monte Carlo result as JSON.
pub fn monte_carlo(a: &super::SimulateArgs) -> CliResult {
    let (text, _) = read_plan(&a.plan)?;
    let state_json = a.state.as_deref().map(read_state).transpose()?.map(|s| Value::Object(s).to_string());
    let rates = a.rates.as_deref().map(super::read_text).transpose()?;
    let goal = a.goal.as_deref().map(super::read_text).transpose()?;
    let mut config = serde_json::Map::new();
    config.insert("trials".into(), Value::from(a.monte_carlo.unwrap_or_default()));
    if let Some(s) = a.seed {
        config.insert("seed".into(), Value::from(s));
    }
    if let Some(r) = a.default_rate {
        config.insert("default_success_rate".into(), Value::from(r));
    }
    if let Some(r) = a.retries {
        config.insert("retry_attempts".into(), Value::from(r));
    }
    let out = api::planning::simulate_monte_carlo(
        &text,
        state_json.as_deref(),
        rates.as_deref(),
        goal.as_deref(),
        Some(&Value::Object(config).to_string()),
    )
    .map_err(|e| core_error(&a.plan, e))?;
    let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    println!("{}", pretty(&v));
    Ok(0)
}

/// `car optimize`: the optimised proposal as JSON.
pub fn optimize(plan: &Path) -> CliResult {
    // The typed proposal is printed as it is (no second parse of the text,
    // no round trip of the output through a JSON value).
    let (text, proposal) = read_plan(plan)?;
    let optimized = api::verify::optimize_proposal(proposal);
    // The input's `id` and `timestamp` are kept; one the input lacks (the
    // parser made one up) is left out, so the output of one input is always
    // the same.
    let (has_id, has_time) = top_level_keys(&text);
    if has_id && has_time {
        println!("{}", pretty(&optimized));
    } else {
        let mut v = serde_json::to_value(&optimized).map_err(|e| CliError::Runtime(e.to_string()))?;
        if let Some(o) = v.as_object_mut() {
            if !has_id {
                o.shift_remove("id");
            }
            if !has_time {
                o.shift_remove("timestamp");
            }
        }
        println!("{}", pretty(&v));
    }
    Ok(0)
}

/// Whether the proposal text gives a top-level `id` and `timestamp`.
fn top_level_keys(text: &str) -> (bool, bool) {
    #[derive(serde::Deserialize)]
    struct Top {
        #[serde(default)]
        id: Option<serde::de::IgnoredAny>,
        #[serde(default)]
        timestamp: Option<serde::de::IgnoredAny>,
    }
    match serde_json::from_str::<Top>(text) {
        Ok(t) => (t.id.is_some(), t.timestamp.is_some()),
        Err(_) => (true, true),
    }
}

/// `car policy check`.
pub fn policy_check(plan: &Path, dir: Option<&Path>, as_json: bool) -> CliResult {
    let (text, proposal) = read_plan(plan)?;
    let cwd =
        std::env::current_dir().map_err(|e| CliError::Input(format!("cannot read the current directory: {e}")))?;
    let dir = match dir {
        Some(d) => Some(d.to_path_buf()),
        None => car_runtime::policy::discover_policy_dir(&cwd),
    };
    let out = match &dir {
        Some(d) => {
            let d = d.to_string_lossy();
            api::policy::check_policies(api::policy::RuleSource::Dir(&d), &text)
        }
        None => api::policy::check_policies(api::policy::RuleSource::Toml(""), &text),
    }
    // Policy file errors already name the file and key.
    .map_err(|e| if e.family() == "config" { CliError::Input(e.to_string()) } else { core_error(plan, e) })?;
    let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    let denied = v["denied_actions"].as_array().map_or(0, Vec::len);
    if as_json {
        println!("{}", pretty(&v));
    } else {
        match &dir {
            Some(d) => println!("{}", shown(&format!("policies: {} ({} rules)", d.display(), v["rule_count"]))),
            None => println!("{}", shown(&format!("policies: none found (no .car/policies above {})", cwd.display()))),
        }
        for a in &proposal.actions {
            let vs: Vec<&Value> = v["violations"]
                .as_array()
                .map(|xs| xs.iter().filter(|x| x["action_id"] == a.id.as_str()).collect())
                .unwrap_or_default();
            if vs.is_empty() {
                println!("{}", shown(&format!("  ok    {}", a.id)));
            }
            for x in vs {
                println!(
                    "{}",
                    shown(&format!(
                        "  DENY  {}  {}: {}",
                        a.id,
                        x["policy_name"].as_str().unwrap_or(""),
                        x["reason"].as_str().unwrap_or("")
                    ))
                );
            }
        }
        println!("{}", shown(&format!("{denied} of {} actions would be denied", proposal.actions.len())));
    }
    Ok(if denied == 0 { 0 } else { 1 })
}

/// `car policy lint`.
pub fn policy_lint(dir: &Path, as_json: bool) -> CliResult {
    if !dir.is_dir() {
        return Err(CliError::Input(format!("{}: not a directory", dir.display())));
    }
    let out = api::policy::lint_policies(&dir.to_string_lossy()).map_err(|e| CliError::Input(e.to_string()))?;
    let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    if as_json {
        println!("{}", pretty(&v));
        return Ok(0);
    }
    for f in v["files"].as_array().into_iter().flatten() {
        println!("{}", shown(&format!("  {}: {} rules", f["file"].as_str().unwrap_or(""), f["rules"])));
    }
    for w in v["warnings"].as_array().into_iter().flatten() {
        println!(
            "{}",
            shown(&format!(
                "  warning: {}: {}: {}",
                w["file"].as_str().unwrap_or(""),
                w["key"].as_str().unwrap_or(""),
                w["message"].as_str().unwrap_or("")
            ))
        );
    }
    let warnings = v["warnings"].as_array().map_or(0, Vec::len);
    println!("{}", shown(&format!("{}: {} rules loaded, {warnings} warning(s)", dir.display(), v["rule_count"])));
    Ok(0)
}

/// `car shell-match`.
pub fn shell_match(command: &str, allow: &[String], ask: &[String], deny: &[String]) -> CliResult {
    let rules = json!({"allow": allow, "ask": ask, "deny": deny});
    let v = api::call("match_shell_command", &json!({"command": command, "rules": rules}))
        .map_err(|e| CliError::Input(e.to_string()))?;
    println!("{}", shown(v.as_str().unwrap_or("ask")));
    Ok(0)
}
