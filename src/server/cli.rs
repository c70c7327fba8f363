//! The daemon's command line, shared by `car-server` and `car serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::server::{self, Config, auth};

const USAGE: &str = "\
car-server: the car-runtime daemon (JSON-RPC 2.0 over WebSocket)

usage: car-server [options]

  --port N               TCP port (default 9100; 0 picks a free one)
  --bind ADDR            interface address (default 127.0.0.1)
  --no-auth              accept connections without a token (CAR_NO_AUTH=1)
  --auth-token TOKEN     use this token instead of a generated one (CAR_AUTH_TOKEN)
  --auth-token-file F    read the token from F, then delete F (CAR_AUTH_TOKEN_FILE)
  --host-token TOKEN     the host role's token (CAR_HOST_TOKEN); when set, only a
                         host connection may approve, reject, set the tier or supervise
  --agent-token ID=TOKEN an agent's token, repeatable (CAR_AGENT_TOKENS=ID=T,ID2=T2);
                         session.auth {token, agent_id} makes an agent connection
  --allow-self-approval  a connection's approvals and verdicts count for its own
                         proposals (CAR_ALLOW_SELF_APPROVAL=1; off by default)
  --max-frame-bytes N    text frames longer than N are refused (CAR_MAX_FRAME_BYTES,
                         default 16777216)
  --dashboard PORT|disabled
                         the dashboard's HTTP port (CAR_DASHBOARD; default the
                         WebSocket port + 1, on CAR_DASHBOARD_BIND, default 127.0.0.1)
  --store URL            the shared store (CAR_STORE_URL): postgres://... keeps the
                         audit log, the ask approvals and the rate windows in
                         PostgreSQL, shared with every daemon of the database
                         (feature `postgres`; migrations at start, a newer schema
                         refuses to start); default: the files under $CAR_HOME
  --shared-state         with --store: every connection's state (state.*, the
                         proposals' reads and writes) lives in the store, shared
                         with every daemon of the database (CAR_SHARED_STATE=1);
                         default: each connection's own
  --mcp-bind ADDR        the MCP endpoint's address (CAR_MCP_BIND; default the bind
                         address at port + 2, a free port with --port 0; `disabled`)
  --webhook URL          POST every approval event, signed, to URL (repeatable;
                         CAR_WEBHOOKS=URL,URL2); needs CAR_WEBHOOK_SECRET (16+
                         characters) or --webhook-secret-file F. While set, asks
                         wait for an approver instead of being refused at once
  --require-auth         deprecated no-op (auth is on by default)
  --version, --help

environment: CAR_HOME (state root), CAR_HANDLER_TIMEOUT (seconds, default 1800),
CAR_TOOL_TIMEOUT (seconds, default 300), CAR_WS_PING_INTERVAL_MS (30000),
CAR_WS_IDLE_TIMEOUT_MS (90000), CAR_SUPERVISION_TIMEOUT_MS (60000),
CAR_AUTH_MAX_FAILURES (5 per peer address and window; 0 = no limit),
CAR_AUTH_FAILURE_WINDOW_MS (60000), CAR_AUTH_TIMEOUT_MS (30000),
CAR_MAX_UNAUTH_CONNECTIONS (64), CAR_MAX_QUEUED_FRAMES (4096),
CAR_MAX_QUEUED_BYTES (67108864), CAR_MAX_IN_FLIGHT (1024),
CAR_WEBHOOK_ATTEMPTS (5), CAR_WEBHOOK_BACKOFF_MS (500, doubling),
CAR_WEBHOOK_TIMEOUT_MS (10000), CAR_DASHBOARD_URL (the approval links' address)";

struct Args {
    port: u16,
    bind: String,
    mcp_bind: Option<String>,
    no_auth: bool,
    token: Option<String>,
    token_file: Option<PathBuf>,
    host_token: Option<String>,
    agent_tokens: Vec<String>,
    allow_self_approval: bool,
    max_frame_bytes: Option<usize>,
    dashboard: Option<String>,
    store: Option<String>,
    shared_state: bool,
    webhooks: Vec<String>,
    webhook_secret_file: Option<PathBuf>,
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
}

fn parse_args(args: Vec<String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        port: 9100,
        bind: "127.0.0.1".into(),
        mcp_bind: None,
        no_auth: false,
        token: None,
        token_file: None,
        host_token: None,
        agent_tokens: Vec::new(),
        allow_self_approval: false,
        max_frame_bytes: None,
        dashboard: None,
        store: None,
        shared_state: false,
        webhooks: Vec::new(),
        webhook_secret_file: None,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value =
            |name: &str| inline.clone().or_else(|| it.next()).ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--port" => a.port = value("--port")?.parse().map_err(|e| format!("--port: {e}"))?,
            "--bind" => a.bind = value("--bind")?,
            "--mcp-bind" => a.mcp_bind = Some(value("--mcp-bind")?),
            "--no-auth" => a.no_auth = true,
            "--auth-token" => a.token = Some(value("--auth-token")?),
            "--auth-token-file" => a.token_file = Some(PathBuf::from(value("--auth-token-file")?)),
            "--host-token" => a.host_token = Some(value("--host-token")?),
            "--agent-token" => a.agent_tokens.push(value("--agent-token")?),
            "--allow-self-approval" => a.allow_self_approval = true,
            "--dashboard" => a.dashboard = Some(value("--dashboard")?),
            "--max-frame-bytes" => {
                a.max_frame_bytes =
                    Some(value("--max-frame-bytes")?.parse().map_err(|e| format!("--max-frame-bytes: {e}"))?)
            }
            "--store" => a.store = Some(value("--store")?),
            "--shared-state" => a.shared_state = true,
            "--webhook" => a.webhooks.push(value("--webhook")?),
            "--webhook-secret-file" => a.webhook_secret_file = Some(PathBuf::from(value("--webhook-secret-file")?)),
            "--require-auth" => {
                eprintln!("car-server: --require-auth is deprecated and has no effect: auth is on by default")
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(None);
            }
            "--version" | "-V" => {
                println!("car-server {} (protocol {})", crate::VERSION, server::handshake::PROTOCOL_VERSION);
                return Ok(None);
            }
            other => return Err(format!("unknown option `{other}` (see --help)")),
        }
    }
    Ok(Some(a))
}

/// Where the dashboard listens: `disabled`, a port, or (unset) the
/// WebSocket port + 1 (0 when that is 0), on `CAR_DASHBOARD_BIND` (default
/// 127.0.0.1).
fn dashboard_addr(setting: Option<String>, ws_port: u16) -> Result<Option<String>, String> {
    let port = match setting.as_deref().map(str::trim) {
        Some("disabled" | "off" | "none") => return Ok(None),
        Some(p) => p
            .parse::<u16>()
            .map_err(|e| format!("--dashboard / CAR_DASHBOARD: `{p}` is not a port or `disabled`: {e}"))?,
        None if ws_port == 0 => 0,
        None => ws_port
            .checked_add(1)
            .ok_or("the dashboard's default port (the WebSocket port + 1) is out of range; set --dashboard")?,
    };
    let bind = env("CAR_DASHBOARD_BIND").unwrap_or_else(|| "127.0.0.1".into());
    Ok(Some(if bind.contains(':') && !bind.starts_with('[') {
        format!("[{bind}]:{port}")
    } else {
        format!("{bind}:{port}")
    }))
}

/// `--webhook` (repeatable) and `CAR_WEBHOOKS` (comma- or space-separated),
/// the secret from `--webhook-secret-file` or `CAR_WEBHOOK_SECRET`, and
/// `CAR_WEBHOOK_ATTEMPTS`, `CAR_WEBHOOK_BACKOFF_MS`, `CAR_WEBHOOK_TIMEOUT_MS`,
/// `CAR_DASHBOARD_URL` (the link's address, when receivers reach the
/// dashboard by another name).
fn webhooks_config(args: &Args) -> Result<Option<server::webhooks::Webhooks>, String> {
    let mut urls = args.webhooks.clone();
    if let Some(list) = env("CAR_WEBHOOKS") {
        urls.extend(list.split(|c: char| c == ',' || c.is_whitespace()).filter(|u| !u.is_empty()).map(str::to_string));
    }
    if urls.is_empty() {
        return Ok(None);
    }
    let secret = match &args.webhook_secret_file {
        Some(p) => {
            Some(std::fs::read_to_string(p).map_err(|e| format!("--webhook-secret-file `{}`: {e}", p.display()))?)
        }
        None => env("CAR_WEBHOOK_SECRET"),
    };
    let mut h = server::webhooks::Webhooks::new(urls, secret)?;
    if let Some(n) = env_num("CAR_WEBHOOK_ATTEMPTS")? {
        h.attempts = (n as u32).clamp(1, 20);
    }
    if let Some(ms) = env_num("CAR_WEBHOOK_BACKOFF_MS")? {
        h.backoff = Duration::from_millis(ms);
    }
    if let Some(ms) = env_num("CAR_WEBHOOK_TIMEOUT_MS")? {
        h.timeout = Duration::from_millis(ms.max(10));
    }
    h.dashboard_url = env("CAR_DASHBOARD_URL");
    Ok(Some(h))
}

fn env_num(name: &str) -> Result<Option<u64>, String> {
    env(name).map(|v| v.trim().parse::<u64>().map_err(|e| format!("{name}=`{v}`: {e}"))).transpose()
}

/// A token from the command line or the environment (`None` when neither
/// names it). A token that is set but empty or whitespace refuses to start:
/// it would make the auth gate accept the empty token.
fn token_source(flag: Option<String>, flag_name: &str, var: &str) -> Result<Option<String>, String> {
    // A blank variable counts as unset (as clients read CAR_AUTH_TOKEN); a
    // blank flag is a mistake.
    let (value, from) = match (flag, env(var)) {
        (Some(v), _) => (v, flag_name.to_string()),
        (None, Some(v)) => (v, var.to_string()),
        (None, None) => return Ok(None),
    };
    auth::check_token(&value, &from).map(Some)
}

/// `ID=TOKEN` entries (the flag's, else `CAR_AGENT_TOKENS`, comma-separated).
fn agent_tokens(flags: Vec<String>) -> Result<Vec<(String, String)>, String> {
    let (entries, from): (Vec<String>, &str) = if !flags.is_empty() {
        (flags, "--agent-token")
    } else {
        match env("CAR_AGENT_TOKENS") {
            Some(v) => (v.split(',').map(str::to_string).collect(), "CAR_AGENT_TOKENS"),
            None => return Ok(Vec::new()),
        }
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for e in entries {
        let (id, token) = e
            .split_once('=')
            .ok_or_else(|| format!("{from}: `{}` is not ID=TOKEN", e.split('=').next().unwrap_or("")))?;
        let id = id.trim();
        if id.is_empty() {
            return Err(format!("{from}: an agent id is empty"));
        }
        if out.iter().any(|(i, _)| i == id) {
            return Err(format!("{from}: agent `{id}` is given twice"));
        }
        out.push((id.to_string(), auth::check_token(token, &format!("{from} (agent `{id}`)"))?));
    }
    Ok(out)
}

/// Runs the daemon with these command-line arguments (without the program
/// name): what `car-server` and `car serve` do. Exit code 2 on bad input.
pub fn main_with_args(args: Vec<String>) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("car-server: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let Some(args) = parse_args(args)? else { return Ok(()) };
    let paths = auth::Paths::resolve(env)?;
    let mut config = Config::default();
    if let Some(n) = args.max_frame_bytes.or(env_num("CAR_MAX_FRAME_BYTES")?.map(|n| n as usize)) {
        config.max_frame_bytes = n.max(1);
    }
    if let Some(s) = env_num("CAR_HANDLER_TIMEOUT")? {
        config.handler_timeout = Duration::from_secs(s.max(1));
    }
    if let Some(s) = env_num("CAR_TOOL_TIMEOUT")? {
        config.tool_timeout = Duration::from_secs(s.max(1));
    }
    if let Some(ms) = env_num("CAR_WS_PING_INTERVAL_MS")? {
        config.ping_interval = Duration::from_millis(ms.max(10));
    }
    if let Some(ms) = env_num("CAR_WS_IDLE_TIMEOUT_MS")? {
        config.idle_timeout = Duration::from_millis(ms.max(10));
    }
    if let Some(ms) = env_num("CAR_SUPERVISION_TIMEOUT_MS")? {
        config.supervision_timeout = Duration::from_millis(ms);
    }
    if let Some(n) = env_num("CAR_AUTH_MAX_FAILURES")? {
        config.auth_max_failures = u32::try_from(n).unwrap_or(u32::MAX);
    }
    if let Some(ms) = env_num("CAR_AUTH_FAILURE_WINDOW_MS")? {
        config.auth_failure_window = Duration::from_millis(ms.max(1));
    }
    if let Some(ms) = env_num("CAR_AUTH_TIMEOUT_MS")? {
        config.auth_timeout = Duration::from_millis(ms.max(10));
    }
    if let Some(n) = env_num("CAR_MAX_UNAUTH_CONNECTIONS")? {
        config.max_unauthenticated = (n as usize).max(1);
    }
    if let Some(n) = env_num("CAR_MAX_QUEUED_FRAMES")? {
        config.max_queued_frames = (n as usize).max(1);
    }
    if let Some(n) = env_num("CAR_MAX_QUEUED_BYTES")? {
        config.max_queued_bytes = (n as usize).max(1);
    }
    if let Some(n) = env_num("CAR_MAX_IN_FLIGHT")? {
        config.max_in_flight = (n as usize).max(1);
    }
    config.webhooks = webhooks_config(&args)?;
    config.allow_self_approval = args.allow_self_approval
        || env("CAR_ALLOW_SELF_APPROVAL").is_some_and(|v| v != "0" && v.to_lowercase() != "false");
    config.policy_dir = Some(paths.policy_dir());
    config.admission_path = Some(paths.state_root.join("permissions.toml"));
    crate::approval::ledger::migrate_legacy_ledger(&paths.state_root).map_err(|e| e.to_string())?;
    config.ledger_path = Some(paths.state_root.join(crate::approval::TIER_LEDGER_FILE));
    config.approvals_dir = Some(paths.state_root.clone());
    config.runs_dir = Some(paths.state_root.join("runs"));
    crate::policy::LedgerKey::load_or_create(&paths.ledger_key_file).map_err(|e| e.to_string())?;
    config.ledger_key_path = Some(paths.ledger_key_file.clone());
    let store_url = args.store.clone().or_else(|| env("CAR_STORE_URL"));
    let shared_state =
        args.shared_state || env("CAR_SHARED_STATE").is_some_and(|v| v != "0" && v.to_lowercase() != "false");
    if shared_state && store_url.is_none() {
        return Err("--shared-state / CAR_SHARED_STATE needs a shared store (--store postgres://...)".to_string());
    }
    config.shared_state = shared_state;
    let ms = |name: &str| -> Result<Option<std::time::Duration>, String> {
        env(name)
            .map(|v| v.parse::<u64>().map(std::time::Duration::from_millis).map_err(|e| format!("{name}: {e}")))
            .transpose()
    };
    if let Some(d) = ms("CAR_CHECKPOINT_LEASE_MS")? {
        config.checkpoint_lease = d.max(std::time::Duration::from_millis(100));
    }
    if let Some(d) = ms("CAR_SWEEP_INTERVAL_MS")? {
        config.sweep_interval = d.max(std::time::Duration::from_millis(50));
    }
    if store_url.is_none() {
        let events_path = paths.state_root.join(crate::store::file::EVENTS_FILE);
        let (audit, report) = crate::store::file::AuditFile::open(&events_path).map_err(|e| e.to_string())?;
        if let Some(t) = &report.torn {
            let moved = t.moved_to.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            eprintln!(
                "car-server: {}: line {} was a torn record ({} bytes, a write cut short): skipped, moved to {moved}",
                events_path.display(),
                t.line,
                t.bytes
            );
        }
        config.event_log = Some(std::sync::Arc::new(audit));
    }
    let no_auth = args.no_auth || env("CAR_NO_AUTH").is_some_and(|v| v != "0" && v.to_lowercase() != "false");

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let addr = if args.bind.contains(':') && !args.bind.starts_with('[') {
            format!("[{}]:{}", args.bind, args.port)
        } else {
            format!("{}:{}", args.bind, args.port)
        };
        let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                format!("cannot listen on {addr}: the port is already in use (is another car-server running? choose another with --port)")
            } else {
                format!("cannot listen on {addr}: {e}")
            }
        })?;
        let local: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
        if let Some(url) = &store_url {
            let (sink, backends) = open_store(url).await?;
            config.event_log = Some(sink);
            config.shared_store = Some(backends);
        }

        // Auth: the token, and whether this daemon publishes it.
        let mut published: Option<(PathBuf, String)> = None;
        let mut _lock = None;
        if !no_auth {
            let supplied = match (token_source(args.token, "--auth-token", "CAR_AUTH_TOKEN")?, args.token_file.or_else(|| env("CAR_AUTH_TOKEN_FILE").map(PathBuf::from))) {
                (Some(t), _) => Some(t),
                (None, Some(f)) => Some(auth::take_token_file(&f)?),
                (None, None) => None,
            };
            let token = match supplied {
                Some(t) => t,
                None => auth::generate_token()?,
            };
            match auth::PrimacyLock::try_acquire(&paths.lock_file())? {
                Some(lock) => {
                    auth::write_token_file(&paths.token_file, &token)?;
                    eprintln!("car-server: auth token written to {} (mode 0600)", paths.token_file.display());
                    published = Some((paths.token_file.clone(), token.clone()));
                    _lock = Some(lock);
                }
                None => eprintln!(
                    "car-server: another car-server is primary for {}; its token file {} is left alone and this daemon's token stays in memory (reach it with the token given by --auth-token, CAR_AUTH_TOKEN, --auth-token-file or CAR_AUTH_TOKEN_FILE)",
                    paths.state_root.display(),
                    paths.token_file.display()
                ),
            }
            config.host_token = token_source(args.host_token, "--host-token", "CAR_HOST_TOKEN")?;
            config.agent_tokens = agent_tokens(args.agent_tokens)?;
            let mut all: Vec<(&str, &str)> = vec![("the daemon token", token.as_str())];
            if let Some(h) = &config.host_token {
                all.push(("the host token", h));
            }
            for (id, t) in &config.agent_tokens {
                all.push((id.as_str(), t.as_str()));
            }
            for (i, (a, ta)) in all.iter().enumerate() {
                if let Some((b, _)) = all[..i].iter().find(|(_, tb)| tb == ta) {
                    return Err(format!("{b} and {a} are the same token: each role needs its own"));
                }
            }
            config.token = Some(token);
        } else if args.host_token.is_some() || !args.agent_tokens.is_empty() {
            return Err("--host-token and --agent-token need auth on (drop --no-auth)".into());
        }
        eprintln!(
            "car-server {} listening on ws://{local}/ (protocol {}, auth {})",
            crate::VERSION,
            server::handshake::PROTOCOL_VERSION,
            if config.token.is_some() { "on" } else { "off" }
        );
        if config.token.is_some() {
            eprintln!(
                "car-server: roles: operator (daemon token){}{}; self-approval {}",
                if config.host_token.is_some() { ", host (host token; only it decides)" } else { "" },
                if config.agent_tokens.is_empty() { String::new() } else { format!(", {} agent token(s)", config.agent_tokens.len()) },
                if config.allow_self_approval { "allowed" } else { "off" }
            );
        }

        let dashboard_setting = args.dashboard.or_else(|| env("CAR_DASHBOARD"));
        let chosen = dashboard_setting.is_some();
        let dashboard = match dashboard_addr(dashboard_setting, local.port())? {
            None => None,
            Some(addr) => match tokio::net::TcpListener::bind(&addr).await {
                Ok(l) => {
                    let at = l.local_addr().map_err(|e| e.to_string())?;
                    eprintln!("car-server: dashboard on http://{at}/ (sign in with the daemon token)");
                    Some(l)
                }
                // A port the operator chose must be served; the default
                // (the WebSocket port + 1) may be taken by another program.
                Err(e) if !chosen => {
                    eprintln!("car-server: dashboard not served: {addr}: {e} (choose a port with --dashboard PORT)");
                    None
                }
                Err(e) => {
                    return Err(format!(
                        "cannot serve the dashboard on {addr}: {e} (choose another with --dashboard PORT, or --dashboard disabled)"
                    ));
                }
            },
        };
        let mcp = mcp_listener(args.mcp_bind.or_else(|| env("CAR_MCP_BIND")), &local, args.port).await?;
        server::serve_all(listener, dashboard, mcp, config, shutdown_signal()).await;
        crate::sandbox::release_idle_placeholders();

        if let Some((file, token)) = published {
            // Remove the file only if it still holds our token.
            if std::fs::read_to_string(&file).is_ok_and(|t| t.trim() == token) {
                let _ = std::fs::remove_file(&file);
            }
        }
        eprintln!("car-server: shut down");
        Ok(())
    })
}

/// The daemon's event sink and backends of its shared store.
type Opened = (std::sync::Arc<dyn crate::events::EventSink>, crate::store::Backends);

/// Connects the shared store of `--store` / `CAR_STORE_URL` (migrations
/// applied; a newer schema refuses to start) and returns the daemon's event
/// sink and its backends (the ask approvals go through them). The writer id
/// (one hash chain per daemon) is `CAR_STORE_WRITER`, else a fresh one.
#[cfg(feature = "postgres")]
async fn open_store(url: &str) -> Result<Opened, String> {
    use crate::store::postgres::{PgBackends, PgEventSink};
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(format!("--store / CAR_STORE_URL: `{url}` is not a postgres:// URL"));
    }
    let schema = env("CAR_STORE_SCHEMA").unwrap_or_else(|| "public".to_string());
    let writer = env("CAR_STORE_WRITER").unwrap_or_else(|| format!("car-server-{}", uuid::Uuid::new_v4()));
    let pg = PgBackends::connect(url, &schema, &writer).await.map_err(|e| format!("--store: {e}"))?;
    eprintln!("car-server: store: PostgreSQL (schema `{schema}`, event writer `{writer}`; approvals shared)");
    let backends = pg.backends();
    Ok((PgEventSink::spawn(pg), backends))
}

#[cfg(not(feature = "postgres"))]
async fn open_store(_url: &str) -> Result<Opened, String> {
    Err("--store / CAR_STORE_URL: this car-server was built without the `postgres` feature".to_string())
}

/// The MCP endpoint's listener: `--mcp-bind` / `CAR_MCP_BIND` (`disabled`:
/// none), else the WebSocket address at port + 2 (a free port when the
/// WebSocket port was 0).
async fn mcp_listener(
    bind: Option<String>,
    ws: &SocketAddr,
    ws_port: u16,
) -> Result<Option<tokio::net::TcpListener>, String> {
    let addr: SocketAddr = match bind.as_deref().map(str::trim) {
        Some("disabled") => return Ok(None),
        Some(a) => a
            .parse()
            .map_err(|e| format!("--mcp-bind `{a}`: not an address such as 127.0.0.1:9102 or `disabled` ({e})"))?,
        None if ws_port == 0 => SocketAddr::new(ws.ip(), 0),
        None => SocketAddr::new(
            ws.ip(),
            ws.port().checked_add(2).ok_or("--port: no port + 2 for the MCP endpoint; set --mcp-bind")?,
        ),
    };
    let chosen = bind.is_some();
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        // The default address (the WebSocket port + 2) may be taken by
        // another program; an address the operator chose must be served.
        Err(e) if !chosen => {
            eprintln!("car-server: MCP endpoint not served: {addr}: {e} (choose an address with --mcp-bind)");
            return Ok(None);
        }
        Err(e) => {
            return Err(format!(
                "cannot listen on {addr} for the MCP endpoint: {e} (choose another with --mcp-bind, or `--mcp-bind disabled`)"
            ));
        }
    };
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("car-server: MCP endpoint on http://{local}/mcp (health: http://{local}/mcp/health)");
    Ok(Some(listener))
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut i), Ok(mut t)) => {
                tokio::select! {
                    _ = i.recv() => {}
                    _ = t.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
