//! Approval webhooks: every `approval.requested` and `approval.resolved`
//! of the daemon's approvals store is POSTed, as JSON, to each configured
//! URL (`--webhook URL`, `CAR_WEBHOOKS`), with a link to the approval's
//! dashboard page.
//!
//! Each request is signed: `X-Car-Signature: sha256=<hex>` is the
//! HMAC-SHA256, keyed by `CAR_WEBHOOK_SECRET`, of `<X-Car-Timestamp>.<body>`
//! (the Unix time of the attempt, a dot, the body's bytes), so a receiver can
//! check both who sent it and that it is not an old request replayed.
//! `X-Car-Delivery` names the delivery (the same on every attempt, also in
//! the body as `delivery_id`), `X-Car-Event` the event and `X-Car-Attempt`
//! the attempt.
//!
//! Delivery never blocks admission: the store's events are broadcast, and
//! each delivery is a task of its own. A failed attempt (no connection, no
//! answer within the timeout, HTTP 408, 429 or 5xx) is retried with doubling
//! backoff; another 4xx is not. Failures are logged on stderr, never fatal.
//! While webhooks are configured they count as an approver: an ask waits
//! (until its timeout) for someone they reached, instead of being refused at
//! once.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::broadcast::error::RecvError;

use super::approvals::Approvals;

/// The signature header: `sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`.
pub const SIGNATURE_HEADER: &str = "x-car-signature";
/// The Unix time (seconds) the signature covers.
pub const TIMESTAMP_HEADER: &str = "x-car-timestamp";
/// The delivery's id: the same on every attempt of one delivery.
pub const DELIVERY_HEADER: &str = "x-car-delivery";
/// `approval.requested` or `approval.resolved`.
pub const EVENT_HEADER: &str = "x-car-event";
/// The attempt, from 1.
pub const ATTEMPT_HEADER: &str = "x-car-attempt";

/// Where and how approval events are sent.
#[derive(Clone, Debug)]
pub struct Webhooks {
    /// The receivers (`http://host:port/path`), checked and parsed once.
    targets: Vec<Target>,
    /// The HMAC key of the signature.
    pub secret: String,
    /// Attempts per delivery (default 5).
    pub attempts: u32,
    /// The wait before the first retry, doubled after each (default 500 ms,
    /// at most 60 s).
    pub backoff: Duration,
    /// How long one attempt may take (default 10 s).
    pub timeout: Duration,
    /// The dashboard's address as receivers reach it (`http://host:port`),
    /// for the approval's link; `None`: the address the dashboard listens on.
    pub dashboard_url: Option<String>,
}

/// One receiver: the URL as given (for messages) and as parsed.
#[derive(Clone, Debug)]
struct Target {
    url: String,
    uri: hyper::Uri,
}

impl Webhooks {
    /// Checks the URLs (http only: this build has no TLS stack) and the
    /// secret (at least 16 characters), with the defaults above.
    pub fn new(urls: Vec<String>, secret: Option<String>) -> Result<Webhooks, String> {
        let targets = urls
            .into_iter()
            .map(|url| Ok(Target { uri: check_url(&url)?, url }))
            .collect::<Result<Vec<_>, String>>()?;
        let secret = secret.map(|s| s.trim().to_string()).unwrap_or_default();
        if secret.is_empty() {
            return Err(
                "--webhook needs CAR_WEBHOOK_SECRET (or --webhook-secret-file): the key receivers check the signature with"
                    .to_string(),
            );
        }
        if secret.chars().count() < 16 {
            return Err("CAR_WEBHOOK_SECRET: at least 16 characters".to_string());
        }
        Ok(Webhooks {
            targets,
            secret,
            attempts: 5,
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(10),
            dashboard_url: None,
        })
    }

    /// The receivers' URLs, as given.
    pub fn urls(&self) -> impl Iterator<Item = &str> {
        self.targets.iter().map(|t| t.url.as_str())
    }
}

fn check_url(u: &str) -> Result<hyper::Uri, String> {
    let bad = |why: &str| format!("--webhook `{u}`: {why}");
    let uri: hyper::Uri = u.parse().map_err(|e| bad(&format!("not a URL ({e})")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(bad(
                "https is not sent by this build (no TLS stack); use http:// (e.g. through a local TLS-terminating proxy)",
            ));
        }
        _ => return Err(bad("not an http:// URL")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    Ok(uri)
}

/// `sha256=<hex>`: the HMAC-SHA256 of `<timestamp>.<body>` keyed by `secret`.
pub fn signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { unreachable!("HMAC takes a key of any length") };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A path segment with everything but the unreserved characters escaped.
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The body of one delivery: `approval` is the approval as the dashboard
/// shows it (`approval.requested`) or its resolution (`approval.resolved`:
/// `approval_id`, `status`, `decision`, `reviewer`, `scope`, `reason`, `at`).
fn document(event: &Value, dashboard: Option<&str>, delivery: &str) -> Value {
    let approval = match event.get("approval") {
        Some(a) => a.clone(),
        None => {
            let mut a = event.as_object().cloned().unwrap_or_default();
            a.remove("type");
            Value::Object(a)
        }
    };
    let id = approval["approval_id"].as_str().unwrap_or_default();
    let link = dashboard
        .filter(|_| !id.is_empty())
        .map(|d| format!("{}/approval/{}", d.trim_end_matches('/'), path_segment(id)));
    json!({
        "type": event["type"],
        "delivery_id": delivery,
        "sent_at": chrono::Utc::now(),
        "server": format!("car-server {}", crate::VERSION),
        "approval_url": link,
        "approval": approval,
    })
}

/// Starts sending the store's events to every URL; returns at once.
/// `dashboard` is the dashboard's address (`http://host:port`), if served.
pub(crate) fn spawn(hooks: Webhooks, approvals: &Arc<Approvals>, dashboard: Option<String>) {
    let mut rx = approvals.live();
    // People the webhooks reach can approve: asks wait for them.
    approvals.attach_other(1);
    let dashboard = hooks.dashboard_url.clone().or(dashboard);
    let hooks = Arc::new(hooks);
    eprintln!(
        "car-server: approval webhooks: {} (HMAC-signed; up to {} attempts each)",
        hooks.urls().collect::<Vec<_>>().join(", "),
        hooks.attempts
    );
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(event) => {
                    let delivery = uuid::Uuid::new_v4().to_string();
                    let kind = event["type"].as_str().unwrap_or("approval").to_string();
                    let body = Arc::new(
                        serde_json::to_vec(&document(&event, dashboard.as_deref(), &delivery)).unwrap_or_default(),
                    );
                    for target in 0..hooks.targets.len() {
                        tokio::spawn(deliver(hooks.clone(), target, kind.clone(), delivery.clone(), body.clone()));
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    eprintln!("car-server: approval webhooks: {n} events were dropped (produced faster than sent)");
                }
                Err(RecvError::Closed) => break,
            }
        }
    });
}

/// One delivery to `hooks.targets[target]`: attempts with doubling backoff
/// until a 2xx answer, a 4xx that a retry cannot change, or the last attempt.
async fn deliver(hooks: Arc<Webhooks>, target: usize, event: String, delivery: String, body: Arc<Vec<u8>>) {
    let Target { url, uri } = &hooks.targets[target];
    let mut wait = hooks.backoff;
    let attempts = hooks.attempts.max(1);
    for attempt in 1..=attempts {
        let ts = chrono::Utc::now().timestamp().to_string();
        let headers = [
            (SIGNATURE_HEADER, signature(hooks.secret.as_bytes(), &ts, &body)),
            (TIMESTAMP_HEADER, ts),
            (DELIVERY_HEADER, delivery.clone()),
            (EVENT_HEADER, event.clone()),
            (ATTEMPT_HEADER, attempt.to_string()),
        ];
        let (retry, why) = match tokio::time::timeout(hooks.timeout, post(uri, &headers, body.to_vec())).await {
            Ok(Ok(status)) if (200..300).contains(&status) => return,
            Ok(Ok(status)) => (status >= 500 || status == 408 || status == 429, format!("HTTP {status}")),
            Ok(Err(e)) => (true, e),
            Err(_) => (true, format!("no answer within {} ms", hooks.timeout.as_millis())),
        };
        if !retry || attempt == attempts {
            eprintln!("car-server: webhook {url}: {event} {delivery} not delivered after {attempt} attempt(s): {why}");
            return;
        }
        eprintln!(
            "car-server: webhook {url}: {event} {delivery} attempt {attempt}/{attempts} failed ({why}); again in {} ms",
            wait.as_millis()
        );
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(60));
    }
}

/// POSTs `body` as JSON; the answer's status.
async fn post(uri: &hyper::Uri, headers: &[(&str, String)], body: Vec<u8>) -> Result<u16, String> {
    let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port)).await.map_err(|e| format!("cannot connect: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri.authority().map_or(host.to_string(), |a| a.to_string());
    let mut req = hyper::Request::post(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::USER_AGENT, format!("car-server/{}", crate::VERSION));
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let req = req
        .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
        .map_err(|e| format!("cannot build the request: {e}"))?;
    let resp = sender.send_request(req).await.map_err(|e| format!("request failed: {e}"))?;
    Ok(resp.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_http_with_a_host_and_the_secret_is_required() {
        let secret = Some("0123456789abcdef".to_string());
        let ok = Webhooks::new(vec!["http://127.0.0.1:9/hook".into(), "http://[::1]:8/h?x=1".into()], secret.clone());
        let ok = ok.unwrap();
        assert_eq!(ok.urls().collect::<Vec<_>>(), ["http://127.0.0.1:9/hook", "http://[::1]:8/h?x=1"]);
        // Parsed once, at start: what each delivery posts to.
        assert_eq!(ok.targets[0].uri.port_u16(), Some(9));
        assert_eq!(ok.targets[1].uri.path_and_query().map(|p| p.as_str()), Some("/h?x=1"));
        let e = Webhooks::new(vec!["https://example.com/hook".into()], secret.clone()).unwrap_err();
        assert!(e.contains("`https://example.com/hook`") && e.contains("no TLS"), "{e}");
        let e = Webhooks::new(vec!["ftp://x/y".into()], secret.clone()).unwrap_err();
        assert!(e.contains("not an http:// URL"), "{e}");
        let e = Webhooks::new(vec!["not a url".into()], secret).unwrap_err();
        assert!(e.contains("`not a url`"), "{e}");
        let e = Webhooks::new(vec!["http://127.0.0.1:9/".into()], None).unwrap_err();
        assert!(e.contains("CAR_WEBHOOK_SECRET"), "{e}");
        let e = Webhooks::new(vec!["http://127.0.0.1:9/".into()], Some("short".into())).unwrap_err();
        assert!(e.contains("at least 16"), "{e}");
    }

    #[test]
    fn the_signature_covers_the_timestamp_and_the_body() {
        // Python: hmac.new(b"0123456789abcdef", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
        assert_eq!(
            signature(b"0123456789abcdef", "1700000000", br#"{"a":1}"#),
            "sha256=9eb18f493f8ec135d9eb2dad817c369bb4e9cbfa818657897a7437c1cd8c3a23"
        );
        assert_ne!(signature(b"k", "1", b"{}"), signature(b"k", "2", b"{}"));
        assert_ne!(signature(b"k", "1", b"{}"), signature(b"k", "1", b"{ }"));
    }

    #[test]
    fn the_link_escapes_the_approval_id() {
        let ev = json!({"type": "approval.requested", "approval": {"approval_id": "my tool/x:ab"}});
        let d = document(&ev, Some("http://127.0.0.1:9101/"), "d1");
        assert_eq!(d["approval_url"], "http://127.0.0.1:9101/approval/my%20tool%2Fx%3Aab");
        assert_eq!(d["delivery_id"], "d1");
        assert_eq!(document(&ev, None, "d1")["approval_url"], Value::Null);
        let resolved =
            json!({"type": "approval.resolved", "approval_id": "t:1", "status": "allowed", "decision": "allow"});
        let d = document(&resolved, Some("http://h:1"), "d2");
        assert_eq!(d["type"], "approval.resolved");
        assert_eq!(d["approval"], json!({"approval_id": "t:1", "status": "allowed", "decision": "allow"}));
        assert_eq!(d["approval_url"], "http://h:1/approval/t%3A1");
    }
}
