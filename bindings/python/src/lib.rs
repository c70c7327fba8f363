//! The Python binding: a thin translation onto `car_runtime::api`.
//! No logic lives here; every function forwards to the JSON facade.

/// mimalloc for every allocation of the extension (the core's parse makes
/// several small allocations per action; see docs/performance.md).
#[global_allocator]
static GLOBAL: car_runtime_alloc::MiMalloc = car_runtime_alloc::MiMalloc;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;
use serde_json::{Map, Value};

mod runtime;

/// The exception classes live in Python (`car_runtime/_errors.py`): they
/// belong to the `car_runtime` module, pickle, and carry `.details` as a dict.
fn errors_attr<'py>(py: Python<'py>, cell: &'static PyOnceLock<Py<PyAny>>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || py.import("car_runtime._errors")?.getattr(name).map(Bound::unbind))
        .map(|f| f.bind(py).clone())
}

/// `car_runtime.TerminalToolError`, the class a tool raises to fail terminally.
pub(crate) fn terminal_tool_error(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    errors_attr(py, &CLASS, "TerminalToolError")
}

/// `car_runtime.ModelRetry`, the class a tool raises for a model-recoverable failure.
pub(crate) fn model_retry_error(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    errors_attr(py, &CLASS, "ModelRetry")
}

/// Converts a facade error into the matching `car_runtime` exception
/// (`CarInputError`, `CarConfigError`, `CarNotFoundError`, `CarRuntimeError`)
/// with `.code`, `.message`, `.family` and `.details` (a dict).
pub(crate) fn to_py_err(py: Python<'_>, e: car_runtime::Error) -> PyErr {
    static MAKE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let message = e.to_string();
    let made = errors_attr(py, &MAKE, "make")
        .and_then(|make| make.call1((message.as_str(), e.code(), e.family(), e.details().to_string())));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        // The package's Python half is missing: still an error, never a success.
        Err(err) => err,
    }
}

/// A `*_json` argument: JSON text as it is, or a dict/list/other value serialised.
pub(crate) fn json_text(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_cow()?.into_owned());
    }
    static DUMPS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let dumps = DUMPS.get_or_try_init(py, || py.import("json")?.getattr("dumps").map(Bound::unbind))?;
    dumps.call1(py, (obj,))?.extract(py)
}

fn parse(py: Python<'_>, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let text = json_text(py, obj)?;
    serde_json::from_str(&text)
        .map_err(|e| to_py_err(py, car_runtime::Error::invalid_argument(name, format!("is not valid JSON: {e}"))))
}

/// Calls a facade method with named parameters, releasing the GIL.
fn call(py: Python<'_>, method: &str, params: Map<String, Value>) -> PyResult<Value> {
    let params = Value::Object(params);
    py.detach(|| car_runtime::api::call(method, &params)).map_err(|e| to_py_err(py, e))
}

/// A `*_json` argument as text without copying it twice: a `str` is
/// borrowed from Python (UTF-8 encoded once), anything else is
/// `json.dumps`-ed.
pub(crate) enum JsonText {
    Borrowed(PyBackedStr),
    Dumped(String),
}

impl std::ops::Deref for JsonText {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            JsonText::Borrowed(s) => s,
            JsonText::Dumped(s) => s,
        }
    }
}

/// Reads a `*_json` argument as [`JsonText`].
pub(crate) fn text_arg(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<JsonText> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(JsonText::Borrowed(PyBackedStr::try_from(s.clone())?));
    }
    json_text(py, obj).map(JsonText::Dumped)
}

fn opt_text(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<JsonText>> {
    obj.map(|o| text_arg(py, o)).transpose()
}

/// Runs a typed text-in, text-out facade function with the GIL released; an
/// argument that is not JSON at all is named in the error (`args`: the
/// binding's argument names and texts, in order).
fn facade<T: Send>(
    py: Python<'_>,
    args: &[(&str, Option<&str>)],
    f: impl FnOnce() -> car_runtime::Result<T> + Send,
) -> PyResult<T> {
    py.detach(f).map_err(|e| to_py_err(py, car_runtime::api::name_bad_json(e, args)))
}

fn text(v: Value) -> String {
    v.to_string()
}

macro_rules! params {
    ($py:expr; $($name:literal => $val:expr),* $(,)?) => {{
        let mut m = Map::new();
        $( if let Some(v) = $val { m.insert($name.to_string(), v); } )*
        m
    }};
}

/// Static verification of a proposal; returns the verification result as JSON text.
#[pyfunction]
#[pyo3(signature = (proposal_json, initial_state_json=None, tool_names=None, max_actions=None, tool_schemas_json=None))]
fn verify(
    py: Python<'_>,
    proposal_json: &Bound<'_, PyAny>,
    initial_state_json: Option<&Bound<'_, PyAny>>,
    tool_names: Option<Vec<String>>,
    max_actions: Option<u64>,
    tool_schemas_json: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let p = text_arg(py, proposal_json)?;
    let state = opt_text(py, initial_state_json)?;
    let schemas = opt_text(py, tool_schemas_json)?;
    facade(
        py,
        &[
            ("proposal_json", Some(&p)),
            ("initial_state_json", state.as_deref()),
            ("tool_schemas_json", schemas.as_deref()),
        ],
        || car_runtime::api::verify::verify(&p, state.as_deref(), tool_names, max_actions, schemas.as_deref()),
    )
}

/// The state a proposal leaves behind, as JSON text.
#[pyfunction]
#[pyo3(signature = (proposal_json, initial_state_json=None))]
fn simulate(
    py: Python<'_>,
    proposal_json: &Bound<'_, PyAny>,
    initial_state_json: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let p = text_arg(py, proposal_json)?;
    let state = opt_text(py, initial_state_json)?;
    facade(py, &[("proposal_json", Some(&p)), ("initial_state_json", state.as_deref())], || {
        car_runtime::api::verify::simulate(&p, state.as_deref())
    })
}

/// The proposal with phantom state dependencies pruned, as JSON text.
#[pyfunction]
fn optimize(py: Python<'_>, proposal_json: &Bound<'_, PyAny>) -> PyResult<String> {
    let p = text_arg(py, proposal_json)?;
    facade(py, &[("proposal_json", Some(&p))], || car_runtime::api::verify::optimize(&p))
}

/// Sampled equivalence of two proposals.
#[pyfunction]
#[pyo3(signature = (p1_json, p2_json, test_states_json=None))]
fn equivalent(
    py: Python<'_>,
    p1_json: &Bound<'_, PyAny>,
    p2_json: &Bound<'_, PyAny>,
    test_states_json: Option<&Bound<'_, PyAny>>,
) -> PyResult<bool> {
    let p1 = text_arg(py, p1_json)?;
    let p2 = text_arg(py, p2_json)?;
    let states = opt_text(py, test_states_json)?;
    facade(py, &[("p1_json", Some(&p1)), ("p2_json", Some(&p2)), ("test_states_json", states.as_deref())], || {
        car_runtime::api::verify::equivalent(&p1, &p2, states.as_deref())
    })
}

/// Transactional hazards of a proposal, as JSON text.
#[pyfunction]
#[pyo3(signature = (proposal_json, versions_json=None, state_json=None))]
fn transaction_check(
    py: Python<'_>,
    proposal_json: &Bound<'_, PyAny>,
    versions_json: Option<&Bound<'_, PyAny>>,
    state_json: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let p = text_arg(py, proposal_json)?;
    let versions = opt_text(py, versions_json)?;
    let state = opt_text(py, state_json)?;
    facade(
        py,
        &[("proposal_json", Some(&p)), ("versions_json", versions.as_deref()), ("state_json", state.as_deref())],
        || car_runtime::api::verify::transaction_check(&p, versions.as_deref(), state.as_deref()),
    )
}

/// Monte Carlo rollouts of a proposal with tools allowed to fail, as JSON text.
#[pyfunction]
#[pyo3(signature = (proposal_json, initial_state_json=None, tool_success_rates_json=None, goal_json=None, config_json=None))]
fn simulate_monte_carlo(
    py: Python<'_>,
    proposal_json: &Bound<'_, PyAny>,
    initial_state_json: Option<&Bound<'_, PyAny>>,
    tool_success_rates_json: Option<&Bound<'_, PyAny>>,
    goal_json: Option<&Bound<'_, PyAny>>,
    config_json: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let p = text_arg(py, proposal_json)?;
    let (s, r) = (opt_text(py, initial_state_json)?, opt_text(py, tool_success_rates_json)?);
    let (g, c) = (opt_text(py, goal_json)?, opt_text(py, config_json)?);
    facade(
        py,
        &[
            ("proposal_json", Some(&p)),
            ("initial_state_json", s.as_deref()),
            ("tool_success_rates_json", r.as_deref()),
            ("goal_json", g.as_deref()),
            ("config_json", c.as_deref()),
        ],
        || car_runtime::api::planning::simulate_monte_carlo(&p, s.as_deref(), r.as_deref(), g.as_deref(), c.as_deref()),
    )
}

/// Candidates scored and sorted best first, as JSON text.
#[pyfunction]
#[pyo3(signature = (candidates_json, tools=None, cost_weight=None))]
fn rank_proposals(
    py: Python<'_>,
    candidates_json: &Bound<'_, PyAny>,
    tools: Option<Vec<String>>,
    cost_weight: Option<f64>,
) -> PyResult<String> {
    let p = params!(py;
        "candidates" => Some(parse(py, "candidates_json", candidates_json)?),
        "tools" => tools.map(Value::from),
        "cost_weight" => cost_weight.map(Value::from),
    );
    call(py, "rank_proposals", p).map(text)
}

/// The final state with accurate-enough effect predictions applied, as JSON text.
#[pyfunction]
#[pyo3(signature = (proposal_json, predictions_json, min_accuracy, initial_state_json=None))]
fn simulate_with_predictions(
    py: Python<'_>,
    proposal_json: &Bound<'_, PyAny>,
    predictions_json: &Bound<'_, PyAny>,
    min_accuracy: f64,
    initial_state_json: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let p = params!(py;
        "proposal" => Some(parse(py, "proposal_json", proposal_json)?),
        "predictions" => Some(parse(py, "predictions_json", predictions_json)?),
        "min_accuracy" => Some(Value::from(min_accuracy)),
        "initial_state" => initial_state_json.map(|o| parse(py, "initial_state_json", o)).transpose()?,
    );
    call(py, "simulate_with_predictions", p).map(text)
}

/// `transaction_check` with predicted write keys folded in, as JSON text.
#[pyfunction]
#[pyo3(signature = (proposal_json, predictions_json, versions_json=None, state_json=None))]
fn transaction_check_with_predictions(
    py: Python<'_>,
    proposal_json: &Bound<'_, PyAny>,
    predictions_json: &Bound<'_, PyAny>,
    versions_json: Option<&Bound<'_, PyAny>>,
    state_json: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let p = params!(py;
        "proposal" => Some(parse(py, "proposal_json", proposal_json)?),
        "predictions" => Some(parse(py, "predictions_json", predictions_json)?),
        "versions" => versions_json.map(|o| parse(py, "versions_json", o)).transpose()?,
        "state" => state_json.map(|o| parse(py, "state_json", o)).transpose()?,
    );
    call(py, "transaction_check_with_predictions", p).map(text)
}

/// Required tier and reversibility of every action, as JSON text.
#[pyfunction]
fn permission_classify(py: Python<'_>, proposal_json: &Bound<'_, PyAny>) -> PyResult<String> {
    let p = text_arg(py, proposal_json)?;
    facade(py, &[("proposal_json", Some(&p))], || car_runtime::api::policy::permission_classify(&p))
}

/// Per-action decisions against a granted tier and an approvals ledger, as JSON text.
#[pyfunction]
#[pyo3(signature = (proposal_json, granted_tier, ledger_path=None))]
fn permission_evaluate(
    py: Python<'_>,
    proposal_json: &Bound<'_, PyAny>,
    granted_tier: String,
    ledger_path: Option<String>,
) -> PyResult<String> {
    let p = text_arg(py, proposal_json)?;
    facade(py, &[("proposal_json", Some(&p))], || {
        car_runtime::api::policy::permission_evaluate(&p, &granted_tier, ledger_path.as_deref())
    })
}

/// `"allow"`, `"ask"` or `"deny"` for a shell command under argv rules.
#[pyfunction]
fn match_shell_command(py: Python<'_>, command: String, rules_json: &Bound<'_, PyAny>) -> PyResult<String> {
    let p = params!(py;
        "command" => Some(Value::String(command)),
        "rules" => Some(parse(py, "rules_json", rules_json)?),
    );
    let v = call(py, "match_shell_command", p)?;
    Ok(v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
}

/// Dry run of the permission chain for one call, as JSON text.
#[pyfunction]
fn evaluate_permission(
    py: Python<'_>,
    chain_json: &Bound<'_, PyAny>,
    tool_json: &Bound<'_, PyAny>,
    input_json: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let p = params!(py;
        "chain" => Some(parse(py, "chain_json", chain_json)?),
        // A tool definition as JSON, or just a tool name (an undeclared tool).
        "tool" => Some(parse(py, "tool_json", tool_json).or_else(|_| json_text(py, tool_json).map(Value::String))?),
        "input" => Some(parse(py, "input_json", input_json)?),
    );
    call(py, "evaluate_permission", p).map(text)
}

/// SHA-256 (hex) of a toolset's contract fields.
#[pyfunction]
fn toolset_hash(py: Python<'_>, tools_json: &Bound<'_, PyAny>) -> PyResult<String> {
    let p = params!(py; "tools" => Some(parse(py, "tools_json", tools_json)?));
    let v = call(py, "toolset_hash", p)?;
    Ok(v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
}

/// The deny and ask rules a preset compiles to, as JSON text.
#[pyfunction]
fn compile_permission_preset(py: Python<'_>, name: String) -> PyResult<String> {
    let p = params!(py; "name" => Some(Value::String(name)));
    call(py, "compile_permission_preset", p).map(text)
}

/// Builds a plan of per-item decisions from a batch of calls (`{plan, session, tool_results}` as JSON text).
#[pyfunction]
#[pyo3(signature = (calls_json, operations_json, options_json=None))]
fn plan_build(
    py: Python<'_>,
    calls_json: &Bound<'_, PyAny>,
    operations_json: &Bound<'_, PyAny>,
    options_json: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let p = params!(py;
        "calls" => Some(parse(py, "calls_json", calls_json)?),
        "operations" => Some(parse(py, "operations_json", operations_json)?),
        "options" => options_json.map(|o| parse(py, "options_json", o)).transpose()?,
    );
    call(py, "plan_build", p).map(text)
}

/// Applies a decision `{decision, corrected_input?, scope?, reason?}` to one plan item.
#[pyfunction]
#[pyo3(signature = (plan_json, item_id, decision_json, options_json=None))]
fn plan_decide(
    py: Python<'_>,
    plan_json: &Bound<'_, PyAny>,
    item_id: String,
    decision_json: &Bound<'_, PyAny>,
    options_json: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let p = params!(py;
        "plan" => Some(parse(py, "plan_json", plan_json)?),
        "item_id" => Some(Value::String(item_id)),
        "decision" => Some(parse(py, "decision_json", decision_json)?),
        "options" => options_json.map(|o| parse(py, "options_json", o)).transpose()?,
    );
    call(py, "plan_decide", p).map(text)
}

/// The pending approvals of a state directory, as JSON text.
#[pyfunction]
fn approvals_pending(py: Python<'_>, state_dir: String) -> PyResult<String> {
    let p = params!(py; "state_dir" => Some(Value::String(state_dir)));
    call(py, "approvals_pending", p).map(text)
}

/// Resolves an approval; anything but an explicit `allow` is a deny.
#[pyfunction]
#[pyo3(signature = (state_dir, key, decision, reason=String::new()), text_signature = "(state_dir, key, decision, reason='')")]
fn approval_resolve(
    py: Python<'_>,
    state_dir: String,
    key: String,
    decision: String,
    reason: String,
) -> PyResult<String> {
    let p = params!(py;
        "state_dir" => Some(Value::String(state_dir)),
        "key" => Some(Value::String(key)),
        "decision" => Some(Value::String(decision)),
        "reason" => Some(Value::String(reason)),
    );
    call(py, "approval_resolve", p).map(text)
}

/// The proposal with every default filled in, as JSON text.
#[pyfunction]
fn normalize_proposal(py: Python<'_>, proposal_json: &Bound<'_, PyAny>) -> PyResult<String> {
    let text_in = json_text(py, proposal_json)?;
    py.detach(|| car_runtime::api::normalize_proposal(&text_in)).map_err(|e| to_py_err(py, e))
}

/// The wire protocol version.
#[pyfunction]
fn protocol_version() -> u32 {
    car_runtime::api::protocol_version()
}

/// The package version.
#[pyfunction]
fn client_version() -> String {
    car_runtime::api::client_version()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<runtime::PyCarRuntime>()?;
    m.add_function(wrap_pyfunction!(runtime::register_tool_handler, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::unregister_tool_handler, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::execute, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(optimize, m)?)?;
    m.add_function(wrap_pyfunction!(equivalent, m)?)?;
    m.add_function(wrap_pyfunction!(transaction_check, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_monte_carlo, m)?)?;
    m.add_function(wrap_pyfunction!(rank_proposals, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_with_predictions, m)?)?;
    m.add_function(wrap_pyfunction!(transaction_check_with_predictions, m)?)?;
    m.add_function(wrap_pyfunction!(permission_classify, m)?)?;
    m.add_function(wrap_pyfunction!(permission_evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(match_shell_command, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate_permission, m)?)?;
    m.add_function(wrap_pyfunction!(toolset_hash, m)?)?;
    m.add_function(wrap_pyfunction!(compile_permission_preset, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_proposal, m)?)?;
    m.add_function(wrap_pyfunction!(plan_build, m)?)?;
    m.add_function(wrap_pyfunction!(plan_decide, m)?)?;
    m.add_function(wrap_pyfunction!(approvals_pending, m)?)?;
    m.add_function(wrap_pyfunction!(approval_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(protocol_version, m)?)?;
    m.add_function(wrap_pyfunction!(client_version, m)?)?;
    Ok(())
}
