//! Failed-authentication accounting per peer address: after
//! `max_failures` failed `session.auth` attempts within `window`, every
//! attempt from that address is refused (without looking at the token) until
//! the window of its first counted failure has passed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most addresses tracked; beyond it expired entries are dropped first, then
/// the oldest.
const MAX_TRACKED: usize = 4096;

/// The daemon-wide failed-auth table.
pub(crate) struct AuthThrottle {
    max_failures: u32,
    window: Duration,
    table: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl AuthThrottle {
    pub(crate) fn new(max_failures: u32, window: Duration) -> Self {
        AuthThrottle { max_failures, window, table: Mutex::new(HashMap::new()) }
    }

    /// `Some(wait)` when `ip` is locked out (it may retry after `wait`).
    pub(crate) fn locked(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        if self.max_failures == 0 {
            return None;
        }
        let t = self.table.lock().ok()?;
        let (start, n) = *t.get(&ip)?;
        let end = start + self.window;
        (n >= self.max_failures && now < end).then(|| end - now)
    }

    /// Counts one failed attempt from `ip`.
    pub(crate) fn fail(&self, ip: IpAddr, now: Instant) {
        if self.max_failures == 0 {
            return;
        }
        let Ok(mut t) = self.table.lock() else { return };
        if t.len() >= MAX_TRACKED && !t.contains_key(&ip) {
            let window = self.window;
            t.retain(|_, (start, _)| now.duration_since(*start) < window);
            if t.len() >= MAX_TRACKED
                && let Some(oldest) = t.iter().min_by_key(|(_, (s, _))| *s).map(|(k, _)| *k)
            {
                t.remove(&oldest);
            }
        }
        let e = t.entry(ip).or_insert((now, 0));
        if now.duration_since(e.0) >= self.window {
            *e = (now, 0);
        }
        e.1 = e.1.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_after_the_limit_and_unlocks_after_the_window() {
        let th = AuthThrottle::new(3, Duration::from_secs(60));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..2 {
            th.fail(a, t0);
        }
        assert_eq!(th.locked(a, t0), None);
        th.fail(a, t0);
        assert_eq!(th.locked(a, t0 + Duration::from_secs(10)), Some(Duration::from_secs(50)));
        assert_eq!(th.locked(b, t0), None, "per address");
        assert_eq!(th.locked(a, t0 + Duration::from_secs(60)), None);
        // A failure after the window starts a new count.
        th.fail(a, t0 + Duration::from_secs(61));
        assert_eq!(th.locked(a, t0 + Duration::from_secs(61)), None);
        // 0 turns it off.
        let off = AuthThrottle::new(0, Duration::from_secs(60));
        for _ in 0..10 {
            off.fail(a, t0);
        }
        assert_eq!(off.locked(a, t0), None);
    }

    #[test]
    fn the_table_is_bounded() {
        let th = AuthThrottle::new(1, Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED as u32 + 10) {
            th.fail(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(th.table.lock().unwrap().len() <= MAX_TRACKED);
    }
}
