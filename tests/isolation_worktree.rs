//! Worktree and readonly isolation through the facade (every front end's
//! `execute_proposal`), on git repositories the tests create.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{ToolCall, ToolExecutor};
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with `a.txt` ("one\n") committed, and a `sub/` directory.
fn repo() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("car-wt-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    git(&dir, &["config", "user.email", "t@example.com"]);
    git(&dir, &["config", "user.name", "t"]);
    std::fs::write(dir.join("a.txt"), "one\n").unwrap();
    std::fs::write(dir.join("sub/b.txt"), "bee\n").unwrap();
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-q", "-m", "first"]);
    dir
}

/// One call as a tool saw it: its tool, `cwd` and `isolation`.
type Seen = (String, Option<String>, Option<Value>);

/// Records each call's `cwd` and `isolation`; `fail` fails.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Seen>>,
}

#[async_trait]
impl ToolExecutor for Recorder {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        self.calls.lock().unwrap().push((call.tool.clone(), call.cwd.clone(), call.isolation.clone()));
        if call.tool == "fail" {
            return Err(ToolFailure::ordinary("failed on purpose"));
        }
        Ok(json!("ok"))
    }
}

fn runtime(root: &Path, isolation: Value) -> CarRuntime {
    let rt = CarRuntime::new();
    rt.register_agent_basics(Some(&root.to_string_lossy())).unwrap();
    for t in ["probe", "fail"] {
        rt.register_tool(t).unwrap();
    }
    rt.set_permissions(Some(&json!({"isolation": isolation}).to_string()), None).unwrap();
    rt
}

fn run(rt: &CarRuntime, ex: &Arc<Recorder>, actions: Value) -> Result<Value, car_runtime::Error> {
    let p = json!({"id": "p-1", "source": "t", "actions": actions});
    let t = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    t.block_on(rt.execute_proposal(&p.to_string(), ex.clone(), None, None)).map(|s| serde_json::from_str(&s).unwrap())
}

fn trees(repo: &Path) -> Vec<String> {
    git(repo, &["worktree", "list", "--porcelain"])
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_proposal_runs_in_a_worktree_and_returns_a_patch_leaving_the_host_untouched() {
    let repo = repo();
    let rt = runtime(&repo.join("sub"), json!({"kind": "worktree"}));
    let ex = Arc::new(Recorder::default());
    let r = run(
        &rt,
        &ex,
        json!([
            {"id": "w", "type": "tool_call", "tool": "write_file", "parameters": {"path": "new.txt", "content": "hi\n"}},
            {"id": "e", "type": "tool_call", "tool": "edit_file",
             "parameters": {"path": "b.txt", "old_text": "bee", "new_text": "wasp"}, "dependencies": ["w"]},
            {"id": "x", "type": "tool_call", "tool": "probe", "parameters": {}},
        ]),
    )
    .unwrap();
    assert!(r["results"].as_array().unwrap().iter().all(|a| a["status"] == "succeeded"), "{r}");
    // The host tree is untouched.
    assert!(!repo.join("sub/new.txt").exists());
    assert_eq!(std::fs::read_to_string(repo.join("sub/b.txt")).unwrap(), "bee\n");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    // The patch names both files; the tree is gone.
    let a = &r["artifacts"][0];
    assert_eq!(a["kind"], "patch");
    assert_eq!(a["isolation"], "worktree");
    assert_eq!(a["base"], git(&repo, &["rev-parse", "HEAD"]).trim());
    let mut files: Vec<&str> = a["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    files.sort();
    assert_eq!(files, ["sub/b.txt", "sub/new.txt"]);
    assert!(a["patch"].as_str().unwrap().contains("+wasp"));
    assert!(a.get("worktree").is_none(), "removed after a successful run: {a}");
    assert_eq!(trees(&repo).len(), 1, "only the main tree is left");
    // The host tool was told where to work: the host directory's place in the tree.
    let calls = ex.calls.lock().unwrap().clone();
    let (_, cwd, iso) = calls.iter().find(|c| c.0 == "probe").unwrap();
    let cwd = cwd.as_deref().unwrap();
    assert!(cwd.contains("car-worktrees") && cwd.ends_with("/sub"), "{cwd}");
    assert_eq!(iso.as_ref().unwrap()["kind"], "worktree");
    // Applying the patch is the user's decision, and it applies.
    let patch = repo.join("../").join(format!("{}.patch", uuid::Uuid::new_v4().simple()));
    std::fs::write(&patch, a["patch"].as_str().unwrap()).unwrap();
    git(&repo, &["apply", &patch.to_string_lossy()]);
    assert_eq!(std::fs::read_to_string(repo.join("sub/new.txt")).unwrap(), "hi\n");
    let _ = std::fs::remove_file(&patch);
    std::fs::remove_dir_all(&repo).unwrap();
}

#[test]
fn a_worktree_starts_at_the_given_ref() {
    let repo = repo();
    let first = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::write(repo.join("a.txt"), "two\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "second"]);
    let rt = runtime(&repo, json!({"kind": "worktree", "ref": first}));
    let ex = Arc::new(Recorder::default());
    let r =
        run(&rt, &ex, json!([{"id": "r", "type": "tool_call", "tool": "read_file", "parameters": {"path": "a.txt"}}]))
            .unwrap();
    assert!(r["results"][0]["output"].to_string().contains("one"), "{r}");
    assert_eq!(r["artifacts"][0]["base"], first);
    assert_eq!(r["artifacts"][0]["files"], json!([]));
    // A ref that names no commit is refused before anything runs.
    let rt = runtime(&repo, json!({"kind": "worktree", "ref": "no-such-branch"}));
    let e = run(&rt, &ex, json!([{"id": "x", "type": "tool_call", "tool": "probe", "parameters": {}}])).unwrap_err();
    assert!(e.to_string().contains("no-such-branch"), "{e}");
    assert!(ex.calls.lock().unwrap().iter().all(|c| c.0 != "probe"));
    std::fs::remove_dir_all(&repo).unwrap();
}

/// Registering `http_fetch` (which touches no file) sets no root: worktree
/// isolation still takes its repository from `set_working_dir`, and a
/// file tool, never registered, is not run from the current directory.
#[cfg(feature = "fetch")]
#[test]
fn the_fetch_tool_alone_leaves_the_working_dir_of_worktree_isolation() {
    let repo = repo();
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let rt = CarRuntime::new();
    rt.set_working_dir(Some(&repo));
    rt.register_fetch_tool().unwrap();
    rt.register_tool("probe").unwrap();
    rt.set_permissions(Some(&json!({"isolation": {"kind": "worktree"}}).to_string()), None).unwrap();
    let ex = Arc::new(Recorder::default());
    let r = run(&rt, &ex, json!([{"id": "x", "type": "tool_call", "tool": "probe", "parameters": {}}])).unwrap();
    assert_eq!(r["results"][0]["status"], "succeeded", "{r}");
    assert_eq!(r["artifacts"][0]["base"], head, "the tree came from the working dir: {r}");
    let calls = ex.calls.lock().unwrap().clone();
    assert!(calls[0].1.as_deref().is_some_and(|c| c.contains("car-worktrees")), "{calls:?}");
    // Without isolation the fetch tool still runs in-process (a refused
    // loopback address, decided before any connection) and the rest goes
    // to the host.
    let rt = CarRuntime::new();
    rt.register_fetch_tool().unwrap();
    rt.register_tool("probe").unwrap();
    let r = run(
        &rt,
        &ex,
        json!([
            {"id": "f", "type": "tool_call", "tool": "http_fetch", "parameters": {"url": "http://127.0.0.1:9/"}},
            {"id": "p", "type": "tool_call", "tool": "probe", "parameters": {}},
        ]),
    )
    .unwrap();
    assert_eq!(r["results"][0]["status"], "failed", "{r}");
    assert!(r["results"][0]["error"].to_string().contains("127.0.0.1"), "{r}");
    assert_eq!(r["results"][1]["status"], "succeeded", "{r}");
    assert!(ex.calls.lock().unwrap().iter().all(|c| c.0 != "http_fetch"), "the host never saw the fetch");
    std::fs::remove_dir_all(&repo).unwrap();
}

#[test]
fn a_failed_run_keeps_its_tree_when_asked_up_to_the_cap() {
    let repo = repo();
    let rt = runtime(&repo, json!({"kind": "worktree", "keep_on_error": true, "max_kept": 2}));
    let ex = Arc::new(Recorder::default());
    let mut kept = Vec::new();
    for i in 0..4 {
        let r = run(
            &rt,
            &ex,
            json!([
                {"id": "w", "type": "tool_call", "tool": "write_file", "parameters": {"path": format!("f{i}.txt"), "content": "x"}},
                {"id": "f", "type": "tool_call", "tool": "fail", "parameters": {}, "dependencies": ["w"]},
            ]),
        )
        .unwrap();
        assert_eq!(r["results"][1]["status"], "failed");
        let a = &r["artifacts"][0];
        assert_eq!(a["files"], json!([format!("f{i}.txt")]), "{a}");
        let tree = PathBuf::from(a["worktree"].as_str().expect("kept"));
        assert!(tree.join(format!("f{i}.txt")).exists());
        kept.push(tree);
    }
    // The cap: the two newest are kept, the older ones removed.
    assert!(!kept[0].exists() && !kept[1].exists());
    assert!(kept[2].exists() && kept[3].exists());
    assert_eq!(trees(&repo).len(), 3);
    // A successful run removes its tree even with keep_on_error.
    let r = run(&rt, &ex, json!([{"id": "x", "type": "tool_call", "tool": "probe", "parameters": {}}])).unwrap();
    assert!(r["artifacts"][0].get("worktree").is_none());
    assert_eq!(trees(&repo).len(), 3);
    std::fs::remove_dir_all(&repo).unwrap();
}

#[test]
fn worktree_isolation_outside_a_repository_is_a_configuration_error_and_runs_nothing() {
    let dir = std::env::temp_dir().join(format!("car-nogit-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let rt = runtime(&dir, json!({"kind": "worktree"}));
    let ex = Arc::new(Recorder::default());
    let e = run(&rt, &ex, json!([{"id": "x", "type": "tool_call", "tool": "probe", "parameters": {}}])).unwrap_err();
    assert_eq!(e.code(), "isolation_not_git", "{e}");
    assert!(e.to_string().contains("not inside"), "{e}");
    assert!(ex.calls.lock().unwrap().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn readonly_isolation_denies_the_tools_that_write() {
    let repo = repo();
    let rt = runtime(&repo, json!("readonly"));
    let ex = Arc::new(Recorder::default());
    let r = run(
        &rt,
        &ex,
        json!([
            {"id": "r", "type": "tool_call", "tool": "read_file", "parameters": {"path": "a.txt"}},
            {"id": "w", "type": "tool_call", "tool": "write_file", "parameters": {"path": "a.txt", "content": "x"}, "failure_behavior": "skip"},
            {"id": "e", "type": "tool_call", "tool": "edit_file", "parameters": {"path": "a.txt", "old_text": "one", "new_text": "x"}, "failure_behavior": "skip"},
        ]),
    )
    .unwrap();
    assert_eq!(r["results"][0]["status"], "succeeded", "{r}");
    for i in [1, 2] {
        assert_eq!(r["results"][i]["status"], "rejected", "{r}");
    }
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).unwrap(), "one\n");
    assert!(r.get("artifacts").is_none());
    // Bad specs are refused with the key named, and change nothing.
    for bad in [json!("container"), json!({"kind": "worktree", "reff": "x"})] {
        let e = rt.set_permissions(Some(&json!({"isolation": bad}).to_string()), None).unwrap_err();
        assert!(e.to_string().contains("isolation"), "{e}");
    }
    assert!(rt.admission_config().contains("readonly"), "the bad documents changed nothing");
    std::fs::remove_dir_all(&repo).unwrap();
}

#[test]
fn car_run_runs_a_plan_in_a_worktree_of_its_root() {
    use crate::cli_common;
    let repo = repo();
    let host = repo.join("sub");
    std::fs::create_dir_all(host.join(".car")).unwrap();
    std::fs::write(host.join(".car/permissions.toml"), "[isolation]\nkind = \"worktree\"\n").unwrap();
    let plan = cli_common::tmp().join("plan.json");
    std::fs::write(
        &plan,
        json!({"id": "wt", "source": "t", "actions": [
            {"id": "w", "type": "tool_call", "tool": "write_file", "parameters": {"path": "b.txt", "content": "changed\n"}}
        ]})
        .to_string(),
    )
    .unwrap();
    let elsewhere = cli_common::tmp();
    let r = cli_common::car_in(
        &elsewhere,
        &["run", &plan.to_string_lossy(), "--root", &host.to_string_lossy(), "--no-input", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.all());
    assert!(r.stderr.contains("Worktree: 1 file(s) changed, not applied"), "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["artifacts"][0]["files"], json!(["sub/b.txt"]));
    assert!(v["artifacts"][0]["patch"].as_str().unwrap().contains("+changed"));
    assert_eq!(std::fs::read_to_string(host.join("b.txt")).unwrap(), "bee\n");
    assert_eq!(trees(&repo).len(), 1);
    std::fs::remove_dir_all(&repo).unwrap();
}
