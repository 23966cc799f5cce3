//! HTTPS with `--ssl-certificate` and `--ssl-keyfile` (rustls): a self-signed certificate
//! made at test time, and the server answering over TLS.

use crate::common;

use common::{spawn_app_with, TestApp};

/// The server on HTTPS with a self-signed certificate for `localhost` and 127.0.0.1, made
/// here; the certificate, for a client to trust.
async fn https_app() -> (TestApp, rcgen::CertifiedKey<rcgen::KeyPair>) {
    let dir = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let app = spawn_app_with(
        &[
            "--ssl-certificate",
            cert_path.to_str().unwrap(),
            "--ssl-keyfile",
            key_path.to_str().unwrap(),
        ],
        |_| {},
    )
    .await;
    (app, cert)
}

#[tokio::test]
async fn the_server_speaks_https_with_the_given_certificate() {
    let (app, cert) = https_app().await;
    let https = app.url.replace("http://", "https://");
    let trusting = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let answer = trusting
        .get(format!("{https}/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(
        reqwest::get(format!("{}/health", app.url)).await.is_err(),
        "plain HTTP is not served"
    );
}

/// The suite a rustls client offering `suites` (in its order; all of ring's when empty) and
/// `versions` gets from the server at `addr`, whose certificate is `root`.
fn negotiated(
    addr: &str,
    root: rustls::pki_types::CertificateDer<'static>,
    suites: &[rustls::CipherSuite],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::CipherSuite {
    use std::io::{Read, Write};
    let mut provider = rustls::crypto::ring::default_provider();
    if !suites.is_empty() {
        provider.cipher_suites = suites
            .iter()
            .map(|want| {
                *provider
                    .cipher_suites
                    .iter()
                    .find(|s| s.suite() == *want)
                    .unwrap()
            })
            .collect();
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, &mut tcp);
    tls.write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    tls.conn.negotiated_cipher_suite().unwrap().suite()
}

/// The server chooses the suite: AES-128-GCM when the client offers it, whatever its
/// order (OpenSSL's clients, Rasa's aiohttp among them, list AES-256-GCM first), in TLS 1.3
/// and 1.2; a client offering only another suite still gets that one.
#[tokio::test]
async fn the_server_chooses_aes_128_gcm_whatever_the_clients_order() {
    use rustls::CipherSuite::*;
    static TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
    static TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
    let (app, cert) = https_app().await;
    let addr = app.url.trim_start_matches("http://").to_owned();
    let cases: Vec<(
        Vec<rustls::CipherSuite>,
        &[&rustls::SupportedProtocolVersion],
        _,
    )> = vec![
        // rustls' own order, as OpenSSL's: AES-256-GCM first.
        (vec![], TLS13, TLS13_AES_128_GCM_SHA256),
        (
            vec![
                TLS13_AES_256_GCM_SHA384,
                TLS13_CHACHA20_POLY1305_SHA256,
                TLS13_AES_128_GCM_SHA256,
            ],
            TLS13,
            TLS13_AES_128_GCM_SHA256,
        ),
        (vec![], TLS12, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
        // Only another suite offered: that one, not a refusal.
        (
            vec![TLS13_AES_256_GCM_SHA384],
            TLS13,
            TLS13_AES_256_GCM_SHA384,
        ),
        (
            vec![TLS13_CHACHA20_POLY1305_SHA256],
            TLS13,
            TLS13_CHACHA20_POLY1305_SHA256,
        ),
    ];
    for (offered, versions, expected) in cases {
        let (addr, root) = (addr.clone(), cert.cert.der().clone());
        let got = tokio::task::spawn_blocking(move || negotiated(&addr, root, &offered, versions))
            .await
            .unwrap();
        assert_eq!(got, expected);
    }
}
