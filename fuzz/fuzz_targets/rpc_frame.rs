//! The daemon's JSON-RPC frame classification: any text classifies into a
//! call, a response, a batch or an invalid frame with a JSON-RPC error code,
//! never a panic; each batch member classifies too; the error object renders.
#![no_main]

use car_runtime::server::rpc::{Frame, classify, classify_value};
use libfuzzer_sys::fuzz_target;

fn check(f: Frame, depth: u32) {
    match f {
        Frame::Invalid { id, error } => {
            assert!(id.is_null() || id.is_string() || id.is_number());
            assert!((-32768..=-32000).contains(&error.code), "code {}", error.code);
            let _ = error.to_json().to_string();
        }
        Frame::Batch(items) if depth == 0 => {
            assert!(!items.is_empty());
            for v in items {
                check(classify_value(v), depth + 1);
            }
        }
        Frame::Call { method, params, .. } => {
            assert!(!method.is_empty());
            assert!(params.is_object() || params.is_array());
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    // Frames arrive as bytes: invalid UTF-8 is refused before classify.
    let text = String::from_utf8_lossy(data);
    check(classify(&text), 0);
});
