//! The connections the gRPC listener hands to tonic: at most so many open at once, so many
//! from one peer address, and each must send its first bytes (the HTTP/2 preface, or a TLS
//! hello) within a time limit. A silent connection would otherwise be kept open for as long
//! as the client likes, since the token is checked only on calls: enough of them exhaust
//! the process's descriptors for every listener.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How many connections, from whom, and how soon they must speak.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open at once on the listener; one more is closed at once.
    pub per_listener: usize,
    /// Open at once from one peer address.
    pub per_peer: usize,
    /// How long a new connection may stay silent.
    pub first_bytes: Duration,
}

/// A connection counted against the limits until it is dropped.
pub struct Guarded {
    stream: TcpStream,
    _open: OwnedSemaphorePermit,
    _peer: PeerSlot,
}

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

/// The accepted connections, as tonic reads an incoming stream.
pub struct Incoming {
    rx: mpsc::Receiver<io::Result<Guarded>>,
}

impl Stream for Incoming {
    type Item = io::Result<Guarded>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

/// Accepts on `listener` under `limits` until the returned stream is dropped.
pub fn incoming(listener: TcpListener, limits: ConnectionLimits) -> Incoming {
    let (tx, rx) = mpsc::channel(64);
    let open = Arc::new(Semaphore::new(limits.per_listener.max(1)));
    let peers: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, say: back off a little rather than spin.
                    tracing::warn!(error = %e, "gRPC: a connection could not be accepted");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = open.clone().try_acquire_owned() else {
                tracing::debug!("gRPC: too many connections open; one closed");
                continue;
            };
            // As tonic's own listener does: HTTP/2 writes frames apart (settings, headers,
            // data), and Nagle's wait for an ack would hold a small answer ~40 ms.
            let _ = stream.set_nodelay(true);
            let ip = peer.ip();
            {
                let mut counts = peers.lock().unwrap_or_else(|p| p.into_inner());
                let n = counts.entry(ip).or_insert(0);
                if *n >= limits.per_peer {
                    tracing::debug!(%ip, "gRPC: too many connections from one address; one closed");
                    continue;
                }
                *n += 1;
            }
            let slot = PeerSlot {
                peers: peers.clone(),
                ip,
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut first = [0u8; 1];
                let spoke = tokio::time::timeout(limits.first_bytes, stream.peek(&mut first)).await;
                if !matches!(spoke, Ok(Ok(n)) if n > 0) {
                    return; // silent, or gone: closed, its slots given back
                }
                let _ = tx
                    .send(Ok(Guarded {
                        stream,
                        _open: permit,
                        _peer: slot,
                    }))
                    .await;
            });
        }
    });
    Incoming { rx }
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
