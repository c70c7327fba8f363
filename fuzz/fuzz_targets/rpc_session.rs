//! The daemon's frames after auth: up to 16 newline-separated text frames
//! go through one authenticated, negotiated connection's gates and
//! dispatcher (`car_runtime::server::fuzz_frames_after_auth`: the real
//! `on_text` → `step` → `methods::run` path, tool callbacks answered with a
//! tool error, no socket). Nothing panics (a handler panic is caught and
//! answered `handler '…' failed unexpectedly`, which fails the target here),
//! every frame sent back is JSON-RPC 2.0, and every error code is in range.
#![no_main]

use car_runtime::server::fuzz_frames_after_auth;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn check(v: &Value) {
    match v {
        Value::Array(items) => {
            assert!(!items.is_empty(), "an empty batch reply");
            items.iter().for_each(check);
        }
        Value::Object(o) => {
            assert_eq!(o.get("jsonrpc"), Some(&Value::from("2.0")), "{v}");
            if let Some(e) = o.get("error") {
                let code = e["code"].as_i64().expect("an error code");
                assert!((-32768..=-32000).contains(&code), "code {code}");
                let msg = e["message"].as_str().expect("an error message");
                assert!(!msg.contains("failed unexpectedly"), "a handler panicked: {msg}");
            }
        }
        other => panic!("not a JSON-RPC frame: {other}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let frames: Vec<&str> = text.split('\n').take(16).collect();
    for v in fuzz_frames_after_auth(&frames) {
        check(&v);
    }
});
