//! Dispatch-time inspectors: a short-circuiting chain of guards over
//! `(tool_name, params)`, separate from the action-level policies and run when
//! a tool is dispatched rather than when an action is validated.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::ir::Object;

/// An inspector's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InspectorVerdict {
    /// Let the call through (to the next inspector).
    Allow,
    /// Refuse the call with this reason.
    Deny(String),
}

/// A dispatch-time guard.
pub trait Inspector: Send + Sync {
    /// The inspector's name, used in denials.
    fn name(&self) -> &str;
    /// Judges one call.
    fn inspect(&self, tool: &str, params: &Object) -> InspectorVerdict;
}

struct FnInspector<F> {
    name: String,
    f: F,
}

impl<F> Inspector for FnInspector<F>
where
    F: Fn(&str, &Object) -> InspectorVerdict + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn inspect(&self, tool: &str, params: &Object) -> InspectorVerdict {
        (self.f)(tool, params)
    }
}

/// A denial by one inspector of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectorDenial {
    /// The denying inspector.
    pub inspector: String,
    /// Its reason.
    pub reason: String,
}

impl std::fmt::Display for InspectorDenial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "denied by policy: {} ({})", self.reason, self.inspector)
    }
}

/// Inspectors run in order; the first deny stops the chain. A panicking
/// inspector denies (fail closed).
#[derive(Clone, Default)]
pub struct InspectorChain {
    inspectors: Vec<Arc<dyn Inspector>>,
}

impl std::fmt::Debug for InspectorChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.inspectors.iter().map(|i| i.name().to_string())).finish()
    }
}

impl InspectorChain {
    /// An empty chain (allows everything).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an inspector.
    pub fn push(&mut self, inspector: Arc<dyn Inspector>) -> &mut Self {
        self.inspectors.push(inspector);
        self
    }

    /// Appends a closure inspector.
    pub fn push_fn(
        &mut self,
        name: impl Into<String>,
        f: impl Fn(&str, &Object) -> InspectorVerdict + Send + Sync + 'static,
    ) -> &mut Self {
        self.push(Arc::new(FnInspector { name: name.into(), f }))
    }

    /// Number of inspectors.
    pub fn len(&self) -> usize {
        self.inspectors.len()
    }

    /// True when the chain is empty.
    pub fn is_empty(&self) -> bool {
        self.inspectors.is_empty()
    }

    /// Runs the chain; `Err` carries the first denial.
    pub fn inspect(&self, tool: &str, params: &Object) -> Result<(), InspectorDenial> {
        for i in &self.inspectors {
            let verdict = catch_unwind(AssertUnwindSafe(|| i.inspect(tool, params)))
                .unwrap_or_else(|_| InspectorVerdict::Deny(format!("inspector `{}` panicked", i.name())));
            if let InspectorVerdict::Deny(reason) = verdict {
                return Err(InspectorDenial { inspector: i.name().to_string(), reason });
            }
        }
        Ok(())
    }
}

/// The egress allowlist (`inspectors.egress_allowlist`): host names, each
/// allowing its subdomains too (`example.com`, or `*.example.com` for the
/// same), IP addresses (`127.0.0.1`, `::1`) and networks (`10.0.0.0/8`,
/// `fd00::/8`). Names govern the host a URL names; addresses and networks
/// govern a URL naming an address, and they are also what lets the
/// first-party fetch tool reach a loopback, private, link-local or
/// metadata address (a name never does: it can resolve anywhere).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressAllowlist {
    names: Vec<String>,
    nets: Vec<(std::net::IpAddr, u8)>,
}

impl EgressAllowlist {
    /// Reads the entries; an entry that is empty, a network with a bad
    /// prefix, or neither a host name nor an address is an error naming it.
    pub fn new(entries: &[String]) -> crate::Result<Self> {
        let bad = |e: &str, why: &str| {
            crate::Error::invalid_argument("inspectors.egress_allowlist", format!("entry `{e}` {why}"))
        };
        let mut list = EgressAllowlist::default();
        for e in entries {
            let t = e.trim().trim_end_matches('.').to_ascii_lowercase();
            if let Some((addr, len)) = t.split_once('/') {
                let ip = crate::permission::host_ip(addr)
                    .ok_or_else(|| bad(e, "is not a network: no address before `/`"))?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                // An IPv4-mapped network is its IPv4 network.
                let mapped = addr.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_ipv6() && ip.is_ipv4());
                let len: u8 = len.parse().map_err(|_| bad(e, "is not a network: the prefix length is not a number"))?;
                let len = if mapped {
                    len.checked_sub(96).ok_or_else(|| bad(e, "is wider than the IPv4-mapped range"))?
                } else {
                    len
                };
                if len > max {
                    return Err(bad(e, &format!("is not a network: the prefix length is over {max}")));
                }
                list.nets.push((ip, len));
            } else if let Some(ip) = crate::permission::host_ip(&t) {
                list.nets.push((ip, if ip.is_ipv4() { 32 } else { 128 }));
            } else {
                let name = t.strip_prefix("*.").unwrap_or(&t);
                if name.is_empty()
                    || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
                {
                    return Err(bad(e, "is neither a host name, an IP address nor a network"));
                }
                list.names.push(name.to_string());
            }
        }
        Ok(list)
    }

    /// True when an address or network entry covers `ip`.
    pub fn covers(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|&(net, len)| match (net, ip) {
            (std::net::IpAddr::V4(n), std::net::IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (std::net::IpAddr::V6(n), std::net::IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        })
    }

    /// True when a URL may name `host`: an address covered by an address or
    /// network entry, or a name that is a name entry or a subdomain of one.
    pub fn permits_host(&self, host: &str) -> bool {
        match crate::permission::host_ip(host) {
            Some(ip) => self.covers(ip),
            None => {
                let host = host.trim_end_matches('.').to_ascii_lowercase();
                self.names.iter().any(|a| host == *a || crate::permission::is_subdomain(&host, a))
            }
        }
    }
}

/// An egress filter: denies a call whose `url`-like parameters (`url`,
/// `uri`, `endpoint`, `host`) name a host the allowlist does not permit
/// ([`EgressAllowlist::permits_host`]). A value that is not a parseable
/// URL or host denies.
pub fn egress_allowlist(allowed: EgressAllowlist) -> impl Fn(&str, &Object) -> InspectorVerdict + Send + Sync {
    move |_tool, params| {
        for key in ["url", "uri", "endpoint", "host"] {
            let Some(v) = params.get(key) else { continue };
            let Some(s) = v.as_str() else {
                return InspectorVerdict::Deny(format!("parameter `{key}` is not a string"));
            };
            let Some(host) = host_of(s) else {
                return InspectorVerdict::Deny(format!("parameter `{key}` names no recognisable host"));
            };
            if !allowed.permits_host(&host) {
                return InspectorVerdict::Deny(format!("parameter `{key}` names a host outside the egress allowlist"));
            }
        }
        InspectorVerdict::Allow
    }
}

fn host_of(s: &str) -> Option<String> {
    let rest = s.split_once("://").map_or(s, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next()?;
    // Clients disagree on backslashes and control characters in an
    // authority; refuse rather than guess which host is meant.
    if authority.chars().any(|c| c == '\\' || c.is_whitespace() || c.is_control()) {
        return None;
    }
    let host_port = authority.rsplit('@').next()?;
    let host =
        if let Some(v6) = host_port.strip_prefix('[') { v6.split(']').next()? } else { host_port.split(':').next()? };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':')))
        .then_some(host)
}

/// A repetition detector: denies the `max_repeats + 1`-th consecutive call
/// with the same tool and parameters.
pub fn repetition_limit(max_repeats: usize) -> impl Fn(&str, &Object) -> InspectorVerdict + Send + Sync {
    let last: std::sync::Mutex<(String, usize)> = std::sync::Mutex::new((String::new(), 0));
    move |tool, params| {
        let key = format!("{tool}|{}", serde_json::to_string(params).unwrap_or_default());
        let Ok(mut g) = last.lock() else {
            return InspectorVerdict::Deny("repetition state unavailable".into());
        };
        if g.0 == key {
            g.1 += 1;
        } else {
            *g = (key, 1);
        }
        if g.1 > max_repeats {
            InspectorVerdict::Deny(format!(
                "`{tool}` repeated with identical parameters more than {max_repeats} time(s)"
            ))
        } else {
            InspectorVerdict::Allow
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn params(v: Value) -> Object {
        v.as_object().cloned().unwrap_or_default().into()
    }

    #[test]
    fn chain_short_circuits_on_first_deny() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c2 = calls.clone();
        let mut chain = InspectorChain::new();
        chain.push_fn("allow", |_, _| InspectorVerdict::Allow);
        chain.push_fn(
            "deny_x",
            |t, _| if t == "x" { InspectorVerdict::Deny("no x".into()) } else { InspectorVerdict::Allow },
        );
        chain.push_fn("count", move |_, _| {
            c2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            InspectorVerdict::Allow
        });
        let d = chain.inspect("x", &Object::new()).unwrap_err();
        assert_eq!(d.inspector, "deny_x");
        assert_eq!(d.to_string(), "denied by policy: no x (deny_x)");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(chain.inspect("y", &Object::new()).is_ok());
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn panicking_inspector_denies() {
        let mut chain = InspectorChain::new();
        chain.push_fn("boom", |_, _| panic!("bad"));
        assert_eq!(chain.inspect("x", &Object::new()).unwrap_err().inspector, "boom");
    }

    #[test]
    fn egress_and_repetition() {
        let egress = egress_allowlist(EgressAllowlist::new(&["example.com".into()]).unwrap());
        assert_eq!(egress("http", &params(json!({"url": "https://api.example.com/x"}))), InspectorVerdict::Allow);
        assert_eq!(egress("http", &params(json!({"url": "https://u:p@example.com:8443/x"}))), InspectorVerdict::Allow);
        assert!(matches!(
            egress("http", &params(json!({"url": "https://evil.com/example.com"}))),
            InspectorVerdict::Deny(_)
        ));
        assert!(matches!(
            egress("http", &params(json!({"url": "https://example.com.evil.io"}))),
            InspectorVerdict::Deny(_)
        ));
        assert!(matches!(egress("http", &params(json!({"url": 5}))), InspectorVerdict::Deny(_)));
        assert!(matches!(
            egress("http", &params(json!({"url": "http://evil.com\\@example.com/"}))),
            InspectorVerdict::Deny(_)
        ));
        assert!(matches!(egress("http", &params(json!({"url": "http://%65vil.com/"}))), InspectorVerdict::Deny(_)));
        let rep = repetition_limit(2);
        let p = params(json!({"a": 1}));
        assert_eq!(rep("t", &p), InspectorVerdict::Allow);
        assert_eq!(rep("t", &p), InspectorVerdict::Allow);
        assert!(matches!(rep("t", &p), InspectorVerdict::Deny(_)));
        assert_eq!(rep("t", &params(json!({"a": 2}))), InspectorVerdict::Allow);
    }
}
