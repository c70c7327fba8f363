//! `CarRuntime` for Node: every method forwards to
//! `car_runtime::api::runtime::CarRuntime`. Async methods run on napi's tokio
//! runtime and never block the event loop. Executing a proposal with JS tools
//! goes through `port.rs`: the engine is polled on the JS thread between
//! batches of tool calls, so a callback may call back into the same runtime
//! (e.g. `stateSet`) without deadlock.

use car_runtime::api::permission::{can_use_decision_from_json, hook_decision_from_json};
use car_runtime::api::runtime::CarRuntime as Core;
use car_runtime::permission::{CanUseDecision, CanUseToolFn, HookDecision, HookFn};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;
use serde_json::Value;

use crate::{Result, to_js_err};

/// Errors of async methods: napi's async machinery only carries a `Status`,
/// so the stable code, family and details travel as the structured record in
/// the error's `cause` (`car_error_cause`), which the `lib.js` shim turns
/// into a `CarError` subclass.
fn aerr(e: car_runtime::Error) -> napi::Error {
    let mut err = napi::Error::new(napi::Status::GenericFailure, e.to_string());
    err.set_cause(crate::car_error_cause(&e));
    err
}

/// An approver callback `(eventJson) => void`, weak: it does not keep the
/// event loop alive.
pub(crate) type JsApprovalFn =
    ThreadsafeFunction<String, napi::bindgen_prelude::Unknown<'static>, String, napi::Status, false, true>;

fn text(v: Value) -> String {
    match v {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// One in-process runtime: its own state, tools, policies and event log.
#[napi(js_name = "CarRuntime")]
pub struct JsCarRuntime {
    core: Core,
    /// Host permission hooks are registered: proposals are polled only on
    /// tokio workers (a hook blocks the polling thread until JS answers).
    hooks_on: AtomicBool,
}

impl Default for JsCarRuntime {
    fn default() -> Self {
        Self::new()
    }
}

#[napi]
impl JsCarRuntime {
    /// An empty runtime.
    #[napi(constructor)]
    pub fn new() -> Self {
        JsCarRuntime { core: Core::new(), hooks_on: AtomicBool::new(false) }
    }

    /// Registers the published built-in tools (`read_file`, `write_file`,
    /// `edit_file`, `list_dir`, `find_files`, `grep_files`, `calculate`), run
    /// in-process and confined to `root` (default: the current directory).
    /// `shell` is not among them: a host tool named `shell` provides it.
    #[napi]
    pub async fn register_agent_basics(&self, root: Option<String>) -> napi::Result<()> {
        self.core.register_agent_basics(root.as_deref()).map_err(aerr)
    }

    /// The built-in tools and `shell`, which runs in `root` under the
    /// sandbox the admission document's `sandbox` section gives it
    /// (`workspace-write` by default: no network, writes only under the
    /// root, a scrubbed environment; `docs/sandbox.md`). Every call passes
    /// the admission stage first.
    #[napi]
    pub async fn register_shell_tool(&self, root: Option<String>) -> napi::Result<()> {
        self.core.register_shell_tool(root.as_deref()).map_err(aerr)
    }

    /// Registers the first-party fetch tool `http_fetch` (risk `network`).
    /// Its calls pass the admission stage like every call; then the tool
    /// checks the host and every address it resolves to against the domain
    /// rules and `inspectors.egress_allowlist` before connecting, and each
    /// redirect the same way; loopback, private, link-local and metadata
    /// addresses are refused unless an address or network entry of the
    /// allowlist covers them (`docs/fetch.md`).
    #[napi]
    pub async fn register_fetch_tool(&self) -> napi::Result<()> {
        self.core.register_fetch_tool().map_err(aerr)
    }

    /// Configures the admission stage from the admission configuration
    /// document (JSON text or object; the core's `AdmissionConfig`): tier, ledger,
    /// permission chain, `shell` table, inspectors, budget, retries. null
    /// removes every layer but the tier. Asks go through the durable
    /// approvals store under `approvalsDir` (or the document's). A malformed
    /// document rejects naming the bad key and changes nothing.
    #[napi]
    pub async fn set_permissions(
        &self,
        #[napi(ts_arg_type = "string | object")] config_json: Option<Value>,
        approvals_dir: Option<String>,
    ) -> napi::Result<()> {
        let config = config_json.filter(|v| !v.is_null()).map(text);
        self.core.set_permissions(config.as_deref(), approvals_dir.as_deref()).map_err(aerr)
    }

    /// The admission configuration document in force, as JSON text.
    #[napi]
    pub fn admission_config(&self) -> String {
        self.core.admission_config()
    }

    /// The MCP servers of the document's `mcp` section, as JSON text
    /// `{servers: {NAME: {connections, toolset_hash, tools, drift}}}`.
    #[napi]
    pub fn mcp_status(&self) -> String {
        self.core.mcp_status()
    }

    /// The plan of a proposal before anything runs (JSON text `{plan_id,
    /// proposal_id, items, counts}`); nothing runs, is recorded or is asked.
    #[napi]
    pub fn proposal_plan(
        &self,
        #[napi(ts_arg_type = "string | import('./types').ActionProposal")] proposal_json: Value,
        session_id: Option<String>,
        #[napi(ts_arg_type = "string | object")] scope_json: Option<Value>,
    ) -> napi::Result<String> {
        let scope = scope_json.filter(|v| !v.is_null()).map(text);
        self.core.proposal_plan(&text(proposal_json), session_id.as_deref(), scope.as_deref()).map_err(aerr)
    }

    /// Decides one `ask` item of a plan (`allow` / `deny`, scope `once` or
    /// `session`; `always` rejects with `always_scope_unavailable`).
    #[napi]
    pub fn proposal_decide(
        &self,
        plan_id: String,
        action_id: String,
        decision: String,
        scope: Option<String>,
        reason: Option<String>,
    ) -> napi::Result<String> {
        let scope = scope.unwrap_or_else(|| "once".to_string());
        self.core
            .proposal_decide(&plan_id, &action_id, &decision, &scope, reason.as_deref().unwrap_or(""))
            .map_err(aerr)
    }

    /// Takes a plan out for `proposalApply` (lib.js): `{proposal_json,
    /// session_id, scope_json}` as JSON text. Not API.
    #[napi(js_name = "_proposalTake")]
    pub fn proposal_take(&self, plan_id: String) -> napi::Result<String> {
        let (p, session, scope) = self.core.proposal_take(&plan_id).map_err(aerr)?;
        Ok(serde_json::json!({
            "proposal_json": car_runtime::api::proposal_to_json(&p),
            "session_id": session,
            "scope_json": scope,
        })
        .to_string())
    }

    /// Attaches an approver: `callback(eventJson)` is called on the JS thread
    /// with every approval event (`{"event": "pending", key, tool, ...}` /
    /// `{"event": "resolved", ...}`). While one is attached an ask waits for
    /// `approvalResolve` (or its deadline) instead of being rejected. The
    /// callback does not keep the process alive. Returns an id for
    /// `removeApprovalCallback`.
    #[napi(ts_args_type = "callback: (eventJson: string) => void")]
    pub fn on_approval(&self, callback: JsApprovalFn) -> u32 {
        let f = Arc::new(callback);
        let id = self.core.on_approval_json(Arc::new(move |ev: String| {
            let _ = f.call(ev, ThreadsafeFunctionCallMode::NonBlocking);
        }));
        u32::try_from(id).unwrap_or(u32::MAX)
    }

    /// Registers `hooks` host hooks and, when `canUseTool`, a `can_use_tool`
    /// in the permission chain, replacing earlier ones; each call goes to
    /// `call(callJson)` (`{"id","slot","tool","input"}`, slot -1 for
    /// `can_use_tool`) and is answered with `_hookAnswer`. Use
    /// `setPermissionHooks(hooks, canUseTool)` (the `lib.js` shim).
    #[napi(
        js_name = "_setPermissionHooks",
        ts_args_type = "hooks: number, canUseTool: boolean, call: (callJson: string) => void"
    )]
    pub fn set_permission_hooks(&self, hooks: u32, can_use_tool: bool, call: crate::hooks::HookCallFn) -> Result<()> {
        let call = Arc::new(call);
        let hook_fns: Vec<HookFn> = (0..hooks)
            .map(|slot| -> HookFn {
                let call = call.clone();
                Arc::new(move |tool: &str, input: &Value| {
                    crate::hooks::ask(&call, i64::from(slot), tool, input)
                        .map_or(HookDecision::Deny, |v| hook_decision_from_json(&v))
                })
            })
            .collect();
        let can_use: Option<CanUseToolFn> = can_use_tool.then(|| -> CanUseToolFn {
            let call = call.clone();
            Arc::new(move |tool: &str, input: &Value| {
                crate::hooks::ask(&call, crate::hooks::CAN_USE_TOOL_SLOT, tool, input)
                    .map_or(CanUseDecision::Deny, |v| can_use_decision_from_json(&v))
            })
        });
        let any = hooks > 0 || can_use_tool;
        self.core.set_permission_hooks(hook_fns, can_use).map_err(to_js_err)?;
        self.hooks_on.store(any, Ordering::SeqCst);
        Ok(())
    }

    /// Detaches an approver; false for an unknown id.
    #[napi]
    pub fn remove_approval_callback(&self, id: u32) -> bool {
        self.core.remove_approval_callback(u64::from(id))
    }

    /// The pending approvals of the runtime's approvals store, as JSON text
    /// `{"pending": [...]}`.
    #[napi]
    pub async fn approvals_pending(&self) -> napi::Result<String> {
        self.core.approvals_pending().map_err(aerr)
    }

    /// Resolves an approval: anything but an explicit `allow` is a deny; a
    /// waiting action learns it at once. The resolution in force (JSON text,
    /// with `applied`).
    #[napi]
    pub async fn approval_resolve(
        &self,
        key: String,
        decision: String,
        reason: Option<String>,
    ) -> napi::Result<String> {
        self.core.approval_resolve(&key, &decision, reason.as_deref().unwrap_or_default()).map_err(aerr)
    }

    /// Registers a tool with no parameter schema.
    #[napi]
    pub async fn register_tool(&self, name: String) -> napi::Result<()> {
        self.core.register_tool(&name).map_err(aerr)
    }

    /// Registers a ToolSchema (JSON text or object); parameters are validated before dispatch.
    #[napi]
    pub async fn register_tool_schema(
        &self,
        #[napi(ts_arg_type = "string | import('./types').ToolSchema")] schema_json: Value,
    ) -> napi::Result<()> {
        self.core.register_tool_schema(&text(schema_json)).map_err(aerr)
    }

    /// The tools as JSON text, sorted by name, each with `source`.
    #[napi]
    pub async fn list_tools(&self) -> napi::Result<String> {
        Ok(self.core.list_tools())
    }

    /// Removes a tool; the count removed (0 is not an error).
    #[napi]
    pub async fn unregister_tool(&self, name: String) -> napi::Result<u32> {
        Ok(self.core.unregister_tool(&name))
    }

    /// Registers a policy: `deny_tool`, `deny_tool_param`, `require_state`.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub async fn register_policy(
        &self,
        name: String,
        rule: String,
        target: Option<String>,
        key: Option<String>,
        pattern: Option<String>,
        value_json: Option<Value>,
        session_id: Option<String>,
    ) -> napi::Result<()> {
        let value = value_json.map(text);
        self.core
            .register_policy(
                &name,
                &rule,
                target.as_deref(),
                key.as_deref(),
                pattern.as_deref(),
                value.as_deref(),
                session_id.as_deref(),
            )
            .map_err(aerr)
    }

    /// Removes every policy of that name; the count (0 is not an error).
    #[napi]
    pub async fn unregister_policy(&self, name: String, session_id: Option<String>) -> napi::Result<u32> {
        self.core.unregister_policy(&name, session_id.as_deref()).map_err(aerr)
    }

    /// `[{name, description}]` in registration order, as JSON text.
    #[napi]
    pub async fn list_policies(&self, session_id: Option<String>) -> napi::Result<String> {
        self.core.list_policies(session_id.as_deref()).map_err(aerr)
    }

    /// Loads `dir/*.toml` policy files; the number of rules loaded.
    #[napi]
    pub async fn load_policies(&self, dir: String) -> napi::Result<u32> {
        self.core.load_policies(&dir).map_err(aerr)
    }

    /// Opens a policy scope; its id.
    #[napi]
    pub async fn open_session(&self) -> napi::Result<String> {
        self.core.open_session().map_err(aerr)
    }

    /// Closes a policy scope; false when it was not open.
    #[napi]
    pub async fn close_session(&self, session_id: String) -> napi::Result<bool> {
        self.core.close_session(&session_id).map_err(aerr)
    }

    /// Sets a state key (value as JSON text or a plain value).
    #[napi]
    pub fn state_set(&self, key: String, value_json: Value, tenant: Option<String>) -> Result<()> {
        self.core.state_set(&key, &text(value_json), tenant.as_deref()).map_err(to_js_err)
    }

    /// `log(level, message, data?)` of a tool's context: a `ToolLog` event
    /// for the call (the call JSON text or object the tool received).
    #[napi]
    pub fn tool_log(&self, call: Value, level: String, message: String, data: Option<Value>) -> Result<()> {
        let data = data.filter(|d| !d.is_null()).map(|d| d.to_string());
        self.core.tool_log(&text(call), &level, &message, data.as_deref()).map_err(to_js_err)
    }

    /// Whether the engine has given up on this call (the call JSON text or
    /// object the tool received): its deadline (`timeout_ms`) has passed.
    #[napi]
    pub fn tool_cancelled(&self, call: Value) -> Result<bool> {
        self.core.tool_cancelled(&text(call)).map_err(to_js_err)
    }

    /// A state value as JSON text; `"null"` when absent.
    #[napi]
    pub fn state_get(&self, key: String, tenant: Option<String>) -> Result<String> {
        self.core.state_get(&key, tenant.as_deref()).map_err(to_js_err)
    }

    /// True when the key is set.
    #[napi]
    pub fn state_exists(&self, key: String, tenant: Option<String>) -> Result<bool> {
        self.core.state_exists(&key, tenant.as_deref()).map_err(to_js_err)
    }

    /// The keys (of a tenant, without its prefix).
    #[napi]
    pub fn state_keys(&self, tenant: Option<String>) -> Result<Vec<String>> {
        self.core.state_keys(tenant.as_deref()).map_err(to_js_err)
    }

    /// `{key: value}` as JSON text.
    #[napi]
    pub fn state_snapshot(&self, tenant: Option<String>) -> Result<String> {
        self.core.state_snapshot(tenant.as_deref()).map_err(to_js_err)
    }

    /// Strict mode on or off (off by default): on, a proposal with a field
    /// the IR does not know is refused (`CarInputError`, code
    /// `unknown_field`) instead of run without it.
    #[napi]
    pub fn set_strict_fields(&self, strict: bool) {
        self.core.set_strict_fields(strict);
    }

    /// True in strict mode (`setStrictFields`).
    #[napi]
    pub fn strict_fields(&self) -> bool {
        self.core.strict_fields()
    }

    /// Verifies a proposal against this runtime's state and tool schemas.
    #[napi]
    pub async fn verify_proposal(
        &self,
        #[napi(ts_arg_type = "string | import('./types').ActionProposal")] proposal_json: Value,
    ) -> napi::Result<String> {
        self.core.verify_proposal(&text(proposal_json)).map_err(aerr)
    }

    /// Starts executing a proposal whose tool calls go to the JS shim (see
    /// `port.rs`; use `executeProposal(rt, ...)` or `rt.submitProposal(...)`).
    #[napi(js_name = "_start")]
    pub fn start(
        &self,
        proposal_json: Value,
        session_id: Option<String>,
        scope_json: Option<Value>,
    ) -> Result<crate::port::Step> {
        let core = self.core.clone();
        let proposal = text(proposal_json);
        let scope = scope_json.filter(|v| !v.is_null()).map(text);
        let on_worker = proposal.len() > crate::port::WORKER_ABOVE_BYTES;
        let worker_only = self.hooks_on.load(Ordering::SeqCst);
        crate::port::start(on_worker, worker_only, move |exec| {
            Box::pin(
                async move { core.execute_proposal(&proposal, exec, session_id.as_deref(), scope.as_deref()).await },
            )
        })
    }

    /// Starts resuming a suspended proposal whose tool calls go to the JS
    /// shim (use `rt.resumeProposal(id, toolFn)`).
    #[napi(js_name = "_startResume")]
    pub fn start_resume(&self, suspension_id: String) -> Result<crate::port::Step> {
        let core = self.core.clone();
        let worker_only = self.hooks_on.load(Ordering::SeqCst);
        crate::port::start(false, worker_only, move |exec| {
            Box::pin(async move { core.resume_proposal(&suspension_id, exec).await })
        })
    }

    /// The suspended proposals (`on_ask: "suspend"`), oldest first, as JSON
    /// text: `{suspended: [{id, proposal_id, pending, waiting, ...}]}`.
    #[napi]
    pub async fn suspended_proposals(&self) -> napi::Result<String> {
        self.core.suspended_proposals(None).await.map_err(aerr)
    }

    /// Monte Carlo against this runtime: tools without a given rate use
    /// their event-log record (Laplace-smoothed), else the default.
    #[napi]
    pub async fn simulate_monte_carlo(
        &self,
        #[napi(ts_arg_type = "string | import('./types').ActionProposal")] proposal_json: Value,
        initial_state_json: Option<Value>,
        tool_success_rates_json: Option<Value>,
        goal_json: Option<Value>,
        config_json: Option<Value>,
    ) -> napi::Result<String> {
        let o = |v: Option<Value>| v.map(text);
        self.core
            .simulate_monte_carlo(
                &text(proposal_json),
                o(initial_state_json).as_deref(),
                o(tool_success_rates_json).as_deref(),
                o(goal_json).as_deref(),
                o(config_json).as_deref(),
            )
            .map_err(aerr)
    }

    /// Number of events held.
    #[napi]
    pub async fn event_count(&self) -> napi::Result<u32> {
        Ok(u32::try_from(self.core.event_count()).unwrap_or(u32::MAX))
    }

    /// `{count, events}` newest first, as JSON text.
    #[napi]
    pub async fn event_query(&self, query_json: Option<Value>) -> napi::Result<String> {
        self.core.event_query(&query_json.map(text).unwrap_or_default()).map_err(aerr)
    }

    /// Turns on SHA-256 hash chaining of later events.
    #[napi]
    pub async fn enable_event_log_hash_chaining(&self) -> napi::Result<()> {
        self.core.enable_event_log_hash_chaining();
        Ok(())
    }

    /// `{"verified": n}` or `{"tampered_at": i}` as JSON text.
    #[napi]
    pub async fn verify_event_log_chain(&self) -> napi::Result<String> {
        Ok(self.core.verify_event_log_chain())
    }

    /// Gets (no argument) or sets the event retention policy
    /// `{max_events?, max_age_secs?}`: `{policy}` or `{policy, removed}`.
    #[napi]
    pub async fn event_retention(&self, policy_json: Option<Value>) -> napi::Result<String> {
        self.core.event_retention(policy_json.map(text).as_deref()).map_err(aerr)
    }

    /// Removes events beyond `{max_events?, max_age_secs?}` once (the
    /// policy in force stays): `{removed, remaining}`.
    #[napi]
    pub async fn events_truncate(&self, params_json: Value) -> napi::Result<String> {
        self.core.events_truncate(&text(params_json)).map_err(aerr)
    }

    /// `[{agent, calls, tokens_in, tokens_out, cost_usd}]` from the runs' model turns.
    #[napi]
    pub async fn event_cost_by_agent(&self) -> napi::Result<String> {
        Ok(self.core.event_cost_by_agent())
    }

    /// The operational rollup of the events held, as JSON text.
    #[napi]
    pub async fn metrics_summary(&self) -> napi::Result<String> {
        Ok(self.core.metrics_summary())
    }

    /// Keeps run traces as `<dir>/<run_id>.json` (null: in memory only).
    #[napi]
    pub async fn set_runs_dir(&self, dir: Option<String>) -> napi::Result<()> {
        self.core.set_runs_dir(dir.as_deref()).map_err(aerr)
    }

    /// Starts a run `{intent, agent_id?, agent_name?, outcome_description?,
    /// idempotency_key?}`: `{run_id, agent_id}`.
    #[napi]
    pub async fn runs_start(&self, params_json: Value) -> napi::Result<String> {
        self.core.runs_start(&text(params_json)).map_err(aerr)
    }

    /// Records one model turn of a run: `{run_id, turn_index, ok}`.
    #[napi]
    pub async fn runs_record_model_turn(&self, params_json: Value) -> napi::Result<String> {
        self.core.runs_record_model_turn(&text(params_json)).map_err(aerr)
    }

    /// Completes a run `{run_id, outcome: {status, ...}}`: `{run_id, ok}`.
    #[napi]
    pub async fn runs_complete(&self, params_json: Value) -> napi::Result<String> {
        self.core.runs_complete(&text(params_json)).map_err(aerr)
    }

    /// `{count, runs}` newest first; filters `{agent_id?, status?, limit?}`.
    #[napi]
    pub async fn runs_list(&self, params_json: Option<Value>) -> napi::Result<String> {
        self.core.runs_list(params_json.map(text).as_deref()).map_err(aerr)
    }

    /// `{run, events}` of `{run_id}`: its turns, proposals and their events.
    #[napi]
    pub async fn runs_get_trace(&self, params_json: Value) -> napi::Result<String> {
        self.core.runs_get_trace(&text(params_json)).map_err(aerr)
    }

    /// A detached tool's poll result as JSON text, or null once consumed.
    #[napi]
    pub async fn tool_poll(&self, handle: String) -> napi::Result<Option<String>> {
        Ok(self.core.tool_poll(&handle))
    }

    /// Cooperatively cancels a detached tool.
    #[napi]
    pub async fn tool_cancel(&self, handle: String) -> napi::Result<bool> {
        Ok(self.core.tool_cancel(&handle))
    }

    /// The granted permission tier.
    #[napi]
    pub async fn permission_get_tier(&self) -> napi::Result<String> {
        Ok(self.core.permission_get_tier())
    }

    /// Sets the granted tier (`read_only`, `sandbox_edit`, `full_access`) and
    /// turns the tier layer on: from the next proposal, an action above the
    /// tier (and every `full_access` action) refuses the proposal unless the
    /// approvals ledger approves it.
    #[napi]
    pub async fn permission_set_tier(&self, tier: String) -> napi::Result<String> {
        self.core.permission_set_tier(&tier).map_err(aerr)
    }
}
