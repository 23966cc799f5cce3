//! Bounds any actix-web listener can share with the webhook's: connections open at once from
//! one peer address ([`PeerLimit`]), and request bodies that must keep a minimum rate
//! ([`Pace`], [`paced_bodies`]), so a client that connects and says nothing, or trickles a
//! body, holds no descriptor and no worker for long.

use std::any::Any;
use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Shutdown};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Extensions, Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::http::ConnectionType;
use actix_web::middleware::Next;
use actix_web::rt::net::TcpStream;
use actix_web::{web, HttpMessage, HttpResponse};
use bytes::Bytes;
use futures_util::Stream;
use tokio::time::{Instant, Sleep};

/// At most `max` connections open at once from one peer address on the listeners it is
/// installed on (`HttpServer::on_connect(limit.on_connect())`); one more is shut down as it
/// opens. Each connection it admits answers without Nagle's delay (`TCP_NODELAY`). Clones
/// share the count.
#[derive(Debug, Clone)]
pub struct PeerLimit {
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    max: usize,
    listener: &'static str,
}

/// A connection's place in its peer's count, given back when the connection ends (actix-web
/// drops its extensions then).
struct PeerSlot {
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = peers.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                peers.remove(&self.ip);
            }
        }
    }
}

impl PeerLimit {
    /// `listener` names it in the log.
    pub fn new(listener: &'static str, max: usize) -> Self {
        Self {
            peers: Arc::default(),
            max: max.max(1),
            listener,
        }
    }

    /// Connections open from `ip` now.
    pub fn open_from(&self, ip: IpAddr) -> usize {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.get(&ip).copied().unwrap_or(0)
    }

    /// The callback for `HttpServer::on_connect`.
    pub fn on_connect(&self) -> impl Fn(&dyn Any, &mut Extensions) + Send + Sync + 'static {
        let limit = self.clone();
        move |io, extensions| limit.admit(io, extensions)
    }

    fn admit(&self, io: &dyn Any, extensions: &mut Extensions) {
        let Some(stream) = tcp_of(io) else {
            return; // not TCP (a Unix socket, say): nothing to count by
        };
        // An answer goes out as soon as it is written. Without this, on TLS the answer
        // waits behind the session tickets sent after the handshake until the client's
        // delayed ACK (40 ms on Linux): a client that connects for each call, as Rasa
        // does, waits that long on every call.
        let _ = stream.set_nodelay(true);
        let Ok(peer) = stream.peer_addr() else {
            return;
        };
        let ip = peer.ip();
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let open = peers.entry(ip).or_insert(0);
        if *open >= self.max {
            drop(peers);
            tracing::debug!(%ip, listener = self.listener, "too many connections from one address; one closed");
            // The dispatcher reads the end of the stream and drops the connection; a
            // request that arrived with the connection is still parsed, and
            // [`refuse_over_cap`] refuses it unrun.
            extensions.insert(OverCap);
            let _ = socket2::SockRef::from(stream).shutdown(Shutdown::Both);
            return;
        }
        *open += 1;
        drop(peers);
        extensions.insert(PeerSlot {
            peers: self.peers.clone(),
            ip,
        });
    }
}

/// Marks a connection [`PeerLimit`] closed as it opened.
struct OverCap;

/// Middleware (`from_fn(refuse_over_cap)`, outermost) for a listener with a [`PeerLimit`]:
/// a request on a connection over the cap is answered 503 and closed, and never reaches
/// the service, even when it arrived before the connection was shut down.
pub async fn refuse_over_cap(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if req.conn_data::<OverCap>().is_some() {
        let mut res = HttpResponse::ServiceUnavailable().finish();
        res.head_mut().set_connection_type(ConnectionType::Close);
        let (req, _) = req.into_parts();
        return Ok(ServiceResponse::new(req, res));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// The TCP stream under what actix-web hands `on_connect`: plain, or rustls over it.
fn tcp_of(io: &dyn Any) -> Option<&TcpStream> {
    if let Some(stream) = io.downcast_ref::<TcpStream>() {
        return Some(stream);
    }
    io.downcast_ref::<actix_tls::accept::rustls_0_23::TlsStream<TcpStream>>()
        .map(|tls| tls.get_ref().0)
}

/// How fast a body must arrive on a listener that reads it with actix-web's extractors, as
/// [`BodyLimits`](super::BodyLimits) says for the webhook: a body that has not arrived by
/// `grace + received / min_rate` is cut off, and `answer` is sent (with `Connection: close`).
/// Install it as app data (`web::Data<Pace>`) beside the [`paced_bodies`] middleware.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// How long a body may take before its rate is checked.
    pub grace: Duration,
    /// Bytes a second, on average, after the grace.
    pub min_rate: usize,
    /// The listener's own 408.
    pub answer: fn() -> HttpResponse,
}

impl Pace {
    /// nginx's `client_body_timeout` for a small body: 10 s, then 64 KiB/s, as the webhook.
    pub fn new(answer: fn() -> HttpResponse) -> Self {
        Self {
            grace: Duration::from_secs(10),
            min_rate: 64 * 1024,
            answer,
        }
    }

    fn deadline(&self, start: Instant, received: usize) -> Instant {
        let rate = self.min_rate.max(1) as f64;
        start + self.grace + Duration::from_secs_f64((received + 1) as f64 / rate)
    }
}

/// Middleware (`from_fn(paced_bodies)`): the request's body under the app's [`Pace`]; a
/// request without one in app data passes untouched.
pub async fn paced_bodies(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let Some(pace) = req.app_data::<web::Data<Pace>>().map(|p| **p.clone()) else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    let fired = Rc::new(Cell::new(false));
    let start = Instant::now();
    let paced = Paced {
        inner: req.take_payload(),
        pace,
        start,
        received: 0,
        sleep: Box::pin(tokio::time::sleep_until(pace.deadline(start, 0))),
        fired: fired.clone(),
    };
    let paced: Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>> = Box::pin(paced);
    req.set_payload(Payload::from(paced));
    let answered = next.call(req).await;
    if !fired.get() {
        return Ok(answered?.map_into_boxed_body());
    }
    let answered = match answered {
        Ok(res) => res,
        Err(e) => {
            tracing::debug!(error = %e, "a request body arrived too slowly");
            return Err(timed_out(pace));
        }
    };
    let (req, _) = answered.into_parts();
    let mut res = (pace.answer)();
    res.head_mut().set_connection_type(ConnectionType::Close);
    Ok(ServiceResponse::new(req, res))
}

fn timed_out(pace: Pace) -> actix_web::Error {
    let mut res = (pace.answer)();
    res.head_mut().set_connection_type(ConnectionType::Close);
    actix_web::error::InternalError::from_response("the request body arrived too slowly", res)
        .into()
}

/// A body stream that ends in an error once it falls behind its pace.
struct Paced {
    inner: Payload,
    pace: Pace,
    start: Instant,
    received: usize,
    sleep: Pin<Box<Sleep>>,
    fired: Rc<Cell<bool>>,
}

impl Stream for Paced {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                this.received += chunk.len();
                let deadline = this.pace.deadline(this.start, this.received);
                this.sleep.as_mut().reset(deadline);
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.fired.set(true);
                    Poll::Ready(Some(Err(PayloadError::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the request body arrived too slowly",
                    )))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}
