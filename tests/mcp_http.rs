//! MCP servers by URL (streamable HTTP) as tool sources, against a real
//! MCP server built on the SDK's server side (`examples/mcp_upstream.rs
//! --http`), with a bearer token read from an environment variable.
#![cfg(feature = "mcp")]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall};
use serde_json::{Value, json};

fn upstream_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("examples").join("mcp_upstream");
    assert!(p.exists(), "{} is missing: build with `cargo build --all-targets --all-features`", p.display());
    p
}

/// The upstream over HTTP on `addr`; stopped (killed) when dropped.
struct Upstream {
    child: Child,
    url: String,
}

impl Upstream {
    fn start(addr: &str, bearer: Option<&str>) -> Upstream {
        let mut cmd = Command::new(upstream_bin());
        cmd.args(["--http", addr]).stdout(Stdio::piped()).stderr(Stdio::null()).stdin(Stdio::null());
        if let Some(b) = bearer {
            cmd.args(["--bearer", b]);
        }
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().strip_prefix("listening on ").expect("the upstream's address line").to_string();
        Upstream { child, url }
    }

    fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().trim_end_matches("/mcp").parse().unwrap()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn call(rt: &CarRuntime, tool: &str, params: Value) -> Value {
    let p = json!({"id": "p", "actions": [{"id": "a", "type": "tool_call", "tool": tool, "parameters": params}]});
    let host = std::sync::Arc::new(FnExecutor(|c: ToolCall| Ok(json!({"host": c.tool}))));
    let out = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rt.execute_proposal(&p.to_string(), host, None, None))
        .unwrap();
    serde_json::from_str::<Value>(&out).unwrap()["results"][0].clone()
}

fn source(url: &str, token_var: Option<&str>) -> Value {
    let mut s = json!({"url": url, "prefix": "up_"});
    if let Some(v) = token_var {
        s["bearer_token_env"] = json!(v);
    }
    json!({"mcp": {"servers": {"web": s}}})
}

#[test]
fn a_server_by_url_with_a_bearer_token_is_a_governed_tool_source() {
    // SAFETY: nextest runs every test in its own process; nothing else reads
    // the environment concurrently here.
    unsafe { std::env::set_var("CAR_TEST_MCP_TOKEN", "s3cret-token") };
    unsafe { std::env::set_var("CAR_TEST_MCP_WRONG", "not-the-token") };
    let up = Upstream::start("127.0.0.1:0", Some("s3cret-token"));
    let rt = CarRuntime::new();
    let before = rt.admission_config();

    // No token variable, an unset one, a wrong token: connect failures naming the cause; nothing changes.
    for (var, needle) in [
        (None, "web"),
        (Some("CAR_TEST_MCP_UNSET_VARIABLE"), "CAR_TEST_MCP_UNSET_VARIABLE"),
        (Some("CAR_TEST_MCP_WRONG"), "web"),
    ] {
        let e = rt.set_permissions(Some(&source(&up.url, var).to_string()), None).unwrap_err();
        assert_eq!(e.code(), "mcp_connect_failed", "{var:?}: {e}");
        assert!(e.to_string().contains(needle), "{var:?}: {e}");
        assert_eq!(rt.admission_config(), before);
        assert_eq!(rt.list_tools(), "[]");
    }

    let doc = json!({"deny": [{"tool": "up_fail"}], "mcp": source(&up.url, Some("CAR_TEST_MCP_TOKEN"))["mcp"]});
    rt.set_permissions(Some(&doc.to_string()), None).unwrap();
    let tools: Vec<Value> = serde_json::from_str(&rt.list_tools()).unwrap();
    let echo = tools.iter().find(|t| t["name"] == "up_echo").expect("up_echo imported");
    assert_eq!(echo["source"], "mcp");
    assert_eq!(echo["parameters"]["required"], json!(["text"]));

    let r = call(&rt, "up_echo", json!({"text": "over http"}));
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["output"], "over http");
    assert_eq!(call(&rt, "up_add", json!({"a": 2, "b": 3}))["output"], json!({"sum": 5.0}));
    // Validated before dispatch; denied at admission; the server's own error.
    let bad = call(&rt, "up_echo", json!({"text": 7}));
    assert_ne!(bad["status"], "succeeded", "{bad}");
    assert_eq!(call(&rt, "up_calls", json!({}))["output"], "3", "the schema-rejected call never reached the server");
    let denied = call(&rt, "up_fail", json!({}));
    assert_eq!(denied["status"], "rejected", "{denied}");
    let status: Value = serde_json::from_str(&rt.mcp_status()).unwrap();
    assert!(status["servers"]["web"].is_object(), "{status}");
}

#[test]
fn an_http_server_that_dies_fails_the_call_and_is_reconnected_on_the_next() {
    let up = Upstream::start("127.0.0.1:0", None);
    let port = up.port();
    let rt = CarRuntime::new();
    rt.set_permissions(Some(&source(&up.url, None).to_string()), None).unwrap();
    assert_eq!(call(&rt, "up_calls", json!({}))["output"], "1");
    let died = call(&rt, "up_die", json!({}));
    assert_eq!(died["status"], "failed", "{died}");
    assert!(died["error"].as_str().unwrap().contains("web"), "{died}");
    drop(up);
    // A new process on the same address: the next call reconnects to it.
    let again = Upstream::start(&format!("127.0.0.1:{port}"), None);
    let r = call(&rt, "up_calls", json!({}));
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["output"], "1", "a fresh server process counts from one");
    drop(again);
}

#[test]
fn bad_url_configurations_are_errors_naming_them() {
    let rt = CarRuntime::new();
    for (server, needle) in [
        (json!({"url": "https://127.0.0.1:1/mcp"}), "https"),
        (json!({"url": "ftp://127.0.0.1/mcp"}), "not an http:// URL"),
        (json!({"url": "http://127.0.0.1:1/mcp", "args": ["x"]}), "`args`"),
        (json!({"url": "http://127.0.0.1:1/mcp", "bearer_token_env": " "}), "bearer_token_env"),
        (json!({"command": "x", "bearer_token_env": "T"}), "bearer_token_env"),
    ] {
        let doc = json!({"mcp": {"servers": {"s": server}}});
        let e = rt.set_permissions(Some(&doc.to_string()), None).unwrap_err();
        assert_eq!(e.code(), "invalid_mcp_config", "{doc}: {e}");
        assert!(e.to_string().contains(needle), "{doc}: {e}");
    }
    // Nothing listening there: a connect failure naming the server and URL.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", l.local_addr().unwrap());
    drop(l);
    let e = rt.set_permissions(Some(&source(&url, None).to_string()), None).unwrap_err();
    assert_eq!(e.code(), "mcp_connect_failed", "{e}");
    assert!(e.to_string().contains(&url), "{e}");
    assert_eq!(rt.list_tools(), "[]");
}
