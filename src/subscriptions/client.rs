//! The client of the subscription service: a configured value (base URL, timeout,
//! token, how many calls may be in flight) that maps every answer to what it means for the
//! customer. It fails closed: when it cannot tell, it says so.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{header, StatusCode};
use serde::Deserialize;
use tokio::sync::{Semaphore, SemaphorePermit};
use tracing::Instrument as _;

use super::model::{Change, Subscription};
use super::provider::{Call, CommandOutcome, ConfirmedCommand, KeyState, Provider, ServiceError};

/// Calls in flight at once by default. Each holds a connection and its buffers, so the
/// bound is also a bound on memory when bursts come in, and on the load put on the service.
/// A call's span in the action's trace: the operation, its method and route (ids left
/// out: they are the customer's), and the status the service answered.
macro_rules! service_span {
    ($name:literal, $method:literal, $route:literal) => {
        tracing::info_span!(
            target: crate::telemetry::SPAN_TARGET,
            $name,
            otel.kind = "client",
            http.request.method = $method,
            http.route = $route,
            http.response.status_code = tracing::field::Empty,
        )
    };
}

/// Records the service's answer on the call's span.
fn answered(response: &reqwest::Response) {
    tracing::Span::current().record("http.response.status_code", response.status().as_u16());
}

pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// The largest answer read from the service. Answers are a record, a change or one
/// account's list; anything larger is refused as unreadable rather than buffered.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The client of CONTRACT.md section 6 as a [`Provider`]: each call is the method of the same
/// name.
impl Provider for ServiceClient {
    fn list<'a>(&'a self, account: &'a str) -> Call<'a, Result<Vec<Subscription>, ServiceError>> {
        Box::pin(Self::list(self, account))
    }

    fn get<'a>(&'a self, id: &'a str) -> Call<'a, Result<Option<Subscription>, ServiceError>> {
        Box::pin(Self::get(self, id))
    }

    fn change_by_key<'a>(
        &'a self,
        request_key: &'a str,
    ) -> Call<'a, Result<KeyState, ServiceError>> {
        Box::pin(Self::change_by_key(self, request_key))
    }

    fn send_change<'a>(&'a self, change: &'a dyn ConfirmedCommand) -> Call<'a, CommandOutcome> {
        Box::pin(Self::send_change(self, change))
    }
}

/// The service's error body.
#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// Where the service is and how to talk to it. Clones share the turns, and on each thread
/// the connections ([`PerThread`]).
#[derive(Debug, Clone)]
pub struct ServiceClient {
    base: String,
    token: Option<String>,
    http: PerThread,
    /// How long a call waits for a turn; the call itself then has as long again.
    timeout: Duration,
    /// One permit per call in flight.
    turns: Arc<Semaphore>,
    max_in_flight: usize,
}

impl ServiceClient {
    /// A client allowing [`DEFAULT_MAX_IN_FLIGHT`] calls at once.
    pub fn new(
        base_url: &str,
        timeout: Duration,
        token: Option<String>,
    ) -> Result<Self, reqwest::Error> {
        Self::with_max_in_flight(base_url, timeout, token, DEFAULT_MAX_IN_FLIGHT)
    }

    /// A client allowing `max_in_flight` calls at once (at least 1); further calls wait
    /// for a turn, within their timeout.
    pub fn with_max_in_flight(
        base_url: &str,
        timeout: Duration,
        token: Option<String>,
        max_in_flight: usize,
    ) -> Result<Self, reqwest::Error> {
        crate::telemetry::install_crypto();
        let max_in_flight = max_in_flight.max(1);
        let http = PerThread::new(move || {
            reqwest::Client::builder()
                .timeout(timeout)
                .connect_timeout(timeout.min(Duration::from_secs(5)))
                .pool_idle_timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(max_in_flight)
                .build()
        })?;
        Ok(Self {
            base: base_url.trim_end_matches('/').to_owned(),
            token,
            http,
            timeout,
            turns: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Waits for a turn, at most the timeout; `Busy` when none comes (nothing was sent).
    /// The call then gets its whole timeout: a call left with a sliver of time would be
    /// sent and then abandoned, and a command abandoned that way has an unknown outcome.
    /// So a call takes at most twice the timeout, which the reconciler waits out.
    async fn turn(&self) -> Result<SemaphorePermit<'_>, ServiceError> {
        tokio::time::timeout(self.timeout, self.turns.acquire())
            .await
            .map_err(|_| ServiceError::Busy(self.max_in_flight))?
            .map_err(|_| ServiceError::Busy(self.max_in_flight))
    }

    /// A request, to be sent while holding a turn.
    fn request(
        &self,
        _turn: &SemaphorePermit<'_>,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let mut builder = self
            .http
            .get()
            .request(method, format!("{}{path}", self.base));
        // The service continues this call's trace, when there is one.
        if let Some(traceparent) = actionserver::current_traceparent() {
            builder = builder.header("traceparent", traceparent);
        }
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// The account's subscriptions (the service filters them).
    pub async fn list(&self, account: &str) -> Result<Vec<Subscription>, ServiceError> {
        let span = service_span!(
            "subscription_service.list",
            "GET",
            "/v1/accounts/{account}/subscriptions"
        );
        async move {
            let path = format!("/v1/accounts/{}/subscriptions", segment(account));
            let turn = self.turn().await?;
            let response = self
                .request(&turn, reqwest::Method::GET, &path)
                .send()
                .await
                .map_err(|e| ServiceError::Unreachable(e.without_url()))?;
            answered(&response);
            read_json(response).await
        }
        .instrument(span)
        .await
    }

    /// One subscription as it is now; `None` when the service does not know it.
    pub async fn get(&self, id: &str) -> Result<Option<Subscription>, ServiceError> {
        let span = service_span!("subscription_service.get", "GET", "/v1/subscriptions/{id}");
        async move {
            let path = format!("/v1/subscriptions/{}", segment(id));
            let turn = self.turn().await?;
            let response = self
                .request(&turn, reqwest::Method::GET, &path)
                .send()
                .await
                .map_err(|e| ServiceError::Unreachable(e.without_url()))?;
            answered(&response);
            if response.status() == StatusCode::NOT_FOUND {
                return Ok(None);
            }
            read_json(response).await.map(Some)
        }
        .instrument(span)
        .await
    }

    /// What happened to a request key: made, in flight, or void (fenced from now on).
    pub async fn change_by_key(&self, request_key: &str) -> Result<KeyState, ServiceError> {
        let span = service_span!(
            "subscription_service.change_by_key",
            "GET",
            "/v1/changes/{key}"
        );
        async move {
            #[derive(Deserialize)]
            struct Status {
                #[serde(default)]
                status: Option<String>,
            }
            let path = format!("/v1/changes/{}", segment(request_key));
            let turn = self.turn().await?;
            let response = self
                .request(&turn, reqwest::Method::GET, &path)
                .send()
                .await
                .map_err(|e| ServiceError::Unreachable(e.without_url()))?;
            answered(&response);
            match response.status() {
                StatusCode::OK => read_json(response).await.map(KeyState::Made),
                StatusCode::ACCEPTED => Ok(KeyState::InFlight),
                StatusCode::NOT_FOUND => {
                    let body = read_capped(response).await.unwrap_or_default();
                    let fenced = serde_json::from_slice::<Status>(&body)
                        .is_ok_and(|s| s.status.as_deref() == Some("void"));
                    Ok(if fenced {
                        KeyState::Void
                    } else {
                        KeyState::NotFound
                    })
                }
                _ => read_json::<Change>(response).await.map(KeyState::Made),
            }
        }
        .instrument(span)
        .await
    }

    /// Sends the command for a change the guard confirmed: there is no other way to send
    /// one, since only the guard makes a [`ConfirmedCommand`].
    pub async fn send_change(&self, change: &(impl ConfirmedCommand + ?Sized)) -> CommandOutcome {
        let span = service_span!(
            "subscription_service.send_change",
            "POST",
            "/v1/subscriptions/{id}/changes"
        );
        async move {
            let (subscription, change_type, revision, request_key) = (
                change.subscription(),
                change.change_type(),
                change.revision(),
                change.request_key(),
            );
            let path = format!("/v1/subscriptions/{}/changes", segment(subscription));
            let turn = match self.turn().await {
                Ok(turn) => turn,
                Err(e) => return CommandOutcome::NotSent(e.to_string()),
            };
            let sent = self
                .request(&turn, reqwest::Method::POST, &path)
                .header(header::IF_MATCH, format!("\"r{revision}\""))
                .header("Idempotency-Key", request_key)
                .json(&serde_json::json!({"change_type": change_type}))
                .send()
                .await;
            let response = match sent {
                Ok(response) => {
                    answered(&response);
                    response
                }
                Err(e) if e.is_connect() => {
                    return CommandOutcome::NotSent(e.without_url().to_string())
                }
                Err(e) => return CommandOutcome::Unknown(e.without_url().to_string()),
            };
            let status = response.status();
            let replayed = response
                .headers()
                .get("Idempotent-Replayed")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let body = match read_capped(response).await {
                Ok(body) => body,
                Err(e) => return CommandOutcome::Unknown(format!("the answer was lost: {e}")),
            };
            match status.as_u16() {
                200 | 201 => match serde_json::from_slice::<Change>(&body) {
                    Ok(change) => CommandOutcome::Applied {
                        change,
                        replayed: replayed || status == StatusCode::OK,
                    },
                    Err(e) => CommandOutcome::Unknown(format!(
                        "the service's answer could not be read: {e}"
                    )),
                },
                409 => CommandOutcome::InFlight,
                410 => CommandOutcome::Voided,
                412 => match serde_json::from_slice::<Subscription>(&body) {
                    Ok(record) => CommandOutcome::Stale(Box::new(record)),
                    Err(_) => CommandOutcome::Rejected {
                        status: 412,
                        message: "the record changed".into(),
                    },
                },
                s if s >= 500 => CommandOutcome::Unknown(format!("the service answered {s}")),
                s => CommandOutcome::Rejected {
                    status: s,
                    message: error_message(&body),
                },
            }
        }
        .instrument(span)
        .await
    }
}

/// Every byte but RFC 3986's unreserved characters is percent-encoded.
pub const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A path segment, percent-encoded: ids come from slots, which the customer can shape.
fn segment(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, NOT_UNRESERVED).to_string()
}

fn error_message(body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody {
            message: Some(message),
            ..
        }) => message,
        Ok(ErrorBody {
            error: Some(code), ..
        }) => code,
        _ => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

/// Why an answer's body was not read.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("{0}")]
    Lost(#[source] reqwest::Error),
    #[error("the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
}

impl From<ReadError> for ServiceError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Lost(e) => ServiceError::Unreachable(e.without_url()),
            ReadError::TooLarge => ServiceError::Invalid(e.to_string()),
        }
    }
}

/// The answer's body, refused past [`MAX_ANSWER_BYTES`] (before reading it, when the
/// service declares its length).
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, ReadError> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(ReadError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Lost)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

async fn read_json<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
) -> Result<T, ServiceError> {
    let status = response.status();
    let body = read_capped(response).await?;
    if !status.is_success() {
        return Err(ServiceError::Status {
            status: status.as_u16(),
            message: error_message(&body),
        });
    }
    serde_json::from_slice(&body).map_err(|e| ServiceError::Invalid(e.to_string()))
}

/// A real HTTP service for the client's tests, counting what reaches it.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// What the test service saw.
    #[derive(Default)]
    pub struct Seen {
        pub received: AtomicUsize,
        pub in_flight: AtomicUsize,
        pub most_in_flight: AtomicUsize,
    }

    /// A real HTTP/1.1 service on loopback that holds every request for `hold`, then
    /// answers `status` with `body` (declaring `declared` bytes, or the body's length).
    pub async fn service(
        hold: Duration,
        status: &'static str,
        body: &'static str,
        declared: Option<usize>,
    ) -> (String, Arc<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let counts = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let seen = counts.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    let mut len = 0;
                    loop {
                        // One request: headers (and, for these tests, a small body in the
                        // same read). Keep-alive: loop for the next one.
                        let Ok(n) = socket.read(&mut buf[len..]).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        len += n;
                        if !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                            continue;
                        }
                        len = 0;
                        seen.received.fetch_add(1, Ordering::SeqCst);
                        let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(hold).await;
                        seen.in_flight.fetch_sub(1, Ordering::SeqCst);
                        let head = format!(
                            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            declared.unwrap_or(body.len())
                        );
                        if socket.write_all(head.as_bytes()).await.is_err()
                            || socket.write_all(body.as_bytes()).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        (url, seen)
    }
}

/// An HTTP client for each thread that calls. The server's workers each run their own
/// runtime, and a connection's task runs on the runtime that opened it: with one client for
/// all, a call from one worker over a connection another opened is handed to that other
/// thread and back (two wake-ups and a switch of threads per call). Each thread's client
/// opens its own connections, so a call stays on the thread that makes it. The clients are
/// built alike; a thread's is dropped once every clone of its [`PerThread`] is.
#[derive(Clone)]
pub(crate) struct PerThread {
    build: Arc<dyn Fn() -> Result<reqwest::Client, reqwest::Error> + Send + Sync>,
    /// The client for a thread whose own could not be built (it was, once, with the same
    /// settings), and the mark of this family of clients.
    shared: Arc<reqwest::Client>,
}

thread_local! {
    /// This thread's clients, each beside its family's mark (gone once the family is).
    static CLIENTS: std::cell::RefCell<Vec<(std::sync::Weak<reqwest::Client>, reqwest::Client)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl PerThread {
    fn new(
        build: impl Fn() -> Result<reqwest::Client, reqwest::Error> + Send + Sync + 'static,
    ) -> Result<Self, reqwest::Error> {
        let shared = Arc::new(build()?);
        Ok(Self {
            build: Arc::new(build),
            shared,
        })
    }

    /// The calling thread's client (a clone shares its connections).
    fn get(&self) -> reqwest::Client {
        CLIENTS.with(|clients| {
            let mut clients = clients.borrow_mut();
            if let Some((_, client)) = clients
                .iter()
                .find(|(mark, _)| std::ptr::eq(mark.as_ptr(), Arc::as_ptr(&self.shared)))
            {
                return client.clone();
            }
            clients.retain(|(mark, _)| mark.strong_count() > 0);
            let client = (self.build)().unwrap_or_else(|_| (*self.shared).clone());
            clients.push((Arc::downgrade(&self.shared), client.clone()));
            client
        })
    }
}

impl std::fmt::Debug for PerThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerThread").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::testing::service;
    use super::*;

    /// A call made inside a traced span carries the trace to the service (`traceparent`),
    /// so the service can continue it; with nothing traced, no header.
    #[tokio::test]
    async fn a_traced_call_carries_its_trace_to_the_service() {
        use tracing_subscriber::layer::SubscriberExt as _;
        crate::telemetry::install_crypto();
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
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let client = ServiceClient::new(&url, Duration::from_secs(5), None).unwrap();
        let (layer, _traces) = actionserver::trace_layer("test", &[]).unwrap();
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
            reqwest::Client::builder().build()
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
        let next = PerThread::new(|| reqwest::Client::builder().build()).unwrap();
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

    #[tokio::test]
    async fn calls_beyond_the_bound_wait_for_a_turn_and_all_complete() {
        let (url, seen) = service(Duration::from_millis(100), "200 OK", "[]", None).await;
        let client =
            ServiceClient::with_max_in_flight(&url, Duration::from_secs(10), None, 3).unwrap();
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
}

#[cfg(test)]
mod command_tests {
    //! The client's mapping of every answer of a real (embedded) service to a command
    //! outcome.
    use std::sync::atomic::Ordering;

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
            matches!(&stale, CommandOutcome::Stale(record) if record.revision == 2),
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
        let refused =
            ServiceClient::new("http://127.0.0.1:9", Duration::from_secs(1), None).unwrap();
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
        let hurried =
            ServiceClient::new(slow.base_url(), Duration::from_millis(300), None).unwrap();
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
}
