//! The facade's JSON entry points (`api::call`): the first byte picks a
//! stateless method, the rest is its params as JSON text. Parameters naming
//! files or directories are removed so the fuzzer never touches the disk.
//! Property: every call answers a value or a typed error, never a panic.
#![no_main]

use car_runtime::api;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const METHODS: &[&str] = &[
    "normalize_proposal",
    "normalize",
    "evaluate_precondition",
    "verify",
    "simulate",
    "optimize",
    "equivalent",
    "transaction_check",
    "check_policies",
    "permission_classify",
    "permission_evaluate",
    "match_shell_command",
    "evaluate_permission",
    "toolset_hash",
    "compile_permission_preset",
    "plan_build",
    "plan_decide",
    "approval_key",
    "plan_mode_tools",
    "denial_result",
    "client_version",
];

fn strip_paths(v: &mut Value) {
    if let Value::Object(o) = v {
        o.retain(|k, _| !(k.contains("dir") || k.contains("path") || k == "discover_from"));
        if let Some(opts) = o.get_mut("options") {
            strip_paths(opts);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&m, rest)) = data.split_first() else { return };
    let method = METHODS[m as usize % METHODS.len()];
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let Ok(mut params) = serde_json::from_str::<Value>(text) else { return };
    strip_paths(&mut params);
    if let Err(e) = api::call(method, &params) {
        let _ = api::error_json(&e);
    }
});
