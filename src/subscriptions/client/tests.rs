//! The client's unit tests.

use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::per_thread::CLIENTS;
use super::testing::service;
use super::*;

/// The head of the next call `listener` takes, lower-cased; the call is answered 404.
async fn head_of_one_call(listener: &TcpListener) -> String {
    let (mut stream, _) = listener.accept().await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    stream
        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

/// A call made inside a traced span carries the trace to the service (`traceparent`),
/// so the service can continue it; with nothing traced, no header.
#[tokio::test]
async fn a_traced_call_carries_its_trace_to_the_service() {
    use tracing_subscriber::layer::SubscriberExt as _;
    crate::telemetry::install_crypto();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let client = ServiceClient::new(&url, Duration::from_secs(5), None).unwrap();
    let (layer, _traces) = actionserver::trace_layer("test", &[]).unwrap();
    crate::telemetry::spans_enabled_on_every_thread();
    let _traced = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    let span = tracing::info_span!(target: crate::telemetry::SPAN_TARGET, "a call");
    let traceparent = span.in_scope(actionserver::current_traceparent).unwrap();
    let trace_id = traceparent.split('-').nth(1).unwrap().to_owned();
    let (head, read) = tokio::join!(
        head_of_one_call(&listener),
        client.get("WS-SUB-3304").instrument(span)
    );
    assert!(matches!(read, Ok(None)), "{read:?}");
    let sent = head
        .lines()
        .find_map(|l| l.strip_prefix("traceparent: "))
        .unwrap_or_else(|| panic!("no traceparent in {head}"));
    assert_eq!(sent.split('-').nth(1), Some(trace_id.as_str()), "{sent}");
    assert_ne!(sent, traceparent, "the call's own span is the parent there");
    // Not traced (no exporter): no header.
    drop(_traced);
    let (head, _) = tokio::join!(head_of_one_call(&listener), client.get("WS-SUB-3304"));
    assert!(!head.contains("traceparent"), "{head}");
}

#[test]
fn each_thread_has_its_own_client_and_a_dropped_family_is_forgotten() {
    crate::telemetry::install_crypto();
    let built = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = built.clone();
    let family = PerThread::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        transport::build(Duration::from_secs(5), 1)
    })
    .unwrap();
    assert_eq!(
        built.load(Ordering::SeqCst),
        1,
        "the fallback, built at once"
    );
    family.get();
    family.clone().get();
    assert_eq!(
        built.load(Ordering::SeqCst),
        2,
        "one for this thread, shared by clones"
    );
    let other = family.clone();
    std::thread::spawn(move || {
        other.get();
        other.get();
    })
    .join()
    .unwrap();
    assert_eq!(
        built.load(Ordering::SeqCst),
        3,
        "another thread builds its own"
    );
    drop(family);
    let next = PerThread::new(|| transport::build(Duration::from_secs(5), 1)).unwrap();
    next.get();
    CLIENTS.with(|clients| {
        let clients = clients.borrow();
        assert_eq!(clients.len(), 1, "the dropped family's client is gone");
        assert!(std::ptr::eq(
            clients[0].0.as_ptr(),
            Arc::as_ptr(&next.shared)
        ));
    });
}

#[test]
fn ids_are_percent_encoded_in_paths() {
    assert_eq!(segment("WS-SUB-3304"), "WS-SUB-3304");
    assert_eq!(segment("BOX 7/../x?y#é"), "BOX%207%2F..%2Fx%3Fy%23%C3%A9");
}

/// Each call's path is the base URL's path (a prefix, with or without a trailing slash)
/// followed by the route, its id percent-encoded once.
#[tokio::test]
async fn a_call_goes_to_the_route_under_the_base_urls_path() {
    crate::telemetry::install_crypto();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    for (base, id, path) in [
        (
            format!("http://{at}"),
            "WS-SUB-3304",
            "/v1/subscriptions/ws-sub-3304",
        ),
        (
            format!("http://{at}/"),
            "WS-SUB-3304",
            "/v1/subscriptions/ws-sub-3304",
        ),
        (
            format!("http://{at}/billing"),
            "BOX 7/x",
            "/billing/v1/subscriptions/box%207%2fx",
        ),
        (
            format!("http://{at}/billing/"),
            "é?",
            "/billing/v1/subscriptions/%c3%a9%3f",
        ),
    ] {
        let client = ServiceClient::new(&base, Duration::from_secs(5), None).unwrap();
        let (head, _) = tokio::join!(head_of_one_call(&listener), client.get(id));
        let line = head.lines().next().unwrap();
        assert_eq!(line, format!("get {path} http/1.1"), "{base}");
    }
}

/// A base URL a path cannot follow (a query, a fragment) or that does not parse: every
/// read says why it cannot be made, and nothing reaches the service.
#[tokio::test]
async fn a_base_url_a_path_cannot_follow_sends_nothing() {
    crate::telemetry::install_crypto();
    let (url, seen) = service(Duration::ZERO, "200 OK", "[]", None).await;
    for base in [
        format!("{url}/?tenant=a"),
        format!("{url}/#top"),
        "not a url".to_owned(),
    ] {
        let client = ServiceClient::new(&base, Duration::from_secs(5), None).unwrap();
        let read = client.list("acct-7").await;
        assert!(
            matches!(&read, Err(ServiceError::Unreachable(e)) if e.to_string().contains("the service's URL")),
            "{base}: {read:?}"
        );
    }
    assert_eq!(seen.received.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn calls_beyond_the_bound_wait_for_a_turn_and_all_complete() {
    let (url, seen) = service(Duration::from_millis(100), "200 OK", "[]", None).await;
    let client = ServiceClient::with_max_in_flight(&url, Duration::from_secs(10), None, 3).unwrap();
    let calls = (0..12).map(|i| {
        let client = client.clone();
        async move { client.list(&format!("acct-{i}")).await }
    });
    let results = futures_util::future::join_all(calls).await;
    assert!(results
        .iter()
        .all(|r| matches!(r, Ok(list) if list.is_empty())));
    assert_eq!(seen.received.load(Ordering::SeqCst), 12);
    // Never more than the bound at the service, and the bound was used.
    assert_eq!(seen.most_in_flight.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_answer_past_the_limit_is_refused_unread() {
    // Declared too large: refused before reading.
    let (url, _) = service(Duration::ZERO, "200 OK", "[]", Some(MAX_ANSWER_BYTES + 1)).await;
    let client = ServiceClient::new(&url, Duration::from_secs(5), None).unwrap();
    let err = client.list("acct-1").await.unwrap_err();
    assert!(
        matches!(&err, ServiceError::Invalid(why) if why.contains("larger than")),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_undeclared_answer_past_the_limit_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 16 * 1024];
        let _ = socket.read(&mut buf).await;
        // Chunked, without an end: the client must stop reading at the limit.
        let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
        let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, " ".repeat(64 * 1024));
        loop {
            if socket.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
        }
    });
    let client = ServiceClient::new(&url, Duration::from_secs(20), None).unwrap();
    let err = client.get("WS-SUB-1").await.unwrap_err();
    assert!(
        matches!(&err, ServiceError::Invalid(why) if why.contains("larger than")),
        "{err:?}"
    );
}
