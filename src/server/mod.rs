//! `car-server`: the runtime over JSON-RPC 2.0 on WebSocket (feature `server`).
//!
//! Each connection is its own session (a [`crate::api::runtime::CarRuntime`]);
//! every method is a thin call into the JSON facade. See `docs/server.md`.

mod activity;
mod approvals;
pub mod auth;
pub mod cli;
mod conn;
pub mod dashboard;
mod executor;
pub mod handshake;
mod mcp_endpoint;
mod methods;
pub mod rpc;
mod supervision;
mod throttle;
pub mod webhooks;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;

/// Everything a running daemon is configured with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The daemon token (the operator role), `None` when auth is off.
    pub token: Option<String>,
    /// The host token (`session.auth {host_token}`, the host role). When set,
    /// only a host connection may decide (approve, reject, set the tier,
    /// supervise); otherwise an operator connection may.
    pub host_token: Option<String>,
    /// Per-agent tokens `(agent_id, token)`: `session.auth {token, agent_id}`
    /// authenticates an agent connection, which may never decide.
    pub agent_tokens: Vec<(String, String)>,
    /// Whether a connection's own approval or supervision verdict counts for
    /// its own proposals (`--allow-self-approval`; off by default).
    pub allow_self_approval: bool,
    /// Failed `session.auth` attempts one peer address may make per
    /// `auth_failure_window` before every attempt from it is refused.
    pub auth_max_failures: u32,
    /// The window of `auth_max_failures` (60 s).
    pub auth_failure_window: Duration,
    /// Connections not yet authenticated (including ones still upgrading)
    /// the daemon holds at once; more are closed at accept.
    pub max_unauthenticated: usize,
    /// An unauthenticated connection is closed after this long (also bounds
    /// the WebSocket upgrade).
    pub auth_timeout: Duration,
    /// Frames queued for one connection's writer; beyond it (or beyond
    /// `max_queued_bytes`) the peer is not reading and the connection closes.
    pub max_queued_frames: usize,
    /// Bytes queued for one connection's writer.
    pub max_queued_bytes: usize,
    /// Requests one connection may have in flight; more are answered busy.
    pub max_in_flight: usize,
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
    /// The operator's admission document (`$CAR_HOME/permissions.toml`,
    /// TOML), applied to every session before it can do anything.
    pub admission_path: Option<PathBuf>,
    /// The tier approvals ledger (`~/.car/tier-approvals.jsonl`) behind
    /// `permission.evaluate/pending/approve/reject`.
    pub ledger_path: Option<PathBuf>,
    /// The key file authenticating the ledger's records (HMAC-SHA256;
    /// `car-server` creates it, mode 600, outside the state root). `None`:
    /// `CAR_LEDGER_KEY`, else the default key file
    /// (`approval::ledger::default_key_path`).
    pub ledger_key_path: Option<PathBuf>,
    /// How long a proposal parked for supervision waits for a verdict
    /// before it is refused (fail closed).
    pub supervision_timeout: Duration,
    /// The directory of the daemon's one ask-approvals store
    /// (`$CAR_HOME/approvals.jsonl`) and its `always` rules; `None`: no
    /// store, an ask is refused.
    pub approvals_dir: Option<PathBuf>,
    /// The daemon's audit log: `$CAR_HOME/events.jsonl`
    /// (`crate::store::file`), or the events table of `--store
    /// postgres://...`. Every event of every connection is recorded in it,
    /// one hash chain per daemon. `None`: events stay in memory.
    pub event_log: Option<std::sync::Arc<dyn crate::events::EventSink>>,
    /// Approval webhooks (`--webhook`, `CAR_WEBHOOKS`): every approval event
    /// POSTed, signed, to each URL ([`webhooks`]). `None`: none.
    pub webhooks: Option<webhooks::Webhooks>,
    /// The store shared with other daemons (`--store postgres://...`): ask
    /// approvals are requested, resolved and waited for in it (the `always`
    /// rules stay in `approvals_dir`), so an approval granted on any daemon
    /// of the store applies on every one. `None`: the local store of
    /// `approvals_dir`.
    pub shared_store: Option<crate::store::Backends>,
    /// Every session's state lives in the shared store's state backend
    /// (`--shared-state`): shared by every connection of every daemon of
    /// the store. Off: each connection has its own state.
    pub shared_state: bool,
    /// The lease of a checkpoint claim (`CAR_CHECKPOINT_LEASE_MS`, default
    /// 60 s): a journaled run or a resumer that stops is taken over once
    /// it runs out.
    pub checkpoint_lease: Duration,
    /// How often the sweeper looks for runs whose runner died
    /// (`CAR_SWEEP_INTERVAL_MS`, default 10 s; with `shared_state`).
    pub sweep_interval: Duration,
    /// Where every session keeps its run traces (`$CAR_HOME/runs`); `None`:
    /// in memory.
    pub runs_dir: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            token: None,
            host_token: None,
            agent_tokens: Vec::new(),
            allow_self_approval: false,
            auth_max_failures: 5,
            auth_failure_window: Duration::from_secs(60),
            max_unauthenticated: 64,
            auth_timeout: Duration::from_secs(30),
            max_queued_frames: 4096,
            max_queued_bytes: 64 * 1024 * 1024,
            max_in_flight: 1024,
            max_frame_bytes: 16 * 1024 * 1024,
            handler_timeout: Duration::from_secs(30 * 60),
            tool_timeout: Duration::from_secs(300),
            callback_grace: Duration::from_secs(5),
            submit_grace: Duration::from_secs(15),
            ping_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(90),
            policy_dir: None,
            admission_path: None,
            ledger_path: None,
            ledger_key_path: None,
            supervision_timeout: Duration::from_secs(60),
            approvals_dir: None,
            event_log: None,
            webhooks: None,
            shared_store: None,
            shared_state: false,
            checkpoint_lease: crate::checkpoint::DEFAULT_LEASE,
            sweep_interval: Duration::from_secs(10),
            runs_dir: None,
        }
    }
}

/// The configuration [`fuzz_frames_after_auth`] runs with: no policy
/// directory, no ledger, short clocks.
fn fuzz_config() -> Config {
    Config {
        token: Some("fuzz".into()),
        handler_timeout: Duration::from_millis(500),
        tool_timeout: Duration::from_millis(50),
        callback_grace: Duration::from_millis(10),
        submit_grace: Duration::from_millis(10),
        supervision_timeout: Duration::from_millis(20),
        ..Config::default()
    }
}

/// Fuzzing support (`fuzz/fuzz_targets/rpc_session.rs`): feeds text frames
/// to one connection that has already authenticated (operator) and
/// negotiated, through the daemon's own gates and dispatcher but without a
/// socket, and returns every frame it sent back. `tools.execute` callbacks
/// are answered with a tool error; handlers still running after a second
/// are abandoned. Not part of the daemon's API.
#[doc(hidden)]
pub fn fuzz_frames_after_auth(frames: &[&str]) -> Vec<serde_json::Value> {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(fuzz_frames_after_auth_async(frames)),
        Err(_) => Vec::new(),
    }
}

/// [`fuzz_frames_after_auth`] on the caller's runtime.
#[doc(hidden)]
pub async fn fuzz_frames_after_auth_async(frames: &[&str]) -> Vec<serde_json::Value> {
    conn::drive_frames(fuzz_config(), frames, Duration::from_secs(1)).await
}

/// What every connection of one daemon shares.
pub(crate) struct Daemon {
    /// The daemon-wide supervision registry.
    pub(crate) supervisors: Arc<supervision::Supervisors>,
    /// The approvals ledger, one for the daemon so its read cache serves
    /// every connection; with `--store`, shared with every daemon of the
    /// store (`crate::store::ledger`).
    pub(crate) ledger: Option<Arc<crate::store::ledger::SharedLedger>>,
    /// Failed-auth accounting per peer address.
    pub(crate) throttle: throttle::AuthThrottle,
    /// Connections accepted and not yet authenticated.
    pub(crate) unauthenticated: Arc<AtomicUsize>,
    /// The ask approvals (the one store), when configured.
    pub(crate) approvals: Option<Arc<approvals::Approvals>>,
    /// The live sessions and recent submissions (the dashboard's view).
    pub(crate) activity: Arc<activity::Activity>,
    /// The rate windows of tool `rate_limit`s: one set for every
    /// connection (the shared store's with `--store`, so a limit holds
    /// across daemons too).
    pub(crate) rates: Arc<dyn crate::store::RateLimitBackend>,
    /// Where suspended proposals wait: the shared store's with `--store`
    /// (another daemon may resume them), else `$CAR_HOME/checkpoints`.
    pub(crate) checkpoints: Arc<dyn crate::checkpoint::CheckpointBackend>,
    /// Every connection's run trace records (`runs.subscribe`).
    pub(crate) runs_trace: tokio::sync::broadcast::Sender<Arc<crate::events::Event>>,
}

impl Daemon {
    pub(crate) fn new(config: &Config) -> Daemon {
        let ledger = config.ledger_path.as_ref().and_then(|p| {
            match crate::policy::JsonlLedger::open(p, config.ledger_key_path.as_deref()) {
                Ok(l) => Some(Arc::new(match &config.shared_store {
                    Some(s) => crate::store::ledger::SharedLedger::shared(Arc::new(l), s.ledger.clone()),
                    None => crate::store::ledger::SharedLedger::local(Arc::new(l)),
                })),
                // Fail closed: no ledger admits nothing, and every
                // ledger method reports the key error itself.
                Err(e) => {
                    eprintln!("car-server: approvals ledger disabled: {e}");
                    None
                }
            }
        });
        Daemon {
            supervisors: Arc::new(supervision::Supervisors::new(config.supervision_timeout)),
            ledger: ledger.clone(),
            throttle: throttle::AuthThrottle::new(config.auth_max_failures, config.auth_failure_window),
            unauthenticated: Arc::new(AtomicUsize::new(0)),
            activity: Arc::new(activity::Activity::default()),
            rates: match &config.shared_store {
                Some(s) => s.rates.clone(),
                None => Arc::new(crate::engine::RateLimiter::default()),
            },
            checkpoints: match (&config.shared_store, &config.approvals_dir) {
                (Some(s), _) => s.checkpoints.clone(),
                (None, Some(d)) => match crate::checkpoint::FileCheckpoints::open(d.join("checkpoints")) {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        eprintln!("car-server: suspended proposals kept in memory: {e}");
                        Arc::new(crate::checkpoint::MemoryCheckpoints::default())
                    }
                },
                (None, None) => Arc::new(crate::checkpoint::MemoryCheckpoints::default()),
            },
            runs_trace: tokio::sync::broadcast::channel(1024).0,
            approvals: config.approvals_dir.as_ref().and_then(|d| {
                if let Some(shared) = &config.shared_store {
                    return Some(approvals::Approvals::open_shared(
                        shared.approvals.clone(),
                        d,
                        config.allow_self_approval,
                        ledger.clone(),
                    ));
                }
                match approvals::Approvals::open(d, config.allow_self_approval, ledger.clone()) {
                    Ok(a) => Some(a),
                    // Fail closed: without the store every ask is refused.
                    Err(e) => {
                        eprintln!("car-server: approvals store disabled: {e}");
                        None
                    }
                }
            }),
        }
    }
}

/// One slot of [`Daemon::unauthenticated`], released once (at
/// authentication or when the connection ends).
pub(crate) struct UnauthSlot(Option<Arc<AtomicUsize>>);

impl UnauthSlot {
    /// Takes a slot, or `None` when `max` are taken.
    pub(crate) fn take(counter: &Arc<AtomicUsize>, max: usize) -> Option<UnauthSlot> {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| UnauthSlot(Some(counter.clone())))
    }

    /// A slot that holds nothing (auth off).
    pub(crate) fn none() -> UnauthSlot {
        UnauthSlot(None)
    }

    /// Gives the slot back (idempotent).
    pub(crate) fn release(&mut self) {
        if let Some(c) = self.0.take() {
            c.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for UnauthSlot {
    fn drop(&mut self) {
        self.release();
    }
}

/// Accepts connections until `shutdown` resolves; each connection runs on
/// its own task and a failing connection never affects the others.
pub async fn serve(listener: TcpListener, config: Config, shutdown: impl Future<Output = ()>) {
    serve_all(listener, None, None, config, shutdown).await;
}

/// [`serve`], plus the dashboard (`src/server/dashboard/`) on `dashboard`
/// and the MCP endpoint (`POST /mcp`, `GET /mcp/health`) on `mcp` when
/// given; all stop when `shutdown` resolves. Without an approvals store
/// (`Config::approvals_dir`) there is no dashboard.
pub async fn serve_all(
    listener: TcpListener,
    dashboard: Option<TcpListener>,
    mcp: Option<TcpListener>,
    config: Config,
    shutdown: impl Future<Output = ()>,
) {
    let daemon = Arc::new(Daemon::new(&config));
    let dashboard_url = dashboard.as_ref().and_then(|l| l.local_addr().ok()).map(|a| format!("http://{a}"));
    match (&config.webhooks, &daemon.approvals) {
        (Some(h), Some(a)) => webhooks::spawn(h.clone(), a, dashboard_url),
        (Some(_), None) => eprintln!("car-server: approval webhooks not sent: the daemon has no approvals store"),
        (None, _) => {}
    }
    let dashboard_task = match (dashboard, &daemon.approvals) {
        (Some(l), Some(a)) => match l.local_addr() {
            Ok(local) => {
                let creds = dashboard::Credentials { operator: config.token.clone(), host: config.host_token.clone() };
                let d = Arc::new(dashboard::Dashboard::new(a.clone(), daemon.clone(), creds, local));
                Some(tokio::spawn(dashboard::serve(l, d, std::future::pending())))
            }
            Err(e) => {
                eprintln!("car-server: dashboard disabled: {e}");
                None
            }
        },
        (Some(_), None) => {
            eprintln!("car-server: dashboard disabled: the daemon has no approvals store");
            None
        }
        (None, _) => None,
    };
    let config = Arc::new(config);
    let sweeper = config.shared_state.then(|| tokio::spawn(sweep(config.clone(), daemon.clone())));
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let endpoint = mcp.map(|l| {
        let stopped = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        tokio::spawn(mcp_endpoint::serve(l, config.clone(), daemon.clone(), stopped))
    });
    let shutdown = async move {
        shutdown.await;
        let _ = stop.send(true);
    };
    serve_ws(listener, config, daemon, shutdown).await;
    if let Some(e) = endpoint {
        let _ = e.await;
    }
    if let Some(t) = dashboard_task {
        t.abort();
    }
    if let Some(t) = sweeper {
        t.abort();
    }
}

/// The sweeper of a daemon whose state lives in the shared store: every
/// `sweep_interval`, the runs of any daemon whose runner died (its lease
/// ran out) are rolled back in the store (`Runtime::sweep`).
async fn sweep(config: Arc<Config>, daemon: Arc<Daemon>) {
    let rt = match conn::session_runtime(&config, &daemon, &[], None) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("car-server: sweeper not started: {e}");
            return;
        }
    };
    let claimant = format!("sweeper-{}", uuid::Uuid::new_v4());
    loop {
        tokio::time::sleep(config.sweep_interval).await;
        match rt.runtime().sweep(&claimant).await {
            Ok(swept) => {
                for s in swept {
                    eprintln!(
                        "car-server: swept run {} (proposal {}) whose daemon stopped: restored {}, left {}",
                        s["id"].as_str().unwrap_or_default(),
                        s["proposal_id"].as_str().unwrap_or_default(),
                        s["restored"],
                        s["not_restored"]
                    );
                }
            }
            Err(e) => eprintln!("car-server: sweep: {e}"),
        }
    }
}

async fn serve_ws(listener: TcpListener, config: Arc<Config>, daemon: Arc<Daemon>, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let slot = if config.token.is_none() {
                        UnauthSlot::none()
                    } else {
                        match UnauthSlot::take(&daemon.unauthenticated, config.max_unauthenticated) {
                            Some(s) => s,
                            None => {
                                // Closed before the upgrade: nothing is allocated for it.
                                eprintln!(
                                    "car-server: {peer}: refused: {} connections are already waiting to authenticate",
                                    config.max_unauthenticated
                                );
                                drop(stream);
                                continue;
                            }
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(conn::serve_connection(stream, peer, config.clone(), daemon.clone(), slot));
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
