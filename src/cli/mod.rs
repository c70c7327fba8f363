//! The `car` command line. Every subcommand calls `car_runtime::api` (or the
//! public types its facade returns); nothing here decides what the core
//! decides. Exit codes: 0 success, 1 an action failed or was denied (or the
//! checked plan is invalid), 2 bad input (file, JSON path and reason).

mod colour;
mod events;
mod inspect;
#[cfg(feature = "mcp")]
mod mcp;
mod permissions;
mod run;
mod sandbox;
mod shell_match;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{Map, Value};

use car_runtime::ir::ActionProposal;

/// A failure that ends the command.
#[derive(Debug)]
pub enum CliError {
    /// Bad input: a file, a flag or a document that cannot be used (exit 2).
    Input(String),
    /// Something went wrong while running (exit 1).
    Runtime(String),
}

impl CliError {
    fn input(msg: impl Into<String>) -> Self {
        CliError::Input(msg.into())
    }
}

/// What a subcommand returns: its exit code, or a failure.
pub type CliResult = Result<u8, CliError>;

#[derive(Parser, Debug)]
#[command(
    name = "car",
    version,
    about = "Run, verify and explain Agent IR plans (batches of actions proposed by AI models)",
    long_about = "Run, verify and explain Agent IR plans.\n\nA plan is an ActionProposal (JSON): tool calls, state writes, reads and assertions forming a DAG. `car run` shows what it would do, asks for what needs approval, and runs it with the built-in tools confined to a root directory.",
    after_help = "Example:\n  car run examples/plans/release-notes.json --root examples/workspace --no-input\n\nExit codes: 0 success, 1 an action failed or was denied, 2 bad input."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a plan with the built-in tools: print the plan, ask, execute, summarise.
    #[command(
        after_help = "Examples:\n  car run examples/plans/release-notes.json --root examples/workspace --no-input\n  car run plan.json --root . --preset strict --yes --json > result.json\n  car run plan.json --state state.json      # load state, save it after the run\n  car run plan.json --suspend               # an ask suspends the run instead of prompting\n  car run --resume susp-...                 # once its approval is answered (car approvals resolve)\n\nExit codes: 0 every action succeeded, 1 an action failed or was denied, 2 bad input, 3 suspended (resume with --resume ID)."
    )]
    Run(run::RunArgs),
    /// Print what `car run` would do: the plan with verdicts and previews; nothing is asked or run.
    #[command(
        after_help = "Examples:\n  car plan examples/plans/deploy.json --root examples/workspace\n  car plan plan.json --format json > plan-verdicts.json\n\nExit codes: 0 nothing would be denied, 1 some action would be denied, 2 bad input."
    )]
    Plan(run::RunArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  car completions bash > ~/.local/share/bash-completion/completions/car\n  car completions zsh > ~/.zfunc/_car"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of `car`.
    #[command(after_help = "Example:\n  car man > car.1 && man ./car.1")]
    Man,
    /// Verify a plan statically: issues, execution levels, conflicts.
    #[command(
        after_help = "Examples:\n  car verify examples/plans/deploy.json\n  car verify plan.json --state state.json --max-actions 20 --format json\n  car verify plan.json --format mermaid > plan.mmd   # draw the DAG\n\nExit codes: 0 valid, 1 invalid, 2 bad input."
    )]
    Verify(VerifyArgs),
    /// Simulate a plan against a state and print the final state.
    #[command(
        after_help = "Examples:\n  car simulate examples/plans/deploy.json --state state.json\n  car simulate examples/plans/deploy.json --monte-carlo 10000 --rates rates.json --seed 7"
    )]
    Simulate(SimulateArgs),
    /// Print the plan with phantom state dependencies dropped.
    #[command(after_help = "Example:\n  car optimize plan.json > optimized.json")]
    Optimize(OptimizeArgs),
    /// Check a plan against policy files, or lint a policy directory.
    #[command(
        subcommand,
        after_help = "Examples:\n  car policy check examples/plans/inspect-config.json --dir examples/.car/policies\n  car policy lint examples/.car/policies"
    )]
    Policy(PolicyCommand),
    /// Explain permission decisions.
    #[command(
        subcommand,
        after_help = "Example:\n  car permission explain --tool shell --input '{\"command\":\"git status\"}' --root examples/workspace"
    )]
    Permission(PermissionCommand),
    /// Match a shell command against allow / ask / deny argv patterns.
    #[command(
        after_help = "Examples:\n  car shell-match 'git status' --allow 'git status'\n  car shell-match 'cd build && rm -rf *' --allow 'cd *' --deny 'rm -rf **'\n  car shell-match 'sudo rm -rf /[t]mp' --allow '**' --deny 'rm -rf /tmp' --explain\n\nPrints allow, ask or deny. A segment matching no pattern asks; the command's verdict is its strictest segment."
    )]
    ShellMatch(ShellMatchArgs),
    /// The sandbox under `shell` and subprocess tools.
    #[command(
        subcommand,
        after_help = "Example:\n  car sandbox check          # what this machine can enforce\n  car sandbox check --json"
    )]
    Sandbox(SandboxCommand),
    /// MCP: the gateway that puts the admission stage in front of MCP servers.
    #[cfg(feature = "mcp")]
    #[command(
        subcommand,
        after_help = "Example:\n  car mcp serve --config gateway.toml      # an MCP server on stdio; see docs/mcp.md"
    )]
    Mcp(McpCommand),
    /// The durable approvals store (`approvals.jsonl` in a state directory): list and answer asks.
    #[command(
        subcommand,
        after_help = "Examples:\n  car approvals list --dir ./state                 # the pending asks, oldest first\n  car approvals resolve --dir ./state KEY allow    # or deny, with --reason TEXT\n\nA runtime holding an ask on that store (car mcp serve --wait-for-approvals, car-server) runs or refuses it at once."
    )]
    Approvals(ApprovalsCommand),
    /// The audit log `car run` and `car-server` append to (`events.jsonl` under `$CAR_HOME`).
    #[command(
        subcommand,
        after_help = "Examples:\n  car events export --out audit.jsonl      # the complete, verified records as JSONL\n  car events verify audit.jsonl            # check the hash chain of an export\n\nExit codes: 0 the chain is intact (a torn last record is reported and skipped), 1 it breaks (the line is named), 2 bad input."
    )]
    Events(EventsCommand),
    /// Start the daemon (car-server): JSON-RPC 2.0 over WebSocket. Same flags as `car-server`.
    #[cfg(feature = "server")]
    #[command(
        disable_help_flag = true,
        after_help = "Examples:\n  car serve                       # 127.0.0.1:9100, auth token written to the runtime dir\n  car serve --port 9200 --no-auth\n  car serve --help                # the daemon's own flags"
    )]
    Serve {
        /// The daemon's flags (see `car serve --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Output format of `car verify`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// Human-readable.
    Text,
    /// The VerificationResult as JSON.
    Json,
    /// A Mermaid flowchart of the DAG, its execution levels and conflicts.
    Mermaid,
}

#[derive(Args, Debug)]
struct VerifyArgs {
    /// The plan (ActionProposal JSON).
    plan: PathBuf,
    /// Initial state: a JSON object of key → value.
    #[arg(long)]
    state: Option<PathBuf>,
    /// More tool schemas (a JSON array of ToolSchema) besides the built-in tools.
    #[arg(long)]
    tools: Option<PathBuf>,
    /// Refuse plans with more actions than this.
    #[arg(long)]
    max_actions: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// The same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    json: bool,
}

/// A text-or-JSON result format.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TextOrJson {
    /// Human-readable.
    #[default]
    Text,
    /// JSON.
    Json,
}

/// `--format text|json`, with `--json` as its alias: the one output flag of
/// every command that prints a result.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct OutputFormat {
    /// Output format.
    #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
    format: TextOrJson,
    /// The same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    json: bool,
}

impl OutputFormat {
    /// True when JSON was asked for.
    pub fn json(&self) -> bool {
        self.json || self.format == TextOrJson::Json
    }
}

#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// The plan (ActionProposal JSON).
    plan: PathBuf,
    /// Initial state: a JSON object of key → value.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Run N Monte Carlo trials with tools allowed to fail and print the
    /// distribution (MonteCarloResult JSON) instead of the final state.
    #[arg(long, value_name = "N")]
    monte_carlo: Option<u32>,
    /// Monte Carlo: a JSON object of tool → success rate (0.0..=1.0).
    #[arg(long, requires = "monte_carlo")]
    rates: Option<PathBuf>,
    /// Monte Carlo: a GoalCondition JSON file evaluated on each final state.
    #[arg(long, requires = "monte_carlo")]
    goal: Option<PathBuf>,
    /// Monte Carlo: the PRNG seed (default fixed, echoed in the result).
    #[arg(long, requires = "monte_carlo")]
    seed: Option<u64>,
    /// Monte Carlo: success rate of a tool with no given rate (default 0.5).
    #[arg(long, requires = "monte_carlo")]
    default_rate: Option<f64>,
    /// Monte Carlo: extra attempts after a failed one (default 0).
    #[arg(long, requires = "monte_carlo")]
    retries: Option<u32>,
}

#[derive(Args, Debug)]
struct OptimizeArgs {
    /// The plan (ActionProposal JSON).
    plan: PathBuf,
}

#[derive(Subcommand, Debug)]
enum PolicyCommand {
    /// Every violation each action would meet, with stable rule names.
    #[command(
        after_help = "Examples:\n  car policy check examples/plans/clean-build.json --dir examples/.car/policies\n  car policy check plan.json            # .car/policies found walking up from here\n\nExit codes: 0 no violation, 1 some action would be denied, 2 bad input."
    )]
    Check {
        /// The plan (ActionProposal JSON).
        plan: PathBuf,
        /// The policy directory (default: the nearest `.car/policies` walking up from the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// `--format json` (or `--json`): print the result as JSON.
        #[command(flatten)]
        out: OutputFormat,
    },
    /// Load every `*.toml` of a policy directory and report errors and warnings.
    #[command(
        after_help = "Example:\n  car policy lint examples/.car/policies\n\nExit codes: 0 loads (warnings are printed), 2 a file is malformed (file and key named)."
    )]
    Lint {
        /// The policy directory.
        dir: PathBuf,
        /// `--format json` (or `--json`): print the result as JSON.
        #[command(flatten)]
        out: OutputFormat,
    },
}

#[derive(Subcommand, Debug)]
enum PermissionCommand {
    /// Dry-run the permission chain for one tool call: verdict, deciding layer, rule.
    #[command(
        after_help = "Examples:\n  car permission explain --tool shell --input '{\"command\":\"rm -rf build\"}' --root examples/workspace\n  car permission explain --tool write_file --input '{\"path\":\"a.txt\",\"content\":\"x\"}' --preset strict"
    )]
    Explain(permissions::ExplainArgs),
}

#[cfg(feature = "mcp")]
#[derive(Subcommand, Debug)]
enum McpCommand {
    /// Serve the gateway on stdio: every tools/call passes the admission stage before it is forwarded.
    Serve(mcp::ServeArgs),
}

#[derive(Subcommand, Debug)]
enum EventsCommand {
    /// Write the audit log's complete, verified records as JSONL (stdout or --out).
    Export {
        /// The state directory (default: `$CAR_HOME`, else `~/.car`).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Write to this file instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Verify the hash chain of an audit log or an export of one.
    Verify {
        /// The JSONL file.
        file: PathBuf,
        /// `--format json` (or `--json`): print the report as JSON.
        #[command(flatten)]
        format: OutputFormat,
    },
}

#[derive(Subcommand, Debug)]
enum ApprovalsCommand {
    /// The pending approvals of a store, oldest first (overdue ones are denied first).
    List {
        /// The state directory holding `approvals.jsonl` (the document's `approvals_dir`).
        #[arg(long)]
        dir: PathBuf,
        /// `--format json` (or `--json`): print `{pending: [...]}`.
        #[command(flatten)]
        format: OutputFormat,
    },
    /// Answer a pending approval: `allow` runs the held call, `deny` refuses it.
    Resolve {
        /// The state directory holding `approvals.jsonl`.
        #[arg(long)]
        dir: PathBuf,
        /// The approval's key (from `car approvals list`).
        key: String,
        /// `allow` or `deny`.
        #[arg(value_parser = ["allow", "deny"])]
        decision: String,
        /// Why (recorded with the resolution).
        #[arg(long, default_value = "")]
        reason: String,
    },
}

#[derive(Subcommand, Debug)]
enum SandboxCommand {
    /// Report what this machine can enforce (Landlock, namespaces, cgroups) and which presets work.
    #[command(
        after_help = "Exit codes: 0 every preset can be enforced, 1 some cannot (each missing feature is named)."
    )]
    Check {
        /// `--format json` (or `--json`): print the report as JSON.
        #[command(flatten)]
        out: OutputFormat,
    },
}

#[derive(Args, Debug)]
struct ShellMatchArgs {
    /// The shell command line.
    command: String,
    /// An allow pattern (repeatable).
    #[arg(long = "allow", value_name = "PATTERN")]
    allow: Vec<String>,
    /// An ask pattern (repeatable).
    #[arg(long = "ask", value_name = "PATTERN")]
    ask: Vec<String>,
    /// A deny pattern (repeatable).
    #[arg(long = "deny", value_name = "PATTERN")]
    deny: Vec<String>,
    /// Show each segment's decision: the deciding rule and token, and why.
    #[arg(long)]
    explain: bool,
    /// `--format json` (or `--json`): print the explanation as JSON (implies --explain).
    #[command(flatten)]
    out: OutputFormat,
}

/// `car man`: the man page, rendered from the same definitions as `--help`.
fn man() -> CliResult {
    use std::io::Write as _;
    let mut out = Vec::new();
    clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
        .render(&mut out)
        .map_err(|e| CliError::Runtime(format!("cannot render the man page: {e}")))?;
    std::io::stdout().write_all(&out).map_err(|e| CliError::Runtime(format!("cannot write the man page: {e}")))?;
    Ok(0)
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    // `car ... | head`: a closed pipe ends the program quietly.
    car_sandbox_child::default_sigpipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => run::run(a),
        Command::Plan(a) => run::run(a.dry_run()),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "car", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man => man(),
        Command::Verify(a) => {
            let format = if a.json { Format::Json } else { a.format };
            inspect::verify(&a.plan, a.state.as_deref(), a.tools.as_deref(), a.max_actions, format)
        }
        Command::Simulate(a) if a.monte_carlo.is_some() => inspect::monte_carlo(&a),
        Command::Simulate(a) => inspect::simulate(&a.plan, a.state.as_deref()),
        Command::Optimize(a) => inspect::optimize(&a.plan),
        Command::Policy(PolicyCommand::Check { plan, dir, out }) => {
            inspect::policy_check(&plan, dir.as_deref(), out.json())
        }
        Command::Policy(PolicyCommand::Lint { dir, out }) => inspect::policy_lint(&dir, out.json()),
        Command::Permission(PermissionCommand::Explain(a)) => permissions::explain(a),
        Command::ShellMatch(a) if a.explain || a.out.json() => {
            shell_match::explain(&a.command, &a.allow, &a.ask, &a.deny, a.out.json())
        }
        Command::ShellMatch(a) => inspect::shell_match(&a.command, &a.allow, &a.ask, &a.deny),
        Command::Sandbox(SandboxCommand::Check { out }) => sandbox::check(out.json()),
        Command::Approvals(ApprovalsCommand::List { dir, format }) => approvals_list(&dir, format.json()),
        Command::Approvals(ApprovalsCommand::Resolve { dir, key, decision, reason }) => {
            approvals_resolve(&dir, &key, &decision, &reason)
        }
        Command::Events(EventsCommand::Export { dir, out }) => events::export(dir.as_deref(), out.as_deref()),
        Command::Events(EventsCommand::Verify { file, format }) => events::verify(&file, format.json()),
        #[cfg(feature = "mcp")]
        Command::Mcp(McpCommand::Serve(a)) => mcp::serve(a),
        #[cfg(feature = "server")]
        Command::Serve { args } => return car_runtime::server::cli::main_with_args(args),
    };
    // The empty placeholders of the runtime's own file names a sandboxed
    // run made in the root go now, not after a linger the process would
    // not live to see.
    car_runtime::sandbox::release_idle_placeholders();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(CliError::Input(msg)) => {
            eprintln!("error: {}", shown(&msg));
            ExitCode::from(2)
        }
        Err(CliError::Runtime(msg)) => {
            eprintln!("error: {}", shown(&msg));
            ExitCode::from(1)
        }
    }
}

/// Reads a file as text; a failure names it.
pub fn read_text(path: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|e| CliError::input(format!("{}: cannot read: {e}", path.display())))
}

/// Reads and parses a plan; a malformed one is reported as
/// `FILE: JSON.path: reason`.
pub fn read_plan(path: &Path) -> Result<(String, ActionProposal), CliError> {
    let text = read_text(path)?;
    let proposal =
        car_runtime::ir::parse_proposal(&text).map_err(|e| CliError::input(format!("{}: {e}", path.display())))?;
    Ok((text, proposal))
}

/// Reads a JSON document of type `T`; errors name the file and JSON path.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, CliError> {
    let text = read_text(path)?;
    car_runtime::ir::from_json_str(&text).map_err(|e| CliError::input(format!("{}: {e}", path.display())))
}

/// Reads a state file: a JSON object of key → value.
pub fn read_state(path: &Path) -> Result<Map<String, Value>, CliError> {
    read_json(path)
}

/// Serialises to pretty JSON (plain data: cannot fail).
pub fn pretty<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into())
}

/// Terminal-safe text: one implementation, in the library (the daemon's
/// log uses it too).
pub use car_runtime::terminal::{shown, shown_lines};

fn approvals_list(dir: &std::path::Path, json: bool) -> CliResult {
    let dir = dir.to_string_lossy();
    let text = car_runtime::api::gate::approvals_pending(&dir).map_err(|e| CliError::Input(format!("{dir}: {e}")))?;
    if json {
        println!("{text}");
        return Ok(0);
    }
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let pending = v["pending"].as_array().cloned().unwrap_or_default();
    if pending.is_empty() {
        println!("no pending approvals in {dir}");
    }
    for p in pending {
        let field = |k: &str| p[k].as_str().map(|s| shown(s).into_owned()).unwrap_or_default();
        println!(
            "{}  tool {}  requested {}  deadline {}",
            field("key"),
            field("tool"),
            field("requested_at"),
            field("deadline")
        );
    }
    Ok(0)
}

fn approvals_resolve(dir: &std::path::Path, key: &str, decision: &str, reason: &str) -> CliResult {
    let dir = dir.to_string_lossy();
    let text = car_runtime::api::gate::approval_resolve(&dir, key, decision, reason)
        .map_err(|e| CliError::Input(format!("{dir}: {e}")))?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    if v["applied"] == false {
        println!("{}: already closed ({}); nothing changed", shown(key), shown(v["decision"].as_str().unwrap_or("?")));
        return Ok(1);
    }
    println!("{}: {decision}", shown(key));
    Ok(0)
}
