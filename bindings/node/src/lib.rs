//! The Node binding: a thin translation onto `car_runtime::api`.
//! No logic lives here; every function forwards to the JSON facade.

/// mimalloc for every allocation of the extension (the core's parse makes
/// several small allocations per action; see docs/performance.md).
#[global_allocator]
static GLOBAL: car_runtime_alloc::MiMalloc = car_runtime_alloc::MiMalloc;

use napi::{Env, JsString};
use napi_derive::napi;
use serde_json::{Map, Value};

pub mod hooks;
pub mod port;
mod runtime;

/// Results of binding functions: a JS `Error` whose `.code` is the stable
/// error code of the facade.
pub(crate) type Result<T> = napi::Result<T, String>;

/// A facade error as a JS `Error` with `.code` = the stable error code and,
/// as its `cause`, the structured record (`car_error_cause`) from which the
/// `lib.js` shim builds the exported `CarError` subclass.
pub(crate) fn to_js_err(e: car_runtime::Error) -> napi::Error<String> {
    let mut err = napi::Error::new(e.code().to_string(), e.to_string());
    err.set_cause(car_error_cause(&e));
    err
}

/// The structured error record `{"car_error": {code, family, message,
/// details}}` (the facade's `Error::to_json`), carried as the `cause` of the
/// JS error: napi's async machinery carries only a `Status`, so the stable
/// code, family and details travel here, never in the message.
pub(crate) fn car_error_cause(e: &car_runtime::Error) -> napi::Error {
    napi::Error::new(napi::Status::GenericFailure, car_error_record(e))
}

/// `{"car_error": {code, family, message, details}}` as JSON text.
pub(crate) fn car_error_record(e: &car_runtime::Error) -> String {
    serde_json::json!({ "car_error": e.to_json() }).to_string()
}

/// A `*Json` argument: JSON text, or a plain JS value serialised.
pub(crate) fn json_value(name: &str, v: Value) -> Result<Value> {
    match v {
        Value::String(text) => serde_json::from_str(&text)
            .map_err(|e| to_js_err(car_runtime::Error::invalid_argument(name, format!("is not valid JSON: {e}")))),
        value => Ok(value),
    }
}

fn call(method: &str, params: Map<String, Value>) -> Result<Value> {
    car_runtime::api::call(method, &Value::Object(params)).map_err(to_js_err)
}

fn put(m: &mut Map<String, Value>, name: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(name.to_string(), v);
    }
}

fn opt(name: &str, v: Option<Value>) -> Result<Option<Value>> {
    v.map(|v| json_value(name, v)).transpose()
}

/// A facade error as a JS error, naming an argument that is not JSON at all.
fn named(e: car_runtime::Error, args: &[(&str, Option<&str>)]) -> napi::Error<String> {
    to_js_err(car_runtime::api::name_bad_json(e, args))
}

/// JSON text as a JS string. ASCII text (nearly every answer: only a
/// non-ASCII string in the input makes one otherwise) goes to V8 as Latin-1,
/// which it copies, instead of UTF-8, which it decodes: for `verify`'s 645 KB
/// answer on a 5,000-action proposal, 0.40 ms instead of 1.27 ms. From
/// [`EXTERNAL_MIN`] bytes on, where Node has external strings, V8 is handed
/// the bytes themselves (or, for text that is not all ASCII, its UTF-16
/// units) and copies nothing.
fn js_text(env: &Env, text: String) -> Result<JsString<'_>> {
    let large = text.len() >= EXTERNAL_MIN && external_strings(env);
    if text.is_ascii() {
        if large {
            return external(env, text.into_bytes(), Encoding::Latin1);
        }
        return env.create_string_latin1(text.as_bytes()).map_err(plain_error);
    }
    if large {
        // Mostly ASCII nearly always (`verify`'s answer has a few dashes):
        // widened here, which is cheaper than V8 decoding the UTF-8.
        return external(env, utf16(&text), Encoding::Utf16);
    }
    env.create_string(&text).map_err(plain_error)
}

/// `text` in UTF-16. Runs of ASCII are widened 32 bytes at a time (a loop
/// the compiler vectorises); from a chunk holding a non-ASCII byte on, one
/// character at a time until the next chunk is all ASCII.
fn utf16(text: &str) -> Vec<u16> {
    const CHUNK: usize = 32;
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    loop {
        while let Some(chunk) = b.get(i..i + CHUNK).and_then(|c| <&[u8; CHUNK]>::try_from(c).ok()) {
            if chunk.iter().fold(0u8, |acc, &c| acc | c) >= 0x80 {
                break;
            }
            out.extend_from_slice(&chunk.map(u16::from));
            i += CHUNK;
        }
        // `i` is at a character's start: only whole chunks of ASCII and
        // whole characters have been passed.
        let Some(c) = text[i..].chars().next() else { break };
        out.extend_from_slice(c.encode_utf16(&mut [0; 2]));
        i += c.len_utf8();
    }
    out
}

fn plain_error(e: napi::Error) -> napi::Error<String> {
    napi::Error::new(e.status.as_ref().to_string(), e.reason.clone())
}

/// The size from which an answer is handed to V8 as an external string.
/// Below it the copy costs less than the finalizer V8 keeps per string.
const EXTERNAL_MIN: usize = 64 * 1024;

/// Whether this Node has `node_api_create_external_string_latin1` and
/// `_utf16` (18.18 on
/// in 18, 20.4 on in 20, every later line). The symbol is bound when first
/// called, so an older Node never reaches it.
fn external_strings(env: &Env) -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        env.get_node_version().is_ok_and(|v| match v.major {
            18 => v.minor >= 18,
            19 => false,
            20 => v.minor >= 4,
            major => major > 20,
        })
    })
}

/// How an external string's units are read.
#[derive(Clone, Copy)]
enum Encoding {
    /// One byte a character (only ASCII is handed over so).
    Latin1,
    /// UTF-16 code units.
    Utf16,
}

/// `units` as a JS string that V8 reads in place; freed by
/// [`free_external`] when V8 collects the string (at once if it copied
/// them). V8 is told the units' size as external memory while it holds
/// them: it sees only the string's small header in its own heap, and
/// without the size it would collect such answers only when its heap fills
/// from other work, holding hundreds of megabytes of them meanwhile (800
/// MiB after 600 `verify`s of 5,000 actions in a loop).
fn external<T: Copy>(env: &Env, units: Vec<T>, encoding: Encoding) -> Result<JsString<'_>> {
    let mut units = std::mem::ManuallyDrop::new(units);
    let (ptr, len, cap) = (units.as_mut_ptr(), units.len(), units.capacity());
    // What the finalizer needs to rebuild and drop the vector, and how much
    // external memory to give back (none until it is reported below).
    let hint = Box::into_raw(Box::new(Freed { len, cap, free: free_vec::<T>, reported: 0 }));
    let mut value = std::ptr::null_mut();
    let mut copied = false;
    // SAFETY: `ptr` holds `len` initialised units (u8 for Latin-1, u16 for
    // UTF-16) that stay valid until the finalizer runs, which owns them from
    // here on; the length fits `isize`, as every allocation's does; `value`
    // and `copied` are valid out-pointers.
    let status = unsafe {
        match encoding {
            Encoding::Latin1 => napi_sys::node_api_create_external_string_latin1(
                env.raw(),
                ptr.cast(),
                len as isize,
                Some(free_external),
                hint.cast(),
                &mut value,
                &mut copied,
            ),
            Encoding::Utf16 => napi_sys::node_api_create_external_string_utf16(
                env.raw(),
                ptr.cast(),
                len as isize,
                Some(free_external),
                hint.cast(),
                &mut value,
                &mut copied,
            ),
        }
    };
    if status != napi_sys::Status::napi_ok {
        // SAFETY: on failure the finalizer never runs, so the units and the
        // hint are still ours, as built above.
        unsafe {
            drop(Box::from_raw(hint));
            drop(Vec::from_raw_parts(ptr, len, cap));
        }
        return Err(napi::Error::new("GenericFailure".to_string(), "cannot create the answer string".to_string()));
    }
    if !copied {
        let bytes = i64::try_from(cap * std::mem::size_of::<T>()).unwrap_or(i64::MAX);
        // SAFETY: V8 kept the units, so the finalizer has not run: the
        // string is held by `value` in this call's scope, whatever
        // collection the report below starts. The hint is still the box
        // made above, and only this thread touches it until then.
        unsafe {
            (*hint).reported = bytes;
            let mut total = 0;
            napi_sys::napi_adjust_external_memory(env.raw(), bytes, &mut total);
        }
    }
    // SAFETY: `value` is a string value just created in this env.
    unsafe { <JsString as napi::bindgen_prelude::FromNapiValue>::from_napi_value(env.raw(), value) }
        .map_err(plain_error)
}

/// An external string's vector, as [`free_external`] rebuilds it.
struct Freed {
    len: usize,
    cap: usize,
    free: unsafe fn(*mut std::ffi::c_void, usize, usize),
    /// The external memory reported to V8 for it (given back when freed).
    reported: i64,
}

/// Drops the vector of `T` at `data` with this length and capacity.
///
/// # Safety
/// `data`, `len` and `cap` are those of a `Vec<T>` given up with
/// `ManuallyDrop`, and this runs once for it.
unsafe fn free_vec<T>(data: *mut std::ffi::c_void, len: usize, cap: usize) {
    // SAFETY: the caller's contract.
    unsafe { drop(Vec::from_raw_parts(data.cast::<T>(), len, cap)) }
}

/// Frees the units of an external string ([`external`]).
unsafe extern "C" fn free_external(
    env: napi_sys::node_api_basic_env,
    data: *mut std::ffi::c_void,
    hint: *mut std::ffi::c_void,
) {
    // SAFETY: `hint` is the box `external` made for this string's vector at
    // `data`; V8 runs this once per string. Lowering the external memory is
    // allowed in a finalizer (Node takes a basic env for it from 22 on; it
    // only updates a counter, as in earlier lines).
    unsafe {
        let freed = *Box::from_raw(hint.cast::<Freed>());
        (freed.free)(data, freed.len, freed.cap);
        if freed.reported > 0 {
            let mut total = 0;
            napi_sys::napi_adjust_external_memory(env.cast(), -freed.reported, &mut total);
        }
    }
}

/// A `*Json` argument as text: JSON text as it is, a plain JS value serialised.
fn text_arg(v: Value) -> String {
    match v {
        Value::String(text) => text,
        value => value.to_string(),
    }
}

/// A `*Json` argument as text, for the pure functions that take a whole
/// proposal: a JS string is read in one pass (its UTF-16 length, which V8
/// knows, bounds its UTF-8 length, so V8 writes it once instead of first
/// measuring it), and any other value is serialised as `text_arg` does.
pub struct JsonText(String);

impl napi::bindgen_prelude::TypeName for JsonText {
    fn type_name() -> &'static str {
        "string | object"
    }
    fn value_type() -> napi::ValueType {
        napi::ValueType::Unknown
    }
}

impl napi::bindgen_prelude::ValidateNapiValue for JsonText {}

impl napi::bindgen_prelude::FromNapiValue for JsonText {
    unsafe fn from_napi_value(env: napi_sys::napi_env, value: napi_sys::napi_value) -> napi::Result<Self> {
        let mut kind = 0;
        // SAFETY: `env` and `value` are the call's own, as napi hands them.
        let status = unsafe { napi_sys::napi_typeof(env, value, &mut kind) };
        if status == napi_sys::Status::napi_ok && kind == napi_sys::ValueType::napi_string {
            // SAFETY: as above; `value` is a string.
            return unsafe { read_string(env, value) }.map(JsonText);
        }
        // SAFETY: as above.
        unsafe { <Value as napi::bindgen_prelude::FromNapiValue>::from_napi_value(env, value) }
            .map(|v| JsonText(text_arg(v)))
    }
}

/// The JS string `value` as UTF-8 (a lone surrogate becomes U+FFFD, as
/// napi's own conversion makes it).
///
/// # Safety
/// `env` is a live env and `value` a string value of it.
unsafe fn read_string(env: napi_sys::napi_env, value: napi_sys::napi_value) -> napi::Result<String> {
    let failed = |what: &str| napi::Error::new(napi::Status::StringExpected, format!("cannot read the string: {what}"));
    let mut units = 0usize;
    // SAFETY: the caller's contract; a null buffer asks for the length only.
    let status = unsafe { napi_sys::napi_get_value_string_utf16(env, value, std::ptr::null_mut(), 0, &mut units) };
    if status != napi_sys::Status::napi_ok {
        return Err(failed("no length"));
    }
    // UTF-8 takes at most 3 bytes a UTF-16 unit (a surrogate pair, 4 for
    // its two; a lone surrogate becomes U+FFFD, 3), so `cap - 1` bytes hold
    // the whole string and napi never cuts it short; one more for the NUL
    // it writes.
    let cap = units.checked_mul(3).and_then(|n| n.checked_add(1)).ok_or_else(|| failed("too long"))?;
    let mut buf: Vec<u8> = Vec::with_capacity(cap);
    let mut written = 0usize;
    // SAFETY: `buf` has room for `cap` bytes; napi writes at most `cap`
    // (the NUL included) and says how many before the NUL.
    let status =
        unsafe { napi_sys::napi_get_value_string_utf8(env, value, buf.as_mut_ptr().cast(), cap, &mut written) };
    if status != napi_sys::Status::napi_ok || written >= cap {
        // (`written < cap` holds whenever napi keeps its contract.)
        return Err(failed("not written"));
    }
    // SAFETY: napi initialised the first `written` bytes (`written < cap`).
    unsafe { buf.set_len(written) };
    String::from_utf8(buf).map_err(|_| failed("not UTF-8"))
}

/// Static verification of a proposal; returns the verification result as JSON text.
#[napi]
pub fn verify<'e>(
    env: &'e Env,
    #[napi(ts_arg_type = "any")] proposal_json: JsonText,
    initial_state_json: Option<Value>,
    tool_names: Option<Vec<String>>,
    max_actions: Option<u32>,
    tool_schemas_json: Option<Value>,
) -> Result<JsString<'e>> {
    let p = proposal_json.0;
    let state = initial_state_json.map(text_arg);
    let schemas = tool_schemas_json.map(text_arg);
    let text = car_runtime::api::verify::verify(
        &p,
        state.as_deref(),
        tool_names,
        max_actions.map(u64::from),
        schemas.as_deref(),
    )
    .map_err(|e| {
        named(
            e,
            &[
                ("proposalJson", Some(&p)),
                ("initialStateJson", state.as_deref()),
                ("toolSchemasJson", schemas.as_deref()),
            ],
        )
    })?;
    js_text(env, text)
}

/// The state a proposal leaves behind, as JSON text.
#[napi]
pub fn simulate(
    env: &Env,
    #[napi(ts_arg_type = "any")] proposal_json: JsonText,
    initial_state_json: Option<Value>,
) -> Result<JsString<'_>> {
    let p = proposal_json.0;
    let state = initial_state_json.map(text_arg);
    let text = car_runtime::api::verify::simulate(&p, state.as_deref())
        .map_err(|e| named(e, &[("proposalJson", Some(&p)), ("initialStateJson", state.as_deref())]))?;
    js_text(env, text)
}

/// The proposal with phantom state dependencies pruned, as JSON text.
#[napi]
pub fn optimize(env: &Env, #[napi(ts_arg_type = "any")] proposal_json: JsonText) -> Result<JsString<'_>> {
    let p = proposal_json.0;
    let text = car_runtime::api::verify::optimize(&p).map_err(|e| named(e, &[("proposalJson", Some(&p))]))?;
    js_text(env, text)
}

/// Sampled equivalence of two proposals.
#[napi]
pub fn equivalent(p1_json: Value, p2_json: Value, test_states_json: Option<Value>) -> Result<bool> {
    let (p1, p2) = (text_arg(p1_json), text_arg(p2_json));
    let states = test_states_json.map(text_arg);
    car_runtime::api::verify::equivalent(&p1, &p2, states.as_deref())
        .map_err(|e| named(e, &[("p1Json", Some(&p1)), ("p2Json", Some(&p2)), ("testStatesJson", states.as_deref())]))
}

/// Transactional hazards: `{consistent, conflicts}` as JSON text.
#[napi]
pub fn transaction_check(
    env: &Env,
    #[napi(ts_arg_type = "any")] proposal_json: JsonText,
    versions_json: Option<Value>,
    state_json: Option<Value>,
) -> Result<JsString<'_>> {
    let p = proposal_json.0;
    let versions = versions_json.map(text_arg);
    let state = state_json.map(text_arg);
    let text = car_runtime::api::verify::transaction_check(&p, versions.as_deref(), state.as_deref()).map_err(|e| {
        named(e, &[("proposalJson", Some(&p)), ("versionsJson", versions.as_deref()), ("stateJson", state.as_deref())])
    })?;
    js_text(env, text)
}

/// Monte Carlo rollouts with tools allowed to fail, as JSON text.
#[napi]
pub fn simulate_monte_carlo(
    proposal_json: Value,
    initial_state_json: Option<Value>,
    tool_success_rates_json: Option<Value>,
    goal_json: Option<Value>,
    config_json: Option<Value>,
) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "proposal", Some(json_value("proposalJson", proposal_json)?));
    put(&mut m, "initial_state", opt("initialStateJson", initial_state_json)?);
    put(&mut m, "tool_success_rates", opt("toolSuccessRatesJson", tool_success_rates_json)?);
    put(&mut m, "goal", opt("goalJson", goal_json)?);
    put(&mut m, "config", opt("configJson", config_json)?);
    call("simulate_monte_carlo", m).map(|v| v.to_string())
}

/// Candidates scored and sorted best first: `[ScoredProposal]` as JSON text.
#[napi]
pub fn rank_proposals(candidates_json: Value, tools: Option<Vec<String>>, cost_weight: Option<f64>) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "candidates", Some(json_value("candidatesJson", candidates_json)?));
    put(&mut m, "tools", tools.map(Value::from));
    put(&mut m, "cost_weight", cost_weight.map(Value::from));
    call("rank_proposals", m).map(|v| v.to_string())
}

/// The final state with accurate-enough effect predictions applied, as JSON
/// text. Node's argument order (the original's): initial state second.
#[napi]
pub fn simulate_with_predictions(
    proposal_json: Value,
    initial_state_json: Option<Value>,
    predictions_json: Value,
    min_accuracy: f64,
) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "proposal", Some(json_value("proposalJson", proposal_json)?));
    put(&mut m, "initial_state", opt("initialStateJson", initial_state_json)?);
    put(&mut m, "predictions", Some(json_value("predictionsJson", predictions_json)?));
    put(&mut m, "min_accuracy", Some(Value::from(min_accuracy)));
    call("simulate_with_predictions", m).map(|v| v.to_string())
}

/// `transactionCheck` with predicted write keys folded in, as JSON text.
/// Node's argument order (the original's): predictions last.
#[napi]
pub fn transaction_check_with_predictions(
    proposal_json: Value,
    versions_json: Option<Value>,
    state_json: Option<Value>,
    predictions_json: Value,
) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "proposal", Some(json_value("proposalJson", proposal_json)?));
    put(&mut m, "versions", opt("versionsJson", versions_json)?);
    put(&mut m, "state", opt("stateJson", state_json)?);
    put(&mut m, "predictions", Some(json_value("predictionsJson", predictions_json)?));
    call("transaction_check_with_predictions", m).map(|v| v.to_string())
}

/// Required tier and reversibility of every action, as JSON text.
#[napi]
pub fn permission_classify(proposal_json: Value) -> Result<String> {
    let p = text_arg(proposal_json);
    car_runtime::api::policy::permission_classify(&p).map_err(|e| named(e, &[("proposalJson", Some(&p))]))
}

/// Per-action decisions against a granted tier and an approvals ledger, as JSON text.
#[napi]
pub fn permission_evaluate(proposal_json: Value, granted_tier: String, ledger_path: Option<String>) -> Result<String> {
    let p = text_arg(proposal_json);
    car_runtime::api::policy::permission_evaluate(&p, &granted_tier, ledger_path.as_deref())
        .map_err(|e| named(e, &[("proposalJson", Some(&p))]))
}

/// `"allow"`, `"ask"` or `"deny"` for a shell command under argv rules.
#[napi]
pub fn match_shell_command(command: String, rules_json: Value) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "command", Some(Value::String(command)));
    put(&mut m, "rules", Some(json_value("rulesJson", rules_json)?));
    call("match_shell_command", m).map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
}

/// Dry run of the permission chain for one call, as JSON text.
#[napi]
pub fn evaluate_permission(chain_json: Value, tool_json: Value, input_json: Value) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "chain", Some(json_value("chainJson", chain_json)?));
    // A tool definition as JSON, or just a tool name (an undeclared tool).
    let tool = match tool_json {
        Value::String(t) => Some(serde_json::from_str(&t).unwrap_or(Value::String(t))),
        other => Some(other),
    };
    put(&mut m, "tool", tool);
    put(&mut m, "input", Some(json_value("inputJson", input_json)?));
    call("evaluate_permission", m).map(|v| v.to_string())
}

/// SHA-256 (hex) of a toolset's contract fields.
#[napi]
pub fn toolset_hash(tools_json: Value) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "tools", Some(json_value("toolsJson", tools_json)?));
    call("toolset_hash", m).map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
}

/// The deny and ask rules a permission preset (`strict`, `standard`, `open`) compiles to, as JSON text.
#[napi]
pub fn compile_permission_preset(name: String) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "name", Some(Value::String(name)));
    call("compile_permission_preset", m).map(|v| v.to_string())
}

/// Builds a plan of per-item decisions from a batch of calls (`{plan, session, tool_results}` as JSON text).
#[napi]
pub fn plan_build(calls_json: Value, operations_json: Value, options_json: Option<Value>) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "calls", Some(json_value("callsJson", calls_json)?));
    put(&mut m, "operations", Some(json_value("operationsJson", operations_json)?));
    put(&mut m, "options", opt("optionsJson", options_json)?);
    call("plan_build", m).map(|v| v.to_string())
}

/// Applies a decision `{decision, corrected_input?, scope?, reason?}` to one plan item.
#[napi]
pub fn plan_decide(
    plan_json: Value,
    item_id: String,
    decision_json: Value,
    options_json: Option<Value>,
) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "plan", Some(json_value("planJson", plan_json)?));
    put(&mut m, "item_id", Some(Value::String(item_id)));
    put(&mut m, "decision", Some(json_value("decisionJson", decision_json)?));
    put(&mut m, "options", opt("optionsJson", options_json)?);
    call("plan_decide", m).map(|v| v.to_string())
}

/// The pending approvals of a state directory, as JSON text.
#[napi]
pub fn approvals_pending(state_dir: String) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "state_dir", Some(Value::String(state_dir)));
    call("approvals_pending", m).map(|v| v.to_string())
}

/// Resolves an approval; anything but an explicit `allow` is a deny.
#[napi]
pub fn approval_resolve(state_dir: String, key: String, decision: String, reason: Option<String>) -> Result<String> {
    let mut m = Map::new();
    put(&mut m, "state_dir", Some(Value::String(state_dir)));
    put(&mut m, "key", Some(Value::String(key)));
    put(&mut m, "decision", Some(Value::String(decision)));
    put(&mut m, "reason", Some(Value::String(reason.unwrap_or_default())));
    call("approval_resolve", m).map(|v| v.to_string())
}

/// The proposal with every default filled in, as JSON text.
#[napi]
pub fn normalize_proposal(proposal_json: Value) -> Result<String> {
    car_runtime::api::normalize_proposal(&text_arg(proposal_json)).map_err(to_js_err)
}

/// The wire protocol version.
#[napi]
pub fn protocol_version() -> u32 {
    car_runtime::api::protocol_version()
}

/// The package version.
#[napi]
pub fn client_version() -> String {
    car_runtime::api::client_version()
}
