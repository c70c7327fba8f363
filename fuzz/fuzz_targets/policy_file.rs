//! The policy file loader: any text is a policy set or a `policy_parse_error`
//! style config error, never a panic; a loaded set lowers to rules that can be
//! evaluated against an action.
#![no_main]

use car_runtime::ir::parse_proposal;
use car_runtime::policy::parse_policy_text;
use libfuzzer_sys::fuzz_target;
use serde_json::Map;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(set) = parse_policy_text(text, "fuzz.toml") else { return };
    let rules = set.lower();
    let p = parse_proposal(
        r#"{"id":"p","actions":[{"id":"a","type":"tool_call","tool":"shell","parameters":{"command":"rm -rf /","path":"/etc/passwd","n":3}}]}"#,
    )
    .unwrap();
    let state = Map::new();
    for r in &rules {
        let _ = (r.rule)(&p.actions[0], &state);
    }
});
