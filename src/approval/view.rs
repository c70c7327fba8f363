//! What an approver is shown of an action: every front end that presents a
//! pending approval (the daemon's `host.event` notification, its dashboard,
//! a webhook) builds it here, so protected parameter values are masked in
//! one place.
//!
//! A parameter is protected when its name says it carries a credential
//! (`password`, `passwd`, `secret`, `token`, `api_key`, `apikey`,
//! `credential`, `private_key`, `authorization`, `cookie`, compared
//! case-insensitively as a substring, `-` read as `_`), at any depth: its
//! value is replaced by [`MASK`] and only its name is shown.

use serde_json::{Map, Value};

/// What a protected value is shown as.
pub const MASK: &str = "••••••";

const PROTECTED: [&str; 10] = [
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "credential",
    "private_key",
    "authorization",
    "cookie",
];

/// True when a parameter of this name is protected.
pub fn is_protected(name: &str) -> bool {
    let n = name.to_ascii_lowercase().replace('-', "_");
    PROTECTED.iter().any(|p| n.contains(p))
}

/// `params` with every protected value (at any depth) masked.
pub fn masked_parameters<'a, M>(params: &'a M) -> Map<String, Value>
where
    &'a M: IntoIterator<Item = (&'a String, &'a Value)>,
{
    params
        .into_iter()
        .map(|(k, v)| (k.clone(), if is_protected(k) { Value::String(MASK.into()) } else { mask(v) }))
        .collect()
}

fn mask(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(masked_parameters(m)),
        Value::Array(a) => Value::Array(a.iter().map(mask).collect()),
        other => other.clone(),
    }
}

/// A preview of a file write the daemon cannot run itself (a client's
/// `write_file` or `edit_file`, whose file it cannot read): the unified diff
/// of an edit's `old_text` → `new_text`, or of a write's whole `content`
/// against an empty file, headed `a/<path>` / `b/<path>`. `None` for other
/// tools or parameters of another shape. A built-in tool's preview (the
/// diff against the file's real contents) comes from `tools::preview`
/// instead.
pub fn file_write_preview(tool: &str, params: &Map<String, Value>) -> Option<Value> {
    let path = params.get("path")?.as_str()?;
    let (before, after, note) = match tool {
        "edit_file" => (
            params.get("old_text")?.as_str()?.to_string(),
            params.get("new_text")?.as_str()?.to_string(),
            "the edit's old_text → new_text",
        ),
        "write_file" => (
            String::new(),
            params.get("content")?.as_str()?.to_string(),
            "the whole new content; the daemon does not read the client's file",
        ),
        _ => return None,
    };
    let with_nl = |s: String| if s.is_empty() || s.ends_with('\n') { s } else { s + "\n" };
    let (before, after) = (with_nl(before), with_nl(after));
    let diff = similar::TextDiff::from_lines(&before, &after);
    let text = diff.unified_diff().context_radius(3).header(&format!("a/{path}"), &format!("b/{path}")).to_string();
    Some(serde_json::json!({"kind": "diff", "diff": text, "note": note}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn credentials_are_masked_at_any_depth_and_the_rest_is_kept() {
        let p = json!({"command": "deploy", "API-Key": "k1", "env": {"DB_PASSWORD": "p", "region": "eu"},
                       "headers": [{"Authorization": "Bearer x"}]});
        let m = Value::Object(masked_parameters(p.as_object().unwrap()));
        assert_eq!(m["command"], "deploy");
        assert_eq!(m["API-Key"], MASK);
        assert_eq!(m["env"]["DB_PASSWORD"], MASK);
        assert_eq!(m["env"]["region"], "eu");
        assert_eq!(m["headers"][0]["Authorization"], MASK);
        assert!(!m.to_string().contains("k1") && !m.to_string().contains("Bearer"));
    }

    #[test]
    fn an_edit_previews_as_a_unified_diff() {
        let p = json!({"path": "src/a.txt", "old_text": "one\ntwo", "new_text": "one\nthree"});
        let v = file_write_preview("edit_file", p.as_object().unwrap()).unwrap();
        let d = v["diff"].as_str().unwrap();
        assert!(d.contains("--- a/src/a.txt") && d.contains("-two") && d.contains("+three"), "{d}");
        assert!(file_write_preview("shell", p.as_object().unwrap()).is_none());
        assert!(file_write_preview("write_file", p.as_object().unwrap()).is_none(), "no content");
    }
}
