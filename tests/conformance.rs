//! The conformance corpus: JSON cases taken from the spec's examples and
//! tables, run against the JSON facade (`car_runtime::api::call`).
//!
//! Each `tests/conformance/**/*.json` file is `{"cases": [case, ...]}` where a
//! case is `{"name", "method", "params", and one of "expected" (exact),
//! "expected_subset" (every key given must match; nested objects likewise;
//! arrays must have the same length, element by element as subsets) or "expected_error" (the error code)}`.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            // The admission corpus has its own runner in every front end
            // (tests/admission_conformance.rs).
            if p.file_name().is_some_and(|n| n == "admission") {
                continue;
            }
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
}

/// True when every key of `want` is in `got` with a matching value; arrays
/// match element by element and must have the same length.
fn subset(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w.iter().all(|(k, v)| g.get(k).is_some_and(|gv| subset(v, gv))),
        (Value::Array(w), Value::Array(g)) => w.len() == g.len() && w.iter().zip(g).all(|(w, g)| subset(w, g)),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => want == got,
    }
}

#[test]
fn conformance_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance");
    let mut paths = Vec::new();
    files(&root, &mut paths);
    assert!(!paths.is_empty(), "no conformance files under {}", root.display());
    let mut failures = Vec::new();
    let mut count = 0;
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let cases = doc["cases"].as_array().unwrap_or_else(|| panic!("{}: no `cases` array", path.display()));
        for case in cases {
            count += 1;
            let name = format!("{}::{}", path.strip_prefix(&root).unwrap_or(path).display(), case["name"]);
            let method = case["method"].as_str().unwrap_or_else(|| panic!("{name}: no method"));
            // A case may set environment variables for its call (the
            // ledger's opt-in, `CAR_LEDGER_UNAUTHENTICATED`); this test runs
            // alone in its process (nextest) and reads them only here.
            let env: Vec<(String, String)> = case["env"]
                .as_object()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                .unwrap_or_default();
            for (k, v) in &env {
                // SAFETY: no other thread of this test reads or writes the environment.
                unsafe { std::env::set_var(k, v) };
            }
            let got = car_runtime::api::call(method, &case["params"]);
            for (k, _) in &env {
                // SAFETY: as above.
                unsafe { std::env::remove_var(k) };
            }
            let ok = match (&got, case.get("expected"), case.get("expected_subset"), case.get("expected_error")) {
                (Ok(v), Some(want), _, _) => v == want,
                (Ok(v), None, Some(want), _) => subset(want, v),
                (Err(e), None, None, Some(code)) => code == e.code(),
                _ => false,
            };
            if !ok {
                let got = match &got {
                    Ok(v) => v.to_string(),
                    Err(e) => format!("error {}: {e}", e.code()),
                };
                failures.push(format!("{name}\n  got: {got}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {count} conformance cases failed:\n{}", failures.len(), failures.join("\n"));
    eprintln!("{count} conformance cases passed");
}
