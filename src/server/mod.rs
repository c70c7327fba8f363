//! `car-server`: the runtime over JSON-RPC 2.0 on WebSocket (feature `server`).
//!
//! Each connection is its own session (a [`crate::api::runtime::CarRuntime`]);
//! every method is a thin call into the JSON facade. See `docs/server.md`.

pub mod auth;
pub mod cli;
mod conn;
mod executor;
pub mod handshake;
mod methods;
pub mod rpc;
mod supervision;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

/// Everything a running daemon is configured with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The token every connection must present, `None` when auth is off.
    pub token: Option<String>,
    /// Text frames longer than this are answered `-32600` (the connection stays).
    pub max_frame_bytes: usize,
    /// The flat handler deadline (`CAR_HANDLER_TIMEOUT`, 30 minutes).
    pub handler_timeout: Duration,
    /// The daemon's callback wait for an action with no `timeout_ms`
    /// (`CAR_TOOL_TIMEOUT`, 300 s); also the per-action budget in the
    /// `proposal.submit` deadline.
    pub tool_timeout: Duration,
    /// Added to an action's `timeout_ms` for the daemon's own callback wait.
    pub callback_grace: Duration,
    /// Added to the summed action budgets of `proposal.submit` (15 s).
    pub submit_grace: Duration,
    /// WebSocket Ping period (30 s).
    pub ping_interval: Duration,
    /// A peer silent this long is closed (90 s).
    pub idle_timeout: Duration,
    /// `*.toml` policies applied to every session (`~/.car/policies`).
    pub policy_dir: Option<PathBuf>,
    /// The approvals ledger (`~/.car/approvals.jsonl`) behind
    /// `permission.evaluate/pending/approve/reject`.
    pub ledger_path: Option<PathBuf>,
    /// How long a proposal parked for supervision waits for a verdict
    /// before it is refused (fail closed).
    pub supervision_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            token: None,
            max_frame_bytes: 16 * 1024 * 1024,
            handler_timeout: Duration::from_secs(30 * 60),
            tool_timeout: Duration::from_secs(300),
            callback_grace: Duration::from_secs(5),
            submit_grace: Duration::from_secs(15),
            ping_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(90),
            policy_dir: None,
            ledger_path: None,
            supervision_timeout: Duration::from_secs(60),
        }
    }
}

/// Accepts connections until `shutdown` resolves; each connection runs on
/// its own task and a failing connection never affects the others.
pub async fn serve(listener: TcpListener, config: Config, shutdown: impl Future<Output = ()>) {
    let supervisors = Arc::new(supervision::Supervisors::new(config.supervision_timeout));
    // One ledger for the daemon, so its read cache serves every connection.
    let ledger = config.ledger_path.as_ref().map(|p| Arc::new(crate::policy::JsonlLedger::new(p)));
    let config = Arc::new(config);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(conn::serve_connection(
                        stream,
                        peer,
                        config.clone(),
                        supervisors.clone(),
                        ledger.clone(),
                    ));
                }
                Err(e) => {
                    eprintln!("car-server: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = &mut shutdown => break,
        }
    }
}
