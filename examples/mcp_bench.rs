//! The gateway's added latency per `tools/call`: the same `echo` calls sent
//! directly to `mcp_upstream` and through `car mcp serve` in front of it
//! (admission stage fully configured: tier, preset, deny / ask rules that
//! do not match, a shell table, inspectors, breaker), in one run, with the
//! official SDK's client. Prints p50 and p99 of both and the added p50.
//!
//! ```text
//! cargo build --release --all-features --bin car --example mcp_upstream --example mcp_bench
//! target/x86_64-unknown-linux-gnu/release/examples/mcp_bench [CALLS]
//! ```

use std::time::Instant;

use rmcp::service::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

async fn time_calls(cmd: tokio::process::Command, calls: usize) -> Vec<f64> {
    let transport = TokioChildProcess::new(cmd).expect("spawn");
    let client = ().serve(transport).await.expect("initialize");
    let params: rmcp::model::CallToolRequestParams =
        serde_json::from_value(json!({"name": "echo", "arguments": {"text": "x"}})).unwrap();
    for _ in 0..50 {
        client.peer().call_tool(params.clone()).await.expect("warm-up call");
    }
    let mut out = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let r = client.peer().call_tool(params.clone()).await.expect("call");
        out.push(t.elapsed().as_secs_f64() * 1e6);
        assert_ne!(r.is_error, Some(true), "the call was refused: {r:?}");
    }
    let _ = client.cancel().await;
    out.sort_by(f64::total_cmp);
    out
}

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let calls: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let exe = std::env::current_exe().unwrap();
    let examples = exe.parent().unwrap();
    let upstream = examples.join("mcp_upstream");
    let car = examples.parent().unwrap().join("car");
    let dir = std::env::temp_dir().join(format!("car-mcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
tier = "sandbox_edit"
preset = "standard"
deny = [{{ tool = "fail" }}, {{ tool = "drifty", argv = "rm **" }}]
ask = [{{ tool = "add" }}, {{ risk = "network" }}]
inspectors = {{ repetition_limit = 1000000, egress_allowlist = ["example.com"] }}
breaker = {{ max_consecutive_denials = 3 }}

[shell]
allow = ["git status"]
deny = ["sudo **"]

[mcp.servers.up]
command = {upstream:?}
"#
        ),
    )
    .unwrap();
    let direct = time_calls(tokio::process::Command::new(&upstream), calls).await;
    let mut g = tokio::process::Command::new(&car);
    g.args(["mcp", "serve", "--config"]).arg(&cfg);
    let gateway = time_calls(g, calls).await;
    let _ = std::fs::remove_dir_all(&dir);
    println!("calls per side: {calls}");
    println!("direct : p50 {:8.1} us  p99 {:8.1} us", pct(&direct, 0.5), pct(&direct, 0.99));
    println!("gateway: p50 {:8.1} us  p99 {:8.1} us", pct(&gateway, 0.5), pct(&gateway, 0.99));
    println!("added p50: {:.1} us", pct(&gateway, 0.5) - pct(&direct, 0.5));
}
