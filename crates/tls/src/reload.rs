//! [`ReloadingTls`]: a node's TLS material that follows its files, so certificates rotate without
//! a restart.
//!
//! # When the files are read again
//!
//! A background task ([`ReloadingTls::spawn_watcher`], started by the node) reads the three
//! files every [`RELOAD_POLL_INTERVAL`] and compares their bytes with what it read last time.
//! When any of them changed, it checks the new set and, only if it is complete and valid, swaps
//! it in. Handshakes take the current material with one read lock, never touching the disk.
//!
//! Why polling rather than a look at the files on every new handshake: rustls asks for the
//! certificate and the verifier from synchronous callbacks on the async workers, so file I/O and
//! parsing there would stall a worker on a slow disk; and connections between nodes live for
//! hours, so a bad rotation would be noticed (and logged) only at the next reconnect, long after
//! the operator made it. A poll notices within seconds, logs then, and keeps file I/O off the
//! handshake path.
//!
//! Why compare the bytes rather than the files' modification time and size: the time has the
//! kernel's coarse clock granularity (milliseconds), so a file rewritten at the same size within
//! one tick of the last look (a certificate re-issued with a key of the same type, say) would be
//! missed. The three files are a few KB: reading them every few seconds costs next to nothing
//! and cannot miss a change.
//!
//! # A bad new set never takes a node down
//!
//! A rotation may be seen half-written (the certificate replaced, the key not yet), or may simply
//! be wrong (a certificate for another node, a CA that does not issue it). Such a set is refused
//! with a warning naming the file and what is wrong, and the previous material keeps serving. The
//! same set is not read again until one of the files changes once more, so a refused rotation is
//! logged once, and a completed one is picked up at the next poll.
//!
//! What a set must pass is what [`NodeTls::load`] checks at start (the CA file parses, the key
//! parses, the certificate names this node), plus what rustls needs to serve it (the key is the
//! certificate's, the certificate chains to a CA in `ca.pem` and is valid now for both server and
//! client authentication as `node-<id>`): the same checks at start and on reload.
//!
//! # Established connections follow the files too
//!
//! A handshake checks a peer's certificate once, but connections between nodes live for hours.
//! So at every poll (real builds), after looking at the files, the watcher checks every
//! established internal connection's peer certificate again with the material in use
//! ([`ReloadingTls::close_unverified`], [`crate::connections`]): one whose peer no longer chains
//! to a CA in `ca.pem`, has expired, or (dialed) no longer names the node dialed is closed, and
//! the channel that dialed it reconnects with the current files. One whose peer still verifies
//! is left alone, so a rotation within one CA reconnects nothing.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use crate::error::TlsError;
use crate::files::{NodeTls, TlsPaths};

/// How often [`ReloadingTls::spawn_watcher`] looks at the files: new files are in use at most this
/// long after they are complete. Three reads of a few KB per interval cost nothing measurable;
/// much longer would make an operator wait (and wonder) after a rotation.
pub const RELOAD_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// What [`ReloadingTls::check`] did.
#[derive(Debug)]
pub enum Reload {
    /// The files are as they were last read, or hold the same bytes.
    Unchanged,
    /// New material is in use from now on: for new connections, and established connections
    /// are checked against it at the same poll ([`ReloadingTls::close_unverified`]).
    Reloaded {
        /// How many times material was swapped in since the start (the start's is 0).
        generation: u64,
    },
    /// The files changed but do not make a usable set; the previous material stays in use.
    Refused(TlsError),
}

/// The material in use: the files' contents and what rustls builds from them.
pub(crate) struct Material {
    pub(crate) files: NodeTls,
    pub(crate) generation: u64,
    #[cfg(not(madsim))]
    pub(crate) keys: crate::config::Keys,
}

impl Material {
    fn build(files: NodeTls, node_id: u64, paths: &TlsPaths, generation: u64) -> Result<Self, TlsError> {
        #[cfg(not(madsim))]
        let keys = crate::config::Keys::build(&files, node_id, paths)?;
        #[cfg(madsim)]
        let _ = (node_id, paths);
        Ok(Self {
            files,
            generation,
            #[cfg(not(madsim))]
            keys,
        })
    }
}

/// The bytes of the CA, certificate and key files as last read (`None`: the file could not be
/// read), to tell that something changed.
#[derive(PartialEq, Eq)]
struct Seen([Option<Vec<u8>>; 3]);

impl Seen {
    fn read(paths: &TlsPaths) -> Self {
        // Follows symbolic links: a directory of links swapped at once (a Kubernetes secret
        // volume) reads as the new files.
        let read = |path: &Path| std::fs::read(path).ok();
        Self([read(&paths.ca), read(&paths.cert), read(&paths.key)])
    }
}

/// A node's CA, certificate and key, read from [`TlsPaths`] at start and again whenever the
/// files change (see the module documentation). The rustls configurations built from it
/// ([`ReloadingTls::server_config`], [`ReloadingTls::client_config`]) use the current material
/// for every new handshake; connections already established are checked against it at every
/// poll, and closed once their peer's certificate no longer verifies.
pub struct ReloadingTls {
    paths: TlsPaths,
    node_id: u64,
    current: RwLock<Arc<Material>>,
    /// The files' bytes when they were last read, whether the set was accepted or not.
    last_read: Mutex<Seen>,
    /// How many changed sets were refused.
    refused: AtomicU64,
    /// The connections established with this material (any generation of it), checked again
    /// at every poll.
    #[cfg(not(madsim))]
    connections: crate::connections::Connections,
}

impl std::fmt::Debug for ReloadingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingTls")
            .field("paths", &self.paths)
            .field("node_id", &self.node_id)
            .field("generation", &self.generation())
            .finish()
    }
}

impl ReloadingTls {
    /// Reads and checks the files for node `node_id`. Fails when they do not make a usable set:
    /// a node does not start with material it could not serve.
    pub fn load(paths: TlsPaths, node_id: u64) -> Result<Arc<Self>, TlsError> {
        // Looked at first: a change made while loading is seen (and read) by the next check.
        let seen = Seen::read(&paths);
        let files = NodeTls::load(&paths, node_id)?;
        let material = Material::build(files, node_id, &paths, 0)?;
        Ok(Arc::new(Self {
            paths,
            node_id,
            current: RwLock::new(Arc::new(material)),
            last_read: Mutex::new(seen),
            refused: AtomicU64::new(0),
            #[cfg(not(madsim))]
            connections: crate::connections::Connections::new(node_id),
        }))
    }

    /// The files this reads.
    pub fn paths(&self) -> &TlsPaths {
        &self.paths
    }

    /// The node whose certificate this must be.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// How many times new material was swapped in since the start.
    pub fn generation(&self) -> u64 {
        self.current().generation
    }

    /// How many changed sets of files were refused since the start (each distinct set once).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The files' contents in use now.
    pub fn files(&self) -> NodeTls {
        self.current().files.clone()
    }

    pub(crate) fn current(&self) -> Arc<Material> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the files again if they changed since they were last read, and swaps them in if
    /// they make a usable set; logs what it did (a refused set as a warning). Blocks on file
    /// I/O: call it off the async workers ([`ReloadingTls::spawn_watcher`] does).
    pub fn check(&self) -> Reload {
        let seen = Seen::read(&self.paths);
        {
            let mut last = self.last_read.lock().unwrap_or_else(|p| p.into_inner());
            if *last == seen {
                return Reload::Unchanged;
            }
            *last = seen;
        }
        let outcome = self.read_again();
        match &outcome {
            Reload::Unchanged => {}
            Reload::Reloaded { generation } => tracing::info!(
                node = self.node_id,
                cert = %self.paths.cert.display(),
                ca = %self.paths.ca.display(),
                generation,
                "internal TLS: new certificate files in use"
            ),
            Reload::Refused(error) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    node = self.node_id,
                    %error,
                    "internal TLS: the changed certificate files are refused; the previous ones stay in use"
                )
            }
        }
        outcome
    }

    fn read_again(&self) -> Reload {
        let files = match NodeTls::load(&self.paths, self.node_id) {
            Ok(files) => files,
            Err(e) => return Reload::Refused(e),
        };
        let current = self.current();
        if files == current.files {
            return Reload::Unchanged;
        }
        let generation = current.generation + 1;
        match Material::build(files, self.node_id, &self.paths, generation) {
            Ok(material) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(material);
                Reload::Reloaded { generation }
            }
            Err(e) => Reload::Refused(e),
        }
    }

    /// The internal connections established now, accepted and dialed (see
    /// [`crate::connections`]).
    #[cfg(not(madsim))]
    pub fn connections(&self) -> &crate::connections::Connections {
        &self.connections
    }

    /// Checks every established connection's peer certificate again with the material in use
    /// now (chains to a CA in the current `ca.pem`, valid now, and a dialed peer's names the
    /// node dialed) and closes each that fails, logging the peer and why. So neither a CA a
    /// rotation took out of `ca.pem` nor an expired certificate outlives a poll on a connection
    /// made before; a connection whose peer still verifies is left alone. CPU-bound (a chain
    /// verification per connection): call it off the async workers, as the watcher does.
    #[cfg(not(madsim))]
    pub fn close_unverified(&self) -> crate::connections::Sweep {
        let material = self.current();
        let now = crate::config::now();
        self.connections.close_unverified(|side, chain| material.keys.verify_peer(side, chain, now))
    }

    /// One poll: [`ReloadingTls::check`], then, in real builds, [`ReloadingTls::close_unverified`]
    /// at every poll, not only after a reload: a certificate expires without any file changing,
    /// and a connection whose handshake ran on the old material while the new was being swapped
    /// in registers just after the sweep that followed the swap, so it is caught by the next.
    fn poll(&self) {
        let reload = self.check();
        #[cfg(not(madsim))]
        {
            let sweep = self.close_unverified();
            if let Reload::Reloaded { generation } = reload {
                tracing::info!(
                    node = self.node_id,
                    generation,
                    kept = sweep.kept,
                    closed = sweep.closed,
                    "internal TLS: established connections checked against the new files"
                );
            }
        }
        #[cfg(madsim)]
        drop(reload);
    }

    /// Starts the task that polls the files, and checks the established connections, every
    /// `interval` (normally [`RELOAD_POLL_INTERVAL`]). It ends once nothing else holds this
    /// `ReloadingTls`.
    pub fn spawn_watcher(self: &Arc<Self>, interval: Duration) -> rill_rt::JoinHandle<()> {
        rill_rt::spawn(watch(Arc::downgrade(self), interval))
    }
}

async fn watch(tls: Weak<ReloadingTls>, interval: Duration) {
    loop {
        rill_rt::sleep(interval).await;
        let Some(tls) = tls.upgrade() else { return };
        // Three small reads, now and then a parse, and a chain verification per connection: off
        // the async workers.
        rill_rt::blocking(move || tls.poll()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issue::ClusterCa;

    /// Writes node `id`'s certificate and key from `ca` to `paths` (the files the node reads).
    fn install(paths: &TlsPaths, ca: &ClusterCa, id: u64) {
        let (cert, key) = ca.issue_node(id).unwrap();
        std::fs::write(&paths.cert, cert).unwrap();
        std::fs::write(&paths.key, key).unwrap();
    }

    fn must_refuse(tls: &ReloadingTls, what: &str) -> String {
        match tls.check() {
            Reload::Refused(e) => {
                let e = e.to_string();
                assert!(e.contains(what), "{e}");
                e
            }
            other => panic!("expected a refusal naming {what:?}, got {other:?}"),
        }
    }

    #[test]
    fn a_changed_set_is_swapped_in_only_when_it_checks_out() {
        let dir = tempfile::tempdir().unwrap();
        let a = ClusterCa::generate("a").unwrap();
        let paths = a.write_node(dir.path(), 1).unwrap();
        let tls = ReloadingTls::load(paths.clone(), 1).unwrap();
        assert!(matches!(tls.check(), Reload::Unchanged));
        let started = tls.files();

        tracing::info!("--- a certificate for another node is refused, the old one stays");
        install(&paths, &a, 2);
        must_refuse(&tls, "does not name this node");
        assert_eq!(tls.generation(), 0);
        assert!(tls.files() == started);
        // Refused once: the same files are not read (or logged) again.
        assert!(matches!(tls.check(), Reload::Unchanged));

        tracing::info!("--- half a rotation: a new certificate with the old key");
        let old_key = std::fs::read(&paths.key).unwrap();
        install(&paths, &a, 1);
        let new_key = std::fs::read(&paths.key).unwrap();
        std::fs::write(&paths.key, &old_key).unwrap();
        must_refuse(&tls, "cannot be used with the certificate");
        tracing::info!("--- a key cut short");
        std::fs::write(&paths.key, &new_key[..new_key.len() / 2]).unwrap();
        must_refuse(&tls, "private key");
        assert_eq!(tls.generation(), 0);

        tracing::info!("--- the rotation completes");
        std::fs::write(&paths.key, &new_key).unwrap();
        assert!(matches!(tls.check(), Reload::Reloaded { generation: 1 }));
        assert!(tls.files() != started);
        assert_eq!(tls.files().cert_pem(), std::fs::read(&paths.cert).unwrap().as_slice());

        tracing::info!("--- rewriting the same bytes changes nothing");
        let cert = std::fs::read(&paths.cert).unwrap();
        std::fs::write(&paths.cert, b"").unwrap();
        must_refuse(&tls, "holds no PEM certificate");
        assert_eq!(tls.refused(), 4);
        std::fs::write(&paths.cert, &cert).unwrap();
        assert!(matches!(tls.check(), Reload::Unchanged));
        assert_eq!(tls.generation(), 1);
    }

    #[test]
    fn a_new_ca_is_rotated_in_with_both_cas_in_ca_pem() {
        let dir = tempfile::tempdir().unwrap();
        let a = ClusterCa::generate("a").unwrap();
        let b = ClusterCa::generate("b").unwrap();
        let paths = a.write_node(dir.path(), 3).unwrap();
        let tls = ReloadingTls::load(paths.clone(), 3).unwrap();

        tracing::info!("--- a certificate from a CA that ca.pem does not hold is refused");
        install(&paths, &b, 3);
        must_refuse(&tls, "is not accepted by the CAs");

        tracing::info!("--- both CAs in ca.pem: accepted");
        std::fs::write(&paths.ca, format!("{}{}", a.cert_pem(), b.cert_pem())).unwrap();
        assert!(matches!(tls.check(), Reload::Reloaded { generation: 1 }));

        tracing::info!("--- the old CA removed");
        std::fs::write(&paths.ca, b.cert_pem()).unwrap();
        assert!(matches!(tls.check(), Reload::Reloaded { generation: 2 }));

        tracing::info!("--- a CA file that does not parse is refused");
        std::fs::write(&paths.ca, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
        must_refuse(&tls, "ca.pem");
        assert_eq!(tls.generation(), 2);
    }

    /// The DER chain of a certificate PEM.
    #[cfg(not(madsim))]
    fn chain(pem: &str) -> crate::caller::PeerChain {
        use rustls_pki_types::pem::PemObject;
        let certs = rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()).map(|c| c.unwrap()).collect();
        Arc::new(certs)
    }

    #[cfg(not(madsim))]
    #[test]
    fn established_connections_are_checked_again_with_the_material_in_use() {
        use crate::connections::Side;
        let dir = tempfile::tempdir().unwrap();
        let a = ClusterCa::generate("a").unwrap();
        let b = ClusterCa::generate("b").unwrap();
        let paths = a.write_node(dir.path(), 1).unwrap();
        std::fs::write(&paths.ca, format!("{}{}", a.cert_pem(), b.cert_pem())).unwrap();
        let tls = ReloadingTls::load(paths.clone(), 1).unwrap();
        let connections = tls.connections();
        let peer = |ca: &ClusterCa, id| chain(&ca.issue_node(id).unwrap().0);

        tracing::info!("--- peers from both CAs, accepted and dialed, all verify while both are trusted");
        let _accepted_a = connections.register(Side::Accepted, None, peer(&a, 2));
        let _dialed_a = connections.register(Side::Dialed { peer: 2 }, None, peer(&a, 2));
        let _accepted_b = connections.register(Side::Accepted, None, peer(&b, 3));
        let _dialed_b = connections.register(Side::Dialed { peer: 3 }, None, peer(&b, 3));
        assert_eq!(tls.close_unverified(), crate::connections::Sweep { kept: 4, closed: 0 });

        tracing::info!("--- A out of ca.pem: A's connections close, B's stay");
        install(&paths, &b, 1);
        std::fs::write(&paths.ca, b.cert_pem()).unwrap();
        assert!(matches!(tls.check(), Reload::Reloaded { .. }));
        assert_eq!(tls.close_unverified(), crate::connections::Sweep { kept: 2, closed: 2 });
        let peers: Vec<_> = connections.live().into_iter().map(|c| c.peer).collect();
        // Listed until their streams drop; told to close already.
        assert_eq!(peers, ["node-2", "node-2", "node-3", "node-3"]);
        assert_eq!(connections.closed(), 2);

        tracing::info!("--- a dialed peer must still name the node dialed; an expired one fails");
        let keys = &tls.current().keys;
        let now = crate::config::now();
        let named_3 = peer(&b, 3);
        keys.verify_peer(Side::Dialed { peer: 3 }, &named_3, now).unwrap();
        keys.verify_peer(Side::Dialed { peer: 4 }, &named_3, now).unwrap_err();
        let hour = Duration::from_secs(3600);
        let short = chain(&b.issue_node_valid_for(3, hour).unwrap().0);
        keys.verify_peer(Side::Accepted, &short, now).unwrap();
        let later = rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(now.as_secs()) + 2 * hour);
        let expired = keys.verify_peer(Side::Accepted, &short, later).unwrap_err().to_string();
        assert!(expired.contains("expired"), "{expired}");
        keys.verify_peer(Side::Accepted, &[], now).unwrap_err();
    }

    #[test]
    fn a_node_does_not_start_with_a_set_it_could_not_serve() {
        let dir = tempfile::tempdir().unwrap();
        let a = ClusterCa::generate("a").unwrap();
        let b = ClusterCa::generate("b").unwrap();
        let paths = a.write_node(dir.path(), 1).unwrap();
        let err = ReloadingTls::load(paths.clone(), 2).unwrap_err().to_string();
        assert!(err.contains("does not name this node"), "{err}");
        install(&paths, &b, 1);
        let err = ReloadingTls::load(paths, 1).unwrap_err().to_string();
        assert!(err.contains("is not accepted by the CAs"), "{err}");
    }
}
