//! `CarRuntime` for Python: one in-process runtime, every method forwarding
//! to `car_runtime::api::runtime::CarRuntime`. Every call is synchronous; the
//! GIL is released while Rust works; tool callbacks run on the calling Python
//! thread between polls of the engine (see `CallPump`), never inside the async
//! runtime, so a tool may call back into the same `CarRuntime`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use car_runtime::api::callback::{CallPump, PumpedCall, call_json, parse_tool_output};
use car_runtime::api::permission::{can_use_decision_from_json, hook_decision_from_json};
use car_runtime::api::runtime::CarRuntime as Core;
use car_runtime::engine::{CancelToken, ChunkStream, ToolCall, ToolExecutor};
use car_runtime::ir::{ToolFailure, ToolStreamChunk};
use car_runtime::permission::{CanUseToolFn, HookFn};
use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCFunction;
use pyo3::types::PyString;
use serde_json::Value;

use crate::{json_text, model_retry_error, terminal_tool_error, to_py_err};

/// The tokio runtime every `CarRuntime` of the process shares.
pub(crate) fn tokio_rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("car-runtime")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot start the tokio runtime: {e}"))
    })
}

/// The handler `submit_proposal` uses (`register_tool_handler`).
static HANDLER: Mutex<Option<Py<PyAny>>> = Mutex::new(None);

/// What a run's callbacks share: the tool function, its arity, and whether
/// the run was interrupted (every later call then fails terminally unrun).
struct ToolFn {
    f: Py<PyAny>,
    two_args: bool,
    interrupted: AtomicBool,
    /// The exception a signal handler raised while the thread waited.
    signal: Mutex<Option<PyErr>>,
    /// The event loop of an `*_async` call (`car_runtime._aio`): an
    /// awaitable a tool returns is awaited there.
    caller_loop: Option<Py<PyAny>>,
}

/// `car_runtime._aio.<name>`.
fn aio(py: Python<'_>, cell: &'static PyOnceLock<Py<PyAny>>, name: &str) -> PyResult<Py<PyAny>> {
    cell.get_or_try_init(py, || py.import("car_runtime._aio")?.getattr(name).map(Bound::unbind))
        .map(|f| f.clone_ref(py))
}

/// True for the answers a tool gives most (text, None, containers, numbers),
/// which are never awaitable: no `inspect.isawaitable` call for them.
fn plainly_not_awaitable(obj: &Bound<'_, PyAny>) -> bool {
    use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList};
    obj.is_none()
        || obj.is_exact_instance_of::<PyString>()
        || obj.is_exact_instance_of::<PyDict>()
        || obj.is_exact_instance_of::<PyList>()
        || obj.is_exact_instance_of::<PyInt>()
        || obj.is_exact_instance_of::<PyFloat>()
        || obj.is_exact_instance_of::<PyBool>()
}

const INTERRUPTED: &str = "interrupted (KeyboardInterrupt)";

impl ToolFn {
    /// Answers one queued call with the GIL held.
    fn serve(&self, py: Python<'_>, pumped: PumpedCall) {
        pumped.serve(|call| {
            if self.interrupted.load(Ordering::SeqCst) {
                return Err(ToolFailure::terminal(INTERRUPTED));
            }
            self.call(py, call)
        });
    }

    /// Calls the Python tool function: one argument (the call JSON, with
    /// `"detached": true` for a detached call) or two (`tool`,
    /// `params_json`). Its answer as returned.
    fn raw_call(&self, py: Python<'_>, call: &ToolCall, detached: bool) -> PyResult<Py<PyAny>> {
        if self.two_args {
            self.f.call1(py, (call.tool.as_str(), call.params.to_string()))
        } else {
            let mut text = call_json(call);
            if detached {
                text.pop();
                text.push_str(",\"detached\":true}");
            }
            self.f.call1(py, (text,))
        }
    }

    /// The caller's event loop (`None` outside an `*_async` call).
    fn caller_loop(&self, py: Python<'_>) -> Py<PyAny> {
        self.caller_loop.as_ref().map_or_else(|| py.None(), |l| l.clone_ref(py))
    }

    /// Runs one call.
    fn call(&self, py: Python<'_>, call: &ToolCall) -> Result<Value, ToolFailure> {
        let res = self.raw_call(py, call, false);
        // An `async def` tool (any awaitable answer) is awaited: on the
        // caller's loop under an `*_async` call, else on a loop of its own.
        let res = res.and_then(|obj| {
            if plainly_not_awaitable(obj.bind(py)) {
                return Ok(obj);
            }
            static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
            aio(py, &RESOLVE, "resolve")?.call1(py, (obj, self.caller_loop(py)))
        });
        let obj = res.map_err(|e| self.failure(py, e))?;
        let obj = obj.bind(py);
        if obj.is_none() {
            return Ok(Value::Null);
        }
        if let Ok(s) = obj.cast::<PyString>() {
            return s
                .to_cow()
                .map(|t| parse_tool_output(&t))
                .map_err(|e| ToolFailure::ordinary(format!("tool result is not valid text: {e}")));
        }
        json_text(py, obj)
            .map(|t| parse_tool_output(&t))
            .map_err(|e| ToolFailure::ordinary(format!("tool result is not JSON-serialisable: {e}")))
    }

    /// The failure a tool's exception is.
    fn failure(&self, py: Python<'_>, e: PyErr) -> ToolFailure {
        match e {
            e if e.is_instance_of::<PyKeyboardInterrupt>(py) => {
                self.interrupted.store(true, Ordering::SeqCst);
                ToolFailure::terminal(INTERRUPTED)
            }
            e if terminal_tool_error(py).is_ok_and(|t| e.value(py).is_instance(&t).unwrap_or(false)) => {
                ToolFailure::terminal(e.value(py).to_string())
            }
            e if model_retry_error(py).is_ok_and(|t| e.value(py).is_instance(&t).unwrap_or(false)) => {
                ToolFailure::model_retry(e.value(py).to_string())
            }
            e => {
                let name = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "Exception".into());
                ToolFailure::ordinary(format!("{name}: {}", e.value(py)))
            }
        }
    }

    /// A detached call, on a thread of its own: calls the tool function
    /// (its exception fails the start), reports the start, then reads what
    /// it returned into `chunks` (`car_runtime._stream.run_stream`).
    fn stream(
        &self,
        py: Python<'_>,
        call: &ToolCall,
        cancel: CancelToken,
        chunks: tokio::sync::mpsc::Sender<ToolStreamChunk>,
        started: tokio::sync::oneshot::Sender<Result<(), ToolFailure>>,
    ) {
        let obj = match self.raw_call(py, call, true) {
            Ok(obj) => obj,
            Err(e) => {
                let _ = started.send(Err(self.failure(py, e)));
                return;
            }
        };
        static RUN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let run =
            RUN.get_or_try_init(py, || py.import("car_runtime._stream")?.getattr("run_stream").map(Bound::unbind));
        let run = match run {
            Ok(r) => r.clone_ref(py),
            Err(e) => {
                let _ = started.send(Err(ToolFailure::ordinary(format!("car_runtime._stream: {e}"))));
                return;
            }
        };
        let _ = started.send(Ok(()));
        let sink = chunks.clone();
        let push = PyCFunction::new_closure(py, None, None, move |args, _kwargs| -> PyResult<bool> {
            let py = args.py();
            let text = json_text(py, &args.get_item(0)?)?;
            let chunk: ToolStreamChunk = serde_json::from_str(&text).map_err(|e| {
                PyValueError::new_err(format!(
                    "not a stream chunk: {text} ({e}; a chunk is {{\"kind\": \"text\", \"text\"}}, data, progress, done or error)"
                ))
            })?;
            Ok(py.detach(|| sink.blocking_send(chunk).is_ok()))
        });
        let cancelled = PyCFunction::new_closure(py, None, None, move |_args, _kwargs| -> PyResult<bool> {
            Ok(cancel.is_cancelled())
        });
        let outcome = match (push, cancelled) {
            (Ok(push), Ok(cancelled)) => run.call1(py, (obj, self.caller_loop(py), push, cancelled)).map(|_| ()),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        if let Err(e) = outcome {
            let name = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "Exception".into());
            let chunk = ToolStreamChunk::Error { message: format!("{name}: {}", e.value(py)) };
            py.detach(|| chunks.blocking_send(chunk).ok());
        }
    }
}

/// The executor of a run with a Python tool function: one-shot calls go to
/// the pump (the calling thread), detached ones to a thread each.
struct PyExecutor {
    pump: Arc<dyn ToolExecutor>,
    tool: Arc<ToolFn>,
}

/// Chunks a detached Python tool holds before its `yield` waits.
const STREAM_BUFFER: usize = 64;

/// Detached Python tools running at once in this process when
/// `CAR_MAX_DETACHED_TOOLS` does not say otherwise. Each holds an OS thread
/// for as long as it streams, and a proposal chooses how many it starts.
pub(crate) const DEFAULT_MAX_DETACHED: usize = 256;

/// The cap: `CAR_MAX_DETACHED_TOOLS` (a positive integer) read once, else
/// [`DEFAULT_MAX_DETACHED`].
fn detached_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| match std::env::var("CAR_MAX_DETACHED_TOOLS").ok().map(|v| v.trim().parse::<usize>()) {
        None => DEFAULT_MAX_DETACHED,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => {
            eprintln!("car-runtime: CAR_MAX_DETACHED_TOOLS is not a positive integer; using {DEFAULT_MAX_DETACHED}");
            DEFAULT_MAX_DETACHED
        }
    })
}

/// Detached Python tools whose thread is running.
static DETACHED_RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One running detached tool's place under the cap, given back when its
/// thread ends.
struct DetachedSlot;

impl DetachedSlot {
    /// A place, or `None` when `limit` tools are running.
    fn take(limit: usize) -> Option<DetachedSlot> {
        DETACHED_RUNNING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1))
            .ok()
            .map(|_| DetachedSlot)
    }
}

impl Drop for DetachedSlot {
    fn drop(&mut self) {
        DETACHED_RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}

#[async_trait::async_trait]
impl ToolExecutor for PyExecutor {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        self.pump.execute(call).await
    }

    async fn execute_stream(&self, call: ToolCall, cancel: CancelToken) -> Result<ChunkStream, ToolFailure> {
        use futures::StreamExt;
        let (tx, rx) = tokio::sync::mpsc::channel(STREAM_BUFFER);
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let tool = self.tool.clone();
        let name = call.tool.clone();
        let limit = detached_limit();
        let slot = DetachedSlot::take(limit).ok_or_else(|| {
            ToolFailure::ordinary(format!(
                "tool '{name}': {limit} detached Python tools are already running, the most at once \
                 (CAR_MAX_DETACHED_TOOLS); this one was not started: try again when one has ended"
            ))
        })?;
        std::thread::Builder::new()
            .name(format!("car-stream-{name}"))
            .spawn(move || {
                let _slot = slot;
                Python::attach(|py| tool.stream(py, &call, cancel, tx, started_tx))
            })
            .map_err(|e| ToolFailure::ordinary(format!("tool '{name}': cannot start its thread: {e}")))?;
        match started_rx.await {
            Ok(Ok(())) => {
                Ok(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) }).boxed())
            }
            Ok(Err(f)) => Err(f),
            Err(_) => Err(ToolFailure::ordinary(format!("tool '{name}': its thread ended before it started"))),
        }
    }
}

/// True when the tool function takes two positional arguments (`tool`,
/// `params_json`), by `inspect.signature`; for a plain function (no
/// `__wrapped__` or `__signature__` to follow) read straight from its code
/// object, with the same answer at a fraction of the cost.
fn takes_two_args(py: Python<'_>, f: &Py<PyAny>) -> PyResult<bool> {
    static FUNCTION_TYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let function_type =
        FUNCTION_TYPE.get_or_try_init(py, || py.import("types")?.getattr("FunctionType").map(Bound::unbind))?;
    let f_bound = f.bind(py);
    // A function's own attributes live in its `__dict__` (a lookup there is
    // far cheaper than a failing `hasattr`).
    let plain = f_bound.get_type().is(function_type.bind(py)) && {
        let attrs = f_bound.getattr("__dict__")?;
        !attrs.contains("__wrapped__")? && !attrs.contains("__signature__")?
    };
    if plain {
        const CO_VARARGS: u32 = 0x04;
        let code = f_bound.getattr("__code__")?;
        let flags: u32 = code.getattr("co_flags")?.extract()?;
        if flags & CO_VARARGS != 0 {
            return Ok(false);
        }
        let positional: usize = code.getattr("co_argcount")?.extract()?;
        let defaults = f_bound.getattr("__defaults__")?;
        let with_default = if defaults.is_none() { 0 } else { defaults.len()? };
        return Ok(positional.saturating_sub(with_default) >= 2);
    }
    let inspect = py.import("inspect")?;
    let sig = match inspect.call_method1("signature", (f.bind(py),)) {
        Ok(s) => s,
        Err(_) => return Ok(false),
    };
    let params = sig.getattr("parameters")?;
    let mut positional = 0;
    for p in params.call_method0("values")?.try_iter()? {
        let p = p?;
        let kind: String = p.getattr("kind")?.getattr("name")?.extract()?;
        let has_default = !p.getattr("default")?.is(&inspect.getattr("Parameter")?.getattr("empty")?);
        match kind.as_str() {
            "VAR_POSITIONAL" => return Ok(false),
            "POSITIONAL_ONLY" | "POSITIONAL_OR_KEYWORD" if !has_default => positional += 1,
            _ => {}
        }
    }
    Ok(positional >= 2)
}

/// How often a thread waiting for its run looks for signals (Ctrl-C).
const SIGNAL_TICK: Duration = Duration::from_millis(20);

/// The watchdog period: once the thread has sat in one callback for two
/// periods, the calls waiting behind it move to blocking-pool threads (so
/// slow tools still overlap and tools that wait on each other finish).
const SPILL_AFTER: Duration = Duration::from_millis(5);

/// Runs a proposal with a Python tool function. The engine runs on this
/// thread with the GIL released; the tool calls it queues are answered here
/// in batches, one GIL acquisition per batch, outside any async context. A
/// signal while waiting (Ctrl-C) or a `KeyboardInterrupt` from a tool makes
/// every later call fail terminally, so the proposal aborts and rolls back;
/// then the interrupt is raised.
/// What [`run_with`] runs with the Python tool function.
enum Run {
    /// A proposal: `(proposal_json, session_id, scope_json)`.
    Proposal(String, Option<String>, Option<String>),
    /// A suspended proposal, by id.
    Resume(String),
}

fn run_with(py: Python<'_>, core: &Core, run: Run, tool_fn: Py<PyAny>) -> PyResult<String> {
    let two_args = takes_two_args(py, &tool_fn)?;
    static CALLER_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let caller_loop = aio(py, &CALLER_LOOP, "caller_loop")?.call0(py)?;
    let caller_loop = if caller_loop.is_none(py) { None } else { Some(caller_loop) };
    let tool = Arc::new(ToolFn {
        f: tool_fn,
        two_args,
        interrupted: AtomicBool::new(false),
        signal: Mutex::new(None),
        caller_loop,
    });
    let spilled = tool.clone();
    let pump =
        CallPump::with_spill(Arc::new(move |c: PumpedCall| Python::attach(|py| spilled.serve(py, c))), SPILL_AFTER);
    let exec: Arc<dyn ToolExecutor> = Arc::new(PyExecutor { pump: pump.executor(), tool: tool.clone() });
    let out = py.detach(|| {
        let fut: std::pin::Pin<Box<dyn std::future::Future<Output = car_runtime::Result<String>> + '_>> = match &run {
            Run::Proposal(text, session, scope) => {
                Box::pin(core.execute_proposal(text, exec, session.as_deref(), scope.as_deref()))
            }
            Run::Resume(id) => Box::pin(core.resume_proposal(id, exec)),
        };
        pump.drive(
            tokio_rt().handle(),
            fut,
            SIGNAL_TICK,
            |pump| {
                Python::attach(|py| {
                    while let Some(c) = pump.pop() {
                        tool.serve(py, c);
                    }
                })
            },
            |_| {
                if tool.interrupted.load(Ordering::SeqCst) {
                    return;
                }
                Python::attach(|py| {
                    if let Err(e) = py.check_signals() {
                        tool.interrupted.store(true, Ordering::SeqCst);
                        *tool.signal.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                    }
                })
            },
        )
    });
    if let Some(e) = tool.signal.lock().unwrap_or_else(PoisonError::into_inner).take() {
        return Err(e);
    }
    if tool.interrupted.load(Ordering::SeqCst) {
        return Err(PyKeyboardInterrupt::new_err("tool interrupted; the proposal was aborted and rolled back"));
    }
    out.map_err(|e| to_py_err(py, e))
}

/// Calls a Python hook (or `can_use_tool`) with `(tool_name, input_dict)`
/// and renders its answer as JSON (`None` becomes null, a string stays a
/// string, anything else goes through `json.dumps`); `None` when it raised
/// or the answer is not JSON, which the caller turns into a deny.
fn hook_answer(f: &Py<PyAny>, tool: &str, input: &Value) -> Option<Value> {
    static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Python::attach(|py| -> PyResult<Value> {
        // An awaitable answer runs to completion with `asyncio.run`, or on a
        // private loop when a loop runs on this thread (`car_runtime._aio`).
        let resolve = aio(py, &RESOLVE, "resolve")?;
        let loads = LOADS.get_or_try_init(py, || py.import("json")?.getattr("loads").map(Bound::unbind))?;
        let arg = loads.call1(py, (input.to_string(),))?;
        let r = f.call1(py, (tool, arg))?;
        let r = resolve.call1(py, (r, py.None()))?;
        let r = r.bind(py);
        if r.is_none() {
            return Ok(Value::Null);
        }
        if let Ok(s) = r.cast::<PyString>() {
            return Ok(Value::String(s.to_cow()?.into_owned()));
        }
        let text = json_text(py, r)?;
        serde_json::from_str(&text).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
    })
    .ok()
}

fn opt_text(py: Python<'_>, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    v.map(|o| json_text(py, o)).transpose()
}

/// One in-process runtime: its own state, tools, policies and event log.
/// Subclassed in `car_runtime/__init__.py` (the `*_obj` and `*_async` methods).
#[pyclass(subclass, name = "NativeCarRuntime", module = "car_runtime._native")]
pub struct PyCarRuntime {
    core: Core,
}

#[pymethods]
impl PyCarRuntime {
    #[new]
    fn new() -> Self {
        PyCarRuntime { core: Core::new() }
    }

    /// Registers the published built-in tools (`read_file`, `write_file`,
    /// `edit_file`, `list_dir`, `find_files`, `grep_files`, `calculate`), run
    /// in-process and confined to `root` (default: the current directory).
    /// `shell` is not among them: a host tool named `shell` provides it.
    #[pyo3(signature = (root=None))]
    fn register_agent_basics(&self, py: Python<'_>, root: Option<String>) -> PyResult<()> {
        self.core.register_agent_basics(root.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// The built-in tools and `shell`, which runs in `root` under the
    /// sandbox the admission document's `sandbox` section gives it
    /// (`workspace-write` by default: no network, writes only under the
    /// root, a scrubbed environment; `docs/sandbox.md`). Every call passes
    /// the admission stage first.
    #[pyo3(signature = (root=None))]
    fn register_shell_tool(&self, py: Python<'_>, root: Option<String>) -> PyResult<()> {
        self.core.register_shell_tool(root.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// Registers the first-party fetch tool `http_fetch` (risk `network`).
    /// Its calls pass the admission stage like every call; then the tool
    /// checks the host and every address it resolves to against the domain
    /// rules and `inspectors.egress_allowlist` before connecting, and each
    /// redirect the same way; loopback, private, link-local and metadata
    /// addresses are refused unless an address or network entry of the
    /// allowlist covers them (`docs/fetch.md`).
    fn register_fetch_tool(&self, py: Python<'_>) -> PyResult<()> {
        self.core.register_fetch_tool().map_err(|e| to_py_err(py, e))
    }

    /// Configures the admission stage from the admission configuration
    /// document (JSON text or dict; the core's `AdmissionConfig`): tier, ledger,
    /// permission chain, `[shell]` table, inspectors, budget, retries. None
    /// removes every layer but the tier. Asks go through the durable
    /// approvals store under `approvals_dir` (or the document's). A malformed
    /// document raises naming the bad key and changes nothing.
    #[pyo3(signature = (config_json=None, approvals_dir=None))]
    fn set_permissions(
        &self,
        py: Python<'_>,
        config_json: Option<&Bound<'_, PyAny>>,
        approvals_dir: Option<String>,
    ) -> PyResult<()> {
        let config = opt_text(py, config_json)?;
        self.core.set_permissions(config.as_deref(), approvals_dir.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// Registers host hooks in the permission chain (after the document's
    /// declarative hooks) and `can_use_tool` (its slot), replacing earlier
    /// ones. Each is called as `f(tool_name, input_dict)` during admission
    /// and answers None (pass), `"allow"`, `"deny"`, `"ask"` (hooks only) or
    /// `{"modified_input": {...}}` (the input later layers check and the tool
    /// receives). `async def` functions work: the coroutine runs to
    /// completion on a private event loop. An exception, or any other
    /// answer, denies. Calls run with the GIL taken on the engine's thread.
    #[pyo3(signature = (hooks=None, can_use_tool=None))]
    fn set_permission_hooks(
        &self,
        py: Python<'_>,
        hooks: Option<Vec<Py<PyAny>>>,
        can_use_tool: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let hooks: Vec<HookFn> = hooks
            .unwrap_or_default()
            .into_iter()
            .map(|f| -> HookFn {
                Arc::new(move |tool: &str, input: &Value| {
                    hook_answer(&f, tool, input)
                        .map_or(car_runtime::permission::HookDecision::Deny, |v| hook_decision_from_json(&v))
                })
            })
            .collect();
        let can_use_tool = can_use_tool.filter(|f| !f.is_none(py)).map(|f| -> CanUseToolFn {
            Arc::new(move |tool: &str, input: &Value| {
                hook_answer(&f, tool, input)
                    .map_or(car_runtime::permission::CanUseDecision::Deny, |v| can_use_decision_from_json(&v))
            })
        });
        let core = self.core.clone();
        py.detach(move || core.set_permission_hooks(hooks, can_use_tool)).map_err(|e| to_py_err(py, e))
    }

    /// Attaches an approver: `callback(event_json)` is called with every
    /// approval event (`{"event": "pending", "key", "tool", ...}` /
    /// `{"event": "resolved", ...}`) on a thread of its own, in order. While
    /// one is attached an `ask` waits for `approval_resolve` (or its
    /// deadline) instead of being rejected. Returns an id for
    /// `remove_approval_callback`. Exceptions it raises are reported as
    /// unraisable and change nothing.
    fn on_approval(&self, callback: Py<PyAny>) -> u64 {
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::Builder::new()
            .name("car-approvals".into())
            .spawn(move || {
                // Ends when the callback is removed (its sender dropped).
                while let Ok(ev) = rx.recv() {
                    Python::attach(|py| {
                        if let Err(e) = callback.call1(py, (ev,)) {
                            e.write_unraisable(py, None);
                        }
                    });
                }
            })
            .map(|_| ())
            .unwrap_or_else(|e| eprintln!("car-runtime: cannot start the approvals callback thread: {e}"));
        let tx = Mutex::new(tx);
        self.core.on_approval_json(Arc::new(move |ev: String| {
            if let Ok(tx) = tx.lock() {
                let _ = tx.send(ev);
            }
        }))
    }

    /// Detaches an approver; False for an unknown id.
    fn remove_approval_callback(&self, id: u64) -> bool {
        self.core.remove_approval_callback(id)
    }

    /// The pending approvals of the runtime's approvals store, as JSON text
    /// `{"pending": [...]}`.
    fn approvals_pending(&self, py: Python<'_>) -> PyResult<String> {
        let core = self.core.clone();
        py.detach(move || core.approvals_pending()).map_err(|e| to_py_err(py, e))
    }

    /// Resolves an approval: anything but an explicit `allow` is a deny; a
    /// waiting action learns it at once. Returns the resolution in force
    /// (JSON text, with `applied`).
    #[pyo3(signature = (key, decision, reason=String::new()), text_signature = "($self, key, decision, reason='')")]
    fn approval_resolve(&self, py: Python<'_>, key: String, decision: String, reason: String) -> PyResult<String> {
        let core = self.core.clone();
        py.detach(move || core.approval_resolve(&key, &decision, &reason)).map_err(|e| to_py_err(py, e))
    }

    /// Registers a tool with no parameter schema.
    fn register_tool(&self, py: Python<'_>, name: String) -> PyResult<()> {
        self.core.register_tool(&name).map_err(|e| to_py_err(py, e))
    }

    /// Registers a ToolSchema (JSON text or dict); parameters are validated before dispatch.
    fn register_tool_schema(&self, py: Python<'_>, schema_json: &Bound<'_, PyAny>) -> PyResult<()> {
        let text = json_text(py, schema_json)?;
        self.core.register_tool_schema(&text).map_err(|e| to_py_err(py, e))
    }

    /// The registered tools, sorted by name, as JSON text.
    fn list_tools(&self) -> String {
        self.core.list_tools()
    }

    /// Removes a tool; the count removed (0 is not an error).
    fn unregister_tool(&self, name: String) -> u32 {
        self.core.unregister_tool(&name)
    }

    /// Registers a policy rule: `deny_tool`, `deny_tool_param`, `require_state`.
    #[pyo3(signature = (name, rule, target=None, key=None, pattern=None, value_json=None, session_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn register_policy(
        &self,
        py: Python<'_>,
        name: String,
        rule: String,
        target: Option<String>,
        key: Option<String>,
        pattern: Option<String>,
        value_json: Option<&Bound<'_, PyAny>>,
        session_id: Option<String>,
    ) -> PyResult<()> {
        let value = opt_text(py, value_json)?;
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
            .map_err(|e| to_py_err(py, e))
    }

    /// Removes every policy of that name; the count (0 is not an error).
    #[pyo3(signature = (name, session_id=None))]
    fn unregister_policy(&self, py: Python<'_>, name: String, session_id: Option<String>) -> PyResult<u32> {
        self.core.unregister_policy(&name, session_id.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// `[{name, description}]` in registration order, as JSON text.
    #[pyo3(signature = (session_id=None))]
    fn list_policies(&self, py: Python<'_>, session_id: Option<String>) -> PyResult<String> {
        self.core.list_policies(session_id.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// Loads `dir/*.toml` policy files; the number of rules loaded.
    fn load_policies(&self, py: Python<'_>, dir: String) -> PyResult<u32> {
        self.core.load_policies(&dir).map_err(|e| to_py_err(py, e))
    }

    /// Opens a policy scope; its id.
    fn open_session(&self, py: Python<'_>) -> PyResult<String> {
        self.core.open_session().map_err(|e| to_py_err(py, e))
    }

    /// Closes a policy scope; false when it was not open.
    fn close_session(&self, py: Python<'_>, session_id: String) -> PyResult<bool> {
        self.core.close_session(&session_id).map_err(|e| to_py_err(py, e))
    }

    /// Sets a state key (value as JSON text or a Python value).
    #[pyo3(signature = (key, value_json, tenant=None))]
    fn state_set(
        &self,
        py: Python<'_>,
        key: String,
        value_json: &Bound<'_, PyAny>,
        tenant: Option<String>,
    ) -> PyResult<()> {
        let text = json_text(py, value_json)?;
        self.core.state_set(&key, &text, tenant.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// `log(level, message, data?)` of a tool's context: a `ToolLog` event
    /// for the call (the call JSON text or dict the tool received). `data`
    /// is any JSON-serialisable value.
    #[pyo3(signature = (call, level, message, data=None))]
    fn tool_log(
        &self,
        py: Python<'_>,
        call: &Bound<'_, PyAny>,
        level: String,
        message: String,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let call = json_text(py, call)?;
        let data = match data.filter(|d| !d.is_none()) {
            Some(d) => Some(py.import("json")?.call_method1("dumps", (d,))?.extract::<String>()?),
            None => None,
        };
        self.core.tool_log(&call, &level, &message, data.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// Whether the engine has given up on this call (the call JSON text or
    /// dict the tool received): its deadline (`timeout_ms`) has passed.
    fn tool_cancelled(&self, py: Python<'_>, call: &Bound<'_, PyAny>) -> PyResult<bool> {
        let call = json_text(py, call)?;
        self.core.tool_cancelled(&call).map_err(|e| to_py_err(py, e))
    }

    /// A state value as JSON text; `"null"` when absent.
    #[pyo3(signature = (key, tenant=None))]
    fn state_get(&self, py: Python<'_>, key: String, tenant: Option<String>) -> PyResult<String> {
        self.core.state_get(&key, tenant.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// True when the key is set.
    #[pyo3(signature = (key, tenant=None))]
    fn state_exists(&self, py: Python<'_>, key: String, tenant: Option<String>) -> PyResult<bool> {
        self.core.state_exists(&key, tenant.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// The keys (of a tenant, without its prefix).
    #[pyo3(signature = (tenant=None))]
    fn state_keys(&self, py: Python<'_>, tenant: Option<String>) -> PyResult<Vec<String>> {
        self.core.state_keys(tenant.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// `{key: value}` as JSON text.
    #[pyo3(signature = (tenant=None))]
    fn state_snapshot(&self, py: Python<'_>, tenant: Option<String>) -> PyResult<String> {
        self.core.state_snapshot(tenant.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// The admission configuration document in force, as JSON text.
    fn admission_config(&self) -> String {
        self.core.admission_config()
    }

    /// The MCP servers of the document's `mcp` section, as JSON text
    /// `{servers: {NAME: {connections, toolset_hash, tools, drift}}}`: each
    /// tool's accepted and current contract hash, whether `pin` refuses it,
    /// and every drift report (`old_hash`, `new_hash`, `changed`, `added`,
    /// `removed`).
    fn mcp_status(&self) -> String {
        self.core.mcp_status()
    }

    /// The plan of a proposal before anything runs: for every action what
    /// admission decides now (`verdict`, `layer`, `rule`, `reason`, tiers,
    /// `approval_key` of an ask, `preview` diff of a built-in file write), as
    /// JSON text `{plan_id, proposal_id, items, counts}`. Nothing runs, is
    /// recorded or is asked.
    #[pyo3(signature = (proposal_json, session_id=None, scope_json=None))]
    fn proposal_plan(
        &self,
        py: Python<'_>,
        proposal_json: &Bound<'_, PyAny>,
        session_id: Option<String>,
        scope_json: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let text = json_text(py, proposal_json)?;
        let scope = opt_text(py, scope_json)?;
        let core = self.core.clone();
        py.detach(move || core.proposal_plan(&text, session_id.as_deref(), scope.as_deref()))
            .map_err(|e| to_py_err(py, e))
    }

    /// Decides one `ask` item of a plan: `decision` `allow` or `deny`,
    /// `scope` `once` or `session` (`always` raises
    /// `always_scope_unavailable`). Needs an approvals store
    /// (`set_permissions(..., approvals_dir)`).
    #[pyo3(
        signature = (plan_id, action_id, decision, scope="once".to_string(), reason=String::new()),
        text_signature = "($self, plan_id, action_id, decision, scope='once', reason='')"
    )]
    fn proposal_decide(
        &self,
        py: Python<'_>,
        plan_id: String,
        action_id: String,
        decision: String,
        scope: String,
        reason: String,
    ) -> PyResult<String> {
        self.core.proposal_decide(&plan_id, &action_id, &decision, &scope, &reason).map_err(|e| to_py_err(py, e))
    }

    /// Runs a plan after its decisions with `tool_fn` (as `execute_proposal`);
    /// the plan is used up.
    fn proposal_apply(&self, py: Python<'_>, plan_id: String, tool_fn: Py<PyAny>) -> PyResult<String> {
        let (proposal, session, scope) = self.core.proposal_take(&plan_id).map_err(|e| to_py_err(py, e))?;
        run_with(py, &self.core, Run::Proposal(car_runtime::api::proposal_to_json(&proposal), session, scope), tool_fn)
    }

    /// Strict mode on or off (off by default): on, a proposal with a field
    /// the IR does not know is refused (`CarInputError`, code
    /// `unknown_field`) instead of run without it.
    fn set_strict_fields(&self, strict: bool) {
        self.core.set_strict_fields(strict);
    }

    /// True in strict mode (`set_strict_fields`).
    fn strict_fields(&self) -> bool {
        self.core.strict_fields()
    }

    /// Verifies a proposal against this runtime's state and tool schemas.
    fn verify_proposal(&self, py: Python<'_>, proposal_json: &Bound<'_, PyAny>) -> PyResult<String> {
        let text = json_text(py, proposal_json)?;
        let core = self.core.clone();
        py.detach(move || core.verify_proposal(&text)).map_err(|e| to_py_err(py, e))
    }

    /// Executes a proposal; `tool_fn(call_json)` or `tool_fn(tool, params_json)`
    /// returns the result (JSON text or a JSON-serialisable value).
    #[pyo3(signature = (proposal_json, tool_fn, session_id=None, scope_json=None))]
    fn execute_proposal(
        &self,
        py: Python<'_>,
        proposal_json: &Bound<'_, PyAny>,
        tool_fn: Py<PyAny>,
        session_id: Option<String>,
        scope_json: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let text = json_text(py, proposal_json)?;
        let scope = opt_text(py, scope_json)?;
        run_with(py, &self.core, Run::Proposal(text, session_id, scope), tool_fn)
    }

    /// Resumes the suspended proposal `id` (`docs/suspend.md`) with
    /// `tool_fn` (as `execute_proposal`): what had not run goes through
    /// admission again and runs; what settled is not run again. The
    /// ProposalResult as JSON text (`status: "suspended"` again while an
    /// approval is pending). `CarConfigError` codes `suspension_not_found`,
    /// `suspension_claimed`, `suspension_conflict`.
    fn resume_proposal(&self, py: Python<'_>, suspension_id: String, tool_fn: Py<PyAny>) -> PyResult<String> {
        run_with(py, &self.core, Run::Resume(suspension_id), tool_fn)
    }

    /// The suspended proposals, oldest first, as JSON text:
    /// `{suspended: [{id, proposal_id, pending, waiting, ...}]}`.
    fn suspended_proposals(&self, py: Python<'_>) -> PyResult<String> {
        let core = self.core.clone();
        py.detach(move || tokio_rt().block_on(core.suspended_proposals(None))).map_err(|e| to_py_err(py, e))
    }

    /// Executes a proposal with the handler from `register_tool_handler`.
    #[pyo3(signature = (proposal_json, session_id=None))]
    fn submit_proposal(
        &self,
        py: Python<'_>,
        proposal_json: &Bound<'_, PyAny>,
        session_id: Option<String>,
    ) -> PyResult<String> {
        let handler = HANDLER.lock().ok().and_then(|h| h.as_ref().map(|f| f.clone_ref(py)));
        let Some(handler) = handler else {
            return Err(to_py_err(
                py,
                car_runtime::Error::runtime(
                    "no_tool_handler",
                    "no tool handler is registered; call register_tool_handler first",
                ),
            ));
        };
        let text = json_text(py, proposal_json)?;
        run_with(py, &self.core, Run::Proposal(text, session_id, None), handler)
    }

    /// Monte Carlo against this runtime: tools without a given rate use
    /// their event-log record (Laplace-smoothed), else the default.
    #[pyo3(signature = (proposal_json, initial_state_json=None, tool_success_rates_json=None, goal_json=None, config_json=None))]
    fn simulate_monte_carlo(
        &self,
        py: Python<'_>,
        proposal_json: &Bound<'_, PyAny>,
        initial_state_json: Option<&Bound<'_, PyAny>>,
        tool_success_rates_json: Option<&Bound<'_, PyAny>>,
        goal_json: Option<&Bound<'_, PyAny>>,
        config_json: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let p = crate::json_text(py, proposal_json)?;
        let (s, r, g, c) = (
            opt_text(py, initial_state_json)?,
            opt_text(py, tool_success_rates_json)?,
            opt_text(py, goal_json)?,
            opt_text(py, config_json)?,
        );
        let core = &self.core;
        py.detach(|| core.simulate_monte_carlo(&p, s.as_deref(), r.as_deref(), g.as_deref(), c.as_deref()))
            .map_err(|e| to_py_err(py, e))
    }

    /// Number of events held.
    fn event_count(&self) -> u64 {
        self.core.event_count()
    }

    /// `{count, events}` newest first, as JSON text.
    #[pyo3(signature = (query_json=None))]
    fn event_query(&self, py: Python<'_>, query_json: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        let q = opt_text(py, query_json)?.unwrap_or_default();
        self.core.event_query(&q).map_err(|e| to_py_err(py, e))
    }

    /// Turns on SHA-256 hash chaining of later events.
    fn enable_event_log_hash_chaining(&self) {
        self.core.enable_event_log_hash_chaining()
    }

    /// `{"verified": n}` or `{"tampered_at": i}` as JSON text.
    fn verify_event_log_chain(&self) -> String {
        self.core.verify_event_log_chain()
    }

    /// Gets (no argument) or sets the event retention policy
    /// `{max_events?, max_age_secs?}`: `{policy}` or `{policy, removed}`.
    #[pyo3(signature = (policy_json=None))]
    fn event_retention(&self, py: Python<'_>, policy_json: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        let p = opt_text(py, policy_json)?;
        self.core.event_retention(p.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// Removes events beyond `{max_events?, max_age_secs?}` once (the
    /// policy in force stays): `{removed, remaining}`.
    fn events_truncate(&self, py: Python<'_>, params_json: &Bound<'_, PyAny>) -> PyResult<String> {
        let p = json_text(py, params_json)?;
        self.core.events_truncate(&p).map_err(|e| to_py_err(py, e))
    }

    /// `[{agent, calls, tokens_in, tokens_out, cost_usd}]` from the runs' model turns.
    fn event_cost_by_agent(&self) -> String {
        self.core.event_cost_by_agent()
    }

    /// The operational rollup of the events held, as JSON text.
    fn metrics_summary(&self) -> String {
        self.core.metrics_summary()
    }

    /// Keeps run traces as `<dir>/<run_id>.json` (`None`: in memory only).
    #[pyo3(signature = (dir=None))]
    fn set_runs_dir(&self, py: Python<'_>, dir: Option<String>) -> PyResult<()> {
        self.core.set_runs_dir(dir.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// Starts a run `{intent, agent_id?, agent_name?, outcome_description?,
    /// idempotency_key?}`: `{run_id, agent_id}`.
    fn runs_start(&self, py: Python<'_>, params_json: &Bound<'_, PyAny>) -> PyResult<String> {
        let p = json_text(py, params_json)?;
        self.core.runs_start(&p).map_err(|e| to_py_err(py, e))
    }

    /// Records one model turn of a run: `{run_id, turn_index, ok}`.
    fn runs_record_model_turn(&self, py: Python<'_>, params_json: &Bound<'_, PyAny>) -> PyResult<String> {
        let p = json_text(py, params_json)?;
        self.core.runs_record_model_turn(&p).map_err(|e| to_py_err(py, e))
    }

    /// Completes a run `{run_id, outcome: {status, ...}}`: `{run_id, ok}`.
    fn runs_complete(&self, py: Python<'_>, params_json: &Bound<'_, PyAny>) -> PyResult<String> {
        let p = json_text(py, params_json)?;
        self.core.runs_complete(&p).map_err(|e| to_py_err(py, e))
    }

    /// `{count, runs}` newest first; filters `{agent_id?, status?, limit?}`.
    #[pyo3(signature = (params_json=None))]
    fn runs_list(&self, py: Python<'_>, params_json: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        let p = opt_text(py, params_json)?;
        self.core.runs_list(p.as_deref()).map_err(|e| to_py_err(py, e))
    }

    /// `{run, events}` of `{run_id}`: its turns, proposals and their events.
    fn runs_get_trace(&self, py: Python<'_>, params_json: &Bound<'_, PyAny>) -> PyResult<String> {
        let p = json_text(py, params_json)?;
        self.core.runs_get_trace(&p).map_err(|e| to_py_err(py, e))
    }

    /// A detached tool's poll result as JSON text, or None once consumed.
    fn tool_poll(&self, handle: String) -> Option<String> {
        self.core.tool_poll(&handle)
    }

    /// Cooperatively cancels a detached tool.
    fn tool_cancel(&self, handle: String) -> bool {
        self.core.tool_cancel(&handle)
    }

    /// The granted permission tier.
    fn permission_get_tier(&self) -> String {
        self.core.permission_get_tier()
    }

    /// Sets the granted tier (`read_only`, `sandbox_edit`, `full_access`) and
    /// turns the tier layer on: from the next proposal, an action above the
    /// tier (and every `full_access` action) refuses the proposal unless the
    /// approvals ledger approves it.
    fn permission_set_tier(&self, py: Python<'_>, tier: String) -> PyResult<String> {
        self.core.permission_set_tier(&tier).map_err(|e| to_py_err(py, e))
    }
}

/// Sets the handler `CarRuntime.submit_proposal` uses.
#[pyfunction]
#[pyo3(signature = (r#fn))]
pub fn register_tool_handler(r#fn: Py<PyAny>) {
    if let Ok(mut h) = HANDLER.lock() {
        *h = Some(r#fn);
    }
}

/// Removes the handler.
#[pyfunction]
pub fn unregister_tool_handler() {
    if let Ok(mut h) = HANDLER.lock() {
        *h = None;
    }
}

/// Executes a proposal on a fresh runtime with these tool names registered.
#[pyfunction]
pub fn execute(
    py: Python<'_>,
    proposal_json: &Bound<'_, PyAny>,
    tool_names: Vec<String>,
    tool_fn: Py<PyAny>,
) -> PyResult<String> {
    let core = Core::new();
    for name in &tool_names {
        core.register_tool(name).map_err(|e| to_py_err(py, e))?;
    }
    let text = json_text(py, proposal_json)?;
    run_with(py, &core, Run::Proposal(text, None, None), tool_fn)
}
