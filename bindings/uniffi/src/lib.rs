//! The UniFFI binding (Swift, Kotlin, Python through generated sources): a
//! thin translation onto `car_runtime::api`. No logic lives here.

use serde_json::{Map, Value};

uniffi::setup_scaffolding!();

/// Every error of the binding: the facade's stable code and its message.
///
/// The message field is `msg`, not `message`: a field named `message` clashes
/// with `Throwable.message` in the generated Kotlin (uniffi-rs#1434). Kotlin's
/// `e.message` still carries both as `code=..., msg=...`.
#[derive(Debug, thiserror::Error, uniffi::Error)]
pub enum CarError {
    /// A facade error.
    #[error("{code}: {msg}")]
    Failed {
        /// The stable snake_case code.
        code: String,
        /// The message.
        msg: String,
    },
}

impl From<car_runtime::Error> for CarError {
    fn from(e: car_runtime::Error) -> Self {
        CarError::Failed { code: e.code().to_string(), msg: e.to_string() }
    }
}

fn parse(name: &str, text: &str) -> Result<Value, CarError> {
    serde_json::from_str(text)
        .map_err(|e| car_runtime::Error::invalid_argument(name, format!("is not valid JSON: {e}")).into())
}

fn call(method: &str, params: Map<String, Value>) -> Result<Value, CarError> {
    Ok(car_runtime::api::call(method, &Value::Object(params))?)
}

fn put(m: &mut Map<String, Value>, name: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(name.to_string(), v);
    }
}

fn text_or_string(v: Value) -> String {
    match v {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// Static verification; the verification result as JSON text.
#[uniffi::export(default(initial_state_json = None, tool_names = None, max_actions = None, tool_schemas_json = None))]
pub fn verify(
    proposal_json: String,
    initial_state_json: Option<String>,
    tool_names: Option<Vec<String>>,
    max_actions: Option<u64>,
    tool_schemas_json: Option<String>,
) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "proposal", Some(parse("proposal_json", &proposal_json)?));
    put(&mut m, "initial_state", initial_state_json.map(|s| parse("initial_state_json", &s)).transpose()?);
    put(&mut m, "tool_names", tool_names.map(Value::from));
    put(&mut m, "max_actions", max_actions.map(Value::from));
    put(&mut m, "tool_schemas", tool_schemas_json.map(|s| parse("tool_schemas_json", &s)).transpose()?);
    call("verify", m).map(|v| v.to_string())
}

/// The state a proposal leaves behind, as JSON text.
#[uniffi::export(default(initial_state_json = None))]
pub fn simulate(proposal_json: String, initial_state_json: Option<String>) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "proposal", Some(parse("proposal_json", &proposal_json)?));
    put(&mut m, "initial_state", initial_state_json.map(|s| parse("initial_state_json", &s)).transpose()?);
    call("simulate", m).map(|v| v.to_string())
}

/// The proposal with phantom state dependencies pruned, as JSON text.
#[uniffi::export]
pub fn optimize(proposal_json: String) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "proposal", Some(parse("proposal_json", &proposal_json)?));
    call("optimize", m).map(|v| v.to_string())
}

/// Sampled equivalence of two proposals.
#[uniffi::export(default(test_states_json = None))]
pub fn equivalent(p1_json: String, p2_json: String, test_states_json: Option<String>) -> Result<bool, CarError> {
    let mut m = Map::new();
    put(&mut m, "p1", Some(parse("p1_json", &p1_json)?));
    put(&mut m, "p2", Some(parse("p2_json", &p2_json)?));
    put(&mut m, "test_states", test_states_json.map(|s| parse("test_states_json", &s)).transpose()?);
    call("equivalent", m).map(|v| v.as_bool().unwrap_or(false))
}

/// Transactional hazards, as JSON text.
#[uniffi::export(default(versions_json = None, state_json = None))]
pub fn transaction_check(
    proposal_json: String,
    versions_json: Option<String>,
    state_json: Option<String>,
) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "proposal", Some(parse("proposal_json", &proposal_json)?));
    put(&mut m, "versions", versions_json.map(|s| parse("versions_json", &s)).transpose()?);
    put(&mut m, "state", state_json.map(|s| parse("state_json", &s)).transpose()?);
    call("transaction_check", m).map(|v| v.to_string())
}

/// Monte Carlo rollouts with tools allowed to fail, as JSON text.
#[uniffi::export(default(initial_state_json = None, tool_success_rates_json = None, goal_json = None, config_json = None))]
pub fn simulate_monte_carlo(
    proposal_json: String,
    initial_state_json: Option<String>,
    tool_success_rates_json: Option<String>,
    goal_json: Option<String>,
    config_json: Option<String>,
) -> Result<String, CarError> {
    car_runtime::api::planning::simulate_monte_carlo(
        &proposal_json,
        initial_state_json.as_deref(),
        tool_success_rates_json.as_deref(),
        goal_json.as_deref(),
        config_json.as_deref(),
    )
    .map_err(CarError::from)
}

/// Candidates scored and sorted best first, as JSON text.
#[uniffi::export(default(tools = None, cost_weight = None))]
pub fn rank_proposals(
    candidates_json: String,
    tools: Option<Vec<String>>,
    cost_weight: Option<f64>,
) -> Result<String, CarError> {
    car_runtime::api::planning::rank_proposals(&candidates_json, tools, cost_weight).map_err(CarError::from)
}

/// The final state with accurate-enough predictions applied, as JSON text.
#[uniffi::export(default(initial_state_json = None))]
pub fn simulate_with_predictions(
    proposal_json: String,
    predictions_json: String,
    min_accuracy: f64,
    initial_state_json: Option<String>,
) -> Result<String, CarError> {
    car_runtime::api::planning::simulate_with_predictions(
        &proposal_json,
        &predictions_json,
        min_accuracy,
        initial_state_json.as_deref(),
    )
    .map_err(CarError::from)
}

/// `transaction_check` with predicted write keys folded in, as JSON text.
#[uniffi::export(default(versions_json = None, state_json = None))]
pub fn transaction_check_with_predictions(
    proposal_json: String,
    predictions_json: String,
    versions_json: Option<String>,
    state_json: Option<String>,
) -> Result<String, CarError> {
    car_runtime::api::planning::transaction_check_with_predictions(
        &proposal_json,
        &predictions_json,
        versions_json.as_deref(),
        state_json.as_deref(),
    )
    .map_err(CarError::from)
}

/// Required tier and reversibility of every action, as JSON text.
#[uniffi::export]
pub fn permission_classify(proposal_json: String) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "proposal", Some(parse("proposal_json", &proposal_json)?));
    call("permission_classify", m).map(|v| v.to_string())
}

/// Per-action decisions against a granted tier and approvals ledger, as JSON text.
#[uniffi::export(default(ledger_path = None))]
pub fn permission_evaluate(
    proposal_json: String,
    granted_tier: String,
    ledger_path: Option<String>,
) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "proposal", Some(parse("proposal_json", &proposal_json)?));
    put(&mut m, "granted_tier", Some(Value::String(granted_tier)));
    put(&mut m, "ledger_path", ledger_path.map(Value::String));
    call("permission_evaluate", m).map(|v| v.to_string())
}

/// `allow`, `ask` or `deny` for a shell command under argv rules.
#[uniffi::export]
pub fn match_shell_command(command: String, rules_json: String) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "command", Some(Value::String(command)));
    put(&mut m, "rules", Some(parse("rules_json", &rules_json)?));
    call("match_shell_command", m).map(text_or_string)
}

/// Dry run of the permission chain, as JSON text.
#[uniffi::export]
pub fn evaluate_permission(chain_json: String, tool_json: String, input_json: String) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "chain", Some(parse("chain_json", &chain_json)?));
    // A tool definition as JSON, or just a tool name (an undeclared tool).
    put(&mut m, "tool", Some(serde_json::from_str(&tool_json).unwrap_or(Value::String(tool_json))));
    put(&mut m, "input", Some(parse("input_json", &input_json)?));
    call("evaluate_permission", m).map(|v| v.to_string())
}

/// SHA-256 (hex) of a toolset's contract fields.
#[uniffi::export]
pub fn toolset_hash(tools_json: String) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "tools", Some(parse("tools_json", &tools_json)?));
    call("toolset_hash", m).map(text_or_string)
}

/// The deny and ask rules a permission preset compiles to, as JSON text.
#[uniffi::export]
pub fn compile_permission_preset(name: String) -> Result<String, CarError> {
    let mut m = Map::new();
    put(&mut m, "name", Some(Value::String(name)));
    call("compile_permission_preset", m).map(|v| v.to_string())
}

/// The proposal with every default filled in, as JSON text.
#[uniffi::export]
pub fn normalize_proposal(proposal_json: String) -> Result<String, CarError> {
    Ok(car_runtime::api::normalize_proposal(&proposal_json)?)
}

/// The wire protocol version.
#[uniffi::export]
pub fn protocol_version() -> u32 {
    car_runtime::api::protocol_version()
}

/// The package version.
#[uniffi::export]
pub fn client_version() -> String {
    car_runtime::api::client_version()
}

/// How a foreign tool reports failure: `Failed` follows the action's
/// failure behaviour; `Terminal` stops retries, aborts and rolls back.
#[derive(Debug, thiserror::Error, uniffi::Error)]
pub enum ToolError {
    /// An ordinary failure.
    #[error("{msg}")]
    Failed {
        /// What went wrong.
        msg: String,
    },
    /// A terminal failure.
    #[error("{msg}")]
    Terminal {
        /// What went wrong.
        msg: String,
    },
    /// A model-recoverable failure (the spec's `ModelRetry`): the model
    /// called the tool wrongly; `msg` tells it how to correct the call.
    /// Never retried by the engine; bounded to 2 per call chain.
    #[error("{msg}")]
    ModelRetry {
        /// How to correct the call.
        msg: String,
    },
}

impl From<uniffi::UnexpectedUniFFICallbackError> for ToolError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        ToolError::Failed { msg: format!("tool handler failed unexpectedly: {}", e.reason) }
    }
}

/// A tool implemented in Swift or Kotlin: receives the call JSON text
/// `{"tool","params","action_id","request_id","timeout_ms","session_id","attempt"}`
/// and returns the result as JSON text.
#[uniffi::export(with_foreign)]
pub trait ToolHandler: Send + Sync {
    /// Runs one tool call.
    fn call(&self, call_json: String) -> Result<String, ToolError>;
}

/// An approver implemented by the host: told of every approval event as JSON
/// text (`{"event": "pending", "key", "tool", ...}` / `{"event": "resolved", ...}`),
/// in order, on a thread of its own.
#[uniffi::export(with_foreign)]
pub trait ApprovalListener: Send + Sync {
    /// One approval event.
    fn on_event(&self, event_json: String);
}

/// A permission hook's failure: it denies.
#[derive(Debug, thiserror::Error, uniffi::Error)]
pub enum HookError {
    /// The hook failed; the call is denied.
    #[error("{msg}")]
    Failed {
        /// What went wrong.
        msg: String,
    },
}

impl From<uniffi::UnexpectedUniFFICallbackError> for HookError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        HookError::Failed { msg: format!("permission hook failed unexpectedly: {}", e.reason) }
    }
}

/// A host permission hook (or `can_use_tool`), called during admission with
/// the tool name and its input as JSON text. It answers JSON text: `null`
/// (pass), `"allow"`, `"deny"`, `"ask"` (hooks only) or
/// `{"modified_input": {...}}` (the input later layers check and the tool
/// receives). An error, text that is not JSON, or any other answer denies.
#[uniffi::export(with_foreign)]
pub trait PermissionHook: Send + Sync {
    /// Decides one call.
    fn decide(&self, tool: String, input_json: String) -> Result<String, HookError>;
}

/// The watchdog period of a run's call pump: once the calling thread has sat
/// in one tool call for two periods, the calls waiting behind it move to
/// worker threads.
const SPILL_AFTER: std::time::Duration = std::time::Duration::from_millis(5);

/// How long the calling thread sleeps between checks while a run waits.
const IDLE_TICK: std::time::Duration = std::time::Duration::from_millis(50);

/// How long `execute_proposal` waits for spilled calls to let go of the
/// handler after the run.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Drops the host's handler on this (the host's) thread. A call that spilled
/// to a worker thread holds a reference until just after it answers; if that
/// reference were the last, the host's object would be released from the
/// worker, a thread the host does not know (a Python interpreter shutting
/// down kills such a thread mid-call, which aborts the process). So this
/// waits briefly for those references to go; a call still running after the
/// run (its answer came too late) keeps the object alive for good instead.
fn release_here(handler: std::sync::Arc<dyn ToolHandler>) {
    let until = std::time::Instant::now() + RELEASE_WAIT;
    while std::sync::Arc::strong_count(&handler) > 1 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    if std::sync::Arc::strong_count(&handler) > 1 {
        std::mem::forget(handler);
    }
}

/// Answers one queued tool call with the host's handler.
fn serve_call(handler: &dyn ToolHandler, c: car_runtime::api::callback::PumpedCall) {
    use car_runtime::api::callback::{call_json, parse_tool_output};
    use car_runtime::ir::ToolFailure;
    c.serve(|call| match handler.call(call_json(call)) {
        Ok(answer) => Ok(parse_tool_output(&answer)),
        Err(ToolError::Failed { msg }) => Err(ToolFailure::ordinary(msg)),
        Err(ToolError::Terminal { msg }) => Err(ToolFailure::terminal(msg)),
        Err(ToolError::ModelRetry { msg }) => Err(ToolFailure::model_retry(msg)),
    });
}

fn tokio_rt() -> Result<&'static tokio::runtime::Runtime, CarError> {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("car-runtime")
        .enable_all()
        .build()
        .map_err(|e| CarError::Failed {
            code: "runtime_start".into(),
            msg: format!("cannot start the runtime: {e}"),
        })?;
    Ok(RT.get_or_init(|| rt))
}

/// One in-process runtime: its own state, tools, policies and event log.
#[derive(uniffi::Object)]
pub struct CarRuntime {
    core: car_runtime::api::runtime::CarRuntime,
}

#[uniffi::export]
impl CarRuntime {
    /// An empty runtime.
    #[uniffi::constructor]
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(CarRuntime { core: car_runtime::api::runtime::CarRuntime::new() })
    }

    /// Registers the published built-in tools (`read_file`, `write_file`,
    /// `edit_file`, `list_dir`, `find_files`, `grep_files`, `calculate`), run
    /// in-process and confined to `root` (default: the current directory).
    /// `shell` is not among them: a host tool named `shell` provides it.
    #[uniffi::method(default(root = None))]
    pub fn register_agent_basics(&self, root: Option<String>) -> Result<(), CarError> {
        Ok(self.core.register_agent_basics(root.as_deref())?)
    }

    /// Registers the first-party fetch tool `http_fetch` (risk `network`).
    /// Its calls pass the admission stage like every call; then the tool
    /// checks the host and every address it resolves to against the domain
    /// rules and `inspectors.egress_allowlist` before connecting, and each
    /// redirect the same way; loopback, private, link-local and metadata
    /// addresses are refused unless an address or network entry of the
    /// allowlist covers them (`docs/fetch.md`).
    pub fn register_fetch_tool(&self) -> Result<(), CarError> {
        Ok(self.core.register_fetch_tool()?)
    }

    /// Configures the admission stage from the admission configuration
    /// document (JSON text; the core's `AdmissionConfig`): tier, ledger, permission
    /// chain, `shell` table, inspectors, budget, retries. None removes every
    /// layer but the tier. Asks go through the approvals store under
    /// `approvals_dir` (or the document's). A malformed document is an error
    /// naming the bad key and changes nothing.
    #[uniffi::method(default(config_json = None, approvals_dir = None))]
    pub fn set_permissions(&self, config_json: Option<String>, approvals_dir: Option<String>) -> Result<(), CarError> {
        Ok(self.core.set_permissions(config_json.as_deref(), approvals_dir.as_deref())?)
    }

    /// The admission configuration document in force, as JSON text.
    pub fn admission_config(&self) -> String {
        self.core.admission_config()
    }

    /// The MCP servers of the document's `mcp` section, as JSON text
    /// `{servers: {NAME: {connections, toolset_hash, tools, drift}}}`.
    pub fn mcp_status(&self) -> String {
        self.core.mcp_status()
    }

    /// The plan of a proposal before anything runs (JSON text `{plan_id,
    /// proposal_id, items, counts}`); nothing runs, is recorded or is asked.
    pub fn proposal_plan(
        &self,
        proposal_json: String,
        session_id: Option<String>,
        scope_json: Option<String>,
    ) -> Result<String, CarError> {
        Ok(self.core.proposal_plan(&proposal_json, session_id.as_deref(), scope_json.as_deref())?)
    }

    /// Decides one `ask` item of a plan (`allow` / `deny`; scope `once` or
    /// `session`; `always` is `always_scope_unavailable`).
    pub fn proposal_decide(
        &self,
        plan_id: String,
        action_id: String,
        decision: String,
        scope: String,
        reason: String,
    ) -> Result<String, CarError> {
        Ok(self.core.proposal_decide(&plan_id, &action_id, &decision, &scope, &reason)?)
    }

    /// Runs a plan after its decisions with `handler`; the plan is used up.
    pub fn proposal_apply(
        &self,
        plan_id: String,
        handler: std::sync::Arc<dyn ToolHandler>,
    ) -> Result<String, CarError> {
        let (proposal, session, scope) = self.core.proposal_take(&plan_id)?;
        self.execute_proposal(car_runtime::api::proposal_to_json(&proposal), handler, session, scope)
    }

    /// Attaches an approver: while one is attached an ask waits for
    /// `approval_resolve` (or its deadline) instead of being rejected.
    /// Returns an id for `remove_approval_callback`.
    pub fn on_approval(&self, listener: std::sync::Arc<dyn ApprovalListener>) -> u64 {
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let spawned = std::thread::Builder::new().name("car-approvals".into()).spawn(move || {
            // Ends when the approver is removed (its sender dropped).
            while let Ok(ev) = rx.recv() {
                listener.on_event(ev);
            }
        });
        if let Err(e) = spawned {
            eprintln!("car-runtime: cannot start the approvals listener thread: {e}");
        }
        let tx = std::sync::Mutex::new(tx);
        self.core.on_approval_json(std::sync::Arc::new(move |ev: String| {
            if let Ok(tx) = tx.lock() {
                let _ = tx.send(ev);
            }
        }))
    }

    /// Registers host hooks in the permission chain (after the document's
    /// declarative hooks) and `can_use_tool` (its slot), replacing earlier
    /// ones. See `PermissionHook` for the answers; an error denies.
    #[uniffi::method(default(can_use_tool = None))]
    pub fn set_permission_hooks(
        &self,
        hooks: Vec<std::sync::Arc<dyn PermissionHook>>,
        can_use_tool: Option<std::sync::Arc<dyn PermissionHook>>,
    ) -> Result<(), CarError> {
        use car_runtime::api::permission::{can_use_decision_from_text, hook_decision_from_text};
        use car_runtime::permission::{CanUseDecision, CanUseToolFn, HookDecision, HookFn};
        let hooks: Vec<HookFn> = hooks
            .into_iter()
            .map(|h| -> HookFn {
                std::sync::Arc::new(move |tool: &str, input: &Value| {
                    h.decide(tool.to_string(), input.to_string())
                        .map_or(HookDecision::Deny, |answer| hook_decision_from_text(&answer))
                })
            })
            .collect();
        let can_use_tool = can_use_tool.map(|h| -> CanUseToolFn {
            std::sync::Arc::new(move |tool: &str, input: &Value| {
                h.decide(tool.to_string(), input.to_string())
                    .map_or(CanUseDecision::Deny, |answer| can_use_decision_from_text(&answer))
            })
        });
        Ok(self.core.set_permission_hooks(hooks, can_use_tool)?)
    }

    /// Detaches an approver; false for an unknown id.
    pub fn remove_approval_callback(&self, id: u64) -> bool {
        self.core.remove_approval_callback(id)
    }

    /// The pending approvals of the runtime's approvals store, as JSON text.
    pub fn approvals_pending(&self) -> Result<String, CarError> {
        Ok(self.core.approvals_pending()?)
    }

    /// Resolves an approval: anything but an explicit `allow` is a deny. The
    /// resolution in force (JSON text, with `applied`).
    #[uniffi::method(default(reason = ""))]
    pub fn approval_resolve(&self, key: String, decision: String, reason: String) -> Result<String, CarError> {
        Ok(self.core.approval_resolve(&key, &decision, &reason)?)
    }

    /// Registers a tool with no parameter schema.
    pub fn register_tool(&self, name: String) -> Result<(), CarError> {
        Ok(self.core.register_tool(&name)?)
    }

    /// Registers a ToolSchema (JSON text).
    pub fn register_tool_schema(&self, schema_json: String) -> Result<(), CarError> {
        Ok(self.core.register_tool_schema(&schema_json)?)
    }

    /// The tools as JSON text, sorted by name.
    pub fn list_tools(&self) -> String {
        self.core.list_tools()
    }

    /// Removes a tool; the count removed.
    pub fn unregister_tool(&self, name: String) -> u32 {
        self.core.unregister_tool(&name)
    }

    /// Registers a policy rule: `deny_tool`, `deny_tool_param`, `require_state`.
    #[uniffi::method(default(target = None, key = None, pattern = None, value_json = None, session_id = None))]
    #[allow(clippy::too_many_arguments)]
    pub fn register_policy(
        &self,
        name: String,
        rule: String,
        target: Option<String>,
        key: Option<String>,
        pattern: Option<String>,
        value_json: Option<String>,
        session_id: Option<String>,
    ) -> Result<(), CarError> {
        Ok(self.core.register_policy(
            &name,
            &rule,
            target.as_deref(),
            key.as_deref(),
            pattern.as_deref(),
            value_json.as_deref(),
            session_id.as_deref(),
        )?)
    }

    /// Removes every policy of that name; the count.
    #[uniffi::method(default(session_id = None))]
    pub fn unregister_policy(&self, name: String, session_id: Option<String>) -> Result<u32, CarError> {
        Ok(self.core.unregister_policy(&name, session_id.as_deref())?)
    }

    /// `[{name, description}]` as JSON text.
    #[uniffi::method(default(session_id = None))]
    pub fn list_policies(&self, session_id: Option<String>) -> Result<String, CarError> {
        Ok(self.core.list_policies(session_id.as_deref())?)
    }

    /// Loads the `*.toml` policy files of `dir`; the number of rules.
    pub fn load_policies(&self, dir: String) -> Result<u32, CarError> {
        Ok(self.core.load_policies(&dir)?)
    }

    /// Opens a policy scope.
    pub fn open_session(&self) -> Result<String, CarError> {
        Ok(self.core.open_session()?)
    }

    /// Closes a policy scope.
    pub fn close_session(&self, session_id: String) -> Result<bool, CarError> {
        Ok(self.core.close_session(&session_id)?)
    }

    /// Sets a state key (value as JSON text).
    #[uniffi::method(default(tenant = None))]
    pub fn state_set(&self, key: String, value_json: String, tenant: Option<String>) -> Result<(), CarError> {
        Ok(self.core.state_set(&key, &value_json, tenant.as_deref())?)
    }

    /// `log(level, message, data?)` of a tool's context: a `ToolLog` event
    /// for the call (the call JSON the tool received; `data_json` JSON text).
    #[uniffi::method(default(data_json = None))]
    pub fn tool_log(
        &self,
        call_json: String,
        level: String,
        message: String,
        data_json: Option<String>,
    ) -> Result<(), CarError> {
        Ok(self.core.tool_log(&call_json, &level, &message, data_json.as_deref())?)
    }

    /// Whether the engine has given up on this call (the call JSON the tool
    /// received): its deadline (`timeout_ms`) has passed.
    pub fn tool_cancelled(&self, call_json: String) -> Result<bool, CarError> {
        Ok(self.core.tool_cancelled(&call_json)?)
    }

    /// A state value as JSON text; `"null"` when absent.
    #[uniffi::method(default(tenant = None))]
    pub fn state_get(&self, key: String, tenant: Option<String>) -> Result<String, CarError> {
        Ok(self.core.state_get(&key, tenant.as_deref())?)
    }

    /// True when the key is set.
    #[uniffi::method(default(tenant = None))]
    pub fn state_exists(&self, key: String, tenant: Option<String>) -> Result<bool, CarError> {
        Ok(self.core.state_exists(&key, tenant.as_deref())?)
    }

    /// The keys (of a tenant, without its prefix).
    #[uniffi::method(default(tenant = None))]
    pub fn state_keys(&self, tenant: Option<String>) -> Result<Vec<String>, CarError> {
        Ok(self.core.state_keys(tenant.as_deref())?)
    }

    /// `{key: value}` as JSON text.
    #[uniffi::method(default(tenant = None))]
    pub fn state_snapshot(&self, tenant: Option<String>) -> Result<String, CarError> {
        Ok(self.core.state_snapshot(tenant.as_deref())?)
    }

    /// Strict mode on or off (off by default): on, a proposal with a field
    /// the IR does not know is refused (code `unknown_field`).
    pub fn set_strict_fields(&self, strict: bool) {
        self.core.set_strict_fields(strict);
    }

    /// True in strict mode (`set_strict_fields`).
    pub fn strict_fields(&self) -> bool {
        self.core.strict_fields()
    }

    /// Verifies a proposal against this runtime's state and tool schemas.
    pub fn verify_proposal(&self, proposal_json: String) -> Result<String, CarError> {
        Ok(self.core.verify_proposal(&proposal_json)?)
    }

    /// Executes a proposal; every tool call goes to `handler`, on the thread
    /// that called this (between polls of the engine, outside any async
    /// context, so the handler may call back into this runtime, nested
    /// proposals included). Calls that wait while the handler is stuck in a
    /// slow call move to worker threads, so slow tools still overlap.
    #[uniffi::method(default(session_id = None, scope_json = None))]
    pub fn execute_proposal(
        &self,
        proposal_json: String,
        handler: std::sync::Arc<dyn ToolHandler>,
        session_id: Option<String>,
        scope_json: Option<String>,
    ) -> Result<String, CarError> {
        self.pumped(handler, Run::Proposal(proposal_json, session_id, scope_json))
    }

    /// Resumes the suspended proposal `suspension_id` (`on_ask =
    /// "suspend"`) with `handler`: what had not run goes through admission
    /// again and runs, once. The ProposalResult as JSON text (`status:
    /// "suspended"` again while an approval is pending).
    pub fn resume_proposal(
        &self,
        suspension_id: String,
        handler: std::sync::Arc<dyn ToolHandler>,
    ) -> Result<String, CarError> {
        self.pumped(handler, Run::Resume(suspension_id))
    }

    /// The suspended proposals, oldest first, as JSON text:
    /// `{suspended: [{id, proposal_id, pending, waiting, ...}]}`.
    pub fn suspended_proposals(&self) -> Result<String, CarError> {
        Ok(tokio_rt()?.block_on(self.core.suspended_proposals(None))?)
    }
}

/// What [`CarRuntime::pumped`] runs with the host's handler.
enum Run {
    /// `(proposal_json, session_id, scope_json)`.
    Proposal(String, Option<String>, Option<String>),
    /// A suspended proposal, by id.
    Resume(String),
}

impl CarRuntime {
    /// Runs `run` with `handler` serving its tool calls on this thread.
    fn pumped(&self, handler: std::sync::Arc<dyn ToolHandler>, run: Run) -> Result<String, CarError> {
        use car_runtime::api::callback::{CallPump, PumpedCall};
        let rt = tokio_rt()?;
        // The spill function may be dropped on a runtime thread after this
        // call returns (its watchdog is cancelled, not awaited); it reaches
        // the handler through a slot emptied below, so the host's object is
        // released here, on the host's thread, and never later from a thread
        // the host does not know (a Python interpreter shutting down would
        // kill that thread).
        let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(handler.clone())));
        let spilled = slot.clone();
        let pump = CallPump::with_spill(
            std::sync::Arc::new(move |c: PumpedCall| {
                let h = spilled.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                match h {
                    Some(h) => serve_call(h.as_ref(), c),
                    None => c.finish(Err(car_runtime::ir::ToolFailure::ordinary("the run has ended"))),
                }
            }),
            SPILL_AFTER,
        );
        let fut: std::pin::Pin<Box<dyn std::future::Future<Output = car_runtime::Result<String>> + '_>> = match &run {
            Run::Proposal(text, session, scope) => {
                Box::pin(self.core.execute_proposal(text, pump.executor(), session.as_deref(), scope.as_deref()))
            }
            Run::Resume(id) => Box::pin(self.core.resume_proposal(id, pump.executor())),
        };
        let out = pump.drive(
            rt.handle(),
            fut,
            IDLE_TICK,
            |pump| {
                while let Some(c) = pump.pop() {
                    serve_call(handler.as_ref(), c);
                }
            },
            |_| {},
        );
        slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        release_here(handler);
        Ok(out?)
    }
}

#[uniffi::export]
impl CarRuntime {
    /// Monte Carlo against this runtime: tools without a given rate use
    /// their event-log record (Laplace-smoothed), else the default.
    pub fn simulate_monte_carlo(
        &self,
        proposal_json: String,
        initial_state_json: Option<String>,
        tool_success_rates_json: Option<String>,
        goal_json: Option<String>,
        config_json: Option<String>,
    ) -> Result<String, CarError> {
        Ok(self.core.simulate_monte_carlo(
            &proposal_json,
            initial_state_json.as_deref(),
            tool_success_rates_json.as_deref(),
            goal_json.as_deref(),
            config_json.as_deref(),
        )?)
    }

    /// Number of events held.
    pub fn event_count(&self) -> u64 {
        self.core.event_count()
    }

    /// `{count, events}` newest first, as JSON text.
    pub fn event_query(&self, query_json: String) -> Result<String, CarError> {
        Ok(self.core.event_query(&query_json)?)
    }

    /// Turns on hash chaining of later events.
    pub fn enable_event_log_hash_chaining(&self) {
        self.core.enable_event_log_hash_chaining()
    }

    /// `{"verified": n}` or `{"tampered_at": i}`.
    pub fn verify_event_log_chain(&self) -> String {
        self.core.verify_event_log_chain()
    }

    /// Gets (`None`) or sets the event retention policy `{max_events?,
    /// max_age_secs?}`: `{policy}` or `{policy, removed}`.
    pub fn event_retention(&self, policy_json: Option<String>) -> Result<String, CarError> {
        Ok(self.core.event_retention(policy_json.as_deref())?)
    }

    /// Removes events beyond `{max_events?, max_age_secs?}` once: `{removed, remaining}`.
    pub fn events_truncate(&self, params_json: String) -> Result<String, CarError> {
        Ok(self.core.events_truncate(&params_json)?)
    }

    /// `[{agent, calls, tokens_in, tokens_out, cost_usd}]` from the runs' model turns.
    pub fn event_cost_by_agent(&self) -> String {
        self.core.event_cost_by_agent()
    }

    /// The operational rollup of the events held.
    pub fn metrics_summary(&self) -> String {
        self.core.metrics_summary()
    }

    /// Keeps run traces as `<dir>/<run_id>.json` (`None`: in memory only).
    pub fn set_runs_dir(&self, dir: Option<String>) -> Result<(), CarError> {
        Ok(self.core.set_runs_dir(dir.as_deref())?)
    }

    /// Starts a run: `{run_id, agent_id}`.
    pub fn runs_start(&self, params_json: String) -> Result<String, CarError> {
        Ok(self.core.runs_start(&params_json)?)
    }

    /// Records one model turn of a run.
    pub fn runs_record_model_turn(&self, params_json: String) -> Result<String, CarError> {
        Ok(self.core.runs_record_model_turn(&params_json)?)
    }

    /// Completes a run with its outcome.
    pub fn runs_complete(&self, params_json: String) -> Result<String, CarError> {
        Ok(self.core.runs_complete(&params_json)?)
    }

    /// `{count, runs}` newest first.
    pub fn runs_list(&self, params_json: Option<String>) -> Result<String, CarError> {
        Ok(self.core.runs_list(params_json.as_deref())?)
    }

    /// `{run, events}` of `{run_id}`.
    pub fn runs_get_trace(&self, params_json: String) -> Result<String, CarError> {
        Ok(self.core.runs_get_trace(&params_json)?)
    }

    /// A detached tool's poll result, or None once consumed.
    pub fn tool_poll(&self, handle: String) -> Option<String> {
        self.core.tool_poll(&handle)
    }

    /// Cooperatively cancels a detached tool.
    pub fn tool_cancel(&self, handle: String) -> bool {
        self.core.tool_cancel(&handle)
    }

    /// The granted permission tier.
    pub fn permission_get_tier(&self) -> String {
        self.core.permission_get_tier()
    }

    /// Sets the granted tier (`read_only`, `sandbox_edit`, `full_access`) and
    /// turns the tier layer on: from the next proposal, an action above the
    /// tier (and every `full_access` action) refuses the proposal unless the
    /// approvals ledger approves it.
    pub fn permission_set_tier(&self, tier: String) -> Result<String, CarError> {
        Ok(self.core.permission_set_tier(&tier)?)
    }
}
