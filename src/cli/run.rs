//! `car run`: plan, decide, execute, report.
//!
//! 1. Parse the plan, open the root, load the policies (nearest
//!    `.car/policies` walking up from the root) and the permission chain
//!    (preset plus the nearest `.car/permissions.toml`).
//! 2. Print the plan: each action, its permission verdict (the chain
//!    evaluated on the action's parameters), the policy rules it would meet,
//!    and for `write_file` / `edit_file` a unified diff computed without
//!    writing.
//! 3. Decide every `ask` (the action's own and its compensation's): `--yes`
//!    approves, `--no-input` denies, a terminal prompts (approve, deny,
//!    approve this tool for the session), anything else denies (a
//!    non-interactive run never waits).
//! 4. Record each answer on the plan (`proposal_decide`, an action's
//!    compensation by its handle `ID#compensation`), then run the plan
//!    (`proposal_apply`) with the runtime's one admission stage configured
//!    from the same document. The plan above is that stage's own preview; an
//!    ask the stage meets that the plan did not show is denied by the one
//!    approver attached here, which never approves. Nothing here decides on
//!    its own: a deny rule or a policy refuses the action at admission
//!    whatever was answered.

use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Args;
use serde_json::{Map, Value};

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{RuntimeOptions, ToolCall, ToolExecutor};
use car_runtime::ir::{Action, ActionProposal, ActionStatus, ActionType, Compensation, ProposalResult, ToolFailure};
use car_runtime::permission::Verdict;
use car_runtime::tools::{BuiltinExecutor, Root};

use car_runtime::gate::ApprovalEvent;

use super::permissions::{self, Permissions};
use super::{CliError, CliResult, pretty, read_plan, read_state, shown};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The plan (ActionProposal JSON); not with `--resume`.
    #[arg(required_unless_present = "resume", conflicts_with = "resume")]
    plan: Option<PathBuf>,
    /// The directory the file tools are confined to and `shell` runs in.
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// Permission preset: strict, standard or open (default: the `preset` of
    /// `.car/permissions.toml`, else standard).
    #[arg(long, value_parser = ["strict", "standard", "open"])]
    preset: Option<String>,
    /// Approve every action that asks.
    #[arg(long, conflicts_with = "no_input")]
    yes: bool,
    /// Never prompt: deny every action that asks.
    #[arg(long)]
    no_input: bool,
    /// `--format json` (or `--json`): print the full ProposalResult as JSON on stdout (the plan and progress go to stderr).
    #[command(flatten)]
    out: super::OutputFormat,
    /// Load the state from this JSON file (when it exists) and save it after the run.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Do not run compensations when the proposal aborts.
    #[arg(long)]
    no_compensate: bool,
    /// Print the plan (verdicts, previews, verification) and stop: nothing
    /// is asked or run (`car plan` is the same). With `--format json` the
    /// plan itself is printed as JSON. Exit 1 when some action would be denied.
    #[arg(long)]
    dry_run: bool,
    /// Rehearse the plan against stand-ins: a JSON array of ToolSchemas
    /// registered in place of any tool of the same name; a call of one runs
    /// nothing and returns `{"ok": true, "stub": true}` (or fails when its
    /// parameters hold `"fail": true`). Admission decides as for real tools.
    #[arg(long, value_name = "FILE")]
    stub_tools: Option<PathBuf>,
    /// Append the run's events to `events.jsonl` in this directory (default:
    /// `$CAR_HOME`, else `~/.car`); `car events export` / `verify` read it.
    #[arg(long, value_name = "DIR", conflicts_with = "no_event_log")]
    events_dir: Option<PathBuf>,
    /// Do not append the run's events to the audit log.
    #[arg(long)]
    no_event_log: bool,
    /// Do not ask: an action that asks suspends the run instead (exit 3).
    /// Its approval waits in the state directory (`$CAR_HOME`; answer it
    /// with `car approvals resolve --dir DIR KEY allow`) and the run in
    /// `DIR/checkpoints`, for `car run --resume ID`.
    #[arg(long, conflicts_with_all = ["yes", "no_input", "dry_run"])]
    suspend: bool,
    /// Resume the run `car run --suspend` suspended: what had not run goes
    /// through admission again (an approval answered meanwhile applies) and
    /// runs; what ran is not run again. Exit 3 when it suspends again.
    #[arg(long, value_name = "ID", conflicts_with_all = ["yes", "no_input", "dry_run", "stub_tools"])]
    resume: Option<String>,
}

/// The exit code of a run that suspended (`--suspend`, `--resume`).
pub const EXIT_SUSPENDED: u8 = 3;

/// Where human output goes: stdout, or stderr under `--json`.
#[derive(Clone, Copy)]
struct Out {
    err: bool,
}

impl Out {
    /// Prints one line; every character that could drive the terminal
    /// (from an id, a command, a path, a message) is escaped ([`shown`]).
    fn line(self, s: impl AsRef<str>) {
        self.emit(&shown(s.as_ref()));
    }

    /// Prints `lead`, `word` in its colour (one of the CLI's own words,
    /// padded to `width`) and `rest`; `lead` and `rest` are escaped.
    fn marked(self, lead: &str, word: &str, width: usize, rest: impl AsRef<str>) {
        let on = super::colour::enabled(self.err);
        self.emit(&format!("{}{}{}", shown(lead), super::colour::word(on, word, width), shown(rest.as_ref())));
    }

    /// Writes one line already made safe for a terminal.
    fn emit(self, s: &str) {
        if self.err {
            let mut e = std::io::stderr().lock();
            let _ = writeln!(e, "{s}");
        } else {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "{s}");
            let _ = o.flush();
        }
    }
}

/// One action as planned: an item of the runtime's own plan
/// ([`CarRuntime::proposal_plan`]), rendered.
struct PlanItem {
    id: String,
    tool: Option<String>,
    verdict: Verdict,
    /// The deciding layer and rule, in words.
    why: String,
    /// A policy refusal: `(policy, reason)`.
    policy: Option<(String, String)>,
    /// The approval key of an ask: `tool:digest`.
    ask_key: Option<String>,
    /// The compensation's own verdict, when it has a `tool` compensation.
    compensation: Option<Previewed>,
    /// The plan's handle for deciding the compensation's ask (`decide_as`).
    compensation_handle: Option<String>,
}

/// A planned call: `(verdict, why, the approval key of an ask)`.
type Previewed = (Verdict, String, Option<String>);

fn input_error(e: impl std::fmt::Display) -> CliError {
    CliError::Input(e.to_string())
}

/// A short description of what an action does.
fn summary(a: &Action) -> String {
    let p = &a.parameters;
    let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    match (a.action_type, a.tool.as_deref()) {
        (ActionType::ToolCall, Some("shell")) => format!("shell `{}`", s("command")),
        (ActionType::ToolCall, Some("write_file")) => {
            format!("write_file {} ({} bytes)", s("path"), p.get("content").and_then(Value::as_str).map_or(0, str::len))
        }
        (ActionType::ToolCall, Some(t)) => {
            let mut text = p.to_value().to_string();
            if text.len() > 100 {
                let cut = (0..=97).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
                text.truncate(cut);
                text.push_str("...");
            }
            format!("{t} {text}")
        }
        (t, _) => match p.get("key").and_then(Value::as_str) {
            Some(k) => format!("{} {k}", t.as_str()),
            None => t.as_str().to_string(),
        },
    }
}

/// A verdict of the plan: `allow`, `ask` or `deny` (anything else is a deny).
fn verdict_of(v: &Value) -> Verdict {
    match v["verdict"].as_str() {
        Some("allow") => Verdict::Allow,
        Some("ask") => Verdict::Ask,
        _ => Verdict::Deny,
    }
}

/// The deciding layer and rule of a plan decision, in words.
fn why(perms: &Permissions, d: &Value) -> String {
    let layer = d["layer"].as_str().unwrap_or("none");
    let said = match (d.get("rule").filter(|r| !r.is_null()), layer) {
        (Some(rule), by) => format!("{by} {}", serde_json::to_string(rule).unwrap_or_default()),
        (None, "shell-allow") => {
            "every segment matches a [shell] allow pattern of .car/permissions.toml (no deny rule matched)".to_string()
        }
        (None, "default") => format!("default ({} preset)", perms.preset.as_str()),
        (None, "tier") => format!("tier: {}", d["reason"].as_str().unwrap_or("")),
        (None, by) if verdict_of(d) == Verdict::Deny => format!("{by}: {}", d["reason"].as_str().unwrap_or("")),
        (None, by) => by.to_string(),
    };
    if d["downgraded_from_ask"] == Value::Bool(true) {
        format!("{said} (an ask for a data_source tool is a deny)")
    } else {
        said
    }
}

fn previewed(perms: &Permissions, d: &Value) -> Previewed {
    (verdict_of(d), why(perms, d), d["approval_key"].as_str().map(str::to_string))
}

/// The runtime's plan of the proposal, as items to render.
fn plan_items(plan: &Value, perms: &Permissions) -> Vec<PlanItem> {
    plan["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let (verdict, why, ask_key) = previewed(perms, d);
            let policy = (d["layer"] == "policy").then(|| {
                (d["rule"].as_str().unwrap_or("policy").to_string(), d["reason"].as_str().unwrap_or("").to_string())
            });
            PlanItem {
                id: d["action_id"].as_str().unwrap_or("").to_string(),
                tool: d["tool"].as_str().map(str::to_string),
                verdict,
                why,
                policy,
                ask_key,
                compensation: d.get("compensation").map(|c| previewed(perms, c)),
                compensation_handle: d["compensation"]["decide_as"].as_str().map(str::to_string),
            }
        })
        .collect()
}

fn print_plan(
    out: Out,
    plan: &Path,
    root_shown: &Path,
    root: &Root,
    perms: &Permissions,
    proposal: &ActionProposal,
    items: &[PlanItem],
) {
    let count = |v: Verdict| items.iter().filter(|i| i.verdict == v && i.policy.is_none()).count();
    let policy_denied = items.iter().filter(|i| i.policy.is_some()).count();
    out.line(format!(
        "Plan: {} ({} action{}) in {}, preset {}{}",
        plan.display(),
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        root_shown.display(),
        perms.preset.as_str(),
        perms.file.as_ref().map_or(String::new(), |f| format!(", rules {}", f.display()))
    ));
    out.line("");
    for (a, item) in proposal.actions.iter().zip(items) {
        let mark = item.verdict.as_str();
        let deps =
            if a.dependencies.is_empty() { String::new() } else { format!("  (after {})", a.dependencies.join(", ")) };
        out.marked("  [", mark, 5, format!("] {}: {}{deps}", item.id, summary(a)));
        match &item.policy {
            Some((name, reason)) => out.line(format!("            policy {name}: {reason}")),
            None => out.line(format!("            permission {}: {}", item.verdict.as_str(), item.why)),
        }
        if let Some(Compensation::Tool { tool, parameters }) = a.compensation.as_deref() {
            let mut c = Action::tool_call(tool.clone());
            c.parameters = parameters.clone().into();
            let verdict = item.compensation.as_ref().map_or("allow", |(v, _, _)| v.as_str());
            out.line(format!("            compensation on abort: {} (permission {verdict})", summary(&c)));
        }
        if let Some(tool) = &item.tool {
            match car_runtime::tools::preview(root, tool, &a.parameters.to_map()) {
                Ok(Some(diff)) if diff.is_empty() => out.line("            (no change)"),
                Ok(Some(diff)) => {
                    // The header names the file: a path holding a newline
                    // must stay one header line, not become plan lines.
                    let (header, body) = diff_header(&diff);
                    if let Some(rel) = header {
                        out.line(format!("            --- a/{rel}"));
                        out.line(format!("            +++ b/{rel}"));
                    }
                    for l in body.lines() {
                        out.line(format!("            {l}"));
                    }
                }
                Ok(None) => {}
                Err(f) => out.line(format!("            cannot preview: {}", f.message)),
            }
        }
    }
    out.line("");
    out.line(format!(
        "{} to run, {} to ask, {} denied by permissions, {} denied by policy",
        count(Verdict::Allow),
        count(Verdict::Ask),
        count(Verdict::Deny),
        policy_denied
    ));
}

/// The static verification's findings against the loaded state and the
/// built-in tools' schemas (admission enforces the errors; nothing here
/// blocks).
fn print_verification(out: Out, rt: &CarRuntime, text: &str) {
    let Ok(json) = rt.verify_proposal(text) else { return };
    let Ok(v) = serde_json::from_str::<car_runtime::ir::VerificationResult>(&json) else { return };
    if v.issues.is_empty() {
        return;
    }
    out.line("Verification:");
    for i in &v.issues {
        let sev = serde_json::to_value(i.severity).ok().and_then(|s| s.as_str().map(str::to_string));
        out.marked("  ", &sev.unwrap_or_default(), 7, format!(" {}: {}", i.action_id, i.message));
    }
}

/// An answer to one `ask`.
/// Splits a unified diff's `--- a/R` / `+++ b/R` header (with `R` as it is,
/// newlines included) from its hunks; `None` when there is no such header.
fn diff_header(diff: &str) -> (Option<&str>, &str) {
    if let Some(rest) = diff.strip_prefix("--- a/") {
        for (i, _) in rest.match_indices("\n+++ b/") {
            let rel = &rest[..i];
            if let Some(body) = rest[i + 7..].strip_prefix(rel).and_then(|b| b.strip_prefix('\n')) {
                return (Some(rel), body);
            }
        }
    }
    (None, diff)
}

enum Answer {
    Yes,
    No,
    Session,
}

fn prompt(id: &str, tool: &str, summary: &str) -> Answer {
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "\nApprove {} ({})?\n  [y] approve  [n] deny  [a] approve `{}` for the rest of this run: ",
        shown(id),
        shown(summary),
        shown(tool)
    );
    loop {
        let _ = err.flush();
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            // End of input: nobody is there to approve.
            Ok(0) | Err(_) => return Answer::No,
            Ok(_) => match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Answer::Yes,
                "n" | "no" => return Answer::No,
                "a" | "always" | "s" | "session" => return Answer::Session,
                other => {
                    // An answer that is none of them decides nothing: ask again.
                    let _ = write!(err, "  `{}` is not an answer; type y, n or a: ", shown(other));
                }
            },
        }
    }
}

/// The answers to the plan's asks, in plan order: (approved, reason, for
/// the rest of the run, the plan handle it decides: an action id, or
/// `ID#compensation`).
type Answers = Vec<(bool, String, bool, String)>;

/// Asks for every ask of the plan (an action's and its compensation's).
fn decide(a: &RunArgs, out: Out, proposal: &ActionProposal, items: &[PlanItem]) -> Answers {
    let mut answers = Answers::new();
    let mut session_tools: HashSet<String> = HashSet::new();
    let interactive = !a.yes && !a.no_input && std::io::stdin().is_terminal();
    let mut told = false;
    for (act, item) in proposal.actions.iter().zip(items) {
        // `(label, what it does, why it asks, tool)`, `(approval key, own action)`.
        let mut asks: Vec<[String; 4]> = Vec::new();
        let mut keys: Vec<String> = Vec::new();
        if item.verdict == Verdict::Ask && item.ask_key.is_some() {
            asks.push([item.id.clone(), summary(act), item.why.clone(), item.tool.clone().unwrap_or_default()]);
            keys.push(item.id.clone());
        }
        if let (Some((Verdict::Ask, why, _)), Some(handle), Some(Compensation::Tool { tool, parameters })) =
            (&item.compensation, &item.compensation_handle, act.compensation.as_deref())
        {
            let mut c = Action::tool_call(tool.clone());
            c.parameters = parameters.clone().into();
            asks.push([format!("{} (its compensation)", item.id), summary(&c), why.clone(), tool.clone()]);
            keys.push(handle.clone());
        }
        for ([id, what, why, tool], handle) in asks.into_iter().zip(keys) {
            let mut for_run = false;
            let (approved, reason) = if a.yes {
                out.line(format!("  {id} approved by --yes"));
                (true, format!("approved by --yes; decided by {why}"))
            } else if a.no_input {
                (false, format!("refused by --no-input; decided by {why}"))
            } else if !interactive {
                if !told {
                    out.line("stdin is not a terminal: every `ask` is denied (pass --yes to approve, --no-input to silence this)");
                    told = true;
                }
                (false, format!("no terminal to ask; decided by {why}"))
            } else if session_tools.contains(&tool) {
                out.line(format!("  {id} approved: `{tool}` was approved for this run"));
                (true, format!("`{tool}` approved for this run"))
            } else {
                match prompt(&id, &tool, &what) {
                    Answer::Yes => (true, "approved by the user".to_string()),
                    Answer::Session => {
                        session_tools.insert(tool.clone());
                        for_run = true;
                        (true, format!("`{tool}` approved for this run by the user"))
                    }
                    Answer::No => (false, format!("denied by the user; decided by {why}")),
                }
            };
            answers.push((approved, reason, for_run, handle));
        }
    }
    answers
}

/// The built-in executor with one progress line per call.
struct Progress {
    inner: BuiltinExecutor,
    /// Tools answered by a stand-in (`--stub-tools`).
    stubs: HashSet<String>,
    out: Out,
    total: usize,
    done: AtomicUsize,
    succeeded: std::sync::Mutex<HashSet<String>>,
}

impl Progress {
    /// Runs a call: a stand-in answers a stubbed tool, the built-ins the rest.
    async fn call_tool(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        if !self.stubs.contains(&call.tool) {
            return self.inner.execute(call).await;
        }
        if call.params.get("fail") == Some(&Value::Bool(true)) {
            Err(ToolFailure::ordinary("stub failure"))
        } else {
            Ok(serde_json::json!({"ok": true, "stub": true}))
        }
    }
}

#[async_trait]
impl ToolExecutor for Progress {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        let (id, tool, attempt) = (call.action_id.clone(), call.tool.clone(), call.attempt);
        // A call for an action that already succeeded is its compensation.
        let compensation = self.succeeded.lock().map(|s| s.contains(&id)).unwrap_or(false);
        if compensation {
            let r = self.call_tool(call).await;
            match &r {
                Ok(_) => self.out.marked("  ", "undone", 8, format!(" {id} ({tool}): compensation ran")),
                Err(f) => {
                    self.out.marked("  ", "FAILED", 8, format!(" {id} ({tool}): compensation failed: {}", f.message))
                }
            }
            return r;
        }
        let start = Instant::now();
        let fut = self.call_tool(call);
        tokio::pin!(fut);
        let r = tokio::select! {
            r = &mut fut => r,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {
                self.out.line(format!("  ...      {id} ({tool}) still running"));
                fut.await
            }
        };
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        let n = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        if r.is_ok()
            && let Ok(mut s) = self.succeeded.lock()
        {
            s.insert(id.clone());
        }
        let total = self.total;
        match &r {
            Ok(_) => self.out.marked("  ", "ok", 8, format!(" {id} ({tool}) {ms:.0} ms  [{n}/{total}]")),
            Err(f) => {
                let first = f.message.lines().next().unwrap_or("");
                self.out.marked(
                    "  ",
                    "failed",
                    8,
                    format!(" {id} ({tool}) attempt {attempt}, {ms:.0} ms: {first}  [{n}/{total}]"),
                )
            }
        }
        r
    }
}

/// A private directory for one run's approvals, removed on drop.
struct ApprovalsDir(PathBuf);

impl ApprovalsDir {
    fn create() -> Result<Self, CliError> {
        let dir = std::env::temp_dir().join(format!("car-run-{}-{}", std::process::id(), uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::Runtime(format!("cannot create the approvals directory {}: {e}", dir.display())))?;
        Ok(ApprovalsDir(dir))
    }
}

impl Drop for ApprovalsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn save_state(rt: &CarRuntime, file: &Path) -> Result<(), CliError> {
    let snap = rt.state_snapshot(None).map_err(|e| CliError::Runtime(e.to_string()))?;
    let v: Value = serde_json::from_str(&snap).unwrap_or(Value::Object(Map::new()));
    let tmp = file.with_extension("json.tmp");
    std::fs::write(&tmp, pretty(&v) + "\n")
        .and_then(|_| std::fs::rename(&tmp, file))
        .map_err(|e| CliError::Runtime(format!("{}: cannot save the state: {e}", file.display())))
}

fn status_word(s: ActionStatus, denied: bool) -> &'static str {
    match s {
        ActionStatus::Succeeded => "ok",
        ActionStatus::Failed => "FAILED",
        ActionStatus::Rejected if denied => "DENIED",
        ActionStatus::Rejected => "REJECTED",
        ActionStatus::Skipped => "skipped",
        _ => "pending",
    }
}

impl RunArgs {
    /// The same arguments as a dry run (`car plan`).
    pub(super) fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }
}

/// `car run`.
pub fn run(a: RunArgs) -> CliResult {
    let root = Root::new(&a.root).map_err(|e| CliError::Input(format!("--root: {e}")))?;
    let out = Out { err: a.out.json() };
    let (rt, perms, stubs) = runtime(&a, &root)?;
    let Some(plan_path) = a.plan.clone() else {
        let id = a.resume.clone().unwrap_or_default();
        return resume(&a, out, &root, &rt, &perms, &id);
    };
    let (text, proposal) = read_plan(&plan_path)?;

    // The run's approvals live in a private directory, removed afterwards;
    // under `--suspend` in the state directory, where they outlive the run.
    let approvals = if a.suspend { None } else { Some(ApprovalsDir::create()?) };
    let mut config = admission_config(&a, &perms)?;
    config.approvals_dir = Some(match &approvals {
        Some(d) => d.0.to_string_lossy().into_owned(),
        None => super::events::state_dir(a.events_dir.as_deref())?.to_string_lossy().into_owned(),
    });
    rt.configure_admission(config).map_err(|e| CliError::Input(e.to_string()))?;

    // The plan is the runtime's own (`proposal_plan`): every layer's
    // verdict, rendered here.
    let plan: Value = serde_json::from_str(&rt.proposal_plan(&text, None, None).map_err(input_error)?)
        .map_err(|e| CliError::Runtime(format!("unreadable plan: {e}")))?;
    let plan_id = plan["plan_id"].as_str().unwrap_or_default().to_string();
    let items = plan_items(&plan, &perms);
    print_plan(out, &plan_path, &a.root, &root, &perms, &proposal, &items);
    print_verification(out, &rt, &text);
    if a.dry_run {
        let counts = &plan["counts"];
        out.line("");
        out.line(format!(
            "Dry run: nothing was asked or run ({} allow, {} ask, {} deny).",
            counts["allow"], counts["ask"], counts["deny"]
        ));
        if a.out.json() {
            println!("{}", pretty(&plan));
        }
        return Ok(if counts["deny"].as_u64().unwrap_or(0) > 0 { 1 } else { 0 });
    }
    if !a.suspend {
        let answers = decide(&a, out, &proposal, &items);
        // Every answer is decided on the plan (`once`, or `session` for "this
        // tool for the rest of the run"), a compensation's by its handle.
        for (approved, reason, for_run, handle) in &answers {
            let scope = if *for_run { "session" } else { "once" };
            rt.proposal_decide(&plan_id, handle, if *approved { "allow" } else { "deny" }, scope, reason)
                .map_err(|e| CliError::Runtime(e.to_string()))?;
        }

        // An ask the plan did not show (nobody was asked): denied at once, so a
        // run never waits for an approval nobody will give.
        let resolver = rt.clone();
        rt.on_approval(Arc::new(move |ev: &ApprovalEvent| {
            if let ApprovalEvent::Pending(p) = ev {
                let _ = resolver.approval_resolve(&p.key, "deny", "not approved before the run");
            }
        }));
    }

    out.line("");
    out.line("Running:");
    let tool_calls = proposal
        .actions
        .iter()
        .zip(&items)
        .filter(|(x, i)| x.action_type == ActionType::ToolCall && i.verdict != Verdict::Deny)
        .count();
    let exec = progress(&rt, &root, stubs, out, tool_calls);
    let result_json = block_on(rt.proposal_apply(&plan_id, exec))?.map_err(|e| CliError::Runtime(e.to_string()))?;
    let result: ProposalResult =
        serde_json::from_str(&result_json).map_err(|e| CliError::Runtime(format!("unreadable ProposalResult: {e}")))?;
    drop(approvals);
    report(&a, out, &root, &rt, result)
}

/// The runtime of a run: the audit log, the built-in tools (and the
/// stand-ins of `--stub-tools`), the policy directory, the permissions of
/// the root and the state of `--state`.
fn runtime(a: &RunArgs, root: &Root) -> Result<(CarRuntime, Permissions, HashSet<String>), CliError> {
    let rt = CarRuntime::with_options(RuntimeOptions::default());
    rt.set_working_dir(Some(root.path()));
    if !a.no_event_log {
        let dir = super::events::state_dir(a.events_dir.as_deref())?;
        let path = dir.join(car_runtime::store::file::EVENTS_FILE);
        let (file, report) =
            car_runtime::store::file::AuditFile::open(&path).map_err(|e| CliError::Runtime(e.to_string()))?;
        if let Some(t) = &report.torn {
            let moved = t.moved_to.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            eprintln!(
                "warning: {}: line {} was a torn record ({} bytes): skipped, moved to {moved}",
                path.display(),
                t.line,
                t.bytes
            );
        }
        rt.runtime().events().attach_file(std::sync::Arc::new(file));
    }
    for t in car_runtime::tools::builtin_tools() {
        let schema = serde_json::to_string(&t.schema).unwrap_or_default();
        rt.register_tool_schema(&schema).map_err(|e| CliError::Runtime(e.to_string()))?;
    }
    let mut stubs: HashSet<String> = HashSet::new();
    if let Some(f) = &a.stub_tools {
        let text = super::read_text(f)?;
        let schemas: Vec<Value> = car_runtime::ir::from_json_str(&text)
            .map_err(|e| CliError::Input(format!("--stub-tools {}: {e}", f.display())))?;
        for s in schemas {
            rt.register_tool_schema(&s.to_string())
                .map_err(|e| CliError::Input(format!("--stub-tools {}: {e}", f.display())))?;
            stubs.insert(s["name"].as_str().unwrap_or_default().to_string());
        }
    }
    let policy_dir = car_runtime::policy::discover_policy_dir(root.path());
    if let Some(d) = &policy_dir {
        rt.load_policies(&d.to_string_lossy()).map_err(input_error)?;
    }
    let perms = permissions::load(root.path(), a.preset.as_deref())?;
    if let Some(f) = a.state.as_ref().filter(|f| f.exists()) {
        for (k, v) in read_state(f)? {
            rt.state_set(&k, &v.to_string(), None)
                .map_err(|e| CliError::Input(format!("{}: {k}: {e}", f.display())))?;
        }
    }
    Ok((rt, perms, stubs))
}

/// The admission document of a run: the permissions' with the run's flags.
fn admission_config(a: &RunArgs, perms: &Permissions) -> Result<car_runtime::admission::AdmissionConfig, CliError> {
    let mut config = perms.config.clone();
    if a.no_compensate {
        config.compensate_on_abort = Some(false);
    } else if config.compensate_on_abort.is_none() {
        config.compensate_on_abort = Some(true);
    }
    if a.suspend || a.resume.is_some() {
        config.on_ask = Some(car_runtime::admission::OnAsk::Suspend);
    }
    Ok(config)
}

fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, CliError> {
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(format!("cannot start the async runtime: {e}")))?;
    Ok(tokio_rt.block_on(f))
}

fn progress(rt: &CarRuntime, root: &Root, stubs: HashSet<String>, out: Out, total: usize) -> Arc<Progress> {
    Arc::new(Progress {
        inner: BuiltinExecutor::new(root.clone()).with_runtime(rt.runtime().clone()),
        stubs,
        out,
        total,
        done: AtomicUsize::new(0),
        succeeded: std::sync::Mutex::new(HashSet::new()),
    })
}

/// `car run --resume ID`: the suspended run of the state directory, with
/// this root's tools and permissions.
fn resume(a: &RunArgs, out: Out, root: &Root, rt: &CarRuntime, perms: &Permissions, id: &str) -> CliResult {
    let mut config = admission_config(a, perms)?;
    let dir = super::events::state_dir(a.events_dir.as_deref())?;
    config.approvals_dir = Some(dir.to_string_lossy().into_owned());
    rt.configure_admission(config).map_err(|e| CliError::Input(e.to_string()))?;
    let shown_dir = dir.display().to_string();
    out.line(format!("Resuming {} (state directory {}):", shown(id), shown(&shown_dir)));
    // The progress counts the tool calls still to run.
    let total = match block_on(rt.runtime().checkpoints().get(id))? {
        Ok(Some(cp)) => cp
            .proposal
            .actions
            .iter()
            .zip(&cp.results)
            .filter(|(x, r)| x.action_type == ActionType::ToolCall && r.is_none())
            .count(),
        _ => 0,
    };
    let exec = progress(rt, root, HashSet::new(), out, total);
    let result_json = block_on(rt.resume_proposal(id, exec))?.map_err(|e| match e.code() {
        "suspension_not_found" | "suspension_claimed" | "suspension_conflict" | "invalid_argument" => {
            CliError::Input(e.to_string())
        }
        _ => CliError::Runtime(e.to_string()),
    })?;
    let result: ProposalResult =
        serde_json::from_str(&result_json).map_err(|e| CliError::Runtime(format!("unreadable ProposalResult: {e}")))?;
    report(a, out, root, rt, result)
}

/// Prints the results, the summary and (with `--json`) the result; the exit code.
fn report(a: &RunArgs, out: Out, root: &Root, rt: &CarRuntime, result: ProposalResult) -> CliResult {
    if let Some(f) = &a.state {
        save_state(rt, f)?;
    }

    // Results: one line per action, then the cost rows. Denied: refused by
    // a deciding layer (the last admission decision of the action); any
    // other rejection is a check of the action itself (schema, unknown
    // tool, a precondition, ...).
    let decisions: Value = rt
        .event_query(r#"{"kinds":["AdmissionDecided"]}"#)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let mut last_layer: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for e in decisions["events"].as_array().into_iter().flatten() {
        // Newest first: the first seen is the last decision.
        if let Some(id) = e["action_id"].as_str()
            && e["data"]["stage"] != "compensation"
        {
            last_layer.entry(id.to_string()).or_insert_with(|| e["data"]["layer"].as_str().unwrap_or("").to_string());
        }
    }
    out.line("");
    out.line("Results:");
    let (mut ok, mut failed, mut denied, mut rejected, mut skipped, mut waiting) = (0, 0, 0, 0, 0, 0);
    for r in &result.results {
        // Denied: refused by the permission chain, the tier, the user or a
        // policy; otherwise a rejection is an admission check (schema,
        // unknown tool, a precondition, ...).
        let is_denied = r.status == ActionStatus::Rejected
            && last_layer.get(&r.action_id).is_some_and(|l| car_runtime::admission::layer::is_deciding(l));
        match r.status {
            ActionStatus::Succeeded => ok += 1,
            ActionStatus::Failed => failed += 1,
            ActionStatus::Rejected if is_denied => denied += 1,
            ActionStatus::Rejected => rejected += 1,
            ActionStatus::Proposed => waiting += 1,
            _ => skipped += 1,
        }
        let ms = r.duration_ms.map_or(String::new(), |d| format!(" {d:.0} ms"));
        let mut line = format!("  {:<8} {}{ms}", status_word(r.status, is_denied), r.action_id);
        if let Some(e) = r.error.as_ref().filter(|_| r.status != ActionStatus::Succeeded) {
            line.push_str(&format!(": {}", e.lines().next().unwrap_or("").trim_end()));
        }
        if r.rolled_back {
            line.push_str(" (the proposal aborted: its state effects were rolled back)");
        }
        if r.compensated {
            line.push_str(" (compensated)");
        }
        if let Some(c) = &r.compensation_error {
            line.push_str(&format!(" (compensation failed: {c})"));
        }
        out.line(line);
    }
    let c = &result.cost;
    out.line("");
    let rejected = if rejected > 0 { format!(", {rejected} rejected") } else { String::new() };
    let waiting = if waiting > 0 { format!(", {waiting} waiting") } else { String::new() };
    out.line(format!(
        "Summary: {ok} succeeded, {failed} failed, {denied} denied{rejected}, {skipped} skipped{waiting}"
    ));
    out.line(format!("  actions_executed   {}", c.actions_executed));
    out.line(format!("  actions_rejected   {}", c.actions_rejected));
    out.line(format!("  actions_skipped    {}", c.actions_skipped));
    out.line(format!("  tool_calls         {}", c.tool_calls));
    out.line(format!("  retries            {}", c.retries));
    out.line(format!("  total_duration_ms  {:.1}", c.total_duration_ms));
    if let Some(f) = &a.state {
        out.line(format!("state saved to {}", f.display()));
    }
    for p in result.artifacts.iter().filter(|p| p["kind"] == "patch") {
        let files: Vec<&str> = p["files"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        out.line("");
        match p["error"].as_str() {
            Some(e) => out.line(format!("Worktree: the patch could not be collected: {e}")),
            None if files.is_empty() => out.line("Worktree: no file changed"),
            None => out.line(format!(
                "Worktree: {} file(s) changed, not applied to {}: {}{}",
                files.len(),
                root.path().display(),
                files.join(", "),
                if a.out.json() { " (the patch is in the JSON result)" } else { " (run with --json for the patch)" }
            )),
        }
        if let Some(w) = p["worktree"].as_str() {
            out.line(format!("  kept for inspection: {w}"));
        }
    }
    if a.out.json() {
        // The result plus every admission decision (the AdmissionDecided
        // events: verdict, layer, rule, tiers; no parameter values).
        let mut v = serde_json::to_value(&result).unwrap_or(Value::Null);
        let list: Vec<Value> = decisions["events"]
            .as_array()
            .into_iter()
            .flatten()
            .rev()
            .map(|e| {
                let mut d = e["data"].clone();
                d["action_id"] = e["action_id"].clone();
                d
            })
            .collect();
        v["admission_decisions"] = Value::Array(list);
        println!("{}", pretty(&v));
    }
    if let Some(s) = &result.suspension {
        let dir = super::events::state_dir(a.events_dir.as_deref())?;
        let dir = dir.display().to_string();
        let d = shown(&dir);
        out.line("");
        out.line(format!("Suspended: {}", shown(s["id"].as_str().unwrap_or_default())));
        for p in s["pending"].as_array().into_iter().flatten() {
            let key = shown(p["approval_key"].as_str().unwrap_or_default());
            out.line(format!(
                "  {} waits for approval {key}: car approvals resolve --dir {d} {key} allow",
                shown(p["action_id"].as_str().unwrap_or_default())
            ));
        }
        out.line(format!(
            "  then: car run --resume {} --root {}",
            shown(s["id"].as_str().unwrap_or_default()),
            shown(&a.root.display().to_string())
        ));
        return Ok(EXIT_SUSPENDED);
    }
    Ok(if ok == result.results.len() { 0 } else { 1 })
}
