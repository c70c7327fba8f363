//! Not a test: the bridge `scripts/oracle-diff-verify.py` uses to run this
//! crate's facade on generated cases. Ignored, so CI never runs it.
//!
//! `CAR_DIFF_IN` names a file of JSON lines `{"method", "params"}`; the answer
//! of `car_runtime::api::call` for each is written as a JSON line
//! `{"ok": value}` or `{"error": code}` to the file named by `CAR_DIFF_OUT`.

use std::io::Write;

use serde_json::{Value, json};

#[test]
#[ignore = "run by scripts/oracle-diff-verify.py, not by CI"]
fn oracle_diff_bridge() {
    let (Ok(input), Ok(output)) = (std::env::var("CAR_DIFF_IN"), std::env::var("CAR_DIFF_OUT")) else {
        panic!("set CAR_DIFF_IN and CAR_DIFF_OUT (see scripts/oracle-diff-verify.py)");
    };
    let text = std::fs::read_to_string(&input).expect("read CAR_DIFF_IN");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&output).expect("create CAR_DIFF_OUT"));
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: Value = serde_json::from_str(line).expect("a JSON line");
        let method = case["method"].as_str().unwrap_or_default();
        let answer = match car_runtime::api::call(method, &case["params"]) {
            Ok(v) => json!({"ok": v}),
            Err(e) => json!({"error": e.code(), "message": e.to_string()}),
        };
        writeln!(out, "{answer}").expect("write CAR_DIFF_OUT");
    }
}
