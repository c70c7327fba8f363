//! The dashboard: HTTP beside the WebSocket endpoint (`websocket-protocol.md`,
//! "Sibling endpoints"), on the daemon's port + 1 by default, 127.0.0.1.
//!
//! - Sign-in with the daemon's token (or the host token) makes an HttpOnly,
//!   SameSite=Strict session cookie; nothing but the sign-in page (and its
//!   style sheet) is served without one.
//! - Every state-changing request carries the session's CSRF token
//!   (`X-CSRF-Token`) and is refused from a foreign `Origin`; a request whose
//!   `Host` is not the dashboard's own address is refused (DNS rebinding).
//! - Pages are static shells; `app.js` fills them from the JSON API with
//!   `textContent` only, and the Content-Security-Policy forbids inline
//!   script: what a proposal controls (tool names, parameters, diffs, errors)
//!   is attacker text and is never interpreted as HTML.
//! - Decisions go through [`Approvals::resolve`], the same call as
//!   `host.resolve_approval`; the reviewer is `car-server:<role>:dashboard-<id>`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::Daemon;

/// A refusal, boxed (a `Response` is large).
type Refusal = Box<Response>;
use super::approvals::{Approvals, DecisionRequest, Reviewer};
use super::auth::tokens_equal;

const PAGE: &str = include_str!("page.html");
const LOGIN: &str = include_str!("login.html");
const APP_JS: &str = include_str!("app.js");
const STYLE: &str = include_str!("style.css");

/// The session cookie's name.
pub const COOKIE: &str = "car_dashboard";
/// How long a sign-in lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The Content-Security-Policy of every response.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Where the dashboard listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DashboardBind {
    /// No dashboard.
    Disabled,
    /// The WebSocket port + 1 on the WebSocket's interface (port 0 when the
    /// WebSocket port is 0).
    Default,
    /// This address.
    At(SocketAddr),
}

/// Who may sign in.
#[derive(Clone)]
pub(crate) struct Credentials {
    /// The daemon (operator) token; `None` when auth is off.
    pub(crate) operator: Option<String>,
    /// The host token.
    pub(crate) host: Option<String>,
}

struct WebSession {
    csrf: String,
    role: &'static str,
    created: Instant,
}

pub(crate) struct Dashboard {
    approvals: Arc<Approvals>,
    daemon: Arc<Daemon>,
    creds: Credentials,
    sessions: Mutex<HashMap<String, WebSession>>,
    /// The address it is bound to (`Host` must name it on a loopback bind).
    local: SocketAddr,
}

fn random_token() -> String {
    use base64::Engine;
    let mut b = [0u8; 32];
    // A failing OS random source leaves no usable session: fail closed.
    if getrandom::fill(&mut b).is_err() {
        return String::new();
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn secured(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    secured((status, Json(json!({"error": {"code": code, "message": message}}))).into_response())
}

fn html(body: String) -> Response {
    secured(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response())
}

/// The session id of the request's cookie, if any.
fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == COOKIE && !v.is_empty()).then(|| v.to_string())
    })
}

type Shared = Arc<Dashboard>;

/// A signed-in request: its session id, CSRF token and role.
struct Signed {
    id: String,
    csrf: String,
    role: &'static str,
}

impl Dashboard {
    pub(crate) fn new(approvals: Arc<Approvals>, daemon: Arc<Daemon>, creds: Credentials, local: SocketAddr) -> Self {
        Dashboard { approvals, daemon, creds, sessions: Mutex::new(HashMap::new()), local }
    }

    /// The routes.
    pub(crate) fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/login", get(login_page).post(login))
            .route("/logout", post(logout))
            .route("/static/style.css", get(style))
            .route("/static/app.js", get(app_js))
            .route("/", get(page))
            .route("/approval/{id}", get(page))
            .route("/proposals", get(page))
            .route("/events", get(page))
            .route("/config", get(page))
            .route("/api/approvals", get(api_approvals))
            .route("/api/approval/{id}", get(api_approval))
            .route("/api/approval/{id}/decide", post(api_decide))
            .route("/api/stream", get(api_stream))
            .route("/api/proposals", get(api_proposals))
            .route("/api/sessions", get(api_sessions))
            .route("/api/events", get(api_events))
            .route("/api/config", get(api_config))
            .fallback(not_found)
            .with_state(self)
    }

    /// The `Host` header names this dashboard (on a loopback bind; any host
    /// otherwise).
    fn host_ok(&self, headers: &HeaderMap) -> bool {
        if !self.local.ip().is_loopback() {
            return true;
        }
        let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else { return false };
        let port = self.local.port();
        host == format!("{}:{port}", self.local.ip()) || host == format!("localhost:{port}")
    }

    /// A state-changing request's `Origin`, when present, is this
    /// dashboard's own (`http://<Host>`).
    fn origin_ok(headers: &HeaderMap) -> bool {
        match headers.get(header::ORIGIN) {
            None => true,
            Some(o) => {
                let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
                o.to_str().is_ok_and(|o| !host.is_empty() && o == format!("http://{host}"))
            }
        }
    }

    fn signed(&self, headers: &HeaderMap) -> Option<Signed> {
        let id = cookie_of(headers)?;
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, s| s.created.elapsed() < SESSION_TTL);
        let (key, s) = sessions.iter().find(|(k, _)| tokens_equal(k, &id))?;
        Some(Signed { id: key.clone(), csrf: s.csrf.clone(), role: s.role })
    }

    /// The role a token signs in as, if any.
    fn role_of(&self, token: &str) -> Option<&'static str> {
        if let Some(h) = &self.creds.host
            && tokens_equal(h, token)
        {
            return Some("host");
        }
        match &self.creds.operator {
            Some(op) => tokens_equal(op, token).then_some("operator"),
            // Auth off: the documented trusted single-user posture.
            None => Some("operator"),
        }
    }

    fn may_decide(&self, role: &str) -> bool {
        role == "host" || (role == "operator" && self.creds.host.is_none())
    }
}

/// Checks every request: its `Host`, then its session. Pages redirect to the
/// sign-in page; the API answers 401.
fn gate(d: &Dashboard, headers: &HeaderMap, api: bool) -> Result<Signed, Refusal> {
    if !d.host_ok(headers) {
        return Err(Box::new(refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "bad_host",
            "the Host header does not name this dashboard",
        )));
    }
    match d.signed(headers) {
        Some(s) => Ok(s),
        None if api => {
            Err(Box::new(refuse(StatusCode::UNAUTHORIZED, "sign_in_required", "sign in first (POST /login)")))
        }
        None => Err(Box::new(secured(Redirect::to("/login").into_response()))),
    }
}

/// A state change: signed in, same origin, the session's CSRF token.
fn gate_change(d: &Dashboard, headers: &HeaderMap) -> Result<Signed, Refusal> {
    let s = gate(d, headers, true)?;
    if !Dashboard::origin_ok(headers) {
        return Err(Box::new(refuse(
            StatusCode::FORBIDDEN,
            "foreign_origin",
            "refused: the request comes from another origin",
        )));
    }
    let sent = headers.get("x-csrf-token").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if s.csrf.is_empty() || !tokens_equal(&s.csrf, sent) {
        return Err(Box::new(refuse(StatusCode::FORBIDDEN, "csrf", "refused: the CSRF token is missing or wrong")));
    }
    Ok(s)
}

async fn not_found(State(d): State<Shared>, headers: HeaderMap) -> Response {
    match gate(&d, &headers, true) {
        Err(r) => *r,
        Ok(_) => refuse(StatusCode::NOT_FOUND, "not_found", "no such page"),
    }
}

async fn login_page(State(d): State<Shared>, headers: HeaderMap) -> Response {
    if !d.host_ok(&headers) {
        return refuse(StatusCode::MISDIRECTED_REQUEST, "bad_host", "the Host header does not name this dashboard");
    }
    html(LOGIN.replace("{{MESSAGE}}", ""))
}

async fn style() -> Response {
    secured(([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response())
}

async fn app_js(State(d): State<Shared>, headers: HeaderMap) -> Response {
    match gate(&d, &headers, true) {
        Err(r) => *r,
        Ok(_) => secured(([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], APP_JS).into_response()),
    }
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(
    State(d): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    if !d.host_ok(&headers) {
        return refuse(StatusCode::MISDIRECTED_REQUEST, "bad_host", "the Host header does not name this dashboard");
    }
    if !Dashboard::origin_ok(&headers) {
        return refuse(StatusCode::FORBIDDEN, "foreign_origin", "refused: the request comes from another origin");
    }
    let throttle = &d.daemon.throttle;
    if throttle.locked(peer.ip(), Instant::now()).is_some() {
        let mut r = html(LOGIN.replace("{{MESSAGE}}", "Too many failed attempts; wait a minute."));
        *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        return r;
    }
    let Some(role) = d.role_of(form.token.trim()) else {
        throttle.fail(peer.ip(), Instant::now());
        let mut r = html(LOGIN.replace("{{MESSAGE}}", "That token is not this daemon's."));
        *r.status_mut() = StatusCode::UNAUTHORIZED;
        return r;
    };
    let (id, csrf) = (random_token(), random_token());
    if id.is_empty() || csrf.is_empty() {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, "no_randomness", "the OS random source failed");
    }
    lock(&d.sessions).insert(id.clone(), WebSession { csrf, role, created: Instant::now() });
    let mut r = secured(Redirect::to("/").into_response());
    let cookie = format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}", SESSION_TTL.as_secs());
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn logout(State(d): State<Shared>, headers: HeaderMap) -> Response {
    let s = match gate_change(&d, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    lock(&d.sessions).remove(&s.id);
    let mut r = secured(Json(json!({"signed_out": true})).into_response());
    let cookie = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn page(State(d): State<Shared>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let s = match gate(&d, &headers, false) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let path = uri.path();
    let name = match path {
        "/" => "pending",
        "/proposals" => "proposals",
        "/events" => "events",
        "/config" => "config",
        _ => "approval",
    };
    // The CSRF token is base64url and the page name one of ours: nothing
    // the request controls is written into the page.
    html(PAGE.replace("{{CSRF}}", &s.csrf).replace("{{PAGE}}", name).replace("{{ROLE}}", s.role))
}

async fn api_approvals(State(d): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = gate(&d, &headers, true) {
        return *r;
    }
    match d.approvals.pending().await {
        Ok(mut v) => {
            v["recent"] = d.approvals.recent(50)["approvals"].clone();
            secured(Json(v).into_response())
        }
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, "store", &e.message),
    }
}

async fn api_approval(State(d): State<Shared>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Err(r) = gate(&d, &headers, true) {
        return *r;
    }
    match d.approvals.get(&id) {
        Ok(v) => secured(Json(v).into_response()),
        Err(e) => refuse(StatusCode::NOT_FOUND, "approval_not_found", &e.message),
    }
}

async fn api_decide(
    State(d): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let s = match gate_change(&d, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if !d.may_decide(s.role) {
        return refuse(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this sign-in may not decide: a host token is configured, sign in with it",
        );
    }
    let mut params: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return refuse(StatusCode::BAD_REQUEST, "invalid_params", "the body must be a JSON object"),
    };
    params["approval_id"] = json!(id);
    let req = match DecisionRequest::parse(&params) {
        Ok(r) => r,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, "invalid_params", &e.message),
    };
    let short: String = crate::canonical::digest(&json!(s.id)).chars().take(12).collect();
    let principal = format!("dashboard-{short}");
    let reviewer = format!("car-server:{}:{principal}", s.role);
    match d.approvals.resolve(&Reviewer { principal: &principal, reviewer: &reviewer }, &req).await {
        Ok(v) => secured(Json(v).into_response()),
        Err(e) => {
            let code = e.data.as_ref().and_then(|d| d.get("code")).and_then(Value::as_str).unwrap_or("refused");
            refuse(StatusCode::CONFLICT, code, &e.message)
        }
    }
}

/// Detaches the dashboard stream's approver count when the stream ends,
/// after [`APPROVER_GRACE`]: a person moving between the dashboard's pages
/// closes one stream and opens the next, and stays an approver meanwhile
/// (an escalation arriving in between would otherwise be refused at once as
/// if nobody could approve).
struct Attached(Arc<Approvals>);

/// How long a dashboard stream's approver outlives the stream.
const APPROVER_GRACE: Duration = Duration::from_secs(3);

impl Drop for Attached {
    fn drop(&mut self) {
        let approvals = self.0.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move {
                    tokio::time::sleep(APPROVER_GRACE).await;
                    approvals.attach_other(-1);
                });
            }
            Err(_) => approvals.attach_other(-1),
        }
    }
}

async fn api_stream(State(d): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = gate(&d, &headers, true) {
        return *r;
    }
    let rx = d.approvals.live();
    d.approvals.attach_other(1);
    let guard = Attached(d.approvals.clone());
    let stream = futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        use tokio::sync::broadcast::error::RecvError;
        let ev = match rx.recv().await {
            Ok(doc) => {
                let kind = doc.get("type").and_then(Value::as_str).unwrap_or("message").to_string();
                Event::default().event(kind).data(doc.to_string())
            }
            // A page that fell behind reloads its list.
            Err(RecvError::Lagged(_)) => Event::default().event("resync").data("{}"),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok::<_, std::convert::Infallible>(ev), (rx, guard)))
    });
    secured(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response())
}

async fn api_proposals(State(d): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = gate(&d, &headers, true) {
        return *r;
    }
    secured(Json(json!({"proposals": d.daemon.activity.submissions(200)})).into_response())
}

async fn api_sessions(State(d): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = gate(&d, &headers, true) {
        return *r;
    }
    secured(Json(json!({"sessions": d.daemon.activity.sessions()})).into_response())
}

fn session_of(d: &Dashboard, q: &HashMap<String, String>) -> Result<super::activity::Session, Refusal> {
    let id = q.get("session").filter(|s| !s.is_empty()).ok_or_else(|| {
        Box::new(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_params",
            "session is required (a session id from /api/sessions)",
        ))
    })?;
    d.daemon.activity.session(id).ok_or_else(|| {
        Box::new(refuse(
            StatusCode::NOT_FOUND,
            "session_not_found",
            "no live session with that id (it may have disconnected)",
        ))
    })
}

async fn api_events(State(d): State<Shared>, headers: HeaderMap, Query(q): Query<HashMap<String, String>>) -> Response {
    if let Err(r) = gate(&d, &headers, true) {
        return *r;
    }
    let s = match session_of(&d, &q) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let mut query = serde_json::Map::new();
    for k in ["proposal_id", "action_id", "since", "until"] {
        if let Some(v) = q.get(k).filter(|v| !v.trim().is_empty()) {
            query.insert(k.into(), json!(v.trim()));
        }
    }
    if let Some(k) = q.get("kind").filter(|v| !v.trim().is_empty()) {
        query.insert("kinds".into(), json!(k.split(',').map(str::trim).collect::<Vec<_>>()));
    }
    let limit = q.get("limit").and_then(|l| l.parse::<u64>().ok()).unwrap_or(500).min(5000);
    query.insert("limit".into(), json!(limit));
    let events = match s.rt.event_query(&Value::Object(query).to_string()) {
        Ok(t) => serde_json::from_str::<Value>(&t).unwrap_or(Value::Null),
        Err(e) => return refuse(StatusCode::BAD_REQUEST, "invalid_params", &e.to_string()),
    };
    let chain = serde_json::from_str::<Value>(&s.rt.verify_event_log_chain()).unwrap_or(Value::Null);
    secured(Json(json!({"session_id": q.get("session"), "events": events, "chain": chain})).into_response())
}

async fn api_config(State(d): State<Shared>, headers: HeaderMap, Query(q): Query<HashMap<String, String>>) -> Response {
    if let Err(r) = gate(&d, &headers, true) {
        return *r;
    }
    let s = match session_of(&d, &q) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let doc = serde_json::from_str::<Value>(&s.rt.admission_config()).unwrap_or(Value::Null);
    secured(
        Json(json!({"session_id": q.get("session"), "admission": doc, "granted_tier": s.rt.permission_get_tier()}))
            .into_response(),
    )
}

/// Serves the dashboard on `listener` until `shutdown`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    dashboard: Arc<Dashboard>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let app = dashboard.router().into_make_service_with_connect_info::<SocketAddr>();
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        eprintln!("car-server: dashboard stopped: {e}");
    }
}
