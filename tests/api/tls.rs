//! HTTPS with `--ssl-certificate` and `--ssl-keyfile` (rustls): a self-signed certificate
//! made at test time, and the server answering over TLS.

use crate::common;

use common::spawn_app_with;

#[tokio::test]
async fn the_server_speaks_https_with_the_given_certificate() {
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
