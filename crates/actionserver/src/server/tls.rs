//! The TLS settings an HTTP listener serves with: rustls' safe defaults on the ring
//! provider, with the server choosing the cipher suite, AES-128-GCM first; and the
//! certificate and key read from PEM files.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::CipherSuite;

/// [`server_config`] for the chain in the PEM file `cert` (leaf first) and the private key
/// in the PEM file `key`. An error names the file it is about.
pub fn from_pem_files(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, String> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    server_config(certs, key).map_err(|e| e.to_string())
}

/// A rustls server configuration for `certs` (the chain, leaf first) and `key`.
///
/// rustls' defaults, but the server's order of cipher suites wins over the client's, and
/// AES-128-GCM (with SHA-256) leads it in TLS 1.3 and 1.2 alike. A client such as
/// OpenSSL's (Rasa's aiohttp) lists AES-256-GCM with SHA-384 first; honoured, every
/// handshake's key schedule and transcript run on SHA-384, which x86's SHA extensions do
/// not speed up, where they do SHA-256: about 15 µs more a handshake on the project's
/// machines (`bench/connections.sh`). The key exchange (X25519) and the certificate (P-256
/// or RSA-2048) hold the handshake at the 128-bit level either way. AES-128-GCM is the
/// suite TLS 1.3 requires every implementation to have; a client that does not offer it
/// still gets a suite it does offer: none is refused.
pub fn server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<rustls::ServerConfig, rustls::Error> {
    let mut provider = rustls::crypto::ring::default_provider();
    // Stable: the other suites keep rustls' order.
    provider
        .cipher_suites
        .sort_by_key(|s| !is_aes_128_gcm(s.suite()));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.ignore_client_order = true;
    Ok(config)
}

fn is_aes_128_gcm(suite: CipherSuite) -> bool {
    matches!(
        suite,
        CipherSuite::TLS13_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    )
}
