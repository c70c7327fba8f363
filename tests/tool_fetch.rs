//! The first-party fetch tool `http_fetch` (`src/tools/fetch.rs`) through
//! the runtime, against an HTTP server on loopback that this test starts:
//! address classes refused in every spelling, the egress allowlist's
//! addresses and networks, domain rules on the name, on resolved addresses
//! and on redirect targets, caps, timeouts, credentials on redirects.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use car_runtime::api::runtime::CarRuntime;
use car_runtime::engine::{FnExecutor, ToolCall};
use car_runtime::ir::ToolFailure;
use serde_json::{Value, json};

/// One request the server read: its request line and headers, lowercased
/// header names, and its body.
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A loopback HTTP/1.1 server answering by path; it stops with the test
/// process (its thread is detached and blocks only in `accept`).
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let log = log.clone();
                std::thread::spawn(move || serve(conn, port, &log));
            }
        });
        Server { port, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(mut conn: TcpStream, port: u16, log: &Mutex<Vec<Seen>>) {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        // A TLS ClientHello: this server speaks plain HTTP only.
        if buf.first() == Some(&0x16) {
            let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n");
            return;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
    log.lock().unwrap().push(Seen { line, headers, body: String::from_utf8_lossy(&body).into_owned() });
    let reply = |status: &str, extra: &str, body: &[u8]| {
        let mut r = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n", body.len())
            .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let out = match path.as_str() {
        "/ok" => reply("200 OK", "content-type: text/plain\r\nx-twice: a\r\nx-twice: b\r\n", b"hello"),
        "/missing" => reply("404 Not Found", "", b"no such thing"),
        "/echo" => reply("200 OK", "", body.as_slice()),
        "/big" => reply("200 OK", "", &vec![b'x'; 100_000]),
        "/binary" => reply("200 OK", "", &[0xff, 0xfe, 0x00, 0x80]),
        "/slow" => {
            std::thread::sleep(Duration::from_secs(5));
            reply("200 OK", "", b"late")
        }
        "/to-ok" => reply("302 Found", "location: /ok\r\n", b""),
        "/see-other" => reply("303 See Other", "location: /echo\r\n", b""),
        "/loop" => reply("302 Found", "location: /loop\r\n", b""),
        "/to-metadata" => reply("302 Found", "location: http://169.254.169.254/latest/meta-data/\r\n", b""),
        "/to-decimal" => reply("301 Moved", &format!("location: http://2130706433:{port}/ok\r\n"), b""),
        "/to-localhost" => reply("307 Temporary", &format!("location: http://localhost:{port}/echo\r\n"), b""),
        "/to-ftp" => reply("302 Found", "location: ftp://127.0.0.1/x\r\n", b""),
        _ => reply("500 Internal", "", b"unknown path"),
    };
    let _ = conn.write_all(&out);
}

/// A runtime with `http_fetch` and the admission document `config`.
fn runtime(config: Value) -> CarRuntime {
    let rt = CarRuntime::new();
    rt.register_fetch_tool().unwrap();
    rt.set_permissions(Some(&config.to_string()), None).unwrap();
    rt
}

fn host_executor() -> Arc<FnExecutor<impl Fn(ToolCall) -> Result<Value, ToolFailure> + Send + Sync>> {
    Arc::new(FnExecutor(|call: ToolCall| Err(ToolFailure::terminal(format!("host tool `{}` called", call.tool)))))
}

/// Runs one `http_fetch` action; its ActionResult.
async fn fetch(rt: &CarRuntime, params: Value) -> Value {
    let proposal =
        json!({"id": "p", "actions": [{"id": "f", "type": "tool_call", "tool": "http_fetch", "parameters": params}]});
    let out: Value =
        serde_json::from_str(&rt.execute_proposal(&proposal.to_string(), host_executor(), None, None).await.unwrap())
            .unwrap();
    out["results"][0].clone()
}

fn error_of(r: &Value) -> String {
    assert_ne!(r["status"], "succeeded", "expected a refusal: {r}");
    r["error"].as_str().unwrap_or_default().to_string()
}

fn allow_loopback() -> Value {
    json!({"inspectors": {"egress_allowlist": ["127.0.0.1"]}})
}

#[tokio::test]
async fn fetches_from_an_allowlisted_loopback_address() {
    let s = Server::start();
    let rt = runtime(allow_loopback());
    let r = fetch(&rt, json!({"url": s.url("/ok")})).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    let o = &r["output"];
    assert_eq!((o["status"].as_u64(), o["ok"].as_bool(), o["body"].as_str()), (Some(200), Some(true), Some("hello")));
    assert_eq!(o["headers"]["x-twice"], "a, b");
    assert_eq!(o["truncated"], false);
    assert_eq!(o["address"], format!("127.0.0.1:{}", s.port));
    let seen = s.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].line, "GET /ok HTTP/1.1");
    assert_eq!(seen[0].header("host"), Some(format!("127.0.0.1:{}", s.port).as_str()));
    assert!(seen[0].header("user-agent").unwrap().starts_with("car-runtime/"));

    // An HTTP error status is a result, not a failure.
    let r = fetch(&rt, json!({"url": s.url("/missing")})).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!((r["output"]["status"].as_u64(), r["output"]["ok"].as_bool()), (Some(404), Some(false)));

    // A method, headers and a body.
    let r =
        fetch(&rt, json!({"url": s.url("/echo"), "method": "POST", "headers": {"X-Token": "t1"}, "body": "payload"}))
            .await;
    assert_eq!(r["output"]["body"], "payload", "{r}");
    let last = s.seen().pop().unwrap();
    assert_eq!(
        (last.line.as_str(), last.header("x-token"), last.body.as_str()),
        ("POST /echo HTTP/1.1", Some("t1"), "payload")
    );

    // A body that is not UTF-8 comes back as base64.
    let r = fetch(&rt, json!({"url": s.url("/binary")})).await;
    assert_eq!(r["output"]["body_base64"], "//4AgA==", "{r}");
    assert!(r["output"].get("body").is_none());
}

/// Loopback, private, link-local and metadata addresses are refused before
/// any connection, in every spelling a URL parser or the resolver accepts;
/// the server sees nothing.
#[tokio::test]
async fn internal_addresses_are_refused_in_every_spelling() {
    let s = Server::start();
    let p = s.port;
    let rt = runtime(json!({}));
    let mut spellings: Vec<String> = vec![
        format!("http://127.0.0.1:{p}/ok"),
        format!("http://localhost:{p}/ok"),
        format!("http://LOCALHOST.:{p}/ok"),
        format!("http://2130706433:{p}/ok"),
        format!("http://0x7f000001:{p}/ok"),
        format!("http://0x7f.0.0.1:{p}/ok"),
        format!("http://0177.0.0.1:{p}/ok"),
        format!("http://127.1:{p}/ok"),
        format!("http://127.0.1:{p}/ok"),
        format!("http://[::ffff:127.0.0.1]:{p}/ok"),
        format!("http://[::ffff:7f00:1]:{p}/ok"),
        format!("http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/ok"),
        format!("http://[::1]:{p}/ok"),
        format!("http://[::127.0.0.1]:{p}/ok"),
        format!("http://0.0.0.0:{p}/ok"),
        format!("http://0:{p}/ok"),
        format!("https://127.0.0.1:{p}/ok"),
    ];
    // Generated: every loopback address of 127/8 in decimal and dotted
    // forms at a sample of points, and the metadata and private ranges.
    for (a, b, c) in [(0u32, 0u32, 1u32), (1, 2, 3), (255, 255, 254), (0, 1, 0)] {
        let n = (127u32 << 24) | (a << 16) | (b << 8) | c;
        spellings.push(format!("http://127.{a}.{b}.{c}:{p}/ok"));
        spellings.push(format!("http://{n}:{p}/ok"));
        spellings.push(format!("http://{n:#x}:{p}/ok"));
    }
    for host in [
        "169.254.169.254",
        "2852039166",
        "0xa9fea9fe",
        "[::ffff:169.254.169.254]",
        "[fd00:ec2::254]",
        "100.100.100.200",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "[fe80::1]",
        "[fc00::1]",
        "[64:ff9b::a9fe:a9fe]",
        "[2002:a9fe:a9fe::]",
    ] {
        spellings.push(format!("http://{host}/latest/meta-data/"));
    }
    for url in &spellings {
        let r = fetch(&rt, json!({"url": url, "timeout_ms": 5000})).await;
        let e = error_of(&r);
        assert!(
            e.contains("refused") || e.contains("cannot fetch") || e.contains("cannot resolve"),
            "{url}: not refused before connecting: {e}"
        );
        assert!(!e.contains("cannot connect") && !e.contains("timed out"), "{url}: a connection was tried: {e}");
    }
    assert!(s.seen().is_empty(), "the server saw {:?}", s.seen());
}

/// Addresses and networks of the allowlist unlock internal addresses; a
/// name never does, and one refused address of a name refuses it.
#[tokio::test]
async fn the_allowlist_unlocks_addresses_not_names() {
    let s = Server::start();
    let p = s.port;
    // A name alone: `localhost` is allowed by name but resolves to loopback.
    let rt = runtime(json!({"inspectors": {"egress_allowlist": ["localhost"]}}));
    let e = error_of(&fetch(&rt, json!({"url": format!("http://localhost:{p}/ok")})).await);
    assert!(e.contains("loopback"), "{e}");
    // The allowlist does not name 127.0.0.1: the inspector refuses it at dispatch.
    let e = error_of(&fetch(&rt, json!({"url": s.url("/ok")})).await);
    assert!(e.contains("egress"), "{e}");

    // A network covering every address `localhost` resolves to.
    let rt = runtime(json!({"inspectors": {"egress_allowlist": ["localhost", "127.0.0.0/8", "::1"]}}));
    let r = fetch(&rt, json!({"url": format!("http://localhost:{p}/ok")})).await;
    assert_eq!(r["output"]["body"], "hello", "{r}");
    assert_eq!(s.seen().last().unwrap().header("host"), Some(format!("localhost:{p}").as_str()));
    // Another spelling of a covered address.
    let r = fetch(&rt, json!({"url": format!("http://[::ffff:127.0.0.1]:{p}/ok")})).await;
    assert_eq!(r["output"]["body"], "hello", "{r}");

    // A bad entry is a configuration error naming it, and changes nothing.
    let bad = CarRuntime::new();
    for entry in ["10.0.0.0/33", "10.0.0.0/x", "", "exa mple.com", "::1/129"] {
        let doc = json!({"inspectors": {"egress_allowlist": [entry]}}).to_string();
        let e = bad.set_permissions(Some(&doc), None).unwrap_err().to_string();
        assert!(e.contains("egress_allowlist") && e.contains(&format!("`{entry}`")), "{entry}: {e}");
    }
}

/// Domain rules judge the name at admission, every resolved address in
/// the tool, and every redirect target.
#[tokio::test]
async fn domain_rules_reach_addresses_and_redirects() {
    let s = Server::start();
    let p = s.port;
    let allow = json!(["localhost", "127.0.0.1", "::1"]);
    let rt = runtime(json!({
        "inspectors": {"egress_allowlist": allow},
        "deny": [{"tool": "http_fetch", "domains": ["127.0.0.1"]}]
    }));
    // The name itself: the chain denies at admission.
    let r = fetch(&rt, json!({"url": s.url("/ok")})).await;
    assert_eq!(r["status"], "rejected", "{r}");
    // A name resolving to the denied address: the tool refuses.
    let e = error_of(&fetch(&rt, json!({"url": format!("http://localhost:{p}/ok")})).await);
    assert!(e.contains("resolves to 127.0.0.1") && e.contains("denied by rule"), "{e}");
    assert!(s.seen().is_empty());

    // Redirects to an address the rules or the classes refuse.
    let rt = runtime(json!({
        "inspectors": {"egress_allowlist": ["127.0.0.1"]},
        "ask": [{"tool": "http_fetch", "domains": ["localhost"]}]
    }));
    // (The address classes are checked at every hop by the same code; the
    // allowlist, which this test needs to reach its own server, refuses
    // the metadata address first.)
    let e = error_of(&fetch(&rt, json!({"url": s.url("/to-metadata")})).await);
    assert!(e.contains("`169.254.169.254` is outside the egress allowlist"), "{e}");
    let e = error_of(&fetch(&rt, json!({"url": s.url("/to-localhost")})).await);
    assert!(e.contains("asks by rule") && e.contains("approval"), "{e}");
    let e = error_of(&fetch(&rt, json!({"url": s.url("/to-ftp")})).await);
    assert!(e.contains("only http"), "{e}");
    let paths: Vec<String> = s.seen().iter().map(|x| x.line.clone()).collect();
    assert_eq!(paths, ["GET /to-metadata HTTP/1.1", "GET /to-localhost HTTP/1.1", "GET /to-ftp HTTP/1.1"]);

    // A redirect through another spelling of an allowed address is followed.
    let r = fetch(&rt, json!({"url": s.url("/to-decimal")})).await;
    assert_eq!(r["output"]["body"], "hello", "{r}");
    assert_eq!(r["output"]["redirects"], json!([format!("http://127.0.0.1:{p}/ok")]));
}

#[tokio::test]
async fn redirects_caps_and_timeouts() {
    let s = Server::start();
    let p = s.port;
    let rt = runtime(json!({"inspectors": {"egress_allowlist": ["127.0.0.1", "localhost", "::1"]}}));
    let r = fetch(&rt, json!({"url": s.url("/to-ok")})).await;
    assert_eq!(r["output"]["body"], "hello", "{r}");
    assert_eq!(r["output"]["url"], s.url("/ok"));
    // max_redirects 0: the redirect itself.
    let r = fetch(&rt, json!({"url": s.url("/to-ok"), "max_redirects": 0})).await;
    assert_eq!(r["output"]["status"], 302, "{r}");
    assert_eq!(r["output"]["headers"]["location"], "/ok");
    // A loop stops at the cap.
    let e = error_of(&fetch(&rt, json!({"url": s.url("/loop"), "max_redirects": 3})).await);
    assert!(e.contains("more than 3 redirect"), "{e}");
    // 303 turns a POST into a GET without its body.
    let r = fetch(&rt, json!({"url": s.url("/see-other"), "method": "POST", "body": "gone"})).await;
    assert_eq!(r["output"]["body"], "", "{r}");
    assert!(s.seen().last().unwrap().line.starts_with("GET /echo"));
    // Credentials stay with their origin; other headers and a 307's body follow.
    let r = fetch(
        &rt,
        json!({"url": s.url("/to-localhost"), "method": "PUT", "body": "kept",
               "headers": {"Authorization": "Bearer secret", "Cookie": "c=1", "X-Other": "o"}}),
    )
    .await;
    assert_eq!(r["output"]["body"], "kept", "{r}");
    let seen = s.seen();
    let (first, second) = (&seen[seen.len() - 2], &seen[seen.len() - 1]);
    assert_eq!(first.header("authorization"), Some("Bearer secret"));
    assert_eq!((second.header("authorization"), second.header("cookie")), (None, None), "{second:?}");
    assert_eq!(second.header("x-other"), Some("o"));
    assert_eq!(second.header("host"), Some(format!("localhost:{p}").as_str()));

    // The body cap.
    let r = fetch(&rt, json!({"url": s.url("/big"), "max_bytes": 1000})).await;
    assert_eq!((r["output"]["bytes"].as_u64(), r["output"]["truncated"].as_bool()), (Some(1000), Some(true)), "{r}");
    let r = fetch(&rt, json!({"url": s.url("/big")})).await;
    assert_eq!((r["output"]["bytes"].as_u64(), r["output"]["truncated"].as_bool()), (Some(100_000), Some(false)));
    // The time cap.
    let e = error_of(&fetch(&rt, json!({"url": s.url("/slow"), "timeout_ms": 300})).await);
    assert!(e.contains("timed out after 300 ms"), "{e}");
    // https to a server that does not speak TLS fails in the handshake.
    let e = error_of(&fetch(&rt, json!({"url": format!("https://127.0.0.1:{p}/ok"), "timeout_ms": 5000})).await);
    assert!(e.contains("TLS"), "{e}");
    // Bad parameters fail naming them, without a request.
    let before = s.seen().len();
    for (params, word) in [
        (json!({"url": s.url("/ok"), "method": "TRACE"}), "TRACE"),
        (json!({"url": s.url("/ok"), "headers": {"Host": "evil"}}), "`Host`"),
        (json!({"url": s.url("/ok"), "max_bytes": -1}), "max_bytes"),
        (json!({"url": format!("http://user:pw@127.0.0.1:{p}/ok")}), "credentials"),
    ] {
        let e = error_of(&fetch(&rt, params.clone()).await);
        assert!(e.contains(word), "{params}: {e}");
    }
    assert_eq!(s.seen().len(), before);
}

/// Under the `standard` preset the tool (risk `network`) asks, and its
/// declaration is listed with source `builtin`.
#[tokio::test]
async fn declared_as_a_network_builtin() {
    let rt = runtime(json!({"preset": "standard", "approval_timeout_ms": 50}));
    let tools: Value = serde_json::from_str(&rt.list_tools()).unwrap();
    let t = tools.as_array().unwrap().iter().find(|t| t["name"] == "http_fetch").unwrap();
    assert_eq!(t["source"], "builtin");
    let r = fetch(&rt, json!({"url": "https://example.com/"})).await;
    assert_ne!(r["status"], "succeeded", "{r}");
    assert!(r["error"].as_str().unwrap_or_default().contains("ask") || r["status"] == "rejected", "{r}");
}

/// `car run`: the tool is a built-in of the command line, configured by
/// `.car/permissions.toml`'s `[inspectors]` table.
#[test]
fn car_run_fetches_through_the_permissions_file() {
    let s = Server::start();
    let dir = crate::cli_common::tmp();
    let plan = json!({"id": "p", "actions": [
        {"id": "ok", "type": "tool_call", "tool": "http_fetch", "parameters": {"url": s.url("/ok")}},
        {"id": "meta", "type": "tool_call", "tool": "http_fetch",
         "parameters": {"url": "http://169.254.169.254/latest/meta-data/"}}
    ]});
    std::fs::write(dir.join("plan.json"), plan.to_string()).unwrap();
    let root = dir.to_string_lossy().into_owned();
    // No allowlist: loopback is refused too, and the server sees nothing.
    let r = crate::cli_common::car_in(&dir, &["run", "plan.json", "--root", &root, "--yes"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("a loopback address") && r.stdout.contains("a cloud metadata address"), "{}", r.all());
    assert!(s.seen().is_empty());
    std::fs::create_dir_all(dir.join(".car")).unwrap();
    std::fs::write(dir.join(".car/permissions.toml"), "[inspectors]\negress_allowlist = [\"127.0.0.1\"]\n").unwrap();
    let r = crate::cli_common::car_in(&dir, &["run", "plan.json", "--root", &root, "--yes"]);
    assert!(r.stdout.contains("ok       ok (http_fetch)"), "{}", r.all());
    // The metadata address is outside the allowlist: the inspector refuses it at dispatch.
    let meta = r.stdout.lines().find(|l| l.contains("meta (http_fetch)") || l.contains("DENIED   meta")).unwrap_or("");
    assert!(meta.contains("egress allowlist"), "{}", r.all());
    assert_eq!(s.seen().len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
