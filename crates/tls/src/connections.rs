//! [`Connections`]: the internal connections established now, accepted and dialed, each with the
//! certificate chain its peer presented and a way to close it (real builds only).
//!
//! A TLS handshake checks the peer's certificate once. Connections between nodes live for hours,
//! so without a second look a connection made with a certificate that a rotation has since
//! retired (its CA taken out of `ca.pem`), or that has simply expired, would go on being trusted
//! until it happened to close. So every connection is registered here after its handshake, and
//! [`crate::ReloadingTls`] checks every registered peer chain again at each poll of its files
//! (see `Connections::close_unverified`); one that no longer verifies is told to close.
//!
//! ```text
//!   handshake ok ──► register(side, peer chain) ──► Registration ──► Tracked<TlsStream>
//!                          │                             ▲ dropped with the stream: entry removed
//!                          ▼                             │
//!   every poll:  close_unverified(verify) ── fails ──► CloseSignal::close ──► the stream's next
//!                                                      (wakes its task)        read/write fails
//! ```
//!
//! The registry is bounded by the connections alive: an entry is removed when its stream is
//! dropped (hyper drops it when the connection ends, for whatever reason).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures::task::AtomicWaker;
use rustls::pki_types::CertificateDer;

use crate::caller::PeerChain;
use crate::peer::PeerCertificate;

/// Which end of a connection this node is, which decides how its peer's certificate was
/// verified and so how it is verified again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Accepted on the internal listener: the peer's certificate is a client certificate that
    /// must chain to a CA in `ca.pem` (the node it names is checked per request, by
    /// [`crate::Caller`]).
    Accepted,
    /// Dialed to node `peer`: the peer's certificate must chain to a CA in `ca.pem` and name
    /// `node-<peer>`.
    Dialed {
        /// The node dialed.
        peer: u64,
    },
}

/// One established connection, as [`Connections::live`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveConnection {
    /// Unique among the connections of one [`Connections`]: a reconnect gets a new one.
    pub id: u64,
    /// Which end this node is.
    pub side: Side,
    /// The peer's address, when the socket knew it.
    pub remote: Option<SocketAddr>,
    /// The peer's node, as its certificate names it (`node-3`), for logs.
    pub peer: String,
}

/// What `Connections::close_unverified` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Connections whose peer still verifies.
    pub kept: usize,
    /// Connections told to close.
    pub closed: usize,
}

/// Tells one connection's stream to fail its next read or write, and wakes the task polling
/// it so that happens now rather than at the peer's next message.
#[derive(Default)]
pub(crate) struct CloseSignal {
    closing: AtomicBool,
    reason: OnceLock<String>,
    waker: AtomicWaker,
}

impl CloseSignal {
    fn close(&self, reason: String) {
        let _ = self.reason.set(reason);
        self.closing.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Why the connection must close, once it must. Registers `waker` first, so a close that
    /// comes after this look still wakes the task.
    pub(crate) fn poll_closed(&self, waker: &std::task::Waker) -> Option<&str> {
        self.waker.register(waker);
        if self.closing.load(Ordering::Acquire) {
            Some(self.reason.get().map_or("closed", String::as_str))
        } else {
            None
        }
    }
}

struct Entry {
    id: u64,
    side: Side,
    remote: Option<SocketAddr>,
    chain: PeerChain,
    signal: Arc<CloseSignal>,
}

impl Entry {
    fn peer(&self) -> String {
        match self.side {
            Side::Dialed { peer } => crate::node_name(peer),
            Side::Accepted => {
                let ids = self.chain.first().map(|leaf| PeerCertificate::new(leaf).node_ids()).unwrap_or_default();
                if ids.is_empty() {
                    "a certificate naming no node".to_string()
                } else {
                    ids.into_iter().map(crate::node_name).collect::<Vec<_>>().join(",")
                }
            }
        }
    }

    fn describe(&self) -> LiveConnection {
        LiveConnection { id: self.id, side: self.side, remote: self.remote, peer: self.peer() }
    }
}

#[derive(Default)]
struct Registry {
    next_id: AtomicU64,
    live: Mutex<HashMap<u64, Arc<Entry>>>,
    closed: AtomicU64,
}

impl Registry {
    fn entries(&self) -> Vec<Arc<Entry>> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let mut entries: Vec<_> = live.values().cloned().collect();
        entries.sort_by_key(|e| e.id);
        entries
    }
}

/// A node's established internal connections (a cheap handle: clones share the registry).
#[derive(Clone)]
pub struct Connections {
    node_id: u64,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections").field("node_id", &self.node_id).field("live", &self.live().len()).finish()
    }
}

impl Connections {
    /// An empty registry for node `node_id` (named in its logs).
    pub fn new(node_id: u64) -> Self {
        Self { node_id, registry: Arc::default() }
    }

    /// Registers a connection whose handshake just succeeded; it stays registered until the
    /// returned [`Registration`] is dropped.
    pub(crate) fn register(&self, side: Side, remote: Option<SocketAddr>, chain: PeerChain) -> Registration {
        let id = self.registry.next_id.fetch_add(1, Ordering::Relaxed);
        let signal = Arc::new(CloseSignal::default());
        let entry = Arc::new(Entry { id, side, remote, chain, signal: signal.clone() });
        self.registry.live.lock().unwrap_or_else(|p| p.into_inner()).insert(id, entry);
        Registration { registry: self.registry.clone(), id, signal }
    }

    /// The connections established now, oldest first.
    pub fn live(&self) -> Vec<LiveConnection> {
        self.registry.entries().iter().map(|e| e.describe()).collect()
    }

    /// How many connections were ever registered (every successful handshake, either side): a
    /// connection that was kept is told from one made again by this not moving.
    pub fn established(&self) -> u64 {
        self.registry.next_id.load(Ordering::Relaxed)
    }

    /// How many connections `Connections::close_unverified` closed since the start.
    pub fn closed(&self) -> u64 {
        self.registry.closed.load(Ordering::Relaxed)
    }

    /// Verifies every live connection's peer chain with `verify` (the current CAs, now) and
    /// closes each that fails, logging the peer and why. A connection already told to close is
    /// not checked (or logged) again.
    ///
    /// The verifications run outside the registry's lock: connections open and close while it
    /// runs. One registered after the list was taken is checked at the next sweep.
    pub(crate) fn close_unverified(
        &self,
        verify: impl Fn(Side, &[CertificateDer<'static>]) -> Result<(), rustls::Error>,
    ) -> Sweep {
        let mut sweep = Sweep::default();
        for entry in self.registry.entries() {
            if entry.signal.closing.load(Ordering::Acquire) {
                continue;
            }
            match verify(entry.side, &entry.chain) {
                Ok(()) => sweep.kept += 1,
                Err(error) => {
                    let side = match entry.side {
                        Side::Accepted => "accepted",
                        Side::Dialed { .. } => "dialed",
                    };
                    tracing::warn!(
                        node = self.node_id,
                        peer = %entry.peer(),
                        side,
                        remote = %entry.remote.map_or_else(|| "unknown".to_string(), |a| a.to_string()),
                        %error,
                        "internal TLS: closing a connection whose peer certificate no longer verifies"
                    );
                    // Counted before the close is signalled: the connection may leave the live
                    // set at once, and whoever sees it gone must see it counted.
                    self.registry.closed.fetch_add(1, Ordering::Relaxed);
                    entry.signal.close(format!("the peer certificate no longer verifies: {error}"));
                    sweep.closed += 1;
                }
            }
        }
        sweep
    }
}

/// A connection's place in [`Connections`]: removes it when dropped, and carries the signal its
/// stream checks ([`crate::tracked::Tracked`] holds one).
pub(crate) struct Registration {
    registry: Arc<Registry>,
    id: u64,
    signal: Arc<CloseSignal>,
}

impl Registration {
    pub(crate) fn signal(&self) -> &CloseSignal {
        &self.signal
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.live.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop_waker() -> std::task::Waker {
        futures::task::noop_waker()
    }

    #[test]
    fn a_failing_connection_is_closed_once_and_removed_when_dropped() {
        let connections = Connections::new(1);
        let kept = connections.register(Side::Dialed { peer: 2 }, None, Arc::new(vec![]));
        let retired = connections.register(Side::Dialed { peer: 3 }, None, Arc::new(vec![]));
        assert_eq!(connections.live().len(), 2);

        let verify = |side: Side, _: &[CertificateDer<'static>]| match side {
            Side::Dialed { peer: 3 } => Err(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)),
            _ => Ok(()),
        };
        assert_eq!(connections.close_unverified(verify), Sweep { kept: 1, closed: 1 });
        assert!(kept.signal().poll_closed(&noop_waker()).is_none());
        let reason = retired.signal().poll_closed(&noop_waker()).unwrap_or_default().to_string();
        assert!(reason.contains("no longer verifies"), "{reason}");
        // Told once: the next sweep does not count (or log) it again.
        assert_eq!(connections.close_unverified(verify), Sweep { kept: 1, closed: 0 });
        assert_eq!(connections.closed(), 1);

        drop(retired);
        let live = connections.live();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].peer, "node-2");
        drop(kept);
        assert!(connections.live().is_empty());
        assert_eq!(connections.established(), 2);
    }
}
