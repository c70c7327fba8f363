//! The IR parser: any text either parses into a proposal or is a typed input
//! error; a parsed proposal round-trips through its JSON form.
#![no_main]

use car_runtime::api::{parse_proposal, proposal_to_json};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match parse_proposal(text) {
        Ok(p) => {
            let json = proposal_to_json(&p);
            let again = parse_proposal(&json).expect("a normalized proposal re-parses");
            assert_eq!(proposal_to_json(&again), json, "normalization is a fixed point");
        }
        Err(e) => {
            // Every error renders as the facade's JSON and names a code.
            let v = e.to_json();
            assert!(v.get("code").and_then(|c| c.as_str()).is_some_and(|c| !c.is_empty()));
        }
    }
});
