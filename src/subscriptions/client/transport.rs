//! How the service client's calls travel: hyper's pooled HTTP/1.1 client over TCP, or over
//! rustls with the platform's roots (as reqwest verifies them), each call bounded by one
//! deadline from the connection to the last byte of the answer.
//!
//! reqwest, which the other clients use, costs about twice the instructions a call:
//! it parses each call's URL twice more (its request's `Url` and its redirect layer's, the
//! host through IDNA each time), and wraps the call in redirect, retry and timeout layers
//! that this client, which follows no redirect and sends nothing twice, does not need. The
//! path's floor (`examples/change_floor.rs`), whose only change was its client, went from
//! 536 to 438 thousand instructions a new change, three calls (`bash
//! bench/instructions_new_changes.sh`); actiongate from 1,078 to 961 thousand.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;

use super::answer::{Answer, Lost, Unsent};

/// A client of the service: its connections are pooled, its calls HTTP/1.1.
pub(crate) type Http =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client for one thread ([`super::PerThread`]): connecting takes at most `timeout` (and
/// no more than 5 s), at most `max_idle` connections are kept, each for 30 s idle. TCP
/// without Nagle's delay: a call is one write, and waits for its answer.
pub(crate) fn build(timeout: Duration, max_idle: usize) -> Result<Http, rustls::Error> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(timeout.min(Duration::from_secs(5))));
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let verifier = rustls_platform_verifier::Verifier::new(provider.clone())?;
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(max_idle)
            .build(connector),
    )
}

/// Sends `request`, and hands back its answer to be read by the same `deadline`.
pub(crate) async fn send(
    http: Http,
    request: http::Request<Full<Bytes>>,
    deadline: Instant,
) -> Result<Timed, SendError> {
    match tokio::time::timeout_at(deadline, http.request(request)).await {
        Ok(Ok(response)) => Ok(Timed { response, deadline }),
        Ok(Err(e)) => Err(SendError::Failed(e)),
        Err(_) => Err(SendError::TimedOut),
    }
}

/// Why a call has no answer.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The request could not be made: its URL or a header is not valid.
    Invalid(String),
    /// The connection failed, or the exchange on it.
    Failed(hyper_util::client::legacy::Error),
    /// The deadline passed first.
    TimedOut,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(why) => write!(f, "the call could not be made: {why}"),
            // hyper's own words are terse ("client error (Connect)"): what caused it follows.
            Self::Failed(e) => {
                write!(f, "{e}")?;
                let mut cause = e.source();
                while let Some(e) = cause {
                    write!(f, ": {e}")?;
                    cause = e.source();
                }
                Ok(())
            }
            Self::TimedOut => f.write_str("no answer in time"),
        }
    }
}

impl StdError for SendError {}

impl Unsent for SendError {
    /// Only a failed connection proves the request never left; a call that timed out may
    /// have been written whole.
    fn before_sending(&self) -> bool {
        match self {
            Self::Invalid(_) => true,
            Self::Failed(e) => e.is_connect(),
            Self::TimedOut => false,
        }
    }

    fn describe(self) -> String {
        self.to_string()
    }
}

/// An answer, its body read by the call's deadline.
pub(crate) struct Timed {
    response: http::Response<Incoming>,
    deadline: Instant,
}

impl Answer for Timed {
    fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.response.headers().get(name)?.to_str().ok()
    }

    fn content_length(&self) -> Option<u64> {
        self.header("content-length")?.parse().ok()
    }

    async fn chunk(&mut self) -> Result<Option<Bytes>, Lost> {
        loop {
            let frame = tokio::time::timeout_at(self.deadline, self.response.body_mut().frame())
                .await
                .map_err(|_| Lost::from("no answer in time"))?;
            match frame {
                None => return Ok(None),
                Some(Err(e)) => return Err(e.into()),
                // Trailers are not read.
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}
