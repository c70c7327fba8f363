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
    put(&mut m, "tool", Some(parse("tool_json", &tool_json)?));
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
