//! The `CarRuntime` facade: the binding methods of `bindings-api.md` in
//! snake_case, JSON text in and out, over one in-process [`Runtime`].
//!
//! ```
//! let rt = car_runtime::api::runtime::CarRuntime::new();
//! rt.state_set("k", "1", None).unwrap();
//! assert_eq!(rt.state_get("k", None).unwrap(), "1");
//! assert_eq!(rt.state_get("k", Some("acme")).unwrap(), "null");
//! ```

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::admission::{AdmissionConfig, AdmissionStage, HostLayers};
use crate::engine::{CancelToken, ChunkStream, ExecOptions, Runtime, RuntimeOptions, ToolCall, ToolExecutor};
use crate::events::{EventKind, EventQuery, RetentionPolicy};
use crate::gate::{ApprovalCallback, ApprovalEvent, ApprovalStore, input_digest};
use crate::ir::{ActionProposal, ToolSchema, from_json_str};
use crate::ir::{ToolFailure, ToolSource};
use crate::permission::{CanUseToolFn, HookFn};
use crate::policy::{
    DenyCallback, PermissionTier, PolicyFn, deny_tool, deny_tool_callback, deny_tool_param, require_state,
};
use crate::state::Scope;
use crate::tools::{BuiltinExecutor, Root};
use crate::{Error, Result};

/// One in-process runtime: its own state, tools, policies and event log.
#[derive(Clone, Debug)]
pub struct CarRuntime {
    rt: Runtime,
    /// Host closures taking part in the chain (`set_permission_hooks`).
    host_layers: Arc<RwLock<HostLayers>>,
    /// Serialises reconfigurations (read, rebuild, install).
    configure: Arc<Mutex<()>>,
    /// Plans built by `proposal_plan`, by id, until applied.
    plans: Arc<Mutex<std::collections::HashMap<String, StoredPlan>>>,
    /// Where the built-in tools run, once `register_agent_basics` was called.
    builtin_root: Arc<RwLock<Option<Root>>>,
    /// The host directory of worktree isolation when no built-in root is
    /// registered ([`CarRuntime::set_working_dir`]); else the current one.
    work_dir: Arc<RwLock<Option<std::path::PathBuf>>>,
    /// Run traces (`runs_*`).
    runs: Arc<crate::runs::RunBook>,
    /// The cost of every model turn recorded over the runtime's life.
    cumulative_cost_usd: Arc<Mutex<f64>>,
    /// The approvals store of `set_permissions` and the attached approvers.
    approvals: Arc<Mutex<Approvals>>,
    /// The MCP servers of the document's `mcp` section, connected.
    #[cfg(feature = "mcp")]
    mcp: Arc<RwLock<Option<Arc<crate::mcp::McpHub>>>>,
    /// Strict mode: a proposal with a field the IR does not know is refused
    /// (`unknown_field`) instead of run without it.
    strict_fields: Arc<std::sync::atomic::AtomicBool>,
}

/// The approvals side of the facade: the store `set_permissions` opened and
/// the host's approver callbacks, carried over to a store opened later.
#[derive(Default)]
struct Approvals {
    store: Option<Arc<ApprovalStore>>,
    /// The host's store (`set_approvals_store`, the daemon's one store),
    /// used when the document names no `approvals_dir`.
    shared: Option<Arc<ApprovalStore>>,
    /// `(facade id, callback, id of its registration on the store)`.
    approvers: Vec<(u64, ApprovalCallback, Option<u64>)>,
    next_id: u64,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("store", &self.store)
            .field("approvers", &self.approvers.len())
            .finish_non_exhaustive()
    }
}

impl Approvals {
    /// Installs `store` (or none), moving every approver onto it.
    fn install(&mut self, store: Option<Arc<ApprovalStore>>) {
        let same = match (&self.store, &store) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        for (_, cb, reg) in &mut self.approvers {
            if let (Some(old), Some(id)) = (&self.store, reg.take()) {
                old.remove_callback(id);
            }
            *reg = store.as_ref().map(|s| s.on_event(cb.clone()));
        }
        self.store = store;
    }
}

/// `session`-scoped answers: `(tool, input digest)` → (allow, reason).
/// A plan kept for `proposal_decide` and `proposal_apply`.
#[derive(Debug, Clone)]
struct StoredPlan {
    proposal: crate::ir::ActionProposal,
    session_id: Option<String>,
    scope_json: Option<String>,
    /// The ask items: action id → (tool, post-hook input digest).
    asks: std::collections::HashMap<String, (String, String)>,
}

/// The id by which a plan's compensation ask of action `id` is decided.
fn compensation_handle(id: &str) -> String {
    format!("{id}#compensation")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sends calls of the registered built-in tools to the in-process
/// [`BuiltinExecutor`] and every other call to the host's executor.
struct WithBuiltins {
    rt: Runtime,
    builtins: BuiltinExecutor,
    host: Arc<dyn ToolExecutor>,
}

#[async_trait::async_trait]
impl ToolExecutor for WithBuiltins {
    async fn execute(&self, call: ToolCall) -> std::result::Result<Value, ToolFailure> {
        // A subprocess tool needs a directory: without a root it stays the host's.
        if self.rt.tool(&call.tool).is_some_and(|t| t.source == ToolSource::Builtin)
            || (self.builtins.root().is_some()
                && self.rt.admission_stage().definition(&call.tool).executor == crate::permission::Executor::Subprocess)
        {
            self.builtins.execute(call).await
        } else {
            self.host.execute(call).await
        }
    }

    async fn execute_stream(
        &self,
        call: ToolCall,
        cancel: CancelToken,
    ) -> std::result::Result<ChunkStream, ToolFailure> {
        self.host.execute_stream(call, cancel).await
    }
}

impl Default for CarRuntime {
    fn default() -> Self {
        CarRuntime::new()
    }
}

/// `scope_json` of `execute_proposal`: `{tenant_id?}` (`tenant` accepted too).
#[derive(Debug, Default, Deserialize)]
struct ExecScope {
    #[serde(default, alias = "tenant")]
    tenant_id: Option<String>,
}

fn to_text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_string())
}

fn need<'a>(name: &str, v: Option<&'a str>) -> Result<&'a str> {
    v.filter(|s| !s.is_empty()).ok_or_else(|| Error::invalid_argument(name, "is required for this rule"))
}

/// The largest tool log entry ([`CarRuntime::tool_log`]): message and data
/// together, in bytes.
pub const TOOL_LOG_MAX_BYTES: usize = 64 * 1024;

impl CarRuntime {
    /// An empty runtime with default options.
    pub fn new() -> Self {
        CarRuntime::with_options(RuntimeOptions::default())
    }

    /// An empty runtime with these options.
    pub fn with_options(options: RuntimeOptions) -> Self {
        CarRuntime {
            rt: Runtime::new(options),
            host_layers: Arc::new(RwLock::new(HostLayers::default())),
            configure: Arc::new(Mutex::new(())),
            plans: Arc::new(Mutex::new(std::collections::HashMap::new())),
            builtin_root: Arc::new(RwLock::new(None)),
            work_dir: Arc::new(RwLock::new(None)),
            runs: Arc::new(crate::runs::RunBook::default()),
            cumulative_cost_usd: Arc::new(Mutex::new(0.0)),
            approvals: Arc::new(Mutex::new(Approvals::default())),
            #[cfg(feature = "mcp")]
            mcp: Arc::new(RwLock::new(None)),
            strict_fields: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// The engine underneath.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Registers the published built-in tools (`read_file`, `write_file`,
    /// `edit_file`, `list_dir`, `find_files`, `grep_files`, `calculate`) with
    /// their schemas (source `builtin`). Their calls run in-process, confined
    /// to `root` (default: the current directory); calls of every other tool
    /// still go to the host's executor. `shell` is not among them: see
    /// [`CarRuntime::register_shell_tool`].
    pub fn register_agent_basics(&self, root: Option<&str>) -> Result<()> {
        self.register_builtins(root, false)
    }

    /// Registers the built-in tools and also the built-in `shell` (its
    /// commands run with `sh -c` in the root and pass the admission stage
    /// like every call; the `[shell]` table and argv rules govern them). The
    /// command line uses it; the bindings' published surface does not.
    pub fn register_shell_tool(&self, root: Option<&str>) -> Result<()> {
        self.register_builtins(root, true)
    }

    /// Registers the first-party fetch tool `http_fetch` (source
    /// `builtin`, risk `network`; `src/tools/fetch.rs`). Its calls pass the
    /// admission stage like every call; then the tool itself checks the
    /// host and every address it resolves to against the chain's domain
    /// rules and `inspectors.egress_allowlist` before connecting, and every
    /// redirect the same way. Loopback, private, link-local and metadata
    /// addresses are refused unless an address or network entry of the
    /// allowlist covers them.
    #[cfg(feature = "fetch")]
    pub fn register_fetch_tool(&self) -> Result<()> {
        let t = crate::tools::builtin_tool(crate::permission::FETCH_TOOL)
            .ok_or_else(|| Error::runtime("internal_error", "this build has no `http_fetch` built-in"))?;
        // It touches no file: no root is set (worktree isolation keeps
        // taking its repository from `set_working_dir`).
        self.rt.register_tool_with_source(t.schema, ToolSource::Builtin)
    }

    fn register_builtins(&self, root: Option<&str>, with_shell: bool) -> Result<()> {
        let dir = match root {
            Some(r) => std::path::PathBuf::from(r),
            None => std::env::current_dir()
                .map_err(|e| Error::invalid_argument("root", format!("cannot read the current directory: {e}")))?,
        };
        let root = Root::new(&dir)?;
        for t in crate::tools::builtin_tools() {
            // `shell` and `http_fetch` have their own registrations.
            if (t.schema.name == crate::admission::SHELL_TOOL && !with_shell)
                || t.schema.name == crate::permission::FETCH_TOOL
            {
                continue;
            }
            self.rt.register_tool_with_source(t.schema, ToolSource::Builtin)?;
        }
        *self.builtin_root.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(root);
        Ok(())
    }

    /// Registers a tool with no parameter schema.
    pub fn register_tool(&self, name: &str) -> Result<()> {
        self.rt.register_tool_name(name)
    }

    /// Registers a `ToolSchema` (JSON text); parameters are validated before dispatch.
    pub fn register_tool_schema(&self, schema_json: &str) -> Result<()> {
        self.rt.register_tool(from_json_str::<ToolSchema>(schema_json)?)
    }

    /// Every ToolSchema sorted by name, each with `source`, as JSON text.
    pub fn list_tools(&self) -> String {
        serde_json::to_string(&self.rt.list_tools()).unwrap_or_else(|_| "[]".into())
    }

    /// Removes a tool; the count removed (0 is not an error).
    pub fn unregister_tool(&self, name: &str) -> u32 {
        self.rt.unregister_tool(name) as u32
    }

    /// Registers a policy: `deny_tool` (target), `deny_tool_param` (target,
    /// key, pattern) or `require_state` (key, value_json); in a session scope
    /// when `session_id` is given. `deny_tool_callback` needs a host callback:
    /// see [`CarRuntime::register_policy_callback`].
    #[allow(clippy::too_many_arguments)]
    pub fn register_policy(
        &self,
        name: &str,
        rule: &str,
        target: Option<&str>,
        key: Option<&str>,
        pattern: Option<&str>,
        value_json: Option<&str>,
        session_id: Option<&str>,
    ) -> Result<()> {
        let (f, description): (PolicyFn, String) = match rule {
            "deny_tool" => {
                let t = need("target", target)?;
                (deny_tool(t), format!("deny tool '{t}'"))
            }
            "deny_tool_param" => {
                let (t, k, p) = (need("target", target)?, need("key", key)?, need("pattern", pattern)?);
                (deny_tool_param(t, k, p), format!("deny tool '{t}' when param '{k}' contains the denied pattern"))
            }
            "require_state" => {
                let k = need("key", key)?;
                let v: Value = match value_json {
                    Some(text) => from_json_str(text)?,
                    None => Value::Null,
                };
                let d = format!("require state '{k}' == {v}");
                (require_state(k, v), d)
            }
            "deny_tool_callback" => {
                return Err(Error::invalid_argument(
                    "rule",
                    "`deny_tool_callback` needs a host callback; use register_policy_callback",
                ));
            }
            other => {
                return Err(Error::invalid_argument(
                    "rule",
                    format!(
                        "unknown policy rule `{other}`; expected `deny_tool`, `deny_tool_param`, `require_state` or `deny_tool_callback`"
                    ),
                ));
            }
        };
        self.install_policy(name, f, description, session_id)
    }

    /// Registers a `deny_tool_callback` policy with a host callback.
    pub fn register_policy_callback(
        &self,
        name: &str,
        target: &str,
        callback: DenyCallback,
        session_id: Option<&str>,
    ) -> Result<()> {
        let d = format!("deny tool '{target}' when the host callback says so");
        self.install_policy(name, deny_tool_callback(target, callback), d, session_id)
    }

    fn install_policy(&self, name: &str, f: PolicyFn, description: String, session_id: Option<&str>) -> Result<()> {
        if name.is_empty() {
            return Err(Error::invalid_argument("name", "a policy name must be non-empty"));
        }
        self.rt.with_policies_mut(|p| match session_id {
            Some(s) => p.register_in_session(s, name, f, description),
            None => {
                p.register(name, f, description);
                Ok(())
            }
        })?
    }

    /// Removes every global policy of that name (or of a session's, when
    /// given); the count removed.
    pub fn unregister_policy(&self, name: &str, session_id: Option<&str>) -> Result<u32> {
        self.rt
            .with_policies_mut(|p| match session_id {
                Some(s) => p.unregister_in_session(s, name),
                None => Ok(p.unregister(name)),
            })?
            .map(|n| n as u32)
    }

    /// `[{name, description}]` in registration order (a session's own when given).
    pub fn list_policies(&self, session_id: Option<&str>) -> Result<String> {
        let list = self.rt.with_policies(|p| match session_id {
            Some(s) => p.list_session(s),
            None => Ok(p.list()),
        })??;
        Ok(serde_json::to_string(&list).unwrap_or_else(|_| "[]".into()))
    }

    /// Loads `dir/*.toml` policy files; the number of rules loaded.
    pub fn load_policies(&self, dir: &str) -> Result<u32> {
        self.rt.with_policies_mut(|p| p.load_policy_dir(Path::new(dir)))?.map(|n| n as u32)
    }

    /// Opens a policy session scope; its id.
    pub fn open_session(&self) -> Result<String> {
        self.rt.with_policies_mut(|p| p.open_session())
    }

    /// Closes a policy session scope; false when it did not exist. Its
    /// `session`-scoped answers and breaker counts are forgotten.
    pub fn close_session(&self, session_id: &str) -> Result<bool> {
        let closed = self.rt.with_policies_mut(|p| p.close_session(session_id))?;
        self.rt.admission_stage().session_state().forget(Some(session_id));
        Ok(closed)
    }

    /// Sets a state key to a JSON value (tenant-scoped when given).
    pub fn state_set(&self, key: &str, value_json: &str, tenant: Option<&str>) -> Result<()> {
        let v: Value = from_json_str(value_json)?;
        self.rt.state_set(key, v, tenant).map(|_| ())
    }

    /// The value as JSON text, `"null"` when absent.
    pub fn state_get(&self, key: &str, tenant: Option<&str>) -> Result<String> {
        let scope = Scope::from_option(tenant)?;
        Ok(self.rt.state().get(&scope, key).map_or_else(|| "null".to_string(), |v| to_text(&v)))
    }

    /// True when the key holds a value (`null` included).
    pub fn state_exists(&self, key: &str, tenant: Option<&str>) -> Result<bool> {
        Ok(self.rt.state().exists(&Scope::from_option(tenant)?, key))
    }

    /// Keys visible in the scope, sorted (tenant keys without their prefix;
    /// the unscoped view hides every `tenant:` key).
    pub fn state_keys(&self, tenant: Option<&str>) -> Result<Vec<String>> {
        Ok(self.rt.state().keys(&Scope::from_option(tenant)?))
    }

    /// `{key: value}` of the scope as JSON text.
    pub fn state_snapshot(&self, tenant: Option<&str>) -> Result<String> {
        Ok(to_text(&Value::Object(self.rt.state().snapshot(&Scope::from_option(tenant)?))))
    }

    /// Strict mode on or off (off by default): on, a proposal with a field
    /// the IR does not know (a misspelling such as `dependecies`) is refused
    /// by `execute_proposal`, `proposal_plan` and `verify_proposal` with
    /// `unknown_field`, naming every such field and the known field each
    /// probably meant. Off, it runs without it and `verify` warns of it.
    pub fn set_strict_fields(&self, strict: bool) {
        self.strict_fields.store(strict, std::sync::atomic::Ordering::SeqCst);
    }

    /// True in strict mode ([`CarRuntime::set_strict_fields`]).
    pub fn strict_fields(&self) -> bool {
        self.strict_fields.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Parses a proposal's text; in strict mode a field the IR does not
    /// know refuses it. Returns the unknown fields (none in strict mode).
    fn parse_checked(&self, proposal_json: &str) -> Result<(ActionProposal, Vec<crate::ir::UnknownField>)> {
        let (p, unknown) = crate::ir::parse_proposal_reporting(proposal_json)?;
        if self.strict_fields() {
            crate::ir::refuse_unknown(&unknown)?;
        }
        Ok((p, unknown))
    }

    /// In strict mode, refuses `proposal_json` when it has a field the IR
    /// does not know (`unknown_field`); otherwise (and when it has none)
    /// `Ok`. For a host that parses the proposal itself (the daemon).
    pub fn check_strict_fields(&self, proposal_json: &str) -> Result<()> {
        if self.strict_fields() {
            self.parse_checked(proposal_json)?;
        }
        Ok(())
    }

    /// Parses a proposal to run: in strict mode, as [`Self::parse_checked`];
    /// otherwise by the plain parser (unknown fields are ignored unread).
    fn parse_strict(&self, proposal_json: &str) -> Result<ActionProposal> {
        if self.strict_fields() {
            return self.parse_checked(proposal_json).map(|(p, _)| p);
        }
        crate::ir::parse_proposal(proposal_json)
    }

    /// Verifies a proposal against this runtime's tools, state and budget:
    /// the `VerificationResult` as JSON text, with a `warning` for each
    /// field the IR does not know (refused instead in strict mode).
    pub fn verify_proposal(&self, proposal_json: &str) -> Result<String> {
        let (p, unknown) = self.parse_checked(proposal_json)?;
        let opts = crate::verify::VerifyOptions {
            initial_state: self.rt.state().snapshot(&Scope::global()),
            tool_names: None,
            max_actions: self.rt.options().cost_budget.as_ref().and_then(|b| b.max_actions),
            tool_schemas: Some(self.rt.list_tools()),
        };
        Ok(crate::api::verify::answer(&p, &opts, &unknown))
    }

    /// Executes a proposal with the host's executor; the ProposalResult as
    /// JSON text. `scope_json` is `{tenant_id?}`: the state tenant to run in.
    pub async fn execute_proposal(
        &self,
        proposal_json: &str,
        executor: Arc<dyn ToolExecutor>,
        session_id: Option<&str>,
        scope_json: Option<&str>,
    ) -> Result<String> {
        let proposal = self.parse_strict(proposal_json)?;
        let result = self.execute_parsed(proposal, executor, session_id, scope_json).await?;
        Ok(result.into_json_string())
    }

    /// [`Self::execute_proposal`] for a proposal already parsed (by
    /// `crate::ir::parse_proposal`): the ProposalResult itself, for callers
    /// (the daemon) that would otherwise parse it twice and read the result
    /// text back.
    pub async fn execute_parsed(
        &self,
        proposal: crate::ir::ActionProposal,
        executor: Arc<dyn ToolExecutor>,
        session_id: Option<&str>,
        scope_json: Option<&str>,
    ) -> Result<crate::ir::ProposalResult> {
        self.execute_parsed_as(proposal, executor, session_id, scope_json, None).await
    }

    /// [`Self::execute_parsed`] on behalf of `owner` (a daemon's principal):
    /// a proposal that suspends records it, and only it (or a host) may
    /// resume it.
    pub async fn execute_parsed_as(
        &self,
        proposal: crate::ir::ActionProposal,
        executor: Arc<dyn ToolExecutor>,
        session_id: Option<&str>,
        scope_json: Option<&str>,
        owner: Option<&str>,
    ) -> Result<crate::ir::ProposalResult> {
        let scope: ExecScope = match scope_json {
            Some(s) if !s.trim().is_empty() && s.trim() != "null" => from_json_str(s)?,
            _ => ExecScope::default(),
        };
        let mut opts = ExecOptions {
            session_id: session_id.map(str::to_string),
            tenant: scope.tenant_id,
            owner: owner.map(str::to_string),
            ..Default::default()
        };
        let root = self.builtin_root.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let stage = self.rt.admission_stage();
        let isolation = stage.config().isolation.clone().unwrap_or_default();
        // A worktree does not outlive the call, so such a run waits on asks.
        opts.suspend = stage.config().on_ask == Some(crate::admission::OnAsk::Suspend)
            && !matches!(isolation, crate::isolation::Isolation::Worktree(_));
        if isolation != crate::isolation::Isolation::None {
            opts.isolation = Some(isolation.to_value());
        }
        let tree = match &isolation {
            crate::isolation::Isolation::Worktree(spec) => {
                let work_dir = self.work_dir.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                let host = match (&root, work_dir) {
                    (Some(r), _) => r.path().to_path_buf(),
                    (None, Some(d)) => d,
                    (None, None) => std::env::current_dir().map_err(|e| {
                        Error::runtime("worktree_failed", format!("worktree isolation: the current directory: {e}"))
                    })?,
                };
                let (spec, label) = (spec.clone(), proposal.id.clone());
                let wt = tokio::task::spawn_blocking(move || crate::isolation::Worktree::acquire(&host, &spec, &label))
                    .await
                    .map_err(|e| Error::runtime("worktree_failed", format!("worktree isolation: {e}")))??;
                opts.cwd = Some(wt.cwd.to_string_lossy().into_owned());
                Some(wt)
            }
            _ => None,
        };
        let executor = self.dispatching(executor, root);
        self.runs.attribute(&proposal.id);
        let result = self.rt.execute(proposal, executor, opts).await;
        match tree {
            None => result,
            Some(wt) => Self::finish_worktree(wt, result).await,
        }
    }

    /// The host's executor with the built-in tools (once registered: the
    /// file tools with their root, or `http_fetch` alone) and the MCP tool
    /// sources in front.
    fn dispatching(&self, executor: Arc<dyn ToolExecutor>, root: Option<Root>) -> Arc<dyn ToolExecutor> {
        let builtins = match root {
            Some(root) => Some(BuiltinExecutor::new(root)),
            None => self
                .rt
                .tool(crate::permission::FETCH_TOOL)
                .is_some_and(|t| t.source == ToolSource::Builtin)
                .then(BuiltinExecutor::without_root),
        };
        let executor: Arc<dyn ToolExecutor> = match builtins {
            Some(b) => {
                let builtins = b.with_runtime(self.rt.clone());
                Arc::new(WithBuiltins { rt: self.rt.clone(), builtins, host: executor })
            }
            None => executor,
        };
        #[cfg(feature = "mcp")]
        let executor: Arc<dyn ToolExecutor> = match self.mcp_hub() {
            Some(hub) => Arc::new(crate::mcp::McpDispatch { hub, inner: executor }),
            None => executor,
        };
        executor
    }

    /// Resumes the suspended proposal `id` (`docs/suspend.md`) with the
    /// host's executor: what had not run goes through admission again and
    /// runs; what settled is not run again. The ProposalResult of the whole
    /// proposal as JSON text (`status: "suspended"` again when an approval
    /// is still pending). Errors `suspension_not_found`,
    /// `suspension_claimed`, `suspension_conflict` change nothing.
    pub async fn resume_proposal(&self, id: &str, executor: Arc<dyn ToolExecutor>) -> Result<String> {
        Ok(self.resume_parsed_as(id, executor, None, None).await?.into_json_string())
    }

    /// [`Self::resume_proposal`] in policy session `session_id`, on behalf
    /// of `owner` (a daemon's principal; `None`: the host, which may resume
    /// any): the ProposalResult itself.
    pub async fn resume_parsed_as(
        &self,
        id: &str,
        executor: Arc<dyn ToolExecutor>,
        session_id: Option<&str>,
        owner: Option<&str>,
    ) -> Result<crate::ir::ProposalResult> {
        let opts = ExecOptions {
            session_id: session_id.map(str::to_string),
            owner: owner.map(str::to_string),
            ..Default::default()
        };
        let root = self.builtin_root.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let executor = self.dispatching(executor, root);
        let claimant = format!("resume-{}", uuid::Uuid::new_v4());
        self.rt.resume(id, &claimant, executor, opts).await
    }

    /// The suspended proposals (`docs/suspend.md`), oldest first, as JSON
    /// text: `{suspended: [{id, proposal_id, tenant, owner, pending,
    /// waiting, created_at, suspended_at, suspensions}]}`; with `owner`,
    /// only that principal's.
    pub async fn suspended_proposals(&self, owner: Option<&str>) -> Result<String> {
        let all = self.rt.checkpoints().list().await?;
        let rows: Vec<Value> = all
            .iter()
            .filter(|c| !c.running && (owner.is_none() || c.owner.as_deref() == owner))
            .map(crate::checkpoint::Checkpoint::summary)
            .collect();
        Ok(to_text(&json!({"suspended": rows})))
    }

    /// Keeps suspended proposals in `backend` (a daemon's directory or its
    /// shared database). Default: in memory, or `<approvals_dir>/checkpoints`
    /// once the admission document names an `approvals_dir`.
    pub fn set_checkpoints(&self, backend: Arc<dyn crate::checkpoint::CheckpointBackend>) {
        self.rt.set_checkpoints(backend);
    }

    /// Collects the worktree's patch into the result's artifacts and
    /// disposes of the tree (kept when the run failed and `keep_on_error`
    /// asks for it). A result is never lost to a git failure: the artifact
    /// then carries `error`.
    async fn finish_worktree(
        wt: crate::isolation::Worktree,
        result: Result<crate::ir::ProposalResult>,
    ) -> Result<crate::ir::ProposalResult> {
        use crate::ir::ActionStatus;
        let failed = result.as_ref().map_or(true, |r| {
            r.results.iter().any(|a| matches!(a.status, ActionStatus::Failed | ActionStatus::Rejected))
        });
        let path = wt.path.clone();
        let done = tokio::task::spawn_blocking(move || {
            let artifact = wt.collect();
            (artifact, wt.dispose(failed))
        })
        .await;
        let mut result = result?;
        let mut artifact = match done {
            Ok((Ok(a), kept)) => {
                let mut a = a;
                match kept {
                    Ok(Some(p)) => a["worktree"] = json!(p.to_string_lossy()),
                    Ok(None) => {}
                    Err(e) => {
                        a["worktree"] = json!(path.to_string_lossy());
                        a["dispose_error"] = json!(e.to_string());
                    }
                }
                a
            }
            Ok((Err(e), _)) => json!({"kind": "patch", "error": e.to_string(), "worktree": path.to_string_lossy()}),
            Err(e) => {
                json!({"kind": "patch", "error": format!("worktree isolation: {e}"), "worktree": path.to_string_lossy()})
            }
        };
        if let Some(o) = artifact.as_object_mut() {
            o.insert("isolation".into(), json!("worktree"));
        }
        result.artifacts.push(artifact);
        Ok(result)
    }

    /// Keeps run traces as `<dir>/<run_id>.json` (`car-server`:
    /// `$CAR_HOME/runs`); `None`: in memory only.
    pub fn set_runs_dir(&self, dir: Option<&str>) -> Result<()> {
        self.runs.set_dir(dir.map(Path::new))
    }

    /// `runs_start {intent, agent_id?, agent_name?, outcome_description?,
    /// idempotency_key?}` → `{run_id, agent_id}`. Proposals run after it
    /// belong to the run until it completes.
    pub fn runs_start(&self, params_json: &str) -> Result<String> {
        self.runs_start_as(params_json, None)
    }

    /// [`CarRuntime::runs_start`] with the agent identity a host assigns
    /// (a daemon's agent connection): it wins over the request's `agent_id`.
    pub fn runs_start_as(&self, params_json: &str, agent: Option<&str>) -> Result<String> {
        let params: Value = from_json_str(params_json)?;
        let (out, event) = self.runs.start(&params, agent)?;
        if let Some(e) = event {
            self.rt.events().record(EventKind::RunStarted, None, None, e);
        }
        Ok(to_text(&out))
    }

    /// `runs_record_model_turn {run_id, turn_index?, assistant_text?,
    /// requested_tool_calls?, model_id?, token_usage?, duration_ms?}` →
    /// `{run_id, turn_index, ok}`.
    pub fn runs_record_model_turn(&self, params_json: &str) -> Result<String> {
        let params: Value = from_json_str(params_json)?;
        let (out, event) = self.runs.record_turn(&params)?;
        *lock(&self.cumulative_cost_usd) += crate::runs::turn_cost(&event);
        self.rt.events().record(EventKind::RunModelTurn, None, None, event);
        Ok(to_text(&out))
    }

    /// `runs_complete {run_id, outcome: {status, summary?, evidence?,
    /// metrics?, tools_called?, timestamp?}}` → `{run_id, ok}`.
    pub fn runs_complete(&self, params_json: &str) -> Result<String> {
        let params: Value = from_json_str(params_json)?;
        let (out, event) = self.runs.complete(&params)?;
        self.rt.events().record(EventKind::RunCompleted, None, None, event);
        Ok(to_text(&out))
    }

    /// `runs_list {agent_id?, status?, limit?}` → `{count, runs}` newest first.
    pub fn runs_list(&self, params_json: Option<&str>) -> Result<String> {
        self.runs_list_as(params_json, None)
    }

    /// [`CarRuntime::runs_list`] limited to one agent's runs.
    pub fn runs_list_as(&self, params_json: Option<&str>, agent: Option<&str>) -> Result<String> {
        let params = match params_json.map(str::trim).filter(|t| !t.is_empty() && *t != "null") {
            Some(t) => from_json_str(t)?,
            None => Value::Null,
        };
        Ok(to_text(&self.runs.list(&params, agent)?))
    }

    /// `runs_get_trace {run_id}` → `{run, events}`: the run with its model
    /// turns and proposals, and the events of both held by this runtime.
    pub fn runs_get_trace(&self, params_json: &str) -> Result<String> {
        self.runs_get_trace_as(params_json, None)
    }

    /// [`CarRuntime::runs_get_trace`] limited to one agent's runs.
    pub fn runs_get_trace_as(&self, params_json: &str, agent: Option<&str>) -> Result<String> {
        let params: Value = from_json_str(params_json)?;
        Ok(to_text(&self.runs.trace(&params, &self.rt.events().events(), agent)?))
    }

    /// `[{agent, calls, tokens_in, tokens_out, cost_usd}]` from the model
    /// turns of the events held (`events.cost_by_agent`).
    pub fn event_cost_by_agent(&self) -> String {
        to_text(&crate::runs::cost_by_agent(&self.rt.events().events()))
    }

    /// The operational rollup of the events held (`metrics.summary`).
    pub fn metrics_summary(&self) -> String {
        let cumulative = *lock(&self.cumulative_cost_usd);
        to_text(&crate::runs::metrics_summary(&self.rt.events().events(), cumulative))
    }

    /// `events_truncate {max_events?, max_age_secs?}`: removes the events
    /// beyond that policy once (the retention policy in force stays) →
    /// `{removed, remaining}`.
    pub fn events_truncate(&self, params_json: &str) -> Result<String> {
        let policy: RetentionPolicy = from_json_str(params_json)?;
        if policy.max_events.is_none() && policy.max_age_secs.is_none() {
            return Err(Error::invalid_argument("params", "give max_events and/or max_age_secs"));
        }
        let removed = self.rt.events().truncate(&policy);
        Ok(to_text(&json!({"removed": removed, "remaining": self.rt.events().count()})))
    }

    /// Number of events held.
    pub fn event_count(&self) -> u64 {
        self.rt.events().count() as u64
    }

    /// `{count, events}` newest first. Query: `{kinds?, action_id?,
    /// proposal_id?, since?, until?, data_matches?, limit?}`.
    pub fn event_query(&self, query_json: &str) -> Result<String> {
        let q: EventQuery = match query_json.trim() {
            "" | "null" => EventQuery::default(),
            text => from_json_str(text)?,
        };
        let events: Vec<Value> = self.rt.events().query(&q)?.iter().map(|e| e.to_json()).collect();
        Ok(to_text(&json!({"count": events.len(), "events": events})))
    }

    /// Event counts by kind (`events.stats`).
    pub fn event_stats(&self) -> String {
        to_text(&Value::Object(self.rt.events().stats()))
    }

    /// Removes every event: `{removed, stats}` (stats of what was removed).
    pub fn event_clear(&self) -> String {
        let (removed, stats) = self.rt.events().clear();
        to_text(&json!({"removed": removed, "stats": stats}))
    }

    /// Gets (`None`) or sets the retention policy: `{policy}` or `{policy, removed}`.
    pub fn event_retention(&self, policy_json: Option<&str>) -> Result<String> {
        match policy_json.filter(|s| !s.trim().is_empty() && s.trim() != "null") {
            None => Ok(to_text(&json!({"policy": self.rt.events().retention()}))),
            Some(text) => {
                let policy: RetentionPolicy = from_json_str(text)?;
                let removed = self.rt.events().set_retention(policy.clone());
                Ok(to_text(&json!({"policy": policy, "removed": removed})))
            }
        }
    }

    /// `(successes, failures)` of tool attempts by tool in this runtime's
    /// event log (what Monte Carlo derives rates from).
    pub fn tool_history(&self) -> std::collections::HashMap<String, (u64, u64)> {
        crate::planning::montecarlo::tool_history(&self.rt.events().events())
    }

    /// `simulate_monte_carlo` against this runtime: a tool with no given
    /// rate uses its record in the event log (Laplace-smoothed), else the
    /// config's default. Same arguments and result as the free function.
    pub fn simulate_monte_carlo(
        &self,
        proposal_json: &str,
        initial_state_json: Option<&str>,
        tool_success_rates_json: Option<&str>,
        goal_json: Option<&str>,
        config_json: Option<&str>,
    ) -> Result<String> {
        let input =
            super::planning::monte_carlo_input(initial_state_json, tool_success_rates_json, goal_json, config_json)?;
        super::planning::simulate_monte_carlo_with_history(proposal_json, input, self.tool_history())
    }

    /// Turns SHA-256 hash chaining on for every later event.
    pub fn enable_event_log_hash_chaining(&self) {
        self.rt.events().enable_chaining();
    }

    /// `{"verified": n}` or `{"tampered_at": i}`.
    pub fn verify_event_log_chain(&self) -> String {
        to_text(&self.rt.events().verify_chain().to_json())
    }

    /// `log(level, msg, data?)` of a tool's context (tools-and-permissions.md,
    /// ToolContext): records a `ToolLog` event `{tool, request_id, level,
    /// message, data?}` for the action of `call_json` (the call JSON the tool
    /// received, or at least `{request_id, action_id?, tool?}`). Telemetry
    /// only: it changes no state and no result. `level` is `debug`, `info`,
    /// `warn` or `error`; `data_json` is JSON text; the message and data
    /// together are at most [`TOOL_LOG_MAX_BYTES`]. A bad argument is an
    /// `invalid_argument` naming it, and nothing is recorded.
    pub fn tool_log(&self, call_json: &str, level: &str, message: &str, data_json: Option<&str>) -> Result<()> {
        let call: Value = from_json_str(call_json)?;
        let field = |k: &str| call.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
        let Some(request_id) = field("request_id") else {
            return Err(Error::invalid_argument(
                "call",
                "must be the call JSON the tool received (an object with its `request_id`)",
            ));
        };
        check_log_level(level)?;
        let size = message.len() + data_json.map_or(0, str::len);
        check_log_size(size)?;
        let data = match data_json.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => {
                Some(serde_json::from_str::<Value>(t).map_err(|e| Error::invalid_argument("data", e.to_string()))?)
            }
            None => None,
        };
        self.record_tool_log(
            ToolLogEntry { request_id, tool: field("tool"), action_id: field("action_id") },
            level,
            message,
            data,
        );
        Ok(())
    }

    /// [`Self::tool_log`] for a host that holds the call's fields and the
    /// data as a value (the daemon's `tools.log`): the same checks, with
    /// the data's size counted in its compact JSON form.
    pub fn tool_log_entry(
        &self,
        call: ToolLogEntry<'_>,
        level: &str,
        message: &str,
        data: Option<Value>,
    ) -> Result<()> {
        if call.request_id.is_empty() {
            return Err(Error::invalid_argument("request_id", "must name the call being served"));
        }
        check_log_level(level)?;
        let data = data.filter(|d| !d.is_null());
        check_log_size(message.len() + data.as_ref().map_or(0, compact_len))?;
        self.record_tool_log(call, level, message, data);
        Ok(())
    }

    fn record_tool_log(&self, call: ToolLogEntry<'_>, level: &str, message: &str, data: Option<Value>) {
        let mut doc =
            serde_json::json!({"tool": call.tool, "request_id": call.request_id, "level": level, "message": message});
        if let Some(d) = data {
            doc["data"] = d;
        }
        self.rt.events().record(EventKind::ToolLog, None, call.action_id, doc);
    }

    /// Whether the engine has given up on the call of `call_json` (the call
    /// JSON a tool received): its `deadline` (the attempt's `timeout_ms`)
    /// has passed, so its answer will be discarded and the tool should stop.
    /// A call without a timeout is never given up on this way. A `call_json`
    /// that is not a call is an `invalid_argument`.
    pub fn tool_cancelled(&self, call_json: &str) -> Result<bool> {
        let call: Value = from_json_str(call_json)?;
        if call.get("request_id").and_then(Value::as_str).is_none() {
            return Err(Error::invalid_argument(
                "call",
                "must be the call JSON the tool received (an object with its `request_id`)",
            ));
        }
        Ok(match call.get("deadline") {
            None | Some(Value::Null) => false,
            Some(d) => {
                let d: chrono::DateTime<chrono::Utc> = serde_json::from_value(d.clone())
                    .map_err(|e| Error::invalid_argument("call.deadline", e.to_string()))?;
                chrono::Utc::now() >= d
            }
        })
    }

    /// A detached tool's `ToolPollResult` as JSON text, or `None` once its
    /// terminal status has been reported (or for an unknown handle).
    pub fn tool_poll(&self, handle: &str) -> Option<String> {
        self.rt.tool_poll(handle).map(|r| serde_json::to_string(&r).unwrap_or_else(|_| "null".into()))
    }

    /// Cooperatively cancels a detached tool.
    pub fn tool_cancel(&self, handle: &str) -> bool {
        self.rt.tool_cancel(handle)
    }

    /// A subscription to every detached tool's `{handle, chunk}` events
    /// (`tools.stream.subscribe`); render each with `serde_json`.
    pub fn tool_stream_subscribe(&self) -> tokio::sync::broadcast::Receiver<crate::ir::ToolStreamEvent> {
        self.rt.subscribe_tool_stream()
    }

    /// Configures this runtime's admission stage from the admission
    /// configuration document (`docs/admission.md`; `None`, empty or `null`
    /// removes every layer but the tier), as JSON text. The old shape
    /// (`{preset?, deny?, ask?, hooks?, can_use_tool?, tools?,
    /// approval_timeout_ms?}` or `{engine, profile}`) is a subset of it.
    /// `approvals_dir` (or the document's `approvals_dir`) opens the durable
    /// approvals store an ask consults:
    /// - an approval already resolved for this tool and post-hook input
    ///   applies (allow runs, deny rejects);
    /// - otherwise, with an approver attached ([`CarRuntime::on_approval`] or
    ///   a live [`CarRuntime::approvals_subscribe`] receiver), the action is
    ///   held until the approval closes (an explicit allow runs it, anything
    ///   else rejects it, the deadline denies);
    /// - with no approver, the action is rejected naming the approval key.
    ///
    /// Without a store an ask is a rejection. A malformed document is an
    /// error naming the bad key, and changes nothing. The granted tier set by
    /// [`CarRuntime::permission_set_tier`] is kept unless the document
    /// names a `tier`.
    pub fn set_permissions(&self, config_json: Option<&str>, approvals_dir: Option<&str>) -> Result<()> {
        let mut config = AdmissionConfig::from_json(config_json.unwrap_or(""))?;
        if let Some(dir) = approvals_dir {
            config.approvals_dir = Some(dir.to_string());
        }
        self.configure_admission(config)
    }

    /// [`CarRuntime::set_permissions`] with the document already read.
    pub fn configure_admission(&self, config: AdmissionConfig) -> Result<()> {
        self.install_admission(config)
    }

    /// Builds and installs the stage of `config` with the host's layers
    /// (hooks, supervisor, the attached tier ledger) in one step.
    fn install_admission(&self, mut config: AdmissionConfig) -> Result<()> {
        let _guard = self.configure.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.rt.admission_stage();
        if config.tier.is_none() {
            config.tier = current.tier();
        }
        let store = match &config.approvals_dir {
            None => lock(&self.approvals).shared.clone(),
            Some(dir) => {
                let open = self.approvals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).store.clone();
                match open.filter(|s| s.path() == Path::new(dir).join(crate::gate::APPROVALS_FILE)) {
                    Some(s) => Some(s),
                    None => Some(Arc::new(ApprovalStore::open(dir)?)),
                }
            }
        };
        let host = self.host_layers.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let (config, mcp) = self.prepare_mcp(config)?;
        let checkpoints = match &config.approvals_dir {
            Some(dir) => Some(crate::checkpoint::FileCheckpoints::open(Path::new(dir).join("checkpoints"))?),
            None => None,
        };
        let stage = AdmissionStage::build(config, &host, store.clone())?;
        self.install_mcp(mcp)?;
        if let Some(c) = checkpoints {
            self.rt.set_checkpoints(Arc::new(c));
        }
        if let Some(store) = &store {
            self.approvals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).install(Some(store.clone()));
        }
        self.rt.set_admission_stage(Arc::new(stage));
        Ok(())
    }

    /// The admission configuration document in force, as JSON text (the
    /// definitions imported from MCP servers are not part of it).
    pub fn admission_config(&self) -> String {
        #[allow(unused_mut)]
        let mut doc = self.rt.admission_stage().config().to_value();
        #[cfg(feature = "mcp")]
        if let (Some(hub), Some(tools)) = (self.mcp_hub(), doc.get_mut("tools").and_then(Value::as_array_mut)) {
            let imported = hub.definitions();
            tools.retain(|t| !imported.contains(t));
            if tools.is_empty()
                && let Some(o) = doc.as_object_mut()
            {
                o.remove("tools");
            }
        }
        to_text(&doc)
    }

    /// The MCP hub of the document in force, when it has an `mcp` section.
    #[cfg(feature = "mcp")]
    pub fn mcp_hub(&self) -> Option<Arc<crate::mcp::McpHub>> {
        self.mcp.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The MCP tool sources: per server its tools with their accepted and
    /// current contract hashes, refusals under `pin`, and drift reports, as
    /// JSON text (`{"servers": {}}` when none is configured).
    pub fn mcp_status(&self) -> String {
        #[cfg(feature = "mcp")]
        if let Some(hub) = self.mcp_hub() {
            return to_text(&hub.status());
        }
        to_text(&json!({"servers": {}}))
    }

    /// Connects the document's MCP servers (or keeps the hub in force when
    /// the section is unchanged) and returns the document the stage is built
    /// from: the imported tools' definitions added to `tools` (an explicit
    /// `tools` entry of the same name wins).
    #[cfg(feature = "mcp")]
    #[allow(clippy::type_complexity)]
    fn prepare_mcp(&self, mut config: AdmissionConfig) -> Result<(AdmissionConfig, Option<Arc<crate::mcp::McpHub>>)> {
        let wanted = config.mcp.clone().filter(|m| !m.servers.is_empty());
        let Some(wanted) = wanted else { return Ok((config, None)) };
        let hub = match self.mcp_hub().filter(|h| h.config() == &wanted) {
            Some(h) => h,
            None => Arc::new(crate::mcp::McpHub::connect(wanted)?),
        };
        for t in hub.imported() {
            if let Some(existing) = self.rt.tool(&t.name)
                && existing.source != ToolSource::Mcp
            {
                return Err(Error::config(
                    "mcp_tool_conflict",
                    format!(
                        "mcp server `{}`: tool `{}` is already registered (source {:?}); give the server a `prefix`",
                        t.server, t.name, existing.source
                    ),
                    json!({"server": t.server, "tool": t.name}),
                ));
            }
            crate::engine::RegisteredTool::new(t.schema(), ToolSource::Mcp)?;
        }
        let declared: std::collections::HashSet<String> =
            config.tools.iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect();
        for d in hub.definitions() {
            if !declared.contains(d["name"].as_str().unwrap_or_default()) {
                config.tools.push(d);
            }
        }
        Ok((config, Some(hub)))
    }

    #[cfg(not(feature = "mcp"))]
    fn prepare_mcp(&self, config: AdmissionConfig) -> Result<(AdmissionConfig, Option<()>)> {
        if config.mcp.as_ref().is_some_and(|m| !m.servers.is_empty()) {
            return Err(Error::config(
                "mcp_unavailable",
                "the admission document has an `mcp` section, but this build has no MCP support (cargo feature `mcp`)",
                json!({"key": "mcp"}),
            ));
        }
        Ok((config, None))
    }

    /// Registers the hub's tools (source `mcp`), unregisters the ones of the
    /// hub it replaces, and installs it.
    #[cfg(feature = "mcp")]
    fn install_mcp(&self, hub: Option<Arc<crate::mcp::McpHub>>) -> Result<()> {
        let old = self.mcp_hub();
        if let (Some(a), Some(b)) = (&old, &hub)
            && Arc::ptr_eq(a, b)
        {
            return Ok(());
        }
        if let Some(old) = &old {
            for t in old.imported() {
                if self.rt.tool(&t.name).is_some_and(|s| s.source == ToolSource::Mcp) {
                    self.rt.unregister_tool(&t.name);
                }
            }
        }
        if let Some(hub) = &hub {
            for t in hub.imported() {
                self.rt.register_tool_with_source(t.schema(), ToolSource::Mcp)?;
            }
        }
        *self.mcp.write().unwrap_or_else(std::sync::PoisonError::into_inner) = hub;
        Ok(())
    }

    #[cfg(not(feature = "mcp"))]
    fn install_mcp(&self, _hub: Option<()>) -> Result<()> {
        Ok(())
    }

    /// The plan of a proposal before anything runs (the plan/apply gate on
    /// the execution path): for every action what admission decides now
    /// (`verdict`, deciding `layer`, `rule`, `reason`, `required_tier`,
    /// `granted_tier`), its `risk`, and for an `ask` the `approval_key` a
    /// decision resolves; a built-in file write carries its unified diff as
    /// `preview`. Nothing runs, is recorded or is asked. Decide the asks with
    /// [`CarRuntime::proposal_decide`], then run it with
    /// [`CarRuntime::proposal_apply`]. JSON text `{plan_id, proposal_id,
    /// items, counts: {allow, ask, deny}}`.
    pub fn proposal_plan(
        &self,
        proposal_json: &str,
        session_id: Option<&str>,
        scope_json: Option<&str>,
    ) -> Result<String> {
        let proposal = self.parse_strict(proposal_json)?;
        if let Some(&(i, first)) = crate::dag::duplicate_ids(&proposal.actions).first() {
            return Err(crate::error::InputError::Shape {
                path: format!("actions[{i}].id"),
                message: format!("duplicate action id '{}' (also actions[{first}].id)", proposal.actions[i].id),
            }
            .into());
        }
        let scope: ExecScope = match scope_json {
            Some(s) if !s.trim().is_empty() && s.trim() != "null" => from_json_str(s)?,
            _ => ExecScope::default(),
        };
        let (items, asks, counts) = self.plan_items(&proposal, session_id, scope.tenant_id.as_deref())?;
        let plan_id = format!("plan-{}", uuid::Uuid::new_v4());
        let out = json!({
            "plan_id": plan_id,
            "proposal_id": proposal.id,
            "items": items,
            "counts": {"allow": counts[0], "ask": counts[1], "deny": counts[2]},
        });
        lock(&self.plans).insert(
            plan_id,
            StoredPlan {
                proposal,
                session_id: session_id.map(str::to_string),
                scope_json: scope_json.map(str::to_string),
                asks,
            },
        );
        Ok(to_text(&out))
    }

    /// The items of [`CarRuntime::proposal_plan`] for a parsed proposal
    /// (what admission decides per action now; nothing runs, is recorded or
    /// is asked), with the ask items' `(tool, input digest)` by action id and
    /// the counts of allow, ask and deny. The daemon shows these to its
    /// approvers.
    #[allow(clippy::type_complexity)]
    pub fn plan_items(
        &self,
        proposal: &crate::ir::ActionProposal,
        session_id: Option<&str>,
        tenant: Option<&str>,
    ) -> Result<(Vec<Value>, std::collections::HashMap<String, (String, String)>, [u64; 3])> {
        let decisions = self.rt.plan(proposal, session_id, tenant)?;
        let stage = self.rt.admission_stage();
        let root = self.builtin_root.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let mut asks = std::collections::HashMap::new();
        let mut counts = [0u64; 3];
        // The shell of a one-action proposal for a compensation's verdict.
        let empty = crate::ir::ActionProposal {
            actions: Vec::new(),
            context: serde_json::Map::new(),
            id: proposal.id.clone(),
            source: proposal.source.clone(),
            timestamp: proposal.timestamp,
        };
        let mut items = Vec::with_capacity(decisions.len());
        for (a, (d, input)) in proposal.actions.iter().zip(decisions) {
            counts[d.verdict as usize] += 1;
            let mut item = serde_json::to_value(&d).unwrap_or_else(|_| json!({}));
            item["action_id"] = json!(a.id);
            item["type"] = json!(a.action_type.as_str());
            if let Some(tool) = &a.tool {
                item["tool"] = json!(tool);
                let def = stage.definition(tool);
                if let Some(r) = def.risk {
                    item["risk"] = serde_json::to_value(r).unwrap_or(Value::Null);
                }
                item["kind"] = json!(def.kind.as_str());
                if d.verdict == crate::permission::Verdict::Ask
                    && let Some(input) = &input
                {
                    let digest = input_digest(input)?;
                    item["approval_key"] = json!(crate::gate::approval_key(tool, &digest));
                    asks.insert(a.id.clone(), (tool.clone(), digest));
                }
                if let Some(root) = &root
                    && self.rt.tool(tool).is_some_and(|t| t.source == ToolSource::Builtin)
                    && let Ok(Some(diff)) = crate::tools::preview(root, tool, &a.parameters.to_map())
                {
                    item["preview"] = json!({"kind": "diff", "diff": diff});
                }
            }
            // A `tool` compensation passes admission when it runs: its own verdict.
            if let Some(crate::ir::Compensation::Tool { tool, parameters }) = a.compensation.as_deref() {
                let mut c = crate::ir::Action::tool_call(tool.clone());
                c.id = compensation_handle(&a.id);
                c.parameters = parameters.into();
                let one = crate::ir::ActionProposal { actions: vec![c], ..empty.clone() };
                if let Some((d, input)) = self.rt.plan(&one, session_id, tenant)?.pop() {
                    let mut comp = serde_json::to_value(&d).unwrap_or_else(|_| json!({}));
                    comp["tool"] = json!(tool);
                    if d.verdict == crate::permission::Verdict::Ask
                        && let Some(input) = &input
                    {
                        let digest = input_digest(input)?;
                        comp["approval_key"] = json!(crate::gate::approval_key(tool, &digest));
                        // Decided like an item, by the handle `ID#compensation`.
                        let handle = compensation_handle(&a.id);
                        if proposal.actions.iter().any(|x| x.id == handle) {
                            return Err(Error::invalid_argument(
                                "actions",
                                format!(
                                    "action id `{handle}` is the handle of the compensation of `{}`; rename it",
                                    a.id
                                ),
                            ));
                        }
                        comp["decide_as"] = json!(handle);
                        asks.insert(handle, (tool.clone(), digest));
                    }
                    item["compensation"] = comp;
                }
            }
            items.push(item);
        }
        Ok((items, asks, counts))
    }

    /// Decides one `ask` item of a plan (`action_id`; an action's `tool`
    /// compensation that asks is decided as `ID#compensation`, the item's
    /// `compensation.decide_as`): `decision` is `allow` or `deny`
    /// (anything else is a deny), `scope` is `once` (this action of this
    /// plan), `session` (every later call of the same tool in the plan's
    /// session, whatever its input, as `plan-apply-gate.md` scopes it: an
    /// allow answers that tool's asks, a deny refuses every call the chain
    /// would not deny itself) or `always` (a rule in the approvals
    /// directory, `approval::rules`, that answers the tool's asks in every
    /// runtime reading that directory; refused with
    /// `always_scope_unavailable` without an approvals store). The
    /// decision resolves the item's approval in the approvals store, so the
    /// admission stage applies it when the plan runs; it never lifts a deny.
    /// JSON text `{plan_id, action_id, approval_key, decision, scope}`.
    pub fn proposal_decide(
        &self,
        plan_id: &str,
        action_id: &str,
        decision: &str,
        scope: &str,
        reason: &str,
    ) -> Result<String> {
        let (tool, digest, session) = {
            let plans = lock(&self.plans);
            let plan = plans.get(plan_id).ok_or_else(|| {
                Error::not_found("plan_not_found", format!("no plan `{plan_id}` (applied or never built)"))
            })?;
            let (tool, digest) = plan.asks.get(action_id).cloned().ok_or_else(|| {
                Error::invalid_argument("action_id", format!("`{action_id}` is not an `ask` item of plan `{plan_id}`"))
            })?;
            (tool, digest, plan.session_id.clone())
        };
        let allow = decision == "allow";
        match scope {
            "once" => {}
            "session" => {
                // Every later call of this tool in this session (the same
                // operation, `plan-apply-gate.md`); an allow answers asks only.
                self.rt.admission_stage().session_state().remember(session.as_deref(), &tool, allow, reason);
            }
            "always" => {
                // A rule every runtime reading this approvals directory
                // applies (`approval::rules`); without a store there is
                // nowhere to keep it: refused, never downgraded.
                let store = self.rt.admission_stage().approvals().cloned().ok_or_else(|| {
                    Error::runtime(
                        "always_scope_unavailable",
                        "an `always` decision needs the approvals store (set_permissions with an `approvals_dir`); decide with `once` or `session`",
                    )
                })?;
                let path = crate::approval::rules::rules_path_of(store.path());
                crate::approval::rules::persist_always(&path, &tool, allow, "the host", reason)?;
            }
            other => {
                return Err(Error::invalid_argument(
                    "scope",
                    format!("`{other}` is not `once`, `session` or `always`"),
                ));
            }
        }
        self.pre_resolve(&tool, &digest, allow, reason)?;
        Ok(to_text(&json!({
            "plan_id": plan_id, "action_id": action_id,
            "approval_key": crate::gate::approval_key(&tool, &digest),
            "decision": if allow { "allow" } else { "deny" }, "scope": scope,
        })))
    }

    /// Records an answer for `(tool, digest)` in the approvals store, for the
    /// stage's `approval` layer to apply.
    fn pre_resolve(&self, tool: &str, digest: &str, allow: bool, reason: &str) -> Result<()> {
        let store = self.rt.admission_stage().approvals().cloned().ok_or_else(|| {
            Error::runtime(
                "approvals_not_configured",
                "no approvals store: call set_permissions with an `approvals_dir` first",
            )
        })?;
        let key = crate::gate::approval_key(tool, digest);
        match store.request(tool, digest, None) {
            Ok(crate::gate::Ticket::Resolved(_)) => {
                // An earlier answer was just used up by this request: record again.
                let _ = store.request(tool, digest, None);
            }
            Ok(crate::gate::Ticket::Pending(_)) => {}
            Err(e) if e.code() == "approval_required" => {}
            Err(e) => return Err(e),
        }
        let decision = if allow { crate::gate::ApprovalDecision::Allow } else { crate::gate::ApprovalDecision::Deny };
        store.resolve(&key, decision, reason)?;
        Ok(())
    }

    /// Runs a plan built by [`CarRuntime::proposal_plan`] with the host's
    /// executor, after its decisions: the ProposalResult as JSON text. The
    /// plan is used up. Admission decides again as the proposal runs (the
    /// state may have changed since the plan); an `ask` nobody decided is
    /// refused unless an approver answers it.
    pub async fn proposal_apply(&self, plan_id: &str, executor: Arc<dyn ToolExecutor>) -> Result<String> {
        let (proposal, session, scope) = self.proposal_take(plan_id)?;
        let result = self.execute_parsed(proposal, executor, session.as_deref(), scope.as_deref()).await?;
        Ok(result.into_json_string())
    }

    /// Takes a plan out for a host that runs it itself (the daemon, which
    /// admits a submission before executing it): its proposal, session id
    /// and scope. The plan is used up.
    pub fn proposal_take(&self, plan_id: &str) -> Result<(crate::ir::ActionProposal, Option<String>, Option<String>)> {
        let plan = lock(&self.plans).remove(plan_id).ok_or_else(|| {
            Error::not_found("plan_not_found", format!("no plan `{plan_id}` (applied or never built)"))
        })?;
        Ok((plan.proposal, plan.session_id, plan.scope_json))
    }

    /// Registers host closures in the chain: `hooks` run after the
    /// document's declarative hooks, `can_use_tool` fills its slot. A
    /// panicking closure denies. Replaces earlier host closures; the
    /// document in force is rebuilt with them.
    pub fn set_permission_hooks(&self, hooks: Vec<HookFn>, can_use_tool: Option<CanUseToolFn>) -> Result<()> {
        self.update_host(|h| {
            h.hooks = hooks;
            h.can_use_tool = can_use_tool;
        })
    }

    /// Attaches (or, with `None`, detaches) the supervisor of whole
    /// proposals: the stage's `supervision` layer (the daemon's supervisors).
    pub fn set_supervisor(&self, supervisor: Option<crate::admission::SupervisorFn>) -> Result<()> {
        self.update_host(|h| h.supervisor = supervisor)
    }

    /// Tier approvals recorded by `reviewer` stop counting for this
    /// runtime's proposals (a daemon connection may not approve its own
    /// escalation); `None` counts every approval.
    pub fn set_discounted_reviewer(&self, reviewer: Option<String>) -> Result<()> {
        self.update_host(|h| h.discounted_reviewer = reviewer)
    }

    /// The supervisor and the discounted reviewer
    /// ([`CarRuntime::set_supervisor`], [`CarRuntime::set_discounted_reviewer`])
    /// in one rebuild of the stage: a daemon connection's identity.
    #[cfg(any(feature = "server", test))] // the daemon's connections
    pub(crate) fn set_admission_identity(
        &self,
        supervisor: Option<crate::admission::SupervisorFn>,
        reviewer: Option<String>,
    ) -> Result<()> {
        self.update_host(|h| {
            h.supervisor = supervisor;
            h.discounted_reviewer = reviewer;
        })
    }

    /// Configures a host's session in one build of the admission stage:
    /// what [`CarRuntime::permission_set_tier`], [`CarRuntime::set_tier_ledger`],
    /// [`CarRuntime::configure_admission`], the approvals store or shared
    /// backend and the identity would each rebuild it for. The document's
    /// own `tier` wins over `tier`, as it does over an earlier
    /// `permission_set_tier`. On error nothing changes.
    #[cfg(any(feature = "server", test))] // the daemon's connections
    pub(crate) fn configure_session(&self, setup: SessionSetup) -> Result<()> {
        let SessionSetup {
            tier,
            tier_ledger,
            document,
            approvals_store,
            shared_approvals,
            supervisor,
            discounted_reviewer,
        } = setup;
        let mut config = document.unwrap_or_else(|| self.rt.admission_stage().config().clone());
        config.tier = config.tier.or(Some(tier));
        self.update_host_installing(
            |h| {
                h.tier_ledger = tier_ledger;
                h.shared_approvals = shared_approvals;
                h.supervisor = supervisor;
                h.discounted_reviewer = discounted_reviewer;
            },
            Some(approvals_store),
            config,
        )
    }

    /// Changes the host parts of admission and rebuilds the stage with the
    /// document in force; on error the previous parts stay.
    fn update_host(&self, change: impl FnOnce(&mut HostLayers)) -> Result<()> {
        let current = self.rt.admission_stage().config().clone();
        self.update_host_installing(change, None, current)
    }

    /// Changes the host parts of admission (its layers, and the host's
    /// approvals store when `store` is given) and installs the stage of
    /// `config` with them; on error the previous parts stay.
    fn update_host_installing(
        &self,
        change: impl FnOnce(&mut HostLayers),
        store: Option<Option<Arc<ApprovalStore>>>,
        config: AdmissionConfig,
    ) -> Result<()> {
        let previous = {
            let mut h = self.host_layers.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            let previous = h.clone();
            change(&mut h);
            previous
        };
        let previous_store = store.map(|s| std::mem::replace(&mut lock(&self.approvals).shared, s));
        match self.install_admission(config) {
            Ok(()) => Ok(()),
            Err(e) => {
                *self.host_layers.write().unwrap_or_else(std::sync::PoisonError::into_inner) = previous;
                if let Some(s) = previous_store {
                    lock(&self.approvals).shared = s;
                }
                Err(e)
            }
        }
    }

    /// The host directory worktree isolation takes its repository from
    /// when no built-in root is registered (`car run --root`); `None`: the
    /// current directory.
    pub fn set_working_dir(&self, dir: Option<&Path>) {
        *self.work_dir.write().unwrap_or_else(std::sync::PoisonError::into_inner) = dir.map(Path::to_path_buf);
    }

    /// Gives this runtime the host's approvals store (the daemon's one
    /// store, shared by its sessions): used whenever the admission document
    /// names no `approvals_dir`. The stage in force is rebuilt with it; when
    /// the rebuild fails, the previous store stays.
    pub fn set_approvals_store(&self, store: Option<Arc<ApprovalStore>>) -> Result<()> {
        let current = self.rt.admission_stage().config().clone();
        self.update_host_installing(|_| {}, Some(store), current)
    }

    /// Gives this runtime a shared approvals backend (a daemon's
    /// `--store postgres://...`): whenever the admission document names no
    /// `approvals_dir`, the `approval` layer asks and waits through it, so
    /// an approval granted on any host of the store applies here. `None`
    /// detaches it. The stage in force is rebuilt with it.
    pub fn set_shared_approvals(&self, shared: Option<crate::admission::SharedApprovals>) -> Result<()> {
        self.update_host(|h| h.shared_approvals = shared)
    }

    fn approvals_store(&self) -> Result<Arc<ApprovalStore>> {
        self.approvals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).store.clone().ok_or_else(|| {
            Error::runtime(
                "approvals_not_configured",
                "no approvals store: call set_permissions with an `approvals_dir` first",
            )
        })
    }

    /// Attaches an approver: `callback` is notified of every approval event
    /// of this runtime's approvals store (`pending` when an action waits for
    /// it, `resolved` when it closes), on the thread that caused it and
    /// outside every lock, so it may call [`CarRuntime::approval_resolve`]
    /// (or hand the key to another thread that does). While at least one
    /// approver is attached, an `ask` holds its action until the approval
    /// closes instead of rejecting it. Approvers attached before
    /// `set_permissions` (or before its `approvals_dir` changes) move to the
    /// store it opens. Returns an id for [`CarRuntime::remove_approval_callback`].
    pub fn on_approval(&self, callback: ApprovalCallback) -> u64 {
        let mut a = self.approvals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        a.next_id += 1;
        let id = a.next_id;
        let reg = a.store.as_ref().map(|s| s.on_event(callback.clone()));
        a.approvers.push((id, callback, reg));
        id
    }

    /// [`CarRuntime::on_approval`] with the event as JSON text:
    /// `{"event": "pending", key, tool, input_digest, requested_at, deadline?}`
    /// or `{"event": "resolved", key, decision, reason, by, at}`. The
    /// callback the bindings attach.
    pub fn on_approval_json(&self, callback: Arc<dyn Fn(String) + Send + Sync>) -> u64 {
        self.on_approval(Arc::new(move |ev: &ApprovalEvent| {
            callback(to_text(&serde_json::to_value(ev).unwrap_or(Value::Null)))
        }))
    }

    /// Detaches an approver; false when the id is unknown.
    pub fn remove_approval_callback(&self, id: u64) -> bool {
        let mut a = self.approvals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(pos) = a.approvers.iter().position(|(i, _, _)| *i == id) else {
            return false;
        };
        let (_, _, reg) = a.approvers.remove(pos);
        if let (Some(store), Some(reg)) = (&a.store, reg) {
            store.remove_callback(reg);
        }
        true
    }

    /// A subscription to the approval events of the current approvals store
    /// (the daemon-style alternative to a callback); a live receiver counts
    /// as an attached approver. Fails with `approvals_not_configured` before
    /// `set_permissions` gave an `approvals_dir`.
    pub fn approvals_subscribe(&self) -> Result<tokio::sync::broadcast::Receiver<ApprovalEvent>> {
        Ok(self.approvals_store()?.subscribe())
    }

    /// The pending approvals of this runtime's approvals store, oldest first,
    /// as JSON text `{pending: [{key, tool, input_digest, requested_at,
    /// deadline?}]}` (overdue ones are denied first).
    pub fn approvals_pending(&self) -> Result<String> {
        Ok(crate::api::gate::store_pending_value(&*self.approvals_store()?)?.to_string())
    }

    /// Resolves an approval of this runtime's approvals store: `decision` is
    /// `allow`, `deny` or a JSON resolution value, and anything but an
    /// explicit allow is a deny. A waiting action learns the outcome at
    /// once. Returns the resolution in force as JSON text, with `applied`
    /// false when something (an earlier resolution, the deadline) closed the
    /// approval first. An unknown key is `approval_not_found`.
    pub fn approval_resolve(&self, key: &str, decision: &str, reason: &str) -> Result<String> {
        let store = self.approvals_store()?;
        let v =
            crate::api::gate::store_resolve_value(&store, key, &crate::api::gate::decision_value(decision), reason)?;
        Ok(v.to_string())
    }

    /// The granted permission tier (`sandbox_edit` by default).
    pub fn permission_get_tier(&self) -> String {
        self.rt.admission_stage().tier().unwrap_or_default().as_str().to_string()
    }

    /// Sets the granted tier and turns the tier layer on: from this
    /// runtime's next proposal, an action above the tier (and every
    /// `full_access` action) refuses the proposal unless the approvals
    /// ledger approves it, as the daemon does. Returns the tier. Unknown
    /// tiers are an error.
    pub fn permission_set_tier(&self, tier: &str) -> Result<String> {
        let t: PermissionTier = tier.parse()?;
        let _guard = self.configure.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let stage = self.rt.admission_stage().with_tier(Some(t));
        self.rt.set_admission_stage(Arc::new(stage));
        Ok(t.as_str().to_string())
    }

    /// Points the tier layer at an approvals ledger (the daemon's, shared)
    /// for every stage built from now on whose document names no
    /// `ledger_path`: it stays attached across reconfigurations, installed
    /// in the same step as each rebuilt stage.
    pub fn set_tier_ledger(&self, ledger: Option<crate::store::ledger::TierLedger>) -> Result<()> {
        self.update_host(|h| h.tier_ledger = ledger)
    }
}

/// What a host sets on a session's admission in one step
/// ([`CarRuntime::configure_session`]): a daemon connection's runtime.
#[cfg(any(feature = "server", test))] // the daemon's connections
pub(crate) struct SessionSetup {
    /// The granted tier, unless the document names one.
    pub tier: crate::policy::PermissionTier,
    /// The tier layer's approvals ledger (the daemon's, shared).
    pub tier_ledger: Option<crate::store::ledger::TierLedger>,
    /// The admission document; `None`: the one in force.
    pub document: Option<AdmissionConfig>,
    /// The approvals store used when the document names no `approvals_dir`.
    pub approvals_store: Option<Arc<ApprovalStore>>,
    /// A shared approvals backend (a daemon's `--store`).
    pub shared_approvals: Option<crate::admission::SharedApprovals>,
    /// The supervisor of whole proposals.
    pub supervisor: Option<crate::admission::SupervisorFn>,
    /// Tier approvals recorded by this reviewer do not count.
    pub discounted_reviewer: Option<String>,
}

/// The call a tool log entry belongs to ([`CarRuntime::tool_log_entry`]).
#[derive(Debug, Clone, Copy)]
pub struct ToolLogEntry<'a> {
    /// The call's `request_id`.
    pub request_id: &'a str,
    /// The tool called, when known.
    pub tool: Option<&'a str>,
    /// The action the call is for, when known.
    pub action_id: Option<&'a str>,
}

fn check_log_level(level: &str) -> Result<()> {
    if matches!(level, "debug" | "info" | "warn" | "error") {
        return Ok(());
    }
    Err(Error::invalid_argument("level", format!("`{level}` is not a level: use `debug`, `info`, `warn` or `error`")))
}

fn check_log_size(size: usize) -> Result<()> {
    if size <= TOOL_LOG_MAX_BYTES {
        return Ok(());
    }
    Err(Error::invalid_argument(
        "message",
        format!("a tool log entry of {size} bytes is over the {TOOL_LOG_MAX_BYTES}-byte limit"),
    ))
}

/// The length of a value's compact JSON text, counted without building it.
fn compact_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PermissionTier;

    fn setup(document: Option<AdmissionConfig>, store: &Arc<ApprovalStore>) -> SessionSetup {
        let supervisor: crate::admission::SupervisorFn = Arc::new(|_, _| Box::pin(std::future::ready(None)));
        SessionSetup {
            tier: PermissionTier::ReadOnly,
            tier_ledger: None,
            document,
            approvals_store: Some(store.clone()),
            shared_approvals: None,
            supervisor: Some(supervisor),
            discounted_reviewer: Some("r".into()),
        }
    }

    /// A session configured in one step: a document that cannot be built
    /// changes nothing (the stage, the host's layers, the approvals store);
    /// a good setup installs every part in one build, and the document's
    /// own tier wins over the host's.
    #[test]
    fn a_session_is_configured_in_one_build_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("car-session-setup-{}", uuid::Uuid::new_v4()));
        let store = Arc::new(ApprovalStore::open(&dir).unwrap());
        let rt = CarRuntime::new();
        let before = (rt.admission_config(), rt.runtime().admission_stage().tier());

        let bad = AdmissionConfig::from_json(r#"{"tools":[{"name":"x","parameters":{"type":"nonsense"}}]}"#).unwrap();
        let err = rt.configure_session(setup(Some(bad), &store)).unwrap_err();
        assert!(err.to_string().contains('x'), "{err}");
        let stage = rt.runtime().admission_stage();
        assert_eq!((rt.admission_config(), stage.tier()), before);
        assert!(stage.supervisor().is_none() && stage.discounted_reviewer().is_none() && stage.approvals().is_none());
        assert!(lock(&rt.approvals).shared.is_none());
        let host = rt.host_layers.read().unwrap().clone();
        assert!(host.supervisor.is_none() && host.discounted_reviewer.is_none());

        let n = crate::admission::builds_on_this_thread();
        rt.configure_session(setup(None, &store)).unwrap();
        assert_eq!(crate::admission::builds_on_this_thread() - n, 1);
        let stage = rt.runtime().admission_stage();
        assert_eq!(stage.tier(), Some(PermissionTier::ReadOnly));
        assert!(stage.supervisor().is_some() && stage.approvals().is_some());
        assert_eq!(stage.discounted_reviewer(), Some("r"));

        let doc = AdmissionConfig::from_json(r#"{"tier":"full_access"}"#).unwrap();
        rt.configure_session(setup(Some(doc), &store)).unwrap();
        assert_eq!(rt.runtime().admission_stage().tier(), Some(PermissionTier::FullAccess));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The host's approvals store given when the stage in force can no
    /// longer be rebuilt (its checkpoints directory became a file): the
    /// error names the cause and the previous store stays; once the stage
    /// builds again, the store is taken.
    #[test]
    fn an_approvals_store_that_cannot_be_installed_changes_nothing() {
        let base = std::env::temp_dir().join(format!("car-set-approvals-store-{}", uuid::Uuid::new_v4()));
        let (own, host) = (base.join("own"), base.join("host"));
        let rt = CarRuntime::new();
        let doc = serde_json::json!({"approvals_dir": own.display().to_string()}).to_string();
        rt.install_admission(AdmissionConfig::from_json(&doc).unwrap()).unwrap();
        let checkpoints = own.join("checkpoints");
        std::fs::remove_dir_all(&checkpoints).unwrap();
        std::fs::write(&checkpoints, "not a directory").unwrap();

        let store = Arc::new(ApprovalStore::open(&host).unwrap());
        for previous in [None, Some(Arc::new(ApprovalStore::open(base.join("previous")).unwrap()))] {
            lock(&rt.approvals).shared = previous.clone();
            let err = rt.set_approvals_store(Some(store.clone())).unwrap_err();
            assert!(err.to_string().contains("checkpoints"), "{err}");
            let kept = lock(&rt.approvals).shared.clone();
            assert_eq!(kept.map(|s| s.path().to_path_buf()), previous.map(|s| s.path().to_path_buf()));
        }

        std::fs::remove_file(&checkpoints).unwrap();
        rt.set_approvals_store(Some(store.clone())).unwrap();
        assert!(lock(&rt.approvals).shared.as_ref().is_some_and(|s| Arc::ptr_eq(s, &store)));
        let _ = std::fs::remove_dir_all(&base);
    }
}
