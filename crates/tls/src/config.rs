//! The rustls configurations of the internal listener and of the connections to peers (real
//! builds only). Their certificate resolvers and verifiers take the current material of a
//! [`ReloadingTls`] at every handshake, so new connections use new files as soon as they are
//! swapped in; `Keys::verify_peer` checks an established connection's peer again with them
//! ([`crate::connections`]).
//!
//! ```text
//!   ReloadingTls ── current() ──► Keys { certified key, client verifier, server verifier }
//!        ▲                               ▲ read at each handshake by
//!   files, polled              CurrentCert (ResolvesServerCert + ResolvesClientCert)
//!                              CurrentClientVerifier (the listener: peers' certificates)
//!                              CurrentServerVerifier (dialing: the dialed node's certificate)
//! ```

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};

use crate::connections::Side;
use crate::error::TlsError;
use crate::files::{certificates, NodeTls, TlsPaths};
use crate::reload::ReloadingTls;

/// The ALPN protocol both sides offer: gRPC is HTTP/2.
const ALPN_H2: &[u8] = b"h2";

/// The crypto provider: ring, the one tonic's `tls-ring` feature brings (no second provider),
/// with TLS 1.3's AES-128-GCM preferred. ring's default order puts AES-256-GCM first; both are
/// sound, and AES-128 does four fewer rounds per block on every byte of Raft traffic (nodes
/// negotiate once per long-lived connection, so only the bulk cipher's cost matters here).
fn provider() -> Arc<CryptoProvider> {
    use rustls::crypto::ring::cipher_suite;
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = vec![
        cipher_suite::TLS13_AES_128_GCM_SHA256,
        cipher_suite::TLS13_AES_256_GCM_SHA384,
        cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ];
    Arc::new(provider)
}

/// The wall clock as rustls wants it (through `rill-rt`, the one sanctioned wall-clock read).
pub(crate) fn now() -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_millis(u64::try_from(rill_rt::wall_clock_ms()).unwrap_or(0)))
}

/// What rustls builds from one set of files: this node's certified key, and verifiers of peers'
/// certificates against the CAs in `ca.pem`.
pub(crate) struct Keys {
    certified: Arc<CertifiedKey>,
    client_verifier: Arc<dyn ClientCertVerifier>,
    server_verifier: Arc<dyn ServerCertVerifier>,
}

impl Keys {
    /// Builds the keys from `files` (already checked by [`NodeTls::load`]) and checks what rustls
    /// needs besides: the key is the certificate's, and the certificate chains to a CA in
    /// `ca.pem` and is valid now as `node-<node_id>`'s, for serving and for dialing.
    pub(crate) fn build(files: &NodeTls, node_id: u64, paths: &TlsPaths) -> Result<Self, TlsError> {
        let invalid = |path: &std::path::Path, what: String| TlsError::Invalid { path: path.to_path_buf(), what };
        let provider = provider();
        let chain: Vec<CertificateDer<'static>> =
            certificates(files.cert_pem(), &paths.cert)?.into_iter().map(CertificateDer::from).collect();
        let key = {
            use rustls::pki_types::pem::PemObject;
            PrivateKeyDer::from_pem_slice(files.key_pem())
                .map_err(|e| invalid(&paths.key, format!("not a PEM private key: {e}")))?
        };
        let certified = CertifiedKey::from_der(chain.clone(), key, &provider).map_err(|e| {
            invalid(&paths.key, format!("cannot be used with the certificate in {}: {e}", paths.cert.display()))
        })?;
        let mut roots = RootCertStore::empty();
        for der in certificates(files.ca_pem(), &paths.ca)? {
            roots
                .add(CertificateDer::from(der))
                .map_err(|e| invalid(&paths.ca, format!("not a usable CA certificate: {e}")))?;
        }
        let roots = Arc::new(roots);
        let client_verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| invalid(&paths.ca, format!("cannot verify peers with these CAs: {e}")))?;
        let server_verifier: Arc<dyn ServerCertVerifier> = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| invalid(&paths.ca, format!("cannot verify peers with these CAs: {e}")))?;

        // Peers verify this node's certificate the same way (with their own `ca.pem`, which in a
        // rotation trusts the same CAs): a certificate this node's own CAs refuse would be
        // refused by them too, so it is refused here, before it is served.
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err(invalid(&paths.cert, "holds no PEM certificate".into()));
        };
        let name = ServerName::try_from(crate::node_name(node_id))
            .map_err(|_| TlsError::NodeName { name: crate::node_name(node_id) })?;
        let now = now();
        let not_accepted = |e: rustls::Error| {
            invalid(
                &paths.cert,
                format!("is not accepted by the CAs in {} as {}'s certificate: {e}", paths.ca.display(), name.to_str()),
            )
        };
        server_verifier.verify_server_cert(leaf, intermediates, &name, &[], now).map_err(not_accepted)?;
        client_verifier.verify_client_cert(leaf, intermediates, now).map_err(not_accepted)?;
        Ok(Self { certified: Arc::new(certified), client_verifier, server_verifier })
    }

    /// Checks a peer's chain (leaf first) again, as its handshake did on `side`: against these
    /// CAs at `now`, and for a dialed peer, that it names the node dialed. An established
    /// connection whose peer fails this is closed ([`crate::connections`]).
    pub(crate) fn verify_peer(
        &self,
        side: Side,
        chain: &[CertificateDer<'static>],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err(rustls::Error::NoCertificatesPresented);
        };
        match side {
            Side::Accepted => self.client_verifier.verify_client_cert(leaf, intermediates, now).map(drop),
            Side::Dialed { peer } => {
                let name = ServerName::try_from(crate::node_name(peer))
                    .map_err(|_| rustls::Error::General(format!("{} is not a DNS name", crate::node_name(peer))))?;
                self.server_verifier.verify_server_cert(leaf, intermediates, &name, &[], now).map(drop)
            }
        }
    }
}

impl ReloadingTls {
    /// The internal listener's configuration: this node's current certificate, and peers must
    /// present a certificate issued by a CA in the current `ca.pem` (client authentication is
    /// required, not optional). ALPN `h2`.
    ///
    /// No session resumption: a resumed session skips the certificate check, so a CA removed from
    /// `ca.pem` would still let in sessions made before. Connections between nodes are few and
    /// long-lived, so a full handshake each costs nothing that matters.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(Arc::new(CurrentClientVerifier(self.clone())))
            .with_cert_resolver(Arc::new(CurrentCert(self.clone())));
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        Ok(Arc::new(config))
    }

    /// The configuration for dialing peers: a peer's certificate must chain to a CA in the
    /// current `ca.pem` and name the server name dialed (`node-<peer>`, see
    /// [`crate::connector`]); this node presents its current certificate. ALPN `h2`, no session
    /// resumption (as for [`ReloadingTls::server_config`]).
    pub fn client_config(self: &Arc<Self>) -> Result<Arc<ClientConfig>, TlsError> {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            // "dangerous" only because rustls cannot see that the custom verifier delegates to
            // webpki's, built from the current CAs.
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CurrentServerVerifier(self.clone())))
            .with_client_cert_resolver(Arc::new(CurrentCert(self.clone())));
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        config.resumption = rustls::client::Resumption::disabled();
        Ok(Arc::new(config))
    }
}

/// This node's current certificate, for both sides of a handshake.
struct CurrentCert(Arc<ReloadingTls>);

impl std::fmt::Debug for CurrentCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CurrentCert").field(&self.0).finish()
    }
}

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current().keys.certified.clone())
    }
}

impl ResolvesClientCert for CurrentCert {
    fn resolve(&self, _root_hint_subjects: &[&[u8]], _sigschemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current().keys.certified.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Verifies a calling peer's certificate with the current CAs.
struct CurrentClientVerifier(Arc<ReloadingTls>);

impl std::fmt::Debug for CurrentClientVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CurrentClientVerifier").field(&self.0).finish()
    }
}

impl ClientCertVerifier for CurrentClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    /// No hints: they would have to outlive a reload (rustls borrows them from the verifier).
    /// A client sends its one certificate either way (a Rill node has one; so has tonic's).
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.0.current().keys.client_verifier.verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().keys.client_verifier.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().keys.client_verifier.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.current().keys.client_verifier.supported_verify_schemes()
    }
}

/// Verifies a dialed peer's certificate with the current CAs.
struct CurrentServerVerifier(Arc<ReloadingTls>);

impl std::fmt::Debug for CurrentServerVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CurrentServerVerifier").field(&self.0).finish()
    }
}

impl ServerCertVerifier for CurrentServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.current().keys.server_verifier.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().keys.server_verifier.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().keys.server_verifier.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.current().keys.server_verifier.supported_verify_schemes()
    }
}
