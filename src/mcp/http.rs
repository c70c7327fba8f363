//! Streamable HTTP serving, shared by the gateway (`car mcp serve --http`)
//! and the daemon's MCP endpoint: rmcp's `StreamableHttpService` (sessions
//! with `MCP-Session-Id`, an unknown session is `404`) behind a small
//! router that applies the transport's `Origin` rule (absent-permissive,
//! present-strict: only loopback origins) and, when asked, the
//! `MCP-Protocol-Version` rule, before anything reaches dispatch.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderMap, ORIGIN};
use hyper::{Method, Request, Response, StatusCode};
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// A response body.
pub type Body = BoxBody<Bytes, Infallible>;

/// The MCP revisions the daemon endpoint speaks, oldest first; the last is
/// the one an absent or unsupported request gets.
pub const SUPPORTED_VERSIONS: [&str; 3] = ["2024-11-05", "2025-06-18", "2025-11-25"];

/// The revision `initialize` answers for a requested one: the request's
/// when supported, else the newest.
pub fn negotiate_version(requested: Option<&str>) -> &'static str {
    SUPPORTED_VERSIONS
        .iter()
        .find(|v| Some(**v) == requested)
        .copied()
        .unwrap_or(SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.len() - 1])
}

/// A JSON response.
pub fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

/// True when an `Origin` value is `http`/`https` on `localhost`,
/// `127.0.0.0/8` or `::1`, any port (and nothing else: no path, no `null`).
pub fn loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    let (host, port) = if let Some(r) = rest.strip_prefix('[') {
        match r.split_once(']') {
            Some((h, tail)) => (h, if tail.is_empty() { None } else { tail.strip_prefix(':').or(Some("x")) }),
            None => return false,
        }
    } else {
        match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err()) {
        return false;
    }
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
        || host.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// Constant-time comparison (length-checked: a different length is unequal
/// without looking at the bytes; equal lengths compare every byte).
pub fn tokens_equal(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// The `Origin` rule: absent is allowed; present must be a loopback origin.
pub fn origin_allowed(headers: &HeaderMap) -> bool {
    match headers.get(ORIGIN) {
        None => true,
        Some(v) => v.to_str().is_ok_and(loopback_origin),
    }
}

/// How [`serve`] routes.
#[derive(Clone)]
pub struct Routes {
    /// Where the MCP endpoint is (`/mcp`).
    pub path: &'static str,
    /// `GET <path>/health`: the body, when served.
    pub health: Option<Arc<dyn Fn() -> Value + Send + Sync>>,
    /// Apply the `MCP-Protocol-Version` rule ([`SUPPORTED_VERSIONS`]).
    pub check_version: bool,
    /// Require `Authorization: Bearer <this>` on every MCP request (`401`
    /// otherwise).
    pub bearer: Option<String>,
}

/// The rmcp service for a handler factory: sessions (`MCP-Session-Id`;
/// one idle for `idle` is closed, rmcp's 5 minutes when `None`), the
/// `Host` check widened to the bound address.
pub fn service<S: ServerHandler + Send + 'static>(
    factory: impl Fn() -> Result<S, std::io::Error> + Send + Sync + 'static,
    bound: IpAddr,
    idle: Option<std::time::Duration>,
) -> StreamableHttpService<S, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default().with_sse_keep_alive(None);
    let host = bound.to_string();
    if !bound.is_unspecified() && !config.allowed_hosts.contains(&host) {
        config.allowed_hosts.push(host);
    }
    let mut sessions = LocalSessionManager::default();
    if idle.is_some() {
        sessions.session_config.keep_alive = idle;
    }
    StreamableHttpService::new(factory, Arc::new(sessions), config)
}

async fn route<S: ServerHandler + Send + 'static>(
    svc: StreamableHttpService<S, LocalSessionManager>,
    routes: Routes,
    req: Request<Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    if let Some(health) = &routes.health
        && path == format!("{}/health", routes.path)
    {
        return match *req.method() {
            Method::GET | Method::HEAD => json_response(StatusCode::OK, &health()),
            _ => json_response(StatusCode::METHOD_NOT_ALLOWED, &json!({"error": "method not allowed"})),
        };
    }
    if path != routes.path {
        return json_response(StatusCode::NOT_FOUND, &json!({"error": "not found", "path": path}));
    }
    match *req.method() {
        Method::POST | Method::DELETE => {}
        _ => {
            // No server-initiated stream is offered.
            let mut r = json_response(StatusCode::METHOD_NOT_ALLOWED, &json!({"error": "method not allowed"}));
            r.headers_mut().insert(ALLOW, hyper::header::HeaderValue::from_static("POST, DELETE"));
            return r;
        }
    }
    if !origin_allowed(req.headers()) {
        return json_response(StatusCode::FORBIDDEN, &json!({"error": "origin not allowed"}));
    }
    if let Some(expected) = &routes.bearer {
        let given = req.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let ok = given.and_then(|g| g.strip_prefix("Bearer ")).is_some_and(|t| tokens_equal(expected, t.trim()));
        if !ok {
            let mut r = json_response(StatusCode::UNAUTHORIZED, &json!({"error": "a valid bearer token is required"}));
            r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    if routes.check_version
        && let Some(v) = req.headers().get("mcp-protocol-version")
    {
        let requested = v.to_str().ok();
        if !requested.is_some_and(|r| SUPPORTED_VERSIONS.contains(&r)) {
            return json_response(
                StatusCode::BAD_REQUEST,
                &json!({
                    "error": "unsupported MCP-Protocol-Version",
                    "requested": requested.map(str::to_string).unwrap_or_else(|| String::from_utf8_lossy(v.as_bytes()).into_owned()),
                    "supported": SUPPORTED_VERSIONS,
                }),
            );
        }
    }
    let delete = req.method() == Method::DELETE;
    let mut r = svc.handle(req).await;
    // rmcp answers a session's DELETE `202 Accepted`; the session is gone
    // by then, and clients (the official SDKs) expect 200 or 204.
    if delete && r.status() == StatusCode::ACCEPTED {
        *r.status_mut() = StatusCode::NO_CONTENT;
    }
    r
}

/// Serves `svc` on `listener` until `shutdown` resolves.
pub async fn serve<S: ServerHandler + Send + 'static>(
    listener: TcpListener,
    svc: StreamableHttpService<S, LocalSessionManager>,
    routes: Routes,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    let (svc, routes) = (svc.clone(), routes.clone());
                    tokio::spawn(async move {
                        let handler = hyper::service::service_fn(move |req| {
                            let (svc, routes) = (svc.clone(), routes.clone());
                            async move { Ok::<_, Infallible>(route(svc, routes, req).await) }
                        });
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, handler).await;
                    });
                }
                Err(e) => {
                    eprintln!("mcp: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            () = &mut shutdown => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        for ok in
            ["http://localhost", "https://localhost:8443", "http://127.0.0.1:9", "http://127.1.2.3", "http://[::1]:80"]
        {
            assert!(loopback_origin(ok), "{ok}");
        }
        for bad in [
            "null",
            "http://evil.example",
            "http://127.0.0.1.evil.example",
            "file://",
            "http://localhost:x",
            "ftp://localhost",
            "http://[::2]",
            "http://localhost/",
        ] {
            assert!(!loopback_origin(bad), "{bad}");
        }
    }

    #[test]
    fn negotiation() {
        assert_eq!(negotiate_version(Some("2024-11-05")), "2024-11-05");
        assert_eq!(negotiate_version(Some("2025-03-26")), "2025-11-25");
        assert_eq!(negotiate_version(None), "2025-11-25");
    }
}
