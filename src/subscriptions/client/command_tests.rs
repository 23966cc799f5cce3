//! The client's mapping of every answer of a real (embedded) service to a command
//! outcome.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::subscriptions::embedded::{self, ServiceSettings, DEMO_DATA};

/// A command as the guard would make one. Test-only: the seal is this crate's.
struct TestCommand {
    subscription: String,
    change_type: String,
    revision: i64,
    request_key: String,
}

impl crate::subscriptions::provider::sealed::Sealed for TestCommand {}

impl ConfirmedCommand for TestCommand {
    fn subscription(&self) -> &str {
        &self.subscription
    }
    fn change_type(&self) -> &str {
        &self.change_type
    }
    fn revision(&self) -> i64 {
        self.revision
    }
    fn request_key(&self) -> &str {
        &self.request_key
    }
}

fn change(subscription: &str, change_type: &str, revision: i64, key: &str) -> TestCommand {
    TestCommand {
        subscription: subscription.into(),
        change_type: change_type.into(),
        revision,
        request_key: key.into(),
    }
}

async fn service(delay_ms: u64) -> (tempfile::TempDir, ServiceClient) {
    let dir = tempfile::tempdir().unwrap();
    let running = embedded::start(
        0,
        ServiceSettings {
            database: dir.path().join("s.db"),
            seed: Some(DEMO_DATA.to_owned()),
            token: None,
            command_delay: Duration::from_millis(delay_ms),
            faults: Default::default(),
            events: None,
            per_peer: embedded::PER_PEER,
        },
    )
    .await
    .unwrap();
    let url = format!("http://127.0.0.1:{}", running.port);
    (
        dir,
        ServiceClient::new(&url, Duration::from_secs(5), None).unwrap(),
    )
}

#[tokio::test]
async fn every_answer_maps_to_an_outcome() {
    let (_dir, client) = service(0).await;
    let first = client
        .send_change(&change("WS-SUB-3304", "stop_renewal", 4, "k1"))
        .await;
    assert!(
        matches!(
            first,
            CommandOutcome::Applied {
                replayed: false,
                ..
            }
        ),
        "{first:?}"
    );
    let again = client
        .send_change(&change("WS-SUB-3304", "stop_renewal", 4, "k1"))
        .await;
    assert!(
        matches!(again, CommandOutcome::Applied { replayed: true, .. }),
        "{again:?}"
    );
    let reused = client
        .send_change(&change("WS-SUB-3304", "skip_next_box", 4, "k1"))
        .await;
    assert!(
        matches!(reused, CommandOutcome::Rejected { status: 422, .. }),
        "{reused:?}"
    );
    let stale = client
        .send_change(&change("WS-SUB-3310", "stop_renewal", 1, "k2"))
        .await;
    assert!(
        matches!(&stale, CommandOutcome::Stale(Some(record)) if record.revision == 2),
        "{stale:?}"
    );
    let unknown = client
        .send_change(&change("WS-SUB-0000", "stop_renewal", 1, "k3"))
        .await;
    assert!(
        matches!(unknown, CommandOutcome::Rejected { status: 404, .. }),
        "{unknown:?}"
    );
    let not_offered = client
        .send_change(&change("WS-SUB-3310", "upgrade", 2, "k4"))
        .await;
    assert!(
        matches!(not_offered, CommandOutcome::Rejected { status: 422, .. }),
        "{not_offered:?}"
    );
    let refused = ServiceClient::new("http://127.0.0.1:9", Duration::from_secs(1), None).unwrap();
    let not_sent = refused
        .send_change(&change("WS-SUB-3310", "stop_renewal", 2, "k5"))
        .await;
    assert!(
        matches!(not_sent, CommandOutcome::NotSent(_)),
        "{not_sent:?}"
    );
}

#[tokio::test]
async fn a_command_in_flight_answers_409_to_a_second_delivery() {
    let (_dir, client) = service(600).await;
    let slow = change("WS-SUB-3304", "stop_renewal", 4, "k9");
    let c2 = client.clone();
    let first = tokio::spawn(async move { c2.send_change(&slow).await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let second = client
        .send_change(&change("WS-SUB-3304", "stop_renewal", 4, "k9"))
        .await;
    assert_eq!(second, CommandOutcome::InFlight);
    assert!(matches!(
        first.await.unwrap(),
        CommandOutcome::Applied { .. }
    ));
}

#[tokio::test]
async fn no_answer_in_time_is_unknown() {
    let (_dir, slow) = service(1_500).await;
    let hurried = ServiceClient::new(slow.base_url(), Duration::from_millis(300), None).unwrap();
    let outcome = hurried
        .send_change(&change("WS-SUB-3304", "stop_renewal", 4, "k7"))
        .await;
    assert!(matches!(outcome, CommandOutcome::Unknown(_)), "{outcome:?}");
}

#[tokio::test]
async fn a_command_that_gets_no_turn_is_never_sent() {
    // The service holds every call far longer than the timeout, and one call may be
    // in flight: the first command takes the turn and times out after sending, the
    // second gets the turn then, the later ones wait out their timeout.
    let (url, seen) = testing::service(Duration::from_secs(5), "201 Created", "{}", None).await;
    let client =
        ServiceClient::with_max_in_flight(&url, Duration::from_millis(800), None, 1).unwrap();
    let commands = (0..4).map(|i| {
        let client = client.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(100 * i)).await;
            client
                .send_change(&change("WS-SUB-1", "stop_renewal", 1, &format!("key-{i}")))
                .await
        }
    });
    let outcomes = futures_util::future::join_all(commands).await;
    let not_sent = outcomes
        .iter()
        .filter(|o| matches!(o, CommandOutcome::NotSent(why) if why.contains("busy")))
        .count();
    let unknown = outcomes
        .iter()
        .filter(|o| matches!(o, CommandOutcome::Unknown(_)))
        .count();
    assert_eq!(not_sent + unknown, 4, "{outcomes:?}");
    assert!(not_sent >= 1, "{outcomes:?}");
    // What was reported not sent never reached the service. (The service may be
    // working on more than one: a call the client gave up on still runs there. The
    // bound is on what this client has outstanding.)
    assert_eq!(
        seen.received.load(Ordering::SeqCst),
        unknown,
        "{outcomes:?}"
    );
}

/// A redirect is an answer, never followed: a command redirected elsewhere (here to the
/// very service it was meant for, which would make it) is not sent there, and is refused
/// with the redirect's status; a read redirected is not a record. The service's record
/// afterwards is as it was, and no command under the key reached it.
#[tokio::test]
async fn a_redirect_is_not_followed_and_the_command_goes_nowhere_else() {
    let (_dir, direct) = service(0).await;
    let (front, seen) = testing::redirecting(direct.base_url().to_owned()).await;
    let client = ServiceClient::new(&front, Duration::from_secs(5), None).unwrap();
    let before = direct.get("WS-SUB-3304").await.unwrap().unwrap();

    let outcome = client
        .send_change(&change(
            "WS-SUB-3304",
            "stop_renewal",
            before.revision,
            "redirected",
        ))
        .await;
    assert!(
        matches!(outcome, CommandOutcome::Rejected { status: 307, .. }),
        "{outcome:?}"
    );
    let read = client.get("WS-SUB-3304").await;
    assert!(
        matches!(read, Err(ServiceError::Status { status: 307, .. })),
        "{read:?}"
    );
    assert_eq!(seen.received.load(Ordering::SeqCst), 2, "each asked once");

    let after = direct.get("WS-SUB-3304").await.unwrap().unwrap();
    assert_eq!(after, before, "the record is as it was");
    assert!(
        matches!(direct.change_by_key("redirected").await, Ok(KeyState::Void)),
        "the service never received a command under the key (and now never will)"
    );
}

/// A service over TLS on loopback, its certificate self-signed for 127.0.0.1: it takes
/// `connections` connections one after another, counts the handshakes begun and the
/// requests read, and answers each request with `answer` (a record) when given. Returns
/// its URL, its certificate (PEM), and the counts.
fn tls_service(
    connections: usize,
    answer: Option<String>,
) -> (String, String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    use std::io::{Read as _, Write as _};
    crate::telemetry::install_crypto();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let (handshakes, requests) = (Arc::<AtomicUsize>::default(), Arc::<AtomicUsize>::default());
    let (h, r) = (handshakes.clone(), requests.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(connections) {
            let connection = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(connection, stream.unwrap());
            h.fetch_add(1, Ordering::SeqCst);
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf) {
                    Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            if head.is_empty() {
                continue;
            }
            r.fetch_add(1, Ordering::SeqCst);
            if let Some(body) = &answer {
                let _ = write!(
                    tls,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        }
    });
    (url, cert.cert.pem(), handshakes, requests)
}

/// A service over TLS is held to the platform's roots: one whose certificate they do not
/// vouch for (here a self-signed one) fails the handshake, so a read is unreachable, a
/// command is reported not sent, and no request reaches the server.
#[tokio::test]
async fn a_service_whose_certificate_is_not_trusted_gets_no_request() {
    let (url, _, handshakes, requests) = tls_service(2, None);
    let client = ServiceClient::new(&url, Duration::from_secs(5), None).unwrap();
    let read = client.get("WS-SUB-3304").await;
    assert!(
        matches!(&read, Err(ServiceError::Unreachable(e)) if e.to_string().contains("certificate")),
        "{read:?}"
    );
    let command = client
        .send_change(&change("WS-SUB-3304", "stop_renewal", 4, "k1"))
        .await;
    assert!(matches!(command, CommandOutcome::NotSent(_)), "{command:?}");
    assert_eq!(
        handshakes.load(Ordering::SeqCst),
        2,
        "both calls tried the handshake"
    );
    assert_eq!(
        requests.load(Ordering::SeqCst),
        0,
        "no request reached the server"
    );
}

/// A service over TLS whose certificate the platform trusts is called as over plain HTTP.
/// The platform's roots on Linux are the system's, and `SSL_CERT_FILE` names more (as for
/// OpenSSL's clients); the environment is the whole process's, so the call is made in a
/// run of this test binary of its own ([`the_record_is_read_over_tls`]).
#[test]
fn a_service_over_tls_is_called_when_the_platform_trusts_its_certificate() {
    let record = serde_json::from_str::<Vec<serde_json::Value>>(DEMO_DATA).unwrap()[0].to_string();
    let (url, pem, handshakes, requests) = tls_service(1, Some(record));
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("service.pem");
    std::fs::write(&roots, pem).unwrap();
    let run = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "subscriptions::client::command_tests::the_record_is_read_over_tls",
            "--ignored",
            "--nocapture",
        ])
        .env("SSL_CERT_FILE", &roots)
        .env("ACTIONGATE_TEST_TLS_SERVICE", &url)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && said.contains("1 passed"),
        "{said}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(handshakes.load(Ordering::SeqCst), 1);
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}

/// The call of [`a_service_over_tls_is_called_when_the_platform_trusts_its_certificate`],
/// run by it (ignored otherwise: it needs the service it starts).
#[tokio::test]
#[ignore = "run by a_service_over_tls_is_called_when_the_platform_trusts_its_certificate"]
async fn the_record_is_read_over_tls() {
    let url = std::env::var("ACTIONGATE_TEST_TLS_SERVICE").unwrap();
    let client = ServiceClient::new(&url, Duration::from_secs(5), None).unwrap();
    let read = client.get("WS-SUB-3304").await;
    assert!(
        matches!(&read, Ok(Some(record)) if record.revision > 0),
        "{read:?}"
    );
}

/// Answers outside section 6's list, mapped so that nothing is concluded that the answer
/// does not say: a 412 whose body is not a record is still stale (nothing was made; the
/// terms now unknown), and a 2xx other than 200 and 201 (the service took the command
/// without the change it made) is unknown, never failed.
#[tokio::test]
async fn a_412_without_a_record_is_stale_and_an_accepted_command_is_unknown() {
    for (status, body, expected) in [
        ("412 Precondition Failed", "the record changed", "stale"),
        ("412 Precondition Failed", "{}", "stale"),
        ("202 Accepted", "{}", "unknown"),
        ("204 No Content", "", "unknown"),
    ] {
        let (url, seen) = testing::service(Duration::ZERO, status, body, None).await;
        let client = ServiceClient::new(&url, Duration::from_secs(5), None).unwrap();
        let outcome = client
            .send_change(&change("WS-SUB-3304", "stop_renewal", 4, "k-odd"))
            .await;
        let got = match outcome {
            CommandOutcome::Stale(None) => "stale",
            CommandOutcome::Unknown(_) => "unknown",
            ref other => panic!("{status}: {other:?}"),
        };
        assert_eq!(got, expected, "{status} {body:?}");
        assert_eq!(seen.received.load(Ordering::SeqCst), 1, "sent once");
    }
}
