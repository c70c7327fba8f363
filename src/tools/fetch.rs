//! `http_fetch`: the first-party fetch tool, the one tool the permission
//! chain's domain rules are enforced for (`tools-and-permissions.md`).
//!
//! The admission stage has already judged the call's `url` (the chain's
//! domain rules, the egress allowlist inspector). At each hop, the first
//! and every redirect, the tool then:
//!
//! 1. reads the URL's host with the chain's own parser
//!    ([`crate::permission::url_host`]), so what was checked is what is
//!    reached (a URL the parser refuses is refused);
//! 2. checks the host against the domain rules (deny; ask too on a
//!    redirect, where no approval can be waited for) and the egress
//!    allowlist;
//! 3. resolves it once and checks every address: the domain rules again
//!    (a rule may name an address), and an address that is loopback,
//!    private, link-local, a cloud metadata address or otherwise not
//!    globally routable is refused unless an address or network entry of
//!    the egress allowlist covers it (a name never unlocks one: it can
//!    resolve anywhere). One refused address refuses the hop;
//! 4. connects only to an address it checked (no second lookup, no proxy),
//!    with TLS for `https` verified against the Mozilla roots
//!    (webpki-roots) for the URL's host;
//! 5. follows a redirect only through the same checks, at most
//!    `max_redirects` times, dropping `Authorization`, `Cookie` and
//!    `Proxy-Authorization` when the origin changes.
//!
//! The body read is capped (`max_bytes`, the rest is dropped and
//! `truncated` set) and so is the whole call's time (`timeout_ms`).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::net::TcpStream;

use crate::ir::ToolFailure;
use crate::policy::inspectors::EgressAllowlist;

/// The tool's name.
pub const FETCH_TOOL: &str = crate::permission::FETCH_TOOL;
/// `timeout_ms` when the call gives none (30 s).
pub const DEFAULT_FETCH_TIMEOUT_MS: u64 = 30_000;
/// The largest `timeout_ms` (5 minutes).
pub const MAX_FETCH_TIMEOUT_MS: u64 = 300_000;
/// `max_bytes` when the call gives none (1 MiB).
pub const DEFAULT_FETCH_BYTES: u64 = 1024 * 1024;
/// The largest `max_bytes` (10 MiB).
pub const MAX_FETCH_BYTES: u64 = 10 * 1024 * 1024;
/// `max_redirects` when the call gives none, and its largest value.
pub const DEFAULT_FETCH_REDIRECTS: u64 = 5;
/// The largest `max_redirects`.
pub const MAX_FETCH_REDIRECTS: u64 = 10;
/// How long one connection attempt may take before the next address is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
/// Headers the tool writes itself (or that would change the framing).
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
];
/// Headers dropped when a redirect leaves the origin.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "cookie", "proxy-authorization"];

/// The tool's parameter schema.
pub fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "an http:// or https:// URL"},
            "method": {"type": "string", "enum": METHODS, "description": "default GET"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": "string", "description": "the request body (UTF-8)"},
            "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_FETCH_TIMEOUT_MS,
                "description": "the whole call, redirects included (default 30000)"},
            "max_bytes": {"type": "integer", "minimum": 0, "maximum": MAX_FETCH_BYTES,
                "description": "most bytes of the body kept (default 1048576)"},
            "max_redirects": {"type": "integer", "minimum": 0, "maximum": MAX_FETCH_REDIRECTS,
                "description": "most redirects followed (default 5; 0 returns the redirect itself)"}
        },
        "required": ["url"]
    })
}

/// What the tool asks the runtime's configuration about a target.
pub trait FetchGate: Send + Sync {
    /// Why the domain rules refuse `host` (with `with_ask`, ask rules too).
    fn domain_refusal(&self, host: &str, with_ask: bool) -> Option<String>;
    /// The egress allowlist, when one is configured.
    fn egress(&self) -> Option<&EgressAllowlist>;
}

/// No rules and no allowlist: only the address classes are checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unconfigured;

impl FetchGate for Unconfigured {
    fn domain_refusal(&self, _host: &str, _with_ask: bool) -> Option<String> {
        None
    }
    fn egress(&self) -> Option<&EgressAllowlist> {
        None
    }
}

impl FetchGate for crate::admission::AdmissionStage {
    fn domain_refusal(&self, host: &str, with_ask: bool) -> Option<String> {
        crate::admission::AdmissionStage::domain_refusal(self, host, with_ask)
    }
    fn egress(&self) -> Option<&EgressAllowlist> {
        crate::admission::AdmissionStage::egress(self)
    }
}

/// Why an address may not be reached without an allowlist entry covering
/// it: the class it is in, or `None` for a globally routable address.
/// IPv4 addresses embedded in IPv6 ones (mapped, compatible, NAT64, 6to4)
/// are judged as IPv4.
pub fn address_class(ip: IpAddr) -> Option<&'static str> {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            let n = u32::from(v4);
            let within = |net: u32, len: u32| n >> (32 - len) == net >> (32 - len);
            if [[169, 254, 169, 254], [100, 100, 100, 200], [192, 0, 0, 192]].contains(&o) {
                Some("a cloud metadata address")
            } else if v4.is_loopback() {
                Some("a loopback address")
            } else if v4.is_private() {
                Some("a private address")
            } else if v4.is_link_local() {
                Some("a link-local address")
            } else if o[0] == 0 {
                Some("an unspecified (`this network`) address")
            } else if within(0x6440_0000, 10) {
                Some("a shared (carrier-grade NAT) address")
            } else if within(0xC000_0000, 24) || within(0xC612_0000, 15) {
                Some("a reserved (IETF or benchmarking) address")
            } else if v4.is_multicast() {
                Some("a multicast address")
            } else if o[0] >= 240 {
                Some("a reserved or broadcast address")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let bits = u128::from(v6);
            let within = |net: u128, len: u32| bits >> (128 - len) == net >> (128 - len);
            let embedded_v4 = |x: u128| IpAddr::V4(std::net::Ipv4Addr::from((x & 0xFFFF_FFFF) as u32));
            if v6 == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
                Some("a cloud metadata address")
            } else if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unspecified() {
                Some("an unspecified address")
            } else if within(0, 96) {
                // IPv4-compatible (deprecated): the IPv4 address decides.
                address_class(embedded_v4(bits)).or(Some("an IPv4-compatible address"))
            } else if within(0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96) {
                address_class(embedded_v4(bits))
            } else if within(0x2002 << 112, 16) {
                address_class(IpAddr::V4(std::net::Ipv4Addr::from(((bits >> 80) & 0xFFFF_FFFF) as u32)))
            } else if within(0x0064_ff9b_0001 << 80, 48) {
                Some("a local NAT64 address")
            } else if within(0x2001 << 112, 32) {
                Some("a Teredo address")
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("a private (unique local) address")
            } else if s[0] & 0xffc0 == 0xfe80 || s[0] & 0xffc0 == 0xfec0 {
                Some("a link-local address")
            } else if v6.is_multicast() {
                Some("a multicast address")
            } else if within(0x0100 << 112, 64) {
                Some("a discard-only address")
            } else {
                None
            }
        }
    }
}

/// A URL the tool may reach, read with the chain's parser.
#[derive(Debug, Clone)]
struct Target {
    text: String,
    https: bool,
    /// As [`crate::permission::url_host`] gives it (IPv6 bracketed).
    host: String,
    port: u16,
    /// The request target: path and query.
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, ToolFailure> {
        let refuse = |why: &str| ToolFailure::terminal(format!("http_fetch: cannot fetch `{url}`: {why}"));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| refuse("not an absolute URL"))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            _ => return Err(refuse("only http:// and https:// URLs are fetched")),
        };
        let host = crate::permission::url_host(url)
            .ok_or_else(|| refuse("its host cannot be read unambiguously (the domain rules could not judge it)"))?;
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.contains('@') {
            return Err(refuse("credentials in the URL are not sent; pass an `Authorization` header"));
        }
        let port_text = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once(']').map(|(_, after)| after).unwrap_or("").strip_prefix(':'),
            None => authority.split_once(':').map(|(_, p)| p),
        };
        let port = match port_text {
            None | Some("") => {
                if https {
                    443
                } else {
                    80
                }
            }
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| refuse("its port is not 1-65535"))?,
        };
        let after = rest[end..].split('#').next().unwrap_or("");
        let path = if after.starts_with('/') { after.to_string() } else { format!("/{after}") };
        if path.bytes().any(|b| b <= b' ' || b >= 0x7f) {
            return Err(refuse("its path has a space, a control or a non-ASCII character (percent-encode it)"));
        }
        Ok(Target { text: url.to_string(), https, host, port, path })
    }

    /// `scheme://host:port`, for telling whether a redirect leaves the origin.
    fn origin(&self) -> (bool, &str, u16) {
        (self.https, &self.host, self.port)
    }

    /// The `Host` header: the host, with the port when it is not the default.
    fn host_header(&self) -> String {
        if self.port == if self.https { 443 } else { 80 } {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The call's parameters, checked.
struct Request {
    url: String,
    method: hyper::Method,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Option<String>,
    timeout: Duration,
    max_bytes: u64,
    max_redirects: u64,
}

fn capped(p: &Map<String, Value>, key: &str, default: u64, max: u64, min: u64) -> Result<u64, ToolFailure> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_u64().filter(|n| (min..=max).contains(n)).ok_or_else(|| {
            ToolFailure::terminal(format!(
                "http_fetch: parameter `{key}` must be an integer from {min} to {max}, got {v}"
            ))
        }),
    }
}

fn request(p: &Map<String, Value>, call_timeout_ms: Option<u64>) -> Result<Request, ToolFailure> {
    let bad = |m: String| ToolFailure::terminal(format!("http_fetch: {m}"));
    let url = p
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("parameter `url` is required and must be a string".into()))?
        .to_string();
    let method = match p.get("method") {
        None | Some(Value::Null) => "GET".to_string(),
        Some(Value::String(m)) => m.to_ascii_uppercase(),
        Some(v) => return Err(bad(format!("parameter `method` must be a string, got {v}"))),
    };
    if !METHODS.contains(&method.as_str()) {
        return Err(bad(format!("method `{method}` is not one of {}", METHODS.join(", "))));
    }
    let method = hyper::Method::from_bytes(method.as_bytes()).map_err(|e| bad(format!("method `{method}`: {e}")))?;
    let mut headers = Vec::new();
    match p.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let v = v.as_str().ok_or_else(|| bad(format!("header `{k}` must have a string value, got {v}")))?;
                let name = HeaderName::from_bytes(k.as_bytes())
                    .map_err(|_| bad(format!("`{k}` is not a valid header name")))?;
                if RESERVED_HEADERS.contains(&name.as_str()) {
                    return Err(bad(format!("header `{k}` is set by the tool itself and cannot be given")));
                }
                let value = HeaderValue::from_str(v)
                    .map_err(|_| bad(format!("header `{k}` has a value with a control or non-ASCII character")))?;
                headers.push((name, value));
            }
        }
        Some(v) => return Err(bad(format!("parameter `headers` must be an object of strings, got {v}"))),
    }
    let body = match p.get("body") {
        None | Some(Value::Null) => None,
        Some(Value::String(b)) => Some(b.clone()),
        Some(v) => return Err(bad(format!("parameter `body` must be a string, got {v}"))),
    };
    if body.is_some() && matches!(method, hyper::Method::GET | hyper::Method::HEAD) {
        return Err(bad(format!("a {method} request has no body; use POST, PUT or PATCH")));
    }
    let mut timeout = capped(p, "timeout_ms", DEFAULT_FETCH_TIMEOUT_MS, MAX_FETCH_TIMEOUT_MS, 1)?;
    if let Some(t) = call_timeout_ms {
        timeout = timeout.min(t.max(1));
    }
    Ok(Request {
        url,
        method,
        headers,
        body,
        timeout: Duration::from_millis(timeout),
        max_bytes: capped(p, "max_bytes", DEFAULT_FETCH_BYTES, MAX_FETCH_BYTES, 0)?,
        max_redirects: capped(p, "max_redirects", DEFAULT_FETCH_REDIRECTS, MAX_FETCH_REDIRECTS, 0)?,
    })
}

/// Runs one `http_fetch` call: `params` as the schema describes them,
/// `call_timeout_ms` the action's own timeout (the smaller one wins).
/// A refusal, bad parameters or a too-long redirect chain fail terminally
/// (not retried); a network error or timeout fails as an ordinary tool
/// failure (the action's retry policy applies). An HTTP error status is a
/// result, not a failure (`ok: false`).
pub async fn fetch(
    params: &Map<String, Value>,
    call_timeout_ms: Option<u64>,
    gate: &dyn FetchGate,
) -> Result<Value, ToolFailure> {
    let req = request(params, call_timeout_ms)?;
    let timeout = req.timeout;
    match tokio::time::timeout(timeout, run(req, gate)).await {
        Ok(r) => r,
        Err(_) => Err(ToolFailure::ordinary(format!("http_fetch: timed out after {} ms", timeout.as_millis()))),
    }
}

async fn run(req: Request, gate: &dyn FetchGate) -> Result<Value, ToolFailure> {
    let Request { url, mut method, mut headers, mut body, max_bytes, max_redirects, .. } = req;
    let mut target = Target::parse(&url)?;
    let mut redirects: Vec<String> = Vec::new();
    loop {
        // The first hop's host was judged by the admission stage (an ask
        // there was answered); a redirect's was not.
        let admitted = redirects.is_empty();
        let addrs = check(&target, gate, admitted).await?;
        let (stream, peer) = connect(&target, &addrs).await?;
        let mut resp = exchange(stream, &target, &method, &headers, body.as_deref()).await?;
        let status = resp.status();
        let location = resp.headers().get(hyper::header::LOCATION).cloned();
        let redirected = status.is_redirection() && status != hyper::StatusCode::NOT_MODIFIED && location.is_some();
        if redirected
            && let Some(location) = location
            && (redirects.len() as u64) < max_redirects
        {
            let location = location.to_str().map_err(|_| {
                ToolFailure::terminal(format!("http_fetch: `{}` redirected to a non-ASCII location", target.text))
            })?;
            let next_text = join(&target.text, location)?;
            let next = Target::parse(&next_text)?;
            if next.origin() != target.origin() {
                headers.retain(|(n, _)| !CREDENTIAL_HEADERS.contains(&n.as_str()));
            }
            // 303, and 301/302 after a POST, become a GET without a body.
            let code = status.as_u16();
            if (code == 303 && method != hyper::Method::HEAD)
                || ((code == 301 || code == 302) && method == hyper::Method::POST)
            {
                method = hyper::Method::GET;
                body = None;
            }
            redirects.push(next_text);
            target = next;
            continue;
        }
        if redirected && max_redirects > 0 {
            return Err(ToolFailure::terminal(format!(
                "http_fetch: more than {max_redirects} redirect(s) from `{url}` (last: `{}`)",
                target.text
            )));
        }
        let mut out_headers = Map::new();
        for (k, v) in resp.headers() {
            let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
            match out_headers.get_mut(k.as_str()) {
                Some(Value::String(prev)) => {
                    prev.push_str(", ");
                    prev.push_str(&v);
                }
                _ => {
                    out_headers.insert(k.as_str().to_string(), Value::String(v));
                }
            }
        }
        let (bytes, truncated) = read_body(resp.body_mut(), max_bytes).await?;
        let mut out = json!({
            "url": target.text,
            "status": status.as_u16(),
            "ok": status.is_success(),
            "headers": out_headers,
            "bytes": bytes.len(),
            "truncated": truncated,
            "redirects": redirects,
            "address": peer.to_string(),
        });
        match String::from_utf8(bytes) {
            Ok(text) => out["body"] = Value::String(text),
            Err(e) => {
                use base64::Engine as _;
                out["body_base64"] = Value::String(base64::engine::general_purpose::STANDARD.encode(e.into_bytes()));
            }
        }
        return Ok(out);
    }
}

/// The redirect target `location` relative to `base`, as text.
fn join(base: &str, location: &str) -> Result<String, ToolFailure> {
    url::Url::parse(base)
        .and_then(|b| b.join(location))
        .map(String::from)
        .map_err(|e| ToolFailure::terminal(format!("http_fetch: `{base}` redirected to `{location}`, not a URL: {e}")))
}

/// Checks `t`'s host and every address it resolves to; the addresses to
/// connect to.
async fn check(t: &Target, gate: &dyn FetchGate, admitted: bool) -> Result<Vec<SocketAddr>, ToolFailure> {
    let refuse = |why: String| ToolFailure::terminal(format!("http_fetch: refused `{}`: {why}", t.text));
    if let Some(why) = gate.domain_refusal(&t.host, !admitted) {
        return Err(refuse(why));
    }
    if let Some(list) = gate.egress()
        && !list.permits_host(&t.host)
    {
        return Err(refuse(format!("`{}` is outside the egress allowlist", t.host)));
    }
    let ips: Vec<IpAddr> = match crate::permission::host_ip(&t.host) {
        Some(ip) => vec![ip],
        None => {
            let found = tokio::net::lookup_host((t.host.as_str(), t.port))
                .await
                .map_err(|e| ToolFailure::ordinary(format!("http_fetch: cannot resolve `{}`: {e}", t.host)))?;
            let mut ips: Vec<IpAddr> = Vec::new();
            for a in found {
                let ip = a.ip().to_canonical();
                if !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
            ips
        }
    };
    if ips.is_empty() {
        return Err(ToolFailure::ordinary(format!("http_fetch: `{}` resolves to no address", t.host)));
    }
    for ip in &ips {
        let shown = crate::permission::ip_host(*ip);
        if shown != t.host
            && let Some(why) = gate.domain_refusal(&shown, true)
        {
            return Err(refuse(format!("`{}` resolves to {ip}: {why}", t.host)));
        }
        if let Some(class) = address_class(*ip)
            && !gate.egress().is_some_and(|l| l.covers(*ip))
        {
            let via = if shown == t.host { String::new() } else { format!("`{}` resolves to {ip}, ", t.host) };
            return Err(refuse(format!(
                "{via}{class}; an address or network entry in `inspectors.egress_allowlist` covering {ip} allows it"
            )));
        }
    }
    Ok(ips.into_iter().map(|ip| SocketAddr::new(ip, t.port)).collect())
}

/// A stream to the first of `addrs` that answers (TLS for `https`).
async fn connect(t: &Target, addrs: &[SocketAddr]) -> Result<(Stream, SocketAddr), ToolFailure> {
    let mut last = String::new();
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => {
                let _ = tcp.set_nodelay(true);
                if !t.https {
                    return Ok((Stream::Plain(tcp), *addr));
                }
                let name = match crate::permission::host_ip(&t.host) {
                    Some(ip) => rustls::pki_types::ServerName::IpAddress(ip.into()),
                    None => rustls::pki_types::ServerName::try_from(t.host.clone()).map_err(|e| {
                        ToolFailure::terminal(format!("http_fetch: `{}` is not a TLS server name: {e}", t.host))
                    })?,
                };
                let tls = tokio_rustls::TlsConnector::from(tls_config()?).connect(name, tcp).await.map_err(|e| {
                    ToolFailure::ordinary(format!("http_fetch: TLS with `{}` ({addr}) failed: {e}", t.host))
                })?;
                return Ok((Stream::Tls(Box::new(tls)), *addr));
            }
            Ok(Err(e)) => last = format!("{addr}: {e}"),
            Err(_) => last = format!("{addr}: no answer in {} s", CONNECT_TIMEOUT.as_secs()),
        }
    }
    Err(ToolFailure::ordinary(format!("http_fetch: cannot connect to `{}` ({last})", t.host)))
}

fn tls_config() -> Result<Arc<rustls::ClientConfig>, ToolFailure> {
    static CONFIG: LazyLock<Result<Arc<rustls::ClientConfig>, String>> = LazyLock::new(|| {
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
            .map_err(|e| e.to_string())
    });
    CONFIG.clone().map_err(|e| ToolFailure::terminal(format!("http_fetch: TLS is unavailable: {e}")))
}

/// A plain or a TLS connection.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Sends the request on `stream`; the response with its body unread.
async fn exchange(
    stream: Stream,
    t: &Target,
    method: &hyper::Method,
    headers: &[(HeaderName, HeaderValue)],
    body: Option<&str>,
) -> Result<hyper::Response<hyper::body::Incoming>, ToolFailure> {
    let net = |e: hyper::Error| ToolFailure::ordinary(format!("http_fetch: `{}`: {e}", t.text));
    let mut builder = hyper::Request::builder().method(method.clone()).uri(t.path.as_str());
    let has_agent = headers.iter().any(|(n, _)| n == hyper::header::USER_AGENT);
    for (n, v) in headers {
        builder = builder.header(n, v);
    }
    builder = builder.header(hyper::header::HOST, t.host_header());
    if !has_agent {
        builder = builder.header(hyper::header::USER_AGENT, concat!("car-runtime/", env!("CARGO_PKG_VERSION")));
    }
    let body = http_body_util::Full::new(Bytes::from(body.unwrap_or_default().to_string()));
    let request = builder
        .body(body)
        .map_err(|e| ToolFailure::terminal(format!("http_fetch: cannot build the request for `{}`: {e}", t.text)))?;
    macro_rules! send {
        ($io:expr) => {{
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new($io)).await.map_err(net)?;
            // The connection ends with the call: dropped with the response.
            tokio::spawn(async move {
                let _ = conn.await;
            });
            sender.send_request(request).await.map_err(net)
        }};
    }
    match stream {
        Stream::Plain(s) => send!(s),
        Stream::Tls(s) => send!(*s),
    }
}

/// At most `max` bytes of the body, and whether there was more.
async fn read_body(body: &mut hyper::body::Incoming, max: u64) -> Result<(Vec<u8>, bool), ToolFailure> {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ToolFailure::ordinary(format!("http_fetch: reading the body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > max {
                out.extend_from_slice(&data[..max - out.len()]);
                return Ok((out, true));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok((out, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_classes() {
        let c = |s: &str| address_class(s.parse().unwrap());
        for blocked in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.0.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "0.1.2.3",
            "192.0.0.192",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "64:ff9b:1::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "100::1",
        ] {
            assert!(c(blocked).is_some(), "{blocked} must be refused");
        }
        for open in ["93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "2002:5db8:d822::1"] {
            assert_eq!(c(open), None, "{open} is globally routable");
        }
        assert_eq!(c("169.254.169.254"), Some("a cloud metadata address"));
        assert_eq!(c("::ffff:10.0.0.1"), Some("a private address"));
    }

    #[test]
    fn targets() {
        let t = Target::parse("HTTP://Example.COM:8080/a/b?q=1#frag").unwrap();
        assert_eq!((t.https, t.host.as_str(), t.port, t.path.as_str()), (false, "example.com", 8080, "/a/b?q=1"));
        assert_eq!(t.host_header(), "example.com:8080");
        let t = Target::parse("https://[::1]/").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.host_header().as_str()), ("[::1]", 443, "[::1]"));
        let t = Target::parse("http://h?x").unwrap();
        assert_eq!(t.path, "/?x");
        for bad in [
            "ftp://example.com/",
            "example.com",
            "http://u:p@example.com/",
            "http://evil.com\\@example.com/",
            "http://%65vil.com/",
            "http://example.com:99999/",
            "http://example.com:0/",
            "http://example.com/a b",
            "http://exa mple.com/",
            "http:///path",
        ] {
            assert!(Target::parse(bad).is_err(), "`{bad}` must be refused");
        }
    }

    #[test]
    fn parameters_checked() {
        let p = |v: Value| request(v.as_object().unwrap(), None).err().map(|e| e.message);
        assert!(p(json!({})).unwrap().contains("`url`"));
        assert!(p(json!({"url": "http://x/", "method": "TRACE"})).unwrap().contains("TRACE"));
        assert!(p(json!({"url": "http://x/", "headers": {"Host": "y"}})).unwrap().contains("`Host`"));
        assert!(p(json!({"url": "http://x/", "headers": {"x": 1}})).unwrap().contains("`x`"));
        assert!(p(json!({"url": "http://x/", "headers": {"x": "a\nb"}})).unwrap().contains("control"));
        assert!(p(json!({"url": "http://x/", "body": "b"})).unwrap().contains("no body"));
        assert!(p(json!({"url": "http://x/", "max_bytes": MAX_FETCH_BYTES + 1})).unwrap().contains("`max_bytes`"));
        assert!(p(json!({"url": "http://x/", "timeout_ms": 0})).unwrap().contains("`timeout_ms`"));
        let r = request(json!({"url": "http://x/", "timeout_ms": 5000}).as_object().unwrap(), Some(100)).unwrap();
        assert_eq!(r.timeout, Duration::from_millis(100), "the action's own timeout is the smaller one");
    }
}
