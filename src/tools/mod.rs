//! The built-in tools: `read_file`, `write_file`, `edit_file`, `list_dir`,
//! `find_files`, `grep_files`, `calculate`, `shell` and (feature `fetch`)
//! `http_fetch` ([`fetch`]).
//!
//! Each declares its ToolSchema (source `builtin`), its risk class and its
//! reversibility. Every file tool is confined to a root directory: a path
//! escaping it through `..` or an absolute path is refused before any I/O,
//! and every file is opened relative to the root's directory handle with no
//! symlink followed on any component, so a symlink swapped in mid-call
//! cannot redirect it (see `confine`). Writes refuse files with more than
//! one hard link and protected paths (the runtime's `.car` configuration and
//! approvals files, see [`protected_path`]). Execution is synchronous and
//! blocking; the engine's executor runs it off the async threads.

mod calc;
mod confine;
pub mod executor;
#[cfg(feature = "fetch")]
pub mod fetch;

use std::time::Duration;

use serde_json::{Map, Value, json};

pub use calc::evaluate as calculate;
pub use confine::{CONFIG_DIR, PROTECTED_FILE_NAMES, Root, protected_path};
use confine::{RelPath, op_err};
pub use executor::BuiltinExecutor;
use rustix::fd::OwnedFd;
use rustix::fs::FileType;

use crate::ir::{Reversibility, ToolFailure, ToolSchema, ToolSource};

/// Largest file `read_file` returns and `edit_file` edits (10 MiB).
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Most paths `find_files` returns.
pub const MAX_FIND_RESULTS: usize = 10_000;
/// Most lines `grep_files` returns.
pub const MAX_GREP_RESULTS: usize = 1_000;
/// Most bytes of stdout or stderr `shell` keeps.
pub const MAX_SHELL_OUTPUT: usize = 1024 * 1024;
/// Default `shell` timeout when the call gives none.
pub const DEFAULT_SHELL_TIMEOUT_MS: u64 = 120_000;

/// A built-in tool's declaration.
#[derive(Debug, Clone)]
pub struct BuiltinTool {
    /// Its schema (source `builtin`).
    pub schema: ToolSchema,
    /// Its risk class: `read`, `write`, `execute`.
    pub risk: &'static str,
    /// What the runtime believes about undoing its effect.
    pub reversibility: Reversibility,
}

fn decl(name: &str, description: &str, parameters: Value, risk: &'static str, rev: Reversibility) -> BuiltinTool {
    let mut schema = ToolSchema::named(name);
    schema.source = ToolSource::Builtin;
    schema.description = description.to_string();
    schema.parameters = parameters;
    schema.idempotent = risk == "read";
    BuiltinTool { schema, risk, reversibility: rev }
}

/// Every built-in tool, sorted by name.
pub fn builtin_tools() -> Vec<BuiltinTool> {
    use Reversibility::*;
    let path = json!({"type": "string", "description": "path relative to the root"});
    let mut v = vec![
        decl(
            "calculate",
            "Evaluate an arithmetic expression (+ - * / % ^, parentheses, sqrt, abs, floor, ceil, round, ln, log10, exp, sin, cos, tan, pi, e).",
            json!({"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}),
            "read",
            Reversible,
        ),
        decl(
            "edit_file",
            "Replace `old_text` with `new_text` in a file; `old_text` must occur exactly once unless `replace_all`.",
            json!({"type": "object", "properties": {"path": path, "old_text": {"type": "string"}, "new_text": {"type": "string"}, "replace_all": {"type": "boolean"}}, "required": ["path", "old_text", "new_text"]}),
            "write",
            Irreversible,
        ),
        decl(
            "find_files",
            "Find files whose path relative to `path` matches a glob (`*`, `?`, `**`).",
            json!({"type": "object", "properties": {"pattern": {"type": "string"}, "path": path}, "required": ["pattern"]}),
            "read",
            Reversible,
        ),
        decl(
            "grep_files",
            "Search file contents under `path` for a regular expression; `glob` limits the files searched.",
            json!({"type": "object", "properties": {"pattern": {"type": "string"}, "path": path, "glob": {"type": "string"}}, "required": ["pattern"]}),
            "read",
            Reversible,
        ),
        #[cfg(feature = "fetch")]
        decl(
            fetch::FETCH_TOOL,
            "Fetch an http:// or https:// URL (method, headers, body) and return its status, headers and body. The host and every address it resolves to are checked against the domain rules and the egress allowlist before connecting; loopback, private, link-local and metadata addresses are refused unless allowlisted; redirects get the same checks.",
            fetch::parameters(),
            "network",
            Irreversible,
        ),
        decl(
            "list_dir",
            "List a directory's entries with their kind and size.",
            json!({"type": "object", "properties": {"path": path}}),
            "read",
            Reversible,
        ),
        decl(
            "read_file",
            "Read a UTF-8 text file; `offset` (0-based line) and `limit` (lines) select a window.",
            json!({"type": "object", "properties": {"path": path, "offset": {"type": "integer", "minimum": 0}, "limit": {"type": "integer", "minimum": 0}}, "required": ["path"]}),
            "read",
            Reversible,
        ),
        decl(
            "shell",
            "Run a shell command in the root directory and return its exit code, stdout and stderr.",
            json!({"type": "object", "properties": {"command": {"type": "string"}, "timeout_ms": {"type": "integer", "minimum": 1}}, "required": ["command"]}),
            "execute",
            Irreversible,
        ),
        decl(
            "write_file",
            "Write a UTF-8 text file, creating parent directories; replaces the file's content.",
            json!({"type": "object", "properties": {"path": path, "content": {"type": "string"}}, "required": ["path", "content"]}),
            "write",
            Irreversible,
        ),
    ];
    v.sort_by(|a, b| a.schema.name.cmp(&b.schema.name));
    v
}

/// The built-in tool of that name.
pub fn builtin_tool(name: &str) -> Option<BuiltinTool> {
    builtin_tools().into_iter().find(|t| t.schema.name == name)
}

fn str_param<'a>(p: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolFailure> {
    p.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolFailure::ordinary(format!("parameter `{key}` is required and must be a string")))
}

fn opt_str<'a>(p: &'a Map<String, Value>, key: &str, default: &'a str) -> Result<&'a str, ToolFailure> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(ToolFailure::ordinary(format!("parameter `{key}` must be a string"))),
    }
}

fn io_err(what: &str, rel: &str, e: std::io::Error) -> ToolFailure {
    ToolFailure::ordinary(format!("cannot {what} `{rel}`: {e}"))
}

/// Runs a built-in tool inside `root`.
pub fn execute(root: &Root, name: &str, params: &Map<String, Value>) -> Result<Value, ToolFailure> {
    match name {
        "read_file" => read_file(root, params),
        "write_file" => {
            let r = root.rel(str_param(params, "path")?)?;
            let content = str_param(params, "content")?;
            let created = root.write(&r, content.as_bytes())?;
            Ok(json!({"path": r.shown(), "bytes_written": content.len(), "created": created}))
        }
        "edit_file" => {
            let (r, _, new, count) = edit_result(root, params)?;
            root.write(&r, new.as_bytes())?;
            Ok(json!({"path": r.shown(), "replacements": count}))
        }
        "list_dir" => {
            let r = root.rel(opt_str(params, "path", ".")?)?;
            let o = root.open_read(&r).map_err(|e| op_err("list", &r.given, e))?;
            if o.kind() != FileType::Directory {
                return Err(ToolFailure::ordinary(format!("cannot list `{}`: not a directory", r.given)));
            }
            let mut entries = Vec::new();
            for e in confine::entries(&o.fd).map_err(|e| io_err("list", &r.given, e))? {
                let kind = match e.kind() {
                    FileType::Symlink => "symlink",
                    FileType::Directory => "dir",
                    _ => "file",
                };
                entries.push(json!({"name": e.name.to_string_lossy(), "kind": kind, "size": e.stat.st_size}));
            }
            Ok(json!({"path": r.shown(), "entries": entries}))
        }
        "find_files" => {
            let pattern = str_param(params, "pattern")?;
            let r = root.rel(opt_str(params, "path", ".")?)?;
            let re = glob_regex(pattern).map_err(ToolFailure::ordinary)?;
            let base = root.open_read(&r).map_err(|e| op_err("search", &r.given, e))?;
            let mut matches = Vec::new();
            let mut truncated = false;
            if base.kind() == FileType::Directory {
                walk(&base.fd, "", &mut |relp, _, _| {
                    if re.is_match(relp) {
                        if matches.len() >= MAX_FIND_RESULTS {
                            truncated = true;
                            return false;
                        }
                        matches.push(under(&r, relp));
                    }
                    true
                });
            }
            matches.sort();
            Ok(json!({"matches": matches, "truncated": truncated}))
        }
        "grep_files" => grep_files(root, params),
        "calculate" => {
            let expr = str_param(params, "expression")?;
            let v = calc::evaluate(expr).map_err(|e| ToolFailure::ordinary(format!("cannot evaluate: {e}")))?;
            Ok(json!({"expression": expr, "result": v}))
        }
        "shell" => shell(root, params),
        crate::permission::FETCH_TOOL => Err(ToolFailure::terminal(
            "`http_fetch` runs through the runtime's executor (BuiltinExecutor), not this synchronous entry point",
        )),
        other => Err(ToolFailure::ordinary(format!("`{other}` is not a built-in tool"))),
    }
}

/// `relp` (relative to the directory `base`) relative to the root.
fn under(base: &RelPath, relp: &str) -> String {
    if base.parts.is_empty() { relp.to_string() } else { format!("{}/{relp}", base.shown()) }
}

fn read_file(root: &Root, params: &Map<String, Value>) -> Result<Value, ToolFailure> {
    let r = root.rel(str_param(params, "path")?)?;
    let text = root.read_text(&r, MAX_FILE_BYTES)?;
    let offset = params.get("offset").and_then(Value::as_u64);
    let limit = params.get("limit").and_then(Value::as_u64);
    let total_lines = text.lines().count();
    let content = if offset.is_some() || limit.is_some() {
        let skip = offset.unwrap_or(0) as usize;
        let take = limit.map(|l| l as usize).unwrap_or(usize::MAX);
        text.lines().skip(skip).take(take).collect::<Vec<_>>().join("\n")
    } else {
        text
    };
    Ok(json!({"path": r.shown(), "content": content, "lines": total_lines}))
}

/// The path, the text before and after, and the replacement count of an
/// `edit_file` call. A protected path is refused before it is read.
fn edit_result(root: &Root, params: &Map<String, Value>) -> Result<(RelPath, String, String, usize), ToolFailure> {
    let rel = str_param(params, "path")?;
    let old = str_param(params, "old_text")?;
    let new = str_param(params, "new_text")?;
    let all = params.get("replace_all").and_then(Value::as_bool).unwrap_or(false);
    if old.is_empty() {
        return Err(ToolFailure::ordinary("parameter `old_text` must not be empty"));
    }
    let r = root.rel(rel)?;
    root.check_writable(&r)?;
    let text = root.read_text(&r, MAX_FILE_BYTES)?;
    let count = text.matches(old).count();
    if count == 0 {
        return Err(ToolFailure::ordinary(format!("`old_text` does not occur in `{rel}`")));
    }
    if count > 1 && !all {
        return Err(ToolFailure::ordinary(format!(
            "`old_text` occurs {count} times in `{rel}`; pass `replace_all` or a longer `old_text`"
        )));
    }
    let after = text.replace(old, new);
    Ok((r, text, after, count))
}

/// A unified diff of what a `write_file` or `edit_file` call would change,
/// computed without writing anything. `None` for other tools; an error when
/// the call itself would fail (for instance a path escaping the root, or a
/// protected path).
pub fn preview(root: &Root, name: &str, params: &Map<String, Value>) -> Result<Option<String>, ToolFailure> {
    let (rel, before, after) = match name {
        "write_file" => {
            let r = root.rel(str_param(params, "path")?)?;
            root.check_writable(&r)?;
            let before = if root.exists(&r)? { root.read_text(&r, MAX_FILE_BYTES)? } else { String::new() };
            (r.shown(), before, str_param(params, "content")?.to_string())
        }
        "edit_file" => {
            let (r, before, after, _) = edit_result(root, params)?;
            (r.shown(), before, after)
        }
        _ => return Ok(None),
    };
    let diff = similar::TextDiff::from_lines(&before, &after);
    Ok(Some(diff.unified_diff().context_radius(3).header(&format!("a/{rel}"), &format!("b/{rel}")).to_string()))
}

/// Walks the regular files under the directory `dir` through handles,
/// following no symlink; `f` gets each file's path relative to the walk's
/// base, its directory and its name, and returns false to stop.
fn walk(dir: &OwnedFd, prefix: &str, f: &mut dyn FnMut(&str, &OwnedFd, &std::ffi::OsStr) -> bool) -> bool {
    let Ok(entries) = confine::entries(dir) else { return true };
    for e in entries {
        let name = e.name.to_string_lossy();
        let relp = if prefix.is_empty() { name.into_owned() } else { format!("{prefix}/{name}") };
        match e.kind() {
            FileType::Directory => {
                let Ok(sub) = confine::open_entry(dir, &e.name, true) else { continue };
                if !walk(&sub.fd, &relp, f) {
                    return false;
                }
            }
            FileType::RegularFile if !f(&relp, dir, &e.name) => return false,
            _ => {}
        }
    }
    true
}

/// Translates a glob (`*` within a segment, `**` across segments, `?`) into
/// an anchored regex. A pattern without `/` matches the file name at any depth.
pub fn glob_regex(glob: &str) -> Result<regex::Regex, String> {
    let mut re = String::from("^");
    if !glob.contains('/') {
        re.push_str("(?:.*/)?");
    }
    let chars: Vec<char> = glob.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' if chars.get(i + 1) == Some(&'*') => {
                if chars.get(i + 2) == Some(&'/') {
                    re.push_str("(?:.*/)?");
                    i += 3;
                } else {
                    re.push_str(".*");
                    i += 2;
                }
                continue;
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    re.push('$');
    regex::Regex::new(&re).map_err(|e| format!("bad glob `{glob}`: {e}"))
}

fn grep_files(root: &Root, params: &Map<String, Value>) -> Result<Value, ToolFailure> {
    let pattern = str_param(params, "pattern")?;
    let r = root.rel(opt_str(params, "path", ".")?)?;
    let re = regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ToolFailure::ordinary(format!("bad regular expression: {e}")))?;
    let filter = match params.get("glob").and_then(Value::as_str) {
        Some(g) => Some(glob_regex(g).map_err(ToolFailure::ordinary)?),
        None => None,
    };
    let base = root.open_read(&r).map_err(|e| op_err("search", &r.given, e))?;
    let mut matches = Vec::new();
    let mut truncated = false;
    let mut search = |shown: String, text: &str| -> bool {
        for (n, line) in text.lines().enumerate() {
            if re.is_match(line) {
                if matches.len() >= MAX_GREP_RESULTS {
                    truncated = true;
                    return false;
                }
                matches.push(json!({"path": shown, "line": n + 1, "text": line}));
            }
        }
        true
    };
    match base.kind() {
        FileType::RegularFile => {
            if let Ok(text) = confine::read_opened(base, &r.given, MAX_FILE_BYTES) {
                search(r.shown(), &text);
            }
        }
        FileType::Directory => {
            walk(&base.fd, "", &mut |relp, dir, name| {
                if let Some(f) = &filter
                    && !f.is_match(relp)
                {
                    return true;
                }
                let Ok(o) = confine::open_entry(dir, name, false) else { return true };
                let Ok(text) = confine::read_opened(o, relp, MAX_FILE_BYTES) else { return true };
                search(under(&r, relp), &text)
            });
        }
        _ => {}
    }
    Ok(json!({"matches": matches, "truncated": truncated}))
}

/// Runs `sh -c command` in the root through the subprocess executor
/// under `profile` (see [`crate::sandbox`]); the event data of the run is
/// the second value.
pub fn shell_with(
    root: &Root,
    params: &Map<String, Value>,
    profile: crate::Result<Option<crate::sandbox::Profile>>,
) -> (Result<Value, ToolFailure>, Value) {
    let command = match str_param(params, "command") {
        Ok(c) => c,
        Err(e) => return (Err(e), Value::Null),
    };
    let timeout = Duration::from_millis(
        params.get("timeout_ms").and_then(Value::as_u64).unwrap_or(DEFAULT_SHELL_TIMEOUT_MS).max(1),
    );
    let argv = ["sh".to_string(), "-c".to_string(), command.to_string()];
    crate::sandbox::execute_command(root.path(), "shell", &argv, Some(timeout), profile, MAX_SHELL_OUTPUT)
}

/// `shell` under the default profile (`workspace-write`).
fn shell(root: &Root, params: &Map<String, Value>) -> Result<Value, ToolFailure> {
    shell_with(root, params, crate::sandbox::SandboxConfig::default().for_tool("shell", None)).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn tmp() -> (std::path::PathBuf, Root) {
        let dir = std::env::temp_dir().join(format!("car-tools-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("src/deep")).unwrap();
        std::fs::write(dir.join("README.md"), "hello\nworld\n").unwrap();
        std::fs::write(dir.join("src/lib.rs"), "fn main() {}\n// world\n").unwrap();
        std::fs::write(dir.join("src/deep/x.rs"), "x\n").unwrap();
        let root = Root::new(&dir).unwrap();
        (dir, root)
    }

    fn p(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn file_tools() {
        let (dir, root) = tmp();
        let r = execute(&root, "read_file", &p(json!({"path": "README.md"}))).unwrap();
        assert_eq!(r["content"], "hello\nworld\n");
        let r = execute(&root, "read_file", &p(json!({"path": "README.md", "offset": 1, "limit": 1}))).unwrap();
        assert_eq!(r["content"], "world");
        assert!(execute(&root, "read_file", &p(json!({"path": "../etc/passwd"}))).is_err());
        assert!(execute(&root, "read_file", &p(json!({}))).unwrap_err().message.contains("`path`"));

        let diff = preview(&root, "write_file", &p(json!({"path": "README.md", "content": "hello\nthere\n"})))
            .unwrap()
            .unwrap();
        assert!(diff.contains("-world") && diff.contains("+there"), "{diff}");
        assert_eq!(std::fs::read_to_string(dir.join("README.md")).unwrap(), "hello\nworld\n", "preview writes nothing");

        let r = execute(&root, "write_file", &p(json!({"path": "out/new.txt", "content": "a"}))).unwrap();
        assert_eq!(r["created"], true);
        assert!(execute(&root, "write_file", &p(json!({"path": "../escape.txt", "content": "a"}))).is_err());
        assert!(!dir.parent().unwrap().join("escape.txt").exists());

        let e = execute(&root, "edit_file", &p(json!({"path": "src/lib.rs", "old_text": "zzz", "new_text": "y"})));
        assert!(e.unwrap_err().message.contains("does not occur"));
        std::fs::write(dir.join("twice.txt"), "a a").unwrap();
        let e = execute(&root, "edit_file", &p(json!({"path": "twice.txt", "old_text": "a", "new_text": "b"})));
        assert!(e.unwrap_err().message.contains("2 times"));
        let r = execute(
            &root,
            "edit_file",
            &p(json!({"path": "twice.txt", "old_text": "a", "new_text": "b", "replace_all": true})),
        )
        .unwrap();
        assert_eq!(r["replacements"], 2);
        assert_eq!(std::fs::read_to_string(dir.join("twice.txt")).unwrap(), "b b");

        let r = execute(&root, "list_dir", &p(json!({}))).unwrap();
        let names: Vec<_> = r["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["README.md", "out", "src", "twice.txt"]);

        let r = execute(&root, "find_files", &p(json!({"pattern": "*.rs"}))).unwrap();
        assert_eq!(r["matches"], json!(["src/deep/x.rs", "src/lib.rs"]));
        let r = execute(&root, "find_files", &p(json!({"pattern": "src/*.rs"}))).unwrap();
        assert_eq!(r["matches"], json!(["src/lib.rs"]));
        let r = execute(&root, "find_files", &p(json!({"pattern": "src/**/*.rs"}))).unwrap();
        assert_eq!(r["matches"], json!(["src/deep/x.rs", "src/lib.rs"]));

        let r = execute(&root, "grep_files", &p(json!({"pattern": "wor.d"}))).unwrap();
        assert_eq!(r["matches"].as_array().unwrap().len(), 2);
        let r = execute(&root, "grep_files", &p(json!({"pattern": "world", "glob": "*.md"}))).unwrap();
        assert_eq!(r["matches"], json!([{"path": "README.md", "line": 2, "text": "world"}]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn calculate_and_shell() {
        let (dir, root) = tmp();
        assert_eq!(execute(&root, "calculate", &p(json!({"expression": "2+3*4"}))).unwrap()["result"], 14.0);
        let r = execute(&root, "shell", &p(json!({"command": "echo hi; ls README.md"}))).unwrap();
        assert_eq!(r["stdout"], "hi\nREADME.md\n");
        let e = execute(&root, "shell", &p(json!({"command": "echo oops >&2; exit 3"}))).unwrap_err();
        assert!(e.message.contains("status 3") && e.message.contains("oops"), "{e}");
        let e = execute(&root, "shell", &p(json!({"command": "sleep 5", "timeout_ms": 50}))).unwrap_err();
        assert!(e.message.contains("timed out"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Whether process `pid` is gone (or only a zombie waiting to be reaped).
    #[cfg(target_os = "linux")]
    fn gone(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        }
    }

    /// A background child holding the pipes does not hold the call: it
    /// returns at the timeout with what the command printed, and the whole
    /// process group is killed. The test asserts the structure (the
    /// background `sleep` is dead long before its 12 s are up), not a
    /// wall-clock bound.
    #[cfg(target_os = "linux")]
    #[test]
    fn shell_background_children_are_killed_at_the_timeout() {
        let (dir, root) = tmp();
        let start = Instant::now();
        let r = execute(&root, "shell", &p(json!({"command": "sleep 12 & echo $!", "timeout_ms": 1000}))).unwrap();
        let took = start.elapsed();
        eprintln!("shell: `sleep 12 & echo $!` with timeout_ms 1000 returned after {took:?}");
        let pid = r["stdout"].as_str().unwrap().trim().to_string();
        assert!(pid.parse::<u32>().is_ok(), "{r}");
        assert_eq!(r["exit_code"], 0, "{r}");
        assert_eq!(r["background_killed"], true, "{r}");
        let mut waited = 0;
        while !gone(&pid) && waited < 200 {
            std::thread::sleep(Duration::from_millis(10));
            waited += 1;
        }
        assert!(gone(&pid), "the background sleep {pid} was killed with its group");
        assert!(took < Duration::from_secs(8), "returned after {took:?}, not after the 12 s sleep");

        // A command still running at its timeout: the group dies with it,
        // its grandchildren included.
        let e =
            execute(&root, "shell", &p(json!({"command": "sleep 12 & echo $! > bg.pid; sleep 12", "timeout_ms": 300})))
                .unwrap_err();
        assert!(e.message.contains("timed out"), "{e}");
        let pid = std::fs::read_to_string(dir.join("bg.pid")).unwrap().trim().to_string();
        let mut waited = 0;
        while !gone(&pid) && waited < 200 {
            std::thread::sleep(Duration::from_millis(10));
            waited += 1;
        }
        assert!(gone(&pid), "the background sleep {pid} of a timed-out command was killed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn declarations() {
        let names: Vec<_> = builtin_tools().iter().map(|t| t.schema.name.clone()).collect();
        let mut expected =
            vec!["calculate", "edit_file", "find_files", "grep_files", "list_dir", "read_file", "shell", "write_file"];
        if cfg!(feature = "fetch") {
            expected.insert(4, "http_fetch");
        }
        assert_eq!(names, expected);
        assert!(builtin_tools().iter().all(|t| t.schema.source == ToolSource::Builtin));
        assert_eq!(builtin_tool("write_file").unwrap().risk, "write");
        assert_eq!(builtin_tool("read_file").unwrap().reversibility, Reversibility::Reversible);
    }
}
