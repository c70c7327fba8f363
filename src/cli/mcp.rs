//! `car mcp serve`: the MCP gateway over stdio, configured by one TOML
//! admission document with `[mcp.servers.NAME]` tables (`docs/mcp.md`).

use std::path::PathBuf;

use car_runtime::admission::AdmissionConfig;
use car_runtime::api::runtime::CarRuntime;
use clap::Args;

use super::{CliError, CliResult, read_text};

/// `car mcp serve` arguments.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The gateway's configuration: an admission document (TOML) with the
    /// upstream servers under `[mcp.servers.NAME]`.
    #[arg(long)]
    pub config: PathBuf,
    /// Plan mode: offer and admit only the tools that read (kind
    /// `data_source` or risk `read`); the same as `plan_mode = true` in the
    /// document.
    #[arg(long)]
    pub plan_mode: bool,
    /// When the client disconnects, write the event log (every call and
    /// verdict, hash-chained) to this file as JSON.
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// Serve streamable HTTP at `http://ADDR/mcp` instead of stdio (a
    /// loopback address such as `127.0.0.1:8931`; port 0 picks a free one,
    /// printed on stderr). Runs until SIGINT or SIGTERM.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Hold each ask open until it is answered in the approvals store (the
    /// document's `approvals_dir`: `car approvals resolve`, the daemon's
    /// dashboard and approvers when it is the daemon's `$CAR_HOME`) or
    /// `approval_timeout_ms` passes (then it is denied). Without it an ask
    /// is refused at once, naming the approval to answer before a retry.
    #[arg(long)]
    pub wait_for_approvals: bool,
}

/// Reads the gateway's document (`FILE: reason` when it is malformed); with
/// no chain level named, the `standard` preset, as `car run`.
pub fn load(path: &std::path::Path) -> Result<AdmissionConfig, CliError> {
    let mut config = AdmissionConfig::from_toml(&read_text(path)?)
        .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
    if config.mcp.as_ref().is_none_or(|m| m.servers.is_empty()) {
        return Err(CliError::Input(format!(
            "{}: no upstream server: add a [mcp.servers.NAME] table with `command`",
            path.display()
        )));
    }
    if config.preset.is_none() && config.engine.is_none() && config.profile.is_none() {
        config.preset = Some("standard".to_string());
    }
    Ok(config)
}

/// The gateway over streamable HTTP on a loopback address, until SIGINT / SIGTERM.
async fn serve_http(gateway: car_runtime::mcp::gateway::Gateway, addr: &str) -> Result<(), CliError> {
    let parsed: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| CliError::Input(format!("--http `{addr}`: not an address such as 127.0.0.1:8931 ({e})")))?;
    if !parsed.ip().is_loopback() {
        return Err(CliError::Input(format!(
            "--http `{addr}`: the gateway has no client authentication, so it binds a loopback address only"
        )));
    }
    let listener = tokio::net::TcpListener::bind(parsed)
        .await
        .map_err(|e| CliError::Runtime(format!("--http `{addr}`: cannot listen: {e}")))?;
    let local = listener.local_addr().map_err(|e| CliError::Runtime(e.to_string()))?;
    eprintln!("car mcp serve: listening on http://{local}/mcp");
    let shutdown = async {
        #[cfg(unix)]
        {
            if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                tokio::select! { _ = tokio::signal::ctrl_c() => {}, _ = term.recv() => {} }
                return;
            }
        }
        let _ = tokio::signal::ctrl_c().await;
    };
    car_runtime::mcp::gateway::serve_http(gateway, listener, shutdown).await;
    Ok(())
}

/// Serves until the client closes stdin (or, with `--http`, until stopped).
pub fn serve(a: ServeArgs) -> CliResult {
    let mut config = load(&a.config)?;
    config.plan_mode |= a.plan_mode;
    let rt = CarRuntime::new();
    rt.enable_event_log_hash_chaining();
    // Bad flags are refused before any upstream server is started.
    let approvals_dir = match (a.wait_for_approvals, config.approvals_dir.clone()) {
        (true, None) => {
            return Err(CliError::Input(format!(
                "--wait-for-approvals: {} has no `approvals_dir` (the store an approver answers in)",
                a.config.display()
            )));
        }
        (true, dir) => dir,
        (false, _) => None,
    };
    rt.configure_admission(config).map_err(|e| CliError::Input(format!("{}: {e}", a.config.display())))?;
    if let Some(dir) = approvals_dir {
        // The approver: every pending ask is announced on stderr (the MCP
        // client's log); it is answered in the store.
        rt.on_approval_json(std::sync::Arc::new(move |event: String| {
            let v: serde_json::Value = serde_json::from_str(&event).unwrap_or_default();
            if v["event"] == "pending" {
                let key = super::shown(v["key"].as_str().unwrap_or_default()).into_owned();
                let tool = super::shown(v["tool"].as_str().unwrap_or_default()).into_owned();
                eprintln!(
                    "car mcp serve: `{tool}` waits for approval {key}: car approvals resolve --dir {} {key} allow|deny",
                    super::shown(&dir)
                );
            }
        }));
    }
    let gateway = car_runtime::mcp::gateway::Gateway::new(rt.clone()).map_err(|e| CliError::Input(e.to_string()))?;
    // Served on the MCP runtime's worker thread, where the upstream
    // connections run: a forwarded call stays on one thread (each hop to
    // another thread costs a wake-up and a context switch).
    let tokio =
        gateway.serving_runtime().ok_or_else(|| CliError::Runtime("the MCP runtime is not running".to_string()))?;
    let spawned = tokio.clone();
    match a.http.clone() {
        None => tokio
            .block_on(async move { spawned.spawn(car_runtime::mcp::gateway::serve_stdio(gateway)).await })
            .map_err(|e| CliError::Runtime(format!("the MCP session task failed: {e}")))?
            .map_err(|e| CliError::Runtime(e.to_string()))?,
        Some(addr) => tokio
            .block_on(async move { spawned.spawn(async move { serve_http(gateway, &addr).await }).await })
            .map_err(|e| CliError::Runtime(format!("the MCP server task failed: {e}")))??,
    }
    if let Some(path) = &a.events {
        let events = rt.event_query("{}").map_err(|e| CliError::Runtime(e.to_string()))?;
        let doc = format!("{{\"events\":{events},\"chain\":{}}}\n", rt.verify_event_log_chain());
        std::fs::write(path, doc).map_err(|e| CliError::Runtime(format!("{}: cannot write: {e}", path.display())))?;
    }
    Ok(0)
}
