//! Argv templates of `subprocess` tools: `["git", "log", "-n", "{count}",
//! "--", "{path}"]`. Each element is one argument; `{name}` is replaced by
//! the validated parameter `name` inside that one element, so no value can
//! add, split or quote arguments (there is no shell). `{{` and `}}` are
//! literal braces.
//!
//! - An element that is exactly `{name}` becomes the value (a string,
//!   number or boolean as text; an array of those becomes one argument per
//!   item); when the parameter is absent or null the element is dropped.
//! - A placeholder inside other text needs its parameter present.
//! - The program (the first element) is literal.
//! - A value that would start an argument with `-` before a `--` element is
//!   refused (it could be read as an option).

use serde_json::{Map, Value, json};

enum Piece<'a> {
    Text(String),
    Param(&'a str),
}

fn parse(elem: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let b = elem.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' if b.get(i + 1) == Some(&b'{') => {
                text.push('{');
                i += 2;
            }
            b'}' if b.get(i + 1) == Some(&b'}') => {
                text.push('}');
                i += 2;
            }
            b'{' => {
                let end = elem[i + 1..].find('}').ok_or_else(|| format!("`{elem}`: `{{` without `}}`"))? + i + 1;
                let name = &elem[i + 1..end];
                if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-') {
                    return Err(format!("`{elem}`: `{{{name}}}` is not a parameter name"));
                }
                if !text.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut text)));
                }
                out.push(Piece::Param(name));
                i = end + 1;
            }
            b'}' => return Err(format!("`{elem}`: a lone `}}` (write `}}}}`)")),
            _ => {
                let ch = elem[i..].chars().next().unwrap_or('\0');
                text.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

fn err(tool: &str, msg: String) -> crate::Error {
    crate::Error::config(
        "invalid_subprocess_tool",
        format!("tool `{tool}`: command: {msg}"),
        json!({"tool": tool, "field": "command"}),
    )
}

/// Checks a template at definition time: not empty, a literal program,
/// well-formed placeholders naming declared parameters.
pub fn check(tool: &str, command: &[String], parameters: &Value) -> crate::Result<()> {
    let Some(program) = command.first() else {
        return Err(err(tool, "is empty; it needs at least the program".into()));
    };
    if program.is_empty() || parse(program).map_err(|e| err(tool, e))?.iter().any(|p| matches!(p, Piece::Param(_))) {
        return Err(err(tool, format!("the program `{program}` must be a literal, non-empty name or path")));
    }
    let declared = parameters.get("properties").and_then(Value::as_object);
    for e in command {
        for p in parse(e).map_err(|m| err(tool, m))? {
            if let Piece::Param(name) = p
                && !declared.is_some_and(|d| d.contains_key(name))
            {
                return Err(err(tool, format!("`{e}` names `{name}`, which is not a declared parameter")));
            }
        }
    }
    Ok(())
}

fn scalar(name: &str, v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(format!("parameter `{name}` must be a string, number or boolean here")),
    }
}

/// The argv of one call: the template filled from `params` (already
/// validated against the tool's schema by the engine).
pub fn fill(command: &[String], params: &Map<String, Value>) -> Result<Vec<String>, String> {
    let mut argv = Vec::with_capacity(command.len());
    let mut after_dashdash = false;
    for (i, e) in command.iter().enumerate() {
        let pieces = parse(e)?;
        let guard = |arg: &str, name: &str, after: bool| -> Result<(), String> {
            if !after && i > 0 && arg.starts_with('-') {
                Err(format!("parameter `{name}` starts with `-` and would be read as an option (`{arg}`)"))
            } else {
                Ok(())
            }
        };
        if let [Piece::Param(name)] = pieces.as_slice() {
            match params.get(*name) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for it in items {
                        let s = scalar(name, it)?;
                        guard(&s, name, after_dashdash)?;
                        argv.push(s);
                    }
                }
                Some(v) => {
                    let s = scalar(name, v)?;
                    guard(&s, name, after_dashdash)?;
                    argv.push(s);
                }
            }
            continue;
        }
        let mut arg = String::new();
        for (k, p) in pieces.iter().enumerate() {
            match p {
                Piece::Text(t) => arg.push_str(t),
                Piece::Param(name) => {
                    let v = params
                        .get(*name)
                        .filter(|v| !v.is_null())
                        .ok_or_else(|| format!("parameter `{name}` is required by the argument `{e}`"))?;
                    let s = scalar(name, v)?;
                    if k == 0 {
                        guard(&s, name, after_dashdash)?;
                    }
                    arg.push_str(&s);
                }
            }
        }
        if arg.contains('\0') {
            return Err(format!("the argument `{e}` would contain a NUL byte"));
        }
        if e == "--" {
            after_dashdash = true;
        }
        argv.push(arg);
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err("a parameter contains a NUL byte".into());
    }
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: Value) -> Map<String, Value> {
        x.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn fills_one_argument_per_element() {
        let t: Vec<String> = ["git", "log", "-n", "{n}", "--format={fmt}", "--", "{paths}"].map(String::from).into();
        let a = fill(&t, &v(json!({"n": 3, "fmt": "%H; rm -rf /", "paths": ["a b", "-c"]}))).unwrap();
        assert_eq!(a, ["git", "log", "-n", "3", "--format=%H; rm -rf /", "--", "a b", "-c"]);
        let a = fill(&t, &v(json!({"n": 1, "fmt": "x"}))).unwrap();
        assert_eq!(a, ["git", "log", "-n", "1", "--format=x", "--"]);
        let e = fill(&t, &v(json!({"n": "--output=/etc/passwd", "fmt": "x"}))).unwrap_err();
        assert!(e.contains("`n` starts with `-`"), "{e}");
        let e = fill(&t, &v(json!({"n": 1}))).unwrap_err();
        assert!(e.contains("`fmt` is required"), "{e}");
        assert_eq!(fill(&["echo".into(), "{{{x}}}".into()], &v(json!({"x": "y"}))).unwrap(), ["echo", "{y}"]);
    }

    #[test]
    fn checks_templates() {
        let params = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        assert!(check("t", &["ls".into(), "{n}".into()], &params).is_ok());
        for bad in [vec![], vec!["{n}".to_string()], vec!["ls".into(), "{m}".into()], vec!["ls".into(), "{n".into()]] {
            let e = check("t", &bad, &params).unwrap_err();
            assert_eq!(e.code(), "invalid_subprocess_tool", "{bad:?}");
        }
    }
}
