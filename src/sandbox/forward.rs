//! `loopback_ports`: the host's loopback ports a `loopback` run may reach.
//!
//! Nothing in the host's network namespace can tell a connect to
//! `127.0.0.1` from one to anywhere else by port alone (Landlock's TCP
//! rules filter by port), so the run gets a network namespace of its own
//! and the runtime carries each connection across: the child listens on
//! `127.0.0.1:PORT` in its namespace before `exec` and hands the
//! listeners over a unix socket (`car_sandbox_child`), and here one thread
//! per port accepts on them and connects to the host's `127.0.0.1:PORT`,
//! copying both ways. Everything stops when the run ends.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The most connections forwarded at once per run; more are closed at once.
const MAX_CONNECTIONS: usize = 64;

/// Receives the run's listeners from the child's message on `sock` (sent
/// before `exec`, so already there once `spawn` has returned).
pub(crate) fn receive(sock: &OwnedFd, expected: usize) -> Result<Vec<TcpListener>, String> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut space =
        [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(car_sandbox_child::MAX_FORWARDED))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    recvmsg(sock, &mut iov, &mut control, RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC)
        .map_err(|e| format!("receiving the forwarded loopback listeners from the sandbox: {e}"))?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(r) = m {
            fds.extend(r);
        }
    }
    if fds.len() != expected {
        return Err(format!("the sandbox handed over {} of {expected} forwarded loopback listeners", fds.len()));
    }
    Ok(fds.into_iter().map(TcpListener::from).collect())
}

/// One forwarded connection: its two sockets (kept to shut them down at
/// the end of the run) and the two copying threads.
struct Conn {
    streams: [TcpStream; 2],
    copies: Vec<JoinHandle<()>>,
}

impl Conn {
    fn finished(&self) -> bool {
        self.copies.iter().all(|h| h.is_finished())
    }

    fn close(self) {
        for s in &self.streams {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for h in self.copies {
            let _ = h.join();
        }
    }
}

/// The forwarding of one run's ports, for as long as the value lives:
/// dropping it stops accepting and closes every carried connection.
pub(crate) struct Forwarder {
    stop: Arc<AtomicBool>,
    listeners: Vec<Arc<TcpListener>>,
    conns: Arc<Mutex<Vec<Conn>>>,
    accepted: Arc<AtomicUsize>,
    acceptors: Vec<JoinHandle<()>>,
}

impl Forwarder {
    /// Starts accepting on `listeners`, the i-th forwarded to the host's
    /// `127.0.0.1:ports[i]`.
    pub(crate) fn start(listeners: Vec<TcpListener>, ports: &[u16]) -> Forwarder {
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let listeners: Vec<Arc<TcpListener>> = listeners.into_iter().map(Arc::new).collect();
        let mut acceptors = Vec::new();
        for (l, &port) in listeners.iter().zip(ports) {
            let (l, stop, conns, accepted) = (l.clone(), stop.clone(), conns.clone(), accepted.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("car-sandbox-fwd-{port}"))
                .spawn(move || accept_loop(&l, port, &stop, &conns, &accepted));
            if let Ok(h) = spawned {
                acceptors.push(h);
            }
        }
        Forwarder { stop, listeners, conns, accepted, acceptors }
    }

    /// Connections carried so far.
    pub(crate) fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Stops accepting, closes every forwarded connection and waits for the
    /// threads.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for l in &self.listeners {
            // Wakes a blocked accept (EINVAL on a shut-down listener).
            let _ = rustix::net::shutdown(l.as_fd(), rustix::net::Shutdown::Both);
        }
        for h in self.acceptors.drain(..) {
            let _ = h.join();
        }
        let conns: Vec<Conn> = self.conns.lock().unwrap_or_else(PoisonError::into_inner).drain(..).collect();
        for c in conns {
            c.close();
        }
        self.listeners.clear();
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(l: &TcpListener, port: u16, stop: &AtomicBool, conns: &Mutex<Vec<Conn>>, accepted: &AtomicUsize) {
    let host = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    loop {
        let inner = match l.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        {
            // Forget the connections both of whose copies have ended.
            let mut live = conns.lock().unwrap_or_else(PoisonError::into_inner);
            let (done, keep): (Vec<Conn>, Vec<Conn>) = live.drain(..).partition(Conn::finished);
            *live = keep;
            done.into_iter().for_each(Conn::close);
            if live.len() >= MAX_CONNECTIONS {
                continue; // dropped: closed at once
            }
        }
        // Nothing listening on the host's port: the command sees its
        // connection closed, as it would a refused one.
        let Ok(outer) = TcpStream::connect_timeout(&host, Duration::from_secs(5)) else { continue };
        accepted.fetch_add(1, Ordering::SeqCst);
        let (Ok(i1), Ok(i2), Ok(o1), Ok(o2)) =
            (inner.try_clone(), inner.try_clone(), outer.try_clone(), outer.try_clone())
        else {
            continue;
        };
        let mut copies = Vec::with_capacity(2);
        for (mut from, mut to) in [(i1, o1), (o2, i2)] {
            let copy = std::thread::Builder::new().name(format!("car-sandbox-fwd-{port}-copy")).spawn(move || {
                let _ = io::copy(&mut from, &mut to);
                // One direction ended: pass the end on, and stop reading.
                let _ = to.shutdown(std::net::Shutdown::Write);
                let _ = from.shutdown(std::net::Shutdown::Read);
            });
            if let Ok(h) = copy {
                copies.push(h);
            }
        }
        conns.lock().unwrap_or_else(PoisonError::into_inner).push(Conn { streams: [inner, outer], copies });
    }
}
