//! The sandbox under `shell` and subprocess tools, with real processes on
//! this machine, through the runtime facade the bindings use.
//!
//! Every case needs the kernel features `car sandbox check` reports; the
//! first test fails loudly naming any that is missing (it never skips).

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolExecutor};
use serde_json::{Value, json};

struct Ws {
    dir: PathBuf,
    outside: PathBuf,
}

impl Ws {
    fn new() -> Ws {
        let base = std::env::temp_dir().join(format!("car-sandbox-test-{}", uuid::Uuid::new_v4()));
        let dir = base.join("root");
        let outside = base.join("outside");
        std::fs::create_dir_all(dir.join(".car")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(dir.join(".car/permissions.toml"), "# the operator's\n").unwrap();
        Ws { dir, outside }
    }
}

impl Drop for Ws {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.dir.parent().unwrap());
    }
}

fn runtime(ws: &Ws, sandbox: Value) -> CarRuntime {
    let rt = CarRuntime::new();
    rt.register_shell_tool(Some(ws.dir.to_str().unwrap())).unwrap();
    rt.set_permissions(Some(&json!({"sandbox": sandbox}).to_string()), None).unwrap();
    rt
}

fn host() -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(|_| Err("no host tools here".into())))
}

/// Runs `command` through `shell`; the action's result and the run's
/// `SandboxRun` event.
fn shell(rt: &CarRuntime, command: &str, timeout_ms: Option<u64>) -> (Value, Value) {
    let mut params = json!({"command": command});
    if let Some(t) = timeout_ms {
        params["timeout_ms"] = json!(t);
    }
    let id = uuid::Uuid::new_v4().to_string();
    let p =
        json!({"actions": [{"id": id, "type": "tool_call", "tool": "shell", "parameters": params, "max_retries": 0}]});
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let out = tokio.block_on(rt.execute_proposal(&p.to_string(), host(), None, None)).unwrap();
    let out: Value = serde_json::from_str(&out).unwrap();
    let events: Value =
        serde_json::from_str(&rt.event_query(&json!({"kinds": ["SandboxRun"], "action_id": id}).to_string()).unwrap())
            .unwrap();
    let failed: Value = serde_json::from_str(
        &rt.event_query(&json!({"kinds": ["ActionFailed"], "action_id": id}).to_string()).unwrap(),
    )
    .unwrap();
    let mut r = out["results"][0].clone();
    r["error_class"] = failed["events"][0]["data"]["error_class"].clone();
    (r, events["events"][0]["data"].clone())
}

fn ok_stdout(r: &Value) -> String {
    assert_eq!(r["status"], "succeeded", "{r}");
    r["output"]["stdout"].as_str().unwrap().to_string()
}

fn error(r: &Value) -> String {
    assert_eq!(r["status"], "failed", "{r}");
    r["error"].as_str().unwrap().to_string()
}

fn ws_default() -> (Ws, CarRuntime) {
    let ws = Ws::new();
    let rt = runtime(&ws, json!({}));
    (ws, rt)
}

#[test]
fn the_machine_can_enforce_every_preset() {
    let report = car_runtime::sandbox::probe().report();
    for (name, v) in report["presets"].as_object().unwrap() {
        assert_eq!(v["enforceable"], true, "preset `{name}` cannot be enforced on this machine: {}", v["missing"]);
    }
}

#[test]
fn writes_inside_the_root_succeed_and_outside_fail_with_eacces() {
    let (ws, rt) = ws_default();
    let (r, ev) = shell(&rt, "echo in > inside.txt && cat inside.txt", None);
    assert_eq!(ok_stdout(&r), "in\n");
    assert_eq!(r["output"]["sandbox"], "workspace-write");
    assert_eq!(
        (ev["profile"].as_str(), ev["outcome"].as_str(), ev["exit_code"].as_i64()),
        (Some("workspace-write"), Some("exited"), Some(0)),
        "{ev}"
    );
    let target = ws.outside.join("x.txt");
    let (r, ev) = shell(&rt, &format!("echo out > {}", target.display()), None);
    assert!(error(&r).contains("Permission denied"), "{r}");
    assert_eq!(ev["exit_code"], 2, "{ev}");
    assert!(!target.exists());
    // The private temp directory is writable, private to the run (a tmpfs
    // of its own: the host sees an empty directory), and gone after it.
    let (r, _) = shell(&rt, "echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo \"$TMPDIR\"", None);
    let out = ok_stdout(&r);
    let tmp = out.lines().nth(1).unwrap();
    assert_eq!(out.lines().next(), Some("t"), "{out}");
    assert!(!Path::new(tmp).join("t").exists(), "{tmp}/t is gone after the run");
    let (r, _) = shell(&rt, "ls -A \"$TMPDIR\"", None);
    assert_eq!(ok_stdout(&r), "", "the next run's temp directory starts empty");
}

#[test]
fn a_symlink_inside_the_root_cannot_be_written_through() {
    let (ws, rt) = ws_default();
    let victim = ws.outside.join("victim.txt");
    std::fs::write(&victim, "original\n").unwrap();
    std::os::unix::fs::symlink(&victim, ws.dir.join("link")).unwrap();
    std::os::unix::fs::symlink(&ws.outside, ws.dir.join("dirlink")).unwrap();
    let (r, _) = shell(&rt, "echo pwned > link", None);
    assert!(error(&r).contains("Permission denied"), "{r}");
    let (r, _) = shell(&rt, "echo pwned > dirlink/new.txt", None);
    assert!(error(&r).contains("Permission denied"), "{r}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original\n");
    assert!(!ws.outside.join("new.txt").exists());
}

#[test]
fn the_runtimes_own_files_cannot_be_changed() {
    let (ws, rt) = ws_default();
    // Spelled so no text matcher sees `.car`: the kernel refuses anyway.
    for cmd in [
        "d=.ca; echo evil >> ${d}r/permissions.toml",
        "d=.ca; mkdir -p ${d}r/policies && echo x > ${d}r/policies/p.toml",
        "d=.ca; rm -f ${d}r/permissions.toml",
        "d=.ca; mv ${d}r moved",
    ] {
        let (r, _) = shell(&rt, cmd, None);
        assert_eq!(r["status"], "failed", "`{cmd}` must fail: {r}");
    }
    assert_eq!(std::fs::read_to_string(ws.dir.join(".car/permissions.toml")).unwrap(), "# the operator's\n");
    assert!(!ws.dir.join(".car/policies").exists() && !ws.dir.join("moved").exists());
    // An approvals file that exists is read-only too.
    std::fs::write(ws.dir.join("approvals.jsonl"), "").unwrap();
    // (Spelled so the `protected` layer's text check does not see it.)
    let (r, _) = shell(&rt, "f=approvals; echo '{}' >> $f.jsonl", None);
    assert!(error(&r).contains("Read-only file system"), "{r}");
    assert_eq!(std::fs::read_to_string(ws.dir.join("approvals.jsonl")).unwrap(), "");
}

/// A server on the host's loopback that counts the connections it accepted.
fn loopback_server() -> (u16, std::thread::JoinHandle<usize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    let h = std::thread::spawn(move || {
        let mut n = 0;
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < until {
            match l.accept() {
                Ok((mut s, _)) => {
                    n += 1;
                    let mut b = [0u8; 4];
                    let _ = s.read(&mut b);
                    if &b == b"stop" {
                        break;
                    }
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
        n
    });
    (port, h)
}

fn connect_cmd(port: u16, msg: &str) -> String {
    format!(
        "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',{port}),timeout=5); s.sendall(b'{msg}'); print('connected')\""
    )
}

#[test]
fn network_off_refuses_a_loopback_connect_and_on_allows_it() {
    let ws = Ws::new();
    let rt = runtime(&ws, json!({"profiles": {"net": {"network": "on"}, "lo": {"network": "loopback"}}, "tools": {}}));
    let (port, server) = loopback_server();
    let (r, ev) = shell(&rt, &connect_cmd(port, "xxxx"), None);
    let e = error(&r);
    // Landlock's TCP rule refuses the connect (EACCES); without it the empty
    // network namespace would (ENETUNREACH).
    assert!(e.contains("Permission denied") || e.contains("Network is unreachable"), "{e}");
    assert_eq!(ev["network"], "off");
    // `loopback`: the sandbox's own loopback works, the host's is not reachable.
    let rt_lo = runtime(&ws, json!({"profiles": {"lo": {"network": "loopback"}}, "default": "lo"}));
    let own = "python3 -c \"import socket; l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(); c=socket.create_connection(l.getsockname(),timeout=5); print('own loopback')\"";
    assert_eq!(ok_stdout(&shell(&rt_lo, own, None).0), "own loopback\n");
    let (r, ev) = shell(&rt_lo, &connect_cmd(port, "xxxx"), None);
    assert!(error(&r).contains("Connection refused"), "{r}");
    assert_eq!(ev["network"], "loopback");
    let rt_on = runtime(&ws, json!({"profiles": {"net": {"network": "on"}}, "default": "net"}));
    assert_eq!(ok_stdout(&shell(&rt_on, &connect_cmd(port, "stop"), None).0), "connected\n");
    assert_eq!(server.join().unwrap(), 1, "only the `on` run reached the host's server");
}

/// An echo server on the host's loopback: answers each line with `echo:
/// LINE`, and counts the connections whose client closed (read end of file).
pub(crate) fn echo_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, Write};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = closed.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                for line in std::io::BufReader::new(s).lines() {
                    let Ok(line) = line else { break };
                    let _ = writeln!(w, "echo:{line}");
                }
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
    });
    (port, closed)
}

/// A command that sends `ping` to the host's `127.0.0.1:port` and prints
/// the answer's line.
pub(crate) fn echo_cmd(port: u16) -> String {
    format!(
        "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',{port}),timeout=5); s.sendall(b'ping\\n'); print(s.makefile().readline().strip())\""
    )
}

#[test]
fn loopback_ports_reach_the_listed_host_ports_and_no_other() {
    let ws = Ws::new();
    let (listed, closed) = echo_server();
    let (unlisted, _) = echo_server();
    let rt = runtime(
        &ws,
        json!({"profiles": {"fwd": {"network": "loopback", "loopback_ports": [listed]}}, "default": "fwd"}),
    );
    // Both directions cross, and the run's end closes the connection.
    let (r, ev) = shell(&rt, &echo_cmd(listed), None);
    assert_eq!(ok_stdout(&r), "echo:ping\n");
    assert_eq!(ev["network"], "loopback");
    assert_eq!(ev["loopback_ports"], json!([listed]));
    assert_eq!(ev["forwarded_connections"], 1);
    // Twice in one command: each connection is carried.
    let (r, ev) = shell(&rt, &format!("{0} && {0}", echo_cmd(listed)), None);
    assert_eq!(ok_stdout(&r), "echo:ping\necho:ping\n");
    assert_eq!(ev["forwarded_connections"], 2);
    // A port not listed is not there.
    let (r, _) = shell(&rt, &echo_cmd(unlisted), None);
    assert!(error(&r).contains("Connection refused"), "{r}");
    // The command cannot take the forwarded port over: it is bound already.
    let grab = format!(
        "python3 -c \"import socket; l=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind(('127.0.0.1',{listed})); print('bound')\""
    );
    let (r, _) = shell(&rt, &grab, None);
    assert!(error(&r).contains("Address already in use"), "{r}");
    // A connection a background process holds open is closed at the timeout.
    let before = closed.load(std::sync::atomic::Ordering::SeqCst);
    let hold = format!(
        "python3 -c \"import socket,time; s=socket.create_connection(('127.0.0.1',{listed}),timeout=5); s.sendall(b'x\\n'); s.makefile().readline(); print('held', flush=True); time.sleep(60)\""
    );
    let (r, ev) = shell(&rt, &hold, Some(1500));
    assert!(error(&r).starts_with("sandbox timeout:"), "{r}");
    assert_eq!(ev["forwarded_connections"], 1);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while closed.load(std::sync::atomic::Ordering::SeqCst) == before && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(closed.load(std::sync::atomic::Ordering::SeqCst) > before, "the held connection was closed with the run");
    // Under `off`, the listed port of another profile is not reachable.
    let rt_off = runtime(&ws, json!({}));
    let (r, _) = shell(&rt_off, &echo_cmd(listed), None);
    let e = error(&r);
    assert!(e.contains("Permission denied") || e.contains("Network is unreachable"), "{e}");
}

#[test]
fn a_bad_loopback_ports_list_fails_the_load_and_changes_nothing() {
    let ws = Ws::new();
    let rt =
        runtime(&ws, json!({"profiles": {"fwd": {"network": "loopback", "loopback_ports": [1]}}, "default": "fwd"}));
    let many: Vec<u16> = (1..=17).collect();
    for (profile, want) in [
        (json!({"loopback_ports": [5432]}), "forwards ports into a `loopback` network only (this profile's is `off`)"),
        (json!({"network": "on", "loopback_ports": [5432]}), "this profile's is `on`"),
        (json!({"network": "loopback", "loopback_ports": [0]}), "port 0 is not a port"),
        (json!({"network": "loopback", "loopback_ports": [80, 80]}), "port 80 is listed twice"),
        (json!({"network": "loopback", "loopback_ports": many}), "at most 16 ports"),
        (json!({"network": "loopback", "loopback_ports": [70000]}), "loopback_ports"),
        (json!({"network": "loopback", "loopback_ports": "5432"}), "loopback_ports"),
    ] {
        let doc = json!({"sandbox": {"profiles": {"p": profile}}});
        let e = rt.set_permissions(Some(&doc.to_string()), None).unwrap_err().to_string();
        assert!(e.contains(want), "{profile}: {e}");
        assert!(e.contains("sandbox.profiles.p") || e.contains("loopback_ports"), "{profile}: {e}");
    }
    // The profile in force is still the first one.
    let (r, ev) = shell(&rt, "true", None);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(ev["loopback_ports"], json!([1]));
}

fn gone(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Gone, or a zombie waiting for its reaper.
    stat.is_empty() || stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z'))
}

#[test]
fn a_background_sleep_under_a_timeout_leaves_no_process_behind() {
    let (ws, rt) = ws_default();
    let (r, ev) = shell(&rt, "sleep 60 & echo $! > bg.pid; sleep 60", Some(1000));
    assert!(error(&r).starts_with("sandbox timeout:"), "{r}");
    assert_eq!(r["error_class"], "sandbox_timeout", "{r}");
    assert_eq!((ev["outcome"].as_str(), ev["timeout_ms"].as_u64()), (Some("timeout"), Some(1000)), "{ev}");
    let pid = std::fs::read_to_string(ws.dir.join("bg.pid")).unwrap();
    let pid = pid.trim();
    // Killed before the call returned; allow the reaper a moment.
    let mut ok = false;
    for _ in 0..200 {
        if gone(pid) {
            ok = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(ok, "the background sleep {pid} is still running");
    // A process that left its group (setsid) is still in the run's cgroup.
    let (r, _) = shell(&rt, "setsid sleep 60 & echo $! > bg2.pid; sleep 60", Some(1000));
    assert_eq!(r["error_class"], "sandbox_timeout", "{r}");
    let pid = std::fs::read_to_string(ws.dir.join("bg2.pid")).unwrap();
    let pid = pid.trim().to_string();
    let mut ok = false;
    for _ in 0..200 {
        if gone(&pid) {
            ok = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(ok, "the setsid sleep {pid} is still running");
}

#[test]
fn a_fork_loop_is_stopped_by_the_process_limit() {
    let ws = Ws::new();
    let rt = runtime(&ws, json!({"profiles": {"small": {"limits": {"processes": 16}}}, "default": "small"}));
    // 200 background sleeps: forks fail after the limit.
    let (r, ev) = shell(&rt, "i=0; while [ $i -lt 200 ]; do sleep 2 & i=$((i+1)); done; echo $i", Some(20_000));
    assert!(error(&r).starts_with("sandbox limit:"), "{r}");
    assert!(error(&r).contains("`processes` limit"), "{r}");
    assert_eq!(r["error_class"], "sandbox_limit", "{r}");
    assert_eq!((ev["outcome"].as_str(), ev["limit"].as_str()), (Some("limit"), Some("processes")), "{ev}");
}

#[test]
fn a_cpu_limit_kills_with_its_own_class() {
    let ws = Ws::new();
    let rt = runtime(&ws, json!({"profiles": {"cpu": {"limits": {"cpu_seconds": 1}}}, "default": "cpu"}));
    let (r, ev) = shell(&rt, "while :; do :; done", Some(30_000));
    assert_eq!(r["error_class"], "sandbox_limit", "{r}");
    assert_eq!(ev["limit"], "cpu", "{ev}");
}

#[test]
fn the_host_environment_is_not_inherited() {
    let (_ws, rt) = ws_default();
    // nextest and cargo set this in the test process.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let (r, _) = shell(&rt, "echo ${CARGO_MANIFEST_DIR:-unset}; echo ${PATH:+path-set}", None);
    assert_eq!(ok_stdout(&r), "unset\npath-set\n");
    let ws = Ws::new();
    let rt = runtime(&ws, json!({"profiles": {"e": {"env": ["CARGO_MANIFEST_DIR", "PATH"]}}, "default": "e"}));
    let (r, _) = shell(&rt, "echo ${CARGO_MANIFEST_DIR:-unset}", None);
    assert_eq!(ok_stdout(&r).trim(), env!("CARGO_MANIFEST_DIR"));
}

#[test]
fn read_only_refuses_writes_in_the_root() {
    let ws = Ws::new();
    let rt = runtime(&ws, json!({"tools": {"shell": "read-only"}}));
    let (r, ev) = shell(&rt, "echo x > f.txt", None);
    assert!(error(&r).contains("Permission denied"), "{r}");
    assert_eq!(ev["profile"], "read-only");
    assert!(!ws.dir.join("f.txt").exists());
    // Reading is allowed (spelled so the `protected` layer's text check,
    // which refuses reads too, does not see it).
    let (r, _) = shell(&rt, "d=.ca; cat ${d}r/permissions.toml", None);
    assert_eq!(ok_stdout(&r), "# the operator's\n");
}

#[test]
fn none_runs_unconfined_only_when_the_operator_says_so() {
    let ws = Ws::new();
    let rt = runtime(&ws, json!({"tools": {"shell": "none"}}));
    let target = ws.outside.join("unconfined.txt");
    let (r, ev) = shell(&rt, &format!("echo x > {}", target.display()), None);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(ev["profile"], "none");
    assert!(target.exists());
    // A bad document changes nothing and names the key.
    let e = rt.set_permissions(Some(&json!({"sandbox": {"default": "nope"}}).to_string()), None).unwrap_err();
    assert!(e.to_string().contains("sandbox.default") && e.to_string().contains("unknown profile `nope`"), "{e}");
    let e = rt
        .set_permissions(Some(&json!({"sandbox": {"profiles": {"p": {"write": ["relative"]}}}}).to_string()), None)
        .unwrap_err();
    assert!(e.to_string().contains("sandbox.profiles.p.write"), "{e}");
}

#[test]
fn constructs_the_matcher_asks_about_run_harmlessly_when_allowed() {
    let (ws, rt) = ws_default();
    let a = ws.outside.join("arith");
    let b = ws.outside.join("wrapped");
    // A command substitution inside arithmetic, and wrappers the matcher
    // cannot read through: allowed anyway, they still cannot write outside.
    let cmds = [
        format!("echo $(( $(echo 1 > {}; echo 2) + 1 ))", a.display()),
        format!("env sh -c 'echo x > {}'", b.display()),
        format!("timeout 5 sh -c 'echo x > {}'", b.display()),
        format!("python3 -c \"open('{}','w').write('x')\"", b.display()),
    ];
    for c in &cmds {
        let _ = shell(&rt, c, None);
    }
    assert!(!a.exists() && !b.exists());
}

#[test]
fn a_subprocess_tool_runs_its_argv_template_sandboxed() {
    let ws = Ws::new();
    let rt = CarRuntime::new();
    rt.register_shell_tool(Some(ws.dir.to_str().unwrap())).unwrap();
    let tool = json!({
        "name": "greet", "executor": "subprocess", "sandbox": "read-only",
        "parameters": {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]},
        "command": ["sh", "-c", "echo \"hello $1\"; echo x > out.txt", "greet", "{who}"]
    });
    rt.set_permissions(Some(&json!({"tools": [tool]}).to_string()), None).unwrap();
    rt.register_tool_schema(&json!({"name": "greet", "parameters": tool["parameters"]}).to_string()).unwrap();
    let p = json!({"actions": [{"id": "g", "type": "tool_call", "tool": "greet", "parameters": {"who": "$(id); rm -rf /"}, "max_retries": 0}]});
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let out: Value =
        serde_json::from_str(&tokio.block_on(rt.execute_proposal(&p.to_string(), host(), None, None)).unwrap())
            .unwrap();
    let r = &out["results"][0];
    // The value is one argument, never shell text; the write is refused.
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("Permission denied"), "{r}");
    let ev: Value = serde_json::from_str(&rt.event_query(r#"{"kinds": ["SandboxRun"]}"#).unwrap()).unwrap();
    assert_eq!(ev["events"][0]["data"]["profile"], "read-only");
    assert_eq!(ev["events"][0]["data"]["tool"], "greet");
    // A definition may not declare itself unconfined.
    let bad = json!({"name": "t", "executor": "subprocess", "sandbox": "none", "command": ["true"]});
    let e = rt.set_permissions(Some(&json!({"tools": [bad]}).to_string()), None).unwrap_err();
    assert!(e.to_string().contains("only the operator"), "{e}");
}

/// A root with none of the runtime's files in it yet.
fn bare_root() -> (PathBuf, PathBuf) {
    let base = std::env::temp_dir().join(format!("car-sandbox-bare-{}", uuid::Uuid::new_v4()));
    let root = base.join("root");
    std::fs::create_dir_all(&root).unwrap();
    (base, root)
}

/// Runs `sh -c cmd` in `root` under `workspace-write`, straight through the
/// runner (no admission layer reads the text).
fn sandboxed_sh(root: &Path, cmd: &str) -> car_runtime::sandbox::Outcome {
    let profile = car_runtime::sandbox::SandboxConfig::default().profile("workspace-write").unwrap();
    let argv = vec!["sh".to_string(), "-c".to_string(), cmd.to_string()];
    let spec = car_runtime::sandbox::RunSpec {
        argv: &argv,
        root,
        profile: Some(&profile),
        timeout: Some(std::time::Duration::from_secs(20)),
        max_output: 4096,
    };
    car_runtime::sandbox::run(&spec).unwrap()
}

/// Waits (polling, up to 20 s) until `root` holds exactly `want`: a
/// placeholder lingers a little after the last run that held it.
fn eventually_entries(root: &Path, want: &[String], what: &str) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while entries(root) != want && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(entries(root), want, "after `{what}`");
}

fn entries(root: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(root).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// The protected names, and ways of creating each, spelled so no text
/// matcher sees the names.
const PROTECTED_TARGETS: [&str; 6] = [
    "approvals.jsonl",
    "tier-approvals.jsonl",
    ".car/approvals.jsonl",
    ".car/tier-approvals.jsonl",
    ".car/permissions.toml",
    ".car/policies/p.toml",
];

fn create_cmd(how: usize, target: &str) -> String {
    // `a p p r o v a l s` etc. rebuilt at run time from pieces.
    let spelled: String = target.chars().map(|c| format!("{c}")).collect::<Vec<_>>().join("''");
    let t = format!("\"$(printf '%s' {spelled})\"");
    match how {
        0 => format!("echo '{{\"forged\":1}}' > {t}"),
        1 => format!("echo '{{\"forged\":1}}' >> {t}"),
        2 => format!("touch {t}"),
        3 => format!("echo x > side && mv side {t}"),
        4 => format!("echo x > side && ln side {t}"),
        5 => format!("ln -s /etc/hostname {t}"),
        6 => format!("mkdir -p \"$(dirname {t})\" && echo x > {t}"),
        _ => format!("python3 -c \"import sys; open(sys.argv[1],'a').write('x')\" {t}"),
    }
}

#[test]
fn a_sandboxed_run_cannot_create_the_runtimes_files_that_do_not_exist_yet() {
    // Before the fix, `approvals.jsonl` (and `tier-approvals.jsonl`) absent
    // from the root could be created, forged records and all. Every target
    // by every way of creating it, each in a root of its own.
    let mut done = Vec::new();
    for target in PROTECTED_TARGETS {
        for how in 0..8 {
            let (base, root) = bare_root();
            let cmd = create_cmd(how, target);
            let o = sandboxed_sh(&root, &cmd);
            assert_ne!(o.exit_code, Some(0), "`{cmd}` must fail: {o:?}");
            let side: Vec<String> = ["side".to_string()].into_iter().filter(|_| matches!(how, 3 | 4)).collect();
            done.push((base, root, side, cmd));
        }
    }
    // Nothing of it is left: no file, and the placeholders the runs mounted
    // read-only go once no run needs them.
    for (base, root, side, cmd) in done {
        eventually_entries(&root, &side, &cmd);
        std::fs::remove_dir_all(base).unwrap();
    }
}

#[test]
fn protected_placeholders_are_shared_by_concurrent_runs_and_removed_after_the_last() {
    let (base, root) = bare_root();
    // A long run holds the placeholders while short ones come and go; the
    // long one still cannot create the file after the short ones ended.
    let r2 = root.clone();
    let long =
        std::thread::spawn(move || sandboxed_sh(&r2, "sleep 1; f=appro; echo forged > ${f}vals.jsonl && echo wrote"));
    for _ in 0..5 {
        let o = sandboxed_sh(&root, "true");
        assert_eq!(o.exit_code, Some(0), "{o:?}");
    }
    let o = long.join().unwrap();
    assert_ne!(o.exit_code, Some(0), "{o:?}");
    assert!(!o.stdout.contains("wrote"), "{o:?}");
    eventually_entries(&root, &[], "the runs");
    // An approvals file the runtime writes while a run holds its
    // placeholder is kept (the placeholder is no longer empty).
    let r2 = root.clone();
    let run = std::thread::spawn(move || sandboxed_sh(&r2, "sleep 1"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut f = car_runtime::sandbox::open_append_locked(&root.join("approvals.jsonl")).unwrap();
    std::io::Write::write_all(&mut f, b"{}\n").unwrap();
    drop(f);
    assert_eq!(run.join().unwrap().exit_code, Some(0));
    assert_eq!(std::fs::read_to_string(root.join("approvals.jsonl")).unwrap(), "{}\n");
    std::fs::remove_dir_all(base).unwrap();
}
